//! The events of a plan: -e's lists (perf's default set without them), -d's and -M's
//! events, --filter, --all-user and --all-kernel, and which are counted through the
//! shared counters.

use anyhow::Result;

use super::EventRequest;
use super::{usage, Machine, Request, SharedPlan, Targets};
use crate::event::{self, Event, Sources};
use crate::metrics;
use crate::perf_version::PerfVersion;

/// The events of a request and the metrics worked out from them.
#[derive(Default)]
pub struct PlanEvents {
    pub events: Vec<Event>,
    pub metrics: Vec<metrics::Use>,
}

impl PlanEvents {
    /// The events `req` asks for, refused when there is nothing to count.
    pub fn parse(req: &Request, machine: &dyn Machine) -> Result<PlanEvents> {
        something_to_count(&req.targets)?;
        let lists = req
            .events
            .lists
            .iter()
            .map(|list| event::parse_events(list, machine.sources()))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| usage(e.to_string()))?;
        let own = lists
            .iter()
            .flatten()
            .find_map(|e| e.tool.filter(|t| !t.is_perfs()));
        if let Some(own) = own.filter(|_| !req.events.bperfs) {
            return Err(usage(format!(
                "{} is counted by bperf stat, top and record (serve exports it with --runq)",
                own.name()
            )));
        }
        PlanEvents::of_lists(req, &lists, machine)
    }

    /// The events `req` asks for, its -e lists given parsed (one per -e, in order).
    pub(crate) fn of_lists(
        req: &Request,
        lists: &[Vec<Event>],
        machine: &dyn Machine,
    ) -> Result<PlanEvents> {
        let (t, e) = (&req.targets, &req.events);
        something_to_count(t)?;
        // A null run opens no counter of its own, but counts the events asked for, as perf.
        if e.null_run && lists.is_empty() && e.metrics.is_empty() {
            return Ok(PlanEvents::default());
        }
        plan_events(e, lists, t, machine.sources())
    }
}

/// Refuses targets that give nothing to count.
fn something_to_count(t: &Targets) -> Result<()> {
    let per_cpu = t.all_cpus || t.cpus.is_some();
    let threads = t.pids.is_some() || t.tids.is_some();
    // --per-thread without -p or -t counts every thread of the system.
    match !per_cpu && !threads && !t.per_thread && t.command.is_empty() {
        true => Err(usage(
            "nothing to count: give a command, or -a or -C to count CPUs".into(),
        )),
        false => Ok(()),
    }
}

/// The events of -e's `lists` (perf's default set without them), -d's and -M's.
fn plan_events(
    a: &EventRequest,
    lists: &[Vec<Event>],
    t: &Targets,
    sysfs: &dyn Sources,
) -> Result<PlanEvents> {
    let asked = match a.metrics.is_empty() {
        true => Vec::new(),
        false => metrics::parse_list(&a.metrics.join(","))?,
    };
    let per_cpu = t.all_cpus || t.cpus.is_some();
    let clock = match per_cpu {
        true => "cpu-clock",
        false => "task-clock",
    };
    if lists.is_empty() && asked.is_empty() && a.perf_version == Some(PerfVersion::V7_2) {
        return default_metric_events(a, clock, sysfs);
    }
    let parse = |list: &str| event::parse_events(list, sysfs).map_err(|e| usage(e.to_string()));
    // perf's own events: named from their attrs.
    let builtin = |list: &str| -> Result<Vec<Event>> {
        let mut events = parse(list)?;
        events
            .iter_mut()
            .for_each(|e| e.naming = event::Naming::Builtin);
        Ok(events)
    };
    let mut events = match (lists.is_empty(), asked.is_empty()) {
        // As perf 6.12: CPUs are timed with cpu-clock, a command with task-clock.
        (true, true) => match per_cpu {
            true => builtin(&event::DEFAULT_EVENTS.replacen("task-clock", "cpu-clock", 1))?,
            false => builtin(event::DEFAULT_EVENTS)?,
        },
        (true, false) => Vec::new(),
        (false, _) => event::joined(lists),
    };
    // As perf: a null run adds no events of its own; perf 7.2's -d adds metrics to its
    // default set only, never events to -e's.
    let detailed = match a.null_run || a.perf_version == Some(PerfVersion::V7_2) {
        true => 0,
        false => a.detailed as usize,
    };
    for extra in event::DETAILED_EVENTS.iter().take(detailed) {
        events.extend(builtin(extra)?);
    }
    apply_filters(a, lists, &mut events)?;
    let metrics = metric_events(&asked, clock, &mut events, sysfs)?;
    if events.is_empty() {
        return Err(usage("no events to count".into()));
    }
    name_events(a, &mut events, sysfs);
    Ok(PlanEvents { events, metrics })
}

