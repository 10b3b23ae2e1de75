//! bperf.data: the file bperf record writes and bperf report reads (not perf's
//! perf.data, which `stat record` writes: see src/perfdata/).
//!
//! ```text
//! magic    8 bytes  "BPERFREC"
//! version  u32      3 (this bperf writes 3, reads 1, 2 and 3)
//! length   u32      of the header
//! header   JSON     Header: events, cgroups (each: slot, id, name, path, and a
//!                   container's cgroup its `container` name), CPUs, clock, command,
//!                   start time, what was recorded (`target`, perf's words, and
//!                   `"tasks": true` when slot 0 is -p's, -t's or the command's tasks
//!                   rather than a cgroup); and
//!                   "compression": "zstd" when each chunk is a zstd frame (-z)
//! crc      u32      the CRC-32 (IEEE) of the header's bytes
//! chunks            each: kind u8 6, length varint, then `length` bytes: the CRC-32
//!                   of the rest, then the rest; or with "compression": "zstd", one
//!                   zstd frame, with its content checksum, of the rest. The rest:
//!                   varints the chunk's number (from 0), the cgroup blocks (kinds 4
//!                   and 5) and the slices written before it, then blocks. Slices are
//!                   encoded from scratch in each chunk: one reads on its own
//! blocks            each: kind u8, length varint, then `length` bytes
//!   kind 3  a slice, encoded against the slices before it (compact.rs): about 10
//!           bytes for a ping-pong's slice of two events, where version 1 took 120
//!   kind 4  a cgroup that appeared while recording, as JSON: its slot (the next after
//!           every cgroup named before), id, name, path and container, as in the
//!           header; slices after it may name its slot
//!   kind 5  a cgroup that was removed while recording, as JSON: its slot and the
//!           counters' totals for it ([event][CPU] as in the end block); no slice
//!           after it names its slot
//!   kind 2  the end, last in the file: End as JSON (duration, lost records per CPU,
//!           the counters' totals of the cgroups not removed, [] for those removed,
//!           records sent per CPU: written or lost)
//! ```
//! A chunk is written once its blocks pass CHUNK_BYTES and whenever record flushes
//! (twice a second), so a recording killed, or cut short by a full disk, keeps every
//! chunk written before: report reads them, and says what it dropped. A chunk whose
//! check fails is skipped and said; reading stops at a chunk that cannot be framed (a
//! damaged length) or after which the cgroups' slots cannot be known (a cgroup block
//! was in a skipped chunk).
//! A slice's slot is the cgroup's place in the file, never reused: the header's
//! cgroups, then those of the kind 4 blocks in order. Files without kinds 4 and 5 (no
//! cgroup came or went, or written before them) read as before.
//! Version 2 (still read): the header (no CRC), then the blocks, without chunks and
//! checks, through one zstd stream with "compression": "zstd".
//! Version 1 (still read): blocks of kind u32, length u32; kind 1 a slice as the BPF
//! program sent it, struct bperf_slice (src/bpf/bperf.h): start u64, length u64,
//! cgroup id u64, cpu u32, slot u32, pid u32, tid u32, comm [16]u8, nr_events u32,
//! flags u32, then nr_events x (counter u64, enabled u64, running u64), decoded through
//! the skeleton's generated struct (crate::bpf::sent); kind 2 the end. The BPF
//! program's slices are read the same way before they are encoded.
//!
//! Integers are little-endian. A file whose header cannot be read is refused; after
//! the header, a reader keeps every slice it can read and says what it could not
//! (Dropped): the end block missing (the recording did not finish), a chunk damaged.
//!
//! Here: the types and the format's constants; json.rs the header, cgroup and end
//! blocks; raw_slice.rs a slice as the BPF program sends it; compact.rs a slice as
//! written; write.rs the writer; read/ the reader (older.rs: versions 1 and 2;
//! chunks.rs: version 3's chunks); io.rs blocks and bounded reads.

use std::borrow::Cow;
use std::mem::offset_of;

use crate::bpf::sent::{bperf_reading, bperf_slice};
use crate::reading::Reading;

mod compact;
#[cfg(test)]
mod fixtures;
mod io;
mod json;
mod raw_slice;
mod read;
mod write;

pub(crate) use raw_slice::{sent_slice, slice_bytes};
pub use read::{Dropped, Reader};
pub use write::Writer;

