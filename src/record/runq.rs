//! `bperf report --culprits N`: whom each cgroup's tasks waited behind for a CPU, from a
//! recording of bperf's own events (`bperf/runq-wait/`, `bperf/preemptions/`).
//!
//! A slice's wait ended as the slice began, on its CPU (the BPF side counts it in the
//! slice of the task that waited). It is split among the slices that CPU ran before, as
//! far back as the wait goes; what none of them covers (an idle CPU, a task of no
//! recorded cgroup, or further back than the runs kept) goes to the rest, printed as
//! `/other`. A slice's preemptions (its task switched out still runnable) are the next
//! slice's on that CPU, if it began as the preempted one ended, else the rest's.

use std::collections::{HashMap, VecDeque};

use super::bperf_data::{Header, Slice};
use crate::bpf::runq::{Wait, Waits};
use crate::event::Tool;

/// The runs kept per CPU to split a wait among: a wait behind more runs than these
/// (many short ones) leaves its oldest part to the rest.
const RUNS_KEPT: usize = 256;
/// The most (waiting cgroup, culprit) pairs kept: what a pair beyond them waited goes to
/// the rest, as in the run-queue program's bounded matrix. A recording of thousands of
/// cgroups (or a hostile file) cannot make report hold their square.
const MAX_PAIRS: usize = 1 << 18;

/// A slice that ran on a CPU: when, and its slot.
#[derive(Clone, Copy, Debug)]
struct RanSlice {
    start: u64,
    end: u64,
    slot: usize,
}

/// A slice that ended in preemptions: its slot, how many, and when it ended.
#[derive(Clone, Copy, Debug)]
struct Preempted {
    slot: usize,
    count: u64,
    end: u64,
}

/// The waits of a recording by culprit, fed its slices in the file's order.
pub(crate) struct Culprits {
    /// The events' positions in each slice's deltas.
    wait: Option<usize>,
    preemptions: Option<usize>,
    runs: HashMap<u32, VecDeque<RanSlice>>,
    preempted: HashMap<u32, Preempted>,
    waits: Waits,
}

impl Culprits {
    /// None when the recording has neither of bperf's own events.
    pub(crate) fn new(h: &Header) -> Option<Culprits> {
        let find = |t: Tool| h.events.iter().position(|e| e == t.name());
        let (wait, preemptions) = (find(Tool::RunqWait), find(Tool::Preemptions));
        if wait.is_none() && preemptions.is_none() {
            return None;
        }
        Some(Culprits {
            wait,
            preemptions,
            runs: HashMap::new(),
            preempted: HashMap::new(),
            waits: Waits::default(),
        })
    }

    /// Adds one slice: its wait split among the runs before it on its CPU, and the
    /// preemptions of the slice before it there, if it was their culprit.
    pub(crate) fn add(&mut self, s: &Slice) {
        let slot = s.slot as usize;
        let count = |at: Option<usize>| at.and_then(|i| s.deltas.get(i)).map_or(0, |d| d.counter);
        if let Some(p) = self.preempted.remove(&s.cpu) {
            let by = (p.end == s.start).then_some(slot);
            self.charge(p.slot, by, Wait::new(0, p.count));
        }
        let mut runs = self.runs.remove(&s.cpu).unwrap_or_default();
        let (shares, rest) = split(&runs, s.start.saturating_sub(count(self.wait)), s.start);
        for (by, ns) in shares {
            self.charge(slot, Some(by), Wait::new(ns, 0));
        }
        self.charge(slot, None, Wait::new(rest, 0));
        let end = s.start.saturating_add(s.length);
        if runs.len() == RUNS_KEPT {
            runs.pop_front();
        }
        runs.push_back(RanSlice {
            start: s.start,
            end,
            slot,
        });
        self.runs.insert(s.cpu, runs);
        let preemptions = count(self.preemptions);
        if preemptions > 0 && !s.cut {
            let p = Preempted {
                slot,
                count: preemptions,
                end,
            };
            self.preempted.insert(s.cpu, p);
        }
    }

    /// Adds `w` to what `slot` waited, behind `by` (None: the rest; also the pairs that
    /// find MAX_PAIRS kept).
    fn charge(&mut self, slot: usize, by: Option<usize>, w: Wait) {
        if w == Wait::default() {
            return;
        }
        if self.waits.total.len() <= slot {
            self.waits.total.resize(slot + 1, Wait::default());
        }
        self.waits.total[slot] = self.waits.total[slot].plus(w);
        let Some(by) = by else {
            return;
        };
        let room = self.waits.by.len() < MAX_PAIRS;
        match self.waits.by.get_mut(&(slot, by)) {
            Some(pair) => *pair = pair.plus(w),
            None if room => {
                self.waits.by.insert((slot, by), w);
            }
            None => {}
        }
    }

