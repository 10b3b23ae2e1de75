//! What bperf report works out from a recording: per-cgroup totals, breakdowns and
//! distributions. Each is built one slice at a time, in memory that does not grow with
//! the number of slices: plain data in, plain data out.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Result};
use rustc_hash::FxHashMap;

use super::bperf_data::{comm_text, End, Header, RecordedCgroup, Slice};
use crate::reading::Reading;

/// For each slot, the slots a slice of it is charged to: itself and its recorded
/// ancestors, as the BPF program charges them. An ancestor is the recorded cgroup of an
/// ancestor's path that was there when the cgroup came (a cgroup removed and made
/// again under the same path is another).
pub(crate) fn charged_slots(cgroups: &[RecordedCgroup]) -> Vec<Vec<usize>> {
    let nr = cgroups.iter().map(|c| c.slot + 1).max().unwrap_or(0);
    let by_path: HashMap<&Path, Vec<&RecordedCgroup>> =
        cgroups.iter().fold(HashMap::new(), |mut m, c| {
            m.entry(Path::new(&c.path)).or_default().push(c);
            m
        });
    // The root ("") is every cgroup's ancestor.
    let root = by_path.get(Path::new("")).cloned().unwrap_or_default();
    let mut out = vec![Vec::new(); nr];
    for c in cgroups {
        let there_then =
            |a: &&&RecordedCgroup| a.began <= c.began && a.ended.is_none_or(|e| e > c.began);
        let mut charged: Vec<usize> = Path::new(&c.path)
            .ancestors()
            .filter_map(|a| by_path.get(a))
            .flatten()
            .chain(&root)
            .filter(there_then)
            .map(|a| a.slot)
            .collect();
        charged.sort_unstable();
        charged.dedup();
        out[c.slot] = charged;
    }
    out
}

/// What each slot of a recording is charged to: the cgroups' [`charged_slots`], or the
/// recorded tasks' one slot.
pub(crate) fn charged_of(h: &Header) -> Vec<Vec<usize>> {
    match h.tasks {
        true => vec![vec![0]],
        false => charged_slots(&h.cgroups),
    }
}

/// The totals [slot][event] the slices add up to, charged as the BPF program charged
/// them once every cgroup of the recording is known.
pub(crate) struct SliceTotals {
    nr_events: usize,
    /// What the slices of each slot counted themselves.
    own: Vec<Vec<Reading>>,
}

impl SliceTotals {
    pub fn new(h: &Header) -> SliceTotals {
        SliceTotals {
            nr_events: h.events.len(),
            own: Vec::new(),
        }
    }

    pub fn add(&mut self, s: &Slice) {
        let slot = s.slot as usize;
        if self.own.len() <= slot {
            self.own
                .resize(slot + 1, vec![Reading::default(); self.nr_events]);
        }
        for (t, d) in self.own[slot].iter_mut().zip(&s.deltas) {
            t.add(d);
        }
    }

    /// The totals of each slot of `h`, the header with every cgroup of the recording.
    pub fn totals(self, h: &Header) -> Vec<Vec<Reading>> {
        let charged = charged_of(h);
        let mut out = vec![vec![Reading::default(); self.nr_events]; charged.len()];
        for (slot, own) in self.own.iter().enumerate() {
            for &to in charged.get(slot).into_iter().flatten() {
                for (t, d) in out[to].iter_mut().zip(own) {
                    t.add(d);
                }
            }
        }
        out
    }
}

/// The counters' totals [slot][event], summed over CPUs.
pub(crate) fn counter_totals(end: &End) -> Vec<Vec<Reading>> {
    end.totals
        .iter()
        .map(|events| {
            events
                .iter()
                .map(|cpus| {
                    let mut sum = Reading::default();
                    cpus.iter().for_each(|r| sum.add(r));
                    sum
                })
                .collect()
        })
        .collect()
}

/// What a breakdown groups slices by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    Cgroup,
    /// The container whose cgroup the slice was charged to (recorded names); `-` for
    /// cgroups that are no container's.
    Container,
    Cpu,
    Pid,
    Tid,
    Comm,
}

