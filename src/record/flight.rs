//! The flight recorder's store: the newest slices of a recording and the cgroups that
//! came and went among them, kept in memory within a byte budget, oldest dropped first.
//!
//! Slices are kept as the BPF program sends them (all of one size), in segments of
//! SEGMENT_BYTES; a full segment is sealed, compressed with zstd, and the oldest sealed
//! segments go while the store holds more than its budget. Each segment keeps the
//! cgroups alive (by BPF slot) when it began, so that what it holds can be read without
//! what came before it: a replay starts with them, then gives the records in order.
//! FlightRecording is `record --flight-recorder`'s: the store of a recording, written
//! as a whole recording of the span it holds when recording ends.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;

use super::bperf_data::{sent_slice, slice_bytes, End, Header, RecordedCgroup, Slice, Writer};
use crate::reading::Reading;

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
#[derive(Clone, Debug)]
enum Change<C> {
    Began(usize, C),
    Ended(usize),
}

#[derive(Clone, Debug)]
struct Segment<C> {
    /// The cgroups alive when it began.
    alive: BTreeMap<usize, C>,
    /// Its slices, one after the other: raw while it fills, zstd's frame once sealed.
    bytes: Vec<u8>,
    sealed: bool,
    slices: usize,
    changes: Vec<(usize, Change<C>)>,
    /// The span (ns) its slices cover: the oldest's start, the newest's end.
    oldest_ns: u64,
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
            oldest_ns: u64::MAX,
            newest_ns: 0,
            weight,
        }
    }
}

/// The store: its budget, its segments (oldest first), and the cgroups alive now. A
/// clone shares the sealed segments (a snapshot being written holds them), and copies
/// the one being filled when either pushes next.
#[derive(Clone, Debug)]
pub struct FlightStore<C> {
    budget: usize,
    slice_bytes: usize,
    segments: VecDeque<Arc<Segment<C>>>,
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

    /// The span (ns) of the slices it holds, from the oldest's start to the newest's end
    /// (0 without slices).
    pub fn span_ns(&self) -> u64 {
        let oldest = self.segments.iter().map(|s| s.oldest_ns).min();
        let newest = self.segments.iter().map(|s| s.newest_ns).max();
        newest.zip(oldest).map_or(0, |(n, o)| n.saturating_sub(o))
    }

    /// The slices it holds.
    pub fn slices(&self) -> usize {
        self.segments.iter().map(|s| s.slices).sum()
    }

    /// Keeps a slice (`raw`, as the BPF program sent it) that ran from `start_ns` to
    /// `end_ns`.
    pub fn push_slice(&mut self, raw: &[u8], (start_ns, end_ns): (u64, u64)) -> io::Result<()> {
        if raw.len() != self.slice_bytes {
            let msg = format!("a slice of {} bytes, not {}", raw.len(), self.slice_bytes);
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
        }
        let open = self.open_segment()?;
        open.bytes.extend_from_slice(raw);
        open.slices += 1;
        open.oldest_ns = open.oldest_ns.min(start_ns);
        open.newest_ns = open.newest_ns.max(end_ns);
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
                let last = Arc::make_mut(last);
                let raw = last.bytes.len();
                last.bytes = zstd::bulk::compress(&last.bytes, LEVEL)?;
                last.sealed = true;
                self.held = self.held - raw + last.bytes.len();
            }
            let segment = Segment::new(self.alive.clone());
            self.held += segment.weight;
            self.segments.push_back(Arc::new(segment));
        }
        let open = self.segments.back_mut().expect("a segment was just made");
        Ok(Arc::make_mut(open))
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

/// A recording that the flight recorder keeps (the newest of its slices, within a
/// budget) until it is written, as a recording of what it holds. A clone is cheap (see
/// FlightStore): what a snapshot writes while recording goes on.
#[derive(Clone)]
pub struct FlightRecording {
    store: FlightStore<RecordedCgroup>,
    header: Header,
    zstd: Option<i32>,
    slice: Slice,
    /// The BPF slots of the cgroups alive, by cgroup id.
    slots: HashMap<u64, usize>,
}

/// What a window's slices add up to, as a recording's end says it.
struct Sums {
    /// By BPF slot: [event][CPU position].
    totals: Vec<Vec<Vec<Reading>>>,
    /// Slices per CPU position.
    sent: Vec<u64>,
    slices: u64,
}

impl Sums {
    fn zero(h: &Header) -> Vec<Vec<Reading>> {
        vec![vec![Reading::default(); h.cpus.len()]; h.events.len()]
    }

