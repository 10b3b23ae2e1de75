//! Plain data handed from the counter to the report: readings, nothing else.

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

    /// Share of the enabled time the event was running, in percent (100 with no
    /// enabled time yet: nothing was multiplexed).
    pub fn pct_running(&self) -> f64 {
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

/// The value of one output line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// The event was opened; the reading may still show it never ran (`<not counted>`).
    Counted(Reading),
    /// The kernel refused the event on this machine (`<not supported>`).
    NotSupported,
}

/// One output line's worth of data: an event, optionally for one cgroup and/or one CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Index into the session's event list.
    pub event: usize,
    /// Cgroup name as the user gave it (perf prints it in its own column), if per-cgroup.
    pub cgroup: Option<String>,
    /// CPU number, with -A/--no-aggr.
    pub cpu: Option<u32>,
    pub value: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