impl Key {
    pub fn name(self) -> &'static str {
        match self {
            Key::Cgroup => "cgroup",
            Key::Container => "container",
            Key::Cpu => "cpu",
            Key::Pid => "pid",
            Key::Tid => "tid",
            Key::Comm => "comm",
        }
    }

    /// Whether its values are numbers (CPU, pid, tid) rather than names.
    pub fn is_number(self) -> bool {
        matches!(self, Key::Cpu | Key::Pid | Key::Tid)
    }

    /// The slice's value of this key, as a number (a comm's 16 bytes are one).
    fn raw(self, s: &Slice) -> u128 {
        match self {
            Key::Cgroup | Key::Container => s.slot.into(),
            Key::Cpu => s.cpu.into(),
            Key::Pid => s.pid.into(),
            Key::Tid => s.tid.into(),
            Key::Comm => u128::from_le_bytes(s.comm),
        }
    }

    /// The value `raw` of this key as the breakdown prints it.
    fn text(self, raw: u128, names: &SlotNames) -> String {
        match self {
            Key::Cgroup => names.cgroups.get(raw as usize).cloned().unwrap_or_default(),
            Key::Container => match names.containers.get(raw as usize) {
                Some(Some(c)) => c.clone(),
                _ => "-".into(),
            },
            Key::Comm => comm_text(&raw.to_le_bytes()).into_owned(),
            _ => raw.to_string(),
        }
    }
}

/// --sort's keys: a comma-separated list of cgroup, container, cpu, pid, tid and comm.
pub(crate) fn parse_keys(s: &str) -> Result<Vec<Key>> {
    let all = [
        Key::Cgroup,
        Key::Container,
        Key::Cpu,
        Key::Pid,
        Key::Tid,
        Key::Comm,
    ];
    let mut keys = Vec::new();
    for word in s.split(',').map(str::trim) {
        let Some(&k) = all.iter().find(|k| k.name() == word) else {
            bail!("unknown sort key '{word}' (the keys: cgroup, container, cpu, pid, tid, comm)");
        };
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    Ok(keys)
}

/// The names of the recorded cgroups by slot; the recorded tasks' (the command, or
/// perf's words for -p and -t) when there are no cgroups.
pub(crate) fn slot_names(h: &Header) -> Vec<String> {
    if h.tasks {
        return vec![tasks_name(h)];
    }
    let mut names = vec![String::new(); charged_slots(&h.cgroups).len()];
    for c in &h.cgroups {
        names[c.slot] = c.name.clone();
    }
    names
}

/// What the recorded tasks are called: the command, or `process id '1234'`.
fn tasks_name(h: &Header) -> String {
    let t = &h.target;
    match t.starts_with('\'') && t.ends_with('\'') && t.len() > 1 {
        true => t[1..t.len() - 1].to_string(),
        false => t.clone(),
    }
}

/// The names of the recorded cgroups' containers by slot (None: no container's).
fn slot_containers(h: &Header) -> Vec<Option<String>> {
    let mut names = vec![None; slot_names(h).len()];
    for c in &h.cgroups {
        names[c.slot] = c.container.clone();
    }
    names
}

/// The name of each slot's timeline track: the cgroup's, and its container's after it
/// when it is one's (`docker/3474…1645 (web)`).
pub(crate) fn track_names(h: &Header) -> Vec<String> {
    let containers = slot_containers(h);
    slot_names(h)
        .into_iter()
        .zip(containers)
        .map(|(cg, c)| match c {
            Some(c) => format!("{cg} ({c})"),
            None => cg,
        })
        .collect()
}

/// What a breakdown's keys print for a slot.
struct SlotNames {
    cgroups: Vec<String>,
    containers: Vec<Option<String>>,
}

/// One row of a breakdown: its key values, and the slices that have them.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakdownRow {
    pub key: Vec<String>,
    pub slices: u64,
    /// Time the slices lasted, ns.
    pub time: u64,
    /// What each event counted in them.
    pub counts: Vec<u64>,
}

