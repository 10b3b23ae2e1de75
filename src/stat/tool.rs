//! perf's tool events (duration_time, user_time, system_time): times bperf takes
//! itself, put into each snapshot in place of the dummy event each is opened as.
//! bperf's own events are runq.rs's.

use std::time::Instant;

use crate::event::Tool;
use crate::reading::{Reading, Snapshot};
use crate::sys::{self, process};

/// Whose user and system times the tool events count, one per place in a snapshot.
enum TimesSource {
    /// The command, at place 0: its own times while it runs, its rusage once reaped.
    Command(libc::pid_t),
    /// -p, -t: each thread's (its process's, as /proc/TID/stat gives them).
    Threads(Vec<libc::pid_t>),
    /// Each CPU's, from /proc/stat.
    Cpus(Vec<u32>),
}

/// The tool events of a run and what their times count from.
pub(crate) struct ToolTimes {
    /// Each tool event's index among the events.
    events: Vec<(usize, Tool)>,
    start: Instant,
    source: TimesSource,
    /// The user and system times at the start, per place.
    base: Vec<(u64, u64)>,
    /// The command's user and system times, once it was reaped.
    ended: Option<(u64, u64)>,
}

impl ToolTimes {
    /// The tool events among `tools` (each event's, in order), counted from now: None
    /// when there are none.
    pub fn start(
        tools: &[Option<Tool>],
        task: Option<libc::pid_t>,
        threads: &[libc::pid_t],
        cpus: &[u32],
    ) -> Option<ToolTimes> {
        let events: Vec<(usize, Tool)> = tools
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.filter(|t| t.is_perfs()).map(|t| (i, t)))
            .collect();
        if events.is_empty() {
            return None;
        }
        let source = match task {
            Some(pid) => TimesSource::Command(pid),
            None if !threads.is_empty() => TimesSource::Threads(threads.to_vec()),
            None => TimesSource::Cpus(cpus.to_vec()),
        };
        let mut times = ToolTimes {
            events,
            start: Instant::now(),
            source,
            base: Vec::new(),
            ended: None,
        };
        // The command has not run yet: its times count from 0, as perf's do.
        if !matches!(times.source, TimesSource::Command(_)) {
            times.base = times.now();
        }
        Some(times)
    }

    /// The user and system times so far, per place.
    fn now(&self) -> Vec<(u64, u64)> {
        match &self.source {
            TimesSource::Command(pid) => vec![self
                .ended
                .or_else(|| process::cpu_times(*pid))
                .unwrap_or_default()],
            TimesSource::Threads(ids) => ids
                .iter()
                .map(|&id| process::cpu_times(id).unwrap_or_default())
                .collect(),
            TimesSource::Cpus(cpus) => sys::cpu_times(cpus),
        }
    }

    /// The command was reaped: its times are those of its rusage from now on.
    pub(crate) fn command_ended(&mut self, ru: &libc::rusage) {
        let ns = |t: libc::timeval| process::timeval(t).as_nanos() as u64;
        self.ended = Some((ns(ru.ru_utime), ns(ru.ru_stime)));
    }

    /// Puts the tool events' times so far into `snap`, in every slot: the time elapsed
    /// at place 0 only (perf's duration_time is on the first CPU), user and system
    /// times at each place.
    pub fn fill(&self, snap: &mut Snapshot) {
        let (nr_slots, nr_places) = (snap.nr_slots(), snap.nr_places());
        let elapsed = self.start.elapsed().as_nanos() as u64;
        let times = self.now();
        for &(event, tool) in &self.events {
            for place in 0..nr_places {
                let since = |i: usize| -> u64 {
                    let now = times.get(i).copied().unwrap_or_default();
                    let base = self.base.get(i).copied().unwrap_or_default();
                    match tool {
                        Tool::User => now.0.saturating_sub(base.0),
                        _ => now.1.saturating_sub(base.1),
                    }
                };
                let ns = match tool {
                    Tool::Duration if place == 0 => elapsed,
                    Tool::Duration => 0,
                    _ => since(place),
                };
                let r = Reading {
                    counter: ns,
                    enabled: ns,
                    running: ns,
                };
                for slot in 0..nr_slots {
                    snap.set(slot, event, place, r);
                }
            }
        }
    }
}
