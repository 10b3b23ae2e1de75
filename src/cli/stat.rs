//! `bperf stat`'s options, and perf's `stat record` and `stat report` words.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser};

use super::shared::{CgroupArgs, CpuArgs, EventArgs, EventCgroupsArg, MaxCgroupsArg, VerboseArg};
use crate::aggr;
use crate::UsageError;

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

pub(super) const STAT_ABOUT: &str =
    "Counts the given events on every CPU (or the CPUs given with -C), \
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

    /// After the counts, for each cgroup, the N cgroups it waited behind for a CPU most
    /// (the one that ran on the CPU meanwhile; "/other" sums the rest), with that wait and
    /// those preemptions: bperf's own table, or with -x and -j one line per row (its
    /// first CSV field is "culprit"). With -I, each interval's. Needs cgroups to count,
    /// as bperf/runq-wait/ does.
    #[arg(long = "culprits", value_name = "N")]
    pub culprits: Option<usize>,

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

impl StatArgs {
    /// The aggregation mode asked for, if any (--per-cache=L2 and the like).
    pub(crate) fn aggr_mode(&self) -> Result<Option<aggr::Mode>> {
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

    /// The perf version whose output to print: --perf-version's, else
    /// BPERF_PERF_VERSION's, else 7.2.
    pub fn version(&self) -> Result<crate::perf_version::PerfVersion> {
        use crate::perf_version::PerfVersion;
        let env = std::env::var_os(crate::perf_version::ENV);
        let env = env.as_ref().map(|s| s.to_string_lossy());
        PerfVersion::chosen(self.perf_version, env.as_deref())
            .map_err(|e| crate::UsageError(e.to_string()).into())
    }
}

pub(super) const STAT_EXAMPLES: &[&str] = &[
    "bperf stat -a -e task-clock,context-switches --for-each-cgroup web,db -I 1000",
    "bperf stat -a -x, --all-cgroups -- sleep 10",
    "bperf stat -a -e cycles,instructions -G system.slice -- make",
];
