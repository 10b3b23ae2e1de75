//! The flight recorder's store: the newest slices of a recording and the cgroups that
//! came and went among them, kept in memory within a byte budget, oldest dropped first.
//!
//! Slices are kept as the BPF program sends them (all of one size), in segments of
//! SEGMENT_BYTES; a full segment is sealed, compressed with zstd, and the oldest sealed
//! segments go while the store holds more than its budget. Each segment keeps the
//! cgroups alive (by BPF slot) when it began, so that what it holds can be read without
//! what came before it: a replay starts with them, then gives the records in order.

use std::collections::{BTreeMap, VecDeque};
use std::io;

/// The raw bytes of a segment before it is sealed.
pub const SEGMENT_BYTES: usize = 1 << 20;

/// The zstd level sealed segments are compressed at: the fastest, as a busy machine
/// seals a segment every few seconds.
const LEVEL: i32 = 1;

/// What a kept cgroup costs the budget, beyond the store's own bookkeeping.
pub trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for super::bperf_data::RecordedCgroup {
    fn weight(&self) -> usize {
        let container = self.container.as_ref().map_or(0, String::len);
        std::mem::size_of::<Self>() + self.name.len() + self.path.len() + container
    }
}

/// A record given back by a replay, oldest first.
#[derive(Debug, PartialEq)]
pub enum Record<'a, C> {
    /// A cgroup alive when the replay's first segment began, in the BPF slot given.
    Alive(usize, &'a C),
    /// A slice, as the BPF program sent it.
    Slice(&'a [u8]),
    /// A cgroup that came, in the BPF slot given.
    Began(usize, &'a C),
    /// The cgroup of the BPF slot given went (its slices are all before this).
    Ended(usize),
}

/// A change of the cgroups, after the segment's first `at` slices.
#[derive(Debug)]
enum Change<C> {
    Began(usize, C),
    Ended(usize),
}

#[derive(Debug)]
struct Segment<C> {
    /// The cgroups alive when it began.
    alive: BTreeMap<usize, C>,
    /// Its slices, one after the other: raw while it fills, zstd's frame once sealed.
    bytes: Vec<u8>,
    sealed: bool,
    slices: usize,
    changes: Vec<(usize, Change<C>)>,
    /// The newest time (ns) given with its slices.
    newest_ns: u64,
    /// What it costs the budget.
    weight: usize,
}

impl<C: Clone + Weigh> Segment<C> {
    fn new(alive: BTreeMap<usize, C>) -> Segment<C> {
        let weight = alive.values().map(Weigh::weight).sum();
        Segment {
            alive,
            bytes: Vec::new(),
            sealed: false,
            slices: 0,
            changes: Vec::new(),
            newest_ns: 0,
            weight,
        }
    }
}

/// The store: its budget, its segments (oldest first), and the cgroups alive now.
#[derive(Debug)]
pub struct FlightStore<C> {
    budget: usize,
    slice_bytes: usize,
    segments: VecDeque<Segment<C>>,
    alive: BTreeMap<usize, C>,
    held: usize,
    dropped: u64,
}

/// A budget smaller than two segments, which the store cannot keep within.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("a flight recorder of {0} bytes: it needs at least {min} (two segments)", min = 2 * SEGMENT_BYTES)]
pub struct TooSmall(pub usize);

impl<C: Clone + Weigh> FlightStore<C> {
    /// A store of at most `budget` bytes for slices of `slice_bytes` bytes each.
    pub fn new(budget: usize, slice_bytes: usize) -> Result<FlightStore<C>, TooSmall> {
        if budget < 2 * SEGMENT_BYTES || slice_bytes == 0 || slice_bytes > SEGMENT_BYTES {
            return Err(TooSmall(budget));
        }
        Ok(FlightStore {
            budget,
            slice_bytes,
            segments: VecDeque::new(),
            alive: BTreeMap::new(),
            held: 0,
            dropped: 0,
        })
    }

    /// The bytes it holds now: at most its budget, once a push has made room.
    pub fn held(&self) -> usize {
        self.held
    }

    /// How many slices it has dropped, oldest first, to stay within its budget.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The slices it holds.
    pub fn slices(&self) -> usize {
        self.segments.iter().map(|s| s.slices).sum()
    }

    /// Keeps a slice (`raw`, as the BPF program sent it) that ended at `at_ns`.
    pub fn push_slice(&mut self, raw: &[u8], at_ns: u64) -> io::Result<()> {
        if raw.len() != self.slice_bytes {
            let msg = format!("a slice of {} bytes, not {}", raw.len(), self.slice_bytes);
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
        }
        let open = self.open_segment()?;
        open.bytes.extend_from_slice(raw);
        open.slices += 1;
        open.newest_ns = open.newest_ns.max(at_ns);
        self.held += raw.len();
        self.make_room();
        Ok(())
    }

    /// The cgroup `c` came, in BPF slot `slot`. (The segments made from here on have it
    /// among their cgroups alive, not the one it comes in.)
    pub fn began(&mut self, slot: usize, c: C) -> io::Result<()> {
        let weight = c.weight();
        self.push_change(Change::Began(slot, c.clone()), weight)?;
        self.alive.insert(slot, c);
        Ok(())
    }

    /// The cgroup of BPF slot `slot` went.
    pub fn ended(&mut self, slot: usize) -> io::Result<()> {
        self.push_change(Change::Ended(slot), 0)?;
        self.alive.remove(&slot);
        Ok(())
    }

    fn push_change(&mut self, change: Change<C>, weight: usize) -> io::Result<()> {
        let weight = weight + std::mem::size_of::<(usize, Change<C>)>();
        let open = self.open_segment()?;
        open.changes.push((open.slices, change));
        open.weight += weight;
        self.held += weight;
        self.make_room();
        Ok(())
    }

    /// The segment being filled: a new one when there is none or it is full, the full
    /// one sealed.
    fn open_segment(&mut self) -> io::Result<&mut Segment<C>> {
        let full = self
            .segments
            .back()
            .is_none_or(|s| s.sealed || s.bytes.len() + self.slice_bytes > SEGMENT_BYTES);
        if full {
            if let Some(last) = self.segments.back_mut().filter(|s| !s.sealed) {
                let raw = last.bytes.len();
                last.bytes = zstd::bulk::compress(&last.bytes, LEVEL)?;
                last.sealed = true;
                self.held = self.held - raw + last.bytes.len();
            }
            let segment = Segment::new(self.alive.clone());
            self.held += segment.weight;
            self.segments.push_back(segment);
        }
        Ok(self.segments.back_mut().expect("a segment was just made"))
    }

    /// Drops the oldest segments while it holds more than its budget (never the one
    /// being filled).
    fn make_room(&mut self) {
        while self.held > self.budget && self.segments.len() > 1 {
            let old = self.segments.pop_front().expect("more than one segment");
            self.held -= old.bytes.len() + old.weight;
            self.dropped += old.slices as u64;
        }
    }

    /// Gives `f` what it holds of the segments whose newest slice ended at or after
    /// `since_ns` (all with 0): the cgroups alive when the first of them began, then
    /// its records in order. One segment is decompressed at a time.
    pub fn replay(&self, since_ns: u64, mut f: impl FnMut(Record<C>)) -> io::Result<()> {
        let mut kept = self
            .segments
            .iter()
            .skip_while(|s| s.newest_ns < since_ns && s.slices > 0)
            .peekable();
        if let Some(first) = kept.peek() {
            first
                .alive
                .iter()
                .for_each(|(slot, c)| f(Record::Alive(*slot, c)));
        }
        for s in kept {
            let raw;
            let bytes = match s.sealed {
                true => {
                    raw = zstd::bulk::decompress(&s.bytes, SEGMENT_BYTES)?;
                    &raw
                }
                false => &s.bytes,
            };
            replay_segment(s, bytes, self.slice_bytes, &mut f);
        }
        Ok(())
    }
}

/// One segment's records, its slices and changes in the order they came.
fn replay_segment<C>(
    s: &Segment<C>,
    bytes: &[u8],
    slice_bytes: usize,
    f: &mut impl FnMut(Record<C>),
) {
    let mut changes = s.changes.iter().peekable();
    for (i, raw) in bytes.chunks_exact(slice_bytes).enumerate() {
        while let Some((_, c)) = changes.next_if(|(at, _)| *at <= i) {
            f(change_record(c));
        }
        f(Record::Slice(raw));
    }
    changes.for_each(|(_, c)| f(change_record(c)));
}

fn change_record<C>(c: &Change<C>) -> Record<'_, C> {
    match c {
        Change::Began(slot, c) => Record::Began(*slot, c),
        Change::Ended(slot) => Record::Ended(*slot),
    }
}

/// A size as `--flight-recorder` takes it: bytes, or with K, M or G (powers of 1024,
/// an optional B or iB after them), e.g. `64M`.
pub fn parse_size(s: &str) -> Option<usize> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        _ => (t, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: usize = digits.parse().ok()?;
    n.checked_mul(1usize.checked_shl(shift)?)
}

#[cfg(test)]
mod tests;
