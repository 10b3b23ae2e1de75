//! Command-line types. Option names and meanings follow `perf stat`. The man pages and
//! shell completions are generated from these definitions (see `man_pages`).

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

use crate::aggr;
use crate::session::plan::{CgroupTargets, EventRequest, Request, Targets};
use crate::UsageError;

#[derive(Debug, Parser)]
#[command(
    name = "bperf",
    version,
    about = "Count perf events per cgroup with BPF, printed like perf stat",
    long_about = "Counts hardware and software events for many cgroups at once. bperf opens \
one counting perf event per event per CPU, and a BPF program that runs when a CPU \
switches tasks splits what those counters count between the monitored cgroups. The \
number of perf events is events x CPUs whatever the number of cgroups, the PMU is never \
reprogrammed at a cgroup switch, and nothing is multiplexed because of cgroups.\n\n\
The output is that of perf stat: the table, interval lines, CSV and JSON, so that \
scripts written for perf keep working.",
    // No styling: an error then quotes what the user typed byte for byte, and bperf
    // escapes its control characters (main.rs).
    styles = clap::builder::Styles::plain()
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

// The stat variant is large, and made once per run.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Count events system-wide or per cgroup, while a command runs or until Ctrl-C.
    #[command(long_about = STAT_ABOUT)]
    Stat(StatArgs),
    /// List the events this machine offers, marking those its kernel refuses.
    #[command(long_about = LIST_ABOUT)]
    List(ListArgs),
    /// Count continuously and export the counts for Prometheus (HTTP /metrics, or a
    /// file for node_exporter's textfile collector).
    #[command(long_about = SERVE_ABOUT)]
    Serve(ServeArgs),
    /// Record every slice of time a CPU gives a monitored cgroup, with its counts, to a
    /// file (bperf.data) for bperf report.
    #[command(long_about = RECORD_ABOUT)]
    Record(RecordArgs),
    /// Print what bperf record wrote: per-cgroup totals like bperf stat's, breakdowns
    /// by CPU and task, distributions, and a timeline.
    #[command(long_about = REPORT_ABOUT)]
    Report(ReportArgs),
    /// A live view of every cgroup's counters in the terminal: rates, CPUs, IPC and
    /// miss rates per cgroup, sorted, filtered and refreshed every -d seconds.
    #[command(long_about = TOP_ABOUT)]
    Top(TopArgs),
    /// Check what works on this machine and why not: kernel, BPF features, PMUs,
    /// privileges, cgroups, mounts and container runtimes, one line each with the fix.
    #[command(long_about = DOCTOR_ABOUT)]
    Doctor(DoctorArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_name = "SHELL")]
        shell: Shell,
    },
}

/// Parses the command line; for `stat`, notes which -e each --filter and -G follows, as
/// perf applies a filter to the event before it and -G to the events before it.
/// `cmd` where a negative number after an option that takes a value is that value, as
/// perf reads "-d -1": refused by the value's own check, in a line naming the option,
/// rather than as an unknown option '-1'.
fn negative_values(cmd: clap::Command) -> clap::Command {
    let takes_value = |a: clap::Arg| match !a.is_positional() && a.get_action().takes_values() {
        true => a.allow_negative_numbers(true),
        false => a,
    };
    cmd.mut_subcommands(move |sub| sub.mut_args(takes_value))
}

pub fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let matches = negative_values(Cli::command()).try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Command::Stat(a), Some(m)) = (&mut cli.cmd, matches.subcommand_matches("stat")) {
        let events: Vec<usize> = m
            .indices_of("events")
            .map(Iterator::collect)
            .unwrap_or_default();
        let after = |name: &str| -> Vec<usize> {
            m.indices_of(name)
                .map(|at| {
                    at.map(|at| events.iter().filter(|&&e| e < at).count())
                        .collect()
                })
                .unwrap_or_default()
        };
        a.filter_after = after("filter");
        a.cgroup_after = after("cgroup");
        let first_for_each = m.indices_of("for_each_cgroup").and_then(|mut i| i.next());
        a.cgroup_after_for_each = first_for_each
            .is_some_and(|f| m.indices_of("cgroup").is_some_and(|mut g| g.any(|g| g > f)));
        let first_verbose = m.indices_of("verbose").and_then(|mut i| i.next());
        a.verbose_before_events =
            first_verbose.is_some_and(|v| events.first().is_none_or(|&e| e > v));
        // perf 7.2 refuses a --pmu-filter after an -e or -M.
        let metrics = m.indices_of("metrics").into_iter().flatten();
        let first_list = events.iter().copied().chain(metrics).min();
        a.pmu_filter_after_events = m
            .indices_of("pmu_filter")
            .is_some_and(|mut f| f.any(|f| first_list.is_some_and(|e| e < f)));
    }
    Ok(cli)
}

/// What `bperf stat` is asked to do: count, or perf's `stat record` and `stat report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatMode {
    Count,
    /// Count, and also write the counts to a perf.data file (-o, default perf.data).
    Record,
    /// Print the counts of a perf.data file written by `stat record`.
    Report,
}

/// Takes perf's `record` or `report` word out of `args` when it follows `stat`; as perf,
/// any start of the word of three letters or more.
pub fn take_stat_mode(args: &mut Vec<OsString>) -> StatMode {
    let word = match (args.get(1), args.get(2)) {
        (Some(stat), Some(w)) if stat == "stat" => w.to_string_lossy().into_owned(),
        _ => return StatMode::Count,
    };
    let mode = match word.len() > 2 {
        true if "record".starts_with(&word) => StatMode::Record,
        true if "report".starts_with(&word) => StatMode::Report,
        _ => return StatMode::Count,
    };
    args.remove(2);
    mode
}

/// `bperf stat report`: perf stat report's options.
#[derive(Debug, Parser)]
#[command(
    name = "bperf stat report",
    bin_name = "bperf stat report",
    about = "Print the counts a perf.data file holds, written by perf stat record or bperf stat record",
    styles = clap::builder::Styles::plain()
)]
pub struct StatReportArgs {
    /// The file to read (default perf.data); `-` reads standard input, as does no -i
    /// when standard input is a pipe (perf's pipe format, `stat record -o -`).
    #[arg(short = 'i', long = "input", value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Print the counts of each CPU, when the file has them.
    #[arg(short = 'A', long = "no-aggr")]
    pub no_aggr: bool,
}

