//! `bperf list`'s options.

use clap::Args;

pub(super) const LIST_ABOUT: &str =
    "Lists the events that bperf stat -e accepts, grouped as perf list \
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
