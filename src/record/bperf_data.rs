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

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::mem::offset_of;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value as Json};

use crate::bpf::sent::{bperf_reading, bperf_slice};
use crate::reading::Reading;

mod chunks;
mod compact;

pub use chunks::Dropped;

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
/// with -z ZSTD_CHUNK_BYTES (frames of 256 KiB took 9.3 bytes a synthetic slice where
/// frames of 1 MiB took 7.1 and one stream 6.1: tests/it/bperf_data.rs).
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

fn cgroup_json(c: &RecordedCgroup) -> Json {
    let mut j = json!({"slot": c.slot, "id": c.id, "name": c.name, "path": c.path});
    if let Some(name) = &c.container {
        j["container"] = json!(name);
    }
    j
}

fn header_json(h: &Header) -> Json {
    let cgroups: Vec<Json> = h.cgroups.iter().map(cgroup_json).collect();
    let mut j = json!({
        "events": h.events,
        "supported": h.supported,
        "cgroups": cgroups,
        "cpus": h.cpus,
        "clock": h.clock,
        "command": h.command,
        "started": h.started,
        "byte_order": "little",
    });
    if h.target != SYSTEM_WIDE {
        j["target"] = json!(h.target);
    }
    if h.tasks {
        j["tasks"] = json!(true);
    }
    j
}

/// A recording being written (version 3): the header, then chunks of blocks, each
/// checked on its own: each slice as the BPF program sends it and each cgroup that
/// comes or goes, then the end.
pub struct Writer<W: Write> {
    out: W,
    /// -z: the level each chunk is compressed at, as one zstd frame with its content
    /// checksum.
    zstd: Option<i32>,
    encoder: compact::Encoder,
    nr_events: usize,
    /// The slice being written, and its block's bytes.
    slice: Slice,
    block: Vec<u8>,
    /// By the BPF program's slot: the slot the file gives what it counts now, and the
    /// cgroup's id (0 for tasks); None while it counts nothing.
    slots: Vec<Option<(u32, u64)>>,
    /// How many slots the file has given.
    named: u32,
    /// The chunk being filled: its preface (`preface` bytes), then its blocks.
    chunk: Vec<u8>,
    preface: usize,
    /// Chunks, cgroup blocks and slices written before the chunk being filled, and
    /// since.
    chunks: u64,
    cgroup_blocks: u64,
    slices: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the magic, version and header to `out` (and flushes them); each chunk
    /// goes through zstd at `zstd_level` when one is given (1 to 19: their windows are
    /// at most what a reader accepts, ZSTD_WINDOW_LOG_MAX).
    pub fn new(mut out: W, h: &Header, zstd_level: Option<i32>) -> io::Result<Writer<W>> {
        let mut header = header_json(h);
        if zstd_level.is_some() {
            header["compression"] = ZSTD.into();
        }
        let text = header.to_string();
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(text.len() as u32).to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        out.write_all(&crc32fast::hash(text.as_bytes()).to_le_bytes())?;
        out.flush()?;
        // The header's slots are the BPF program's at the start.
        let mut slots = vec![None; h.nr_slots()];
        match h.tasks {
            true => slots[0] = Some((0, 0)),
            false => h
                .cgroups
                .iter()
                .for_each(|c| slots[c.slot] = Some((c.slot as u32, c.id))),
        }
        let mut w = Writer {
            out,
            zstd: zstd_level,
            encoder: compact::Encoder::new(&h.cpus),
            nr_events: h.events.len(),
            slice: Slice::default(),
            block: Vec::with_capacity(compact::max_bytes(h.events.len()) + 11),
            named: slots.len() as u32,
            slots,
            chunk: Vec::new(),
            preface: 0,
            chunks: 0,
            cgroup_blocks: 0,
            slices: 0,
        };
        w.start_chunk();
        Ok(w)
    }

    /// Begins the next chunk: its preface, and the slices' encoding from scratch.
    fn start_chunk(&mut self) {
        self.chunk.clear();
        for v in [self.chunks, self.cgroup_blocks, self.slices] {
            compact::put(&mut self.chunk, v);
        }
        self.preface = self.chunk.len();
        self.encoder.reset();
    }

    /// Writes the chunk being filled, if it holds a block, and begins the next.
    fn write_chunk(&mut self) -> io::Result<()> {
        if self.chunk.len() == self.preface {
            return Ok(());
        }
        match self.zstd {
            None => {
                let crc = crc32fast::hash(&self.chunk).to_le_bytes();
                write_block_of(&mut self.out, CHUNK, &[&crc, &self.chunk])?;
            }
            Some(level) => {
                // A stream's frame, its size not given: zstd then compresses with the
                // parameters of a stream of unknown length, as version 2 did, where
                // one compressed with the chunk's length (zstd::bulk) took 9.0 bytes a
                // synthetic slice instead of 6.1 (tests/it/bperf_data.rs).
                let mut z = zstd::stream::write::Encoder::new(Vec::new(), level)?;
                z.include_checksum(true)?;
                z.write_all(&self.chunk)?;
                write_block_of(&mut self.out, CHUNK, &[&z.finish()?])?;
            }
        }
        self.chunks += 1;
        self.start_chunk();
        Ok(())
    }

    /// Writes a full chunk before a block is added to it.
    fn make_room(&mut self) -> io::Result<()> {
        let most = match self.zstd {
            None => CHUNK_BYTES,
            Some(_) => ZSTD_CHUNK_BYTES,
        };
        match self.chunk.len() >= most {
            true => self.write_chunk(),
            false => Ok(()),
        }
    }

    /// Writes what is held (a chunk of the blocks since the last) and flushes the
    /// output: a recording cut short after this keeps every block before it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_chunk()?;
        self.out.flush()
    }

    /// From now on, BPF slot `slot` counts cgroup `c` (whose own `slot` is ignored): the
    /// file names it (a kind 4 block) in the next slot of its own. Every slice written
    /// after this that the BPF program sent for `slot` is `c`'s.
    pub fn began(&mut self, slot: usize, c: &RecordedCgroup) -> io::Result<()> {
        let number = self.named;
        let named = RecordedCgroup {
            slot: number as usize,
            ..c.clone()
        };
        self.make_room()?;
        let text = cgroup_json(&named).to_string();
        write_block(&mut self.chunk, CGROUP_BEGAN, text.as_bytes())?;
        self.cgroup_blocks += 1;
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, None);
        }
        self.slots[slot] = Some((number, c.id));
        self.named += 1;
        Ok(())
    }

    /// Cgroup `id` was removed, its last slice written: the file says so (a kind 5
    /// block) with the counters' `totals` for it ([event][CPU]). Nothing if it was not
    /// being recorded.
    pub fn ended(&mut self, id: u64, totals: &[Vec<Reading>]) -> io::Result<()> {
        let Some(place) = self
            .slots
            .iter_mut()
            .find(|s| matches!(s, Some((_, i)) if *i == id))
        else {
            return Ok(());
        };
        let (number, _) = place.take().expect("found");
        let text = json!({"slot": number, "totals": readings_json(totals)}).to_string();
        self.make_room()?;
        write_block(&mut self.chunk, CGROUP_ENDED, text.as_bytes())?;
        self.cgroup_blocks += 1;
        Ok(())
    }

    /// The end block's totals ([file slot][event][CPU]) from `of_slot`, the counters'
    /// totals of a BPF slot: those of the cgroups still recorded, empty for the removed.
    pub fn file_totals(
        &self,
        of_slot: impl Fn(usize) -> Vec<Vec<Reading>>,
    ) -> Vec<Vec<Vec<Reading>>> {
        let mut out = vec![Vec::new(); self.named as usize];
        for (slot, place) in self.slots.iter().enumerate() {
            if let Some((number, _)) = place {
                out[*number as usize] = of_slot(slot);
            }
        }
        out
    }

    /// Writes one slice as the BPF program sent it (`raw`, perhaps padded); false if it
    /// is not one of this recording's (too short, other events, another CPU).
    pub fn write_slice(&mut self, raw: &[u8]) -> io::Result<bool> {
        let Some(n) = raw.get(NR_EVENTS_AT..NR_EVENTS_AT + 4) else {
            return Ok(false);
        };
        let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
        let Some(bytes) = raw.get(..SLICE_HEAD + n.min(self.nr_events) * READING) else {
            return Ok(false);
        };
        if parse_slice_into(&mut self.slice, bytes, self.nr_events).is_err() {
            return Ok(false);
        }
        match self.slots.get(self.slice.slot as usize) {
            Some(Some((number, _))) => self.slice.slot = *number,
            _ => return Ok(false),
        }
        // The encoding starts again in a new chunk: room first.
        self.make_room()?;
        let mut body = std::mem::take(&mut self.block);
        body.clear();
        let ours = self.encoder.encode(&self.slice, &mut body);
        if ours {
            write_block(&mut self.chunk, COMPACT_SLICE, &body)?;
            self.slices += 1;
        }
        self.block = body;
        Ok(ours)
    }

    /// Writes the end block, in the last chunk; the writer it was given.
    pub fn finish(mut self, end: &End) -> io::Result<W> {
        self.make_room()?;
        write_block(&mut self.chunk, END_V2, end_json(end).as_bytes())?;
        self.write_chunk()?;
        Ok(self.out)
    }
}

