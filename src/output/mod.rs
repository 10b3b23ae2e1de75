//! Counts -> perf-stat-style output: the table, interval lines, CSV (-x) and JSON (-j),
//! with perf's metric comments. Pure: writes to any `io::Write`.
//!
//! Each line is first turned into `Fields` (strings and numbers in perf's units), then
//! printed by the printer of the chosen format.

pub mod culprits;
pub mod metric;
mod metric_only;
pub mod people;

use std::io::{self, Write};
use std::time::Duration;

use crate::event::{Event, Tool};
use crate::metrics::Use;
use crate::perf_version::PerfVersion;
use crate::reading::Reading;
use metric::{Metric, Siblings};

/// The value of one output line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// The event was opened; the reading may still show it never ran (`<not counted>`).
    Counted(Reading),
    /// The kernel refused the event on this machine (`<not supported>`).
    NotSupported,
}

/// One output line's worth of data: an event, optionally for one cgroup and/or one CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Index into the session's event list.
    pub event: usize,
    /// Cgroup name as the user gave it (perf prints it in its own column), if per-cgroup.
    pub cgroup: Option<String>,
    /// The container whose cgroup it is (--for-each-container), in a column after the
    /// cgroup's.
    pub container: Option<String>,
    /// CPU number, with -A/--no-aggr.
    pub cpu: Option<u32>,
    /// What the line is of besides its event and cgroup: a thread or a group of CPUs.
    pub place: Option<Place>,
    pub value: Value,
}

/// A thread (--per-thread) or a group of CPUs (--per-socket and the like).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    Thread {
        comm: String,
        tid: i32,
    },
    Group {
        mode: crate::aggr::Mode,
        /// perf's name for the group (`S0-D0-C1`).
        name: String,
        /// How many CPUs were counted in it.
        cpus: usize,
    },
}

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

/// One output line, in perf's units, before any format is applied.
#[derive(Clone, Debug, PartialEq)]
struct Fields<'a> {
    cpu: Option<u32>,
    place: Option<&'a Place>,
    /// `None` for `<not counted>` / `<not supported>` (see `status`).
    value: Option<f64>,
    status: &'static str,
    unit: &'static str,
    event: &'a str,
    /// What kind of event, for the metric perf gives it.
    kind: metric::Kind,
    cgroup: Option<&'a str>,
    container: Option<&'a str>,
    run_ns: u64,
    pct: f64,
    /// Show ` (xx.xx%)`: the event ran less than it was enabled.
    multiplexed: bool,
    /// perf's metric for the event, then the -M metrics it leads, each on its own line.
    metrics: Vec<Metric>,
    /// With -r: the standard error of the mean over the runs, in % of the mean.
    noise: Option<f64>,
    /// Whose perf's line it is.
    version: PerfVersion,
}

impl Fields<'_> {
    /// The metrics the line shows: perf 6.12 shows those with a value on a line with a
    /// count; perf 7.2 shows every metric of the event, `nan` where it has no value.
    fn shown_metrics(&self) -> impl Iterator<Item = &Metric> {
        let counted = self.value.is_some();
        let all = self.version != PerfVersion::V6_12;
        self.metrics
            .iter()
            .filter(move |m| all || counted && !m.value.is_nan())
    }
}

