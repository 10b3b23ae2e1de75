//! The groups of options several commands share.

use clap::Args;

use crate::session::plan::CgroupTargets;

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
pub(super) const VERBOSE_OF_EXPORTERS: &str = "Say how long each read took; libbpf's diagnostics";

/// A help text of one line, in place of what a shared option says.
pub(super) fn help_of(arg: clap::Arg, text: &'static str) -> clap::Arg {
    arg.help(text).long_help(None)
}

impl CgroupArgs {
    /// The cgroups these options name, with `max`'s limit on live ones; no -G.
    pub fn targets(&self, max: &MaxCgroupsArg) -> CgroupTargets {
        CgroupTargets {
            for_each: self.for_each.clone(),
            all: self.all,
            containers: self.containers,
            per_event: Vec::new(),
            max: max.limit,
        }
    }
}
