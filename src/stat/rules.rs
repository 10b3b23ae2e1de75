//! perf stat's reading of its options beyond parsing them: which option overrides which,
//! how -G hands cgroups to events, and what perf refuses, in perf's order and with its
//! exit statuses: 129 (UsageError) for what it refuses while reading the command line,
//! 234 (InvalidError) for the combinations it refuses afterwards.

use std::ops::Deref;

use anyhow::Result;

use super::record::{record_to, RecordTo};
use crate::cgroup::Tree;
use crate::cli::StatArgs;
use crate::event::{self, Event};
use crate::perf_version::PerfVersion;
use crate::session::plan::{CgroupTargets, EventRequest, Request, Targets};
use crate::sys::cgroupfs::{self, Cgroupfs};
use crate::sys::sysfs::Sysfs;
use crate::{InvalidError, UsageError};

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

fn invalid(msg: impl Into<String>) -> anyhow::Error {
    InvalidError(msg.into()).into()
}

/// perf's deepest cache level for --per-cache.
const MAX_CACHE_LEVEL: u32 = 4;

/// stat's options once perf has read them: what everything after the command line takes
/// (it reads as the options themselves, settled).
pub(crate) struct Settled {
    args: StatArgs,
    /// -e's lists, parsed once, one per -e in order.
    pub lists: Vec<Vec<Event>>,
    /// stat record: where the counts are recorded (-o named it; the report then goes
    /// where it goes without -o).
    pub recording: Option<RecordTo>,
    /// What -p or -t overrode (perf says "PID/TID switch overriding CPU" or "SYSTEM").
    pub overridden: Option<&'static str>,
}

impl Deref for Settled {
    type Target = StatArgs;

    fn deref(&self) -> &StatArgs {
        &self.args
    }
}

impl Settled {
    /// What to count, for the plan (its -e lists are `lists`, parsed already). The rows
    /// of stat record and of -r stay as they start.
    pub fn request(&self) -> Result<Request> {
        let filters = self.filter.iter().cloned();
        Ok(Request {
            events: EventRequest {
                lists: Vec::new(),
                bperfs: true,
                metrics: self.metrics.clone(),
                detailed: self.detailed,
                null_run: self.null_run,
                filters: filters.zip(self.filter_after.iter().copied()).collect(),
                all_user: self.all_user,
                all_kernel: self.all_kernel,
                names_with_pmu: self.no_aggr,
                bpf_counters: self.bpf_counters,
                bpf_attr_map: self.bpf_attr_map.clone(),
                perf_version: self.perf_version,
            },
            targets: Targets {
                all_cpus: self.cpus.all,
                cpus: self.cpus.list.clone(),
                pids: self.pid.clone(),
                tids: self.tid.clone(),
                per_thread: self.per_thread,
                command: self.command.clone(),
                cgroups: CgroupTargets {
                    per_event: self.event_cgroups.names.clone(),
                    ..self.cgroups.targets(&self.max_cgroups)
                },
            },
            aggr: self.aggr_mode()?,
            fixed_rows: self.recording.is_some() || self.repeat.is_some_and(|r| r != 1),
            verbose: self.verbose.level > 0,
        })
    }
}

/// stat's options settled as perf settles them before it opens its output, with its
/// refusals in its order: as_perf_reads, check_before_output, stat record's own
/// refusals; then the targets (not with -b, which counts programs and says itself what
/// it overrides).
pub fn settle(a: &StatArgs, record: bool) -> Result<Settled> {
    let (mut args, lists) = as_perf_reads(a)?;
    check_before_output(&args)?;
    let recording = match record {
        true if args.bpf_prog.is_some() => {
            return Err(usage("bperf stat record does not record -b's counts"))
        }
        true => Some(record_to(&args)?),
        false => None,
    };
    if recording.is_some() {
        args.output = None;
    }
    let overridden = match args.bpf_prog {
        Some(_) => None,
        None => settle_targets(&mut args, &lists),
    };
    Ok(Settled {
        args,
        lists,
        recording,
        overridden,
    })
}

