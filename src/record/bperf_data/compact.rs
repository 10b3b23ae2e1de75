//! Version 2's slices: each encoded against what its CPU and the file said before.
//!
//! ```text
//! varint  form: bit 0 cut; bit 1 plain times (every delta's enabled and running are
//!         the slice's length); bit 2 a new task; the rest the CPU's position in the
//!         header's CPUs
//! a new task: varint slot, varint cgroup id, varint pid, varint tid, u8 comm length,
//!         the comm's bytes; it takes the next number in the task table
//! else:   varint the task's number in the table
//! varint  zigzag(start - end of the previous slice of this CPU; 0 before its first)
//! varint  length
//! each event: varint counter; unless plain times, varint zigzag(enabled - length),
//!         varint zigzag(running - enabled)
//! ```
//! Varints are LEB128 (7 bits a byte, low first, at most 10 bytes); zigzag maps signed
//! differences (two's complement, wrapping) to small unsigned numbers. The task table
//! is a task's slot, cgroup id, pid, tid and comm, numbered from 0 in the order they are
//! first written; when it holds MAX_TASKS, the next new task starts it again (numbered
//! 0), on both sides. A ping-pong's slice of two events takes about 10 bytes. Version 3
//! starts both sides again (no task, every previous end 0) at each block of slices.

use std::hash::Hash;

use anyhow::{bail, Result};
use rustc_hash::FxHashMap;

use super::Slice;
use crate::reading::Reading;

/// The most tasks the table holds before it starts again.
pub(crate) const MAX_TASKS: usize = 1 << 16;
/// The most bytes a slice of `nr_events` events can take.
pub(crate) fn max_bytes(nr_events: usize) -> usize {
    // form, slot, cgroup id, pid, tid, comm, start, length; three varints an event.
    10 + 10 + 10 + 5 + 5 + 17 + 10 + 10 + nr_events * 30
}

const CUT: u64 = 1;
const PLAIN_TIMES: u64 = 2;
const NEW_TASK: u64 = 4;
const FORM_BITS: u32 = 3;

/// Who ran a slice: what every slice of a task repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Task {
    slot: u32,
    cgid: u64,
    pid: u32,
    tid: u32,
    comm: [u8; 16],
}

