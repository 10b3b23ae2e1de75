//! A counting session: options -> (events, cgroups, CPUs) -> counter -> counts -> report.
//! Runs the workload, ticks intervals, handles Ctrl-C and SIGTERM.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::aggr;
use crate::cgroup::{self, Cgroup, Hierarchy, Tree};
use crate::cli::StatArgs;
use crate::counter::{Counter, Setup, SharedSetup};
use crate::event::{self, Event};
use crate::metrics;

mod bpf_prog;
pub mod live;
mod record;
pub mod rules;
mod tool;
use crate::output::{Footer, Format, Options, Report};
use crate::output::{Line, Place, Value};
use crate::reading::{Reading, Snapshot};
use crate::sys::cgroupfs::{self, Cgroupfs};
use crate::sys::process::{self, Child, Workload};
use crate::sys::topology;
use crate::sys::{self, sysfs::Sysfs};
use crate::{InvalidError, UsageError};
use live::LiveCgroups;
pub use record::report;
use record::{record_to, write_record, PipeRecord, RecordTo};
use rustix::process::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tool::ToolTimes;

/// Everything a session counts, resolved from the options.
pub struct Plan {
    pub events: Vec<Event>,
    pub cpus: Vec<u32>,
    /// Monitored cgroups, one BPF slot each; empty when counting system-wide only.
    pub cgroups: Vec<Cgroup>,
    pub cgroup_v1: bool,
    /// Count only the workload and its children (perf's default without -a, -C or cgroups).
    pub task_mode: bool,
    /// -p, -t: the threads counted, as (thread id, command name).
    pub threads: Vec<Thread>,
    /// -p, -t: the processes or threads whose end ends counting (without a command).
    pub watched: Vec<libc::pid_t>,
    /// What the header says is counted: perf's `'system wide'`, `'CPU(s) LIST'`, `'CMD'`,
    /// `process id 'PIDS'` or `thread id 'TIDS'`.
    pub target: String,
    /// --per-socket and the like: the mode and its groups of CPUs.
    pub aggr: Option<(aggr::Mode, Vec<aggr::Group>)>,
    /// What to print, in order: which event, for which slot.
    pub series: Vec<Series>,
    /// The series are every event for each cgroup in turn (--for-each-cgroup,
    /// --all-cgroups), not -G's one cgroup per event.
    pub cgroup_rows: bool,
    /// -M: the metrics and which events they are worked out from.
    pub metrics: Vec<metrics::Use>,
    /// --per-thread over the whole system: threads that counted nothing are not shown.
    pub hide_idle_threads: bool,
    /// --bpf-counters, the `b` modifier: the events counted through the shared counters.
    pub shared: Option<SharedPlan>,
    /// --all-cgroups and patterns: the cgroups follow the tree as it changes.
    pub live: Option<LivePlan>,
}

/// Live cgroups: the rule that picks them and how many can be counted at once.
#[derive(Clone, Debug)]
pub struct LivePlan {
    pub selection: cgroup::Selection,
    pub capacity: usize,
}

/// The events counted through the shared counters, and where those are pinned.
#[derive(Clone, Debug)]
pub struct SharedPlan {
    /// One bit per event.
    pub events: u64,
    pub dir: std::path::PathBuf,
    /// -p: processes are tracked whole (rather than -t's threads).
    pub by_process: bool,
}

/// One event in one slot: the counts output::Line prints, one line per CPU with -A or
/// one line of their sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    pub event: usize,
    /// Slot in the snapshot (0 when not per-cgroup).
    pub slot: usize,
    /// Cgroup column, when per-cgroup.
    pub cgroup: Option<String>,
}

pub const MIN_INTERVAL_MS: u64 = 10;

/// The most monitored cgroups one cgroup's time can be charged to: itself and its
/// monitored ancestors (BPERF_MAX_LEVELS in src/bpf/bperf.h).
pub const MAX_CHARGED_LEVELS: usize = crate::bpf::MAX_LEVELS;

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

/// The monitored cgroups, one BPF slot each, and the rows that print them.
#[derive(Default)]
struct CgroupRows {
    /// Slot i counts cgroups[i]; no two have the same id.
    cgroups: Vec<Cgroup>,
    rows: Vec<Series>,
    v1: bool,
    /// The rule the cgroups were picked by, when it can be applied again.
    selection: Option<cgroup::Selection>,
}

impl CgroupRows {
    /// The slot of `cg`: where its id is counted already, or a new one. Two names of one
    /// cgroup print two rows from one slot.
    fn slot_of(&mut self, cg: &Cgroup) -> usize {
        match self.cgroups.iter().position(|c| c.id == cg.id) {
            Some(slot) => slot,
            None => {
                self.cgroups.push(cg.clone());
                self.cgroups.len() - 1
            }
        }
    }

    /// --for-each-cgroup and --all-cgroups: every event in every cgroup.
    fn for_each(h: &Hierarchy, cgroups: Vec<Cgroup>, nr_events: usize) -> CgroupRows {
        let mut out = CgroupRows {
            v1: h.v1,
            ..CgroupRows::default()
        };
        for cg in &cgroups {
            let slot = out.slot_of(cg);
            for event in 0..nr_events {
                out.rows.push(Series {
                    event,
                    slot,
                    cgroup: Some(cg.name.clone()),
                });
            }
        }
        out
    }

    /// -G, as rules::as_perf_reads hands its names out: the i-th event counts in the
    /// i-th cgroup; an empty name, or none (events -d and -M add), counts it
    /// system-wide, which is the root cgroup's count. Every row has the cgroup column,
    /// empty for those, as in perf.
    fn per_event(tree: &dyn Tree, names: &[String], nr_events: usize) -> Result<CgroupRows> {
        let mut out = CgroupRows {
            v1: tree.hierarchy().v1,
            ..CgroupRows::default()
        };
        let root = tree.resolve("/")?;
        for event in 0..nr_events {
            let name = names.get(event).map_or("", String::as_str);
            let cg = match name.is_empty() {
                true => root.clone(),
                false => tree.resolve(name).map_err(|e| usage(e.to_string()))?,
            };
            let slot = out.slot_of(&cg);
            out.rows.push(Series {
                event,
                slot,
                cgroup: Some(name.to_string()),
            });
        }
        Ok(out)
    }

    /// Refuses a set of cgroups where one cgroup's time would go to more monitored
    /// cgroups than the BPF side can charge: a count would be silently short.
    fn check_depth(&self) -> Result<()> {
        match cgroup::deepest_chain(&self.cgroups) {
            Some((levels, cg)) if levels > MAX_CHARGED_LEVELS => Err(usage(format!(
                "cgroup '{}' is inside {} other monitored cgroups: bperf charges at most {MAX_CHARGED_LEVELS} nested monitored cgroups",
                cg.name,
                levels - 1
            ))),
            _ => Ok(()),
        }
    }
}