impl BreakdownRow {
    fn new(key: Vec<String>, nr_events: usize) -> BreakdownRow {
        BreakdownRow {
            key,
            slices: 0,
            time: 0,
            counts: vec![0; nr_events],
        }
    }

    /// What the group is ranked by: its count of `event` (see ranking_event), or its
    /// time without one.
    pub(crate) fn rank(&self, event: Option<usize>) -> u64 {
        event
            .and_then(|i| self.counts.get(i).copied())
            .unwrap_or(self.time)
    }

    fn merge(&mut self, o: &BreakdownRow) {
        self.slices = self.slices.saturating_add(o.slices);
        self.time = self.time.saturating_add(o.time);
        for (c, d) in self.counts.iter_mut().zip(&o.counts) {
            *c = c.saturating_add(*d);
        }
    }
}

/// The event breakdowns are ranked by: the first the machine could count (one it could
/// not count is 0 in every slice); None when it could count none.
pub(crate) fn ranking_event(h: &Header) -> Option<usize> {
    (0..h.events.len()).find(|&i| h.supported.get(i).copied().unwrap_or(true))
}

/// The slices grouped by some keys (each slice once, under its innermost cgroup): the
/// memory it takes grows with the groups, not the slices.
pub(crate) struct Breakdown {
    keys: Vec<Key>,
    nr_events: usize,
    /// The event the groups are ranked by.
    rank: Option<usize>,
    /// By the keys' raw values, in the keys' order (unused places 0).
    groups: FxHashMap<[u128; 5], BreakdownRow>,
    /// Per CPU, the group of the cut slice that goes on in the next slice there: not yet
    /// counted as a slice, since the next one may be its other part.
    open: FxHashMap<u32, [u128; 5]>,
}

impl Breakdown {
    pub fn new(h: &Header, keys: &[Key]) -> Breakdown {
        Breakdown {
            keys: keys.to_vec(),
            nr_events: h.events.len(),
            rank: ranking_event(h),
            groups: FxHashMap::default(),
            open: FxHashMap::default(),
        }
    }

    pub fn add(&mut self, s: &Slice) {
        let mut raw = [0u128; 5];
        for (r, k) in raw.iter_mut().zip(&self.keys) {
            *r = k.raw(s);
        }
        // A cut slice goes on in the next one of its CPU: in one group, the two are one
        // slice; where the next one is another group's (an exec renamed the task), each
        // group has a slice.
        if let Some(cut) = self.open.remove(&s.cpu).filter(|cut| *cut != raw) {
            self.group(cut).slices += 1;
        }
        if s.cut {
            self.open.insert(s.cpu, raw);
        }
        let g = self.group(raw);
        g.slices += u64::from(!s.cut);
        g.time = g.time.saturating_add(s.length);
        for (c, d) in g.counts.iter_mut().zip(&s.deltas) {
            *c = c.saturating_add(d.counter);
        }
    }

    fn group(&mut self, raw: [u128; 5]) -> &mut BreakdownRow {
        let nr_events = self.nr_events;
        self.groups
            .entry(raw)
            .or_insert_with(|| BreakdownRow::new(Vec::new(), nr_events))
    }

    /// The groups, the one that counted most of the ranking event first, their cgroups
    /// named as `h` (with every cgroup of the recording) names them. Groups whose keys
    /// print the same (two cgroups of one name) are one.
    pub fn groups(mut self, h: &Header) -> Vec<BreakdownRow> {
        // A cut slice the recording ended in is a slice too.
        for cut in std::mem::take(&mut self.open).into_values() {
            self.group(cut).slices += 1;
        }
        let names = SlotNames {
            cgroups: slot_names(h),
            containers: slot_containers(h),
        };
        let mut by_text: HashMap<Vec<String>, BreakdownRow> = HashMap::new();
        for (raw, g) in self.groups {
            let key: Vec<String> = self
                .keys
                .iter()
                .zip(raw)
                .map(|(k, r)| k.text(r, &names))
                .collect();
            by_text
                .entry(key.clone())
                .or_insert_with(|| BreakdownRow::new(key, self.nr_events))
                .merge(&g);
        }
        let mut out: Vec<BreakdownRow> = by_text.into_values().collect();
        let rank = self.rank;
        out.sort_by(|a, b| {
            b.rank(rank)
                .cmp(&a.rank(rank))
                .then_with(|| a.key.cmp(&b.key))
        });
        out
    }
}