/// The options as perf applies them, and -e's lists parsed, with what perf refuses
/// while reading the command line refused first: event lists that do not parse, -G's
/// cgroups, a --per-cache level beyond perf's; and perf's warning for each event list it
/// regrouped. Of several aggregation modes the strongest wins, as in perf (-A, then
/// --per-thread, --per-core, --per-cache, --per-cluster, --per-die, --per-socket,
/// --per-node); -p wins over -t. -G's names become one per event of -e (empty: none).
fn as_perf_reads(a: &StatArgs) -> Result<(StatArgs, Vec<Vec<Event>>)> {
    let version = a.version()?;
    check_version_options(a, version)?;
    if a.all_user && a.all_kernel {
        return Err(usage("option `all-kernel' cannot be used with all-user"));
    }
    let sysfs = Sysfs::system();
    let mut lists = Vec::with_capacity(a.events.list.len());
    for (i, list) in a.events.list.iter().enumerate() {
        if i == 0 && a.verbose_before_events {
            say_cpuid();
        }
        let event::Parsed { events, regrouped } =
            event::parse(list, &sysfs).map_err(|e| usage(e.to_string()))?;
        if regrouped {
            eprintln!("WARNING: events were regrouped to match PMUs");
        }
        lists.push(events);
    }
    let mut a = a.clone();
    a.perf_version = Some(version);
    if !a.event_cgroups.names.is_empty() {
        let events_per_option: Vec<usize> = lists.iter().map(Vec::len).collect();
        a.event_cgroups.names = cgroups_of_events(&a, &events_per_option)?;
    }
    check_cache_level(&a)?;
    strongest_aggregation(&mut a);
    if a.pid.is_some() {
        a.tid = None;
    }
    Ok((a, lists))
}

/// The options perf 6.12 does not have, refused as it refuses an unknown option; and
/// perf 7.2's --pmu-filter, which must come before the events it filters.
fn check_version_options(a: &StatArgs, version: PerfVersion) -> Result<()> {
    let newer = [
        ("affinity", a.affinity || a.no_affinity),
        ("pmu-filter", a.pmu_filter.is_some()),
        ("tpebs-mode", a.tpebs_mode.is_some()),
    ];
    match newer.iter().find(|(_, given)| *given) {
        Some((name, _)) if version == PerfVersion::V6_12 => Err(usage(format!(
            "unknown option `{name}' (perf 6.12 has none)"
        ))),
        _ if a.pmu_filter_after_events => {
            Err(usage("Must define pmu-filter before events/metrics"))
        }
        _ => Ok(()),
    }
}

/// perf's -v line as it first looks up its event tables: which CPU they are for.
pub(crate) fn say_cpuid() {
    if let Some(id) = crate::sys::cpuid() {
        eprintln!("Using CPUID {id}");
    }
}

/// -G as perf reads it, in command-line order: each -G needs events before it; its
/// names go to the events that have none yet, in order (an empty name skips one), and
/// when only one name was given so far, every event before it takes that one's cgroup.
/// The result has one name per event of -e, empty where it has none.
fn cgroups_of_events(a: &StatArgs, events_per_option: &[usize]) -> Result<Vec<String>> {
    if a.cgroup_after_for_each {
        return Err(usage(
            "--cgroup and --for-each-cgroup cannot be used together",
        ));
    }
    let total: usize = events_per_option.iter().sum();
    let mut names: Vec<Option<String>> = vec![None; total];
    let mut given = 0;
    for (list, &options_before) in a.event_cgroups.names.iter().zip(&a.cgroup_after) {
        let events_before: usize = events_per_option[..options_before].iter().sum();
        if events_before == 0 {
            return Err(usage("must define events before cgroups"));
        }
        for name in list.split(',') {
            if !name.is_empty() {
                if given >= events_before {
                    return Err(usage(format!(
                        "-G {list}: more cgroups than the {events_before} events before it"
                    )));
                }
                names[given] = Some(name.to_string());
            }
            given += 1;
        }
        if given == 1 {
            let first = names[0].clone();
            names[1..events_before].fill(first);
        }
    }
    check_cgroups_exist(names.iter().flatten())?;
    Ok(names.into_iter().map(Option::unwrap_or_default).collect())
}

/// As perf reading -G: every cgroup named must exist.
fn check_cgroups_exist<'a>(names: impl Iterator<Item = &'a String>) -> Result<()> {
    let mut names = names.peekable();
    if names.peek().is_none() {
        return Ok(());
    }
    let tree = Cgroupfs::new(cgroupfs::discover()?)?;
    for name in names {
        tree.resolve(name).map_err(|e| usage(e.to_string()))?;
    }
    Ok(())
}

fn check_cache_level(a: &StatArgs) -> Result<()> {
    let level = a
        .per_cache
        .as_deref()
        .map(|l| l.trim_start_matches(['L', 'l']))
        .and_then(|l| l.parse::<u32>().ok());
    match level {
        Some(l) if l > MAX_CACHE_LEVEL => Err(usage(format!(
            "perf only supports max cache level of {MAX_CACHE_LEVEL}."
        ))),
        _ => Ok(()),
    }
}