const STAT_ABOUT: &str = "Counts the given events on every CPU (or the CPUs given with -C), \
or, without -a and -C, in the given command and its children. With --for-each-cgroup, \
--all-cgroups or -G, the counts are split between cgroups by a BPF program: a cgroup is \
charged for exactly the time its tasks ran, including a task that moved itself into it \
while running, and each monitored cgroup also includes its descendants at any depth.\n\n\
With a command, counting lasts while it runs and bperf exits with its status. Without \
one, counting lasts until Ctrl-C (SIGINT) or SIGTERM, after which the summary is \
printed. A command bperf started ends with bperf, on every way out. Counts are printed \
on standard error unless -o is given, as perf does.\n\n\
bperf stat record [OPTIONS] [COMMAND] counts as bperf stat does and also writes the \
counts of the run to a perf.data file (-o FILE, perf.data without it) that perf stat \
report reads; bperf stat report [-i FILE] [-A] prints the counts of such a file, \
written by bperf or by perf.";

const LIST_ABOUT: &str = "Lists the events that bperf stat -e accepts, grouped as perf list \
groups them: hardware events, software events, hardware cache events, then the events \
each PMU under /sys/bus/event_source/devices describes, and with --tracepoints or a \
filter, tracepoints. Each event is opened once for the calling thread and closed again; \
an event this kernel refuses is marked <not supported>. Without a filter, the format \
terms of each PMU follow, with the bits of the attr word each one fills.";

#[derive(Debug, Args, Clone, Default)]
pub struct ListArgs {
    /// What to list: perf's categories hw, sw, cache, tracepoint, pmu (and metric,
    /// metricgroup: bperf has no metric tables), or events whose name contains this or
    /// matches it as a glob (`L1*misses`).
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,

    /// Also list tracepoints (always searched when a filter is given).
    #[arg(long = "tracepoints")]
    pub tracepoints: bool,

    /// Print the events as a JSON array, with perf's keys.
    #[arg(short = 'j', long = "json")]
    pub json: bool,

    /// Write the list to FILE instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,

    /// Only events of this PMU (`msr`, `software`, `tracepoint`).
    #[arg(long = "unit", value_name = "PMU")]
    pub unit: Option<String>,

    /// Print one table of every event: aliases, kind, encoding and whether it opens here.
    #[arg(long = "details")]
    pub details: bool,

    /// Print descriptions (perf's default; bperf's events have none beyond their kind).
    #[arg(short = 'd', long = "desc")]
    pub desc: bool,

    /// Longer descriptions (as -d here).
    #[arg(short = 'v', long = "long-desc")]
    pub long_desc: bool,

    /// Print only the names, each followed by a space, on one line (perf's form for
    /// scripts); FILTER words select sections as without it.
    #[arg(long = "raw-dump")]
    pub raw_dump: bool,
}

#[derive(Debug, Args, Clone, Default)]
// As in perf, an option given again replaces what it said before (-e and -v add up).
#[command(trailing_var_arg = true, args_override_self = true)]
#[command(mut_arg("all_cgroups", |a| a.conflicts_with("cgroup")))]
pub struct StatArgs {
    #[command(flatten)]
    pub events: EventArgs,

    /// A tracepoint filter for the event before it (the last of the -e before it), as
    /// the kernel's tracing filters are written: 'prev_pid == 0'.
    #[arg(long = "filter", value_name = "FILTER")]
    pub filter: Vec<String>,

    /// For each --filter, how many -e options came before it (filled in by `parse`).
    #[arg(skip)]
    pub filter_after: Vec<usize>,

    /// For each -G, how many -e options came before it (filled in by `parse`).
    #[arg(skip)]
    pub cgroup_after: Vec<usize>,

    /// A -G came after --for-each-cgroup (filled in by `parse`): perf refuses it as it
    /// reads the command line.
    #[arg(skip)]
    pub cgroup_after_for_each: bool,

    /// -v came before the first -e (filled in by `parse`): perf's -v says which CPU it
    /// looks events up for only if it is on when it reads the first.
    #[arg(skip)]
    pub verbose_before_events: bool,

    /// A --pmu-filter came after an -e or -M (filled in by `parse`): perf 7.2 refuses it.
    #[arg(skip)]
    pub pmu_filter_after_events: bool,

    #[command(flatten)]
    pub cpus: CpuArgs,

    /// Count these processes (every thread of each), which run already: PID[,PID...].
    #[arg(short = 'p', long = "pid", value_name = "PIDS")]
    pub pid: Option<String>,

    /// Count these threads, which run already: TID[,TID...].
    #[arg(short = 't', long = "tid", value_name = "TIDS")]
    pub tid: Option<String>,

    /// One line per thread (perf's comm-tid column): of -p's processes or -t's threads; with -a
    /// or alone, of every thread of the system that ran (counted from when bperf
    /// started, with the children they start).
    #[arg(long = "per-thread")]
    pub per_thread: bool,

    #[command(flatten)]
    pub cgroups: CgroupArgs,

    #[command(flatten)]
    pub max_cgroups: MaxCgroupsArg,

    #[command(flatten)]
    pub event_cgroups: EventCgroupsArg,

    /// Print counts every MS milliseconds (at least 10).
    #[arg(short = 'I', long = "interval-print", value_name = "MS")]
    pub interval: Option<u64>,

    /// Stop after this many intervals (needs -I; 0: no limit).
    ///
    /// A command keeps running to its end, as with perf.
    #[arg(long = "interval-count", value_name = "N")]
    pub interval_count: Option<u64>,

    /// Print CSV with this field separator.
    ///
    /// Fields: [time,] [CPU,] value, unit, event, [cgroup,] running time, percentage
    /// running, metric value, metric unit.
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    pub field_separator: Option<String>,

    /// Print one JSON object per line.
    #[arg(short = 'j', long = "json-output")]
    pub json: bool,

    /// Write the counts to FILE instead of stderr.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Append to the -o file instead of replacing it.
    #[arg(long = "append")]
    pub append: bool,

    /// Print thousands separators as the locale has them (the default; not with -x).
    #[arg(short = 'B', long = "big-num", overrides_with = "no_big_num")]
    pub big_num: bool,