    /// What was waited, per slot and by culprit, once every slice is added (a last
    /// slice's preemptions whose culprit never came go to the rest).
    pub(crate) fn waits(mut self) -> Waits {
        let left: Vec<Preempted> = self.preempted.drain().map(|(_, p)| p).collect();
        for p in left {
            self.charge(p.slot, None, Wait::new(0, p.count));
        }
        self.waits
    }
}

/// The wait [`from`, `to`) split among `runs` (oldest first): each run's slot and the
/// part of the wait it covers, newest first, and what none covers.
fn split(runs: &VecDeque<RanSlice>, from: u64, to: u64) -> (Vec<(usize, u64)>, u64) {
    let mut shares = Vec::new();
    let mut covered = 0;
    for r in runs.iter().rev() {
        if r.end <= from {
            break;
        }
        let part = r.end.min(to).saturating_sub(r.start.max(from));
        if part > 0 {
            shares.push((r.slot, part));
            covered += part;
        }
    }
    (shares, (to - from).saturating_sub(covered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reading::Reading;

    fn header() -> Header {
        Header {
            events: vec![
                Tool::RunqWait.name().into(),
                Tool::Preemptions.name().into(),
            ],
            supported: vec![true, true],
            cgroups: Vec::new(),
            cpus: vec![0, 1],
            clock: "sched_clock".into(),
            command: vec![],
            started: 0.0,
            target: crate::record::bperf_data::SYSTEM_WIDE.into(),
            tasks: false,
        }
    }

    fn reading(counter: u64, time: u64) -> Reading {
        Reading {
            counter,
            enabled: time,
            running: time,
        }
    }

    fn slice(cpu: u32, slot: u32, start: u64, length: u64, wait: u64, preempted: u64) -> Slice {
        Slice {
            start,
            length,
            cpu,
            slot,
            deltas: vec![reading(wait, length), reading(preempted, length)],
            ..Slice::default()
        }
    }

    /// Two cgroups taking turns on a CPU, each preempting the other: each waited
    /// behind the other alone, and each preemption is the other's.
    #[test]
    fn turns_on_one_cpu_are_each_others_culprits() {
        let mut c = Culprits::new(&header()).unwrap();
        c.add(&slice(0, 0, 1000, 100, 0, 1));
        c.add(&slice(0, 1, 1100, 100, 100, 1));
        c.add(&slice(0, 0, 1200, 100, 100, 1));
        let w = c.waits();
        assert_eq!(w.by[&(1, 0)], Wait::new(100, 1));
        assert_eq!(w.by[&(0, 1)], Wait::new(100, 1));
        // The last slice's preemption has no culprit yet; slot 1's first wait has none.
        assert_eq!(w.total[0], Wait::new(100, 2));
        assert_eq!(w.other(0), Wait::new(0, 1));
        assert_eq!(w.other(1), Wait::new(0, 0));
    }

    /// A wait longer than the runs before it: the part before them, and an idle gap,
    /// go to the rest; runs of another CPU are no culprits.
    #[test]
    fn what_no_run_covers_goes_to_the_rest() {
        let mut c = Culprits::new(&header()).unwrap();
        c.add(&slice(1, 1, 0, 5000, 0, 0));
        c.add(&slice(0, 0, 1000, 100, 0, 0));
        c.add(&slice(0, 1, 1200, 100, 0, 0));
        c.add(&slice(0, 2, 1300, 50, 500, 0));
        let w = c.waits();
        assert_eq!(w.by[&(2, 1)], Wait::new(100, 0));
        assert_eq!(w.by[&(2, 0)], Wait::new(100, 0));
        assert_eq!(w.other(2), Wait::new(300, 0));
        assert_eq!(w.total[2], Wait::new(500, 0));
    }

    /// A preempted slice followed after a gap (a task of no recorded cgroup ran): the
    /// preemption is the rest's.
    #[test]
    fn a_preemption_with_no_slice_after_it_is_the_rests() {
        let mut c = Culprits::new(&header()).unwrap();
        c.add(&slice(0, 0, 1000, 100, 0, 1));
        c.add(&slice(0, 1, 1500, 100, 0, 0));
        let w = c.waits();
        assert!(!w.by.contains_key(&(0, 1)));
        assert_eq!(w.other(0), Wait::new(0, 1));
    }

    #[test]
    fn recordings_without_the_events_have_no_culprits() {
        let mut h = header();
        h.events = vec!["task-clock".into()];
        assert!(Culprits::new(&h).is_none());
    }
}
