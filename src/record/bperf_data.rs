//! bperf.data: the file bperf record writes and bperf report reads (not perf's
//! perf.data, which `stat record` writes: see src/perfdata/).
//!
//! ```text
//! magic    8 bytes  "BPERFREC"
//! version  u32      1
//! length   u32      of the header
//! header   JSON     Header: events, cgroups, CPUs, clock, command, start time
//! blocks            each: kind u32, length u32, then `length` bytes
//!   kind 1  a slice: the BPF program's struct bperf_slice (src/bpf/bperf.h), as sent:
//!           start u64, length u64, cgroup id u64, cpu u32, slot u32, pid u32, tid u32,
//!           comm [16]u8, nr_events u32, flags u32, then nr_events x (counter u64,
//!           enabled u64, running u64); decoded through the skeleton's generated
//!           struct (crate::bpf::sent), so bperf.h's layout is the file's
//!   kind 2  the end, last in the file: End as JSON (duration, lost records per CPU,
//!           the counters' totals)
//! ```
//! Integers are little-endian. A file without its end block is refused: the recording
//! did not finish.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::mem::offset_of;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value as Json};

use crate::bpf::sent::{bperf_reading, bperf_slice};
use crate::reading::Reading;

pub const MAGIC: &[u8; 8] = b"BPERFREC";
pub const VERSION: u32 = 1;
const SLICE: u32 = 1;
const END: u32 = 2;
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
/// mount ("" for the root).
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCgroup {
    pub slot: usize,
    pub id: u64,
    pub name: String,
    pub path: String,
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
}

/// What the file says once recording ended.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct End {
    pub duration_ns: u64,
    /// Slices each CPU (in header order) could not send: its ring was full.
    pub lost: Vec<u64>,
    /// Slices the reader was told were dropped (PERF_RECORD_LOST), per CPU.
    pub ring_lost: Vec<u64>,
    /// The counters' own totals: [slot][event][cpu position].
    pub totals: Vec<Vec<Vec<Reading>>>,
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
    pub fn comm_str(&self) -> Cow<'_, str> {
        comm_text(&self.comm)
    }
}

/// A comm's bytes (up to the first NUL) as text.
pub fn comm_text(comm: &[u8; 16]) -> Cow<'_, str> {
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
    pub fn lost_total(&self) -> u64 {
        self.lost
            .iter()
            .sum::<u64>()
            .max(self.ring_lost.iter().sum())
    }
}

fn header_json(h: &Header) -> Json {
    let cgroups: Vec<Json> = h
        .cgroups
        .iter()
        .map(|c| json!({"slot": c.slot, "id": c.id, "name": c.name, "path": c.path}))
        .collect();
    json!({
        "events": h.events,
        "supported": h.supported,
        "cgroups": cgroups,
        "cpus": h.cpus,
        "clock": h.clock,
        "command": h.command,
        "started": h.started,
        "byte_order": "little",
    })
}

/// Writes the magic, version and header.
pub fn write_header(out: &mut impl Write, h: &Header) -> io::Result<()> {
    let text = header_json(h).to_string();
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&(text.len() as u32).to_le_bytes())?;
    out.write_all(text.as_bytes())
}

/// Writes one slice as the BPF program sent it (`raw`, perhaps padded); false if it is
/// too short to be one.
pub fn write_slice(out: &mut impl Write, raw: &[u8]) -> io::Result<bool> {
    let Some(n) = raw.get(NR_EVENTS_AT..NR_EVENTS_AT + 4) else {
        return Ok(false);
    };
    let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
    let Some(bytes) = raw.get(..SLICE_HEAD + n * READING) else {
        return Ok(false);
    };
    out.write_all(&SLICE.to_le_bytes())?;
    out.write_all(&(bytes.len() as u32).to_le_bytes())?;
    out.write_all(bytes)?;
    Ok(true)
}

