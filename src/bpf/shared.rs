//! Shared counters (--bpf-counters, the `b` modifier): one instance of bperf.bpf.c, one
//! counting perf event per (event, CPU), for every bperf session on the machine.
//!
//! The instance keeps accumulators, not sessions: each switch charges what was counted
//! to slot 0 (the CPU's total), to the running task's monitored cgroups and to its
//! tracked process and thread. A session registers the events and slots it needs, takes
//! a reading as its baseline and subtracts it from every later reading. The per-switch
//! cost therefore grows with the slots a task charges, not with the number of sessions.
//!
//! The instance is pinned in a directory on a BPF file system (`DEFAULT_DIR`): its links,
//! maps and flush program, and `registry`, a one-entry array that says which events and
//! slots are in use and by which sessions. Sessions change the registry under an flock of
//! the directory's parent. A session whose process is gone is released by the next
//! session that registers or leaves, and by the keeper (`keep`), a small process the
//! first session starts, which also removes the instance when its last session was
//! killed. Each session checks every second that a keeper runs (the keeper holds a
//! flock of the instance's directory) and starts one if not. The last session out
//! removes everything: pins, programs, maps, perf events.

use std::fs;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, ProgramHandle};
use memmap2::{MmapMut, MmapOptions};

use super::skel::types::{bperf_live, bperf_proc};
use super::skel::OpenBperfMaps;
use super::{check_kernel, open_and_load, Config, Counts, ReadMasks, PROC_SLOTS};
use crate::reading::Reading;
use crate::sys::process::start_time;

/// Events counted at once through the shared instance: the stride of its arrays.
pub const EVENTS: usize = 32;
/// Slots: 0 for everything, the rest for the cgroups, processes and threads sessions count.
pub const SLOTS: usize = 256;
/// Sessions at once.
pub const SESSIONS: usize = 1024;
const HOLDER_WORDS: usize = SESSIONS / 64;
/// Process and thread ids tracked at once, inherited children included.
const PROC_KEYS: u32 = 16384;
/// Words of the tracked-id bitmap: one bit for every possible pid (PID_MAX_LIMIT, 2^22).
const TRACKED_WORDS: u32 = 1 << 16;
/// Bytes of a perf_event_attr kept to tell events apart (PERF_ATTR_SIZE_VER8).
pub const ATTR_BYTES: usize = 136;

/// Where the instance is pinned unless told otherwise.
pub const DEFAULT_DIR: &str = "/sys/fs/bpf/bperf";
/// Where perf and bpftool expect a BPF file system; mounted when none is.
const BPFFS: &str = "/sys/fs/bpf";
/// perf's own registry of BPF counters, which bperf must never touch.
pub const PERF_ATTR_MAP: &str = "/sys/fs/bpf/perf_attr_map";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;
const REGISTRY_VERSION: u32 = 2;

/// Everything pinned, in the order it is removed: the registry first, since a directory
/// without one is no instance whatever is left, then the links, which stop the programs.
const PINS: [&str; 13] = [
    "registry",
    "on_switch",
    "on_attach",
    "on_fork",
    "on_free",
    "flush",
    "events",
    "cgrp_slot",
    "proc_tgid",
    "proc_tid",
    "tracked",
    "counts",
    "live",
];
const LINKS: [&str; 4] = ["on_switch", "on_attach", "on_fork", "on_free"];

/// One event as the shared instance counts it: the attr it is opened with, and how the
/// BPF side reads it (the event's bits of ReadMasks, at bit 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventKey {
    pub attr: Vec<u8>,
    pub read: ReadMasks,
}

/// What a session counts, each in a slot of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Everything each CPU counts (slot 0).
    Cpus,
    Cgroup(u64),
    /// A process, by pid; with inherit, the processes it forks from now on too.
    Process {
        pid: u32,
        inherit: bool,
    },
    /// A thread, by tid; with inherit, the tasks it forks from now on too.
    Thread {
        tid: u32,
        inherit: bool,
    },
}

const KIND_FREE: u32 = 0;
const KIND_CPUS: u32 = 1;
const KIND_CGROUP: u32 = 2;
const KIND_PROCESS: u32 = 3;
const KIND_THREAD: u32 = 4;