/// The CPUs an event counts on: duration_time on the first only, as perf counts it.
fn cpus_of(e: &Event, cpus: &[u32]) -> Vec<u32> {
    match e.tool {
        Some(event::Tool::Duration) => vec![0],
        _ => cpus.to_vec(),
    }
}

/// As perf: a group member that counts on other CPUs than its leader (duration_time
/// in a group counting CPUs) leaves the group, said on stderr once for each copy of
/// the group (one per cgroup with --for-each-cgroup).
fn ungroup_other_cpus(events: &mut [Event], cpus: &[u32], copies: usize, verbose: bool) {
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
            eprintln!("WARNING: grouped events cpus do not match.\nEvents with CPUs not matching the leader will be removed from the group.\n  anon group {{ {} }}", names.join(", "));
            if verbose {
                for &m in &leaving {
                    let list = |e: usize| crate::cpus::format_list(&cpus_of(&events[e], cpus));
                    eprintln!("     {}: {}", events[leader].name, list(leader));
                    eprintln!("     {}: {}", events[m].name, list(m));
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

/// A thread: its id and command name.
type Thread = (libc::pid_t, String);

/// The threads of -p's processes, or -t's threads, and the ids whose end ends counting.
fn parse_threads(a: &StatArgs) -> Result<(Vec<Thread>, Vec<libc::pid_t>)> {
    let (list, of_process) = match (&a.pid, &a.tid) {
        (Some(p), _) => (p, true),
        (_, Some(t)) => (t, false),
        _ => return Ok((Vec::new(), Vec::new())),
    };
    let mut threads = Vec::new();
    let mut ids = Vec::new();
    for item in list.split(',') {
        let id: libc::pid_t = item
            .trim()
            .parse()
            .ok()
            .filter(|&id| id > 0)
            .ok_or_else(|| usage(format!("'{item}' is not a process or thread id")))?;
        let found = match of_process {
            true => process::threads_of(id),
            false => process::thread(id).map(|t| vec![t]),
        };
        // As perf: a process it cannot find is refused before counting (-EINVAL), a
        // thread when its counter cannot be opened.
        let found = found.map_err(|_| match of_process {
            true => InvalidError(format!(
                "Problems finding threads of monitor: no process {id}"
            ))
            .into(),
            false => anyhow::anyhow!("Problems finding threads of monitor: no thread {id}"),
        })?;
        threads.extend(found);
        ids.push(id);
    }
    threads.sort();
    threads.dedup();
    Ok((threads, ids))
}

/// The aggregation mode asked for, if any (--per-cache=L2 and the like).
fn aggr_mode(a: &StatArgs) -> Result<Option<aggr::Mode>> {
    let mode = if a.per_socket {
        aggr::Mode::Socket
    } else if a.per_die {
        aggr::Mode::Die
    } else if a.per_cluster {
        aggr::Mode::Cluster
    } else if a.per_core {
        aggr::Mode::Core
    } else if a.per_node {
        aggr::Mode::Node
    } else if let Some(level) = &a.per_cache {
        let parsed = level.trim_start_matches(['L', 'l']);
        match (level.is_empty(), parsed.parse::<u32>()) {
            (true, _) => aggr::Mode::Cache(None),
            (false, Ok(l)) if l > 0 => aggr::Mode::Cache(Some(l)),
            _ => {
                return Err(usage(format!(
                    "invalid cache level '{level}' (--per-cache=L2, say)"
                )))
            }
        }
    } else {
        return Ok(None);
    };
    Ok(Some(mode))
}

/// Refuses, as perf does on a machine without them, what needs hardware or tables bperf
/// does not have; and what bperf does not do yet.
fn check_unavailable(a: &StatArgs) -> Result<()> {
    let fail = |msg: &str| Err(anyhow::anyhow!("{msg}"));
    if a.topdown {
        return fail("Topdown requested but the topdown metric groups aren't present.");
    }
    if a.smi_cost {
        return fail("freeze_on_smi is not supported.");
    }
    if a.transaction {
        return fail("Missing transaction metrics");
    }
    if a.iostat.is_some() {
        return Err(usage("Unsupported uncore pmu configuration".into()));
    }
    if let Some(t) = &a.cputype {
        return Err(usage(format!("--cputype {t} is not supported!")));
    }
    Ok(())
}

/// What bperf refuses of the options about when counting runs, where perf would count
/// nothing, or forever.
fn check_own_limits(a: &StatArgs) -> Result<()> {
    if let Some(ms) = a.interval.filter(|&ms| ms < MIN_INTERVAL_MS) {
        return Err(usage(format!(
            "print interval must be >= {MIN_INTERVAL_MS} ms (got -I {ms})"
        )));
    }
    match a.repeat {
        Some(0) if a.interval.is_some() => {
            return Err(usage("-r 0 with -I is not supported".into()))
        }
        Some(n) if n != 1 && a.command.is_empty() => {
            return Err(usage("-r needs a command to run again".into()))
        }
        _ => {}
    }
    match a.delay {
        Some(-1) if a.control.is_none() => Err(usage(
            "-D -1 starts counting disabled: it needs --control to enable it".into(),
        )),
        Some(-1) => Ok(()),
        Some(ms) if ms < -1 => Err(usage(format!("invalid delay -D {ms}"))),
        _ => Ok(()),
    }
}

/// The events from -e (perf's default set without it).
fn parse_events(a: &StatArgs) -> Result<(Vec<Event>, Vec<metrics::Use>)> {
    let asked = match a.metrics.is_empty() {
        true => Vec::new(),
        false => metrics::parse_list(&a.metrics.join(","))?,
    };
    let sysfs = Sysfs::system();
    let parse = |list: &str| event::parse_events(list, &sysfs).map_err(|e| usage(e.to_string()));
    // perf's own events: named from their attrs.
    let builtin = |list: &str| -> Result<Vec<Event>> {
        let mut events = parse(list)?;
        events
            .iter_mut()
            .for_each(|e| e.naming = event::Naming::Builtin);
        Ok(events)
    };
    let mut events = match (a.events.is_empty(), asked.is_empty()) {
        // As perf 6.12: CPUs are timed with cpu-clock, a command with task-clock.
        (true, true) => match a.all_cpus || a.cpu.is_some() {
            true => builtin(&event::DEFAULT_EVENTS.replacen("task-clock", "cpu-clock", 1))?,
            false => builtin(event::DEFAULT_EVENTS)?,
        },
        (true, false) => Vec::new(),
        (false, _) => parse(&a.events.join(","))?,
    };
    // As perf: a null run adds no events of its own.
    let detailed = if a.null_run { 0 } else { a.detailed as usize };
    for extra in event::DETAILED_EVENTS.iter().take(detailed) {
        events.extend(builtin(extra)?);
    }
    apply_filters(a, &mut events, &sysfs)?;
    let clock = match a.all_cpus || a.cpu.is_some() {
        true => "cpu-clock",
        false => "task-clock",
    };
    let uses = metric_events(&asked, clock, &mut events, &sysfs)?;
    if events.is_empty() {
        return Err(usage("no events to count".into()));
    }
    if a.no_aggr {
        // As perf 6.12 names events it does not merge across CPUs.
        for e in &mut events {
            e.name = e.name_with_pmu(event::pmu_name(e.attr.type_, &sysfs).as_deref());
        }
    }
    // As perf: --all-user, then --all-kernel, override what each event says.
    for e in &mut events {
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
    Ok((events, uses))
}

/// --filter: each filter goes to the last event of the -e before it, which must be a
/// tracepoint.
fn apply_filters(a: &StatArgs, events: &mut [Event], sysfs: &Sysfs) -> Result<()> {
    const TRACEPOINT: u32 = 2;
    let refused =
        || usage("--filter option should follow a -e tracepoint or HW tracer option".into());
    for (filter, &after) in a.filter.iter().zip(&a.filter_after) {
        if after == 0 {
            return Err(refused());
        }
        // The events the -e options up to that one gave.
        let mut count = 0;
        for list in &a.events[..after] {
            count += event::parse_events(list, sysfs)
                .map_err(|e| usage(e.to_string()))?
                .len();
        }
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
    sysfs: &Sysfs,
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
                events: operands,
            });
        }
    }
    Ok(uses)
}

/// The CPUs from -C, all online CPUs without it.
fn parse_cpus(a: &StatArgs) -> Result<Vec<u32>> {
    let online = sys::online_cpus().context("reading online CPUs")?;
    let Some(list) = &a.cpu else {
        return Ok(online);
    };
    let cpus = crate::cpus::parse_list(list).map_err(|e| usage(e.to_string()))?;
    if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
        return Err(usage(format!("CPU {c} is not online (online: {online:?})")));
    }
    Ok(cpus)
}