    /// Do not print thousands separators.
    #[arg(long = "no-big-num", overrides_with = "big_num")]
    pub no_big_num: bool,

    /// Print counts per CPU instead of summed over CPUs (needs -a or -C); --no-merge
    /// is perf 6.12's other name for it.
    #[arg(short = 'A', long = "no-aggr", visible_alias = "no-merge")]
    pub no_aggr: bool,

    /// Run the command N times and print the mean counts, with their standard error;
    /// 0: run it again and again, printing each run, until interrupted.
    #[arg(
        short = 'r',
        long = "repeat",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub repeat: Option<i32>,

    /// With -r, also print the time of each run and its difference from the mean.
    #[arg(long = "table")]
    pub table: bool,

    /// Run this shell command before each run (a failure stops bperf with its status).
    #[arg(long = "pre", value_name = "COMMAND")]
    pub pre: Option<String>,

    /// Run this shell command after each run (a failure stops bperf with its status).
    #[arg(long = "post", value_name = "COMMAND")]
    pub post: Option<String>,

    /// Call sync() before each run.
    #[arg(short = 'S', long = "sync")]
    pub sync: bool,

    /// Scale counts by the time their event was running, as perf does (the default).
    #[arg(long = "scale", overrides_with = "no_scale")]
    pub scale: bool,

    /// Print counts as read, not scaled for multiplexing.
    #[arg(long = "no-scale", overrides_with = "scale")]
    pub no_scale: bool,

    /// Write the counts to this open file descriptor instead of stderr.
    #[arg(long = "log-fd", value_name = "FD", allow_negative_numbers = true)]
    pub log_fd: Option<i32>,

    /// Children of the command are not counted.
    #[arg(short = 'i', long = "no-inherit")]
    pub no_inherit: bool,

    /// Count every event in the kernel only (as if each had :k).
    #[arg(long = "all-kernel")]
    pub all_kernel: bool,

    /// Count every event in user space only (as if each had :u).
    #[arg(long = "all-user")]
    pub all_user: bool,

    /// Null run: no default events, only the time elapsed (events given with -e are
    /// still counted, as perf counts them).
    #[arg(short = 'n', long = "null")]
    pub null_run: bool,

    /// Stop counting (and the command, with SIGTERM) after MS milliseconds (at least 10).
    #[arg(long = "timeout", value_name = "MS")]
    pub timeout: Option<u64>,

    /// Start counting MS milliseconds after the command starts (-1: once --control
    /// says 'enable').
    ///
    /// bperf prints 'Events disabled' and, once counting starts, 'Events enabled', as
    /// perf does.
    #[arg(
        short = 'D',
        long = "delay",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub delay: Option<i64>,

    /// With -I, also print the counts of the whole run at the end.
    #[arg(long = "summary")]
    pub summary: bool,

    /// With --summary and -x, do not start the summary's lines with 'summary'.
    #[arg(long = "no-csv-summary")]
    pub no_csv_summary: bool,

    /// Clear the screen before each interval (not with -o).
    #[arg(long = "interval-clear")]
    pub interval_clear: bool,

    /// Take 'enable', 'disable', 'ping', 'stop', 'evlist' and 'snapshot' commands, one
    /// per line, from fd:CTL or fifo:CTL, and answer 'ack' on ACK: fd:CTL[,ACK] or
    /// fifo:CTL[,ACK], as perf does.
    #[arg(long = "control", value_name = "SPEC")]
    pub control: Option<String>,

    /// Print no counts (nor create the -o file); messages and warnings still go to
    /// standard error, as perf's do.
    #[arg(long = "quiet")]
    pub quiet: bool,

    /// Counts summed per processor socket.
    #[arg(long = "per-socket")]
    pub per_socket: bool,

    /// Counts summed per die.
    #[arg(long = "per-die")]
    pub per_die: bool,

    /// Counts summed per cluster.
    #[arg(long = "per-cluster")]
    pub per_cluster: bool,

    /// Counts summed per cache of level L (default: the last level), e.g. --per-cache=L2.
    #[arg(long = "per-cache", value_name = "L", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub per_cache: Option<String>,

    /// Counts summed per physical core.
    #[arg(long = "per-core")]
    pub per_core: bool,

    /// Counts summed per NUMA node.
    #[arg(long = "per-node")]
    pub per_node: bool,

    /// Count every event through the shared BPF counters (as the 'b' modifier does one):
    /// one perf event per event per CPU for every bperf on the machine, whatever each
    /// counts (CPUs, cgroups, processes, threads, a command and its children).
    #[arg(long = "bpf-counters")]
    pub bpf_counters: bool,

    /// The directory, on a BPF file system, where the shared counters are pinned
    /// (default /sys/fs/bpf/bperf; never perf's own /sys/fs/bpf/perf_attr_map).
    #[arg(long = "bpf-attr-map", value_name = "PATH")]
    pub bpf_attr_map: Option<String>,

    /// stat events on existing bpf program id: ID[,ID...], or as bpftool names programs
    /// (id ID, name NAME, tag TAG, pinned PATH); with each program's runs and time per run.
    #[arg(short = 'b', long = "bpf-prog", value_name = "bpf-prog-id")]
    pub bpf_prog: Option<String>,

    /// Add detailed events: -d L1 data cache and last-level cache loads and misses,
    /// -dd also instruction cache and TLBs, -ddd also L1 data cache prefetches.
    #[arg(short = 'd', long = "detailed", action = clap::ArgAction::Count)]
    pub detailed: u8,

    /// Count these metrics or metric groups (comma-separated), each shown on its first
    /// event's line: perf's common metrics, such as CPUs_utilized, cs_per_second,
    /// insn_per_cycle, branch_miss_rate, l1d_miss_rate (see `bperf list metric`).
    #[arg(short = 'M', long = "metrics", value_name = "METRICS")]
    pub metrics: Vec<String>,

    /// Print only the metrics: one line per cgroup and CPU or group, no counts.
    #[arg(long = "metric-only")]
    pub metric_only: bool,

    /// Topdown metrics: refused as perf refuses them where the metric groups are missing.
    #[arg(long = "topdown")]
    pub topdown: bool,

    /// The level of --topdown's metrics (no effect without it).
    #[arg(long = "td-level", value_name = "N")]
    pub td_level: Option<u32>,