/// A version 2 block: its kind, its length as a varint, its bytes.
fn write_block(out: &mut impl Write, kind: u8, bytes: &[u8]) -> io::Result<()> {
    write_block_of(out, kind, &[bytes])
}

/// A block whose bytes are `parts` one after the other.
fn write_block_of(out: &mut impl Write, kind: u8, parts: &[&[u8]]) -> io::Result<()> {
    let mut head = Vec::with_capacity(11);
    head.push(kind);
    compact::put(&mut head, parts.iter().map(|p| p.len() as u64).sum());
    out.write_all(&head)?;
    parts.iter().try_for_each(|p| out.write_all(p))
}

/// One slot's readings [event][CPU] as JSON.
fn readings_json(events: &[Vec<Reading>]) -> Json {
    json!(events
        .iter()
        .map(|cpus| cpus
            .iter()
            .map(|r| json!([r.counter, r.enabled, r.running]))
            .collect::<Vec<_>>())
        .collect::<Vec<_>>())
}

/// The end block's JSON.
fn end_json(end: &End) -> String {
    let totals: Vec<Json> = end.totals.iter().map(|e| readings_json(e)).collect();
    json!({
        "duration_ns": end.duration_ns,
        "lost": end.lost,
        "ring_lost": end.ring_lost,
        "sent": end.sent,
        "totals": totals,
    })
    .to_string()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The bytes of a slice block of `nr_events` events.
fn slice_bytes(nr_events: usize) -> usize {
    SLICE_HEAD + nr_events * READING
}

/// A slice block's bytes into `s`, whose buffers are reused.
fn parse_slice_into(s: &mut Slice, b: &[u8], nr_events: usize) -> Result<()> {
    if b.len() < SLICE_HEAD {
        bail!("a slice of {} bytes (at least {SLICE_HEAD})", b.len());
    }
    let head = slice_head(&b[..SLICE_HEAD]);
    let n = u32::from_le(head.nr_events) as usize;
    if n != nr_events || b.len() != slice_bytes(n) {
        bail!(
            "a slice of {n} events in {} bytes, for {nr_events} events",
            b.len()
        );
    }
    let comm = head.comm.map(|c| c as u8);
    let comm_len = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    s.comm = [0; 16];
    s.comm[..comm_len].copy_from_slice(&comm[..comm_len]);
    s.deltas.clear();
    s.deltas
        .extend(b[SLICE_HEAD..].chunks_exact(READING).map(delta));
    s.start = u64::from_le(head.start);
    s.length = u64::from_le(head.length);
    s.cgid = u64::from_le(head.cgid);
    s.cpu = u32::from_le(head.cpu);
    s.slot = u32::from_le(head.slot);
    s.pid = u32::from_le(head.pid);
    s.tid = u32::from_le(head.tid);
    s.cut = u32::from_le(head.flags) & SLICE_CUT != 0;
    Ok(())
}

/// A slice's first SLICE_HEAD bytes as struct bperf_slice (its deltas left zero: a
/// slice holds only as many as it counted, and they are decoded one by one).
fn slice_head(b: &[u8]) -> bperf_slice {
    let mut head = bperf_slice::default();
    // SAFETY: bperf_slice is plain old data (see bpf::sent).
    let bytes = unsafe { plain::as_mut_bytes(&mut head) };
    bytes[..b.len()].copy_from_slice(b);
    head
}

/// One delta's bytes (struct bperf_reading) as a Reading.
fn delta(b: &[u8]) -> Reading {
    let mut r = bperf_reading::default();
    plain::copy_from_bytes(&mut r, b).expect("a delta's bytes");
    Reading {
        counter: u64::from_le(r.counter),
        enabled: u64::from_le(r.enabled),
        running: u64::from_le(r.running),
    }
}

fn parse_header(text: &[u8]) -> Result<Header> {
    let v: Json = serde_json::from_slice(text).context("the header is not JSON")?;
    let strings = |key: &str| -> Result<Vec<String>> {
        v[key]
            .as_array()
            .with_context(|| format!("the header has no {key}"))?
            .iter()
            .map(|s| s.as_str().map(String::from).context("not a string"))
            .collect()
    };
    let cgroups = v["cgroups"]
        .as_array()
        .context("the header has no cgroups")?
        .iter()
        .map(|c| {
            Ok(RecordedCgroup {
                slot: c["slot"].as_u64().context("a cgroup without its slot")? as usize,
                id: c["id"].as_u64().context("a cgroup without its id")?,
                name: c["name"].as_str().unwrap_or_default().to_string(),
                path: c["path"].as_str().unwrap_or_default().to_string(),
                container: c["container"].as_str().map(String::from),
                began: 0,
                ended: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let cpus = v["cpus"]
        .as_array()
        .context("the header has no cpus")?
        .iter()
        .map(|c| {
            c.as_u64()
                .and_then(|c| u32::try_from(c).ok())
                .context("a CPU that is not a number")
        })
        .collect::<Result<Vec<_>>>()?;
    let events = strings("events")?;
    let supported = match v["supported"].as_array() {
        Some(a) => a.iter().map(|b| b.as_bool().unwrap_or(true)).collect(),
        None => vec![true; events.len()],
    };
    let header = Header {
        events,
        supported,
        cgroups,
        cpus,
        clock: v["clock"].as_str().unwrap_or("sched_clock").to_string(),
        command: strings("command").unwrap_or_default(),
        started: v["started"].as_f64().unwrap_or(0.0),
        target: v["target"].as_str().unwrap_or(SYSTEM_WIDE).to_string(),
        tasks: v["tasks"].as_bool().unwrap_or(false),
    };
    check_header(&header)?;
    Ok(header)
}

/// What every reader of the slices relies on: a slot per cgroup, numbered from 0, no
/// cgroup twice, no CPU twice, whether each event was supported.
fn check_header(h: &Header) -> Result<()> {
    if h.supported.len() != h.events.len() {
        bail!(
            "the header says whether {} events were supported, for {} events",
            h.supported.len(),
            h.events.len()
        );
    }
    if h.tasks && !h.cgroups.is_empty() {
        bail!("the header records tasks and cgroups");
    }
    let mut slots = vec![false; h.cgroups.len()];
    let mut ids = HashSet::new();
    let mut paths = HashSet::new();
    for c in &h.cgroups {
        match slots.get_mut(c.slot) {
            Some(seen) if !*seen => *seen = true,
            _ => bail!(
                "the header gives cgroup '{}' slot {} of {} cgroups",
                c.name,
                c.slot,
                h.cgroups.len()
            ),
        }
        if !ids.insert(c.id) || !paths.insert(Path::new(&c.path)) {
            bail!("the header records cgroup '{}' twice", c.name);
        }
    }
    let mut cpus = HashSet::new();
    if let Some(cpu) = h.cpus.iter().find(|&&c| !cpus.insert(c)) {
        bail!("the header records CPU {cpu} twice");
    }
    Ok(())
}

fn parse_end(text: &[u8]) -> Result<End> {
    let v: Json = serde_json::from_slice(text).context("the end block is not JSON")?;
    let numbers = |key: &str| -> Vec<u64> {
        v[key]
            .as_array()
            .map(|a| a.iter().filter_map(Json::as_u64).collect())
            .unwrap_or_default()
    };
    let totals = list(&v["totals"]).iter().map(readings_from).collect();
    Ok(End {
        duration_ns: v["duration_ns"].as_u64().unwrap_or(0),
        lost: numbers("lost"),
        ring_lost: numbers("ring_lost"),
        totals,
        sent: numbers("sent"),
    })
}

fn list(j: &Json) -> &[Json] {
    j.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// One slot's readings [event][CPU] from JSON (what is not a reading reads as zero).
fn readings_from(events: &Json) -> Vec<Vec<Reading>> {
    let reading = |r: &Json| Reading {
        counter: r[0].as_u64().unwrap_or(0),
        enabled: r[1].as_u64().unwrap_or(0),
        running: r[2].as_u64().unwrap_or(0),
    };
    list(events)
        .iter()
        .map(|cpus| list(cpus).iter().map(reading).collect())
        .collect()
}

/// A kind 4 block: the cgroup that appeared, which must take slot `next`.
fn parse_began(text: &[u8], next: usize, block: u32) -> Result<RecordedCgroup> {
    let c: Json = serde_json::from_slice(text).context("not JSON")?;
    let slot = c["slot"].as_u64().context("a cgroup without its slot")?;
    if slot != next as u64 {
        bail!("a cgroup in slot {slot}, where the next is {next}");
    }
    Ok(RecordedCgroup {
        slot: next,
        id: c["id"].as_u64().context("a cgroup without its id")?,
        name: c["name"].as_str().unwrap_or_default().to_string(),
        path: c["path"].as_str().unwrap_or_default().to_string(),
        container: c["container"].as_str().map(String::from),
        began: block,
        ended: None,
    })
}

/// Where a recording's blocks come from: the file, the zstd stream in it, or (version
/// 3) the chunk being read.
enum Source<R: Read> {
    Plain(R),
    Zstd(zstd::stream::read::Decoder<'static, io::BufReader<R>>),
    Chunk(io::Cursor<Vec<u8>>),
    /// While the input changes hands.
    Taken,
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(buf),
            Source::Zstd(z) => z.read(buf),
            Source::Chunk(c) => c.read(buf),
            Source::Taken => Ok(0),
        }
    }
}

/// What one block of version 2 or 3 was.
enum Block {
    Slice,
    Cgroup,
    End,
    /// None: the input (or the chunk) ends.
    None,
}

/// A bperf.data file read one slice at a time: the memory it takes does not grow with
/// the number of slices, and no length in the file makes it allocate more than the
/// bytes that are really there (or, compressed, than its header's dimensions allow).
/// Past the header, it reads every slice it can and keeps what it could not in
/// `dropped`.
pub struct Reader<R: Read> {
    input: Source<R>,
    /// Version 3: the file's chunks, and the next one's number.
    chunks: Option<chunks::ChunkFile<R>>,
    next_chunk: u64,
    /// Where the chunk being read starts in the file.
    chunk_at: u64,
    version: u32,
    /// The offset of the next byte (past the header, of the decompressed stream; in
    /// version 3, of the chunk).
    at: u64,
    /// The length of the input, when it is a file (a pipe's is not known, nor a
    /// compressed stream's); in version 3, the chunk's.
    size: Option<u64>,
    header: Header,
    /// The recorded CPUs, sorted: a slice comes from one of them.
    cpus: Vec<u32>,
    /// The block being read; a slice's bytes.
    body: Vec<u8>,
    slice: Slice,
    decoder: compact::Decoder,
    end: Option<End>,
    /// Cgroup blocks (kinds 4 and 5) read so far.
    cgroup_blocks: u32,
    /// The counters' totals of the cgroups removed while recording, by slot.
    ended_totals: Vec<(usize, Vec<Vec<Reading>>)>,
    dropped: Dropped,
}

impl<R: Read> Reader<R> {
    /// Reads the magic number, version and header of `input`, `size` bytes long if known.
    pub fn new(mut input: R, size: Option<u64>) -> Result<Reader<R>> {
        let mut at = 0u64;
        let mut magic = [0u8; 8];
        let mut head = [0u8; 8];
        if read_some(&mut input, &mut magic, &mut at, "the magic number")? == 0 {
            bail!("the file is empty");
        }
        if &magic != MAGIC {
            bail!(
                "not a bperf record file (it does not start with {:?})",
                "BPERFREC"
            );
        }
        read_at(&mut input, &mut head, &mut at, "the header")?;
        let version = u32_at(&head, 0);
        if !(V1..=VERSION).contains(&version) {
            bail!(
                "a version {version} bperf record file: this bperf reads versions {V1} to {VERSION}"
            );
        }
        let header_at = at;
        let text = read_block(&mut input, u32_at(&head, 4), &mut at, size, "the header")?;
        if version >= 3 {
            let mut crc = [0u8; 4];
            read_at(&mut input, &mut crc, &mut at, "the header's checksum")?;
            if crc32fast::hash(&text) != u32::from_le_bytes(crc) {
                bail!("the header at byte {header_at} is damaged: its checksum does not match");
            }
        }
        let header =
            parse_header(&text).with_context(|| format!("the header at byte {header_at}"))?;
        let mut cpus = header.cpus.clone();
        cpus.sort_unstable();
        let mut reader = Reader {
            input: Source::Plain(input),
            chunks: None,
            next_chunk: 0,
            chunk_at: at,
            version,
            at,
            size,
            cpus,
            body: vec![0; slice_bytes(header.events.len())],
            slice: Slice::default(),
            decoder: compact::Decoder::new(&header.cpus, header.nr_slots(), header.events.len()),
            header,
            end: None,
            cgroup_blocks: 0,
            ended_totals: Vec::new(),
            dropped: Dropped::default(),
        };
        if version != V1 {
            reader
                .open_blocks(&text)
                .with_context(|| format!("the header at byte {header_at}"))?;
        }
        Ok(reader)
    }

    /// Reads what follows the header through the compression it names, if any: one
    /// stream (version 2) or a frame a chunk (version 3).
    fn open_blocks(&mut self, header: &[u8]) -> Result<()> {
        let v: Json = serde_json::from_slice(header).context("the header is not JSON")?;
        let zstd = match &v["compression"] {
            Json::Null => false,
            Json::String(z) if z == ZSTD => true,
            other => bail!("it is compressed with {other}, which this bperf does not read"),
        };
        if !zstd && self.version == V2 {
            return Ok(());
        }
        let Source::Plain(input) = std::mem::replace(&mut self.input, Source::Taken) else {
            unreachable!("open_blocks runs once, on the plain input")
        };
        match self.version {
            V2 => {
                let mut z = zstd::stream::read::Decoder::new(input)?;
                z.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
                self.input = Source::Zstd(z);
                self.size = None;
            }
            _ => {
                let file = chunks::ChunkFile::new(input, self.at, self.size, zstd)?;
                self.chunks = Some(file);
                self.input = Source::Chunk(io::Cursor::default());
            }
        }
        Ok(())
    }

    /// The header, with the cgroups that appeared in the slices read so far (after the
    /// last slice: every cgroup of the recording, with when each came and went).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What could not be read (after the last slice: of the whole file).
    pub fn dropped(&self) -> &Dropped {
        &self.dropped
    }

    /// The next slice; None once the end block is read (see `end`), or where reading
    /// stopped short of it (see `dropped`).
    pub fn next_slice(&mut self) -> Result<Option<&Slice>> {
        if self.end.is_some() || self.dropped.stopped.is_some() {
            return Ok(None);
        }
        let start = self.at;
        let got = match self.version {
            V1 => self.next_v1(),
            V2 => self.next_v2(),
            _ => Ok(self.next_v3()),
        };
        match got {
            Ok(true) => {
                self.dropped.slices += 1;
                Ok(Some(&self.slice))
            }
            Ok(false) => Ok(None),
            Err(e) => {
                let left = self.size.map(|size| size.saturating_sub(start));
                self.dropped.stop(start, left, format!("{e:#}"));
                Ok(None)
            }
        }
    }

    fn next_v1(&mut self) -> Result<bool> {
        let start = self.at;
        let mut block = [0u8; 8];
        if read_some(&mut self.input, &mut block, &mut self.at, "a block header")? == 0 {
            bail!("truncated: no end block after byte {start} (the recording did not finish)");
        }
        let (kind, len) = (u32_at(&block, 0), u32_at(&block, 4));
        match kind {
            SLICE if len as usize == self.body.len() => {
                read_at(&mut self.input, &mut self.body, &mut self.at, "a slice")?;
                let nr_events = self.header.events.len();
                parse_slice_into(&mut self.slice, &self.body, nr_events)
                    .with_context(|| format!("bad slice at byte {start}"))?;
                let nr_slots = self.header.nr_slots();
                if self.slice.slot as usize >= nr_slots {
                    bail!(
                        "bad slice at byte {start}: it names cgroup slot {} of {nr_slots}",
                        self.slice.slot
                    );
                }
                if self.cpus.binary_search(&self.slice.cpu).is_err() {
                    bail!(
                        "bad slice at byte {start}: it comes from CPU {}, which was not recorded",
                        self.slice.cpu
                    );
                }
                Ok(true)
            }
            SLICE => bail!(
                "bad slice at byte {start}: {len} bytes, for {} events ({} bytes)",
                self.header.events.len(),
                self.body.len()
            ),
            END => self.read_end(len, start).map(|_| false),
            k => bail!("unknown block kind {k} at byte {start}: the file is damaged"),
        }
    }

    fn next_v2(&mut self) -> Result<bool> {
        loop {
            let start = self.at;
            match self.next_block()? {
                Block::Slice => return Ok(true),
                Block::Cgroup => {}
                Block::End => return Ok(false),
                Block::None => bail!(
                    "truncated: no end block after byte {start} (the recording did not finish)"
                ),
            }
        }
    }

    /// Version 3: the next slice of a chunk whose check passed (true), or false at the
    /// end block or where reading stops.
    fn next_v3(&mut self) -> bool {
        loop {
            match self.next_block() {
                Ok(Block::Slice) => return true,
                Ok(Block::Cgroup) => {}
                Ok(Block::End) => {
                    self.after_end();
                    return false;
                }
                Ok(Block::None) => {
                    if !self.next_chunk() {
                        return false;
                    }
                }
                Err(e) => self.skip_rest_of_chunk(e),
            }
        }
    }

    /// A block of a checked chunk did not read (a file made so, or damage the check
    /// missed): the rest of the chunk is skipped, said as damage.
    fn skip_rest_of_chunk(&mut self, e: anyhow::Error) {
        let left = match &mut self.input {
            Source::Chunk(c) => {
                let left = c.get_ref().len() as u64 - c.position().min(c.get_ref().len() as u64);
                c.get_mut().clear();
                c.set_position(0);
                left
            }
            _ => 0,
        };
        let why = format!("{e:#} (in the block)");
        self.dropped.damaged(self.chunk_at, left, why);
    }

    /// The next chunk whose check passes, ready to read (true); false where reading
    /// stops: the end of the file, or what cannot be read on from.
    fn next_chunk(&mut self) -> bool {
        let limit = self.chunk_limit();
        loop {
            let Some(file) = &mut self.chunks else {
                return false;
            };
            let (at, body) = match file.next(limit) {
                chunks::Chunk::Good { at, body } => (at, body),
                chunks::Chunk::Damaged { at, bytes, why } => {
                    self.dropped.damaged(at, bytes, why);
                    self.next_chunk += 1;
                    continue;
                }
                chunks::Chunk::End { at } => {
                    let why = format!("the recording did not finish (no end block after byte {at}): what it had not yet written is dropped");
                    self.dropped.stop(at, Some(0), why);
                    return false;
                }
                chunks::Chunk::Stop { at, why } => {
                    let left = file.size.map(|size| size.saturating_sub(at));
                    self.dropped.stop(at, left, why);
                    return false;
                }
            };
            match self.begin_chunk(at, body) {
                Ok(true) => return true,
                Ok(false) => {}
                Err(why) => {
                    let left = self.chunks.as_ref().and_then(|f| f.size).map(|s| s - at);
                    self.dropped.stop(at, left, why);
                    return false;
                }
            }
        }
    }

    /// Reads the chunk `body` at byte `at` from its preface on (true); false when it is
    /// skipped as damaged; Err when reading cannot go on past it.
    fn begin_chunk(&mut self, at: u64, body: Vec<u8>) -> std::result::Result<bool, String> {
        let Ok(([number, cgroup_blocks, slices], preface)) = compact::varints::<3>(&body) else {
            self.dropped
                .damaged(at, body.len() as u64, "its preface does not read".into());
            return Ok(false);
        };
        let before = self.dropped.slices + self.dropped.damaged_slices;
        if number < self.next_chunk || slices < before {
            let why = format!("block {number} (of {} slices before) comes again", slices);
            self.dropped.damaged(at, body.len() as u64, why);
            return Ok(false);
        }
        if cgroup_blocks != u64::from(self.cgroup_blocks) {
            return Err(format!(
                "damaged: a cgroup block was in what was skipped before the block at byte {at}, so the slices after it cannot be placed"
            ));
        }
        self.dropped.damaged_slices += slices - before;
        self.next_chunk = number + 1;
        self.chunk_at = at;
        (self.at, self.size) = (preface as u64, Some(body.len() as u64));
        let mut cursor = io::Cursor::new(body);
        cursor.set_position(preface as u64);
        self.input = Source::Chunk(cursor);
        self.decoder.reset();
        Ok(true)
    }

    /// Version 3, after the end block: nothing may follow it.
    fn after_end(&mut self) {
        let Source::Chunk(c) = &self.input else {
            return;
        };
        let left = (c.get_ref().len() as u64).saturating_sub(c.position());
        if left > 0 {
            let why = "bytes after the end block".to_string();
            self.dropped.damaged(self.chunk_at, left, why);
        }
        if let Some(file) = &mut self.chunks {
            let at = file.at();
            if file.has_more() {
                let bytes = file.size.map_or(1, |size| size.saturating_sub(at));
                self.dropped
                    .damaged(at, bytes, "data after the end block".into());
            }
        }
    }

    /// The most bytes a chunk's body may take: a full chunk and the largest block.
    fn chunk_limit(&self) -> u64 {
        let slice = compact::max_bytes(self.header.events.len()) as u64;
        let block = self
            .max_end_block()
            .max(self.max_ended_block())
            .max(MAX_BEGAN_BLOCK)
            .max(slice);
        (ZSTD_CHUNK_BYTES as u64 + block + 64).min(u64::from(MAX_BLOCK))
    }

    /// One block of version 2 or 3.
    fn next_block(&mut self) -> Result<Block> {
        let start = self.at;
        let mut kind = [0u8];
        if read_some(&mut self.input, &mut kind, &mut self.at, "a block")? == 0 {
            return Ok(Block::None);
        }
        let len = read_varint(&mut self.input, &mut self.at)?;
        match kind[0] {
            CGROUP_BEGAN | CGROUP_ENDED => {
                self.read_cgroup_block(kind[0], len)
                    .with_context(|| format!("bad cgroup block at byte {start}"))?;
                Ok(Block::Cgroup)
            }
            k => self.next_v2_block(k, len, start),
        }
    }

    /// The most bytes of a kind 5 block: a reading of each event on each CPU, and room.
    fn max_ended_block(&self) -> u64 {
        let h = &self.header;
        (h.events.len() as u64)
            .saturating_mul(h.cpus.len() as u64)
            .saturating_mul(3 * 21 + 4)
            .saturating_add(4096)
    }

    /// A kind 4 or 5 block of `len` bytes: a cgroup came (it takes the next slot) or
    /// went (its totals are kept for the end).
    fn read_cgroup_block(&mut self, kind: u8, len: u64) -> Result<()> {
        let most = match kind {
            CGROUP_BEGAN => MAX_BEGAN_BLOCK,
            _ => self.max_ended_block(),
        };
        if len > most {
            bail!("it claims {len} bytes (at most {most})");
        }
        let text = read_block(
            &mut self.input,
            len as u32,
            &mut self.at,
            self.size,
            "a block",
        )?;
        self.cgroup_blocks += 1;
        let block = self.cgroup_blocks;
        if self.header.tasks {
            bail!("a cgroup in a recording of tasks");
        }
        match kind {
            CGROUP_BEGAN => {
                let c = parse_began(&text, self.header.cgroups.len(), block)?;
                self.header.cgroups.push(c);
                self.decoder.set_slots(self.header.nr_slots());
            }
            _ => {
                let v: Json = serde_json::from_slice(&text).context("not JSON")?;
                let slot = v["slot"].as_u64().context("no slot")?;
                let c = usize::try_from(slot)
                    .ok()
                    .and_then(|s| self.header.cgroups.get_mut(s))
                    .filter(|c| c.ended.is_none())
                    .with_context(|| format!("it ends slot {slot}, which is no cgroup recorded"))?;
                c.ended = Some(block);
                self.ended_totals
                    .push((c.slot, readings_from(&v["totals"])));
            }
        }
        Ok(())
    }

    fn next_v2_block(&mut self, kind: u8, len: u64, start: u64) -> Result<Block> {
        match kind {
            COMPACT_SLICE => {
                let most = compact::max_bytes(self.header.events.len());
                if len > most as u64 {
                    bail!("bad slice at byte {start}: {len} bytes (at most {most})");
                }
                self.body.resize(len as usize, 0);
                read_at(&mut self.input, &mut self.body, &mut self.at, "a slice")?;
                self.decoder
                    .decode(&self.body, &mut self.slice)
                    .with_context(|| format!("bad slice at byte {start}"))?;
                Ok(Block::Slice)
            }
            END_V2 => {
                let most = self.max_end_block();
                if len > most {
                    bail!("the end block at byte {start} claims {len} bytes (at most {most}): the file is damaged");
                }
                self.read_end(len as u32, start)?;
                Ok(Block::End)
            }
            k => bail!("unknown block kind {k} at byte {start}: the file is damaged"),
        }
    }

    /// The most bytes the end block of this header's recording can take: a reading
    /// of each event of each cgroup on each CPU, two lost counts a CPU, and room.
    fn max_end_block(&self) -> u64 {
        let h = &self.header;
        let readings = (h.cgroups.len() as u64)
            .saturating_mul(h.events.len() as u64)
            .saturating_mul(h.cpus.len() as u64);
        let bytes = readings
            .saturating_mul(3 * 21 + 4)
            .saturating_add(2 * 21 * h.cpus.len() as u64)
            .saturating_add(4096);
        bytes.min(u64::from(MAX_BLOCK))
    }

    fn read_end(&mut self, len: u32, start: u64) -> Result<()> {
        let text = read_block(
            &mut self.input,
            len,
            &mut self.at,
            self.size,
            "the end block",
        )?;
        let mut end = parse_end(&text).with_context(|| format!("the end block at byte {start}"))?;
        // The removed cgroups' totals came in their own blocks.
        if !self.ended_totals.is_empty() && end.totals.len() < self.header.cgroups.len() {
            end.totals.resize(self.header.cgroups.len(), Vec::new());
        }
        for (slot, totals) in self.ended_totals.drain(..) {
            if let Some(t) = end.totals.get_mut(slot) {
                *t = totals;
            }
        }
        if let Source::Zstd(z) = &mut self.input {
            // The stream must end here, whole: its checksum read and checked.
            let mut rest = [0u8; 64];
            let extra = z
                .read(&mut rest)
                .context("the compressed stream after the end block")?;
            if extra > 0 {
                bail!("data after the end block at byte {start}: the file is damaged");
            }
        }
        self.end = Some(end);
        Ok(())
    }

    /// The end block, once `next_slice` has said there are no more slices (None when
    /// reading stopped short of it).
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }
}

/// A varint block length at `*at` (at most 10 bytes, 64 bits).
fn read_varint(input: &mut impl Read, at: &mut u64) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let mut b = [0u8];
        read_at(input, &mut b, at, "a block's length")?;
        let bits = u64::from(b[0] & 0x7f);
        if shift == 63 && bits > 1 {
            break;
        }
        v |= bits << shift;
        if b[0] & 0x80 == 0 {
            return Ok(v);
        }
    }
    bail!("a block length of more than 64 bits at byte {at}: the file is damaged")
}

/// Fills `buf` at `*at`, or reads nothing at the end of the input (returns the bytes
/// read); the end of the input inside `buf` is said as truncated.
fn read_some(input: &mut impl Read, buf: &mut [u8], at: &mut u64, what: &str) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(0),
            Ok(0) => bail!(
                "truncated: the file ends inside {what} at byte {}",
                *at + got as u64
            ),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading {what} at byte {at}")),
        }
    }
    *at += got as u64;
    Ok(got)
}

