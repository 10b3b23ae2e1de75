//! The plan: everything a session counts (events, CPUs, cgroups and their slots,
//! threads, the rows to print), resolved from a [`Request`], the plain description of
//! what the command line asks for. What the plan reads of the machine goes through
//! [`Machine`], so that tests resolve plans from fixtures.

mod cgroups;
mod events;
#[cfg(test)]
mod tests;

use std::io;

use anyhow::{Context, Result};

use crate::aggr::{self, CpuTopology};
use crate::cgroup::{Cgroup, Selection, Tree};
use crate::event::{self, Event, Sources};
use crate::metrics;
use crate::perf_version::PerfVersion;
use crate::sys::cgroupfs::{self, Cgroupfs};
use crate::sys::sysfs::Sysfs;
use crate::sys::{self, process, topology};
use crate::UsageError;
pub use events::{groups, PlanEvents};

/// -p names a process that is not there: perf stat refuses it with -EINVAL (234), perf
/// record with -ENOMEM (244, "Couldn't create thread/CPU maps").
#[derive(Debug, thiserror::Error)]
#[error("Problems finding threads of monitor: no process {0}")]
pub struct NoProcess(pub libc::pid_t);

/// Nothing perf 7.2 could count: -C naming only CPUs that are not online, or every
/// event refused (the first refused one named). perf exits 1, after its warnings.
#[derive(Debug, thiserror::Error)]
#[error("No supported events found.{}", refusal_said(.refused.as_deref(), *.why))]
pub struct NoSupportedEvents {
    pub refused: Option<String>,
    /// How perf words the refusal of that event.
    pub why: Refusal,
    /// What was said before the plan was given up, for the command to say first.
    pub warnings: Vec<String>,
}

/// What [`NoSupportedEvents`] says after "No supported events found.": how perf words
/// the refusal of the event it names, or nothing.
fn refusal_said(refused: Option<&str>, why: Refusal) -> String {
    match (refused, why) {
        (Some(refused), Refusal::InvalidPerThread) => format!(
            " Invalid event ({refused}) in per-thread mode, enable system wide with '-a'."
        ),
        (Some(refused), Refusal::Invalid) => format!(
            " The sys_perf_event_open() syscall failed for event ({refused}): Invalid argument \"dmesg | grep -i perf\" may provide additional information."
        ),
        (Some(refused), Refusal::NotSupported) => {
            format!(" The {refused} event is not supported.")
        }
        (None, _) => String::new(),
    }
}

/// perf 7.2's words for the event it names when nothing could be counted, after the
/// error of the last open refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    NotSupported,
    /// EINVAL counting a command or threads, for an event of a PMU of its own.
    InvalidPerThread,
    /// EINVAL otherwise.
    Invalid,
}

/// What to count, as the command line asks for it: filled by the command-line layer
/// (cli), read by [`Plan::new`] and [`Plan::resolve`].
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub events: EventRequest,
    pub targets: Targets,
    /// --per-socket and the like.
    pub aggr: Option<aggr::Mode>,
    /// The rows stay as they start (stat record, -r): no live cgroups.
    pub fixed_rows: bool,
    /// -v: say which events leave their groups, and on which CPUs.
    pub verbose: bool,
}

/// The events asked for.
#[derive(Clone, Debug, Default)]
pub struct EventRequest {
    /// -e's lists, in order (none: perf's default set).
    pub lists: Vec<String>,
    /// -M's metrics and metric groups.
    pub metrics: Vec<String>,
    /// -d, -dd, -ddd.
    pub detailed: u8,
    /// -n: no default events.
    pub null_run: bool,
    /// --filter: each filter, and how many -e lists came before it.
    pub filters: Vec<(String, usize)>,
    pub all_user: bool,
    pub all_kernel: bool,
    /// -A: events named with their PMU, as perf 6.12 names events it does not merge.
    pub names_with_pmu: bool,
    /// --bpf-counters: every event through the shared counters.
    pub bpf_counters: bool,
    /// --bpf-attr-map: where the shared counters are pinned.
    pub bpf_attr_map: Option<String>,
    /// bperf's own events may be asked for (top; stat gives its lists parsed).
    pub bperfs: bool,
    /// stat's perf version, whose default events to count without -e and -M (None, as
    /// for serve: perf 6.12's).
    pub perf_version: Option<crate::perf_version::PerfVersion>,
}