/// The events to count through the shared counters: all with --bpf-counters, else those
/// with the `b` modifier.
fn shared_plan(a: &StatArgs, events: &[Event]) -> Result<Option<SharedPlan>> {
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
    if a.per_thread {
        return Err(usage(
            "--per-thread cannot be used with BPF counters (--bpf-counters, :b)".into(),
        ));
    }
    let dir = std::path::PathBuf::from(
        a.bpf_attr_map
            .as_deref()
            .unwrap_or(crate::bpf::shared::DEFAULT_DIR),
    );
    crate::bpf::shared::check_dir(&dir).map_err(|e| usage(format!("--bpf-attr-map: {e}")))?;
    Ok(Some(SharedPlan {
        events: mask,
        dir,
        by_process: a.pid.is_some(),
    }))
}

/// The cgroups and rows from --for-each-cgroup, --all-cgroups and -G.
fn parse_cgroups(a: &StatArgs, nr_events: usize) -> Result<CgroupRows> {
    let for_each = !a.for_each_cgroup.is_empty();
    if !(for_each || a.all_cgroups || !a.cgroup.is_empty()) {
        let rows = (0..nr_events)
            .map(|event| Series {
                event,
                slot: 0,
                cgroup: None,
            })
            .collect();
        return Ok(CgroupRows {
            rows,
            ..CgroupRows::default()
        });
    }
    let tree = Cgroupfs::new(cgroupfs::discover()?)?;
    let h = tree.hierarchy();
    let split =
        |v: &[String]| -> Vec<String> { v.iter().flat_map(|s| cgroup::split_list(s)).collect() };
    let out = if a.all_cgroups {
        CgroupRows {
            selection: Some(cgroup::Selection::All),
            ..CgroupRows::for_each(h, tree.all()?, nr_events)
        }
    } else if for_each {
        let items = split(&a.for_each_cgroup);
        // As perf: a cgroup that is not there is refused once the events are known.
        let expanded = cgroup::expand(&tree, &items).map_err(|e| InvalidError(format!("{e:#}")))?;
        CgroupRows {
            selection: cgroup::Selection::of_items(&items)?,
            ..CgroupRows::for_each(h, expanded, nr_events)
        }
    } else {
        CgroupRows::per_event(&tree, &split(&a.cgroup), nr_events)?
    };
    out.check_depth()?;
    Ok(out)
}

/// Live cgroups, where the cgroups were picked by a rule and the session follows the
/// tree: not for shared counters, whose cgroups are fixed at joining, nor for `stat
/// record` and -r, whose rows must stay the same. The first `capacity` cgroups are
/// counted.
fn live_plan(
    a: &StatArgs,
    shared: &Option<SharedPlan>,
    record: bool,
    cg: &mut CgroupRows,
) -> Option<LivePlan> {
    let fixed_rows = a.repeat.is_some_and(|r| r != 1) || record;
    let selection = cg
        .selection
        .take()
        .filter(|_| shared.is_none() && !fixed_rows)?;
    let capacity = a.max_cgroups.max(1) as usize;
    if cg.cgroups.len() > capacity {
        cg.cgroups.truncate(capacity);
        cg.rows.retain(|r| r.slot < capacity);
    }
    Some(LivePlan {
        selection,
        capacity,
    })
}