    /// SMI cost: refused as perf refuses it where freeze_on_smi is missing.
    #[arg(long = "smi-cost")]
    pub smi_cost: bool,

    /// I/O stacks' metrics: refused as perf refuses them without the uncore PMUs.
    #[arg(long = "iostat", value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub iostat: Option<String>,

    /// Transaction (TSX) metrics: refused as perf refuses them where they are missing.
    #[arg(short = 'T', long = "transaction")]
    pub transaction: bool,

    /// Hybrid CPU type to count on: refused on machines without hybrid CPUs, as perf.
    #[arg(long = "cputype", value_name = "TYPE")]
    pub cputype: Option<String>,

    /// Record retirement latencies with perf record for TPEBS metrics (no effect
    /// without metrics that use them, as in perf on machines without TPEBS).
    #[arg(long = "record-tpebs")]
    pub record_tpebs: bool,

    /// Merge hybrid PMUs' counts (no effect without hybrid CPUs, as in perf).
    #[arg(long = "hybrid-merge")]
    pub hybrid_merge: bool,

    /// With --per-core events, show each thread's counts (no effect without them).
    #[arg(long = "percore-show-thread")]
    pub percore_show_thread: bool,

    /// Metrics: do not group their events (no effect without metrics, as in perf).
    #[arg(long = "metric-no-group")]
    pub metric_no_group: bool,

    /// Metrics: do not share events between them (no effect without metrics).
    #[arg(long = "metric-no-merge")]
    pub metric_no_merge: bool,

    /// Metrics: do not check thresholds (no effect without metrics).
    #[arg(long = "metric-no-threshold")]
    pub metric_no_threshold: bool,

    /// Print what this perf version's perf stat prints: 7.2 (the default) or 6.12.
    ///
    /// Without it, the version in the environment variable BPERF_PERF_VERSION, so that a
    /// script written against perf 6.12's output sets it once. perf 7.2 shows only the
    /// metrics of its metric definitions (the default events' cs_per_second,
    /// CPUs_utilized, ...: `#    183.5 cs/sec  cs_per_second`), none beside events named
    /// with -e, and exits 22 where perf 6.12 exits 234.
    #[arg(long = "perf-version", value_name = "VERSION")]
    pub perf_version: Option<crate::perf_version::PerfVersion>,

    /// perf 7.2's affinity optimizations for reading counters (on by default): no effect,
    /// bperf reads its counts from BPF maps (not in perf 6.12).
    #[arg(long = "affinity", overrides_with = "no_affinity")]
    pub affinity: bool,

    /// Without perf 7.2's affinity optimizations: no effect either.
    #[arg(long = "no-affinity", overrides_with = "affinity")]
    pub no_affinity: bool,

    /// Only events of PMUs whose name matches PMU, where an event name matches several
    /// PMUs (perf 7.1's; before any -e or -M, as perf wants it; not in perf 6.12).
    #[arg(long = "pmu-filter", value_name = "PMU")]
    pub pmu_filter: Option<String>,

    /// How TPEBS retirement latencies are summarized: mean, min, max or last (no effect
    /// without TPEBS metrics, as in perf on machines without TPEBS; not in perf 6.12).
    #[arg(long = "tpebs-mode", value_name = "MODE", ignore_case = true,
          value_parser = ["mean", "min", "max", "last"])]
    pub tpebs_mode: Option<String>,

    #[command(flatten)]
    pub verbose: VerboseArg,

    /// The command to run and count while it runs (after --).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

// The options stat, serve and record share, each declared once here and flattened into
// their argument structs. Where a command's help must say something else (a default
// of its own), its struct says so with `mut_arg`.

/// -e: the events to count.
#[derive(Debug, Args, Clone, Default)]
pub struct EventArgs {
    /// Event selector(s), comma-separated; may be repeated. Default: perf's default set.
    ///
    /// Every form perf stat counts, encoded to the same perf_event_attr fields: symbolic
    /// hardware and software events and their aliases (cycles, task-clock, cs, ...);
    /// hardware cache events in perf's spellings (L1-dcache-load-misses, ...); raw
    /// events (rNNNN, hex); PMU events from /sys/bus/event_source/devices
    /// (pmu/term=value,.../, pmu/alias/, or a bare alias such as tsc); tracepoints
    /// (sys:name). Modifiers follow a colon: u, k, h (user, kernel, hypervisor), G, H
    /// (guest, host), p, pp, ppp (precise), D (pinned), e (exclusive), I (exclude idle).
    /// {a,b,...}[:modifiers] is a group, opened as one group on each CPU. An event the
    /// machine cannot count prints <not supported>; the others are counted.
    #[arg(id = "events", short = 'e', long = "event", value_name = "EVENT")]
    pub list: Vec<String>,
}

/// -a and -C: the CPUs counted on.
#[derive(Debug, Args, Clone, Default)]
pub struct CpuArgs {
    /// Count on all CPUs (system-wide; bperf always counts per CPU).
    #[arg(id = "all_cpus", short = 'a', long = "all-cpus")]
    pub all: bool,

    /// Count only on these CPUs, e.g. 0-2,5.
    #[arg(id = "cpu", short = 'C', long = "cpu", value_name = "CPUS")]
    pub list: Option<String>,
}

/// --for-each-cgroup and --all-cgroups: every event counted for each cgroup.
#[derive(Debug, Args, Clone, Default)]
pub struct CgroupArgs {
    /// Count every event for each of these cgroups (names relative to the cgroup mount; regex patterns allowed).
    ///
    /// Names are paths relative to the mount of the cgroup hierarchy that holds the
    /// perf_event controller; / or an empty name is the root. A name must lead, after ..
    /// and symlinks, to a cgroup on that mount. When any name holds a regular-expression
    /// character, every name is a pattern matched against whole paths. A name given
    /// twice is counted once. Needs -a or -C, as in perf. With patterns, cgroups created
    /// while counting are counted too, from their creation (see --all-cgroups).
    #[arg(
        id = "for_each_cgroup",
        long = "for-each-cgroup",
        value_name = "CGROUPS"
    )]
    pub for_each: Vec<String>,

    /// Count every event for each cgroup. Cgroups created while counting are counted from
    /// their creation; a removed cgroup's final counts are printed once (in the next
    /// interval with -I, else at the end), then it drops out.
    #[arg(
        id = "all_cgroups",
        long = "all-cgroups",
        conflicts_with = "for_each_cgroup"
    )]
    pub all: bool,

    /// Count every event for each container: the cgroup a container runtime (Docker,
    /// Podman, containerd, CRI-O, Kubernetes) made for it, named in a container column.
    ///
    /// Containers started while counting are counted from their start, stopped ones end
    /// their rows, as with --all-cgroups. Names come from the runtime's API socket (Docker
    /// and Podman) or the kubelet's log links when a container's cgroup is first seen;
    /// without them, the 12-digit id names it.
    #[arg(
        id = "for_each_container",
        long = "for-each-container",
        conflicts_with_all = ["for_each_cgroup", "all_cgroups"]
    )]
    pub containers: bool,
}

