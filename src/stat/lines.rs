//! The report's lines of a snapshot, in perf's order, and how the kernel took each
//! event (counted, refused, or in a group perf cannot read).

use anyhow::Result;

use crate::aggr;
use crate::counter::Counter;
use crate::output::{Line, Place, Value};
use crate::reading::{Reading, Snapshot};
use crate::session::plan::{groups, Plan, Series};

impl Plan {
    /// The lines of --per-socket and the like: each group's, in perf's order (group,
    /// then row; with a cgroup for every event, cgroup, then group, then event), its
    /// CPUs' counts summed. An event the machine refused was counted on no CPU.
    fn group_lines(
        &self,
        snap: &Snapshot,
        supported: &dyn Fn(usize) -> bool,
        mode: aggr::Mode,
        groups: &[aggr::Group],
    ) -> Vec<Line> {
        let blocks: Vec<&[Series]> = match self.cgroup_rows {
            true => self
                .series
                .chunk_by(|a, b| a.slot == b.slot && a.cgroup == b.cgroup)
                .collect(),
            false => vec![&self.series[..]],
        };
        let mut out = Vec::new();
        for (block, g) in blocks
            .iter()
            .flat_map(|b| groups.iter().map(move |g| (b, g)))
        {
            for row in block.iter() {
                let mut sum = Reading::default();
                g.cpus
                    .iter()
                    .for_each(|&pos| sum.add(&snap.get(row.slot, row.event, pos)));
                // A hybrid event is counted only on its core PMU's CPUs of the group.
                let ev = &self.events[row.event];
                let cpus = g.cpus.iter().filter(|&&p| ev.counts_on(self.cpus[p]));
                let counted = supported(row.event);
                out.push(Line {
                    event: row.event,
                    cgroup: row.cgroup.clone(),
                    cpu: None,
                    place: Some(Place::Group {
                        mode,
                        name: g.name.clone(),
                        cpus: if counted { cpus.count() } else { 0 },
                    }),
                    value: value_of(counted, sum),
                });
            }
        }
        out
    }

    /// Leaves out the lines of tool events that counted nothing, as perf does (its
    /// duration_time is on the first CPU only; a command may take no system time).
    fn drop_idle_tools(&self, lines: &mut Vec<Line>) {
        lines.retain(|l| {
            self.events[l.event].tool.is_none()
                || matches!(l.value, Value::Counted(r) if r.counter > 0)
        });
    }

    /// The lines of each CPU (-A), whatever the aggregation asked for.
    pub fn cpu_lines(&self, snap: &Snapshot, supported: &dyn Fn(usize) -> bool) -> Vec<Line> {
        let mut out = self.cpu_lines_all(snap, supported);
        self.drop_idle_tools(&mut out);
        out
    }

    fn cpu_lines_all(&self, snap: &Snapshot, supported: &dyn Fn(usize) -> bool) -> Vec<Line> {
        let mut out = Vec::new();
        for row in &self.series {
            for (pos, &cpu) in self.cpus.iter().enumerate() {
                out.push(Line {
                    event: row.event,
                    cgroup: row.cgroup.clone(),
                    cpu: Some(cpu),
                    place: None,
                    value: value_of(supported(row.event), snap.get(row.slot, row.event, pos)),
                });
            }
        }
        out
    }

    /// The report's lines for a snapshot, in perf's order (row, then CPU with -A, or
    /// thread with --per-thread).
    pub fn lines(
        &self,
        snap: &Snapshot,
        supported: &dyn Fn(usize) -> bool,
        per_cpu: bool,
        per_thread: bool,
    ) -> Vec<Line> {
        let mut out = self.lines_all(snap, supported, per_cpu, per_thread);
        self.drop_idle_tools(&mut out);
        out
    }

    fn lines_all(
        &self,
        snap: &Snapshot,
        supported: &dyn Fn(usize) -> bool,
        per_cpu: bool,
        per_thread: bool,
    ) -> Vec<Line> {
        if let Some((mode, groups)) = &self.aggr {
            return self.group_lines(snap, supported, *mode, groups);
        }
        if per_cpu {
            return self.cpu_lines_all(snap, supported);
        }
        let mut out = Vec::new();
        for row in &self.series {
            let value = |r| value_of(supported(row.event), r);
            if per_thread {
                for (pos, (tid, comm)) in self.threads.iter().enumerate() {
                    let reading = snap.get(row.slot, row.event, pos);
                    if self.hide_idle_threads && reading.counter == 0 {
                        continue;
                    }
                    out.push(Line {
                        event: row.event,
                        cgroup: None,
                        cpu: None,
                        place: Some(Place::Thread {
                            comm: comm.clone(),
                            tid: *tid,
                        }),
                        value: value(snap.get(row.slot, row.event, pos)),
                    });
                }
            } else {
                out.push(Line {
                    event: row.event,
                    cgroup: row.cgroup.clone(),
                    cpu: None,
                    place: None,
                    value: value(snap.total(row.slot, row.event)),
                });
            }
        }
        out
    }
}

/// A line's value: the reading of an event the machine counts, or `<not supported>`.
fn value_of(supported: bool, reading: Reading) -> Value {
    match supported {
        true => Value::Counted(reading),
        false => Value::NotSupported,
    }
}

/// How the kernel took an event, as perf reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Counted,
    /// The kernel refused to open it: `<not supported>`.
    Refused,
    /// Another member of its group was refused: perf cannot read the group, and prints
    /// `<not counted>`.
    Unread,
}

/// Each event's status once the counter is open. As the kernel does, a member of a
/// group given another cgroup than its leader's (-G) is refused; as perf does, a
/// group with a refused member is not read, and one whose leader was refused stops
/// counting before it starts.
pub(super) fn event_status(plan: &Plan, counter: &Counter) -> Result<Vec<Status>> {
    let cgroup_of = |e: usize| {
        plan.series
            .iter()
            .find(|r| r.event == e)
            .and_then(|r| r.cgroup.clone())
            .filter(|c| !c.is_empty() && !plan.cgroup_rows)
    };
    let mut status: Vec<Status> = (0..plan.events.len())
        .map(|e| match counter.supported(e) {
            true => Status::Counted,
            false => Status::Refused,
        })
        .collect();
    for (leader, members) in groups(&plan.events) {
        for &m in &members {
            if m != leader && cgroup_of(m).is_some() && cgroup_of(m) != cgroup_of(leader) {
                status[m] = Status::Refused;
            }
        }
        if status[leader] == Status::Refused {
            return Err(anyhow::anyhow!(
                "The {} event is not supported.",
                plan.events[leader].name
            ));
        }
        if members.iter().any(|&m| status[m] == Status::Refused) {
            for &m in &members {
                if status[m] == Status::Counted {
                    status[m] = Status::Unread;
                }
            }
        }
    }
    Ok(status)
}