impl Plan {
    /// The plan of `a`; `record`: for `stat record`, whose rows stay as they start.
    /// `a` as perf reads it (rules::as_perf_reads, rules::settle_targets); perf's
    /// refusals come in perf's order, then bperf's own.
    pub fn from_args(a: &StatArgs, record: bool) -> Result<Plan> {
        rules::check_targets(a)?;
        let per_cpu_target = a.all_cpus || a.cpu.is_some();
        let thread_target = a.pid.is_some() || a.tid.is_some();
        // --per-thread without -p or -t: every thread of the system, as perf.
        let all_threads = a.per_thread && !thread_target;
        let mode = aggr_mode(a)?;
        if !per_cpu_target && !thread_target && !all_threads && a.command.is_empty() {
            return Err(usage(
                "nothing to count: give a command, or -a or -C to count CPUs".into(),
            ));
        }
        // A null run opens no counter of its own, but counts the events asked for, as perf.
        let (mut events, metrics) = match a.null_run && a.events.is_empty() && a.metrics.is_empty()
        {
            true => Default::default(),
            false => parse_events(a)?,
        };
        check_unavailable(a)?;
        rules::check_cgroups(a)?;
        let cpus = parse_cpus(a)?;
        if per_cpu_target {
            for w in event::hybrid::fit_to_cpus(&mut events, &cpus, a.cpu.as_deref()) {
                eprintln!("{w}");
            }
        }
        let shared = shared_plan(a, &events)?;
        let mut cg = parse_cgroups(a, events.len())?;
        // A hybrid event whose core PMU has none of the CPUs counted has no line.
        cg.rows
            .retain(|r| !per_cpu_target || events[r.event].counts_on_any(&cpus));
        let live = live_plan(a, &shared, record, &mut cg);
        let (threads, watched) = match all_threads {
            true => (process::all_threads(), Vec::new()),
            false => parse_threads(a)?,
        };
        // --for-each-cgroup: perf has a copy of every event for each cgroup.
        let copies = match a.all_cgroups || !a.for_each_cgroup.is_empty() {
            true => cg.rows.len() / events.len().max(1),
            false => 1,
        };
        if per_cpu_target {
            ungroup_other_cpus(&mut events, &cpus, copies, a.verbose > 0);
        }
        rules::check_timing(a)?;
        check_own_limits(a)?;
        let task_mode = !per_cpu_target && !thread_target && !a.command.is_empty();
        let target = match (&a.pid, &a.tid) {
            (Some(p), _) => format!("process id '{p}'"),
            (_, Some(t)) => format!("thread id '{t}'"),
            _ if task_mode => format!("'{}'", a.command.join(" ")),
            // As perf: -C without -a names the CPUs as they were written.
            _ => match (&a.cpu, a.all_cpus) {
                (Some(list), false) => format!("'CPU(s) {list}'"),
                _ => "'system wide'".into(),
            },
        };
        let aggr = mode.map(|m| {
            let topology = topology::read(&topology::system_root(), &cpus);
            (m, aggr::groups(m, &topology))
        });
        Ok(Plan {
            aggr,
            events,
            cpus,
            cgroups: cg.cgroups,
            cgroup_v1: cg.v1,
            task_mode,
            threads,
            watched,
            target,
            series: cg.rows,
            cgroup_rows: a.all_cgroups || !a.for_each_cgroup.is_empty(),
            metrics,
            hide_idle_threads: all_threads,
            shared,
            live,
        })
    }

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

    /// How many places the counter reads: threads with -p or -t, else CPUs (one for a
    /// command, whose readings are summed the same way).
    pub fn nr_targets(&self) -> usize {
        match self.threads.len() {
            0 => self.cpus.len(),
            n => n,
        }
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
enum Status {
    Counted,
    /// The kernel refused to open it: `<not supported>`.
    Refused,
    /// Another member of its group was refused: perf cannot read the group, and prints
    /// `<not counted>`.
    Unread,
}

/// The groups of `events`: each leader with its members, for groups of more than one.
fn groups(events: &[Event]) -> Vec<(usize, Vec<usize>)> {
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

/// Each event's status once the counter is open. As the kernel does, a member of a
/// group given another cgroup than its leader's (-G) is refused; as perf does, a
/// group with a refused member is not read, and one whose leader was refused stops
/// counting before it starts.
fn event_status(plan: &Plan, counter: &Counter) -> Result<Vec<Status>> {
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

/// What ends or interrupts the wait between reads.
enum Wake {
    Exited(ExitStatus, libc::rusage),
    Signal(i32),
    /// What -p or -t count has all ended.
    TargetsEnded,
    /// A --control command.
    Control(String),
    /// The cgroup tree changed (live cgroups).
    Cgroups,
}

/// The next wake, or None when `until` comes first.
fn wait(wakes: &mpsc::Receiver<Wake>, until: Option<Instant>) -> Option<Wake> {
    wait_until(wakes, until, || Wake::Signal(SIGTERM))
}

/// The next wake, or None when `until` comes first; `gone()` when every sender is gone.
pub fn wait_until<W>(
    wakes: &mpsc::Receiver<W>,
    until: Option<Instant>,
    gone: impl Fn() -> W,
) -> Option<W> {
    match until {
        Some(t) => match wakes.recv_timeout(t.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Ok(w) => Some(w),
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(gone()),
        },
        None => Some(wakes.recv().unwrap_or_else(|_| gone())),
    }
}

/// How counting ended.
enum Ended {
    /// The command exited (its status and resource usage).
    Command(ExitStatus, libc::rusage),
    /// A signal stopped counting, with no command to wait for.
    Signal(i32),
    /// The intervals asked for were printed.
    Done,
}

impl Ended {
    /// bperf's exit status, as perf's: the command's, or 128 + the signal's number
    /// (130 after Ctrl-C, 143 after SIGTERM).
    fn exit_code(&self) -> i32 {
        match self {
            Ended::Command(st, _) => process::exit_code(*st),
            Ended::Signal(sig) => 128 + sig,
            Ended::Done => 0,
        }
    }
}

/// Opens --control's files and sends each command line to the counting loop; returns
/// the file for acknowledgements.
fn forward_control(spec: &str, tx: mpsc::Sender<Wake>) -> Result<Option<std::fs::File>> {
    use std::io::BufRead;
    let (ctl, ack) =
        sys::open_control(spec).map_err(|e| usage(format!("--control {spec}: {e}")))?;
    std::thread::spawn(move || {
        for line in io::BufReader::new(ctl).lines().map_while(|l| l.ok()) {
            if tx.send(Wake::Control(line.trim().to_string())).is_err() {
                return;
            }
        }
    });
    Ok(ack)
}

/// Sends SIGINT, SIGTERM and SIGHUP to the counting loop as wakes (`wake` of the
/// signal), instead of letting them end bperf before it prints. signal-hook says which
/// signal came (ctrlc, used before, does not), for perf's exit status.
pub fn forward_signals<W: Send + 'static>(tx: mpsc::Sender<W>, wake: fn(i32) -> W) -> Result<()> {
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing signal handlers")?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let _ = tx.send(wake(sig));
        }
    });
    Ok(())
}

/// One flush-and-read of every counter; with BPERF_TIME_READS=1, says how long it took
/// (the benchmark reads this line).
fn timed_read(counter: &mut Counter, plan: &Plan) -> Result<Snapshot> {
    let t = Instant::now();
    let snap = counter.read()?;
    if std::env::var_os("BPERF_TIME_READS").is_some_and(|v| v == "1") {
        eprintln!(
            "bperf: flush+read of {} cgroups x {} events took {} us",
            plan.cgroups.len(),
            plan.events.len(),
            t.elapsed().as_micros()
        );
    }
    Ok(snap)
}