/// Where to count: CPUs, processes or threads, a command, and cgroups.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// -a.
    pub all_cpus: bool,
    /// -C's list, as written.
    pub cpus: Option<String>,
    /// -p's list.
    pub pids: Option<String>,
    /// -t's list.
    pub tids: Option<String>,
    /// --per-thread (without -p or -t: every thread of the system).
    pub per_thread: bool,
    /// The command to run and count.
    pub command: Vec<String>,
    pub cgroups: CgroupTargets,
}

/// The cgroups asked for.
#[derive(Clone, Debug, Default)]
pub struct CgroupTargets {
    /// --for-each-cgroup's lists.
    pub for_each: Vec<String>,
    /// --all-cgroups.
    pub all: bool,
    /// --for-each-container.
    pub containers: bool,
    /// -G, one name per event (empty: counted system-wide).
    pub per_event: Vec<String>,
    /// --max-cgroups: live cgroups counted at once.
    pub max: u32,
}

impl CgroupTargets {
    /// Every event for each cgroup (--for-each-cgroup, --all-cgroups), rather than -G's
    /// one cgroup per event.
    pub fn rows(&self) -> bool {
        self.all || self.containers || !self.for_each.is_empty()
    }
}

/// Everything a session counts, resolved from the request.
pub struct Plan {
    /// perf's warnings about the plan (CPUs a PMU does not cover, groups broken up),
    /// for the command to say where it says things.
    pub warnings: Vec<String>,
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
    /// --for-each-container: the rows have a container column.
    pub containers: bool,
}

/// Live cgroups: the rule that picks them and how many can be counted at once.
#[derive(Clone, Debug)]
pub struct LivePlan {
    pub selection: Selection,
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
    /// Container column (--for-each-container): the container's name, its short id
    /// until a runtime names it.
    pub container: Option<String>,
}

/// A thread: its id and command name.
pub type Thread = (libc::pid_t, String);

/// The most monitored cgroups one cgroup's time can be charged to: itself and its
/// monitored ancestors (BPERF_MAX_LEVELS in src/bpf/bperf.h).
pub(crate) const MAX_CHARGED_LEVELS: usize = crate::bpf::MAX_LEVELS;

/// What a plan reads of the machine: its events, CPUs, cgroups, threads and topology.
/// [`System`] reads the running system; tests give fixtures.
pub trait Machine {
    fn sources(&self) -> &dyn Sources;
    fn online_cpus(&self) -> Result<Vec<u32>>;
    /// The cgroups of the perf_event controller's hierarchy (read only when cgroups are
    /// asked for).
    fn cgroups(&self) -> Result<Box<dyn Tree>>;
    /// The threads of process `pid`.
    fn threads_of(&self, pid: libc::pid_t) -> io::Result<Vec<Thread>>;
    fn thread(&self, tid: libc::pid_t) -> io::Result<Thread>;
    /// Every thread of the system.
    fn all_threads(&self) -> Vec<Thread>;
    fn topology(&self, cpus: &[u32]) -> Vec<CpuTopology>;
}

/// The running system.
pub(crate) struct System {
    sysfs: Sysfs,
}

impl System {
    pub fn new() -> System {
        System {
            sysfs: Sysfs::system(),
        }
    }
}

impl Default for System {
    fn default() -> Self {
        System::new()
    }
}