    fn restart(&mut self, h: &Header, slot: usize) {
        if self.totals.len() <= slot {
            self.totals.resize(slot + 1, Sums::zero(h));
        }
        self.totals[slot] = Sums::zero(h);
    }

    fn add(&mut self, h: &Header, s: &Slice) {
        let Some(pos) = h.cpus.iter().position(|&c| c == s.cpu) else {
            return;
        };
        if self.totals.len() <= s.slot as usize {
            self.restart(h, s.slot as usize);
        }
        let slot = &mut self.totals[s.slot as usize];
        for (event, delta) in slot.iter_mut().zip(&s.deltas) {
            event[pos].add(delta);
        }
        self.sent[pos] += 1;
        self.slices += 1;
    }
}

impl FlightRecording {
    /// The flight recorder of a recording whose header is `header` (its cgroups alive
    /// from the start), within `budget` bytes; its file compressed at `zstd`.
    pub fn new(budget: usize, header: Header, zstd: Option<i32>) -> Result<Self, TooSmall> {
        let mut store = FlightStore::new(budget, slice_bytes(header.events.len()))?;
        let mut slots = HashMap::new();
        if !header.tasks {
            for c in &header.cgroups {
                // A new store's first change cannot fail: nothing is sealed yet.
                let _ = store.began(c.slot, c.clone());
                slots.insert(c.id, c.slot);
            }
        }
        Ok(FlightRecording {
            store,
            header,
            zstd,
            slice: Slice::default(),
            slots,
        })
    }

    /// Keeps a slice as the BPF program sent it (`raw`, perhaps padded); false if it is
    /// not one of this recording's.
    pub fn push(&mut self, raw: &[u8]) -> io::Result<bool> {
        let Some(bytes) = sent_slice(raw, self.header.events.len(), &mut self.slice) else {
            return Ok(false);
        };
        let span = (self.slice.start, self.slice.start + self.slice.length);
        self.store.push_slice(bytes, span).map(|_| true)
    }

    /// From now on, BPF slot `slot` counts cgroup `c`.
    pub fn began(&mut self, slot: usize, c: &RecordedCgroup) -> io::Result<()> {
        self.slots.insert(c.id, slot);
        self.store.began(slot, c.clone())
    }

    /// Cgroup `id` was removed, its last slice kept.
    pub fn ended(&mut self, id: u64) -> io::Result<()> {
        match self.slots.remove(&id) {
            Some(slot) => self.store.ended(slot),
            None => Ok(()),
        }
    }

    /// How many older slices it dropped.
    pub fn dropped(&self) -> u64 {
        self.store.dropped()
    }

    /// Writes what it holds to `out` as a whole recording: its cgroups as they began
    /// (those alive at the start of what is held first), its slices, and an end whose
    /// totals, duration and slices sent are what those slices add up to, over the span
    /// they cover. The writer, and the slices written.
    pub fn write<W: Write>(&self, out: W) -> io::Result<(W, u64)> {
        let h = &self.header;
        let mut sums = Sums {
            totals: Vec::new(),
            sent: vec![0; h.cpus.len()],
            slices: 0,
        };
        let mut w = Writer::new(out, &self.file_header(), self.zstd)?;
        let (mut ids, mut slice, mut failed) = (HashMap::new(), Slice::default(), None);
        self.store.replay(0, |r| {
            let done = match r {
                Record::Alive(slot, c) | Record::Began(slot, c) => {
                    sums.restart(h, slot);
                    ids.insert(slot, c.id);
                    w.began(slot, c)
                }
                Record::Slice(raw) => w.write_slice(raw).map(|ours| {
                    if ours && sent_slice(raw, h.events.len(), &mut slice).is_some() {
                        sums.add(h, &slice);
                    }
                }),
                Record::Ended(slot) => match ids.remove(&slot) {
                    Some(id) => w.ended(id, &sums.totals[slot]),
                    None => Ok(()),
                },
            };
            if let Err(e) = done {
                failed.get_or_insert(e);
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let end = End {
            duration_ns: self.store.span_ns(),
            lost: vec![0; h.cpus.len()],
            ring_lost: Vec::new(),
            totals: w.file_totals(|slot| {
                let zero = || Sums::zero(h);
                sums.totals.get(slot).cloned().unwrap_or_else(zero)
            }),
            sent: sums.sent.clone(),
        };
        Ok((w.finish(&end)?, sums.slices))
    }

    /// The header of the file it writes: the recording's, its cgroups given as they
    /// begin, and its start when the span held began (as near as the wall clock now
    /// says, less the span).
    fn file_header(&self) -> Header {
        let span = self.store.span_ns() as f64 / 1e9;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Header {
            cgroups: Vec::new(),
            started: now - span,
            ..self.header.clone()
        }
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