/// Where the report goes: the -o file (named in errors) or stderr.
fn open_output(a: &StatArgs) -> Result<(Box<dyn Write>, String)> {
    use std::io::IsTerminal;
    // --quiet: no -o file (the report prints no counts), and -v's lines on stderr, as
    // perf's.
    if a.quiet {
        return Ok((Box::new(io::BufWriter::new(io::stderr())), "stderr".into()));
    }
    // As perf: the clearing is for a terminal, and perf says so once the file is open.
    let clear_refused = || anyhow::anyhow!("--interval-clear does not work with output");
    if let Some(fd) = a.log_fd {
        let file = sys::file_from_fd(fd).with_context(|| format!("--log-fd {fd}"))?;
        if a.interval_clear && !file.is_terminal() {
            return Err(clear_refused());
        }
        return Ok((Box::new(io::BufWriter::new(file)), format!("fd {fd}")));
    }
    let Some(path) = &a.output else {
        if a.interval_clear && !io::stderr().is_terminal() {
            return Err(clear_refused());
        }
        return Ok((Box::new(io::BufWriter::new(io::stderr())), "stderr".into()));
    };
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(a.append)
        .truncate(!a.append)
        .open(path)
        .with_context(|| format!("cannot open output file {}", path.display()))?;
    let name = path.display().to_string();
    // Buffered: the report flushes once per interval and at the end, not once per line.
    let mut out = io::BufWriter::new(file);
    // As perf, when the file is not JSON: when counting started.
    if !a.json {
        write!(out, "# started on {}\n\n", sys::ctime_now())
            .with_context(|| format!("cannot write to {name}"))?;
    }
    if a.interval_clear {
        out.flush()
            .with_context(|| format!("cannot write to {name}"))?;
        return Err(clear_refused());
    }
    Ok((Box::new(out), name))
}

fn report_options(a: &StatArgs, plan: &Plan) -> Result<Options> {
    let format = match (&a.field_separator, a.json) {
        (_, true) => Format::Json,
        (Some(sep), _) if sep.is_empty() => return Err(usage("-x needs a separator".into())),
        (Some(sep), _) => Format::Csv(sep.clone()),
        (None, false) => Format::Table,
    };
    // As perf: thousands grouped as the locale groups them, unless told not to.
    let thousands = match a.no_big_num {
        true => None,
        false => sys::locale_thousands_separator(),
    };
    Ok(Options {
        format,
        thousands,
        interval: a.interval.map(Duration::from_millis),
        per_cpu: a.no_aggr,
        aggr: plan.aggr.as_ref().map(|(mode, _)| *mode),
        per_thread: a.per_thread,
        target: Some(plan.target.clone()),
        summary: a.summary,
        csv_summary_prefix: !a.no_csv_summary,
        null_run: a.null_run,
        interval_clear: a.interval_clear,
        runs: a.repeat.unwrap_or(1).max(0) as usize,
        no_scale: a.no_scale,
        verbose: a.verbose > 0,
        run_table: Vec::new(),
        metrics: plan.metrics.clone(),
        metric_only: a.metric_only,
        quiet: a.quiet,
        cgroup_rows: a.all_cgroups || !a.for_each_cgroup.is_empty(),
        nmi_watchdog: sys::nmi_watchdog(),
        extra_lines: Vec::new(),
        forever: false,
    })
}

/// A counting session under way: the counter, what it printed so far, and where.
struct Session<'a, 'obj> {
    args: &'a StatArgs,
    plan: &'a mut Plan,
    /// --all-cgroups and patterns: the cgroups as the tree changes, and whether a change
    /// waits to be looked at.
    live: Option<LiveCgroups>,
    counter: Counter<'obj>,
    report: &'a mut Report<Box<dyn Write>>,
    /// A signal came: no more runs of -r.
    interrupted: bool,
    /// perf's tool events, timed here.
    tools: Option<ToolTimes>,
    /// How the kernel took each event.
    status: Vec<Status>,
    /// --control's acknowledgements.
    ack: Option<&'a mut std::fs::File>,
    /// The output's name, for errors.
    output: String,
    start: Instant,
    /// The reading the last interval ended with.
    prev: Snapshot,
    /// stat record with -I: each interval's time and lines, for the file.
    recorded: Option<Vec<(Duration, Vec<Line>)>>,
    /// stat record to a pipe: where each interval's lines go instead.
    pipe: Option<&'a mut PipeRecord>,
}

impl Session<'_, '_> {
    /// A flush and read of every counter, the tool events' times put in.
    fn read(&mut self) -> Result<Snapshot> {
        let mut snap = timed_read(&mut self.counter, self.plan)?;
        if let Some(tools) = &self.tools {
            tools.fill(&mut snap);
        }
        Ok(snap)
    }

    /// The report's lines of `snap`, as perf prints them: events the kernel refused
    /// `<not supported>`, those of groups perf cannot read `<not counted>`.
    fn lines_of(&self, snap: &Snapshot, per_cpu_only: bool) -> Vec<Line> {
        let status = &self.status;
        let supported = |e: usize| status[e] != Status::Refused;
        let mut lines = match per_cpu_only {
            true => self.plan.cpu_lines(snap, &supported),
            false => self
                .plan
                .lines(snap, &supported, self.args.no_aggr, self.args.per_thread),
        };
        for l in lines
            .iter_mut()
            .filter(|l| status[l.event] == Status::Unread)
        {
            l.value = Value::Counted(Reading::default());
        }
        lines
    }

    /// -v's lines about a read (Report::counts_read).
    fn say_read(&mut self, lines: &[Line]) -> Result<()> {
        let unread: Vec<bool> = self.status.iter().map(|s| *s != Status::Counted).collect();
        self.report
            .counts_read(&self.plan.events, lines, &unread)
            .with_context(|| format!("cannot write to {}", self.output))
    }

    /// Prints what was counted since the last interval.
    fn print_interval(&mut self) -> Result<()> {
        let now = self.read()?;
        let lines = self.lines_of(&now.since(&self.prev), false);
        let ts = self.start.elapsed();
        self.say_read(&lines)?;
        self.report
            .interval(ts, &self.plan.events, &lines)
            .with_context(|| format!("cannot write to {}", self.output))?;
        if self.recorded.is_some() {
            // --per-socket and the like are recorded per CPU, as perf records them.
            let lines = match self.plan.aggr {
                Some(_) => self.lines_of(&now.since(&self.prev), true),
                None => lines,
            };
            match (&mut self.pipe, &mut self.recorded) {
                (Some(pipe), _) => pipe.interval(self.plan, self.args, ts, &lines)?,
                (None, Some(recorded)) => recorded.push((ts, lines)),
                (None, None) => {}
            }
        }
        self.prev = now;
        // Removed cgroups were reported once more: they go, and cgroups left out for
        // want of a place may take theirs.
        if let Some(live) = &mut self.live {
            let waiting = live.release_gone();
            self.plan.series = live.series(self.plan.events.len());
            if waiting {
                self.refresh_cgroups()?;
            }
        }
        Ok(())
    }