/// -G: the cgroups of the events before it.
#[derive(Debug, Args, Clone, Default)]
pub struct EventCgroupsArg {
    /// Count the events before it in these cgroups, in order, as perf does.
    ///
    /// Each name goes to the next event of the -e options before this -G that has none
    /// yet (an empty name skips one); while only one name was given, every event before
    /// it takes that cgroup. Events left without one, and those -d adds, are counted
    /// system-wide, with an empty cgroup column. Needs -a or -C.
    #[arg(id = "cgroup", short = 'G', long = "cgroup", value_name = "CGROUPS")]
    pub names: Vec<String>,
}

/// --max-cgroups: how many live cgroups are counted at once.
#[derive(Debug, Args, Clone, Default)]
pub struct MaxCgroupsArg {
    /// With --all-cgroups or patterns: count at most N cgroups at once. Further cgroups
    /// are left out (said on stderr the first time, and whenever more are left out than
    /// said before), their time counted in their counted ancestors, until removed
    /// cgroups free a place.
    #[arg(id = "max_cgroups", long = "max-cgroups", value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub limit: u32,
}

/// -v: what to say on stderr.
#[derive(Debug, Args, Clone, Default)]
pub struct VerboseArg {
    /// Say what perf's -v says (-vv: more).
    ///
    /// -v prints what perf 6.12's -v prints: the CPU its tables are for, the events the
    /// kernel would not open, each run of -r, and at each read every event's count,
    /// enabled and running times (summed over CPUs) or that it could not be read. -vv
    /// also prints every perf_event_attr opened and each perf_event_open call in the
    /// layout of perf stat -vv, so that the two can be diffed, and libbpf's diagnostics.
    #[arg(id = "verbose", short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub level: u8,
}

/// serve's and record's -v: what stat's -v says does not apply.
const VERBOSE_OF_EXPORTERS: &str = "Say how long each read took; libbpf's diagnostics";

/// A help text of one line, in place of what a shared option says.
fn help_of(arg: clap::Arg, text: &'static str) -> clap::Arg {
    arg.help(text).long_help(None)
}

impl StatArgs {
    /// The aggregation mode asked for, if any (--per-cache=L2 and the like).
    pub fn aggr_mode(&self) -> Result<Option<aggr::Mode>> {
        let mode = if self.per_socket {
            aggr::Mode::Socket
        } else if self.per_die {
            aggr::Mode::Die
        } else if self.per_cluster {
            aggr::Mode::Cluster
        } else if self.per_core {
            aggr::Mode::Core
        } else if self.per_node {
            aggr::Mode::Node
        } else if let Some(level) = &self.per_cache {
            let parsed = level.trim_start_matches(['L', 'l']);
            match (level.is_empty(), parsed.parse::<u32>()) {
                (true, _) => aggr::Mode::Cache(None),
                (false, Ok(l)) if l > 0 => aggr::Mode::Cache(Some(l)),
                _ => {
                    return Err(UsageError(format!(
                        "invalid cache level '{level}' (--per-cache=L2, say)"
                    ))
                    .into())
                }
            }
        } else {
            return Ok(None);
        };
        Ok(Some(mode))
    }

    /// What to count, for the plan; `record`: for `stat record`, whose rows stay as
    /// they start (as do those of -r).
    /// The perf version whose output to print: --perf-version's, else
    /// BPERF_PERF_VERSION's, else 7.2.
    pub fn version(&self) -> Result<crate::perf_version::PerfVersion> {
        use crate::perf_version::PerfVersion;
        let env = std::env::var_os(crate::perf_version::ENV);
        let env = env.as_ref().map(|s| s.to_string_lossy());
        PerfVersion::chosen(self.perf_version, env.as_deref())
            .map_err(|e| crate::UsageError(e.to_string()).into())
    }

    pub fn request(&self, record: bool) -> Result<Request> {
        let filters = self.filter.iter().cloned();
        Ok(Request {
            events: EventRequest {
                lists: self.events.list.clone(),
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
                    for_each: self.cgroups.for_each.clone(),
                    all: self.cgroups.all,
                    containers: self.cgroups.containers,
                    per_event: self.event_cgroups.names.clone(),
                    max: self.max_cgroups.limit,
                },
            },
            aggr: self.aggr_mode()?,
            fixed_rows: record || self.repeat.is_some_and(|r| r != 1),
            verbose: self.verbose.level > 0,
        })
    }
}

/// Sections every page ends with, after what clap describes.
const EXIT_STATUS: &str = "The command's status when one was given, 0 otherwise; 129 for \
bad options or input (one line on standard error); 255 when counting could not be set up, \
the output could not be written or the command could not be run; 141 when the output \
pipe closed; 130 after Ctrl-C and 143 after SIGTERM without a command. bperf serve exits 0 \
after SIGTERM or Ctrl-C.";

const DOCTOR_ABOUT: &str = "\
Check what works on this machine and why not, one line per check with its fix: the \
kernel and its BTF; each BPF feature bperf uses (bpf_loop, the counters' read path, \
fentry/fexit trampolines, ring buffers, task storage); the PMUs and whether hardware \
counters count (none in a virtual machine without a virtual PMU) and the NMI watchdog \
that holds one; kernel.perf_event_paranoid and this process's capabilities; the cgroup \
layout (v2, v1 or hybrid), which hierarchy holds the perf_event controller, and a v1 \
hierarchy that holds it but is mounted nowhere; the BPF file system and tracefs; the \
container runtimes whose sockets answer.