/// One line's fields, its metrics worked out from `siblings` (the lines of the same
/// print) over `wall_ns` of time; `noise` with -r.
fn fields<'a>(
    events: &'a [Event],
    opts: &Options,
    siblings: &Siblings,
    line: &'a Line,
    wall_ns: f64,
    noise: Option<f64>,
) -> Fields<'a> {
    let ev = &events[line.event];
    let scale = !opts.no_scale;
    let named_wall_ns = match opts.version == PerfVersion::V7_2 && !opts.timed_targets {
        true => f64::NAN,
        false => wall_ns,
    };
    // perf 6.12's own metrics beside each event; perf 7.2 has only its metric
    // definitions' (-M's, and those of its default events).
    let builtin = match opts.version.builtin_metrics() {
        true => metric::metric(events, siblings, line, wall_ns),
        false => None,
    };
    let (value, status, run_ns, pct, multiplexed) = match line.value {
        Value::NotSupported => (None, "<not supported>", 0, 100.0, false),
        Value::Counted(r) => match if scale { r.scaled() } else { r.raw() } {
            None => (None, "<not counted>", 0, 100.0, false),
            Some(v) => (
                Some(match ev.tool {
                    // A wait, in ns, shown in msec as the clocks are.
                    Some(Tool::RunqWait) => v / 1e6,
                    _ => metric::shown(&ev.attr, v),
                }),
                "",
                r.running,
                r.pct_running(),
                r.running < r.enabled,
            ),
        },
    };
    Fields {
        cpu: line.cpu,
        place: line.place.as_ref(),
        value,
        status,
        // perf 6.12's tool events count ns; perf 7.2's (the tool PMU's) have no unit.
        unit: match ev.tool {
            Some(Tool::RunqWait) => "msec",
            Some(Tool::Preemptions) => "",
            Some(_) if opts.version == PerfVersion::V6_12 => "ns",
            Some(_) => "",
            None => metric::unit(&ev.attr),
        },
        event: &ev.name,
        kind: metric::kind(&ev.attr),
        cgroup: line.cgroup.as_deref(),
        container: line.container.as_deref(),
        run_ns,
        pct,
        multiplexed,
        metrics: builtin
            .into_iter()
            .chain(metric::named(&opts.metrics, siblings, line, named_wall_ns))
            .collect(),
        noise,
        version: opts.version,
    }
}

/// The decimal places that show `num`'s first significant digit (0 from 1 up), as perf
/// prints a time with its error.
fn precision(num: f64) -> usize {
    if num > 1.0 || num <= 0.0 {
        return 0;
    }
    (-num.log10()).ceil() as usize
}

/// Writes a plain decimal number with its integer part grouped in thousands by `sep`:
/// 1234567.89 -> 1,234,567.89.
fn push_grouped(out: &mut String, s: &str, sep: &str) {
    let (int, frac) = s.split_at(s.find('.').unwrap_or(s.len()));
    let (sign, digits) = int.split_at(if int.starts_with('-') { 1 } else { 0 });
    out.push_str(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push_str(sep);
        }
        out.push(c);
    }
    out.push_str(frac);
}

/// Groups the integer part of a plain decimal number in thousands.
#[cfg(test)]
fn group_thousands(s: &str) -> String {
    let mut out = String::new();
    push_grouped(&mut out, s, ",");
    out
}

/// The count as perf prints it: msec with two decimals, counts as integers.
fn count_text(f: &Fields) -> String {
    let mut out = String::new();
    write_count(&mut out, &mut String::new(), f, None);
    out
}