pub const MAGIC: &[u8; 8] = b"BPERFREC";
/// The version this bperf writes; it reads V1 and V2 too.
pub(crate) const VERSION: u32 = 3;
const V1: u32 = 1;
const V2: u32 = 2;
/// Version 1's blocks.
const SLICE: u32 = 1;
const END: u32 = 2;
/// Version 2's.
const COMPACT_SLICE: u8 = 3;
const END_V2: u8 = 2;
const CGROUP_BEGAN: u8 = 4;
const CGROUP_ENDED: u8 = 5;
/// Version 3's.
const CHUNK: u8 = 6;
/// A chunk is written once its blocks take this many bytes (about 25,000 slices), or
/// with -z ZSTD_CHUNK_BYTES (a synthetic slice takes 9.3 bytes in frames of 256 KiB,
/// 7.1 in frames of 1 MiB and 6.1 in one stream: tests/it/bperf_data.rs).
pub(crate) const CHUNK_BYTES: usize = 256 << 10;
pub(crate) const ZSTD_CHUNK_BYTES: usize = 1 << 20;
/// The largest block of a cgroup that appeared: its name and path are at most a path's
/// length (PATH_MAX) each.
const MAX_BEGAN_BLOCK: u64 = 16 << 10;
/// The compression a version 2 header can name.
const ZSTD: &str = "zstd";
/// The largest zstd window a reader accepts (2^23 bytes): what levels 1 to 19 use.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Bytes of a slice before its deltas: struct bperf_slice up to `delta`.
pub const SLICE_HEAD: usize = offset_of!(bperf_slice, delta);
/// Bytes of each delta: struct bperf_reading.
const READING: usize = size_of::<bperf_reading>();
/// Where a slice says how many deltas follow.
const NR_EVENTS_AT: usize = offset_of!(bperf_slice, nr_events);
/// A slice's flag: ended by a read (BPERF_SLICE_CUT in bperf.h).
const SLICE_CUT: u32 = 1;

// Slices are written as the BPF program sends them, so bperf.h's struct is the file's
// layout: a change to it is a new file VERSION, not a silent change of the format.
const _: () = assert!(SLICE_HEAD == 64 && READING == 24 && NR_EVENTS_AT == 56);
/// The largest header or end block read from a file: far more than any needs (a
/// file's own length bounds it too).
const MAX_BLOCK: u32 = 1 << 30;
/// The largest read from a pipe, whose length is not known.
const MAX_PIPE_BLOCK: u32 = 256 << 20;

/// A cgroup recorded: its slot in the slices, id, name as given and path below the
/// mount ("" for the root), and, for a container's own cgroup, the container's name as
/// its runtime gave it when recording started (the header's optional `container`; a
/// file without it reads as before).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordedCgroup {
    pub slot: usize,
    pub id: u64,
    pub name: String,
    pub path: String,
    pub container: Option<String>,
    /// When it came, as the reader counts the file's cgroup blocks (kinds 4 and 5): 0
    /// for the header's, n for the n-th block's; not written.
    pub began: u32,
    /// The cgroup block that said it was removed, if one did; not written.
    pub ended: Option<u32>,
}

/// What the file says about the recording before its slices.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub events: Vec<String>,
    /// Whether the machine could count each event.
    pub supported: Vec<bool>,
    pub cgroups: Vec<RecordedCgroup>,
    pub cpus: Vec<u32>,
    /// What slice times are on: "sched_clock" (the run queue clock) or "ktime".
    pub clock: String,
    pub command: Vec<String>,
    /// When recording started, in seconds since the epoch.
    pub started: f64,
    /// What was recorded, as perf's header says it: `'system wide'`, `process id
    /// 'PIDS'`, `thread id 'TIDS'` or `'COMMAND'`.
    pub target: String,
    /// Slot 0 holds the tasks recorded (-p, -t, a command), not a cgroup: there are no
    /// cgroups then.
    pub tasks: bool,
}

/// What a file says when it does not say what it recorded.
pub(crate) const SYSTEM_WIDE: &str = "'system wide'";

impl Header {
    /// How many slots the slices may name (so far, while reading).
    pub fn nr_slots(&self) -> usize {
        match self.tasks {
            true => 1,
            false => self.cgroups.len(),
        }
    }
}

/// What the file says once recording ended.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct End {
    pub duration_ns: u64,
    /// Slices each CPU (in header order) could not send: its ring was full.
    pub lost: Vec<u64>,
    /// Slices the reader was told were dropped (PERF_RECORD_LOST), per CPU: in files
    /// recorded through perf buffers, before record used a BPF ring buffer, whose
    /// losses are all in `lost`.
    pub ring_lost: Vec<u64>,
    /// The counters' own totals: [slot][event][cpu position].
    pub totals: Vec<Vec<Vec<Reading>>>,
    /// Slices each CPU sent or tried to: those in the file and those in `lost`
    /// (empty in files from before it was kept).
    pub sent: Vec<u64>,
}

/// One slice as recorded.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Slice {
    pub start: u64,
    pub length: u64,
    pub cgid: u64,
    pub cpu: u32,
    pub slot: u32,
    pub pid: u32,
    pub tid: u32,
    /// The task's name, NUL-padded (nothing after its first NUL).
    pub comm: [u8; 16],
    /// Ended by a read rather than by a switch: the task ran on into the next slice.
    pub cut: bool,
    pub deltas: Vec<Reading>,
}

impl Slice {
    /// The task's name as text.
    pub(crate) fn comm_str(&self) -> Cow<'_, str> {
        comm_text(&self.comm)
    }
}

/// A comm's bytes (up to the first NUL) as text.
pub(crate) fn comm_text(comm: &[u8; 16]) -> Cow<'_, str> {
    let len = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..len])
}

/// `name` as a slice's comm (cut to 16 bytes).
pub fn comm(name: &str) -> [u8; 16] {
    let mut out = [0; 16];
    let len = name.len().min(16);
    out[..len].copy_from_slice(&name.as_bytes()[..len]);
    out
}

impl End {
    pub(crate) fn lost_total(&self) -> u64 {
        self.lost
            .iter()
            .sum::<u64>()
            .max(self.ring_lost.iter().sum())
    }
}