/// Keeps the strongest of the aggregation modes asked for, in perf's order.
fn strongest_aggregation(a: &mut StatArgs) {
    let mut flags = [
        &mut a.no_aggr,
        &mut a.per_thread,
        &mut a.per_core,
        &mut a.per_cluster,
        &mut a.per_die,
        &mut a.per_socket,
        &mut a.per_node,
    ];
    let mut cache = a.per_cache.is_some();
    // --per-cache ranks between --per-core and --per-cluster.
    let strongest = flags.iter().position(|f| **f);
    if let Some(i) = strongest {
        for f in flags.iter_mut().skip(i + 1) {
            **f = false;
        }
        if i <= 2 {
            cache = false;
        }
    }
    if cache {
        for f in flags.iter_mut().skip(3) {
            **f = false;
        }
    } else {
        a.per_cache = None;
    }
}

/// What perf refuses before it opens its output, in its order.
fn check_before_output(a: &StatArgs) -> Result<()> {
    if a.output.is_some() && a.log_fd.is_some() {
        return Err(invalid("cannot use both --output and --log-fd"));
    }
    if a.metric_only && a.per_thread {
        return Err(invalid("--metric-only is not supported with --per-thread"));
    }
    if a.metric_only && a.repeat.is_some_and(|r| r > 1) {
        return Err(invalid("--metric-only is not supported with -r"));
    }
    if a.table && a.repeat.unwrap_or(1) <= 1 {
        return Err(invalid("--table is only supported with -r"));
    }
    if a.log_fd.is_some_and(|fd| fd < 0) {
        return Err(invalid("argument to --log-fd must be a > 0"));
    }
    Ok(())
}

/// perf 7.2's usage lines after its refusal of -B with -x.
const BIG_NUM_WITH_CSV_USAGE: &str = "
 Usage: bperf stat [<options>] [<command>]

    -B, --big-num         print large numbers with thousands' separators
    -x, --field-separator <separator>
                          print counts with custom separator
";

/// What perf refuses once its output is open: -B with -x (perf 7.2 adds the usage of
/// the two). bperf refuses -x with -j too (perf 6.12 prints CSV fields inside its JSON
/// objects).
pub(crate) fn check_after_output(a: &StatArgs) -> Result<()> {
    if a.field_separator.is_some() && a.big_num {
        let message = "-B option not supported with -x";
        if a.perf_version.unwrap_or_default() == PerfVersion::V7_2 {
            return Err(crate::InvalidWithUsage {
                message: message.into(),
                usage: BIG_NUM_WITH_CSV_USAGE,
            }
            .into());
        }
        return Err(invalid(message));
    }
    if a.field_separator.is_some() && a.json {
        return Err(usage("-x and -j cannot be used together"));
    }
    Ok(())
}

/// The targets as perf settles them: -p or -t override -a and -C (what they overrode is
/// returned, for perf's line about it), and with no target and no command (or only
/// duration_time to count), perf counts the whole system.
fn settle_targets(a: &mut StatArgs, lists: &[Vec<Event>]) -> Option<&'static str> {
    let mut overridden = None;
    if a.pid.is_some() || a.tid.is_some() {
        overridden = match (a.cpus.list.is_some(), a.cpus.all) {
            (true, _) => Some("CPU"),
            (false, true) => Some("SYSTEM"),
            _ => None,
        };
        a.cpus.list = None;
        a.cpus.all = false;
    }
    let no_target = a.pid.is_none() && a.tid.is_none() && a.cpus.list.is_none() && !a.cpus.all;
    if no_target && (a.command.is_empty() || only_duration(lists)) {
        a.cpus.all = true;
    }
    overridden
}

/// Whether -e asks for duration_time alone, which perf counts for the whole system even
/// with a command (it times the command all the same).
fn only_duration(lists: &[Vec<Event>]) -> bool {
    let mut events = lists.iter().flatten().peekable();
    events.peek().is_some() && events.all(|e| e.tool == Some(event::Tool::Duration))
}

/// What perf refuses about the targets and the aggregation, in its order.
pub(crate) fn check_targets(a: &StatArgs) -> Result<()> {
    if a.repeat.is_some_and(|r| r < 0) {
        return Err(invalid("Run count must be a positive number"));
    }
    let task = a.pid.is_some() || a.tid.is_some();
    if a.per_thread && !task && (!a.cpus.all || a.cpus.list.is_some()) {
        return Err(invalid(
            "The --per-thread option is only available when monitoring via -p -t -a options or only --per-thread.",
        ));
    }
    let aggregated = a.no_aggr
        || a.per_socket
        || a.per_die
        || a.per_cluster
        || a.per_cache.is_some()
        || a.per_core
        || a.per_node;
    let cgroups = !a.event_cgroups.names.is_empty()
        || !a.cgroups.for_each.is_empty()
        || a.cgroups.all
        || a.cgroups.containers;
    if (aggregated || cgroups) && !(a.cpus.all || a.cpus.list.is_some()) {
        return Err(invalid(
            "both cgroup and no-aggregation modes only available in system-wide mode",
        ));
    }
    Ok(())
}