/// A distribution's summary.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Spread {
    pub n: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Bits of a value's mantissa a histogram bucket keeps at first: buckets 1/1024 of
/// their values wide.
const BUCKET_BITS: u32 = 10;
/// The most buckets a histogram keeps: past it, neighbours merge (half the precision).
const MAX_BUCKETS: usize = 4096;

/// A distribution in bounded memory: values counted in buckets a thousandth of their
/// value wide (by the top bits of their floating-point form), only the buckets that
/// occur stored, each with the sum of its values. Count, mean and max are exact; a
/// quantile is the mean of the bucket it falls in: exact when the bucket holds one
/// value (small integers always do), within 0.1% otherwise. A distribution spread over
/// more than MAX_BUCKETS buckets has neighbouring buckets merged, each time halving the
/// precision, so that it never takes more than about 150 kB.
#[derive(Clone, Debug, Default)]
pub(crate) struct Histogram {
    buckets: FxHashMap<u64, (u64, f64)>,
    /// Mantissa bits dropped from BUCKET_BITS by merging.
    merged: u32,
    n: u64,
    sum: f64,
    max: f64,
}

impl Histogram {
    pub fn add(&mut self, v: f64) {
        // Non-negative floats order as their bits do.
        let v = v.max(0.0);
        let key = v.to_bits() >> (52 - BUCKET_BITS + self.merged);
        let bucket = self.buckets.entry(key).or_default();
        bucket.0 += 1;
        bucket.1 += v;
        self.n += 1;
        self.sum += v;
        self.max = self.max.max(v);
        if self.buckets.len() > MAX_BUCKETS {
            self.merge_neighbours();
        }
    }

    /// Halves the number of buckets: each pair of neighbours becomes one.
    fn merge_neighbours(&mut self) {
        self.merged += 1;
        let mut merged = FxHashMap::default();
        for (key, (count, sum)) in self.buckets.drain() {
            let b: &mut (u64, f64) = merged.entry(key >> 1).or_default();
            b.0 += count;
            b.1 += sum;
        }
        self.buckets = merged;
    }

    /// The summary; None when nothing was added.
    pub fn spread(&self) -> Option<Spread> {
        if self.n == 0 {
            return None;
        }
        let mut buckets: Vec<(u64, (u64, f64))> =
            self.buckets.iter().map(|(&k, &v)| (k, v)).collect();
        buckets.sort_unstable_by_key(|&(k, _)| k);
        // The value at rank round((n-1) q) of the values in order, as a sorted list
        // of them would give it.
        let at = |q: f64| {
            let rank = ((self.n - 1) as f64 * q).round() as u64;
            let mut seen = 0;
            for &(_, (count, sum)) in &buckets {
                seen += count;
                if seen > rank {
                    return sum / count as f64;
                }
            }
            self.max
        };
        Some(Spread {
            n: self.n,
            mean: self.sum / self.n as f64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: self.max,
        })
    }
}

/// The summary of `values`; None when there are none.
#[cfg(test)]
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut h = Histogram::default();
    values.iter().for_each(|&v| h.add(v));
    h.spread()
}

/// What a distribution is of, per slice.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Measure {
    /// The slice's length, µs.
    Length,
    /// What event i counted in it.
    Count(usize),
    /// instructions / cycles (events i and j).
    Ipc(usize, usize),
    /// task-clock (event i) over the slice's length: the CPUs it kept busy.
    Cpus(usize),
}

impl Measure {
    pub fn label(&self, events: &[String]) -> String {
        match self {
            Measure::Length => "slice-us".into(),
            Measure::Count(i) => events.get(*i).cloned().unwrap_or_default(),
            Measure::Ipc(..) => "IPC".into(),
            Measure::Cpus(_) => "CPUs".into(),
        }
    }