/// perf 7.2's default metrics that are not software's, each with the event it is shown
/// on, in the order perf prints those events: what perf's metric parser decides, as
/// perf 7.2 -v -ddd shows it. stalled_cycles_per_instruction is shown last, on a
/// stalled-cycles-backend of its own.
const SHOWN_ON_72: &[(&str, &str)] = &[
    ("l1d_miss_rate", "L1-dcache-load-misses"),
    ("l1_prefetch_miss_rate", "L1-dcache-prefetches"),
    ("l1i_miss_rate", "L1-icache-load-misses"),
    ("llc_miss_rate", "LLC-loads"),
    ("branch_miss_rate", "branch-misses"),
    ("branch_frequency", "branches"),
    ("cycles_frequency", "cpu-cycles"),
    ("insn_per_cycle", "instructions"),
    ("frontend_cycles_idle", "stalled-cycles-frontend"),
    ("backend_cycles_idle", "stalled-cycles-backend"),
    ("dtlb_miss_rate", "dTLB-loads"),
    ("itlb_miss_rate", "iTLB-loads"),
];

/// The metric perf 7.2 shows last, on its own copy of one of its events.
const SHOWN_LAST_72: (&str, &str) = ("stalled_cycles_per_instruction", "stalled-cycles-backend");

/// perf 7.2's default events: the operands of its default metrics (metrics::
/// default_groups), software events first, by name, each software metric shown on the
/// operand the fewest of them count; then the others in SHOWN_ON_72's order. The output
/// leaves out the events no metric is shown on, and those but cycles the machine cannot
/// count.
fn default_metric_events(
    a: &EventRequest,
    clock: &'static str,
    sysfs: &dyn Sources,
) -> Result<PlanEvents> {
    let defs = metrics::default_groups(a.detailed);
    let mut events = Vec::new();
    let mut uses = metric_events(&defs, clock, &mut events, sysfs)?;
    let copy = shown_on_a_copy(&mut uses, &mut events);
    let rank_of = |i: usize| {
        let e: &Event = &events[i];
        let listed = SHOWN_ON_72.iter().position(|(_, on)| *on == e.name);
        let order = match (copy == Some(i), listed) {
            (true, _) => SHOWN_ON_72.len() + 1,
            (false, Some(p)) => p,
            (false, None) => SHOWN_ON_72.len(),
        };
        (e.attr.type_ != event::TYPE_SOFTWARE, order, e.name.clone())
    };
    let mut sorted: Vec<usize> = (0..events.len()).collect();
    sorted.sort_by_key(|&i| rank_of(i));
    // rank[old index] = new index.
    let mut rank = vec![0; events.len()];
    for (new, &old) in sorted.iter().enumerate() {
        rank[old] = new;
    }
    let mut events: Vec<Event> = sorted.iter().map(|&old| events[old].clone()).collect();
    for u in &mut uses {
        u.events.iter_mut().for_each(|e| *e = rank[*e]);
        u.shown_on = rank[u.shown_on];
    }
    let order: Vec<usize> = (0..events.len()).collect();
    metrics::pick_shown_on(&mut uses, &order);
    for u in &mut uses {
        let listed = SHOWN_ON_72.iter().find(|(m, _)| *m == u.def.name);
        if let Some(i) = listed.and_then(|(_, on)| events.iter().position(|e| e.name == *on)) {
            u.shown_on = i;
        }
        if copy.is_some() && u.def.name == SHOWN_LAST_72.0 {
            u.shown_on = events.len() - 1;
        }
    }
    name_events(a, &mut events, sysfs);
    Ok(PlanEvents {
        events,
        metrics: uses,
    })
}

