//! `bperf top`'s options.

use clap::Args;

use super::shared::{
    help_of, CgroupArgs, CpuArgs, EventArgs, MaxCgroupsArg, VerboseArg, VERBOSE_OF_EXPORTERS,
};
use crate::session::plan::{CgroupTargets, EventRequest, Request, Targets};

pub(super) const TOP_ABOUT: &str = "\
A live view of every cgroup's counters in the terminal, refreshed every -d seconds: one \
row per cgroup with each event's rate per second, CPUs (from task-clock), IPC (where \
cycles and instructions count) and miss rates (branch and cache misses), sorted by any \
column. Cgroups made while it runs appear; removed ones go.

Keys: Up/Down or k/j select a row (its sparkline shows the sorted column's history), s \
or > sort by the next column, < by the one before, r reverses the order, / filters by \
name (Enter keeps it, Esc clears it), t switches to the tree of cgroups and back, Left \
folds the selected row of the tree and Right unfolds it (Enter toggles; a folded row's \
figures hold its descendants', as every cgroup's do), p pauses, q or Ctrl-C quits. The \
terminal is restored on every exit (q, Ctrl-C, SIGTERM, a panic).

Needs a terminal on stdout; --batch prints plain text instead, for scripts. --tree starts \
in the tree view; with --batch it prints every refresh as the tree, each line ending with \
the cgroup's whole path.";

pub(super) const TOP_EXAMPLES: &[&str] = &[
    "bperf top",
    "bperf top -e task-clock,cycles,instructions --for-each-cgroup 'system.slice/.*'",
    "bperf top --batch -n 3 -d 0.5",
    "bperf top --batch --tree -n 1 --for-each-cgroup 'system.slice(/.*)?'",
    "bperf top --bpf-counters",
];

/// What `bperf top` counts and how it shows it.
#[derive(Debug, Args, Clone)]
#[command(args_override_self = true)]
#[command(mut_arg("events", |a| help_of(a, "Events, as bperf stat takes them (default: task-clock, context-switches, cpu-migrations, page-faults, cycles, instructions)")))]
#[command(mut_arg("all_cpus", |a| help_of(a, "Count on all CPUs (the default, unless -C is given)")))]
#[command(mut_arg("for_each_cgroup", |a| help_of(a, "Show each of these cgroups (names or patterns, as bperf stat takes them)")))]
#[command(mut_arg("all_cgroups", |a| help_of(a, "Show every cgroup, those created later included (the default without cgroup options)")))]
#[command(mut_arg("for_each_container", |a| help_of(a, "Show each container's cgroup, those started later included, named by its container (and its image: with --batch, and on a terminal wide enough for both)")))]
#[command(mut_arg("verbose", |a| help_of(a, VERBOSE_OF_EXPORTERS)))]
pub struct TopArgs {
    /// Seconds between refreshes (fractions allowed).
    #[arg(short = 'd', long = "delay", value_name = "SECONDS", default_value = "1",
          value_parser = parse_delay)]
    pub delay: std::time::Duration,

    /// Print plain text instead of the full-screen view: every refresh as a header line
    /// and a table, for scripts and pipes.
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,

    /// Start in the tree view (`t` still switches): each cgroup under its parent,
    /// siblings in the sort order. With --batch, the figures come first and each line
    /// ends with the cgroup's whole path, indented under its parent's as `ps f` draws
    /// its forest (` \_ `), so that the path stays the last field.
    #[arg(long = "tree")]
    pub tree: bool,

    /// Stop after N refreshes (default: run until q, Ctrl-C or SIGTERM).
    #[arg(short = 'n', long = "iterations", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,

    /// Count every event through the shared BPF counters, as bperf stat's
    /// --bpf-counters: one perf event per event per CPU for every bperf on the machine.
    #[arg(long = "bpf-counters")]
    pub bpf_counters: bool,

    /// Show how long each cgroup's tasks waited for a CPU (the wait column, in CPUs'
    /// worth of waiting, as CPUs is of running), how often they were preempted, and whom
    /// the selected cgroup waited behind: the events bperf/runq-wait/ and
    /// bperf/preemptions/, which -e may name as well. On by default.
    #[arg(long = "runq", overrides_with = "no_runq")]
    pub runq: bool,

    /// Show no run-queue columns or culprits.
    #[arg(long = "no-runq", overrides_with = "runq")]
    pub no_runq: bool,

    #[command(flatten)]
    pub events: EventArgs,

    #[command(flatten)]
    pub cpus: CpuArgs,

    #[command(flatten)]
    pub cgroups: CgroupArgs,

    #[command(flatten)]
    pub max_cgroups: MaxCgroupsArg,

    #[command(flatten)]
    pub verbose: VerboseArg,
}

/// -d: seconds, at least a tenth, at most a day.
fn parse_delay(s: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(0.1..=86400.0).contains(&secs) {
        return Err(format!("{s}: between 0.1 and 86400 seconds"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

impl TopArgs {
    /// Whether top counts the run-queue events: unless --no-runq.
    pub fn shows_runq(&self) -> bool {
        !self.no_runq
    }

    /// What to count, for the plan: every CPU unless -C says which, every cgroup
    /// without cgroup options, top's own events without -e.
    pub fn request(&self) -> Request {
        let mut lists = match self.events.list.is_empty() {
            true => vec![crate::event::TOP_DEFAULT_EVENTS.to_string()],
            false => self.events.list.clone(),
        };
        if self.shows_runq() {
            lists.push(crate::event::RUNQ_EVENTS.to_string());
        }
        Request {
            events: EventRequest {
                lists,
                bperfs: true,
                bpf_counters: self.bpf_counters,
                ..EventRequest::default()
            },
            targets: Targets {
                all_cpus: self.cpus.all || self.cpus.list.is_none(),
                cpus: self.cpus.list.clone(),
                cgroups: CgroupTargets {
                    all: self.cgroups.all
                        || (self.cgroups.for_each.is_empty() && !self.cgroups.containers),
                    ..self.cgroups.targets(&self.max_cgroups)
                },
                ..Targets::default()
            },
            verbose: self.verbose.level > 0,
            ..Request::default()
        }
    }
}