/// What perf refuses about cgroups once its events are known: -G with
/// --for-each-cgroup, and --for-each-cgroup with no events to copy for each (-n).
pub(crate) fn check_cgroups(a: &StatArgs) -> Result<()> {
    if !a.event_cgroups.names.is_empty() && !a.cgroups.for_each.is_empty() {
        return Err(invalid(
            "--cgroup and --for-each-cgroup cannot be used together",
        ));
    }
    if a.null_run && a.events.list.is_empty() && !a.cgroups.for_each.is_empty() {
        return Err(invalid("must define events before cgroups"));
    }
    Ok(())
}

/// What perf refuses about the timing options, in its order (and its warning about a
/// short --timeout).
pub(crate) fn check_timing(a: &StatArgs) -> Result<()> {
    if a.interval_count.is_some_and(|n| n > 0) && a.interval.is_none() {
        return Err(invalid(
            "interval-count option should be used together with interval-print.",
        ));
    }
    if a.timeout.is_some_and(|ms| ms < 10) {
        return Err(invalid("timeout must be >= 10ms."));
    }
    if a.timeout.is_some_and(|ms| ms < 100) {
        eprintln!("timeout < 100ms. The overhead percentage could be high in some cases. Please proceed with caution.");
    }
    if a.timeout.is_some_and(|ms| ms > 0) && a.interval.is_some() {
        return Err(invalid(
            "timeout option is not supported with interval-print.",
        ));
    }
    Ok(())
}

/// The shortest -I bperf takes.
pub(crate) const MIN_INTERVAL_MS: u64 = 10;

/// Refuses, as perf does on a machine without them, what needs hardware or tables bperf
/// does not have; and what bperf does not do yet.
pub(crate) fn check_unavailable(a: &StatArgs) -> Result<()> {
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
        return Err(usage("Unsupported uncore pmu configuration"));
    }
    if let Some(t) = &a.cputype {
        return Err(usage(format!("--cputype {t} is not supported!")));
    }
    Ok(())
}

/// What bperf refuses of the options about when counting runs, where perf would count
/// nothing, or forever.
pub(crate) fn check_own_limits(a: &StatArgs) -> Result<()> {
    if let Some(ms) = a.interval.filter(|&ms| ms < MIN_INTERVAL_MS) {
        return Err(usage(format!(
            "print interval must be >= {MIN_INTERVAL_MS} ms (got -I {ms})"
        )));
    }
    match a.repeat {
        Some(0) if a.interval.is_some() => return Err(usage("-r 0 with -I is not supported")),
        Some(n) if n != 1 && a.command.is_empty() => {
            return Err(usage("-r needs a command to run again"))
        }
        _ => {}
    }
    match a.delay {
        Some(-1) if a.control.is_none() => Err(usage(
            "-D -1 starts counting disabled: it needs --control to enable it",
        )),
        Some(-1) => Ok(()),
        Some(ms) if ms < -1 => Err(usage(format!("invalid delay -D {ms}"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: impl FnOnce(&mut StatArgs)) -> StatArgs {
        let mut a = StatArgs::default();
        f(&mut a);
        a
    }

    #[test]
    fn the_strongest_aggregation_wins() {
        let mut a = args(|a| {
            a.per_socket = true;
            a.per_core = true;
            a.per_node = true;
        });
        strongest_aggregation(&mut a);
        assert!(a.per_core && !a.per_socket && !a.per_node);
        let mut a = args(|a| {
            a.no_aggr = true;
            a.per_cache = Some(String::new());
        });
        strongest_aggregation(&mut a);
        assert!(a.no_aggr && a.per_cache.is_none());
        let mut a = args(|a| {
            a.per_die = true;
            a.per_cache = Some("L2".into());
        });
        strongest_aggregation(&mut a);
        assert!(!a.per_die && a.per_cache.is_some());
    }

    #[test]
    fn targets_settle_as_perf_settles_them() {
        let mut a = args(|a| {
            a.pid = Some("1".into());
            a.cpus.all = true;
        });
        assert_eq!(settle_targets(&mut a, &[]), Some("SYSTEM"));
        assert!(!a.cpus.all);
        let mut a = args(|_| {});
        assert_eq!(settle_targets(&mut a, &[]), None);
        assert!(a.cpus.all);
        let mut a = args(|a| a.command = vec!["true".into()]);
        settle_targets(&mut a, &[]);
        assert!(!a.cpus.all);
        // duration_time alone is counted for the whole system, even with a command.
        let sysfs = Sysfs::system();
        let duration = vec![event::parse_events("duration_time", &sysfs).unwrap()];
        let mut a = args(|a| a.command = vec!["true".into()]);
        settle_targets(&mut a, &duration);
        assert!(a.cpus.all);
    }
}
