//! The registry: which events and slots the shared instance counts, and which sessions
//! hold each. It lives in the instance's pinned `registry` map, a one-entry array, and
//! is changed only under the registry lock (lock.rs).

use super::{Target, ATTR_BYTES, EVENTS, SESSIONS, SLOTS};
use crate::bpf::ReadMasks;

pub(super) const REGISTRY_VERSION: u32 = 2;
const HOLDER_WORDS: usize = SESSIONS / 64;

pub(super) const KIND_FREE: u32 = 0;
pub(super) const KIND_CPUS: u32 = 1;
pub(super) const KIND_CGROUP: u32 = 2;
pub(super) const KIND_PROCESS: u32 = 3;
pub(super) const KIND_THREAD: u32 = 4;

impl Target {
    pub(super) fn kind_key(&self) -> (u32, u64, bool) {
        match *self {
            Target::Cpus => (KIND_CPUS, 0, false),
            Target::Cgroup(id) => (KIND_CGROUP, id, false),
            Target::Process { pid, inherit } => (KIND_PROCESS, pid.into(), inherit),
            Target::Thread { tid, inherit } => (KIND_THREAD, tid.into(), inherit),
        }
    }
}

/// Which sessions hold an event or a slot: one bit per session.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct Holders([u64; HOLDER_WORDS]);

impl Holders {
    pub(super) fn add(&mut self, s: usize) {
        self.0[s / 64] |= 1 << (s % 64);
    }
    pub(super) fn remove(&mut self, s: usize) {
        self.0[s / 64] &= !(1 << (s % 64));
    }
    pub(super) fn has(&self, s: usize) -> bool {
        self.0[s / 64] & 1 << (s % 64) != 0
    }
    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    /// Whether a session other than `s` holds it.
    pub(super) fn others_than(&self, s: usize) -> bool {
        let mut h = *self;
        h.remove(s);
        !h.is_empty()
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct EventEntry {
    pub(super) attr: [u8; ATTR_BYTES],
    pub(super) used: u32,
    /// ReadMasks bits at bit 0: always_running, plain_count, cpu_clock, task_clock, rq_switches.
    pub(super) read: u32,
    pub(super) holders: Holders,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct SlotEntry {
    pub(super) kind: u32,
    pub(super) inherit: u32,
    pub(super) key: u64,
    pub(super) holders: Holders,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct SessionEntry {
    pub(super) pid: u32,
    pub(super) used: u32,
    /// The process's start time (/proc/PID/stat), so that a reused pid is not taken for it.
    pub(super) start: u64,
}

/// The registry: what is in use, and by whom. Lives in the pinned `registry` map.
#[repr(C)]
pub(super) struct Registry {
    pub(super) version: u32,
    /// The instance was made on a BPF file system bperf mounted (for bpftool users: the
    /// last one out asks mountinfo again, see lock::mounted_by_bperf).
    pub(super) mounted_bpffs: u32,
    /// The instance charges the cgroups of a v1 hierarchy (perf_event's), not cgroup2's.
    pub(super) cgroup_v1: u32,
    pub(super) _pad: u32,
    pub(super) events: [EventEntry; EVENTS],
    pub(super) slots: [SlotEntry; SLOTS],
    pub(super) sessions: [SessionEntry; SESSIONS],
}

// SAFETY: plain old data, any bit pattern valid.
unsafe impl plain::Plain for Registry {}

impl Registry {
    pub(super) fn new() -> Box<Registry> {
        // SAFETY: all-zero is a valid, empty registry.
        let mut r: Box<Registry> = unsafe { Box::new(std::mem::zeroed()) };
        r.version = REGISTRY_VERSION;
        r.slots[0].kind = KIND_CPUS;
        r
    }

    pub(super) fn live_sessions(&self) -> usize {
        self.sessions.iter().filter(|s| s.used != 0).count()
    }

    pub(super) fn nr_procs(&self) -> u32 {
        let procs = self.slots.iter();
        procs
            .filter(|s| s.kind == KIND_PROCESS || s.kind == KIND_THREAD)
            .count() as u32
    }
}

pub(super) fn read_bits(m: &ReadMasks) -> u32 {
    [
        m.always_running,
        m.plain_count,
        m.cpu_clock,
        m.task_clock,
        m.rq_switches,
    ]
    .iter()
    .enumerate()
    .fold(0, |bits, (k, &mask)| bits | ((mask & 1) as u32) << k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_holders_and_sizes() {
        let mut h = Holders::default();
        assert!(h.is_empty());
        h.add(1000);
        h.add(3);
        assert!(h.has(1000) && h.has(3) && !h.has(4));
        h.remove(1000);
        h.remove(3);
        assert!(h.is_empty());
        // One map value: well under the kernel's limit for an array value.
        assert!(size_of::<Registry>() < 128 * 1024);
    }

    #[test]
    fn others_than_sees_any_other_holder() {
        let mut h = Holders::default();
        h.add(5);
        assert!(!h.others_than(5) && h.others_than(6));
        h.add(700);
        assert!(h.others_than(5));
    }

    #[test]
    fn read_bits_take_bit_zero_of_each_mask() {
        let m = ReadMasks {
            always_running: 1,
            plain_count: 0,
            cpu_clock: 1,
            task_clock: 0,
            rq_switches: 1,
        };
        assert_eq!(read_bits(&m), 0b10101);
    }
}
