//! What the counter hands on: readings of one counter, and snapshots of all of them.

/// A counter reading: the raw count and the times the event was enabled and running (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Reading {
    pub counter: u64,
    pub enabled: u64,
    pub running: u64,
}

// SAFETY: three u64s, no padding, any bit pattern is valid.
unsafe impl plain::Plain for Reading {}

impl Reading {
    /// The count scaled for multiplexing, as perf does (counter * enabled / running).
    /// `None` when the event never ran: perf prints `<not counted>`. A count with no
    /// running time counted all the same: software events' times can lag their counts
    /// (an idle CPU's clock is read late), and a count only grows while running.
    pub fn scaled(&self) -> Option<f64> {
        if self.running == 0 {
            return (self.counter > 0).then_some(self.counter as f64);
        }
        if self.running >= self.enabled {
            return Some(self.counter as f64);
        }
        Some(self.counter as f64 * self.enabled as f64 / self.running as f64)
    }

    /// The count as read, not scaled (--no-scale); `None` when the event never ran.
    pub fn raw(&self) -> Option<f64> {
        (self.running > 0 || self.counter > 0).then_some(self.counter as f64)
    }

    /// Share of the enabled time the event was running, in percent (100 with no
    /// enabled time yet: nothing was multiplexed).
    pub(crate) fn pct_running(&self) -> f64 {
        if self.enabled == 0 {
            return 100.0;
        }
        100.0 * self.running as f64 / self.enabled as f64
    }

    pub fn add(&mut self, o: &Reading) {
        self.counter = self.counter.wrapping_add(o.counter);
        self.enabled = self.enabled.wrapping_add(o.enabled);
        self.running = self.running.wrapping_add(o.running);
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Reading) -> Reading {
        Reading {
            counter: self.counter.wrapping_sub(earlier.counter),
            enabled: self.enabled.wrapping_sub(earlier.enabled),
            running: self.running.wrapping_sub(earlier.running),
        }
    }
}

/// Cumulative readings since the counter started.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    nr_events: usize,
    nr_cpus: usize,
    /// index (slot * nr_events + event) * nr_cpus + cpu position; one slot when not per-cgroup.
    data: Vec<Reading>,
}

impl Snapshot {
    pub fn new(nr_slots: usize, nr_events: usize, nr_cpus: usize) -> Snapshot {
        Snapshot {
            nr_events,
            nr_cpus,
            data: vec![Reading::default(); nr_slots.max(1) * nr_events * nr_cpus],
        }
    }

    fn idx(&self, slot: usize, event: usize, cpu_pos: usize) -> usize {
        (slot * self.nr_events + event) * self.nr_cpus + cpu_pos
    }

    /// How many slots (cgroups; 1 when not per-cgroup) it holds.
    pub fn nr_slots(&self) -> usize {
        self.data.len() / (self.nr_events * self.nr_cpus).max(1)
    }

    /// How many events it holds readings of.
    pub fn nr_events(&self) -> usize {
        self.nr_events
    }

    /// How many places (CPUs, threads; 1 for a command) it holds readings of.
    pub(crate) fn nr_places(&self) -> usize {
        self.nr_cpus
    }

    /// The reading of `event` for cgroup `slot` (0 when not per-cgroup) on the CPU at `cpu_pos`.
    pub fn get(&self, slot: usize, event: usize, cpu_pos: usize) -> Reading {
        self.data[self.idx(slot, event, cpu_pos)]
    }

    pub fn set(&mut self, slot: usize, event: usize, cpu_pos: usize, r: Reading) {
        let i = self.idx(slot, event, cpu_pos);
        self.data[i] = r;
    }

    /// Takes slot `slot`'s readings from `other` (a snapshot of the same shape).
    pub(crate) fn copy_slot(&mut self, slot: usize, other: &Snapshot) {
        let range = self.idx(slot, 0, 0)..self.idx(slot + 1, 0, 0);
        self.data[range.clone()].copy_from_slice(&other.data[range]);
    }

    /// Zeroes slot `slot`'s readings.
    pub(crate) fn clear_slot(&mut self, slot: usize) {
        let range = self.idx(slot, 0, 0)..self.idx(slot + 1, 0, 0);
        self.data[range].fill(Reading::default());
    }

    /// Sum over all CPUs.
    pub fn total(&self, slot: usize, event: usize) -> Reading {
        let mut sum = Reading::default();
        for c in 0..self.nr_cpus {
            sum.add(&self.get(slot, event, c));
        }
        sum
    }

    /// `self` with `more` counted on top.
    pub fn plus(&self, more: &Snapshot) -> Snapshot {
        Snapshot {
            data: self
                .data
                .iter()
                .zip(&more.data)
                .map(|(a, b)| {
                    let mut sum = *a;
                    sum.add(b);
                    sum
                })
                .collect(),
            ..*self
        }
    }