/// Reads exactly `buf.len()` bytes at `*at`; a short file is said as truncated.
fn read_at(input: &mut impl Read, buf: &mut [u8], at: &mut u64, what: &str) -> Result<()> {
    if read_some(input, buf, at, what)? == 0 && !buf.is_empty() {
        bail!("truncated: the file ends before {what} at byte {at}");
    }
    Ok(())
}

/// Reads a block of `len` bytes at `*at`: its buffer grows with the bytes read, so a
/// damaged length cannot make it larger than the input (nor, from a pipe, than
/// MAX_PIPE_BLOCK).
fn read_block(
    input: &mut impl Read,
    len: u32,
    at: &mut u64,
    size: Option<u64>,
    what: &str,
) -> Result<Vec<u8>> {
    let most = match size {
        Some(_) => MAX_BLOCK,
        None => MAX_PIPE_BLOCK,
    };
    if len > most {
        bail!("{what} at byte {at} claims {len} bytes (at most {most}): the file is damaged");
    }
    if let Some(left) = size.map(|size| size.saturating_sub(*at)) {
        if u64::from(len) > left {
            bail!("truncated or damaged: {what} at byte {at} claims {len} bytes, {left} are left");
        }
    }
    let mut text = Vec::new();
    let got = input
        .take(u64::from(len))
        .read_to_end(&mut text)
        .with_context(|| format!("reading {what} at byte {at}"))?;
    if got < len as usize {
        bail!(
            "truncated: the file ends inside {what} at byte {}",
            *at + got as u64
        );
    }
    *at += got as u64;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            events: vec!["task-clock".into(), "context-switches".into()],
            supported: vec![true, false],
            cgroups: vec![RecordedCgroup {
                slot: 0,
                id: 42,
                name: "web".into(),
                path: "web".into(),
                container: Some("shop-web-1".into()),
                ..RecordedCgroup::default()
            }],
            cpus: vec![0, 1],
            clock: "sched_clock".into(),
            command: vec!["sleep".into(), "1".into()],
            started: 1.5,
            target: "'system wide'".into(),
            tasks: false,
        }
    }

    /// A slice as the BPF program sends it, padded as the kernel pads raw samples.
    fn raw_slice(start: u64, deltas: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [start, 1000, 42] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [1u32, 0, 7, 8] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(b"spin\0\0\0\0\0\0\0\0\0\0\0\0");
        b.extend_from_slice(&(deltas.len() as u32).to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for &d in deltas {
            for v in [d, 1000, 1000] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b.extend_from_slice(&[0, 0, 0, 0]);
        b
    }

    /// A version 1 file as bperf wrote it: the header, the slices as sent, the end.
    fn v1_file(h: &Header, raw: &[Vec<u8>], end: Option<&End>) -> Vec<u8> {
        let mut out = Vec::new();
        let text = header_json(h).to_string();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&V1.to_le_bytes());
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        for r in raw {
            let n = u32_at(r, NR_EVENTS_AT) as usize;
            let bytes = &r[..SLICE_HEAD + n * READING];
            out.extend_from_slice(&SLICE.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        if let Some(end) = end {
            let text = end_json(end);
            out.extend_from_slice(&END.to_le_bytes());
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        out
    }

    fn end() -> End {
        let r = Reading {
            counter: 3,
            enabled: 4,
            running: 5,
        };
        End {
            duration_ns: 9,
            lost: vec![0, 2],
            ring_lost: vec![0, 1],
            totals: vec![vec![vec![r; 2]; 2]],
            sent: vec![7, 9],
        }
    }

    fn file(end: bool) -> Vec<u8> {
        v1_file(
            &header(),
            &[raw_slice(5, &[1000, 1])],
            end.then(self::end).as_ref(),
        )
    }

    /// A version 3 file of `raw` slices, compressed at `zstd` if given, in chunks of
    /// `per_chunk` slices (flushed after each); without its end block unless `end`.
    fn chunked_file(raw: &[Vec<u8>], zstd: Option<i32>, per_chunk: usize, end: bool) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), &header(), zstd).unwrap();
        for (i, r) in raw.iter().enumerate() {
            assert!(w.write_slice(r).unwrap());
            if (i + 1) % per_chunk == 0 {
                w.flush().unwrap();
            }
        }
        assert!(!w.write_slice(&[0; 10]).unwrap());
        match end {
            true => w.finish(&self::end()).unwrap(),
            false => {
                w.flush().unwrap();
                w.out
            }
        }
    }

    /// A version 3 file of `raw` slices in one chunk (and the end's).
    fn v3_file(raw: &[Vec<u8>], zstd: Option<i32>, end: bool) -> Vec<u8> {
        chunked_file(raw, zstd, usize::MAX, end)
    }

    /// A version 2 file as bperf wrote it before chunks (d7f036e): the header, then
    /// every block, through one zstd stream (with its checksum) at `zstd`.
    fn v2_file(raw: &[Vec<u8>], zstd: Option<i32>) -> Vec<u8> {
        let h = header();
        let mut json = header_json(&h);
        if zstd.is_some() {
            json["compression"] = ZSTD.into();
        }
        let text = json.to_string();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&V2.to_le_bytes());
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        let mut blocks = Vec::new();
        let mut encoder = compact::Encoder::new(&h.cpus);
        let mut s = Slice::default();
        for r in raw {
            parse_slice_into(&mut s, &r[..slice_bytes(2)], 2).unwrap();
            let mut b = Vec::new();
            assert!(encoder.encode(&s, &mut b));
            write_block(&mut blocks, COMPACT_SLICE, &b).unwrap();
        }
        write_block(&mut blocks, END_V2, end_json(&end()).as_bytes()).unwrap();
        match zstd {
            None => out.extend_from_slice(&blocks),
            Some(level) => {
                let mut z = zstd::stream::write::Encoder::new(out, level).unwrap();
                z.include_checksum(true).unwrap();
                z.write_all(&blocks).unwrap();
                out = z.finish().unwrap();
            }
        }
        out
    }

    /// A recording read back: its header, slices, end (if read) and what was not read.
    fn read_with_dropped(bytes: &[u8]) -> Result<(Header, Vec<Slice>, Option<End>, Dropped)> {
        let mut reader = Reader::new(bytes, Some(bytes.len() as u64))?;
        let mut slices = Vec::new();
        while let Some(s) = reader.next_slice()? {
            slices.push(s.clone());
        }
        let (end, dropped) = (reader.end().cloned(), reader.dropped().clone());
        Ok((reader.header().clone(), slices, end, dropped))
    }

    /// Where each chunk of a plain version 3 file starts, and where the last ends.
    fn chunk_starts(file: &[u8]) -> Vec<usize> {
        let mut at = 16 + u32_at(file, 12) as usize + 4;
        let mut starts = Vec::new();
        while at < file.len() {
            starts.push(at);
            let mut len_at = at as u64 + 1;
            let len = read_varint(&mut &file[at + 1..], &mut len_at).unwrap();
            at = len_at as usize + len as usize;
        }
        starts.push(at);
        starts
    }

    /// A whole recording read back: its header, slices and end.
    /// Err when it did not read whole: the header refused, or what was dropped.
    fn read_all(input: &mut &[u8]) -> Result<(Header, Vec<Slice>, End)> {
        let (h, slices, end, dropped) = read_with_dropped(input)?;
        if let Some(line) = dropped.said() {
            bail!("{line}");
        }
        Ok((h, slices, end.expect("an end when nothing was dropped")))
    }

    #[test]
    fn a_recording_reads_back_as_written() {
        let (h, slices, end) = read_all(&mut &file(true)[..]).unwrap();
        assert_eq!(h, header());
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(
            (s.start, s.length, s.cgid, s.cpu, s.slot),
            (5, 1000, 42, 1, 0)
        );
        assert_eq!(
            (s.pid, s.tid, s.comm_str().as_ref(), s.cut),
            (7, 8, "spin", true)
        );
        assert_eq!(s.deltas[0].counter, 1000);
        assert_eq!(s.deltas[1].counter, 1);
        assert_eq!(end.lost_total(), 2);
        assert_eq!(end.totals[0][1][1].running, 5);
    }

    /// A version 1 file cut in its header is refused; cut after it, it reads up to
    /// the cut and says so.
    #[test]
    fn every_cut_short_version_1_file_reads_up_to_the_cut() {
        let whole = file(true);
        let err = read_all(&mut &whole[..0]).unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
        let header_end = 16 + u32_at(&whole, 12) as usize;
        for len in 1..whole.len() {
            let Ok((_, slices, end, dropped)) = read_with_dropped(&whole[..len]) else {
                assert!(len < header_end, "{len}: refused past the header");
                continue;
            };
            assert!(len >= header_end && end.is_none(), "{len}");
            let (at, left, why) = dropped.stopped.expect("stopped");
            assert_eq!(at + left.unwrap(), len as u64);
            assert!(why.starts_with("truncated"), "{len}: {why}");
            assert_eq!(slices.len(), usize::from(at > header_end as u64));
        }
        let err = read_all(&mut &file(false)[..]).unwrap_err().to_string();
        assert!(err.contains("no end block"), "{err}");
    }

    #[test]
    fn other_files_are_refused() {
        let err = read_all(&mut &b"PERFILE2........"[..])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a bperf record file"), "{err}");
        let mut v4 = file(true);
        v4[8] = 4;
        let err = read_all(&mut &v4[..]).unwrap_err().to_string();
        assert!(err.contains("version 4"), "{err}");
        let mut bad = file(true);
        let first_block = 16 + u32_at(&bad, 12) as usize;
        bad[first_block] = 9;
        let err = read_all(&mut &bad[..]).unwrap_err().to_string();
        assert!(err.contains("unknown block kind 9"), "{err}");
    }

    /// A length no larger than a u32 still cannot make the reader allocate what is not
    /// there: from a file, past its end; from a pipe, past its cap or its data.
    #[test]
    fn damaged_lengths_allocate_nothing_that_is_not_there() {
        let mut huge_end = v1_file(&header(), &[], None);
        huge_end.extend_from_slice(&END.to_le_bytes());
        huge_end.extend_from_slice(&u32::MAX.to_le_bytes());
        huge_end.extend_from_slice(b"{}");
        let err = read_all(&mut &huge_end[..]).unwrap_err().to_string();
        assert!(err.contains("claims 4294967295 bytes"), "{err}");
        let from_pipe = |bytes: &[u8]| -> String {
            let mut r = Reader::new(bytes, None).unwrap();
            while r.next_slice().unwrap().is_some() {}
            assert!(r.end().is_none(), "read a damaged recording whole");
            r.dropped().said().expect("said")
        };
        let err = from_pipe(&huge_end);
        assert!(err.contains("at most 268435456"), "{err}");
        let len_at = huge_end.len() - 6;
        huge_end[len_at..len_at + 4].copy_from_slice(&(100u32 << 20).to_le_bytes());
        let err = from_pipe(&huge_end);
        assert!(err.starts_with("truncated"), "{err}");
    }

    /// Slices as the BPF program sends them: two tasks taking turns on CPU 1, every
    /// seventh cut, one on CPU 0 with multiplexed times.
    fn raw_slices(n: u64) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let mut r = raw_slice(1_000_000 + i * 4000, &[3000 + i % 900, 1]);
                let tid = 8 + (i % 2) as u32;
                r[36..40].copy_from_slice(&tid.to_le_bytes());
                r[60..64].copy_from_slice(&u32::from(i % 7 == 0).to_le_bytes());
                if i % 50 == 0 {
                    r[24..28].copy_from_slice(&0u32.to_le_bytes());
                    r[SLICE_HEAD + 8..SLICE_HEAD + 16].copy_from_slice(&1500u64.to_le_bytes());
                }
                r
            })
            .collect()
    }

    /// Versions 3 and 2, plain and compressed, read back the slices version 1 keeps as
    /// sent, in a fraction of the bytes: version 3 in chunks of 500 slices (four times
    /// a second at 2,000 slices a second) within a byte a slice of version 2.
    #[test]
    fn versions_2_and_3_read_back_what_version_1_keeps() {
        let raw = raw_slices(2000);
        let v1 = v1_file(&header(), &raw, Some(&end()));
        let (h1, slices1, end1) = read_all(&mut &v1[..]).unwrap();
        let header_bytes = 16 + header_json(&header()).to_string().len();
        for zstd in [None, Some(1), Some(19)] {
            let v2 = v2_file(&raw, zstd);
            let v3 = chunked_file(&raw, zstd, 500, true);
            for (version, file) in [(2, &v2), (3, &v3)] {
                let (h, slices, end) = read_all(&mut &file[..]).unwrap();
                assert_eq!((&h1, &end1), (&h, &end), "version {version} {zstd:?}");
                assert!(
                    slices1 == slices,
                    "version {version} {zstd:?}: the slices differ"
                );
            }
            let per_slice = |f: &[u8]| (f.len() - header_bytes) as f64 / raw.len() as f64;
            let (b2, b3) = (per_slice(&v2), per_slice(&v3));
            assert!(
                b3 <= 12.0 && b3 <= b2 + 1.0,
                "{zstd:?}: {b3} bytes a slice, {b2} in version 2"
            );
        }
        assert_eq!(slices1.iter().filter(|s| s.cut).count(), 286);
    }

    /// A recording cut short anywhere past its header (killed, a full disk) reads the
    /// slices of every whole chunk before the cut, no more, and says where it stopped
    /// and the bytes it dropped, not as damage; without its end block, it says so.
    #[test]
    fn a_cut_short_recording_reads_every_whole_chunk() {
        let raw = raw_slices(20);
        for zstd in [None, Some(3)] {
            let whole = chunked_file(&raw, zstd, 5, true);
            let header_end = 16 + u32_at(&whole, 12) as usize + 4;
            let mut read = Vec::new();
            for len in 1..whole.len() {
                let Ok((_, slices, end, dropped)) = read_with_dropped(&whole[..len]) else {
                    assert!(len < header_end, "{zstd:?} {len}: refused past the header");
                    continue;
                };
                assert!(len >= header_end && end.is_none(), "{zstd:?} {len}");
                assert_eq!(slices.len() % 5, 0, "{zstd:?} {len}: part of a chunk read");
                assert_eq!(dropped.damaged, 0, "{zstd:?} {len}: {dropped:?}");
                let (at, left, why) = dropped.stopped.clone().expect("stopped");
                assert_eq!(at + left.unwrap(), len as u64, "{zstd:?} {len}: {why}");
                assert!(why.contains("did not finish"), "{zstd:?} {len}: {why}");
                let line = dropped.said().unwrap();
                let count = format!("; {} slices read", slices.len());
                assert!(line.ends_with(&count), "{line}");
                read.push(slices.len());
            }
            read.dedup();
            assert_eq!(read, [0, 5, 10, 15, 20], "{zstd:?}");
            assert!(
                read_all(&mut &whole[..]).unwrap().1
                    == read_all(&mut &v2_file(&raw, None)[..]).unwrap().1
            );
            let unfinished = chunked_file(&raw, zstd, 5, false);
            let err = read_all(&mut &unfinished[..]).unwrap_err().to_string();
            assert!(
                err.contains("no end block") && err.ends_with("20 slices read"),
                "{err}"
            );
        }
    }

    /// A chunk damaged in its middle is skipped and said, with the slices it held (the
    /// next chunk says how many came before it); the chunks after it are read.
    #[test]
    fn a_damaged_chunk_is_skipped_and_said() {
        let raw = raw_slices(20);
        for zstd in [None, Some(3)] {
            let good = chunked_file(&raw, zstd, 5, true);
            let starts = chunk_starts(&good);
            assert_eq!(
                starts.len(),
                6,
                "{zstd:?}: 4 chunks of slices, the end's, its end"
            );
            let (a, b) = (starts[1], starts[2]);
            let mut bad = good.clone();
            bad[(a + b) / 2] ^= 0x10;
            let (_, slices, end, dropped) = read_with_dropped(&bad).unwrap();
            let all = read_all(&mut &good[..]).unwrap().1;
            assert!(
                slices[..5] == all[..5] && slices[5..] == all[10..],
                "{zstd:?}"
            );
            assert_eq!(end, Some(self::end()), "{zstd:?}: the end is read");
            assert_eq!(
                (
                    dropped.damaged,
                    dropped.damaged_bytes,
                    dropped.damaged_slices
                ),
                (1, (b - a) as u64, 5),
                "{zstd:?}"
            );
            let line = dropped.said().unwrap();
            let said = format!(
                "damaged: 1 block skipped ({} bytes, 5 slices; the first at byte {a}: ",
                b - a
            );
            assert!(
                line.starts_with(&said) && line.ends_with("; 15 slices read"),
                "{line}"
            );
        }
    }

    /// A damaged header is refused in one line: there is nothing to read slices against.
    #[test]
    fn a_damaged_header_is_refused() {
        let good = v3_file(&raw_slices(3), None, true);
        let mut bad = good.clone();
        bad[20] ^= 1;
        let err = read_all(&mut &bad[..]).unwrap_err().to_string();
        assert!(err.contains("checksum does not match"), "{err}");
        let body = 16 + u32_at(&good, 12) as usize;
        let named =
            header_json(&header())
                .to_string()
                .replacen('{', "{\"compression\":\"lz4\",", 1);
        let mut other = good[..12].to_vec();
        other.extend_from_slice(&(named.len() as u32).to_le_bytes());
        other.extend_from_slice(named.as_bytes());
        other.extend_from_slice(&crc32fast::hash(named.as_bytes()).to_le_bytes());
        other.extend_from_slice(&good[body + 4..]);
        let err = format!("{:#}", read_all(&mut &other[..]).unwrap_err());
        assert!(err.contains("compressed with \"lz4\""), "{err}");
    }

    /// Version 2 files (no chunks, no checks) cut short or damaged read up to where
    /// they stop reading, and say it in one line.
    #[test]
    fn damaged_version_2_files_read_up_to_the_damage() {
        let raw = raw_slices(200);
        let v2 = v2_file(&raw, None);
        let (_, slices, end, dropped) = read_with_dropped(&v2[..v2.len() / 2]).unwrap();
        assert!(slices.len() > 50 && slices.len() < 150 && end.is_none());
        assert!(dropped.said().unwrap().contains("truncated"), "{dropped:?}");
        let good = v2_file(&raw_slices(3), None);
        let body = 16 + u32_at(&good, 12) as usize;
        let mut huge_slice = good.clone();
        huge_slice[body + 1] = 0x7f;
        let err = read_all(&mut &huge_slice[..]).unwrap_err().to_string();
        assert!(err.contains("bad slice at byte"), "{err}");
        let mut huge_end = good[..body].to_vec();
        huge_end.extend_from_slice(&[END_V2, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        let err = read_all(&mut &huge_end[..]).unwrap_err().to_string();
        assert!(
            err.contains("claims 4294967295 bytes (at most 4448)"),
            "{err}"
        );
        let mut endless_length = good[..body].to_vec();
        endless_length.extend_from_slice(&[COMPACT_SLICE; 1]);
        endless_length.extend_from_slice(&[0xff; 12]);
        let err = read_all(&mut &endless_length[..]).unwrap_err().to_string();
        assert!(err.contains("more than 64 bits"), "{err}");
        let zstd = v2_file(&raw, Some(3));
        let (_, slices, _, dropped) = read_with_dropped(&zstd[..zstd.len() - 10]).unwrap();
        assert!(
            slices.len() < 200 && dropped.stopped.is_some(),
            "{dropped:?}"
        );
    }

    /// `blocks` in one version 3 chunk after the header, its preface saying nothing came
    /// before it: a file whose blocks pass their checks whatever they say.
    fn file_of_blocks(good: &[u8], blocks: &[u8]) -> Vec<u8> {
        let mut out = good[..16 + u32_at(good, 12) as usize + 4].to_vec();
        let mut chunk = vec![0, 0, 0];
        chunk.extend_from_slice(blocks);
        let crc = crc32fast::hash(&chunk).to_le_bytes();
        write_block_of(&mut out, CHUNK, &[&crc, &chunk]).unwrap();
        out
    }

    /// A slice of `raw_slice`'s with the BPF program's slot `slot`.
    fn raw_in_slot(start: u64, slot: u32) -> Vec<u8> {
        let mut r = raw_slice(start, &[1000, 1]);
        r[28..32].copy_from_slice(&slot.to_le_bytes());
        r
    }

    /// Cgroups that come and go while recording: each takes the next slot of the file,
    /// whatever BPF slot counts it; a removed one's totals come back in the end block;
    /// a cgroup made again under a removed one's path is another, and the cgroups made
    /// under it are charged to it alone.
    #[test]
    fn cgroups_that_come_and_go_read_back_in_slots_of_their_own() {
        let r = |c| Reading {
            counter: c,
            enabled: c,
            running: c,
        };
        let cg = |id, path: &str| RecordedCgroup {
            id,
            name: path.into(),
            path: path.into(),
            ..RecordedCgroup::default()
        };
        let mut w = Writer::new(Vec::new(), &header(), None).unwrap();
        assert!(w.write_slice(&raw_in_slot(10, 0)).unwrap());
        w.began(3, &cg(77, "new")).unwrap();
        assert!(w.write_slice(&raw_in_slot(20, 3)).unwrap());
        w.ended(42, &[vec![r(5); 2], vec![r(6); 2]]).unwrap();
        assert!(
            !w.write_slice(&raw_in_slot(30, 0)).unwrap(),
            "slot 0 counts nothing"
        );
        w.began(0, &cg(88, "web")).unwrap();
        w.began(5, &cg(99, "web/x")).unwrap();
        assert!(w.write_slice(&raw_in_slot(40, 0)).unwrap());
        assert!(w.write_slice(&raw_in_slot(50, 5)).unwrap());
        let totals = w.file_totals(|slot| vec![vec![r(slot as u64); 2]; 2]);
        assert_eq!(totals.len(), 4);
        assert!(totals[0].is_empty());
        let end = End { totals, ..end() };
        let bytes = w.finish(&end).unwrap();
        let (h, slices, end) = read_all(&mut &bytes[..]).unwrap();
        let slots: Vec<u32> = slices.iter().map(|s| s.slot).collect();
        assert_eq!(slots, [0, 1, 2, 3]);
        let names: Vec<(&str, usize, u32, Option<u32>)> = h
            .cgroups
            .iter()
            .map(|c| (c.name.as_str(), c.slot, c.began, c.ended))
            .collect();
        assert_eq!(
            names,
            [
                ("web", 0, 0, Some(2)),
                ("new", 1, 1, None),
                ("web", 2, 3, None),
                ("web/x", 3, 4, None)
            ]
        );
        assert_eq!(
            end.totals[0][1][0].counter, 6,
            "the removed cgroup's totals"
        );
        assert_eq!(end.totals[1][0][0].counter, 3, "BPF slot 3's");
        assert_eq!(end.totals[2][0][0].counter, 0, "BPF slot 0's");
        let charged = crate::record::analysis::charged_slots(&h.cgroups);
        assert_eq!(charged[3], [2, 3], "web/x under the web made again only");

        // A cgroup block that names a slot out of turn, or ends one never recorded, is
        // damage, said.
        let mut blocks = Vec::new();
        let text = br#"{"slot":7,"id":1,"name":"x","path":"x"}"#;
        write_block(&mut blocks, CGROUP_BEGAN, text).unwrap();
        let err = read_all(&mut &file_of_blocks(&bytes, &blocks)[..]).unwrap_err();
        assert!(
            format!("{err:#}").contains("slot 7, where the next is 1"),
            "{err:#}"
        );
        let mut blocks = Vec::new();
        write_block(&mut blocks, CGROUP_ENDED, br#"{"slot":4,"totals":[]}"#).unwrap();
        let err = read_all(&mut &file_of_blocks(&bytes, &blocks)[..]).unwrap_err();
        assert!(format!("{err:#}").contains("no cgroup recorded"), "{err:#}");
    }

    /// A recording of tasks: slot 0 is theirs, and the header says what they were.
    #[test]
    fn a_recording_of_tasks_has_one_slot() {
        let h = Header {
            cgroups: Vec::new(),
            target: "process id '7'".into(),
            tasks: true,
            ..header()
        };
        let mut w = Writer::new(Vec::new(), &h, None).unwrap();
        assert!(w.write_slice(&raw_in_slot(10, 0)).unwrap());
        assert!(!w.write_slice(&raw_in_slot(20, 1)).unwrap());
        let end = End {
            totals: w.file_totals(|_| vec![vec![Reading::default(); 2]; 2]),
            ..end()
        };
        let bytes = w.finish(&end).unwrap();
        let (back, slices, end) = read_all(&mut &bytes[..]).unwrap();
        assert_eq!(back, h);
        assert_eq!((slices.len(), end.totals.len()), (1, 1));
    }
}
