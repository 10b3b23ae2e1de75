//! The report: what is printed when (the interval header every 26 intervals, the
//! summary's header and footer, -r's table of runs, perf's hints, -v's reads), each
//! line by the printer of the format asked for.

use std::io::{self, Write};
use std::time::Duration;

use super::csv::csv_line;
use super::json::json_line;
use super::line::{fields, Fields, Line, Value};
use super::metric::{self, Siblings};
use super::table::{table_line, Buffers, COUNTS_LEN};
use crate::event::Event;
use crate::metrics::Use;
use crate::perf_version::PerfVersion;

#[derive(Clone, Debug, Default, PartialEq)]
pub enum Format {
    /// perf's human table.
    #[default]
    Table,
    /// -x SEP
    Csv(String),
    /// -j
    Json,
}

impl Format {
    /// The format -x SEP and -j ask for, the same for stat, stat -b and report: the
    /// table without either; an empty SEP, or both, refused as usage errors.
    pub fn of(field_separator: Option<&str>, json: bool) -> Result<Format, crate::UsageError> {
        match (field_separator, json) {
            (Some(_), true) => Err(crate::UsageError(
                "-x and -j cannot be used together".into(),
            )),
            (Some(""), false) => Err(crate::UsageError("-x needs a separator".into())),
            (Some(sep), false) => Ok(Format::Csv(sep.to_string())),
            (None, true) => Ok(Format::Json),
            (None, false) => Ok(Format::Table),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub format: Format,
    /// The thousands separator of the table's counts, from the locale as perf takes it
    /// (none in the C locale, or with --no-big-num).
    pub thousands: Option<String>,
    /// -I: the interval, for per-second rates and the time column.
    pub interval: Option<Duration>,
    /// -A: lines carry a CPU.
    pub per_cpu: bool,
    /// --per-socket and the like: lines carry a group of CPUs (for the interval header).
    pub aggr: Option<crate::aggr::Mode>,
    /// --per-thread: lines carry a thread (for the interval header).
    pub per_thread: bool,
    /// What the header says was counted, as perf says it: `'sleep 1'`, `process id
    /// '42'`; `None`: `'system wide'`.
    pub target: Option<String>,
    /// --summary: after the intervals, the counts of the whole run too.
    pub summary: bool,
    /// --summary with -x: the summary's lines start with `summary` (not with
    /// --no-csv-summary).
    pub csv_summary_prefix: bool,
    /// -n: no counters, only the time elapsed.
    pub null_run: bool,
    /// --interval-clear: clear the screen and print the header before each interval.
    pub interval_clear: bool,
    /// -r: how many runs the summary averages (1 or 0: one run, no noise shown).
    pub runs: usize,
    /// --no-scale: counts as read, not scaled for multiplexing.
    pub no_scale: bool,
    /// -v: each line's count, enabled and running times before the lines, as perf's
    /// `name: count enabled running`.
    pub verbose: bool,
    /// --table with -r: each run's time elapsed before the mean.
    pub run_table: Vec<Duration>,
    /// -M: the named metrics and the events they are worked out from.
    pub metrics: Vec<Use>,
    /// --metric-only: one line of metrics per cgroup and CPU or group, no counts.
    pub metric_only: bool,
    /// --quiet: no counts printed (only -v's lines about each read).
    pub quiet: bool,
    /// The cgroups are rows of every event (--for-each-cgroup, --all-cgroups), not each
    /// event's own (-G): --metric-only then prints a line per cgroup.
    pub cgroup_rows: bool,
    /// -r 0: a summary after each run, the header over every 26th.
    pub forever: bool,
    /// The NMI watchdog is on: perf then advises turning it off when an event did not
    /// count.
    pub nmi_watchdog: bool,
    /// Lines of the caller's own, already formatted, printed after each interval's and
    /// the summary's counts (before the footer): stat -b's run counts.
    pub extra_lines: Vec<String>,
    /// Whose perf stat output to print (perf 7.2's by default).
    pub version: PerfVersion,
    /// CPUs or processes are counted (-a, -C, -p, -t), or a command after -D's delay:
    /// perf 7.2 has a time elapsed for CPUs_utilized only then (for a command counted
    /// from its start its duration_time is not read, and the metric is `nan`).
    pub timed_targets: bool,
    /// The events are perf 7.2's default metrics' (no -e, no -M): only those a metric is
    /// shown on are printed, and of those the machine cannot count only cycles.
    pub default_metrics: bool,
}

/// What perf writes to clear the terminal (--interval-clear).
const CONSOLE_CLEAR: &str = "\x1b[H\x1b[2J";

/// What the summary's footer reports.
#[derive(Clone, Debug, Default)]
pub struct Footer {
    /// The time elapsed (with -r, the mean over the runs).
    pub elapsed: Duration,
    /// With -r, the standard error of that mean.
    pub elapsed_error: Option<Duration>,
    /// User and system time of the workload, when there was one.
    pub rusage: Option<(Duration, Duration)>,
}

/// perf repeats the interval header every this many intervals.
const HEADER_EVERY: usize = 26;

pub struct Report<W: Write> {
    pub opts: Options,
    pub out: W,
    intervals: usize,
    /// Summaries printed so far (-r 0 prints one per run).
    summaries: usize,
    last_ts: Duration,
    buffers: Buffers,
}

/// The decimal places that show `num`'s first significant digit (0 from 1 up), as perf
/// prints a time with its error.
fn precision(num: f64) -> usize {
    if num > 1.0 || num <= 0.0 {
        return 0;
    }
    (-num.log10()).ceil() as usize
}

impl<W: Write> Report<W> {
    pub fn new(opts: Options, out: W) -> Self {
        Report {
            opts,
            out,
            intervals: 0,
            summaries: 0,
            last_ts: Duration::ZERO,
            buffers: Buffers::default(),
        }
    }

    /// One interval's lines; `ts` is the time since counting started, `lines` hold the
    /// counts of this interval only (deltas).
    pub fn interval(&mut self, ts: Duration, events: &[Event], lines: &[Line]) -> io::Result<()> {
        if self.opts.quiet {
            return Ok(());
        }
        // Rates are per interval as asked for, as in perf, the last partial one included.
        let wall = self
            .opts
            .interval
            .unwrap_or(ts.saturating_sub(self.last_ts));
        self.last_ts = ts;
        if self.opts.interval_clear {
            // As perf, on standard output whatever the report's output.
            println!("{CONSOLE_CLEAR}");
        }
        let header = self.intervals % HEADER_EVERY == 0 || self.opts.interval_clear;
        self.intervals += 1;
        let wall_ns = wall.as_nanos() as f64;
        let siblings = Siblings::new(events, lines);
        let all: Vec<Fields> = lines
            .iter()
            .filter(|l| self.printed(events, l))
            .map(|l| fields(events, &self.opts, &siblings, l, wall_ns, None))
            .collect();
        if self.opts.metric_only {
            return self.metric_only(Some(ts), header, &all);
        }
        if self.opts.format == Format::Table && header {
            writeln!(
                self.out,
                "#{:>15}{} {:>COUNTS_LEN$} unit events",
                "time",
                self.interval_place_header(),
                "counts"
            )?;
        }
        for f in &all {
            self.print(Some(ts), f)?;
        }
        self.print_extra_lines()?;
        self.out.flush()
    }

    /// Whether `line` is printed: every line but, of perf 7.2's default metrics' events,
    /// those no metric is shown on, and those the machine cannot count other than
    /// cycles (perf's one event it never skips), unless -v.
    /// With --metric-only, the lines left out are there too: perf 7.2 heads a column for
    /// every default metric (see [`Report::valued`]).
    fn printed(&self, events: &[Event], line: &Line) -> bool {
        if !self.opts.default_metrics {
            return true;
        }
        let shows_metric = self.opts.metrics.iter().any(|u| u.shown_on == line.event);
        let kind = metric::kind(&events[line.event].attr);
        let unsupported = line.value == Value::NotSupported;
        let headed_only = self.opts.metric_only;
        shows_metric && (headed_only || !self.skipped_72(kind, unsupported))
    }

    /// Of the lines --metric-only prints, those with values: of perf 7.2's default
    /// metrics' events, not those skipped, unless -A (where perf gives them `nan`).
    pub(super) fn valued(&self, f: &Fields) -> bool {
        let unsupported = f.status == "<not supported>";
        !(self.opts.default_metrics && !self.opts.per_cpu && self.skipped_72(f.kind, unsupported))
    }

    /// perf 7.2 skips a default event the machine cannot count, but for cycles, unless
    /// -v.
    fn skipped_72(&self, kind: metric::Kind, unsupported: bool) -> bool {
        kind != metric::Kind::Cycles && unsupported && !self.opts.verbose
    }

    fn print_extra_lines(&mut self) -> io::Result<()> {
        for line in &self.opts.extra_lines {
            writeln!(self.out, "{line}")?;
        }
        Ok(())
    }

    /// The interval header's columns for what each line is of besides its event.
    pub(super) fn interval_place_header(&self) -> String {
        match (self.opts.per_cpu, self.opts.aggr, self.opts.per_thread) {
            (true, _, _) => " cpu   ".to_string(),
            (_, Some(mode), _) => {
                // perf 7.2 heads the number of CPUs summed `ctrs` (6.12: `cpus`).
                let n = match self.opts.version {
                    PerfVersion::V6_12 => "cpus",
                    PerfVersion::V7_2 => "ctrs",
                };
                format!(" {:<w$} {n}", mode.json_key(), w = mode.width())
            }
            (_, _, true) => format!(" {:>16}-{:<7}", "comm", "pid"),
            _ => String::new(),
        }
    }

    /// The final summary; `lines` hold counts for the whole run. In interval mode perf
    /// prints nothing more (the intervals were the output) unless asked for a summary,
    /// which then has no header, and its CSV lines start with `summary`.
    pub fn summary(&mut self, events: &[Event], lines: &[Line], footer: &Footer) -> io::Result<()> {
        self.summary_of_runs(events, lines, &[], footer)
    }

    /// The summary of -r's runs: `lines` hold the mean counts, `noise` each line's
    /// standard error of the mean in % of it.
    pub(crate) fn summary_of_runs(
        &mut self,
        events: &[Event],
        lines: &[Line],
        noise: &[f64],
        footer: &Footer,
    ) -> io::Result<()> {
        let after_intervals = self.opts.interval.is_some();
        if after_intervals && !self.opts.summary || self.opts.quiet {
            return self.out.flush();
        }
        let table = self.opts.format == Format::Table;
        let header = !self.opts.forever || self.summaries % HEADER_EVERY == 0;
        self.summaries += 1;
        if table && !after_intervals && header {
            let target = self.opts.target.as_deref().unwrap_or("'system wide'");
            write!(self.out, "\n Performance counter stats for {target}")?;
            if self.opts.runs > 1 {
                write!(self.out, " ({} runs)", self.opts.runs)?;
            }
            write!(self.out, ":\n\n")?;
        }
        let prefix = match &self.opts.format {
            Format::Csv(sep) if after_intervals && self.opts.csv_summary_prefix => {
                format!("summary{sep}")
            }
            _ => String::new(),
        };
        let wall_ns = footer.elapsed.as_nanos() as f64;
        let siblings = Siblings::new(events, lines);
        let all: Vec<Fields> = lines
            .iter()
            .enumerate()
            .filter(|(_, line)| self.printed(events, line))
            .map(|(i, line)| {
                let noise = noise.get(i).copied().filter(|_| self.opts.runs > 1);
                fields(events, &self.opts, &siblings, line, wall_ns, noise)
            })
            .collect();
        if self.opts.metric_only {
            self.metric_only(None, !after_intervals, &all)?;
        } else {
            for f in &all {
                self.out.write_all(prefix.as_bytes())?;
                self.print(None, f)?;
            }
        }
        self.print_extra_lines()?;
        if table {
            self.footer(footer)?;
            self.hints(events, lines)?;
        }
        self.out.flush()
    }

    /// perf's advice after the footer when an event it could count did not: the NMI
    /// watchdog may hold a counter; a group that mixes PMUs cannot be scheduled.
    fn hints(&mut self, events: &[Event], lines: &[Line]) -> io::Result<()> {
        if self.opts.metric_only {
            return Ok(());
        }
        let not_counted = |l: &&Line| matches!(l.value, Value::Counted(r) if r.scaled().is_none());
        if self.opts.nmi_watchdog && lines.iter().any(|l| not_counted(&l)) {
            write!(
                self.out,
                "Some events weren't counted. Try disabling the NMI watchdog:\n\techo 0 > /proc/sys/kernel/nmi_watchdog\n\tperf stat ...\n\techo 1 > /proc/sys/kernel/nmi_watchdog\n"
            )?;
        }
        let leads_group = |e: usize| events.iter().filter(|o| o.leader == Some(e)).count() > 1;
        let leader_not_counted = lines
            .iter()
            .filter(not_counted)
            .any(|l| leads_group(l.event));
        // perf 6.12 gives this advice, perf 7.2 does not.
        let advised = self.opts.version == PerfVersion::V6_12;
        if advised && leader_not_counted && mixes_pmus(events) {
            writeln!(
                self.out,
                "The events in group usually have to be from the same PMU. Try reorganizing the group."
            )?;
        }
        Ok(())
    }

    /// --table: each run's time and its difference from the mean, with a bar of one `#`
    /// and one more per 5% of difference, then the heading of the mean.
    fn run_table(&mut self, mean: f64, digits: usize) -> io::Result<()> {
        if self.opts.run_table.is_empty() {
            return Ok(());
        }
        let indent = format!(" {mean:17.digits$}").len() - format!("{mean:.digits$}").len();
        let pad = " ".repeat(indent);
        writeln!(self.out, "{pad}# Table of individual measurements:")?;
        for run in self.opts.run_table.clone() {
            let run = run.as_secs_f64();
            let diff = run - mean;
            let bars = 1 + ((100.0 * diff / run) as i64).unsigned_abs() / 5;
            let bar = "#".repeat(bars as usize);
            writeln!(self.out, " {run:17.digits$} ({diff:+.digits$}) {bar}")?;
        }
        write!(self.out, "\n{pad}# Final result:\n")
    }

    /// With -v, what perf says of each read: `failed to read counter NAME` on stderr for
    /// an event the kernel refused, and, summed over CPUs (not per CPU, thread or group
    /// of CPUs), `NAME: count enabled running` of the others, to the output.
    /// `unread`: the events perf could not read (refused, or in a group it cannot read).
    pub(crate) fn counts_read(
        &mut self,
        events: &[Event],
        lines: &[Line],
        unread: &[bool],
    ) -> io::Result<()> {
        if !self.opts.verbose {
            return Ok(());
        }
        let summed = !self.opts.per_cpu && self.opts.aggr.is_none() && !self.opts.per_thread;
        let mut said = rustc_hash::FxHashSet::default();
        for line in lines {
            if !said.insert((line.event, line.cgroup.as_deref())) {
                continue;
            }
            let name = &events[line.event].name;
            match line.value {
                _ if unread.get(line.event).copied().unwrap_or(false) => {
                    self.out.flush()?;
                    eprintln!("failed to read counter {name}");
                }
                Value::NotSupported => {
                    self.out.flush()?;
                    eprintln!("failed to read counter {name}");
                }
                Value::Counted(r) if summed => {
                    let count = r.scaled().unwrap_or(0.0) as u64;
                    writeln!(self.out, "{name}: {count} {} {}", r.enabled, r.running)?;
                }
                Value::Counted(_) => {}
            }
        }
        self.out.flush()
    }

    /// perf's footer: the time elapsed and, for a command counted on its own, its user
    /// and system time.
    fn footer(&mut self, footer: &Footer) -> io::Result<()> {
        let elapsed = footer.elapsed.as_secs_f64();
        if !self.opts.null_run {
            writeln!(self.out)?;
        }
        match footer.elapsed_error {
            Some(error) => {
                // perf's: two digits more than the error's first significant one.
                let error = error.as_secs_f64();
                let digits = precision(error) + 2;
                self.run_table(elapsed, digits)?;
                write!(
                    self.out,
                    " {elapsed:17.digits$} +- {error:.digits$} seconds time elapsed"
                )?;
                let pct = if elapsed > 0.0 {
                    100.0 * error / elapsed
                } else {
                    0.0
                };
                if pct != 0.0 {
                    write!(self.out, "  ( +-{pct:6.2}% )")?;
                }
            }
            None => {
                write!(self.out, " {elapsed:17.9} seconds time elapsed")?;
                if let Some((user, sys)) = footer.rusage {
                    write!(self.out, "\n\n {:17.9} seconds user\n", user.as_secs_f64())?;
                    writeln!(self.out, " {:17.9} seconds sys", sys.as_secs_f64())?;
                }
            }
        }
        write!(self.out, "\n\n")
    }

    fn print(&mut self, ts: Option<Duration>, f: &Fields) -> io::Result<()> {
        match &self.opts.format {
            Format::Table => {
                let thousands = self.opts.thousands.as_deref();
                table_line(&mut self.buffers, ts, f, thousands);
                self.buffers.line.push('\n');
                self.out.write_all(self.buffers.line.as_bytes())
            }
            Format::Csv(sep) => writeln!(self.out, "{}", csv_line(ts, f, sep)),
            Format::Json => writeln!(self.out, "{}", json_line(ts, f)),
        }
    }
}

/// Whether the events count on more than one PMU besides the software one (perf's test
/// for its advice about groups).
fn mixes_pmus(events: &[Event]) -> bool {
    const SOFTWARE: u32 = 1;
    let mut types = events
        .iter()
        .map(|e| e.attr.type_)
        .filter(|&t| t != SOFTWARE);
    let first = types.next();
    types.any(|t| Some(t) != first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::*;
    use crate::output::people;

    #[test]
    fn interval_table_repeats_header_every_26() {
        let ev = events();
        let l = lines(None);
        let mut o = opts(Format::Table);
        o.interval = Some(Duration::from_secs(1));
        let out = render(o, |r| {
            for i in 1..=27 {
                r.interval(Duration::from_secs(i), &ev, &l).unwrap();
            }
            r.summary(&ev, &l, &Footer::default()).unwrap();
        });
        let headers = out
            .lines()
            .filter(|l| l.starts_with("#           time"))
            .count();
        assert_eq!(headers, 2);
        assert_eq!(
            out.lines().count(),
            2 + 27 * 3,
            "no summary after intervals"
        );
        let first = out.lines().nth(1).unwrap();
        assert_eq!(
            first,
"     1.000000000           1,013.75 msec task-clock                       #    1.014 CPUs utilized             "
        );
    }

    /// A cgroup's name is escaped as a runtime's name is (and as --culprits' rows and
    /// top write it), bytes that are not UTF-8 as `\xNN`; JSON has its own escapes, and
    /// the bytes as the text `\xNN`. An ordinary name is written as perf writes it.
    #[test]
    fn a_cgroups_name_is_escaped_in_every_format() {
        let odd = people::text_of_bytes(b"w\r\n,\"\x1b[2J\\\xff");
        let table = cgroup_summary(&odd, Format::Table);
        assert!(
            table.contains(r#" cs                               w\r\n,"\x1b[2J\\\xff "#),
            "{table}"
        );
        let csv = cgroup_summary(&odd, Format::Csv(",".into()));
        let fields: Vec<&str> = csv.trim_end().split(',').collect();
        assert_eq!(fields.len(), 8, "{csv}");
        assert_eq!(fields[3], r#"w\r\n\x2c\x22\x1b[2J\\\xff"#, "{csv}");
        let json = cgroup_summary(&odd, Format::Json);
        let row: serde_json::Value = serde_json::from_str(json.trim_end()).unwrap();
        assert_eq!(row["cgroup"], "w\r\n,\"\u{1b}[2J\\\\xff");
        for out in [&table, &csv, &json] {
            assert!(!out.chars().any(|c| c != '\n' && c.is_control()), "{out:?}");
        }
        let csv = cgroup_summary("system.slice/db.service", Format::Csv(",".into()));
        assert_eq!(
            csv,
            "75000,,cs,system.slice/db.service,1000000000,100.00,,\n"
        );
    }

    /// --for-each-container: the container's name after the cgroup, in a column padded
    /// as perf pads the cgroup's, a CSV field after the cgroup's and a `container` key
    /// after `cgroup`.
    #[test]
    fn the_container_column_follows_the_cgroup_in_every_format() {
        let table = container_summary("web", Format::Table);
        let row = table.lines().find(|l| l.contains("cs")).unwrap();
        assert_eq!(
            row,
            "            75,000      cs                               docker/3474383178be web                                                   "
        );
        let csv = container_summary("web", Format::Csv(",".into()));
        assert_eq!(
            csv,
            "75000,,cs,docker/3474383178be,web,1000000000,100.00,,\n"
        );
        let json = container_summary("web", Format::Json);
        assert!(
            json.starts_with(r#"{"counter-value" : "75000.000000", "unit" : "", "event" : "cs", "cgroup" : "docker/3474383178be", "container" : "web", "event-runtime" : 1000000000"#),
            "{json}"
        );
    }

    /// A runtime's name with a newline, separators, a quote, ESC, NUL and DEL: escaped
    /// in the table and CSV (one field), JSON's escapes in JSON, no control character
    /// written.
    #[test]
    fn a_runtimes_name_is_escaped_in_every_format() {
        let odd = "w\n,;\"\u{1b}[2J\0\u{7f}\\";
        let table = container_summary(odd, Format::Table);
        assert!(
            table.contains(r#"docker/3474383178be w\n,;"\x1b[2J\x00\x7f\\ "#),
            "{table}"
        );
        for sep in [",", ";"] {
            let csv = container_summary(odd, Format::Csv(sep.into()));
            let fields: Vec<&str> = csv.trim_end().split(sep).collect();
            assert_eq!(fields.len(), 9, "{csv}");
            let name = match sep {
                "," => r#"w\n\x2c;\x22\x1b[2J\x00\x7f\\"#,
                _ => r#"w\n,\x3b\x22\x1b[2J\x00\x7f\\"#,
            };
            assert_eq!(fields[4], name, "{csv}");
        }
        let json = container_summary(odd, Format::Json);
        let row: serde_json::Value = serde_json::from_str(json.trim_end()).unwrap();
        assert_eq!(row["container"], odd);
        for out in [&table, &json] {
            assert!(!out.chars().any(|c| c != '\n' && c.is_control()), "{out:?}");
        }
    }

    #[test]
    fn named_metrics_on_lines_of_their_own() {
        let (ev, l, footer) = (events(), lines(None), half_second());
        let mut o = opts(Format::Table);
        o.metrics = named("CPUs_utilized", &[0]);
        o.metrics.extend(named("cs_per_second", &[1, 0]));
        let out = render(o.clone(), |r| r.summary(&ev, &l, &footer).unwrap());
        let want: Vec<&str> = out.lines().skip(3).take(4).collect();
        assert_eq!(
            want,
            [
                "          1,013.75 msec task-clock                       #    2.027 CPUs utilized             ",
                "                                                  #      2.0 CPUs  CPUs_utilized       ",
                "            75,000      cs                               #   73.983 K/sec                     ",
                "                                                  #  73982.7 cs/sec  cs_per_second     ",
            ]
        );
        o.format = Format::Csv(",".into());
        let out = render(o.clone(), |r| r.summary(&ev, &l, &footer).unwrap());
        assert_eq!(out.lines().nth(1).unwrap(), ",,,,,2.0,CPUs  CPUs_utilized");
        o.format = Format::Json;
        let out = render(o, |r| r.summary(&ev, &l, &footer).unwrap());
        assert_eq!(
            out.lines().nth(1).unwrap(),
            r#"{"metric-value" : "2.027500", "metric-unit" : "CPUs  CPUs_utilized"}"#
        );
    }

    /// perf 7.2's default metrics: the metric's value, unit and name on its event's line,
    /// `nan` beside an event that did not count; no metric beside an event without one
    /// (and no JSON metric members).
    fn perf_72(format: Format) -> String {
        let (ev, l, footer) = (events(), lines(None), half_second());
        let mut o = opts(format);
        o.version = PerfVersion::V7_2;
        o.metrics = named("CPUs_utilized", &[0]);
        o.metrics.extend(named("cycles_frequency", &[2, 0]));
        render(o, |r| r.summary(&ev, &l, &footer).unwrap())
    }

    #[test]
    fn perf_72_table_csv_and_json() {
        let table = perf_72(Format::Table);
        let rows: Vec<&str> = table.lines().skip(3).take(3).collect();
        assert_eq!(
            rows,
            [
                "          1,013.75 msec task-clock                       #      2.0 CPUs  CPUs_utilized       ",
                "            75,000      cs                                                                    ",
                "   <not supported>      cycles                           #      nan GHz  cycles_frequency     ",
            ]
        );
        let csv = perf_72(Format::Csv(",".into()));
        assert_eq!(
            csv,
            "1013.75,msec,task-clock,1000000000,100.00,2.0,CPUs  CPUs_utilized
75000,,cs,1000000000,100.00,,
<not supported>,,cycles,0,100.00,,GHz  cycles_frequency\n"
        );
        let json: Vec<String> = perf_72(Format::Json).lines().map(String::from).collect();
        assert_eq!(
            json,
            [
                r#"{"counter-value" : "1013.750000", "unit" : "msec", "event" : "task-clock", "event-runtime" : 1000000000, "pcnt-running" : 100.00, "metric-value" : "2.027500", "metric-unit" : "CPUs  CPUs_utilized"}"#,
                r#"{"counter-value" : "75000.000000", "unit" : "", "event" : "cs", "event-runtime" : 1000000000, "pcnt-running" : 100.00}"#,
                r#"{"counter-value" : "<not supported>", "unit" : "", "event" : "cycles", "event-runtime" : 0, "pcnt-running" : 100.00, "metric-value" : "nan", "metric-unit" : "GHz  cycles_frequency"}"#,
            ]
        );
    }

    /// perf 7.2's default set: an event no metric is shown on is left out, and so is one
    /// the machine cannot count, unless it is cycles.
    #[test]
    fn perf_72_default_set_leaves_out_events() {
        let mut ev = events();
        ev.push(Event::plain("branches", 0, 4));
        let mut l = lines(None);
        l.push(Line {
            value: Value::NotSupported,
            ..counted(3, 0, 0, None, None)
        });
        let mut o = opts(Format::Csv(",".into()));
        o.version = PerfVersion::V7_2;
        o.default_metrics = true;
        o.metrics = named("cycles_frequency", &[2, 0]);
        o.metrics.extend(named("branch_frequency", &[3, 0]));
        let out = render(o, |r| r.summary(&ev, &l, &half_second()).unwrap());
        assert_eq!(
            out,
            "<not supported>,,cycles,0,100.00,,GHz  cycles_frequency\n"
        );
    }
}