Each line is the status (ok, warn, fail, or unknown where the kernel would not be asked \
without privileges), the check's name, what was found, and [fix: ...] where something \
can be done. The last line says whether bperf can count per cgroup here.

Exit status: 0 when bperf can count per cgroup here, 1 when it cannot.";

const DOCTOR_EXAMPLES: &[&str] = &[
    "# What works here, and what to do about the rest",
    "bperf doctor",
    "# In a script: stop unless bperf can count per cgroup; list what is not ok",
    "bperf doctor -j > doctor.json || exit 1",
    "grep -v '\"status\":\"ok\"' doctor.json",
];

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// One JSON object per check, a line each: check, status (ok, warn, fail,
    /// unknown), detail, fix (null when none), needed (counting per cgroup needs it).
    #[arg(short = 'j', long = "json")]
    pub json: bool,
}

const SERVE_ABOUT: &str = "\
Count continuously and export the counts for Prometheus (HTTP /metrics, or a file for \
node_exporter's textfile collector).

The counts are read when a scraper asks for /metrics (or when the textfile is written), \
in Prometheus's text format, or OpenMetrics when the scraper asks for it, gzip-encoded \
when its Accept-Encoding accepts gzip. \
bperf_count_total{event,cgroup} is the raw count since bperf started (task-clock in ns); \
bperf_enabled_seconds_total and bperf_running_seconds_total tell multiplexing. \
With --all-cgroups or patterns, cgroups created later are counted from their creation, \
and a removed cgroup's final counts are exported once. SIGTERM and SIGINT stop bperf \
(exit 0) with nothing left loaded; SIGHUP reads the cgroup tree again.";

const SERVE_EXAMPLES: &[&str] = &[
    "bperf serve -a -e task-clock,context-switches --all-cgroups",
    "bperf serve --listen 0.0.0.0:9464 -e cycles,instructions --for-each-cgroup 'system.slice/.*'",
    "bperf serve --textfile /var/lib/node_exporter/textfile -I 15000 --all-cgroups",
];

const RECORD_EXAMPLES: &[&str] = &[
    "bperf record -a -e task-clock,context-switches --for-each-cgroup web,db -- sleep 10",
    "bperf report -i bperf.data -x,",
    "bperf report --sort cgroup,comm",
    "bperf report --timeline timeline.json",
    "bperf report --timeline timeline.svg",
    "bperf report --timeline timeline.perfetto-trace",
];

const STAT_EXAMPLES: &[&str] = &[
    "bperf stat -a -e task-clock,context-switches --for-each-cgroup web,db -I 1000",
    "bperf stat -a -x, --all-cgroups -- sleep 10",
    "bperf stat -a -e cycles,instructions -G system.slice -- make",
];

/// What `bperf serve` counts and where it exports the counts.
#[derive(Debug, Args, Clone)]
#[command(args_override_self = true)]
#[command(mut_arg("events", |a| help_of(a, "Events, as bperf stat takes them. Default: perf's default set (events this machine cannot count are left out, said once on stderr)")))]
#[command(mut_arg("all_cpus", |a| help_of(a, "Count on all CPUs (the default, unless -C is given)")))]
#[command(mut_arg("for_each_cgroup", |a| help_of(a, "Count every event for each of these cgroups, as bperf stat does; patterns follow the tree as cgroups come and go")))]
#[command(mut_arg("all_cgroups", |a| help_of(a, "Count every event for each cgroup, those created later included")))]
#[command(mut_arg("for_each_container", |a| help_of(a, "Count every event for each container's cgroup, those started later included, with the labels container, container_id, image, pod and namespace (those that apply)")))]
#[command(mut_arg("verbose", |a| help_of(a, VERBOSE_OF_EXPORTERS)))]
pub struct ServeArgs {
    /// Serve /metrics over HTTP at this address (default 127.0.0.1:9464, unless only
    /// --textfile is given). Give 0.0.0.0:PORT or [::]:PORT to be scraped from elsewhere.
    #[arg(long = "listen", value_name = "ADDR:PORT")]
    pub listen: Option<String>,

    /// Also write the metrics to DIR/bperf.prom every interval (atomically: a temporary
    /// file renamed over it), for node_exporter's textfile collector; removed at exit. A
    /// write that fails is said on stderr and tried again at the next interval.
    #[arg(long = "textfile", value_name = "DIR")]
    pub textfile: Option<PathBuf>,

    /// How often the textfile is written, in milliseconds.
    #[arg(short = 'I', long = "interval-print", value_name = "MS", default_value_t = 10000,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub interval: u64,

    #[command(flatten)]
    pub events: EventArgs,

    #[command(flatten)]
    pub cpus: CpuArgs,

    #[command(flatten)]
    pub cgroups: CgroupArgs,

    #[command(flatten)]
    pub max_cgroups: MaxCgroupsArg,

    /// Export each CPU's counts (a cpu label) instead of their sum.
    #[arg(short = 'A', long = "no-aggr")]
    pub no_aggr: bool,

    /// Also export how long each cgroup's tasks waited for a CPU and how often they were
    /// preempted, in all and by the cgroup that ran instead (by_cgroup). Needs cgroups to
    /// count (--for-each-cgroup, --all-cgroups or --for-each-container); without it,
    /// switches cost nothing more.
    #[arg(long = "runq")]
    pub runq: bool,

    #[command(flatten)]
    pub verbose: VerboseArg,
}

impl ServeArgs {
    /// What to count, for the plan: every CPU unless -C says which.
    pub fn request(&self) -> Request {
        Request {
            events: EventRequest {
                lists: self.events.list.clone(),
                names_with_pmu: self.no_aggr,
                ..EventRequest::default()
            },
            targets: Targets {
                all_cpus: self.cpus.all || self.cpus.list.is_none(),
                cpus: self.cpus.list.clone(),
                cgroups: CgroupTargets {
                    for_each: self.cgroups.for_each.clone(),
                    all: self.cgroups.all,
                    containers: self.cgroups.containers,
                    per_event: Vec::new(),
                    max: self.max_cgroups.limit,
                },
                ..Targets::default()
            },
            verbose: self.verbose.level > 0,
            ..Request::default()
        }
    }
}