/// SHOWN_LAST_72's metric given its own copy of its event, which it reads and is shown
/// on: the copy's index in `events`, if the metric is counted.
fn shown_on_a_copy(uses: &mut [metrics::Use], events: &mut Vec<Event>) -> Option<usize> {
    let (metric, operand) = SHOWN_LAST_72;
    let u = uses.iter_mut().find(|u| u.def.name == metric)?;
    let slot = u
        .events
        .iter_mut()
        .find(|&&mut e| events[e].name == operand)?;
    events.push(events[*slot].clone());
    *slot = events.len() - 1;
    u.shown_on = *slot;
    Some(*slot)
}

/// The names and modes perf gives the events once parsed: the PMU's name with -A;
/// --all-user, then --all-kernel, override what each event says.
fn name_events(a: &EventRequest, events: &mut [Event], sysfs: &dyn Sources) {
    if a.names_with_pmu {
        // As perf names events it does not merge across CPUs.
        for e in events.iter_mut() {
            let pmu = event::pmu_name(e.attr.type_, sysfs);
            e.name = match a.perf_version {
                Some(PerfVersion::V7_2) => e.name_with_pmu_72(pmu.as_deref()),
                _ => e.name_with_pmu(pmu.as_deref()),
            };
        }
    }
    for e in events.iter_mut() {
        if a.all_user {
            (e.attr.exclude_kernel, e.attr.exclude_user) = (true, false);
        }
        if a.all_kernel {
            (e.attr.exclude_kernel, e.attr.exclude_user) = (false, true);
        }
        if e.naming == event::Naming::Builtin {
            e.name = Event::builtin_name(&e.name, &e.attr);
        }
    }
}

/// --filter: each filter goes to the last event of the -e before it, which must be a
/// tracepoint.
fn apply_filters(a: &EventRequest, lists: &[Vec<Event>], events: &mut [Event]) -> Result<()> {
    const TRACEPOINT: u32 = 2;
    let refused =
        || usage("--filter option should follow a -e tracepoint or HW tracer option".into());
    for (filter, after) in &a.filters {
        if *after == 0 {
            return Err(refused());
        }
        // The events the -e options up to that one gave.
        let count: usize = lists.iter().take(*after).map(Vec::len).sum();
        let target = count
            .checked_sub(1)
            .and_then(|i| events.get_mut(i))
            .ok_or_else(refused)?;
        if target.attr.type_ != TRACEPOINT {
            return Err(refused());
        }
        target.filter = Some(filter.clone());
    }
    Ok(())
}

