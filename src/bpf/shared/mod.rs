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
//! a directory only root may open, beside the instance's (lock.rs). A session whose process is gone is released by the next
//! session that registers or leaves, and by the keeper (`keep`), a small process the
//! first session starts, which also removes the instance when its last session was
//! killed. Each session checks every second that a keeper runs (the keeper holds a
//! flock of the instance's directory) and starts one if not. The last session out
//! removes everything: pins, programs, maps, perf events.

mod holding;
mod instance;
mod keeper;
mod lock;
mod membership;
mod registry;

pub(super) use instance::{proc_bytes, size_maps, size_task_maps};
pub use keeper::{keep, KEEPER_ARG};
pub use lock::{check_dir, STOP_ASKED};
pub use membership::{JoinRequest, Membership, OpenEvent};

use super::ReadMasks;

/// Events counted at once through the shared instance: the stride of its arrays.
pub const EVENTS: usize = 32;
/// Slots: 0 for everything, the rest for the cgroups, processes and threads sessions count.
pub(crate) const SLOTS: usize = 256;
/// Sessions at once.
pub(crate) const SESSIONS: usize = 1024;
/// Bytes of a perf_event_attr kept to tell events apart (PERF_ATTR_SIZE_VER8).
pub(crate) const ATTR_BYTES: usize = 136;

/// Where the instance is pinned unless told otherwise.
pub(crate) const DEFAULT_DIR: &str = "/sys/fs/bpf/bperf";
/// perf's own registry of BPF counters, which bperf must never touch.
pub(crate) const PERF_ATTR_MAP: &str = "/sys/fs/bpf/perf_attr_map";

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