const RECORD_ABOUT: &str = "\
Record every slice of time a CPU gives a monitored cgroup or task: when a task of a \
monitored cgroup leaves a CPU (or moves to another cgroup), one record says when the slice \
began, how long it was, which CPU, cgroup, process, thread and command ran, and what every \
event counted in it. The BPF program that splits counts between cgroups sends the \
records through one BPF ring buffer that every CPU shares. The file (-o, default bperf.data) also \
holds the events, cgroups and CPUs, how many records were lost, and the counters' own \
totals, so that counts stay right even when records are lost.

Without cgroup options, -p, -t or a command, every cgroup is recorded (--all-cgroups). \
With --all-cgroups, patterns or --for-each-container, cgroups made while recording are \
recorded from when they appear, and removed ones end. With -p or -t, the slices of \
those processes or threads and of the tasks they start; with a command and no -a, -C \
or cgroup option, the slices of the command and its children, as perf record counts a \
command. Without -C every CPU is. With a command, recording lasts while it runs; with \
-p or -t, until they end; else until Ctrl-C or SIGTERM.";

const REPORT_ABOUT: &str = "\
Print what bperf record wrote. Without options: the totals of each cgroup, summed from \
the records and printed as bperf stat prints them (table, -x, -j), so that they can be \
checked against bperf stat; when records were lost, the counters' totals instead, and a \
note says so. --sort prints a breakdown by cgroup, CPU, process, thread or command; \
--hist the distribution of slice lengths and of each slice's metrics; --timeline writes \
the slices as a Chrome trace-event / Perfetto JSON file (one track per CPU), as \
Perfetto's own protobuf trace for a name ending in .perfetto-trace or .pftrace (with \
counter tracks per cgroup), or as a picture for a name ending in .svg.";

/// What `bperf record` records and where.
#[derive(Debug, Args, Clone)]
#[command(trailing_var_arg = true, args_override_self = true)]
#[command(mut_arg("events", |a| help_of(a, "Events, as bperf stat takes them (default: task-clock, context-switches)")))]
#[command(mut_arg("all_cpus", |a| help_of(a, "Record every cgroup on all CPUs (the default without -C, -p, -t or a command alone); with a command, system-wide rather than the command's tasks")))]
#[command(mut_arg("cpu", |a| help_of(a, "Record only on these CPUs, e.g. 0-2,5")))]
#[command(mut_arg("for_each_cgroup", |a| help_of(a, "Record the slices of each of these cgroups (names or patterns, as bperf stat takes them)")))]
#[command(mut_arg("all_cgroups", |a| help_of(a, "Record the slices of every cgroup (the default without cgroup options, -p, -t or a command alone), those made while recording too").conflicts_with("cgroup")))]
#[command(mut_arg("for_each_container", |a| help_of(a, "Record the slices of each container's cgroup (containers started while recording too)")))]
#[command(mut_arg("cgroup", |a| help_of(a, "Record these cgroups (as bperf stat's -G with one name for all events)").conflicts_with("for_each_cgroup")))]
#[command(mut_arg("verbose", |a| help_of(a, VERBOSE_OF_EXPORTERS)))]
pub struct RecordArgs {
    #[command(flatten)]
    pub events: EventArgs,

    #[command(flatten)]
    pub cpus: CpuArgs,

    #[command(flatten)]
    pub cgroups: CgroupArgs,

    #[command(flatten)]
    pub event_cgroups: EventCgroupsArg,

    #[command(flatten)]
    pub max_cgroups: MaxCgroupsArg,

    /// Record these processes (every thread of each, and the tasks they start), which
    /// run already: PID[,PID...].
    #[arg(short = 'p', long = "pid", value_name = "PIDS", conflicts_with = "tid")]
    pub pid: Option<String>,

    /// Record these threads (and the tasks they start), which run already:
    /// TID[,TID...].
    #[arg(short = 't', long = "tid", value_name = "TIDS")]
    pub tid: Option<String>,

    /// Write to FILE, as perf record does: an earlier recording there (or a link to a
    /// file) is kept as FILE.old once recording starts; a device or FIFO is written
    /// into; - is stdout (which bperf report -i - reads).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "bperf.data"
    )]
    pub output: PathBuf,

    /// Ring buffer pages for each CPU (the ring holds their sum, rounded up to a power
    /// of two): a power of two, or a size with B, K, M or G.
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<String>,

    /// Compress the file with zstd at level N, 1 (the fastest, the default) to 19, as
    /// perf record's -z.
    #[arg(
        short = 'z',
        long = "compression-level",
        value_name = "N",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1",
        value_parser = clap::value_parser!(i32).range(1..=19)
    )]
    pub compression_level: Option<i32>,

    #[command(flatten)]
    pub verbose: VerboseArg,

    /// The command to run while recording (after --).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl RecordArgs {
    /// Whether a cgroup option was given (--for-each-cgroup, -G, --all-cgroups,
    /// --for-each-container).
    pub fn asks_for_cgroups(&self) -> bool {
        !self.cgroups.for_each.is_empty()
            || !self.event_cgroups.names.is_empty()
            || self.cgroups.containers
            || self.cgroups.all
    }

    /// Whether tasks are recorded rather than cgroups: -p, -t, or a command with no -a,
    /// -C or cgroup option (as perf record counts a command and its children).
    pub fn records_tasks(&self) -> bool {
        let command_alone = !self.command.is_empty()
            && !self.cpus.all
            && self.cpus.list.is_none()
            && !self.asks_for_cgroups();
        self.pid.is_some() || self.tid.is_some() || command_alone
    }

    /// What to record, for the plan: every CPU unless -C says which; every cgroup
    /// without cgroup options, unless tasks are recorded; -G's cgroups as
    /// --for-each-cgroup's.
    pub fn request(&self) -> Request {
        let tasks = self.records_tasks();
        let lists = match self.events.list.is_empty() {
            true => vec![crate::record::DEFAULT_EVENTS.to_string()],
            false => self.events.list.clone(),
        };
        let for_each = self
            .cgroups
            .for_each
            .iter()
            .chain(&self.event_cgroups.names)
            .cloned();
        Request {
            events: EventRequest {
                lists,
                ..EventRequest::default()
            },
            targets: Targets {
                all_cpus: self.cpus.all || (self.cpus.list.is_none() && !tasks),
                cpus: self.cpus.list.clone(),
                pids: self.pid.clone(),
                tids: self.tid.clone(),
                command: self.command.clone(),
                cgroups: CgroupTargets {
                    for_each: for_each.collect(),
                    all: self.cgroups.all || (!self.asks_for_cgroups() && !tasks),
                    containers: self.cgroups.containers,
                    max: self.max_cgroups.limit,
                    ..CgroupTargets::default()
                },
                ..Targets::default()
            },
            verbose: self.verbose.level > 0,
            ..Request::default()
        }
    }
}

