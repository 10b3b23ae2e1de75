//! `bperf serve`'s options.

use std::path::PathBuf;

use clap::Args;

use super::shared::{
    help_of, CgroupArgs, CpuArgs, EventArgs, MaxCgroupsArg, VerboseArg, VERBOSE_OF_EXPORTERS,
};
use crate::session::plan::{EventRequest, Request, Targets};

pub(super) const SERVE_ABOUT: &str = "\
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

pub(super) const SERVE_EXAMPLES: &[&str] = &[
    "bperf serve -a -e task-clock,context-switches --all-cgroups",
    "bperf serve --listen 0.0.0.0:9464 -e cycles,instructions --for-each-cgroup 'system.slice/.*'",
    "bperf serve --textfile /var/lib/node_exporter/textfile -I 15000 --all-cgroups",
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

    /// Export how long each cgroup's tasks waited for a CPU and how often they were
    /// preempted, in all and by the cgroup that ran instead (by_cgroup): on by default
    /// where cgroups are counted (--for-each-cgroup, --all-cgroups or
    /// --for-each-container). Given alone, it is an error without cgroups.
    #[arg(long = "runq", overrides_with = "no_runq")]
    pub runq: bool,

    /// Export no run-queue series: switches cost what counting the events costs.
    #[arg(long = "no-runq", overrides_with = "runq")]
    pub no_runq: bool,

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
                cgroups: self.cgroups.targets(&self.max_cgroups),
                ..Targets::default()
            },
            verbose: self.verbose.level > 0,
            ..Request::default()
        }
    }
}