    /// Follows the cgroup tree after it changed: new cgroups get rows (counted from
    /// zero), removed ones stop counting.
    fn refresh_cgroups(&mut self) -> Result<()> {
        let Some(live) = &mut self.live else {
            return Ok(());
        };
        let changes = live.refresh(&mut self.counter)?;
        for (slot, _) in &changes.added {
            self.prev.clear_slot(*slot);
        }
        self.plan.series = live.series(self.plan.events.len());
        Ok(())
    }

    /// Counts until the command ends, a signal comes or, without a command, the
    /// intervals are done; prints every interval, the last, partial one included.
    /// `early`: a wake that came before counting started (during -D's delay).
    fn count(
        &mut self,
        mut early: Option<Wake>,
        wakes: &mpsc::Receiver<Wake>,
        child: Option<&Child>,
    ) -> Result<Ended> {
        let interval = self.args.interval.map(Duration::from_millis);
        // A command that ended during -D's delay leaves no interval to print, as in perf.
        let ended_in_delay = matches!(early, Some(Wake::Exited(..)));
        // --interval-count 0 is no limit, as in perf.
        let limit = self.args.interval_count.filter(|&n| n > 0);
        let mut ticks = 0u64;
        // Times too far away to represent are never reached.
        let mut next_tick = interval.and_then(|i| self.start.checked_add(i));
        let mut timeout = self
            .args
            .timeout
            .and_then(|ms| self.start.checked_add(Duration::from_millis(ms)));
        loop {
            let wake = match early.take() {
                Some(w) => Some(w),
                None => wait(wakes, next_tick.into_iter().chain(timeout).min()),
            };
            if wake.is_none() && timeout.is_some_and(|t| Instant::now() >= t) {
                // --timeout: as perf, the command gets SIGTERM and is waited for.
                timeout = None;
                match child {
                    Some(c) => c.signal(Signal::TERM),
                    None => return Ok(Ended::Done),
                }
                continue;
            }
            let ended = match wake {
                // Stop the command too (after Ctrl-C it has usually had SIGINT already);
                // the summary follows once it has exited, with its status.
                Some(Wake::Signal(_)) if child.is_some() => {
                    self.interrupted = true;
                    child.into_iter().for_each(|c| c.signal(Signal::TERM));
                    continue;
                }
                Some(Wake::Signal(sig)) => {
                    self.interrupted = true;
                    Ended::Signal(sig)
                }
                Some(Wake::Exited(st, ru)) => Ended::Command(st, ru),
                Some(Wake::TargetsEnded) => Ended::Done,
                Some(Wake::Control(cmd)) => {
                    self.control(&cmd)?;
                    continue;
                }
                Some(Wake::Cgroups) => {
                    self.refresh_cgroups()?;
                    continue;
                }
                None => {
                    self.print_interval()?;
                    ticks += 1;
                    next_tick = next_tick.zip(interval).and_then(|(t, i)| t.checked_add(i));
                    if limit.is_some_and(|n| ticks >= n) {
                        // Like perf: no more intervals; a command runs to its end.
                        next_tick = None;
                        if child.is_none() {
                            return Ok(Ended::Done);
                        }
                    }
                    continue;
                }
            };
            if next_tick.is_some() && !ended_in_delay {
                self.print_interval()?;
            }
            return Ok(ended);
        }
    }

    /// Carries out a --control command as perf stat does: enable and disable print an
    /// interval with -I; all but snapshot and unknown ones are acknowledged.
    fn control(&mut self, cmd: &str) -> Result<()> {
        let answered = match cmd {
            "enable" | "disable" => {
                match cmd {
                    "enable" => self.counter.resume()?,
                    _ => self.counter.pause()?,
                }
                eprintln!("Events {cmd}d");
                if self.args.interval.is_some() {
                    self.print_interval()?;
                }
                true
            }
            "evlist" => {
                self.plan
                    .events
                    .iter()
                    .for_each(|e| eprintln!("{}", e.name));
                true
            }
            "ping" | "stop" => true,
            _ => false,
        };
        if let (true, Some(ack)) = (answered, self.ack.as_mut()) {
            ack.write_all(b"ack\n").context("writing --control's ack")?;
        }
        Ok(())
    }

    /// The counts of the whole run.
    fn finish(mut self, ended: Ended) -> Result<Measured> {
        let elapsed = self.start.elapsed();
        // After intervals, the whole run is what they added up to (--summary), as perf.
        let total = match self.args.interval {
            Some(_) => self.prev.clone(),
            None => {
                if let (Some(tools), Ended::Command(_, ru)) = (&mut self.tools, &ended) {
                    tools.command_ended(ru);
                }
                self.read()?
            }
        };
        let lines = self.lines_of(&total, false);
        // As perf: the last read, said with -v, whether or not it is printed. After
        // intervals, --summary reads nothing more: perf goes over the sums, which every
        // event has, and says nothing failed.
        match self.args.interval.is_some() && self.args.summary {
            false => self.say_read(&lines)?,
            true => {
                let sums: Vec<Line> = lines
                    .iter()
                    .map(|l| Line {
                        value: match l.value {
                            Value::NotSupported => Value::Counted(Reading::default()),
                            v => v,
                        },
                        ..l.clone()
                    })
                    .collect();
                let unread = vec![false; self.plan.events.len()];
                self.report
                    .counts_read(&self.plan.events, &sums, &unread)
                    .with_context(|| format!("cannot write to {}", self.output))?;
            }
        }
        let cpu_lines = match (&self.recorded, &self.plan.aggr) {
            (Some(_), Some(_)) => self.lines_of(&total, true),
            _ => Vec::new(),
        };
        Ok(Measured {
            lines,
            cpu_lines,
            elapsed,
            ended,
            interrupted: self.interrupted,
            intervals: self.recorded.take().unwrap_or_default(),
        })
    }
}

/// What one run measured.
struct Measured {
    lines: Vec<Line>,
    /// stat record with --per-socket and the like: the lines of each CPU.
    cpu_lines: Vec<Line>,
    elapsed: Duration,
    ended: Ended,
    interrupted: bool,
    /// stat record with -I: each interval's time and lines.
    intervals: Vec<(Duration, Vec<Line>)>,
}

/// The mean of `xs` and its standard error in % of it (0 for one value or a mean of 0),
/// as perf's stats compute them.
fn mean_and_noise(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 || mean == 0.0 {
        return (mean, 0.0);
    }
    let variance = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 100.0 * (variance / n).sqrt() / mean)
}