    /// The measure of slice `s` as a sum and, for a ratio, what it is over (0 for the
    /// others): the pieces of a cut slice add up in both, so that a whole slice's ratio
    /// is that of its pieces' sums.
    fn parts(&self, s: &Slice) -> Option<(f64, f64)> {
        let count = |i: usize| s.deltas.get(i).map(|d| d.counter as f64);
        match *self {
            Measure::Length => Some((s.length as f64 / 1e3, 0.0)),
            Measure::Count(i) => Some((count(i)?, 0.0)),
            Measure::Ipc(ins, cyc) => Some((count(ins)?, count(cyc)?)),
            Measure::Cpus(i) => Some((count(i)?, s.length as f64)),
        }
    }

    /// The value of a (whole) slice from its parts; a ratio over nothing has none.
    fn value(&self, (sum, over): (f64, f64)) -> Option<f64> {
        match self {
            Measure::Ipc(..) | Measure::Cpus(_) => (over > 0.0).then(|| sum / over),
            Measure::Length | Measure::Count(_) => Some(sum),
        }
    }
}

/// What --hist shows: slice length, each event's count, CPUs with task-clock, and IPC
/// when both cycles and instructions were recorded; of the events the machine could
/// count (`supported`, by event; an event not in it could).
pub(crate) fn measures(events: &[String], supported: &[bool]) -> Vec<Measure> {
    let counted = |i: &usize| supported.get(*i).copied().unwrap_or(true);
    let find = |name: &str| {
        events
            .iter()
            .position(|e| e.split(':').next() == Some(name))
            .filter(counted)
    };
    let mut out = vec![Measure::Length];
    out.extend((0..events.len()).filter(counted).map(Measure::Count));
    if let Some(i) = find("task-clock") {
        out.push(Measure::Cpus(i));
    }
    if let (Some(i), Some(c)) = (find("instructions"), find("cycles")) {
        out.push(Measure::Ipc(i, c));
    }
    out
}

/// The distribution of one measure over each cgroup's slices (its innermost cgroup).
struct Distribution {
    measure: Measure,
    per_slot: Vec<Histogram>,
    /// Per CPU, the cut slice that goes on in the next one there: its slot and parts.
    open: FxHashMap<u32, (u32, (f64, f64))>,
}

impl Distribution {
    fn add(&mut self, s: &Slice) {
        let Some((sum, over)) = self.measure.parts(s) else {
            return;
        };
        let slot = s.slot as usize;
        if self.per_slot.len() <= slot {
            self.per_slot.resize(slot + 1, Histogram::default());
        }
        // A cut slice is one with the next part on its CPU: lengths, counts and ratios
        // are of whole slices (an exec's cut can leave a piece of no length).
        let carried = match self.open.remove(&s.cpu) {
            Some((slot, parts)) if slot == s.slot => parts,
            // Its next part went to another cgroup: it is a whole slice of its own.
            Some((slot, parts)) => {
                self.add_whole(slot, parts);
                (0.0, 0.0)
            }
            None => (0.0, 0.0),
        };
        let parts = (carried.0 + sum, carried.1 + over);
        if s.cut {
            self.open.insert(s.cpu, (s.slot, parts));
        } else {
            self.add_whole(s.slot, parts);
        }
    }

    fn add_whole(&mut self, slot: u32, parts: (f64, f64)) {
        if let Some(v) = self.measure.value(parts) {
            self.per_slot[slot as usize].add(v);
        }
    }

    /// Adds the cut slices the recording ended in.
    fn close(&mut self) {
        for (slot, parts) in std::mem::take(&mut self.open).into_values() {
            self.add_whole(slot, parts);
        }
    }
}

/// Every measure's distribution over each cgroup's slices, built in one pass.
pub(crate) struct Distributions {
    all: Vec<Distribution>,
}

impl Distributions {
    pub fn new(measures: Vec<Measure>) -> Distributions {
        let all = measures
            .into_iter()
            .map(|measure| Distribution {
                measure,
                per_slot: Vec::new(),
                open: FxHashMap::default(),
            })
            .collect();
        Distributions { all }
    }