impl Machine for System {
    fn sources(&self) -> &dyn Sources {
        &self.sysfs
    }
    fn online_cpus(&self) -> Result<Vec<u32>> {
        sys::online_cpus().context("reading online CPUs")
    }
    fn cgroups(&self) -> Result<Box<dyn Tree>> {
        Ok(Box::new(Cgroupfs::new(cgroupfs::discover()?)?))
    }
    fn threads_of(&self, pid: libc::pid_t) -> io::Result<Vec<Thread>> {
        process::threads_of(pid)
    }
    fn thread(&self, tid: libc::pid_t) -> io::Result<Thread> {
        process::thread(tid)
    }
    fn all_threads(&self) -> Vec<Thread> {
        process::all_threads()
    }
    fn topology(&self, cpus: &[u32]) -> Vec<CpuTopology> {
        topology::read(&topology::system_root(), cpus)
    }
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

impl Plan {
    /// The plan of `req` on this machine (bperf serve and record; stat puts perf's
    /// checks between the steps, see stat::plan_of).
    pub fn new(req: &Request) -> Result<Plan> {
        let machine = System::new();
        let events = PlanEvents::parse(req, &machine)?;
        Plan::resolve(req, events, &machine)
    }

    /// The plan of `req`, its events parsed already: the CPUs, cgroups and their slots,
    /// threads and rows.
    pub(crate) fn resolve(
        req: &Request,
        parsed: PlanEvents,
        machine: &dyn Machine,
    ) -> Result<Plan> {
        let t = &req.targets;
        let per_cpu_target = t.all_cpus || t.cpus.is_some();
        let PlanEvents {
            mut events,
            metrics,
        } = parsed;
        let mut warnings = Vec::new();
        let cpus = match req.events.perf_version {
            Some(PerfVersion::V7_2) => {
                online_among_asked(t.cpus.as_deref(), &events, machine, &mut warnings)?
            }
            _ => parse_cpus(t.cpus.as_deref(), machine)?,
        };
        if per_cpu_target {
            warnings.extend(event::hybrid::fit_to_cpus(
                &mut events,
                &cpus,
                t.cpus.as_deref(),
            ));
        }
        let shared = events::shared_plan(&req.events, t, &events)?;
        let mut cg = cgroups::parse(&t.cgroups, events.len(), machine)?;
        // A hybrid event whose core PMU has none of the CPUs counted has no line.
        cg.rows
            .retain(|r| !per_cpu_target || events[r.event].counts_on_any(&cpus));
        let live = cgroups::live_plan(req, shared.is_some(), &mut cg);
        let all_threads = all_threads(t);
        let (threads, watched) = match all_threads {
            true => (machine.all_threads(), Vec::new()),
            false => parse_threads(t, machine)?,
        };
        if per_cpu_target {
            // --for-each-cgroup: perf has a copy of every event for each cgroup.
            let copies = match t.cgroups.rows() {
                true => cg.rows.len() / events.len().max(1),
                false => 1,
            };
            events::ungroup_other_cpus(&mut events, &cpus, copies, req.verbose, &mut warnings);
        }
        let aggr = req
            .aggr
            .map(|m| (m, aggr::groups(m, &machine.topology(&cpus))));
        Ok(Plan {
            warnings,
            aggr,
            events,
            cpus,
            cgroups: cg.slots.into_cgroups(),
            cgroup_v1: cg.v1,
            task_mode: task_mode(t),
            threads,
            watched,
            target: target_name(t),
            series: cg.rows,
            cgroup_rows: t.cgroups.rows(),
            metrics,
            hide_idle_threads: all_threads,
            shared,
            live,
            containers: t.cgroups.containers,
        })
    }

