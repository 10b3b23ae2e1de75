//! Command-line types. Option names and meanings follow `perf stat`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "bperf",
    version,
    about = "Count perf events per cgroup with BPF, printed like perf stat",
    // No styling: an error then quotes what the user typed byte for byte, and bperf
    // escapes its control characters (main.rs).
    styles = clap::builder::Styles::plain()
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Count events system-wide or per cgroup, while a command runs or until Ctrl-C.
    Stat(StatArgs),
    /// List the events this machine offers, marking those its kernel refuses.
    List(ListArgs),
}

#[derive(Debug, Args, Clone, Default)]
pub struct ListArgs {
    /// Show only events whose name contains this, or matches it as a glob (`L1*misses`).
    #[arg(value_name = "FILTER")]
    pub filter: Option<String>,

    /// Also list tracepoints (always searched when a filter is given).
    #[arg(long = "tracepoints")]
    pub tracepoints: bool,
}

#[derive(Debug, Args, Clone, Default)]
// As in perf, an option given again replaces what it said before (-e and -v add up).
#[command(trailing_var_arg = true, args_override_self = true)]
pub struct StatArgs {
    /// Event selector(s), comma-separated; may be repeated. Default: perf's default set.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,

    /// Count on all CPUs (system-wide; bperf always counts per CPU).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// Count only on these CPUs, e.g. 0-2,5.
    #[arg(short = 'C', long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Count every event for each of these cgroups (names relative to the cgroup mount; regex patterns allowed).
    #[arg(long = "for-each-cgroup", value_name = "CGROUPS")]
    pub for_each_cgroup: Vec<String>,

    /// Count every event for each cgroup that exists at start.
    #[arg(long = "all-cgroups", conflicts_with_all = ["for_each_cgroup", "cgroup"])]
    pub all_cgroups: bool,

    /// Count the i-th event only in the i-th cgroup of this list.
    #[arg(
        short = 'G',
        long = "cgroup",
        value_name = "CGROUPS",
        conflicts_with = "for_each_cgroup"
    )]
    pub cgroup: Vec<String>,

    /// Print counts every MS milliseconds (at least 10).
    #[arg(short = 'I', long = "interval-print", value_name = "MS")]
    pub interval: Option<u64>,

    /// Stop after this many intervals (needs -I).
    #[arg(long = "interval-count", value_name = "N", requires = "interval")]
    pub interval_count: Option<u64>,

    /// Print CSV with this field separator.
    #[arg(
        short = 'x',
        long = "field-separator",
        value_name = "SEP",
        conflicts_with = "json"
    )]
    pub field_separator: Option<String>,

    /// Print one JSON object per line.
    #[arg(short = 'j', long = "json-output")]
    pub json: bool,

    /// Write the counts to FILE instead of stderr.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Append to the -o file instead of replacing it.
    #[arg(long = "append", requires = "output")]
    pub append: bool,

    /// Do not print thousands separators.
    #[arg(long = "no-big-num")]
    pub no_big_num: bool,

    /// Print counts per CPU instead of summed over CPUs.
    #[arg(short = 'A', long = "no-aggr")]
    pub no_aggr: bool,

    /// Show what is opened (-vv: more).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The command to run and count while it runs (after --).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}