    pub fn add(&mut self, s: &Slice) {
        self.all.iter_mut().for_each(|d| d.add(s));
    }

    /// Adds the cut slices the recording ended in: call once every slice is in.
    pub(crate) fn close(&mut self) {
        self.all.iter_mut().for_each(Distribution::close);
    }

    /// Per measure, in the order given, the summary of each cgroup that has values,
    /// named as `h` (with every cgroup of the recording) names them.
    pub(crate) fn spreads(&self, h: &Header) -> Vec<(&Measure, Vec<(String, Spread)>)> {
        let names = slot_names(h);
        self.all
            .iter()
            .map(|d| {
                let per_cgroup = names
                    .iter()
                    .zip(&d.per_slot)
                    .filter_map(|(name, h)| h.spread().map(|s| (name.clone(), s)))
                    .collect();
                (&d.measure, per_cgroup)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::bperf_data::comm;

    fn cg(slot: usize, path: &str) -> RecordedCgroup {
        RecordedCgroup {
            slot,
            id: 100 + slot as u64,
            name: path.to_string(),
            path: path.to_string(),
            container: None,
            ..RecordedCgroup::default()
        }
    }

    /// `s`, marked cut: it goes on in the next slice of its CPU.
    fn cut(mut s: Slice) -> Slice {
        s.cut = true;
        s
    }

    fn slice(slot: u32, cpu: u32, name: &str, length: u64, count: u64) -> Slice {
        Slice {
            start: 0,
            length,
            cgid: 1,
            cpu,
            slot,
            pid: 10 + slot,
            tid: 10 + slot,
            comm: comm(name),
            cut: false,
            deltas: vec![Reading {
                counter: count,
                enabled: length,
                running: length,
            }],
        }
    }

    fn header() -> Header {
        Header {
            events: vec!["task-clock".into()],
            supported: vec![true],
            cgroups: vec![cg(0, "a"), cg(1, "a/b"), cg(2, "ab")],
            cpus: vec![0, 1],
            clock: "sched_clock".into(),
            command: vec![],
            started: 0.0,
            target: crate::record::bperf_data::SYSTEM_WIDE.into(),
            tasks: false,
        }
    }

    #[test]
    fn a_slice_counts_in_its_recorded_ancestors() {
        let charged = charged_slots(&header().cgroups);
        assert_eq!(charged, vec![vec![0], vec![0, 1], vec![2]]);
        let mut with_root = header().cgroups;
        with_root.push(cg(3, ""));
        assert_eq!(
            charged_slots(&with_root),
            vec![vec![0, 3], vec![0, 1, 3], vec![2, 3], vec![3]]
        );
        let mut totals = SliceTotals::new(&header());
        totals.add(&slice(1, 0, "x", 10, 10));
        totals.add(&slice(2, 1, "y", 5, 5));
        let t = totals.totals(&header());
        assert_eq!(
            (t[0][0].counter, t[1][0].counter, t[2][0].counter),
            (10, 10, 5)
        );
    }

    /// An event the machine could not count (cycles here) counted 0 in every slice: the
    /// groups are ranked by the first event that was counted instead.
    #[test]
    fn groups_rank_by_the_first_event_counted() {
        let h = Header {
            events: vec!["cycles".into(), "task-clock".into()],
            supported: vec![false, true],
            ..header()
        };
        let with_clock = |mut s: Slice| {
            let clock = s.deltas[0];
            s.deltas = vec![Reading::default(), clock];
            s
        };
        let mut b = Breakdown::new(&h, &[Key::Comm]);
        b.add(&with_clock(slice(0, 0, "a", 5, 5)));
        b.add(&with_clock(slice(0, 0, "b", 50, 50)));
        let groups = b.groups(&h);
        let names: Vec<&str> = groups.iter().map(|g| g.key[0].as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(ranking_event(&h), Some(1));
        assert_eq!(groups[0].rank(ranking_event(&h)), 50);
    }

    /// --sort container: slices by the recorded name of their cgroup's container, the
    /// cgroups of no container together under `-`; timeline tracks name the container
    /// after the cgroup.
    #[test]
    fn breakdowns_by_container_use_the_recorded_names() {
        let named = |slot, path: &str, c: Option<&str>| RecordedCgroup {
            container: c.map(String::from),
            ..cg(slot, path)
        };
        let h = Header {
            cgroups: vec![
                named(0, "docker/aaa", Some("web")),
                named(1, "docker/bbb", Some("db")),
                named(2, "system.slice", None),
                named(3, "user.slice", None),
            ],
            ..header()
        };
        let mut b = Breakdown::new(&h, &[Key::Container]);
        for s in [
            slice(0, 0, "x", 30, 30),
            slice(1, 0, "y", 20, 20),
            slice(2, 1, "z", 5, 5),
            slice(3, 1, "z", 4, 4),
        ] {
            b.add(&s);
        }
        let got: Vec<(String, u64)> = b
            .groups(&h)
            .into_iter()
            .map(|g| (g.key[0].clone(), g.counts[0]))
            .collect();
        assert_eq!(
            got,
            [("web".into(), 30), ("db".into(), 20), ("-".into(), 9)]
        );
        assert_eq!(
            parse_keys("container,comm").unwrap(),
            [Key::Container, Key::Comm]
        );
        assert_eq!(
            track_names(&h)[..3],
            ["docker/aaa (web)", "docker/bbb (db)", "system.slice"]
        );
    }

    #[test]
    fn breakdowns_group_and_sort() {
        let slices = [
            slice(0, 0, "x", 10, 10),
            slice(0, 1, "x", 30, 30),
            slice(2, 1, "y", 25, 25),
        ];
        let by = |keys: &[Key]| {
            let mut b = Breakdown::new(&header(), keys);
            slices.iter().for_each(|s| b.add(s));
            b.groups(&header())
        };
        let by_comm = by(&[Key::Comm]);
        assert_eq!(by_comm[0].key, vec!["x"]);
        assert_eq!((by_comm[0].slices, by_comm[0].counts[0]), (2, 40));
        let by_cpu = by(&parse_keys("cpu,cgroup").unwrap());
        assert_eq!(by_cpu[0].key, vec!["1", "a"]);
        assert_eq!(by_cpu[1].key, vec!["1", "ab"]);
        assert!(parse_keys("cpu,nope").is_err());
    }

    #[test]
    fn a_cut_slice_is_one_with_its_next_part_only_in_the_same_group() {
        // CPU 0: sh cut by a read, sh goes on, then is cut by its exec into x.
        // CPU 1: y, cut as the recording ended.
        let slices = [
            cut(slice(0, 0, "sh", 10, 10)),
            cut(slice(0, 0, "sh", 5, 5)),
            slice(0, 0, "x", 20, 20),
            cut(slice(2, 1, "y", 7, 7)),
        ];
        let by = |keys: &[Key]| {
            let mut b = Breakdown::new(&header(), keys);
            slices.iter().for_each(|s| b.add(s));
            let groups = b.groups(&header());
            let rows: Vec<(String, u64, u64)> = groups
                .into_iter()
                .map(|g| (g.key.join(","), g.slices, g.time))
                .collect();
            rows
        };
        let row = |k: &str, n, t| (k.to_string(), n, t);
        assert_eq!(
            by(&[Key::Comm]),
            [row("x", 1, 20), row("sh", 1, 15), row("y", 1, 7)]
        );
        assert_eq!(by(&[Key::Cpu]), [row("0", 1, 35), row("1", 1, 7)]);
    }

    #[test]
    fn a_cut_piece_whose_next_part_went_elsewhere_is_a_whole_slice() {
        let (first, last) = (
            cut(slice(0, 0, "x", 4000, 4000)),
            cut(slice(2, 0, "y", 1000, 1000)),
        );
        let mut d = Distributions::new(vec![Measure::Length]);
        [first, slice(2, 0, "y", 6000, 6000), last]
            .iter()
            .for_each(|s| d.add(s));
        d.close();
        let spreads = d.spreads(&header());
        let lengths: Vec<(u64, f64)> = spreads[0].1.iter().map(|(_, s)| (s.n, s.max)).collect();
        assert_eq!(lengths, [(1, 4.0), (2, 6.0)]);
    }

    #[test]
    fn distributions_join_cut_slices() {
        // The fourth is cut by an exec where the run queue's clock had not moved: no
        // length, 900 ns of task-clock; the rest of its slice 2100 ns long with 1100 ns.
        let slices = [
            cut(slice(0, 0, "x", 4000, 4000)),
            slice(0, 0, "x", 6000, 6000),
            slice(0, 0, "x", 1000, 1000),
            cut(slice(0, 0, "sh", 0, 900)),
            slice(0, 0, "x", 2100, 1100),
        ];
        let mut d = Distributions::new(vec![Measure::Length, Measure::Cpus(0)]);
        slices.iter().for_each(|s| d.add(s));
        let spreads = d.spreads(&header());
        let (_, lengths) = &spreads[0];
        assert_eq!(lengths.len(), 1);
        assert_eq!(lengths[0].1.n, 3);
        assert_eq!(lengths[0].1.max, 10.0);
        // Ratios of whole slices too: 2000 ns of task-clock in 2100, not 1100 in 2100
        // and a piece of no length.
        let (_, cpus) = &spreads[1];
        assert_eq!(cpus[0].1.n, 3);
        let mean = (2.0 + 2000.0 / 2100.0) / 3.0;
        assert!((cpus[0].1.mean - mean).abs() < 1e-9, "{:?}", cpus[0].1);
        assert_eq!(cpus[0].1.max, 1.0);
        let names: Vec<String> = ["task-clock", "cycles", "instructions"]
            .map(String::from)
            .into();
        let labels: Vec<String> = measures(&names, &[])
            .iter()
            .map(|m| m.label(&names))
            .collect();
        assert_eq!(
            labels,
            [
                "slice-us",
                "task-clock",
                "cycles",
                "instructions",
                "CPUs",
                "IPC"
            ]
        );
        // An event the machine could not count has no distribution (it counted 0 in
        // every slice), and IPC none without both of its events.
        let labels: Vec<String> = measures(&names, &[true, false, true])
            .iter()
            .map(|m| m.label(&names))
            .collect();
        assert_eq!(labels, ["slice-us", "task-clock", "instructions", "CPUs"]);
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.p50, s.max, s.mean), (2.0, 3.0, 2.0));
    }

    /// Quantiles from the histogram against those of the sorted values: within a
    /// thousandth, over values spread across six orders of magnitude.
    #[test]
    fn histogram_quantiles_are_within_a_thousandth() {
        let mut x = 88172645463325252u64;
        let mut values: Vec<f64> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 1_000_000) as f64 + (x % 1000) as f64 / 1000.0
            })
            .collect();
        let s = spread(&values).unwrap();
        values.sort_by(f64::total_cmp);
        let exact = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        for (q, got) in [(0.5, s.p50), (0.9, s.p90), (0.99, s.p99)] {
            let want = exact(q);
            assert!(
                (got - want).abs() <= want / 1000.0,
                "p{q}: {got} for {want}"
            );
        }
        assert_eq!(s.max, values[values.len() - 1]);
        assert_eq!(s.n, 100_000);
        // Values spread wider than MAX_BUCKETS buckets: fewer, wider buckets.
        let mut wide = Histogram::default();
        (0..1_000_000u64).for_each(|v| wide.add(v as f64));
        assert!(wide.buckets.len() <= MAX_BUCKETS, "{}", wide.buckets.len());
        let p50 = wide.spread().unwrap().p50;
        assert!((p50 - 500_000.0).abs() < 500_000.0 / 100.0, "{p50}");
        // Small integers are exact.
        let counts = spread(&[1.0, 1.0, 2.0, 7.0, 1023.0]).unwrap();
        assert_eq!((counts.p50, counts.p90, counts.p99), (2.0, 1023.0, 1023.0));
    }
}
