//! perf's regrouping of a parsed event list: a group cannot span PMUs (core PMUs of a
//! hybrid machine included), so perf sorts each group's members by the PMU they belong
//! with and splits the group where that PMU changes (perf 6.12's
//! parse_events__sort_events_and_fix_groups).

use super::{pmu_name, Event, Sources, TYPE_SOFTWARE, TYPE_TRACEPOINT};

/// perf's type of breakpoint events.
const TYPE_BREAKPOINT: u32 = 5;

/// The PMUs perf counts as software though sysfs describes them.
const SOFTWARE_LIKE_PMUS: [&str; 3] = ["kprobe", "msr", "uprobe"];

/// An event's PMU as the regrouping sees it: its name, and whether perf calls it a
/// software PMU (one whose events may join another PMU's group). On a hybrid machine, a
/// hardware event's is its core PMU.
fn pmu_of(e: &Event, sources: &dyn Sources) -> (String, bool) {
    if let Some(h) = &e.hybrid {
        return (h.pmu.clone(), false);
    }
    let name = pmu_name(e.attr.type_, sources).unwrap_or_else(|| "cpu".to_string());
    let software = match e.attr.type_ {
        TYPE_SOFTWARE | TYPE_TRACEPOINT | TYPE_BREAKPOINT => true,
        _ => SOFTWARE_LIKE_PMUS.contains(&name.as_str()),
    };
    (name, software)
}

/// The PMU each event's group is counted on: its own, but for an event of a software
/// PMU, that of its group's leader or else of the first member, in order, of a PMU that
/// is not software.
fn group_pmus(events: &[Event], sources: &dyn Sources) -> Vec<String> {
    let pmus: Vec<(String, bool)> = events.iter().map(|e| pmu_of(e, sources)).collect();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        let (own, software) = &pmus[i];
        let leader = e.leader.unwrap_or(i);
        let hardware_member = || {
            events
                .iter()
                .enumerate()
                .filter(|&(j, m)| j != leader && m.leader == Some(leader))
                .map(|(j, _)| &pmus[j])
                .find(|(_, sw)| !sw)
        };
        let name = match *software {
            false => own,
            true if !pmus[leader].1 => &pmus[leader].0,
            true => hardware_member().map_or(own, |(name, _)| name),
        };
        out.push(name.clone());
    }
    out
}

/// Sorts each group's members by the PMU of their group (stable), splits groups where
/// it changes, and turns groups of one into lone events. True when the order or the
/// groups changed: perf then warns that the events were regrouped.
pub fn regroup(events: &mut Vec<Event>, sources: &dyn Sources) -> bool {
    let pmus = group_pmus(events, sources);
    let before: Vec<Option<usize>> = events.iter().map(|e| e.leader).collect();
    let leaders_before = groups(&before);
    // The order: by the group (its leader's place), then by PMU, then as written.
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| (before[i].unwrap_or(i), before[i].map(|_| &pmus[i]));
        key(a).cmp(&key(b))
    });
    let reordered = order.iter().enumerate().any(|(to, &from)| to != from);
    let mut sorted: Vec<Event> = order.iter().map(|&i| events[i].clone()).collect();
    // New leaders: a new group starts where the written group or the PMU changes.
    let mut leader_at = 0;
    for pos in 0..sorted.len() {
        let (i, lead) = (order[pos], order[leader_at]);
        if pos == 0 || before[i].is_none() || before[i] != before[lead] || pmus[i] != pmus[lead] {
            leader_at = pos;
        }
        sorted[pos].leader = Some(leader_at);
    }
    // A group of one is a lone event.
    let leaders: Vec<Option<usize>> = sorted.iter().map(|e| e.leader).collect();
    for (pos, e) in sorted.iter_mut().enumerate() {
        let size = leaders.iter().filter(|&&l| l == Some(pos)).count();
        if e.leader == Some(pos) && size == 1 {
            e.leader = None;
        }
    }
    let leaders_after = groups(&sorted.iter().map(|e| e.leader).collect::<Vec<_>>());
    *events = sorted;
    reordered || leaders_after != leaders_before
}

/// How many leaders a list has: its lone events and its groups.
fn groups(leaders: &[Option<usize>]) -> usize {
    leaders
        .iter()
        .enumerate()
        .filter(|&(i, l)| l.is_none_or(|l| l == i))
        .count()
}