    /// Takes the shape of `Snapshot::new(nr_slots, nr_events, nr_cpus)`, all zero,
    /// keeping its allocation when the shape is the same.
    pub(crate) fn reset(&mut self, nr_slots: usize, nr_events: usize, nr_cpus: usize) {
        self.nr_events = nr_events;
        self.nr_cpus = nr_cpus;
        self.data.clear();
        self.data
            .resize(nr_slots.max(1) * nr_events * nr_cpus, Reading::default());
    }

    /// Takes the shape of `Snapshot::new(nr_slots, nr_events, nr_cpus)`: as it was
    /// when it has it already (for a reader that sets every reading it reads), else
    /// all zero.
    pub(crate) fn reshape(&mut self, nr_slots: usize, nr_events: usize, nr_cpus: usize) {
        let same = self.nr_events == nr_events
            && self.nr_cpus == nr_cpus
            && self.data.len() == nr_slots.max(1) * nr_events * nr_cpus;
        if !same {
            self.reset(nr_slots, nr_events, nr_cpus);
        }
    }

    /// Takes away `earlier` (of the same shape) in place: `self.since(earlier)` without
    /// a new allocation.
    pub(crate) fn subtract(&mut self, earlier: &Snapshot) {
        for (a, b) in self.data.iter_mut().zip(&earlier.data) {
            *a = a.since(b);
        }
    }

    /// `subtract` for slot `slot` alone.
    pub(crate) fn subtract_slot(&mut self, slot: usize, earlier: &Snapshot) {
        let range = self.idx(slot, 0, 0)..self.idx(slot + 1, 0, 0);
        for (a, b) in self.data[range.clone()]
            .iter_mut()
            .zip(&earlier.data[range])
        {
            *a = a.since(b);
        }
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            data: self
                .data
                .iter()
                .zip(&earlier.data)
                .map(|(a, b)| a.since(b))
                .collect(),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copy_slot_takes_one_slot_only() {
        let r = |n| Reading {
            counter: n,
            enabled: n,
            running: n,
        };
        let mut a = Snapshot::new(3, 2, 2);
        let mut b = Snapshot::new(3, 2, 2);
        for slot in 0..3 {
            for e in 0..2 {
                for c in 0..2 {
                    b.set(slot, e, c, r((slot * 4 + e * 2 + c + 1) as u64));
                }
            }
        }
        a.copy_slot(1, &b);
        assert_eq!(a.total(0, 0), Reading::default());
        assert_eq!(a.total(2, 1), Reading::default());
        assert_eq!(a.get(1, 0, 0), r(5));
        assert_eq!(a.get(1, 1, 1), r(8));
    }

    use super::*;

    /// A snapshot read into again keeps its memory; one slot's delta leaves the others.
    #[test]
    fn reshape_keeps_and_subtract_slot_takes_one_slot() {
        let r = |n| Reading {
            counter: n,
            enabled: n,
            running: n,
        };
        let mut a = Snapshot::new(2, 1, 1);
        a.set(0, 0, 0, r(10));
        a.set(1, 0, 0, r(20));
        let at = a.data.as_ptr();
        a.reshape(2, 1, 1);
        assert_eq!((a.get(0, 0, 0), a.data.as_ptr()), (r(10), at));
        let mut base = Snapshot::new(2, 1, 1);
        base.set(0, 0, 0, r(4));
        base.set(1, 0, 0, r(5));
        a.subtract_slot(1, &base);
        assert_eq!((a.get(0, 0, 0), a.get(1, 0, 0)), (r(10), r(15)));
        a.reshape(3, 1, 1);
        assert_eq!(a.nr_slots(), 3);
        assert_eq!(a.total(0, 0), Reading::default());
    }

    #[test]
    fn scaling_follows_perf() {
        let r = |counter, enabled, running| Reading {
            counter,
            enabled,
            running,
        };
        assert_eq!(r(0, 0, 0).scaled(), None);
        assert_eq!(r(0, 100, 0).scaled(), None);
        assert_eq!(r(10, 100, 100).scaled(), Some(10.0));
        assert_eq!(r(10, 100, 50).scaled(), Some(20.0));
        assert_eq!(r(10, 100, 50).pct_running(), 50.0);
        // A software event whose time lags its count (an idle CPU read late).
        assert_eq!(r(7, 0, 0).scaled(), Some(7.0));
        assert_eq!(r(7, 0, 0).pct_running(), 100.0);
    }

    #[test]
    fn snapshot_indexing_and_deltas() {
        let mut a = Snapshot::new(2, 3, 2);
        let r = |c| Reading {
            counter: c,
            enabled: 10,
            running: 10,
        };
        a.set(1, 2, 1, r(5));
        a.set(1, 2, 0, r(7));
        a.set(0, 0, 0, r(1));
        assert_eq!(a.get(1, 2, 1), r(5));
        assert_eq!(a.total(1, 2).counter, 12);
        assert_eq!(a.total(1, 2).enabled, 20);
        assert_eq!(a.total(0, 0).counter, 1);
        let mut b = a.clone();
        b.set(1, 2, 1, r(9));
        let d = b.since(&a);
        assert_eq!(d.get(1, 2, 1).counter, 4);
        assert_eq!(d.get(1, 2, 0).counter, 0);
    }
}
