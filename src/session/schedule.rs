//! When a counting loop wakes besides its wakes: -I's ticks, --interval-count's limit and
//! --timeout, as perf stat keeps them.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{wait_until, Wake};

/// What a counting loop waits for next.
pub enum Next<R> {
    /// An interval ended: print it.
    Tick,
    /// --timeout passed (once).
    Timeout,
    Wake(Wake<R>),
}

/// -I's ticks from the start of counting, up to --interval-count of them, and --timeout.
pub struct Schedule {
    interval: Option<Duration>,
    next_tick: Option<Instant>,
    /// --interval-count; 0 is no limit, as in perf.
    limit: Option<u64>,
    ticks: u64,
    timeout: Option<Instant>,
}

impl Schedule {
    /// From `start`, with -I MS, --interval-count N and --timeout MS. Times too far away
    /// to represent are never reached.
    pub fn new(
        start: Instant,
        interval_ms: Option<u64>,
        count: Option<u64>,
        timeout_ms: Option<u64>,
    ) -> Schedule {
        let interval = interval_ms.map(Duration::from_millis);
        Schedule {
            interval,
            next_tick: interval.and_then(|i| start.checked_add(i)),
            limit: count.filter(|&n| n > 0),
            ticks: 0,
            timeout: timeout_ms.and_then(|ms| start.checked_add(Duration::from_millis(ms))),
        }
    }

    /// Whether intervals are still being printed.
    pub(crate) fn ticking(&self) -> bool {
        self.next_tick.is_some()
    }

    /// The next wake, tick or timeout, whichever comes first.
    pub fn wait<R>(&mut self, wakes: &mpsc::Receiver<Wake<R>>) -> Next<R> {
        let until = self.next_tick.into_iter().chain(self.timeout).min();
        if let Some(w) = wait_until(wakes, until) {
            return Next::Wake(w);
        }
        if self.timeout.is_some_and(|t| Instant::now() >= t) {
            self.timeout = None;
            return Next::Timeout;
        }
        Next::Tick
    }

    /// Counts a tick printed; true when it was the last (--interval-count): no more
    /// ticks come.
    pub(crate) fn ticked(&mut self) -> bool {
        self.ticks += 1;
        self.next_tick = self
            .next_tick
            .zip(self.interval)
            .and_then(|(t, i)| t.checked_add(i));
        if self.limit.is_some_and(|n| self.ticks >= n) {
            self.next_tick = None;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_count_stops_the_ticks_and_zero_is_no_limit() {
        let now = Instant::now();
        let mut s = Schedule::new(now, Some(10), Some(2), None);
        assert!(!s.ticked());
        assert!(s.ticked());
        assert!(!s.ticking());
        let mut s = Schedule::new(now, Some(10), Some(0), None);
        assert!((0..100).all(|_| !s.ticked()));
        assert!(s.ticking());
    }

    #[test]
    fn timeout_comes_once_then_wakes_only() {
        let (tx, rx) = mpsc::channel::<Wake>();
        let mut s = Schedule::new(Instant::now(), None, None, Some(1));
        assert!(matches!(s.wait(&rx), Next::Timeout));
        tx.send(Wake::TargetsEnded).unwrap();
        assert!(matches!(s.wait(&rx), Next::Wake(Wake::TargetsEnded)));
    }

    #[test]
    fn ticks_come_at_their_times() {
        let (_tx, rx) = mpsc::channel::<Wake>();
        let start = Instant::now();
        let mut s = Schedule::new(start, Some(5), None, Some(60_000));
        for n in 1..=3 {
            assert!(matches!(s.wait(&rx), Next::Tick));
            assert!(start.elapsed() >= Duration::from_millis(5 * n));
            s.ticked();
        }
    }
}