/// Writes the end block.
pub fn write_end(out: &mut impl Write, end: &End) -> io::Result<()> {
    let totals: Vec<Json> = end
        .totals
        .iter()
        .map(|events| {
            json!(events
                .iter()
                .map(|cpus| cpus
                    .iter()
                    .map(|r| json!([r.counter, r.enabled, r.running]))
                    .collect::<Vec<_>>())
                .collect::<Vec<_>>())
        })
        .collect();
    let text = json!({
        "duration_ns": end.duration_ns,
        "lost": end.lost,
        "ring_lost": end.ring_lost,
        "totals": totals,
    })
    .to_string();
    out.write_all(&END.to_le_bytes())?;
    out.write_all(&(text.len() as u32).to_le_bytes())?;
    out.write_all(text.as_bytes())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The bytes of a slice block of `nr_events` events.
fn slice_bytes(nr_events: usize) -> usize {
    SLICE_HEAD + nr_events * READING
}

/// A slice block's bytes as a Slice, for `nr_events` events.
pub fn parse_slice(b: &[u8], nr_events: usize) -> Result<Slice> {
    let mut s = Slice::default();
    parse_slice_into(&mut s, b, nr_events)?;
    Ok(s)
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
    let reading = |r: &Json| Reading {
        counter: r[0].as_u64().unwrap_or(0),
        enabled: r[1].as_u64().unwrap_or(0),
        running: r[2].as_u64().unwrap_or(0),
    };
    fn list(j: &Json) -> &[Json] {
        j.as_array().map(Vec::as_slice).unwrap_or_default()
    }
    let totals = list(&v["totals"])
        .iter()
        .map(|events| {
            list(events)
                .iter()
                .map(|cpus| list(cpus).iter().map(reading).collect())
                .collect()
        })
        .collect();
    Ok(End {
        duration_ns: v["duration_ns"].as_u64().unwrap_or(0),
        lost: numbers("lost"),
        ring_lost: numbers("ring_lost"),
        totals,
    })
}

/// A bperf.data file read one slice at a time: the memory it takes does not grow with
/// the number of slices, and no length in the file makes it allocate more than the
/// bytes that are really there.
pub struct Reader<R> {
    input: R,
    /// The offset of the next byte.
    at: u64,
    /// The length of the input, when it is a file (a pipe's is not known).
    size: Option<u64>,
    header: Header,
    /// The recorded CPUs, sorted: a slice comes from one of them.
    cpus: Vec<u32>,
    /// The block being read; a slice's bytes.
    body: Vec<u8>,
    slice: Slice,
    end: Option<End>,
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
        if version != VERSION {
            bail!("a version {version} bperf record file: this bperf reads version {VERSION}");
        }
        let header_at = at;
        let text = read_block(&mut input, u32_at(&head, 4), &mut at, size, "the header")?;
        let header =
            parse_header(&text).with_context(|| format!("the header at byte {header_at}"))?;
        let mut cpus = header.cpus.clone();
        cpus.sort_unstable();
        Ok(Reader {
            input,
            at,
            size,
            cpus,
            body: vec![0; slice_bytes(header.events.len())],
            slice: Slice::default(),
            header,
            end: None,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next slice; None once the end block is read (see `end`).
    pub fn next_slice(&mut self) -> Result<Option<&Slice>> {
        if self.end.is_some() {
            return Ok(None);
        }
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
                let nr_slots = self.header.cgroups.len();
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
                Ok(Some(&self.slice))
            }
            SLICE => bail!(
                "bad slice at byte {start}: {len} bytes, for {} events ({} bytes)",
                self.header.events.len(),
                self.body.len()
            ),
            END => {
                let text = read_block(
                    &mut self.input,
                    len,
                    &mut self.at,
                    self.size,
                    "the end block",
                )?;
                let end =
                    parse_end(&text).with_context(|| format!("the end block at byte {start}"))?;
                self.end = Some(end);
                Ok(None)
            }
            k => bail!("unknown block kind {k} at byte {start}: the file is damaged"),
        }
    }

    /// The end block, once `next_slice` has said there are no more slices.
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }
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
            }],
            cpus: vec![0, 1],
            clock: "sched_clock".into(),
            command: vec!["sleep".into(), "1".into()],
            started: 1.5,
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

    fn file(end: bool) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, &header()).unwrap();
        assert!(write_slice(&mut out, &raw_slice(5, &[1000, 1])).unwrap());
        assert!(!write_slice(&mut out, &[0; 10]).unwrap());
        if end {
            let r = Reading {
                counter: 3,
                enabled: 4,
                running: 5,
            };
            let end = End {
                duration_ns: 9,
                lost: vec![0, 2],
                ring_lost: vec![0, 1],
                totals: vec![vec![vec![r; 2]; 2]],
            };
            write_end(&mut out, &end).unwrap();
        }
        out
    }

    /// A whole recording read back: its header, slices and end.
    fn read_all(input: &mut &[u8]) -> Result<(Header, Vec<Slice>, End)> {
        let mut reader = Reader::new(*input, Some(input.len() as u64))?;
        let mut slices = Vec::new();
        while let Some(s) = reader.next_slice()? {
            slices.push(s.clone());
        }
        let end = reader.end().cloned().unwrap_or_default();
        Ok((reader.header().clone(), slices, end))
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

    #[test]
    fn every_cut_short_file_is_refused() {
        let whole = file(true);
        let err = read_all(&mut &whole[..0]).unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
        for len in 1..whole.len() {
            let err = read_all(&mut &whole[..len]).unwrap_err().to_string();
            assert!(
                err.starts_with("truncated") || err.contains("not JSON"),
                "{len}: {err}"
            );
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
        let mut v2 = file(true);
        v2[8] = 2;
        let err = read_all(&mut &v2[..]).unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
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
        let mut huge_end = Vec::new();
        write_header(&mut huge_end, &header()).unwrap();
        huge_end.extend_from_slice(&END.to_le_bytes());
        huge_end.extend_from_slice(&u32::MAX.to_le_bytes());
        huge_end.extend_from_slice(b"{}");
        let err = read_all(&mut &huge_end[..]).unwrap_err().to_string();
        assert!(err.contains("claims 4294967295 bytes"), "{err}");
        let from_pipe = |bytes: &[u8]| -> String {
            let mut r = Reader::new(bytes, None).unwrap();
            loop {
                match r.next_slice() {
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("read a damaged recording"),
                    Err(e) => return e.to_string(),
                }
            }
        };
        let err = from_pipe(&huge_end);
        assert!(err.contains("at most 268435456"), "{err}");
        let len_at = huge_end.len() - 6;
        huge_end[len_at..len_at + 4].copy_from_slice(&(100u32 << 20).to_le_bytes());
        let err = from_pipe(&huge_end);
        assert!(err.starts_with("truncated"), "{err}");
    }
}
