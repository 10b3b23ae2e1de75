//! `bperf record`'s and `bperf report`'s options.

use std::path::PathBuf;

use clap::Args;

use super::shared::{
    help_of, CgroupArgs, CpuArgs, EventArgs, EventCgroupsArg, MaxCgroupsArg, VerboseArg,
    VERBOSE_OF_EXPORTERS,
};
use crate::session::plan::{CgroupTargets, EventRequest, Request, Targets};

pub(super) const RECORD_EXAMPLES: &[&str] = &[
    "bperf record -a -e task-clock,context-switches --for-each-cgroup web,db -- sleep 10",
    "bperf report -i bperf.data -x,",
    "bperf report --sort cgroup,comm",
    "bperf report --timeline timeline.json",
    "bperf report --timeline timeline.svg",
    "bperf report --timeline timeline.perfetto-trace",
];

pub(super) const RECORD_ABOUT: &str = "\
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

pub(super) const REPORT_ABOUT: &str = "\
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

    /// Keep only the newest slices, in memory, within SIZE bytes (e.g. 64M; at least
    /// 2M), the oldest dropped first; the file gets what is kept when recording ends.
    #[arg(long = "flight-recorder", value_name = "SIZE", value_parser = flight_size)]
    pub flight_recorder: Option<usize>,

    /// Where the flight recorder's snapshots go: SIGUSR1 writes what it holds there, as
    /// a whole recording named after the time (bperf-snapshot-YYYYMMDDTHHMMSSZ.data),
    /// while recording goes on. The default: the directory of -o.
    #[arg(
        long = "snapshot-dir",
        value_name = "DIR",
        requires = "flight_recorder"
    )]
    pub snapshot_dir: Option<PathBuf>,

    /// The most snapshots the snapshot directory keeps: past it, the oldest go.
    #[arg(
        long = "max-snapshots",
        value_name = "N",
        default_value_t = 10,
        requires = "flight_recorder",
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub max_snapshots: u32,

    #[command(flatten)]
    pub verbose: VerboseArg,

    /// The command to run while recording (after --).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// --flight-recorder's SIZE: a size the store can keep within.
fn flight_size(s: &str) -> Result<usize, String> {
    use crate::record::flight::{parse_size, SEGMENT_BYTES};
    let bytes = parse_size(s).ok_or_else(|| format!("'{s}' is not a size (e.g. 64M)"))?;
    match bytes >= 2 * SEGMENT_BYTES {
        true => Ok(bytes),
        false => Err(format!("{s} is less than the 2M a flight recorder needs")),
    }
}

impl RecordArgs {
    /// Whether a cgroup option was given (--for-each-cgroup, -G, --all-cgroups,
    /// --for-each-container).
    pub(crate) fn asks_for_cgroups(&self) -> bool {
        !self.cgroups.for_each.is_empty()
            || !self.event_cgroups.names.is_empty()
            || self.cgroups.containers
            || self.cgroups.all
    }

    /// Whether tasks are recorded rather than cgroups: -p, -t, or a command with no -a,
    /// -C or cgroup option (as perf record counts a command and its children).
    pub(crate) fn records_tasks(&self) -> bool {
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
            true => vec![crate::event::RECORD_DEFAULT_EVENTS.to_string()],
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
                // bperf's own events: the BPF side counts them in each slice.
                bperfs: true,
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
                    ..self.cgroups.targets(&self.max_cgroups)
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

    /// After the totals, for each cgroup, the N cgroups it waited behind for a CPU most
    /// (those whose slices ran on the CPU meanwhile; "/other" sums the rest), with that
    /// wait and those preemptions, as bperf stat --culprits prints them. Needs a
    /// recording of cgroups with bperf/runq-wait/ or bperf/preemptions/.
    #[arg(long = "culprits", value_name = "N")]
    pub culprits: Option<usize>,
}