    /// How many places the counter reads: threads with -p or -t, else CPUs (one for a
    /// command, whose readings are summed the same way).
    pub(crate) fn nr_targets(&self) -> usize {
        match self.threads.len() {
            0 => self.cpus.len(),
            n => n,
        }
    }
}

/// --per-thread without -p or -t: every thread of the system, as perf.
fn all_threads(t: &Targets) -> bool {
    t.per_thread && t.pids.is_none() && t.tids.is_none()
}

/// Counting only the command and its children: no CPUs, threads or processes asked for.
fn task_mode(t: &Targets) -> bool {
    let per_cpu = t.all_cpus || t.cpus.is_some();
    let threads = t.pids.is_some() || t.tids.is_some();
    !per_cpu && !threads && !t.command.is_empty()
}

/// What the header says is counted, as perf says it.
fn target_name(t: &Targets) -> String {
    match (&t.pids, &t.tids) {
        (Some(p), _) => format!("process id '{p}'"),
        (_, Some(t)) => format!("thread id '{t}'"),
        _ if task_mode(t) => format!("'{}'", t.command.join(" ")),
        // As perf: -C without -a names the CPUs as they were written.
        _ => match (&t.cpus, t.all_cpus) {
            (Some(list), false) => format!("'CPU(s) {list}'"),
            _ => "'system wide'".into(),
        },
    }
}

/// The CPUs from -C, all online CPUs without it.
fn parse_cpus(list: Option<&str>, machine: &dyn Machine) -> Result<Vec<u32>> {
    let online = machine.online_cpus()?;
    let Some(list) = list else {
        return Ok(online);
    };
    let cpus = crate::cpus::parse_list(list).map_err(|e| usage(e.to_string()))?;
    if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
        return Err(usage(format!("CPU {c} is not online (online: {online:?})")));
    }
    Ok(cpus)
}

/// perf 7.2's CPUs from -C: those online, each event warned of when some are not (as
/// perf warns of a CPU its PMU does not cover); none online is [`NoSupportedEvents`].
fn online_among_asked(
    list: Option<&str>,
    events: &[Event],
    machine: &dyn Machine,
    warnings: &mut Vec<String>,
) -> Result<Vec<u32>> {
    let online = machine.online_cpus()?;
    let Some(list) = list else {
        return Ok(online);
    };
    let asked = crate::cpus::parse_list(list).map_err(|e| usage(e.to_string()))?;
    let (counted, missing): (Vec<u32>, Vec<u32>) = asked.iter().partition(|c| online.contains(c));
    if missing.is_empty() {
        return Ok(counted);
    }
    for e in events {
        warnings.push(format!(
            "WARNING: A requested CPU in '{}' is not supported by PMU '{}' (CPUs {}) for event '{}'",
            crate::cpus::format_list(&asked),
            pmu_of(e, machine),
            crate::cpus::format_list(&online),
            e.name
        ));
    }
    match counted.is_empty() {
        true => Err(NoSupportedEvents {
            refused: None,
            why: Refusal::NotSupported,
            warnings: std::mem::take(warnings),
        }
        .into()),
        false => Ok(counted),
    }
}

/// The PMU perf names an event's CPUs after: its tool events' own `tool`.
fn pmu_of(e: &Event, machine: &dyn Machine) -> String {
    match e.tool {
        Some(t) if t.is_perfs() => "tool".into(),
        Some(_) => "bperf".into(),
        None => event::pmu_name(e.attr.type_, machine.sources()).unwrap_or_else(|| "cpu".into()),
    }
}

/// The threads of -p's processes, or -t's threads, and the ids whose end ends counting.
fn parse_threads(t: &Targets, machine: &dyn Machine) -> Result<(Vec<Thread>, Vec<libc::pid_t>)> {
    let (list, of_process) = match (&t.pids, &t.tids) {
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
            true => machine.threads_of(id),
            false => machine.thread(id).map(|t| vec![t]),
        };
        // As perf: a process it cannot find is refused before counting, a thread when
        // its counter cannot be opened.
        let found = found.map_err(|_| match of_process {
            true => NoProcess(id).into(),
            false => anyhow::anyhow!("Problems finding threads of monitor: no thread {id}"),
        })?;
        threads.extend(found);
        ids.push(id);
    }
    threads.sort();
    threads.dedup();
    Ok((threads, ids))
}