/// Appends the count as perf prints it to `out`, grouped by `thousands` if given;
/// `digits` is scratch space.
fn write_count(out: &mut String, digits: &mut String, f: &Fields, thousands: Option<&str>) {
    use std::fmt::Write as _;
    let Some(v) = f.value else {
        out.push_str(f.status);
        return;
    };
    digits.clear();
    let _ = match f.unit {
        "msec" => write!(digits, "{v:.2}"),
        // A whole count of at most 2^53 prints exactly as an integer, and faster.
        _ if v.fract() == 0.0 && v.abs() < 9e15 => write!(digits, "{}", v as i64),
        _ => write!(digits, "{v:.0}"),
    };
    match thousands {
        Some(sep) => push_grouped(out, digits, sep),
        None => out.push_str(digits),
    }
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
    fn valued(&self, f: &Fields) -> bool {
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
    fn interval_place_header(&self) -> String {
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
        // perf 7.2 no longer gives this advice.
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

/// Widths of perf's table columns (perf 6.12's stat-display.c).
const COUNTS_LEN: usize = 18;
const EVNAME_LEN: usize = 32;
const CGROUP_LEN: usize = 16;
const METRIC_LEN: usize = 38;

/// Enough spaces for any padding in a table line.
const SPACES: &str = "                                                                ";

/// Appends `text` to `s`, then spaces up to `width` characters.
fn push_left(s: &mut String, text: &str, width: usize) {
    s.push_str(text);
    let n = text.chars().count();
    if n < width {
        s.push_str(&SPACES[..width - n]);
    }
}

/// Buffers a Report keeps from line to line, so that a table line costs no allocation.
#[derive(Default)]
struct Buffers {
    line: String,
    count: String,
    digits: String,
}

/// What a table line starts with: the time, and the CPU, thread or group of CPUs.
fn push_where(s: &mut String, ts: Option<Duration>, f: &Fields) {
    use std::fmt::Write as _;
    if let Some(ts) = ts {
        let _ = write!(s, "{:6}.{:09} ", ts.as_secs(), ts.subsec_nanos());
    }
    if let Some(cpu) = f.cpu {
        let _ = write!(s, "CPU{cpu:<3} ");
    }
    match f.place {
        Some(Place::Thread { comm, tid }) => {
            let _ = write!(s, "{comm:>16}-{tid:<7} ");
        }
        Some(Place::Group { mode, name, cpus }) => {
            let _ = write!(s, "{name:<w$} {cpus:>4} ", w = mode.width());
        }
        None => {}
    }
}

/// How far perf indents a metric on a line of its own, after the line's start.
const NEW_LINE_INDENT: usize = 49;

/// One table line into `b.line` (cleared first), without its newline, padded as perf
/// 6.12 pads it; each metric after the first on a line of its own.
fn table_line(b: &mut Buffers, ts: Option<Duration>, f: &Fields, thousands: Option<&str>) {
    let Buffers {
        line: s,
        count,
        digits,
    } = b;
    s.clear();
    push_where(s, ts, f);
    let start_len = s.len();
    count.clear();
    write_count(count, digits, f, thousands);
    let width = count.chars().count();
    if width < COUNTS_LEN {
        s.push_str(&SPACES[..COUNTS_LEN - width]);
    }
    s.push_str(count);
    s.push(' ');
    push_left(s, f.unit, 4);
    s.push(' ');
    push_left(s, f.event, EVNAME_LEN);
    if let Some(cg) = f.cgroup {
        s.push(' ');
        match people::needs_escape(cg) {
            true => push_left(s, &people::escape_controls(cg), CGROUP_LEN),
            false => push_left(s, cg, CGROUP_LEN),
        }
    }
    if let Some(c) = f.container {
        s.push(' ');
        push_left(s, &people::escape_controls(c), CGROUP_LEN);
    }
    match f.shown_metrics().next() {
        Some(m) => push_metric(s, m),
        None => s.push_str(&SPACES[..METRIC_LEN]),
    }
    let start = s[..start_len].to_string();
    for m in f.shown_metrics().skip(1) {
        s.push('\n');
        s.push_str(&start);
        if f.cpu.is_some() {
            s.push_str(&SPACES[..8]);
        }
        s.push_str(&SPACES[..NEW_LINE_INDENT]);
        push_metric(s, m);
    }
    if f.multiplexed {
        let _ = std::fmt::Write::write_fmt(s, format_args!("  ({:.2}%)", f.pct));
    }
    if let Some(pct) = f.noise.filter(|&p| p != 0.0) {
        let _ = std::fmt::Write::write_fmt(s, format_args!("  ( +-{pct:6.2}% )"));
    }
}

/// ` # value unit`, padded to perf's metric column.
fn push_metric(s: &mut String, m: &Metric) {
    use std::fmt::Write as _;
    let start = s.len();
    let _ = write!(s, " # {m} ");
    let width = METRIC_LEN.saturating_sub(s.len() - start);
    push_left(s, &m.unit, width);
}

/// The CSV columns before the count: the time, and the CPU, thread or group of CPUs.
fn csv_where(ts: Option<Duration>, f: &Fields) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    if let Some(ts) = ts {
        cols.push(format!("{}.{:09}", ts.as_secs(), ts.subsec_nanos()));
    }
    if let Some(cpu) = f.cpu {
        cols.push(format!("CPU{cpu}"));
    }
    match f.place {
        Some(Place::Thread { comm, tid }) => cols.push(format!("{comm}-{tid}")),
        Some(Place::Group { name, cpus, .. }) => {
            cols.push(name.clone());
            cols.push(cpus.to_string());
        }
        None => {}
    }
    cols
}

fn csv_line(ts: Option<Duration>, f: &Fields, sep: &str) -> String {
    let lead = csv_where(ts, f);
    let mut cols = lead.clone();
    cols.push(count_text(f));
    cols.push(f.unit.to_string());
    cols.push(f.event.to_string());
    if let Some(cg) = f.cgroup {
        cols.push(csv_name(cg, sep));
    }
    if let Some(c) = f.container {
        cols.push(csv_name(c, sep));
    }
    if let Some(pct) = f.noise {
        cols.push(format!("{pct:.2}%"));
    }
    cols.push(f.run_ns.to_string());
    cols.push(format!("{:.2}", f.pct));
    match f.shown_metrics().next() {
        Some(m) => {
            cols.push(m.digits());
            cols.push(m.unit.to_string());
        }
        None => {
            cols.push(String::new());
            cols.push(String::new());
        }
    }
    let mut out = cols.join(sep);
    // A further metric: perf's line of empty columns up to the metric's.
    let empty = 5 + f.cgroup.is_some() as usize + f.container.is_some() as usize;
    for m in f.shown_metrics().skip(1) {
        let mut more = lead.clone();
        more.extend(std::iter::repeat_n(String::new(), empty));
        more.push(m.digits());
        more.push(m.unit.to_string());
        out.push('\n');
        out.push_str(&more.join(sep));
    }
    out
}

/// A name (a cgroup's, or one from a runtime) as one CSV field: escaped as in the table, and the
/// separator's characters and the quote as `\xNN` too (`a,b` is `a\x2cb` with `-x,`):
/// a name is one field whatever it holds, and no RFC 4180 reader takes a quote in it
/// for the start of a quoted field.
fn csv_name(name: &str, sep: &str) -> String {
    people::escape_also(name, |c| c == '"' || sep.contains(c))
}

/// `s` as a JSON string: JSON's own escapes (`\n`, `\u001b`), which a JSON reader
/// undoes, and `\u007f`-style ones for DEL and the C1 controls, which JSON allows raw
/// but a terminal would take as controls; a byte a name carries that is not UTF-8 as
/// the text `\xNN` (see people::text_of_bytes).
fn json_quote(s: &str) -> String {
    let quoted = serde_json::Value::String(people::bytes_as_text(s).into_owned()).to_string();
    match quoted.chars().any(char::is_control) {
        false => quoted,
        true => quoted
            .chars()
            .map(|c| match c.is_control() {
                true => format!("\\u{:04x}", c as u32),
                false => c.to_string(),
            })
            .collect(),
    }
}

/// The JSON members before the count: the time, and the CPU, thread or group of CPUs.
fn json_where(ts: Option<Duration>, f: &Fields) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(ts) = ts {
        parts.push(format!(
            "\"interval\" : {}.{:09}",
            ts.as_secs(),
            ts.subsec_nanos()
        ));
    }
    if let Some(cpu) = f.cpu {
        parts.push(format!("\"cpu\" : \"{cpu}\""));
    }
    match f.place {
        Some(Place::Thread { comm, tid }) => {
            parts.push(format!(
                "\"thread\" : {}",
                json_quote(&format!("{comm}-{tid}"))
            ));
        }
        Some(Place::Group { mode, name, cpus }) => {
            parts.push(format!("\"{}\" : {}", mode.json_key(), json_quote(name)));
            // perf 7.2 calls the number of CPUs summed `counters`.
            let key = match f.version {
                PerfVersion::V6_12 => "aggregate-number",
                PerfVersion::V7_2 => "counters",
            };
            parts.push(format!("\"{key}\" : {cpus}"));
        }
        None => {}
    }
    parts
}

fn json_line(ts: Option<Duration>, f: &Fields) -> String {
    let q = json_quote;
    let lead = json_where(ts, f);
    let mut parts = lead.clone();
    let value = match f.value {
        Some(v) => format!("{v:.6}"),
        None => f.status.to_string(),
    };
    parts.push(format!("\"counter-value\" : {}", q(&value)));
    parts.push(format!("\"unit\" : {}", q(f.unit)));
    parts.push(format!("\"event\" : {}", q(f.event)));
    if let Some(cg) = f.cgroup {
        parts.push(format!("\"cgroup\" : {}", q(cg)));
    }
    if let Some(c) = f.container {
        parts.push(format!("\"container\" : {}", q(c)));
    }
    if let Some(pct) = f.noise {
        parts.push(format!("\"variance\" : {pct:.2}"));
    }
    parts.push(format!("\"event-runtime\" : {}", f.run_ns));
    parts.push(format!("\"pcnt-running\" : {:.2}", f.pct));
    let mut shown = f.shown_metrics();
    match shown.next() {
        Some(m) => parts.extend(json_metric(m, f.version)),
        // perf 6.12 writes an empty metric for an event without one; 7.2 none.
        None if f.version == PerfVersion::V6_12 => parts.extend([
            "\"metric-value\" : \"0.000000\"".to_string(),
            "\"metric-unit\" : \"\"".to_string(),
        ]),
        None => {}
    }
    let mut out = format!("{{{}}}", parts.join(", "));
    for m in shown {
        let mut more = lead.clone();
        more.extend(json_metric(m, f.version));
        out.push_str(&format!("\n{{{}}}", more.join(", ")));
    }
    out
}

/// A metric's JSON members: its value and unit, and with perf 7.2 where its threshold
/// puts it (`good`, `bad`) when it has one and a value to compare.
fn json_metric(m: &Metric, version: PerfVersion) -> Vec<String> {
    let mut parts = vec![
        format!("\"metric-value\" : \"{}\"", metric::c_fixed(m.value, 6)),
        format!("\"metric-unit\" : {}", json_quote(&m.unit)),
    ];
    if let Some(t) = m.threshold.filter(|_| version != PerfVersion::V6_12) {
        parts.push(format!("\"metric-threshold\" : \"{t}\""));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, type_: u32, config: u64) -> Event {
        Event::plain(name, type_, config)
    }

    fn events() -> Vec<Event> {
        vec![ev("task-clock", 1, 1), ev("cs", 1, 3), ev("cycles", 0, 0)]
    }

    fn counted(event: usize, counter: u64, run: u64, cg: Option<&str>, cpu: Option<u32>) -> Line {
        Line {
            event,
            cgroup: cg.map(str::to_string),
            container: None,
            cpu,
            place: None,
            value: Value::Counted(Reading {
                counter,
                enabled: 1_000_000_000,
                running: run,
            }),
        }
    }

    fn lines(cg: Option<&str>) -> Vec<Line> {
        vec![
            counted(0, 1_013_750_000, 1_000_000_000, cg, None),
            counted(1, 75_000, 1_000_000_000, cg, None),
            Line {
                event: 2,
                cgroup: cg.map(str::to_string),
                container: None,
                cpu: None,
                place: None,
                value: Value::NotSupported,
            },
        ]
    }

    fn opts(format: Format) -> Options {
        Options {
            format,
            thousands: Some(",".into()),
            interval: None,
            per_cpu: false,
            aggr: None,
            per_thread: false,
            target: None,
            summary: false,
            csv_summary_prefix: true,
            null_run: false,
            interval_clear: false,
            runs: 1,
            no_scale: false,
            verbose: false,
            run_table: Vec::new(),
            metrics: Vec::new(),
            metric_only: false,
            quiet: false,
            cgroup_rows: false,
            forever: false,
            nmi_watchdog: false,
            extra_lines: Vec::new(),
            version: PerfVersion::V6_12,
            default_metrics: false,
            timed_targets: true,
        }
    }

    fn render(o: Options, f: impl FnOnce(&mut Report<Vec<u8>>)) -> String {
        let mut r = Report::new(o, Vec::new());
        f(&mut r);
        String::from_utf8(r.out).unwrap()
    }

    #[test]
    fn table_summary_system_wide() {
        let ev = events();
        let l = lines(None);
        let footer = Footer {
            elapsed: Duration::from_millis(500),
            elapsed_error: None,
            rusage: None,
        };
        let out = render(opts(Format::Table), |r| {
            r.summary(&ev, &l, &footer).unwrap()
        });
        let want = "
 Performance counter stats for 'system wide':

          1,013.75 msec task-clock                       #    2.027 CPUs utilized             
            75,000      cs                               #   73.983 K/sec                     
   <not supported>      cycles                                                                

       0.500000000 seconds time elapsed

";
        assert_eq!(out, want);
    }

    #[test]
    fn table_with_cgroups_workload_and_no_big_num() {
        let ev = events();
        let mut l = lines(Some("web"));
        l.push(Line {
            event: 0,
            cgroup: Some("db".into()),
            container: None,
            cpu: None,
            place: None,
            value: Value::Counted(Reading::default()),
        });
        let footer = Footer {
            elapsed: Duration::from_secs(1),
            elapsed_error: None,
            rusage: Some((Duration::from_millis(1), Duration::from_micros(1382))),
        };
        let mut o = opts(Format::Table);
        o.thousands = None;
        o.target = Some("'sleep 1'".into());
        let out = render(o, |r| r.summary(&ev, &l, &footer).unwrap());
        let want = "
 Performance counter stats for 'sleep 1':

           1013.75 msec task-clock                       web              #    1.014 CPUs utilized             
             75000      cs                               web              #   73.983 K/sec                     
   <not supported>      cycles                           web                                                   
     <not counted> msec task-clock                       db                                                    

       1.000000000 seconds time elapsed

       0.001000000 seconds user
       0.001382000 seconds sys


";
        assert_eq!(out, want);
    }

    #[test]
    fn multiplexed_counts_are_scaled_and_marked() {
        let ev = events();
        let l = vec![counted(1, 500, 500_000_000, None, None)];
        let out = render(opts(Format::Table), |r| {
            r.summary(&ev, &l, &Footer::default()).unwrap()
        });
        assert!(out.contains("             1,000      cs "), "{out}");
        assert!(out.contains("  (50.00%)"), "{out}");
    }

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

    #[test]
    fn per_cpu_table_and_header() {
        let ev = events();
        let l = vec![counted(0, 100_260_000, 1_000_000_000, None, Some(0))];
        let mut o = opts(Format::Table);
        o.interval = Some(Duration::from_millis(100));
        o.per_cpu = true;
        let out = render(o, |r| {
            r.interval(Duration::from_millis(100), &ev, &l).unwrap()
        });
        assert_eq!(
            out,
"#           time cpu                counts unit events\n     0.100000000 CPU0               100.26 msec task-clock                       #    1.003 CPUs utilized             \n"
        );
    }

    #[test]
    fn csv_fields_in_perfs_order() {
        let ev = events();
        let l = lines(Some("web"));
        let footer = Footer {
            elapsed: Duration::from_secs(1),
            elapsed_error: None,
            rusage: None,
        };
        let out = render(opts(Format::Csv(",".into())), |r| {
            r.summary(&ev, &l, &footer).unwrap()
        });
        assert_eq!(
            out,
            "1013.75,msec,task-clock,web,1000000000,100.00,1.014,CPUs utilized
75000,,cs,web,1000000000,100.00,73.983,K/sec
<not supported>,,cycles,web,0,100.00,,\n"
        );
        let l = vec![Line {
            cpu: Some(1),
            ..counted(1, 7, 1_000_000_000, None, None)
        }];
        let mut o = opts(Format::Csv(";".into()));
        o.interval = Some(Duration::from_secs(1));
        let out = render(o, |r| {
            r.interval(Duration::from_millis(1500), &ev, &l).unwrap()
        });
        assert_eq!(out, "1.500000000;CPU1;7;;cs;1000000000;100.00;;\n");
    }

    /// The summary, in `format`, of one line of container `name`'s cgroup.
    fn container_summary(name: &str, format: Format) -> String {
        let l = vec![Line {
            container: Some(name.into()),
            ..counted(1, 75_000, 1_000_000_000, Some("docker/3474383178be"), None)
        }];
        let footer = Footer {
            elapsed: Duration::from_secs(1),
            elapsed_error: None,
            rusage: None,
        };
        render(opts(format), |r| r.summary(&events(), &l, &footer).unwrap())
    }

    fn cgroup_summary(cgroup: &str, format: Format) -> String {
        let l = vec![counted(1, 75_000, 1_000_000_000, Some(cgroup), None)];
        let footer = Footer {
            elapsed: Duration::from_secs(1),
            elapsed_error: None,
            rusage: None,
        };
        render(opts(format), |r| r.summary(&events(), &l, &footer).unwrap())
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
    fn json_lines_with_perfs_keys() {
        let ev = events();
        let l = lines(Some("web"));
        let footer = Footer {
            elapsed: Duration::from_secs(1),
            elapsed_error: None,
            rusage: None,
        };
        let out = render(opts(Format::Json), |r| r.summary(&ev, &l, &footer).unwrap());
        let first = out.lines().next().unwrap();
        assert_eq!(
            first,
            r#"{"counter-value" : "1013.750000", "unit" : "msec", "event" : "task-clock", "cgroup" : "web", "event-runtime" : 1000000000, "pcnt-running" : 100.00, "metric-value" : "1.013750", "metric-unit" : "CPUs utilized"}"#
        );
        let last = out.lines().last().unwrap();
        assert_eq!(
            last,
            r#"{"counter-value" : "<not supported>", "unit" : "", "event" : "cycles", "cgroup" : "web", "event-runtime" : 0, "pcnt-running" : 100.00, "metric-value" : "0.000000", "metric-unit" : ""}"#
        );
        let mut o = opts(Format::Json);
        o.interval = Some(Duration::from_secs(1));
        let l = vec![counted(1, 7, 1_000_000_000, None, Some(0))];
        let out = render(o, |r| r.interval(Duration::from_secs(2), &ev, &l).unwrap());
        assert!(
            out.starts_with(
                r#"{"interval" : 2.000000000, "cpu" : "0", "counter-value" : "7.000000""#
            ),
            "{out}"
        );
        for line in out.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v.is_object());
        }
    }

    fn named(names: &str, events: &[usize]) -> Vec<Use> {
        crate::metrics::parse_list(names)
            .unwrap()
            .into_iter()
            .map(|def| Use {
                def,
                shown_on: events[0],
                events: events.to_vec(),
            })
            .collect()
    }

    fn half_second() -> Footer {
        Footer {
            elapsed: Duration::from_millis(500),
            ..Footer::default()
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

    #[test]
    fn metric_only_lines() {
        let (ev, l, footer) = (events(), lines(None), half_second());
        let mut o = opts(Format::Table);
        o.metric_only = true;
        o.metrics = named("CPUs_utilized", &[0]);
        let out = render(o.clone(), |r| r.summary(&ev, &l, &footer).unwrap());
        let want: Vec<&str> = out.lines().skip(3).take(2).collect();
        // The /sec and CPUs utilized metrics perf adds are left out; cycles did not
        // count, which leaves an empty column.
        assert_eq!(
            want,
            [
                "  CPUs  CPUs_utilized ",
                "                 2.0                      ",
            ]
        );
        o.format = Format::Csv(";".into());
        let out = render(o.clone(), |r| r.summary(&ev, &l, &footer).unwrap());
        assert_eq!(out, "CPUs  CPUs_utilized;\n2.0;;\n");
        o.format = Format::Json;
        let out = render(o, |r| r.summary(&ev, &l, &footer).unwrap());
        assert_eq!(out, "{\"CPUs  CPUs_utilized\" : \"2.0\"}\n");
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

    #[test]
    fn thousands() {
        assert_eq!(group_thousands("1234567.89"), "1,234,567.89");
        assert_eq!(group_thousands("123"), "123");
        assert_eq!(group_thousands("1234"), "1,234");
        assert_eq!(group_thousands("-1234"), "-1,234");
        assert_eq!(group_thousands("0.50"), "0.50");
    }
}