const TOP_ABOUT: &str = "\
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

const TOP_EXAMPLES: &[&str] = &[
    "bperf top",
    "bperf top -e task-clock,cycles,instructions --for-each-cgroup 'system.slice/.*'",
    "bperf top --batch -n 3 -d 0.5",
    "bperf top --batch --tree -n 1 --for-each-cgroup 'system.slice(/.*)?'",
    "bperf top --bpf-counters",
];

/// The events `bperf top` shows without -e.
pub const TOP_DEFAULT_EVENTS: &str =
    "task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions";

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
    /// What to count, for the plan: every CPU unless -C says which, every cgroup
    /// without cgroup options, top's own events without -e.
    pub fn request(&self) -> Request {
        let lists = match self.events.list.is_empty() {
            true => vec![TOP_DEFAULT_EVENTS.to_string()],
            false => self.events.list.clone(),
        };
        Request {
            events: EventRequest {
                lists,
                bpf_counters: self.bpf_counters,
                ..EventRequest::default()
            },
            targets: Targets {
                all_cpus: self.cpus.all || self.cpus.list.is_none(),
                cpus: self.cpus.list.clone(),
                cgroups: CgroupTargets {
                    for_each: self.cgroups.for_each.clone(),
                    all: self.cgroups.all
                        || (self.cgroups.for_each.is_empty() && !self.cgroups.containers),
                    containers: self.cgroups.containers,
                    per_event: Vec::new(),
                    max: self.max_cgroups.limit,
                },
                ..Targets::default()
            },
            verbose: self.verbose.level > 0,
            ..Request::default()
        }
    }
}

/// What `bperf report` reads and prints.
#[derive(Debug, Args, Clone)]
#[command(args_override_self = true)]
pub struct ReportArgs {
    /// The file bperf record wrote; - reads it from stdin (not for --timeline, which
    /// reads it twice).
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "bperf.data"
    )]
    pub input: PathBuf,

    /// Print the totals as CSV with this separator, as bperf stat -x.
    #[arg(
        short = 'x',
        long = "field-separator",
        value_name = "SEP",
        conflicts_with = "json"
    )]
    pub field_separator: Option<String>,

    /// Print the totals as JSON, one object per line, as bperf stat -j (--json is its
    /// other name).
    #[arg(short = 'j', long = "json-output", visible_alias = "json")]
    pub json: bool,

    /// Print a breakdown by these keys instead, largest first: cgroup, container, cpu,
    /// pid, tid, comm (comma-separated). container: the names recorded for the containers'
    /// cgroups, `-` for other cgroups.
    #[arg(short = 's', long = "sort", value_name = "KEYS")]
    pub sort: Option<String>,

    /// Print the distribution of slice lengths, and of each slice's metrics, per cgroup.
    #[arg(long = "hist")]
    pub hist: bool,

    /// Write the slices as a timeline: Chrome trace-event / Perfetto JSON; Perfetto's
    /// protobuf trace when FILE ends in .perfetto-trace or .pftrace; an SVG picture when
    /// it ends in .svg; - writes the JSON to standard output. FILE is written whole or
    /// not at all: through a temporary file beside it, renamed at the end.
    #[arg(long = "timeline", value_name = "FILE")]
    pub timeline: Option<PathBuf>,
}

/// The man pages, as (file name, roff text): bperf(1) and one per subcommand, each
/// referring to all the others.
pub fn man_pages() -> Vec<(String, String)> {
    let top = Cli::command();
    let version = top.get_version().unwrap_or("").to_string();
    let mut commands = vec![("bperf".to_string(), top.clone(), &[][..])];
    for sub in top.get_subcommands() {
        let name = format!("bperf-{}", sub.get_name());
        let examples: &[&str] = match sub.get_name() {
            "stat" => STAT_EXAMPLES,
            "serve" => SERVE_EXAMPLES,
            "record" | "report" => RECORD_EXAMPLES,
            "top" => TOP_EXAMPLES,
            "doctor" => DOCTOR_EXAMPLES,
            _ => &[],
        };
        let cmd = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("bperf {}", sub.get_name()))
            .version(version.clone());
        commands.push((name, cmd, examples));
    }
    let names: Vec<String> = commands.iter().map(|(name, ..)| name.clone()).collect();
    commands
        .into_iter()
        .map(|(name, cmd, examples)| {
            let others = names.iter().filter(|n| **n != name).map(String::as_str);
            let page = man_page(cmd, examples, others);
            (format!("{name}.1"), page)
        })
        .collect()
}

/// A page of `cmd` with its `examples`, whose SEE ALSO names the pages `others` and
/// perf-stat(1).
fn man_page<'a>(
    cmd: clap::Command,
    examples: &[&str],
    others: impl Iterator<Item = &'a str>,
) -> String {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .expect("rendering into memory");
    let mut page = String::from_utf8(out).expect("roff is text");
    if !examples.is_empty() {
        page.push_str(".SH EXAMPLES\n.nf\n");
        for e in examples {
            page.push_str(&roff_escape(e));
            page.push('\n');
        }
        page.push_str(".fi\n");
    }
    page.push_str(".SH \"EXIT STATUS\"\n");
    page.push_str(&roff_escape(EXIT_STATUS));
    let see_also: Vec<String> = others
        .chain(["perf-stat"])
        .map(|name| format!("{}(1)", roff_escape(name)))
        .collect();
    page.push_str(&format!("\n.SH \"SEE ALSO\"\n{}\n", see_also.join(", ")));
    page
}

/// Text as roff prints it literally.
fn roff_escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

/// The completion script for `shell`.
pub fn completions(shell: Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut Cli::command(), "bperf", out);
}