/// The events -M's metrics need, added to `events` where no event of the same name is
/// counted yet (metrics share their events, as perf's do unless --metric-no-merge).
fn metric_events(
    asked: &[&'static metrics::Def],
    clock: &'static str,
    events: &mut Vec<Event>,
    sysfs: &dyn Sources,
) -> Result<Vec<metrics::Use>> {
    let mut uses = Vec::new();
    for def in asked {
        let parsed = def
            .events(clock)
            .map(|name| event::parse_events(name, sysfs).map_err(|e| usage(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        // On a hybrid machine, one metric per core PMU, from that PMU's events.
        for pmu in event::hybrid::metric_pmus(&parsed) {
            let mut operands = Vec::new();
            for operand in &parsed {
                let e = event::hybrid::on_pmu(operand, pmu.as_deref())
                    .ok_or_else(|| usage(format!("metric {}: an operand is no event", def.name)))?;
                let index = match events.iter().position(|x| x.name == e.name) {
                    Some(i) => i,
                    None => {
                        events.push(e.clone());
                        events.len() - 1
                    }
                };
                operands.push(index);
            }
            uses.push(metrics::Use {
                def,
                shown_on: operands.first().copied().unwrap_or_default(),
                events: operands,
            });
        }
    }
    Ok(uses)
}

/// The events to count through the shared counters: all with --bpf-counters, else those
/// with the `b` modifier.
pub(super) fn shared_plan(
    a: &EventRequest,
    t: &Targets,
    events: &[Event],
) -> Result<Option<SharedPlan>> {
    let mask = events
        .iter()
        .enumerate()
        .filter(|(_, e)| a.bpf_counters || e.bpf)
        .fold(0u64, |m, (i, _)| m | 1 << i);
    if mask == 0 {
        return Ok(None);
    }
    if let Some(e) = events
        .iter()
        .enumerate()
        .find(|(i, e)| mask & 1 << i != 0 && e.leader.is_some())
    {
        return Err(usage(format!(
            "{}: event groups cannot be counted through the shared BPF counters",
            e.1.name
        )));
    }
    if t.per_thread {
        return Err(usage(
            "--per-thread cannot be used with BPF counters (--bpf-counters, :b)".into(),
        ));
    }
    let given = a.bpf_attr_map.as_deref();
    let dir = std::path::PathBuf::from(given.unwrap_or(crate::bpf::shared::DEFAULT_DIR));
    // The option is named only when it was given.
    crate::bpf::shared::check_dir(&dir).map_err(|e| match given {
        Some(_) => usage(format!("--bpf-attr-map: {e}")),
        None => usage(format!("{e} (remove it)")),
    })?;
    Ok(Some(SharedPlan {
        events: mask,
        dir,
        by_process: t.pids.is_some(),
    }))
}

/// The CPUs an event counts on: duration_time on the first only, as perf counts it.
fn cpus_of(e: &Event, cpus: &[u32]) -> Vec<u32> {
    match e.tool {
        Some(event::Tool::Duration) => vec![0],
        _ => cpus.to_vec(),
    }
}

/// As perf: a group member that counts on other CPUs than its leader (duration_time
/// in a group counting CPUs) leaves the group, said in `warnings` once for each copy
/// of the group (one per cgroup with --for-each-cgroup).
pub(super) fn ungroup_other_cpus(
    events: &mut [Event],
    cpus: &[u32],
    copies: usize,
    verbose: bool,
    warnings: &mut Vec<String>,
) {
    for (leader, members) in groups(events) {
        let lead_cpus = cpus_of(&events[leader], cpus);
        let leaving: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&m| m != leader && cpus_of(&events[m], cpus) != lead_cpus)
            .collect();
        if leaving.is_empty() {
            continue;
        }
        let names: Vec<&str> = members.iter().map(|&m| events[m].name.as_str()).collect();
        for _ in 0..copies {
            warnings.push(format!("WARNING: grouped events cpus do not match.\nEvents with CPUs not matching the leader will be removed from the group.\n  anon group {{ {} }}", names.join(", ")));
            if verbose {
                for &m in &leaving {
                    let list = |e: usize| crate::cpus::format_list(&cpus_of(&events[e], cpus));
                    warnings.push(format!("     {}: {}", events[leader].name, list(leader)));
                    warnings.push(format!("     {}: {}", events[m].name, list(m)));
                }
            }
        }
        for &m in &leaving {
            events[m].leader = None;
        }
        if members.len() - leaving.len() < 2 {
            events[leader].leader = None;
        }
    }
}

/// The groups of `events`: each leader with its members, for groups of more than one.
pub fn groups(events: &[Event]) -> Vec<(usize, Vec<usize>)> {
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(l) = e.leader {
            match out.iter_mut().find(|(leader, _)| *leader == l) {
                Some((_, members)) => members.push(i),
                None => out.push((l, vec![i])),
            }
        }
    }
    out.retain(|(_, members)| members.len() > 1);
    out
}
