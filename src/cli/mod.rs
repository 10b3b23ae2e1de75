//! Command-line types. Option names and meanings follow `perf stat`. The man pages and
//! shell completions are generated from these definitions (see `man_pages`). Each
//! command's options are in a file of its own; the groups of options several commands
//! share are in shared.rs.

use std::ffi::OsString;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

mod doctor;
mod list;
mod record;
mod serve;
mod shared;
mod stat;
mod top;

pub use doctor::DoctorArgs;
pub use list::ListArgs;
pub use record::{RecordArgs, ReportArgs};
pub use serve::ServeArgs;
pub use shared::{CgroupArgs, CpuArgs, EventArgs, EventCgroupsArg, MaxCgroupsArg, VerboseArg};
pub use stat::{take_stat_mode, StatArgs, StatMode, StatReportArgs};
pub use top::TopArgs;

use doctor::{DOCTOR_ABOUT, DOCTOR_EXAMPLES};
use list::LIST_ABOUT;
use record::{RECORD_ABOUT, RECORD_EXAMPLES, REPORT_ABOUT};
use serve::{SERVE_ABOUT, SERVE_EXAMPLES};
use stat::{STAT_ABOUT, STAT_EXAMPLES};
use top::{TOP_ABOUT, TOP_EXAMPLES};

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

/// Parses the command line; for `stat`, notes which -e each --filter and -G follows, as
/// perf applies a filter to the event before it and -G to the events before it.
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

/// Sections every page ends with, after what clap describes.
const EXIT_STATUS: &str = "The command's status when one was given, 0 otherwise; 129 for \
bad options or input (one line on standard error); 255 when counting could not be set up, \
the output could not be written or the command could not be run; 141 when the output \
pipe closed; 130 after Ctrl-C and 143 after SIGTERM without a command. bperf serve exits 0 \
after SIGTERM or Ctrl-C.";

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