/// The mean of each line over the runs, and its noise in %. As perf's, the mean count
/// goes with the last run's enabled and running times: a last run that did not count
/// makes the line `<not counted>`.
fn mean_lines(runs: &[Measured]) -> (Vec<Line>, Vec<f64>) {
    let first = &runs[0].lines;
    let mut noise = Vec::with_capacity(first.len());
    let lines = first
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let readings: Vec<Reading> = runs
                .iter()
                .filter_map(|r| match r.lines[i].value {
                    Value::Counted(r) => Some(r),
                    Value::NotSupported => None,
                })
                .collect();
            let scaled: Vec<f64> = readings.iter().map(|r| r.scaled().unwrap_or(0.0)).collect();
            let value = match readings.is_empty() {
                true => Value::NotSupported,
                false => {
                    let mean = |f: fn(&Reading) -> u64| {
                        mean_and_noise(&readings.iter().map(|r| f(r) as f64).collect::<Vec<_>>()).0
                            as u64
                    };
                    let last = readings[readings.len() - 1];
                    Value::Counted(match last.scaled() {
                        None => last,
                        Some(_) => Reading {
                            counter: mean(|r| r.counter),
                            ..last
                        },
                    })
                }
            };
            noise.push(if scaled.is_empty() {
                0.0
            } else {
                mean_and_noise(&scaled).1
            });
            Line {
                value,
                ..line.clone()
            }
        })
        .collect();
    (lines, noise)
}

/// Prints the summary of the runs; returns bperf's exit code.
fn print_runs(
    plan: &Plan,
    report: &mut Report<Box<dyn Write>>,
    output: &str,
    runs: &[Measured],
) -> Result<i32> {
    let last = runs.last().expect("at least one run");
    let written = if runs.len() == 1 {
        // As perf: user and system time only for a command counted on its own.
        let rusage = match &last.ended {
            Ended::Command(_, ru) if plan.task_mode && !report.opts.forever => {
                Some((process::timeval(ru.ru_utime), process::timeval(ru.ru_stime)))
            }
            _ => None,
        };
        let footer = Footer {
            elapsed: last.elapsed,
            elapsed_error: None,
            rusage,
        };
        report.summary(&plan.events, &last.lines, &footer)
    } else {
        report.opts.runs = runs.len();
        let secs: Vec<f64> = runs.iter().map(|r| r.elapsed.as_secs_f64()).collect();
        let (mean, pct) = mean_and_noise(&secs);
        let footer = Footer {
            elapsed: Duration::from_secs_f64(mean),
            elapsed_error: Some(Duration::from_secs_f64(mean * pct / 100.0)),
            rusage: None,
        };
        let (lines, noise) = mean_lines(runs);
        report.summary_of_runs(&plan.events, &lines, &noise, &footer)
    };
    written
        .and_then(|_| report.out.flush())
        .with_context(|| format!("cannot write to {output}"))?;
    Ok(last.ended.exit_code())
}

/// Runs `bperf stat`; returns the process exit code.
pub fn run(a: &StatArgs, record: bool) -> Result<i32> {
    let a = &rules::as_perf_reads(a)?;
    rules::check_before_output(a)?;
    if let Some(list) = &a.bpf_prog {
        return bpf_prog::run(a, list);
    }
    // stat record: -o names the perf.data file; the counts are printed as without it.
    let counting;
    let (a, recording) = match record {
        true => {
            let path = record_to(a)?;
            counting = StatArgs {
                output: None,
                ..a.clone()
            };
            (&counting, Some(path))
        }
        false => (a, None),
    };
    let (mut out, output) = open_output(a)?;
    // As perf: recording to a pipe prints no counts (standard output is the record).
    if recording == Some(RecordTo::Pipe) {
        out = Box::new(io::sink());
    }
    rules::check_after_output(a)?;
    let a = &rules::settle_targets(a);
    if a.verbose > 0 && a.events.is_empty() && a.metrics.is_empty() && !a.null_run {
        // perf looks its tables up as it adds its default events.
        rules::say_cpuid();
    }
    let mut plan = Plan::from_args(a, recording.is_some())?;
    let options = report_options(a, &plan)?;
    if a.verbose > 0 && a.control.is_none() {
        eprintln!("Control descriptor is not initialized");
    }
    let (tx, wakes) = mpsc::channel();
    forward_signals(tx.clone(), Wake::Signal)?;
    let mut report = Report::new(options, out);
    let mut ack = match &a.control {
        Some(spec) => forward_control(spec, tx.clone())?,
        None => None,
    };
    let mut runs = Vec::new();
    let mut pipe = (recording == Some(RecordTo::Pipe)).then(PipeRecord::default);
    // -r 0: run again and print each run's counts until interrupted, as perf.
    let forever = a.repeat == Some(0);
    report.opts.forever = forever;
    let mut run = 0;
    while forever || run < a.repeat.unwrap_or(1) {
        if a.verbose > 0 && a.repeat.is_some_and(|r| r > 1) {
            // Flushed now: the run's own lines go straight to stderr after it.
            writeln!(report.out, "[ perf stat: executing run #{} ... ]", run + 1)
                .and_then(|()| report.out.flush())
                .with_context(|| format!("cannot write to {output}"))?;
        }
        if let Some(code) = shell_step(a.pre.as_deref())? {
            return Ok(code);
        }
        if a.sync {
            sys::sync();
        }
        let io = RunIo {
            ack: ack.as_mut(),
            wakes: &wakes,
            tx: &tx,
            report: &mut report,
            output: &output,
            record: recording.is_some(),
            pipe: pipe.as_mut(),
        };
        let Some(measured) = run_once(a, &mut plan, io, run == 0)? else {
            return Ok(255);
        };
        let interrupted = measured.interrupted;
        if forever && interrupted {
            // The run cut short is not printed.
            return Ok(measured.ended.exit_code());
        }
        runs.push(measured);
        if forever {
            print_runs(&plan, &mut report, &output, &runs)?;
            runs.clear();
        }
        if let Some(code) = shell_step(a.post.as_deref())? {
            return Ok(code);
        }
        if interrupted {
            break;
        }
        run += 1;
    }
    if a.table {
        report.opts.run_table = runs.iter().map(|r| r.elapsed).collect();
    }
    let code = print_runs(&plan, &mut report, &output, &runs)?;
    match (recording, runs.last()) {
        (Some(RecordTo::File(path)), Some(run)) => write_record(&path, &plan, run, a)?,
        (Some(RecordTo::Pipe), Some(run)) => {
            if let Some(pipe) = &mut pipe {
                pipe.finish(&plan, a, run)?;
            }
        }
        _ => {}
    }
    Ok(code)
}