impl Task {
    fn of(s: &Slice) -> Task {
        Task {
            slot: s.slot,
            cgid: s.cgid,
            pid: s.pid,
            tid: s.tid,
            comm: s.comm,
        }
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` as a varint.
pub(super) fn put(out: &mut Vec<u8>, v: u64) {
    prost::encoding::encode_varint(v, out);
}

/// The longest varint: 10 bytes of 7 bits hold 64.
pub(super) const MAX_VARINT: usize = 10;

/// Decodes the varint at the start of `bytes` with prost (which bounds it to 10 bytes
/// and 64 bits); returns it and the bytes it took. A varint cut short by the end of
/// `bytes` says so; one too long says whether it is past 64 bits or past 10 bytes.
pub(super) fn take_varint(bytes: &[u8]) -> Result<(u64, usize)> {
    let mut rest = bytes;
    if let Ok(v) = prost::encoding::decode_varint(&mut rest) {
        return Ok((v, bytes.len() - rest.len()));
    }
    match bytes.get(MAX_VARINT - 1) {
        None => bail!("it ends inside a field"),
        Some(last) if last & 0x7f > 1 => bail!("a number of more than 64 bits"),
        Some(_) => bail!("a number of more than 10 bytes"),
    }
}

/// The difference `a - b` as the file keeps it.
fn put_diff(out: &mut Vec<u8>, a: u64, b: u64) {
    put(out, zigzag(a.wrapping_sub(b) as i64));
}

/// Whether every delta's times are the slice's length.
fn plain_times(s: &Slice) -> bool {
    s.deltas
        .iter()
        .all(|d| d.enabled == s.length && d.running == s.length)
}

/// Encodes slices; one per file, fed the slices in the file's order.
pub(crate) struct Encoder {
    /// The header's CPUs, and each one's previous slice's end.
    cpus: FxHashMap<u32, (usize, u64)>,
    tasks: FxHashMap<Task, u64>,
}

impl Encoder {
    pub fn new(cpus: &[u32]) -> Encoder {
        Encoder {
            cpus: cpus.iter().enumerate().map(|(i, &c)| (c, (i, 0))).collect(),
            tasks: FxHashMap::default(),
        }
    }

    /// Starts again as at the file's start: no task known, every CPU's previous end 0.
    /// Version 3 does it at each block of slices, so that a block is read on its own.
    pub(crate) fn reset(&mut self) {
        self.tasks.clear();
        self.cpus.values_mut().for_each(|(_, end)| *end = 0);
    }

    /// Appends `s` to `out`; false (nothing appended) when its CPU is not the header's.
    pub(crate) fn encode(&mut self, s: &Slice, out: &mut Vec<u8>) -> bool {
        let Some((position, prev_end)) = self.cpus.get_mut(&s.cpu) else {
            return false;
        };
        let task = Task::of(s);
        let known = self.tasks.get(&task).copied();
        let plain = plain_times(s);
        let mut form = (*position as u64) << FORM_BITS;
        form |= if s.cut { CUT } else { 0 };
        form |= if plain { PLAIN_TIMES } else { 0 };
        form |= if known.is_none() { NEW_TASK } else { 0 };
        put(out, form);
        match known {
            Some(number) => put(out, number),
            None => {
                if self.tasks.len() >= MAX_TASKS {
                    self.tasks.clear();
                }
                self.tasks.insert(task, self.tasks.len() as u64);
                put(out, task.slot.into());
                put(out, task.cgid);
                put(out, task.pid.into());
                put(out, task.tid.into());
                let len = task.comm.iter().position(|&c| c == 0).unwrap_or(16);
                out.push(len as u8);
                out.extend_from_slice(&task.comm[..len]);
            }
        }
        put_diff(out, s.start, *prev_end);
        put(out, s.length);
        for d in &s.deltas {
            put(out, d.counter);
            if !plain {
                put_diff(out, d.enabled, s.length);
                put_diff(out, d.running, d.enabled);
            }
        }
        *prev_end = s.start.wrapping_add(s.length);
        true
    }
}

/// A slice's bytes being read.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8> {
        let Some(&b) = self.bytes.get(self.at) else {
            bail!("it ends inside a field");
        };
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64> {
        let (v, took) = take_varint(&self.bytes[self.at..])?;
        self.at += took;
        Ok(v)
    }

    fn varint_u32(&mut self, what: &str) -> Result<u32> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| anyhow::anyhow!("{what} {v} is past 32 bits"))
    }

    fn diff_from(&mut self, base: u64) -> Result<u64> {
        Ok(base.wrapping_add(unzigzag(self.varint()?) as u64))
    }
}

/// The `N` varints at the start of `bytes`, and the bytes they took.
pub(super) fn varints<const N: usize>(bytes: &[u8]) -> Result<([u64; N], usize)> {
    let mut c = Cursor { bytes, at: 0 };
    let mut out = [0; N];
    for v in &mut out {
        *v = c.varint()?;
    }
    Ok((out, c.at))
}

/// Decodes slices; one per file, fed the slices in the file's order.
pub(crate) struct Decoder {
    cpus: Vec<u32>,
    prev_end: Vec<u64>,
    tasks: Vec<Task>,
    nr_slots: usize,
    nr_events: usize,
}

impl Decoder {
    pub fn new(cpus: &[u32], nr_slots: usize, nr_events: usize) -> Decoder {
        Decoder {
            cpus: cpus.to_vec(),
            prev_end: vec![0; cpus.len()],
            tasks: Vec::new(),
            nr_slots,
            nr_events,
        }
    }

    /// Starts again as the encoder did (see Encoder::reset).
    pub(crate) fn reset(&mut self) {
        self.tasks.clear();
        self.prev_end.fill(0);
    }

    /// Slices may name slots below `nr_slots` from now on (cgroups came).
    pub(crate) fn set_slots(&mut self, nr_slots: usize) {
        self.nr_slots = nr_slots;
    }

    /// Decodes `bytes`, all of one slice, into `s` (whose buffers are reused).
    pub(crate) fn decode(&mut self, bytes: &[u8], s: &mut Slice) -> Result<()> {
        let mut c = Cursor { bytes, at: 0 };
        let form = c.varint()?;
        let position = usize::try_from(form >> FORM_BITS).unwrap_or(usize::MAX);
        let Some(&cpu) = self.cpus.get(position) else {
            bail!("it comes from CPU #{position} of {}", self.cpus.len());
        };
        let task = match form & NEW_TASK {
            0 => {
                let number = c.varint()?;
                let known = usize::try_from(number).ok().and_then(|n| self.tasks.get(n));
                let Some(&task) = known else {
                    bail!("it names task {number} of {}", self.tasks.len());
                };
                task
            }
            _ => self.new_task(&mut c)?,
        };
        let start = c.diff_from(self.prev_end[position])?;
        let length = c.varint()?;
        s.deltas.clear();
        for _ in 0..self.nr_events {
            let counter = c.varint()?;
            let (enabled, running) = match form & PLAIN_TIMES {
                0 => {
                    let enabled = c.diff_from(length)?;
                    (enabled, c.diff_from(enabled)?)
                }
                _ => (length, length),
            };
            s.deltas.push(Reading {
                counter,
                enabled,
                running,
            });
        }
        if c.at != bytes.len() {
            bail!("{} bytes are left over", bytes.len() - c.at);
        }
        self.prev_end[position] = start.wrapping_add(length);
        (s.start, s.length, s.cpu, s.cut) = (start, length, cpu, form & CUT != 0);
        (s.slot, s.cgid, s.pid, s.tid, s.comm) =
            (task.slot, task.cgid, task.pid, task.tid, task.comm);
        Ok(())
    }

    fn new_task(&mut self, c: &mut Cursor) -> Result<Task> {
        let slot = c.varint_u32("a slot")?;
        if slot as usize >= self.nr_slots {
            bail!("it names cgroup slot {slot} of {}", self.nr_slots);
        }
        let cgid = c.varint()?;
        let pid = c.varint_u32("a pid")?;
        let tid = c.varint_u32("a tid")?;
        let len = c.byte()? as usize;
        if len > 16 {
            bail!("a comm of {len} bytes (at most 16)");
        }
        let mut comm = [0u8; 16];
        for b in comm.iter_mut().take(len) {
            *b = c.byte()?;
        }
        if comm[..len].contains(&0) {
            bail!("a comm with a NUL inside");
        }
        let task = Task {
            slot,
            cgid,
            pid,
            tid,
            comm,
        };
        if self.tasks.len() >= MAX_TASKS {
            self.tasks.clear();
        }
        self.tasks.push(task);
        Ok(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(i: u64) -> Slice {
        let length = 1000 + i * 37 % 5000;
        Slice {
            start: 1_000_000_000_000 + i * 10_000,
            length,
            cgid: 7000 + i % 3,
            cpu: [4, 9][(i % 2) as usize],
            slot: (i % 3) as u32,
            pid: 100 + (i % 3) as u32,
            tid: 200 + (i % 3) as u32,
            comm: crate::record::bperf_data::comm(&format!("t{}", i % 3)),
            cut: i % 5 == 0,
            deltas: vec![
                Reading {
                    counter: length,
                    enabled: length,
                    running: length,
                },
                Reading {
                    counter: i,
                    enabled: length + (i % 2),
                    running: length.saturating_sub(i % 7),
                },
            ],
        }
    }

    fn round_trip(slices: &[Slice]) -> (Vec<Slice>, usize) {
        let mut enc = Encoder::new(&[4, 9]);
        let mut dec = Decoder::new(&[4, 9], 3, 2);
        let mut bytes = 0;
        let out = slices
            .iter()
            .map(|s| {
                let mut b = Vec::new();
                assert!(enc.encode(s, &mut b));
                assert!(b.len() <= max_bytes(2), "{}", b.len());
                bytes += b.len();
                let mut back = Slice::default();
                dec.decode(&b, &mut back).unwrap();
                back
            })
            .collect();
        (out, bytes)
    }

    #[test]
    fn slices_decode_as_they_were() {
        let slices: Vec<Slice> = (0..1000).map(slice).collect();
        let (back, bytes) = round_trip(&slices);
        assert_eq!(back, slices);
        assert!(bytes < 1000 * 20, "{bytes} bytes");
    }

    #[test]
    fn extremes_decode_as_they_were() {
        let mut s = slice(1);
        s.start = u64::MAX;
        s.length = u64::MAX;
        s.cgid = u64::MAX;
        s.pid = u32::MAX;
        s.comm = *b"0123456789abcdef";
        s.deltas[1] = Reading {
            counter: u64::MAX,
            enabled: 0,
            running: u64::MAX,
        };
        let mut t = slice(3);
        t.start = 0;
        let (back, _) = round_trip(&[s.clone(), t.clone(), s.clone()]);
        assert_eq!(back, [s.clone(), t, s]);
    }

    /// Past MAX_TASKS tasks both sides start the table again, and agree on the numbers.
    #[test]
    fn the_task_table_starts_again_on_both_sides() {
        let slices: Vec<Slice> = (0..MAX_TASKS as u64 * 2 + 10)
            .map(|i| {
                let mut s = slice(i % 7);
                s.tid = (i % (MAX_TASKS as u64 + 3)) as u32;
                s
            })
            .collect();
        let (back, _) = round_trip(&slices);
        assert!(back == slices);
    }

    #[test]
    fn damaged_slices_are_refused() {
        let mut enc = Encoder::new(&[4, 9]);
        let mut b = Vec::new();
        enc.encode(&slice(1), &mut b);
        for len in 0..b.len() {
            let mut dec = Decoder::new(&[4, 9], 3, 2);
            assert!(dec.decode(&b[..len], &mut Slice::default()).is_err());
        }
        let mut long = b.clone();
        long.push(0);
        let mut dec = Decoder::new(&[4, 9], 3, 2);
        assert!(dec.decode(&long, &mut Slice::default()).is_err());
        // A damaged slice ends the file: the decoder is not used after it.
        let mut dec = Decoder::new(&[4, 9], 3, 2);
        let mut unknown_task = Vec::new();
        put(&mut unknown_task, 0);
        put(&mut unknown_task, 5);
        let err = dec
            .decode(&unknown_task, &mut Slice::default())
            .unwrap_err();
        assert!(err.to_string().contains("task 5 of 0"), "{err}");
        let mut far_cpu = Vec::new();
        put(&mut far_cpu, 9 << FORM_BITS);
        let err = dec.decode(&far_cpu, &mut Slice::default()).unwrap_err();
        assert!(err.to_string().contains("CPU #9 of 2"), "{err}");
        let err = Cursor {
            bytes: &[0xff; 11],
            at: 0,
        }
        .varint()
        .unwrap_err();
        assert!(err.to_string().contains("64 bits"), "{err}");
    }

    /// Varints are LEB128 of at most 10 bytes and 64 bits; a non-minimal one is read,
    /// one cut short, past 64 bits or past 10 bytes is refused with what it is.
    #[test]
    fn varints_are_bounded_to_10_bytes_and_64_bits() {
        for v in [0, 1, 127, 128, 300, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let len = (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
            assert_eq!(b.len(), len, "{v}");
            b.push(0x55);
            assert_eq!(take_varint(&b).unwrap(), (v, len), "{v}");
        }
        assert_eq!(take_varint(&[0x80, 0x00, 7]).unwrap(), (0, 2));
        let mut top = vec![0xff; 9];
        top.push(0x01);
        assert_eq!(take_varint(&top).unwrap(), (u64::MAX, 10));
        let err = |bytes: &[u8]| take_varint(bytes).unwrap_err().to_string();
        for cut in [&[][..], &[0x80], &[0xff; 9]] {
            assert_eq!(err(cut), "it ends inside a field", "{cut:?}");
        }
        top[9] = 0x02;
        assert_eq!(err(&top), "a number of more than 64 bits");
        assert_eq!(err(&[0xff; 11]), "a number of more than 64 bits");
        for last in [0x80, 0x81] {
            let mut long = vec![0x80; 9];
            long.extend_from_slice(&[last, 0x00]);
            assert_eq!(err(&long), "a number of more than 10 bytes", "{last:#x}");
            assert_eq!(err(&long[..10]), "a number of more than 10 bytes");
        }
    }
}