impl Target {
    fn kind_key(&self) -> (u32, u64, bool) {
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
struct Holders([u64; HOLDER_WORDS]);

impl Holders {
    fn add(&mut self, s: usize) {
        self.0[s / 64] |= 1 << (s % 64);
    }
    fn remove(&mut self, s: usize) {
        self.0[s / 64] &= !(1 << (s % 64));
    }
    fn has(&self, s: usize) -> bool {
        self.0[s / 64] & 1 << (s % 64) != 0
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    /// Whether a session other than `s` holds it.
    fn others_than(&self, s: usize) -> bool {
        let mut h = *self;
        h.remove(s);
        !h.is_empty()
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct EventEntry {
    attr: [u8; ATTR_BYTES],
    used: u32,
    /// ReadMasks bits at bit 0: always_running, plain_count, cpu_clock, task_clock, rq_switches.
    read: u32,
    holders: Holders,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SlotEntry {
    kind: u32,
    inherit: u32,
    key: u64,
    holders: Holders,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SessionEntry {
    pid: u32,
    used: u32,
    /// The process's start time (/proc/PID/stat), so that a reused pid is not taken for it.
    start: u64,
}

/// The registry: what is in use, and by whom. Lives in the pinned `registry` map.
#[repr(C)]
struct Registry {
    version: u32,
    /// bperf mounted the BPF file system, and unmounts it with the instance if empty.
    mounted_bpffs: u32,
    /// The instance charges the cgroups of a v1 hierarchy (perf_event's), not cgroup2's.
    cgroup_v1: u32,
    _pad: u32,
    events: [EventEntry; EVENTS],
    slots: [SlotEntry; SLOTS],
    sessions: [SessionEntry; SESSIONS],
}

// SAFETY: plain old data, any bit pattern valid.
unsafe impl plain::Plain for Registry {}

impl Registry {
    fn new() -> Box<Registry> {
        // SAFETY: all-zero is a valid, empty registry.
        let mut r: Box<Registry> = unsafe { Box::new(std::mem::zeroed()) };
        r.version = REGISTRY_VERSION;
        r.slots[0].kind = KIND_CPUS;
        r
    }

    fn live_sessions(&self) -> usize {
        self.sessions.iter().filter(|s| s.used != 0).count()
    }

    fn nr_procs(&self) -> u32 {
        let procs = self.slots.iter();
        procs
            .filter(|s| s.kind == KIND_PROCESS || s.kind == KIND_THREAD)
            .count() as u32
    }
}

fn read_bits(m: &ReadMasks) -> u32 {
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

/// The pinned instance, opened by one session.
struct Instance {
    dir: PathBuf,
    nr_possible: usize,
    events: MapHandle,
    cgrp_slot: MapHandle,
    proc_tgid: MapHandle,
    proc_tid: MapHandle,
    registry: MapHandle,
    tracked: MmapMut,
    live: MmapMut,
    counts: Counts,
    flush: ProgramHandle,
}

fn map_at(dir: &Path, name: &str) -> Result<MapHandle> {
    MapHandle::from_pinned_path(dir.join(name))
        .with_context(|| format!("opening {}", dir.join(name).display()))
}

fn mmap_of(map: &MapHandle, bytes: usize) -> Result<MmapMut> {
    // SAFETY: a BPF array created with BPF_F_MMAPABLE; the BPF side and other sessions
    // write it too, so it is only read and written with volatile or atomic accesses.
    unsafe { MmapOptions::new().len(bytes).map_mut(&map.as_fd()) }
        .with_context(|| format!("mapping BPF map {:?}", map.name()))
}

/// What to do about a directory that holds no instance this bperf can use.
fn remedy(dir: &Path) -> String {
    format!(
        "if no bperf session counts through it, remove it (rm -r {}), or name another directory with --bpf-attr-map",
        dir.display()
    )
}

impl Instance {
    /// Opens the instance pinned in `dir`, or says what is wrong with the directory and
    /// what to do.
    fn open(dir: &Path) -> Result<Instance> {
        Instance::open_pins(dir).map_err(|e| {
            anyhow::anyhow!(
                "{} holds no shared counters this bperf can use ({e:#}): {}",
                dir.display(),
                remedy(dir)
            )
        })
    }

    fn open_pins(dir: &Path) -> Result<Instance> {
        let registry = map_at(dir, "registry")?;
        let fits = registry.map_type() == MapType::Array
            && registry.key_size() == 4
            && registry.value_size() as usize == size_of::<Registry>();
        if !fits {
            bail!(
                "{} is not a registry of this bperf's",
                dir.join("registry").display()
            );
        }
        let nr_possible = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        let counts_map = map_at(dir, "counts")?;
        let counts = Counts::new(counts_map.as_fd(), nr_possible * SLOTS * EVENTS)?;
        let live = mmap_of(&map_at(dir, "live")?, size_of::<bperf_live>())?;
        let tracked = mmap_of(&map_at(dir, "tracked")?, TRACKED_WORDS as usize * 8)?;
        Ok(Instance {
            dir: dir.to_path_buf(),
            nr_possible,
            events: map_at(dir, "events")?,
            cgrp_slot: map_at(dir, "cgrp_slot")?,
            proc_tgid: map_at(dir, "proc_tgid")?,
            proc_tid: map_at(dir, "proc_tid")?,
            registry,
            tracked,
            live,
            counts,
            flush: ProgramHandle::from_pinned_path(dir.join("flush"))
                .context("opening the shared flush program")?,
        })
    }

    fn live(&self) -> *mut bperf_live {
        self.live.as_ptr() as *mut bperf_live
    }

    /// Changes the live configuration the BPF side reads.
    fn update_live(&self, f: impl FnOnce(&mut bperf_live)) {
        // SAFETY: the mapping holds one bperf_live; only sessions holding the registry
        // lock write it, and the BPF side reads each field as a whole.
        unsafe {
            let mut v = std::ptr::read_volatile(self.live());
            f(&mut v);
            std::ptr::write_volatile(self.live(), v);
        }
    }

    fn tracked_word(&self, id: u32) -> &AtomicU64 {
        let words = self.tracked.as_ptr() as *const AtomicU64;
        assert!(id >> 6 < TRACKED_WORDS);
        // SAFETY: in bounds; the BPF side changes bits of the same words atomically.
        unsafe { &*words.add((id >> 6) as usize) }
    }

    fn load_registry(&self) -> Result<Box<Registry>> {
        let bytes = self
            .registry
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading the shared counters' registry")?
            .context("the shared counters' registry is empty")?;
        let mut r = Registry::new();
        plain::copy_from_bytes(&mut *r, &bytes)
            .map_err(|_| anyhow::anyhow!("the shared counters' registry has the wrong size"))?;
        if r.version != REGISTRY_VERSION {
            bail!(
                "{} holds shared counters of another bperf version (registry version {}, this bperf's is {REGISTRY_VERSION}); they go with their last session: {}",
                self.dir.display(),
                r.version,
                remedy(&self.dir)
            );
        }
        Ok(r)
    }

    fn store_registry(&self, r: &Registry) -> Result<()> {
        // SAFETY: plain old data.
        let bytes = unsafe { plain::as_bytes(r) };
        self.registry
            .update(&0u32.to_ne_bytes(), bytes, MapFlags::ANY)
            .context("writing the shared counters' registry")
    }

    /// Runs the flush program on `cpu`: its counts are then current.
    fn flush(&self, cpu: u32) -> Result<()> {
        let mut opts = libbpf_sys::bpf_test_run_opts {
            sz: size_of::<libbpf_sys::bpf_test_run_opts>() as _,
            cpu,
            flags: libbpf_sys::BPF_F_TEST_RUN_ON_CPU,
            ..Default::default()
        };
        // SAFETY: opts is a valid, sized bpf_test_run_opts; the fd is a program's.
        let r = unsafe {
            libbpf_sys::bpf_prog_test_run_opts(self.flush.as_fd().as_raw_fd(), &mut opts)
        };
        if r < 0 {
            return Err(std::io::Error::from_raw_os_error(-r))
                .with_context(|| format!("flushing shared counts on CPU {cpu}"));
        }
        Ok(())
    }

    fn reading(&self, slot: usize, event: usize, cpu: u32) -> Reading {
        self.counts
            .get((cpu as usize * SLOTS + slot) * EVENTS + event)
    }

    /// Registers event `key` for session `s`: an event counted already, or a new one
    /// opened with `open`. None when the machine cannot count it.
    fn hold_event(
        &self,
        reg: &mut Registry,
        s: usize,
        key: &EventKey,
        asked: usize,
        open: &mut dyn FnMut() -> Result<Option<Vec<(u32, OwnedFd)>>>,
    ) -> Result<Option<usize>> {
        let mut attr = [0u8; ATTR_BYTES];
        let n = key.attr.len().min(ATTR_BYTES);
        attr[..n].copy_from_slice(&key.attr[..n]);
        let read = read_bits(&key.read);
        let same = |e: &EventEntry| e.used != 0 && e.attr == attr && e.read == read;
        if let Some(i) = reg.events.iter().position(same) {
            reg.events[i].holders.add(s);
            return Ok(Some(i));
        }
        let Some(i) = reg.events.iter().position(|e| e.used == 0) else {
            let others = reg.events.iter().filter(|e| e.holders.others_than(s));
            return Err(no_room("events", EVENTS, others.count(), asked));
        };
        let Some(fds) = open()? else {
            return Ok(None);
        };
        for (cpu, fd) in &fds {
            let k = (i * self.nr_possible + *cpu as usize) as u32;
            let v = fd.as_raw_fd() as u32;
            self.events
                .update(&k.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .context("adding an event to the shared perf event array")?;
        }
        // The array holds the events now (BPF_F_PRESERVE_ELEMS): our fds can go.
        drop(fds);
        let bit = 1u64 << i;
        let m = &key.read;
        self.update_live(|l| {
            let set = |mask: &mut u64, on: u64| {
                *mask = (*mask & !bit) | if on & 1 != 0 { bit } else { 0 }
            };
            set(&mut l.always_running, m.always_running);
            set(&mut l.plain_count, m.plain_count);
            set(&mut l.cpu_clock, m.cpu_clock);
            set(&mut l.task_clock, m.task_clock);
            set(&mut l.rq_switches, m.rq_switches);
            l.event_gen[i] = l.event_gen[i].wrapping_add(1);
            l.nr_events = l.nr_events.max(i as u32 + 1);
        });
        reg.events[i] = EventEntry {
            attr,
            used: 1,
            read,
            holders: Holders::default(),
        };
        reg.events[i].holders.add(s);
        Ok(Some(i))
    }

    /// Stops counting event `i`: its perf events are closed.
    fn drop_event(&self, reg: &mut Registry, i: usize) {
        for cpu in 0..self.nr_possible {
            let k = (i * self.nr_possible + cpu) as u32;
            let _ = self.events.delete(&k.to_ne_bytes());
        }
        reg.events[i].used = 0;
        let last = reg
            .events
            .iter()
            .rposition(|e| e.used != 0)
            .map_or(0, |j| j + 1);
        let bit = 1u64 << i;
        self.update_live(|l| {
            for mask in [
                &mut l.always_running,
                &mut l.plain_count,
                &mut l.cpu_clock,
                &mut l.task_clock,
                &mut l.rq_switches,
            ] {
                *mask &= !bit;
            }
            l.event_gen[i] = l.event_gen[i].wrapping_add(1);
            l.nr_events = last as u32;
        });
    }

    /// Registers `target` for session `s`: its slot.
    fn hold_slot(
        &self,
        reg: &mut Registry,
        s: usize,
        target: Target,
        asked: usize,
    ) -> Result<usize> {
        let (kind, key, inherit) = target.kind_key();
        let same = |e: &SlotEntry| e.kind == kind && e.key == key && e.inherit == inherit as u32;
        if let Some(i) = reg.slots.iter().position(same) {
            reg.slots[i].holders.add(s);
            return Ok(i);
        }
        let Some(i) = reg.slots.iter().position(|e| e.kind == KIND_FREE) else {
            let others = reg.slots[1..].iter().filter(|e| e.holders.others_than(s));
            let what = "cgroups, processes and threads";
            return Err(no_room(what, SLOTS - 1, others.count(), asked));
        };
        // Whatever a process that died with a session left pointing at this slot.
        self.unlink_slot(i);
        match target {
            Target::Cpus => unreachable!("slot 0 counts the CPUs"),
            Target::Cgroup(id) => self
                .cgrp_slot
                .update(&id.to_ne_bytes(), &(i as u32).to_ne_bytes(), MapFlags::ANY)
                .context("adding a cgroup to the shared counters")?,
            Target::Process { pid, inherit } => self.track(&self.proc_tgid, pid, i, inherit)?,
            Target::Thread { tid, inherit } => self.track(&self.proc_tid, tid, i, inherit)?,
        }
        reg.slots[i] = SlotEntry {
            kind,
            inherit: inherit.into(),
            key,
            holders: Holders::default(),
        };
        reg.slots[i].holders.add(s);
        let nr_procs = reg.nr_procs();
        self.update_live(|l| {
            l.nr_procs = nr_procs;
            l.slots_gen += 1;
        });
        Ok(i)
    }

    /// Charges what task `id` (a key of `map`) runs to `slot` too.
    fn track(&self, map: &MapHandle, id: u32, slot: usize, inherit: bool) -> Result<()> {
        let mut p = match map.lookup(&id.to_ne_bytes(), MapFlags::ANY)? {
            Some(bytes) => proc_from(&bytes),
            None => bperf_proc::default(),
        };
        let Some(k) = p.slot.iter().position(|&s| s == 0) else {
            bail!("task {id} is counted by {PROC_SLOTS} sessions through shared counters already");
        };
        p.slot[k] = slot as u32 + 1;
        if inherit {
            p.inherit |= 1 << k;
        }
        map.update(&id.to_ne_bytes(), proc_bytes(&p), MapFlags::ANY)
            .with_context(|| format!("tracking task {id}"))?;
        self.tracked_word(id)
            .fetch_or(1 << (id & 63), Ordering::SeqCst);
        Ok(())
    }

    /// Stops charging `slot`: every tracked task and cgroup that charges it lets go.
    fn drop_slot(&self, reg: &mut Registry, i: usize) {
        if reg.slots[i].kind == KIND_CGROUP {
            let _ = self.cgrp_slot.delete(&reg.slots[i].key.to_ne_bytes());
        }
        self.unlink_slot(i);
        reg.slots[i].kind = KIND_FREE;
        let nr_procs = reg.nr_procs();
        self.update_live(|l| {
            l.nr_procs = nr_procs;
            l.slots_gen += 1;
        });
    }

    /// Removes `slot` from every tracked task (children that inherited it included).
    fn unlink_slot(&self, slot: usize) {
        let mine = slot as u32 + 1;
        for map in [&self.proc_tgid, &self.proc_tid] {
            let keys: Vec<Vec<u8>> = map.keys().collect();
            for key in keys {
                let Ok(Some(bytes)) = map.lookup(&key, MapFlags::ANY) else {
                    continue;
                };
                let mut p = proc_from(&bytes);
                if !p.slot.contains(&mine) {
                    continue;
                }
                for k in 0..PROC_SLOTS {
                    if p.slot[k] == mine {
                        p.slot[k] = 0;
                        p.inherit &= !(1 << k);
                    }
                }
                let id = u32::from_ne_bytes(key[..4].try_into().unwrap());
                if p.slot.iter().any(|&s| s != 0) {
                    let _ = map.update(&key, proc_bytes(&p), MapFlags::ANY);
                    continue;
                }
                let _ = map.delete(&key);
                self.untrack_if_unused(id);
            }
        }
    }

    fn untrack_if_unused(&self, id: u32) {
        let k = id.to_ne_bytes();
        let used = |m: &MapHandle| matches!(m.lookup(&k, MapFlags::ANY), Ok(Some(_)));
        if !used(&self.proc_tgid) && !used(&self.proc_tid) {
            self.tracked_word(id)
                .fetch_and(!(1 << (id & 63)), Ordering::SeqCst);
        }
    }

    /// Releases everything session `s` holds.
    fn release(&self, reg: &mut Registry, s: usize) {
        for i in 0..EVENTS {
            let e = &mut reg.events[i];
            if e.used != 0 && e.holders.has(s) {
                e.holders.remove(s);
                if e.holders.is_empty() {
                    self.drop_event(reg, i);
                }
            }
        }
        for i in 1..SLOTS {
            let e = &mut reg.slots[i];
            if e.kind != KIND_FREE && e.holders.has(s) {
                e.holders.remove(s);
                if e.holders.is_empty() {
                    self.drop_slot(reg, i);
                }
            }
        }
        reg.sessions[s].used = 0;
    }

    /// Releases the sessions whose process is gone (killed, or crashed).
    fn reap(&self, reg: &mut Registry) {
        for s in 0..SESSIONS {
            let e = reg.sessions[s];
            if e.used != 0 && start_time(e.pid) != Some(e.start) {
                self.release(reg, s);
            }
        }
    }
}

fn proc_from(bytes: &[u8]) -> bperf_proc {
    let mut p = bperf_proc::default();
    // SAFETY: bperf_proc is plain old data of this size (the map's value size).
    let out = unsafe {
        std::slice::from_raw_parts_mut(
            (&mut p as *mut bperf_proc).cast::<u8>(),
            size_of::<bperf_proc>(),
        )
    };
    let n = bytes.len().min(out.len());
    out[..n].copy_from_slice(&bytes[..n]);
    p
}

fn proc_bytes(p: &bperf_proc) -> &[u8] {
    // SAFETY: plain old data.
    unsafe {
        std::slice::from_raw_parts(
            (p as *const bperf_proc).cast::<u8>(),
            size_of::<bperf_proc>(),
        )
    }
}

/// Sets the sizes and flags the shared instance's maps need before load.
pub(super) fn size_maps(maps: &mut OpenBperfMaps) -> Result<()> {
    // Events stay in the array after the session that added them exits.
    maps.events
        .set_map_flags(libbpf_sys::BPF_F_PRESERVE_ELEMS)?;
    maps.cgrp_slot.set_max_entries(SLOTS as u32)?;
    maps.proc_tgid.set_max_entries(PROC_KEYS)?;
    maps.proc_tid.set_max_entries(PROC_KEYS)?;
    maps.tracked.set_max_entries(TRACKED_WORDS)?;
    maps.tracked.set_map_flags(libbpf_sys::BPF_F_MMAPABLE)?;
    Ok(())
}

/// The registry lock: an flock of the directory that holds the instance's directory.
struct Lock {
    _dir: OwnedFd,
}

fn same_file(fd: BorrowedFd, path: &Path) -> bool {
    let (Ok(a), Ok(b)) = (rustix::fs::fstat(fd), fs::metadata(path)) else {
        return false;
    };
    a.st_ino == b.ino() && a.st_dev == b.dev()
}

fn is_bpffs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type == BPF_FS_MAGIC)
}

/// Takes the registry lock on `parent`, mounting a BPF file system at /sys/fs/bpf
/// first when none is there and `mount` says so (None if it does not: there is no
/// instance). True in the result: this call mounted it.
fn lock(parent: &Path, mount: bool) -> Result<Option<(Lock, bool)>> {
    let mut mounted = false;
    loop {
        let fd = open_dir(parent).with_context(|| format!("opening {}", parent.display()))?;
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)
            .with_context(|| format!("locking {}", parent.display()))?;
        // Mounted or unmounted while we waited: lock what is there now.
        if !same_file(fd.as_fd(), parent) {
            continue;
        }
        if is_bpffs(parent) {
            return Ok(Some((Lock { _dir: fd }, mounted)));
        }
        if !mount {
            return Ok(None);
        }
        if parent != Path::new(BPFFS) {
            bail!(
                "{} is not on a BPF file system (mount -t bpf bpf DIR)",
                parent.display()
            );
        }
        rustix::mount::mount(
            "bpf",
            parent,
            "bpf",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .with_context(|| format!("mounting a BPF file system at {}", parent.display()))?;
        mounted = true;
    }
}

/// Checks a directory given for the shared counters (--bpf-attr-map).
pub fn check_dir(dir: &Path) -> Result<()> {
    if dir == Path::new(PERF_ATTR_MAP) {
        bail!("{PERF_ATTR_MAP} is perf's own registry: give bperf a directory of its own");
    }
    if dir.parent().is_none_or(|p| p.as_os_str().is_empty()) {
        bail!(
            "{}: the shared counters need a directory in a BPF file system",
            dir.display()
        );
    }
    if fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        bail!("{} exists and is not a directory", dir.display());
    }
    Ok(())
}

/// Loads the instance and pins it in `dir`.
fn create(dir: &Path, config: &Config, mounted: bool) -> Result<()> {
    check_kernel()?;
    remove_pins(dir);
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let nr_possible = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
    let mut storage = MaybeUninit::uninit();
    let counts_len = nr_possible * SLOTS * EVENTS;
    let mut skel = open_and_load(config, nr_possible, counts_len, &mut storage)?;
    let pin = |what: &str, r: libbpf_rs::Result<()>| {
        r.with_context(|| format!("pinning {what} in {}", dir.display()))
    };
    let m = &mut skel.maps;
    pin("events", m.events.pin(dir.join("events")))?;
    pin("cgrp_slot", m.cgrp_slot.pin(dir.join("cgrp_slot")))?;
    pin("proc_tgid", m.proc_tgid.pin(dir.join("proc_tgid")))?;
    pin("proc_tid", m.proc_tid.pin(dir.join("proc_tid")))?;
    pin("tracked", m.tracked.pin(dir.join("tracked")))?;
    pin("counts", m.counts.pin(dir.join("counts")))?;
    pin("live", m.bss.pin(dir.join("live")))?;
    if let Some(bss) = m.bss_data.as_deref_mut() {
        bss.live.slots_gen = 1;
    }
    pin("flush", skel.progs.bperf_flush.pin(dir.join("flush")))?;
    let p = &skel.progs;
    let links = [
        p.bperf_on_switch.attach(),
        p.bperf_on_attach.attach(),
        p.bperf_on_fork.attach(),
        p.bperf_on_free.attach(),
    ];
    for (name, link) in LINKS.iter().zip(links) {
        let mut link = link.with_context(|| format!("attaching {name}"))?;
        pin(name, link.pin(dir.join(name)))?;
    }
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut registry = MapHandle::create(
        MapType::Array,
        Some("bperf_registry"),
        4,
        size_of::<Registry>() as u32,
        1,
        &opts,
    )
    .context("creating the shared counters' registry")?;
    let mut r = Registry::new();
    r.mounted_bpffs = mounted.into();
    r.cgroup_v1 = config.cgroup_v1.into();
    // SAFETY: plain old data.
    registry.update(
        &0u32.to_ne_bytes(),
        unsafe { plain::as_bytes(&*r) },
        MapFlags::ANY,
    )?;
    // Pinned last: a directory with a registry holds a whole instance.
    pin("registry", registry.pin(dir.join("registry")))?;
    Ok(())
}

/// Removes the instance's pins and directory (what remains is freed with its last fd).
fn remove_pins(dir: &Path) {
    for name in PINS {
        let _ = fs::remove_file(dir.join(name));
    }
    let _ = fs::remove_dir(dir);
}

/// Removes the instance, and the BPF file system if bperf mounted it and nothing else
/// uses it.
fn remove_instance(dir: &Path, mounted_bpffs: bool) {
    remove_pins(dir);
    let root = Path::new(BPFFS);
    if mounted_bpffs && dir.parent() == Some(root) {
        // A new BPF file system holds the kernel's preloaded iterators and nothing else.
        let preloaded =
            |e: &fs::DirEntry| matches!(e.file_name().to_str(), Some("maps.debug" | "progs.debug"));
        let empty = fs::read_dir(root).is_ok_and(|d| d.flatten().all(|e| preloaded(&e)));
        if empty {
            // Detached: the lock holds the root open until the caller lets go.
            let _ = rustix::mount::unmount(root, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

/// One session on the shared counters.
pub struct Session {
    inst: Instance,
    id: usize,
    /// The shared index of each event the session registered; None for one the
    /// machine cannot count.
    events: Vec<Option<usize>>,
    /// The slot of each target.
    slots: Vec<usize>,
    /// Starts a keeper whenever the instance has none; stopped before the session leaves.
    watch: Option<KeeperWatch>,
}

/// Opens session event i on every CPU: (CPU, fd) pairs, or None where the machine
/// cannot count it.
pub type OpenEvent<'a> = dyn FnMut(usize) -> Result<Option<Vec<(u32, OwnedFd)>>> + 'a;

/// What a session asks for: its events, its targets, how a new event is opened on
/// every CPU (None where the machine cannot count it), and how the instance is loaded
/// if there is none.
pub struct Request<'a> {
    pub dir: &'a Path,
    pub events: &'a [EventKey],
    pub targets: &'a [Target],
    pub open: &'a mut OpenEvent<'a>,
    pub config: &'a Config<'a>,
}

impl Session {
    /// Joins the shared counters (creating them if this is the first session), registers
    /// the request's events and targets, and flushes every CPU so that what is counted
    /// from now on is current.
    pub fn join(req: Request) -> Result<Session> {
        check_dir(req.dir)?;
        let parent = req.dir.parent().expect("checked");
        let (lock, mounted) = lock(parent, true)?.expect("mounted");
        let mut keeper = None;
        if !req.dir.join("registry").exists() {
            create(req.dir, req.config, mounted)
                .inspect_err(|_| remove_instance(req.dir, mounted))?;
            keeper = start_keeper(req.dir);
        }
        let inst = Instance::open(req.dir)?;
        let mut reg = inst.load_registry()?;
        inst.reap(&mut reg);
        let registered = register(&inst, &mut reg, req);
        let stored = inst.store_registry(&reg);
        let mut session = match (registered, stored) {
            (Ok((id, events, slots)), Ok(())) => Session {
                inst,
                id,
                events,
                slots,
                watch: None,
            },
            (Err(e), _) | (_, Err(e)) => {
                if reg.live_sessions() == 0 {
                    remove_instance(&inst.dir, reg.mounted_bpffs != 0);
                }
                return Err(e);
            }
        };
        drop(lock);
        session.watch = Some(KeeperWatch::start(&session.inst.dir, keeper)?);
        session.flush_all()?;
        Ok(session)
    }

    /// Whether session event `i` is counted (the machine could open it).
    pub fn counts_event(&self, i: usize) -> bool {
        self.events[i].is_some()
    }

    fn flush_all(&self) -> Result<()> {
        for cpu in crate::sys::online_cpus()? {
            self.inst.flush(cpu)?;
        }
        Ok(())
    }

    /// Brings the counts of `cpus` up to now.
    pub fn flush(&self, cpus: &[u32]) -> Result<()> {
        cpus.iter().try_for_each(|&c| self.inst.flush(c))
    }

    /// What target `t` counted of event `e` on `cpu` since the instance was loaded (a
    /// session subtracts its first reading).
    pub fn reading(&self, t: usize, e: usize, cpu: u32) -> Reading {
        match self.events[e] {
            Some(i) => self.inst.reading(self.slots[t], i, cpu),
            None => Reading::default(),
        }
    }
}

/// How many different items there are.
fn distinct<T: std::hash::Hash + Eq>(items: impl Iterator<Item = T>) -> usize {
    items.collect::<std::collections::HashSet<T>>().len()
}

/// Why a session that asks for `asked` of the `capacity` places for `what` does not get
/// them all, when other sessions hold `others` of them (and it holds the rest).
fn no_room(what: &str, capacity: usize, others: usize, asked: usize) -> anyhow::Error {
    match others {
        0 => anyhow::anyhow!(
            "this session asks for {asked} {what}, and the shared counters count at most {capacity} at once"
        ),
        _ => anyhow::anyhow!(
            "the shared counters count at most {capacity} {what} at once, and other sessions hold {others} of them: this session asks for {asked}"
        ),
    }
}

/// Registers the session and what it asks for; its id, events and slots.
fn register(
    inst: &Instance,
    reg: &mut Registry,
    req: Request,
) -> Result<(usize, Vec<Option<usize>>, Vec<usize>)> {
    let counts_cgroups = req.targets.iter().any(|t| matches!(t, Target::Cgroup(_)));
    if counts_cgroups && reg.cgroup_v1 != req.config.cgroup_v1 as u32 {
        let version = |v1: bool| if v1 { "v1 (perf_event's)" } else { "v2" };
        bail!(
            "the shared counters in {} charge the cgroups of the cgroup {} hierarchy, and this session's are cgroup {}: the perf_event controller was mounted or unmounted since they started; count these cgroups without shared counters, or once their sessions have ended",
            inst.dir.display(),
            version(reg.cgroup_v1 != 0),
            version(req.config.cgroup_v1)
        );
    }
    let Some(id) = reg.sessions.iter().position(|s| s.used == 0) else {
        bail!("{SESSIONS} sessions count through the shared counters already");
    };
    let me = std::process::id();
    reg.sessions[id] = SessionEntry {
        pid: me,
        used: 1,
        start: start_time(me).context("reading this process's start time")?,
    };
    let mut events = Vec::new();
    let asked_events = distinct(req.events.iter().map(|k| (&k.attr, read_bits(&k.read))));
    let with_slot = req.targets.iter().filter(|t| **t != Target::Cpus);
    let asked_slots = distinct(with_slot.map(Target::kind_key));
    let mut done = || -> Result<Vec<usize>> {
        for (i, key) in req.events.iter().enumerate() {
            let open = &mut || (req.open)(i);
            events.push(inst.hold_event(reg, id, key, asked_events, open)?);
        }
        let mut slots = Vec::new();
        for &t in req.targets {
            slots.push(match t {
                Target::Cpus => 0,
                t => inst.hold_slot(reg, id, t, asked_slots)?,
            });
        }
        Ok(slots)
    };
    match done() {
        Ok(slots) => Ok((id, events, slots)),
        Err(e) => {
            inst.release(reg, id);
            Err(e)
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(w) = self.watch.take() {
            w.stop();
        }
        if let Err(e) = leave(&self.inst, self.id) {
            eprintln!("bperf: leaving the shared counters: {e:#}");
        }
    }
}

/// Releases session `id`; the last session out removes the instance.
fn leave(inst: &Instance, id: usize) -> Result<()> {
    let parent = inst.dir.parent().expect("checked at join");
    let Some(_lock) = lock(parent, false)? else {
        return Ok(());
    };
    if !inst.dir.join("registry").exists() {
        return Ok(());
    }
    let mut reg = inst.load_registry()?;
    inst.release(&mut reg, id);
    inst.reap(&mut reg);
    if reg.live_sessions() == 0 {
        remove_instance(&inst.dir, reg.mounted_bpffs != 0);
        return Ok(());
    }
    inst.store_registry(&reg)
}

/// The hidden argument that makes bperf the keeper of the shared counters.
pub const KEEPER_ARG: &str = "__keep-shared";

/// How often the keeper looks for sessions that died.
const KEEPER_PERIOD: Duration = Duration::from_secs(1);

/// How often each session checks that the instance has a keeper, and starts one if not.
const KEEPER_CHECK: Duration = Duration::from_secs(1);

/// How long a new keeper tries to take the keeper lock: a session's check holds it for
/// a moment; another keeper holds it for good.
const KEEPER_LOCK_TRIES: u32 = 20;
const KEEPER_LOCK_WAIT: Duration = Duration::from_millis(10);

fn open_dir(dir: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
}

/// Whether the instance in `dir` (the directory with inode `ino`) has a keeper: the
/// keeper holds an exclusive flock of the directory for as long as it runs. True as
/// well when there is no such directory any more: nothing to keep.
fn has_keeper(dir: &Path, ino: u64) -> bool {
    use rustix::fs::FlockOperation::NonBlockingLockShared;
    let Ok(fd) = open_dir(dir) else {
        return true;
    };
    if !rustix::fs::fstat(&fd).is_ok_and(|st| st.st_ino == ino) {
        return true;
    }
    // Taken (and let go with the fd) only when no keeper holds it.
    rustix::fs::flock(&fd, NonBlockingLockShared).is_err()
}

/// Takes the keeper lock of `dir` for the life of this process; None when another
/// keeper holds it.
fn keeper_lock(dir: &Path) -> Option<OwnedFd> {
    let fd = open_dir(dir).ok()?;
    for _ in 0..KEEPER_LOCK_TRIES {
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Some(fd),
            Err(rustix::io::Errno::WOULDBLOCK) => std::thread::sleep(KEEPER_LOCK_WAIT),
            Err(_) => return None,
        }
    }
    None
}

/// Starts a keeper of the instance in `dir` (see `keep`), in a process group of its own
/// so that the terminal's signals to this session do not reach it.
fn start_keeper(dir: &Path) -> Option<std::process::Child> {
    // This very binary, even if it was replaced or removed since it started.
    let mut cmd = std::process::Command::new("/proc/self/exe");
    std::os::unix::process::CommandExt::arg0(&mut cmd, "bperf");
    cmd.arg(KEEPER_ARG).arg(dir);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn().ok()
}

/// A session's thread that starts a keeper whenever the instance has none (the keeper
/// was killed), so that the instance is removed whatever ends in whatever order.
struct KeeperWatch {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl KeeperWatch {
    /// Watches the instance in `dir`; `started` is the keeper this session started, if
    /// any (a child of this process, reaped here once it ends).
    fn start(dir: &Path, started: Option<std::process::Child>) -> Result<KeeperWatch> {
        let ino = fs::metadata(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .ino();
        let dir = dir.to_path_buf();
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("bperf-keeper-watch".into())
            .spawn(move || {
                let mut children: Vec<std::process::Child> = started.into_iter().collect();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(KEEPER_CHECK)
                {
                    children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
                    if !has_keeper(&dir, ino) {
                        children.extend(start_keeper(&dir));
                    }
                }
            })
            .context("starting the shared counters' keeper watch")?;
        Ok(KeeperWatch { stop, thread })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The keeper of the instance in `dir`: until the instance is gone, releases what dead
/// sessions registered, and removes the instance once no session is left, which is how
/// the last session's SIGKILL leaves nothing behind. One keeper at a time: a second
/// one, started by a session that found none, returns at once.
pub fn keep(dir: &Path) -> Result<()> {
    // SAFETY: plain signal dispositions: the keeper ignores the terminal's signals.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let parent = dir.parent().context("no parent directory")?;
    let Some(held) = keeper_lock(dir) else {
        return Ok(());
    };
    let dir_ino = rustix::fs::fstat(&held)?.st_ino;
    let inst = {
        let Some(_lock) = lock(parent, false)? else {
            return Ok(());
        };
        // The directory locked is the instance's (not one removed meanwhile).
        let same_dir = fs::metadata(dir).is_ok_and(|m| m.ino() == dir_ino);
        match same_dir && dir.join("registry").exists() {
            true => Instance::open(dir)?,
            false => return Ok(()),
        }
    };
    loop {
        std::thread::sleep(KEEPER_PERIOD);
        let Some(_lock) = lock(parent, false)? else {
            return Ok(());
        };
        // Removed by the last session out (a new instance has a keeper of its own).
        let same_dir = fs::metadata(dir).is_ok_and(|m| m.ino() == dir_ino);
        if !same_dir || !dir.join("registry").exists() {
            return Ok(());
        }
        let mut reg = inst.load_registry()?;
        let before = reg.live_sessions();
        inst.reap(&mut reg);
        if reg.live_sessions() == 0 {
            remove_instance(dir, reg.mounted_bpffs != 0);
            return Ok(());
        }
        if reg.live_sessions() != before {
            inst.store_registry(&reg)?;
        }
    }
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

    #[test]
    fn start_time_of_this_process_is_found() {
        let me = start_time(std::process::id());
        assert!(me.is_some_and(|t| t > 0));
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn no_room_says_who_holds_the_places() {
        let alone = no_room("things", 255, 0, 256).to_string();
        assert_eq!(
            alone,
            "this session asks for 256 things, and the shared counters count at most 255 at once"
        );
        let beside = no_room("things", 255, 200, 60).to_string();
        assert!(
            beside.contains("at most 255 things") && beside.contains("other sessions hold 200"),
            "{beside}"
        );
        assert!(beside.contains("asks for 60"), "{beside}");
        assert_eq!(distinct([1, 2, 1, 3, 2].into_iter()), 3);
        let mut h = Holders::default();
        h.add(5);
        assert!(!h.others_than(5) && h.others_than(6));
        h.add(700);
        assert!(h.others_than(5));
    }

    #[test]
    fn perfs_registry_is_refused() {
        assert!(check_dir(Path::new(PERF_ATTR_MAP)).is_err());
        assert!(check_dir(Path::new("/")).is_err());
        assert!(check_dir(Path::new("/sys/fs/bpf/mine")).is_ok());
    }
}
