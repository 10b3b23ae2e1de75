//! The report's lines of a snapshot, in perf's order, and how the kernel took each
//! event (counted, refused, or in a group perf cannot read).

use anyhow::Result;

use crate::aggr;
use crate::counter::Counter;
use crate::event::Tool;
use crate::output::{Line, Place, Value};
use crate::perf_version::PerfVersion;
use crate::reading::{Reading, Snapshot};
use crate::session::plan::{groups, NoSupportedEvents, Plan, Refusal, Series};

/// The lines of --per-socket and the like: each group's, in perf's order (group,
/// then row; with a cgroup for every event, cgroup, then group, then event), its
/// CPUs' counts summed. An event the machine refused was counted on no CPU.
fn group_lines(
    plan: &Plan,
    snap: &Snapshot,
    supported: &dyn Fn(usize) -> bool,
    mode: aggr::Mode,
    groups: &[aggr::Group],
) -> Vec<Line> {
    let blocks: Vec<&[Series]> = match plan.cgroup_rows {
        true => plan
            .series
            .chunk_by(|a, b| a.slot == b.slot && a.cgroup == b.cgroup)
            .collect(),
        false => vec![&plan.series[..]],
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
            let ev = &plan.events[row.event];
            let cpus = g.cpus.iter().filter(|&&p| ev.counts_on(plan.cpus[p]));
            let counted = supported(row.event);
            out.push(Line {
                event: row.event,
                cgroup: row.cgroup.clone(),
                container: row.container.clone(),
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
fn drop_idle_tools(plan: &Plan, lines: &mut Vec<Line>) {
    lines.retain(|l| {
        !plan.events[l.event].tool.is_some_and(Tool::is_perfs)
            || matches!(l.value, Value::Counted(r) if r.counter > 0)
    });
}

/// The lines of each CPU (-A), whatever the aggregation asked for.
pub(crate) fn cpu_lines(
    plan: &Plan,
    snap: &Snapshot,
    supported: &dyn Fn(usize) -> bool,
) -> Vec<Line> {
    let mut out = cpu_lines_all(plan, snap, supported);
    drop_idle_tools(plan, &mut out);
    out
}

fn cpu_lines_all(plan: &Plan, snap: &Snapshot, supported: &dyn Fn(usize) -> bool) -> Vec<Line> {
    let mut out = Vec::new();
    for row in &plan.series {
        for (pos, &cpu) in plan.cpus.iter().enumerate() {
            out.push(Line {
                event: row.event,
                cgroup: row.cgroup.clone(),
                container: row.container.clone(),
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
    plan: &Plan,
    snap: &Snapshot,
    supported: &dyn Fn(usize) -> bool,
    per_cpu: bool,
    per_thread: bool,
) -> Vec<Line> {
    let mut out = lines_all(plan, snap, supported, per_cpu, per_thread);
    drop_idle_tools(plan, &mut out);
    out
}

fn lines_all(
    plan: &Plan,
    snap: &Snapshot,
    supported: &dyn Fn(usize) -> bool,
    per_cpu: bool,
    per_thread: bool,
) -> Vec<Line> {
    if let Some((mode, groups)) = &plan.aggr {
        return group_lines(plan, snap, supported, *mode, groups);
    }
    if per_cpu {
        return cpu_lines_all(plan, snap, supported);
    }
    let mut out = Vec::new();
    for row in &plan.series {
        let value = |r| value_of(supported(row.event), r);
        if per_thread {
            for (pos, (tid, comm)) in plan.threads.iter().enumerate() {
                let reading = snap.get(row.slot, row.event, pos);
                if plan.hide_idle_threads && reading.counter == 0 {
                    continue;
                }
                out.push(Line {
                    event: row.event,
                    cgroup: None,
                    container: None,
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
                container: row.container.clone(),
                cpu: None,
                place: None,
                value: value(snap.total(row.slot, row.event)),
            });
        }
    }
    out
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
pub(super) enum EventStatus {
    Counted,
    /// The kernel refused to open it: `<not supported>`.
    Refused,
    /// Another member of its group was refused: perf cannot read the group, and prints
    /// `<not counted>`.
    Unread,
}

/// Each event's status once the counter is open. As the kernel does, a member of a
/// group given another cgroup than its leader's (-G) is refused; as perf does, a
/// group with a refused member is not read. A group whose leader was refused stops
/// perf 6.12 before it counts; perf 7.2 counts the rest, the group refused whole, and
/// stops only when nothing is left.
pub(super) fn event_status(
    plan: &Plan,
    counter: &Counter,
    version: PerfVersion,
) -> Result<Vec<EventStatus>> {
    let mut status: Vec<EventStatus> = (0..plan.events.len())
        .map(|e| match counter.supported(e) {
            true => EventStatus::Counted,
            false => EventStatus::Refused,
        })
        .collect();
    let mut refused_leader = None;
    for (leader, members) in groups(&plan.events) {
        for &m in &members {
            if m != leader
                && cgroup_of(plan, m).is_some()
                && cgroup_of(plan, m) != cgroup_of(plan, leader)
            {
                status[m] = EventStatus::Refused;
            }
        }
        let lost = match status[leader] {
            EventStatus::Refused => EventStatus::Refused,
            _ if members.iter().any(|&m| status[m] == EventStatus::Refused) => EventStatus::Unread,
            _ => continue,
        };
        if lost == EventStatus::Refused {
            let name = &plan.events[leader].name;
            if version == PerfVersion::V6_12 {
                return Err(anyhow::anyhow!("The {name} event is not supported."));
            }
            refused_leader.get_or_insert(leader);
        }
        for &m in &members {
            if status[m] == EventStatus::Counted {
                status[m] = lost;
            }
        }
    }
    let none_counted = !status.is_empty() && status.iter().all(|s| *s == EventStatus::Refused);
    if version == PerfVersion::V7_2 && none_counted {
        return Err(nothing_counted(plan, counter, &status, refused_leader).into());
    }
    Ok(status)
}

/// perf 7.2's refusal when nothing could be counted: it names the first event refused
/// (a refused group's leader first), worded after the error of the last open refused.
/// EINVAL for an event of a PMU of its own (msr/tsc/k: not the core PMU's legacy
/// events) while counting a command or threads is its "Invalid event (...) in
/// per-thread mode".
fn nothing_counted(
    plan: &Plan,
    counter: &Counter,
    status: &[EventStatus],
    refused_leader: Option<usize>,
) -> NoSupportedEvents {
    use crate::event::{TYPE_HARDWARE, TYPE_HW_CACHE, TYPE_RAW};
    let named = refused_leader.or_else(|| status.iter().position(|s| *s == EventStatus::Refused));
    let last_errno = (0..status.len())
        .rev()
        .find_map(|e| counter.refused_with(e));
    let per_thread = plan.task_mode || !plan.threads.is_empty();
    let own_pmu = |e: usize| {
        !matches!(
            plan.events[e].attr.type_,
            TYPE_HARDWARE | TYPE_HW_CACHE | TYPE_RAW
        )
    };
    let why = match last_errno {
        Some(libc::EINVAL) if per_thread && named.is_some_and(own_pmu) => Refusal::InvalidPerThread,
        Some(libc::EINVAL) => Refusal::Invalid,
        _ => Refusal::NotSupported,
    };
    NoSupportedEvents {
        refused: named.map(|e| plan.events[e].name.clone()),
        why,
        warnings: Vec::new(),
    }
}

/// The cgroup -G gave event `e` (None: counted system-wide, or in rows of cgroups).
fn cgroup_of(plan: &Plan, e: usize) -> Option<String> {
    plan.series
        .iter()
        .find(|r| r.event == e)
        .and_then(|r| r.cgroup.clone())
        .filter(|c| !c.is_empty() && !plan.cgroup_rows)
}