/// Runs --pre's or --post's command, if any; its status when it failed, which ends
/// bperf as it ends perf.
fn shell_step(command: Option<&str>) -> Result<Option<i32>> {
    let Some(command) = command else {
        return Ok(None);
    };
    let code = sys::shell(command).with_context(|| format!("cannot run '{command}'"))?;
    Ok((code != 0).then_some(code))
}

/// Where one run takes its wakes from and prints to.
struct RunIo<'a> {
    ack: Option<&'a mut std::fs::File>,
    wakes: &'a mpsc::Receiver<Wake>,
    tx: &'a mpsc::Sender<Wake>,
    report: &'a mut Report<Box<dyn Write>>,
    output: &'a str,
    /// stat record: keep each interval's lines for the file.
    record: bool,
    /// stat record to a pipe: write each interval's lines to it.
    pipe: Option<&'a mut PipeRecord>,
}

/// The counter of one run, on `task` or the CPUs. The first run names the events perf's
/// way when the kernel let them count user space only.
pub fn open_counter<'obj>(
    a: &StatArgs,
    plan: &mut Plan,
    task: Option<libc::pid_t>,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    first: bool,
    rings: &[(u32, std::os::fd::BorrowedFd)],
) -> Result<Counter<'obj>> {
    let ids: Vec<u64> = plan.cgroups.iter().map(|c| c.id).collect();
    let threads: Vec<libc::pid_t> = plan.threads.iter().map(|(tid, _)| *tid).collect();
    let setup = Setup {
        threads: &threads,
        events: &plan.events,
        cpus: &plan.cpus,
        task,
        inherit: !a.no_inherit,
        cgroups: &ids,
        live_slots: plan.live.as_ref().map(|l| l.capacity),
        cgroup_v1: plan.cgroup_v1,
        verbose: a.verbose,
        shared: plan.shared.as_ref().map(|sh| SharedSetup {
            events: sh.events,
            dir: &sh.dir,
            processes: if sh.by_process { &plan.watched } else { &[] },
        }),
        rings,
    };
    let counter = Counter::open(&setup, storage)?;
    for (i, event) in plan.events.iter_mut().enumerate() {
        if first && counter.user_only(i) {
            event.name = event.user_only_name();
        }
    }
    Ok(counter)
}

/// One run: the command started and counted (intervals printed) until it ends. None
/// when the command could not be run (said on stderr).
fn run_once(a: &StatArgs, plan: &mut Plan, io: RunIo, first: bool) -> Result<Option<Measured>> {
    let RunIo {
        ack,
        wakes,
        tx,
        report,
        output,
        record,
        pipe,
    } = io;
    let io_tx = tx.clone();
    let tx = tx.clone();
    // The command is forked first and held before exec, so that a task counter can be
    // attached to it and every counter sees it from its first instruction.
    let workload = match a.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&a.command)?),
    };
    let mut storage = MaybeUninit::uninit();
    let task = workload
        .as_ref()
        .filter(|_| plan.task_mode)
        .map(Workload::pid);
    let mut counter = open_counter(a, plan, task, &mut storage, first, &[])?;
    let status = event_status(plan, &counter);
    if first && a.verbose > 0 {
        // As perf's -v, once: what the kernel would not open.
        report
            .out
            .flush()
            .with_context(|| format!("cannot write to {output}"))?;
        let refused = |i| {
            status
                .as_ref()
                .map_or(!counter.supported(i), |s| s[i] == Status::Refused)
        };
        // perf copies the events for each --for-each-cgroup cgroup, and warns for each
        // copy (--all-cgroups, bperf's own, warns once).
        let copies = match a.for_each_cgroup.is_empty() {
            false => plan.cgroups.len().max(1),
            true => 1,
        };
        for _ in 0..copies {
            for (_, e) in plan.events.iter().enumerate().filter(|(i, _)| refused(*i)) {
                eprintln!("Warning:\n{} event is not supported by the kernel.", e.name);
            }
        }
    }
    let status = status?;
    let delay = a.delay.filter(|&ms| ms > 0).map(|ms| ms as u64);
    if a.delay == Some(-1) {
        counter.start_paused();
    }
    if delay.is_some() || a.delay == Some(-1) {
        eprintln!("Events disabled");
    }
    // Counting runs from before the command is let go (starting it waits for its exec).
    let mut start = Instant::now();
    let child = match workload.map(|w| w.start(move |st, ru| drop(tx.send(Wake::Exited(st, ru))))) {
        Some(Err(e)) => {
            eprintln!("Workload failed: {e}");
            return Ok(None);
        }
        Some(Ok(child)) => Some(child),
        None => None,
    };
    if child.is_none() && !plan.watched.is_empty() {
        let ids = plan.watched.clone();
        let tx = io_tx.clone();
        process::when_all_end(ids, move || drop(tx.send(Wake::TargetsEnded)))
            .context("watching the processes counted")?;
    }
    // A command that ends, or a signal, during the delay ends it early.
    let mut early = None;
    if let Some(ms) = delay {
        early = wait(wakes, Instant::now().checked_add(Duration::from_millis(ms)));
        counter.restart()?;
        eprintln!("Events enabled");
        start = Instant::now();
    }
    let live = match &plan.live {
        Some(lp) => Some(LiveCgroups::start(lp, &plan.cgroups, move || {
            io_tx.send(Wake::Cgroups).is_ok()
        })?),
        None => None,
    };
    let nr_slots = live
        .as_ref()
        .map_or(plan.cgroups.len(), LiveCgroups::capacity);
    let tool_of: Vec<_> = plan.events.iter().map(|e| e.tool).collect();
    let thread_ids: Vec<libc::pid_t> = plan.threads.iter().map(|(tid, _)| *tid).collect();
    let tools = ToolTimes::start(&tool_of, task, &thread_ids, &plan.cpus);
    let mut session = Session {
        args: a,
        tools,
        status,
        prev: Snapshot::new(nr_slots, plan.events.len(), plan.nr_targets()),
        plan,
        live,
        counter,
        report,
        interrupted: false,
        ack,
        output: output.to_string(),
        start,
        recorded: record.then(Vec::new),
        pipe,
    };
    // What changed in the tree since the cgroups were first read.
    session.refresh_cgroups()?;
    let ended = session.count(early, wakes, child.as_ref())?;
    if let Ended::Command(st, _) = &ended {
        // As perf's psignal(3): which signal ended the command.
        if let Some(sig) = st.signal() {
            eprintln!("{}: {}", a.command[0], sys::signal_description(sig));
        }
    }
    session.finish(ended).map(Some)
}
