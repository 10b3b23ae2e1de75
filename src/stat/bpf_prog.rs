//! bperf stat -b / --bpf-prog: counting inside BPF programs for the command's duration,
//! until Ctrl-C, or with -I, printed as perf prints it, with each program's run count and
//! run time beside its events.
//!
//! Beyond perf's lines, each program gets a `runs` line: how many times it ran while
//! counted, with its mean run time as the metric (`# 1,234.56 ns per run`), then a line
//! per counted event with its count per run (`# 612.00 instructions per run`). With
//! several programs every line names its program in the cgroup column (`ID:name`).

use std::io::Write;
use std::mem::MaybeUninit;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::Signal;

use super::rules::Settled;
use crate::counter::bpf_prog::{ProgCounter, ProgCounts};
use crate::event::Event;
use crate::output::{Footer, Format, Line, Options, Report, Value};
use crate::reading::Reading;
use crate::session::plan::{self, PlanEvents};
use crate::session::{self, Next, Schedule, Wake};
use crate::sys::bpf_prog as progs;
use crate::sys::process::{self, Workload};
use crate::sys::{self, bpf_prog::RunStats};

/// Runs `bperf stat -b LIST`, its report going to `out` (stat's output, opened and
/// checked as for every stat): the whole session, printed; the exit status.
pub fn run(
    a: &Settled,
    list: &str,
    format: Format,
    (out, output): (Box<dyn Write>, String),
) -> Result<i32> {
    let specs = progs::parse_specs(list).map_err(|e| super::usage(format!("-b: {e}")))?;
    let targets = progs::find(&specs)?;
    let (events, uses) = events_of(a)?;
    if let Some(warning) = overridden_target(a) {
        eprintln!("{warning}");
    }
    let cpus = sys::online_cpus().context("reading online CPUs")?;
    let mut report = Report::new(options(a, list, format, uses), out);
    let (tx, wakes) = mpsc::channel::<Wake>();
    session::forward_signals(tx.clone())?;
    let workload = match a.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&a.command)?),
    };
    let mut storage: Vec<_> = targets.iter().map(|_| MaybeUninit::uninit()).collect();
    let multi = targets.len() > 1;
    let counter = ProgCounter::open(targets, &events, &cpus, a.verbose.level, &mut storage)?;
    for note in &counter.notes {
        eprintln!("{note}");
    }
    let start = Instant::now();
    let child = match workload.map(|w| w.start(move |st, ru| drop(tx.send(Wake::Exited(st, ru))))) {
        Some(Err(e)) => {
            eprintln!("Workload failed: {e}");
            return Ok(255);
        }
        Some(Ok(child)) => Some(child),
        None => None,
    };
    let session = ProgRun {
        a,
        counter: &counter,
        events: &events,
        multi,
        start,
        output: &output,
    };
    let code = session.count(&mut report, &wakes, child.as_ref())?;
    let elapsed = start.elapsed();
    let counts = counter.read()?;
    drop(counter);
    let footer = Footer {
        elapsed,
        // As perf: no user and system times, which are the command's, not the programs'.
        ..Footer::default()
    };
    report.opts.extra_lines = run_lines(&report.opts, &events, &counts, multi, None);
    let lines = event_lines(&events, &counts, multi);
    report
        .summary(&events, &lines, &footer)
        .with_context(|| format!("cannot write to {output}"))?;
    Ok(code)
}

/// What perf 6.12 says when -b overrides another target (the first that applies), as
/// its target__validate does; the programs are counted on every CPU all the same.
fn overridden_target(a: &Settled) -> Option<&'static str> {
    if a.cpus.list.is_some() {
        Some("BPF switch overriding CPU")
    } else if a.pid.is_some() || a.tid.is_some() {
        Some("BPF switch overriding PID/TID")
    } else if a.per_thread {
        Some("BPF switch overriding THREAD")
    } else {
        None
    }
}

/// A counting session over the programs: what its loop needs.
struct ProgRun<'a> {
    a: &'a Settled,
    counter: &'a ProgCounter<'a>,
    events: &'a [Event],
    multi: bool,
    start: Instant,
    output: &'a str,
}

impl ProgRun<'_> {
    /// Counts until the command ends, a signal, --timeout or -I's count: the exit status.
    fn count(
        &self,
        report: &mut Report<Box<dyn std::io::Write>>,
        wakes: &mpsc::Receiver<Wake>,
        child: Option<&process::Child>,
    ) -> Result<i32> {
        let (a, start) = (self.a, self.start);
        let mut schedule = Schedule::new(start, a.interval, a.interval_count, a.timeout);
        let mut prev: Option<Vec<ProgCounts>> = None;
        // Each interval's counts, printed; the last one when counting ends too, partial.
        let mut print_interval = |prev: &mut Option<Vec<ProgCounts>>| -> Result<()> {
            let now = self.counter.read()?;
            let delta = since(&now, prev.as_deref());
            print(report, self.events, &delta, self.multi, start.elapsed())
                .with_context(|| format!("cannot write to {}", self.output))?;
            *prev = Some(now);
            Ok(())
        };
        loop {
            let code = match schedule.wait(wakes) {
                Next::Tick => {
                    print_interval(&mut prev)?;
                    // As perf: no more intervals; a command runs to its end.
                    if schedule.ticked() && child.is_none() {
                        break Ok(0);
                    }
                    continue;
                }
                // As perf: the command gets SIGTERM and is waited for.
                Next::Timeout => match &child {
                    Some(c) => {
                        c.signal(Signal::TERM);
                        continue;
                    }
                    None => 0,
                },
                Next::Wake(Wake::Exited(st, _)) => process::exit_code(st),
                // The command is stopped too, and counting ends once it has exited.
                Next::Wake(Wake::Signal(_)) if child.is_some() => {
                    child.iter().for_each(|c| c.signal(Signal::TERM));
                    continue;
                }
                Next::Wake(Wake::Signal(sig)) => 128 + sig,
                // Nothing else is asked for: no -p/-t, --control or live cgroups here.
                Next::Wake(_) => continue,
            };
            if schedule.ticking() {
                print_interval(&mut prev)?;
            }
            break Ok(code);
        }
    }
}

/// The events asked for (perf's defaults without -e), counted on CPUs as -a's are.
fn events_of(a: &Settled) -> Result<(Vec<Event>, Vec<crate::metrics::Use>)> {
    let mut req = a.request()?;
    req.targets.all_cpus = true;
    let parsed = PlanEvents::of_lists(&req, &a.lists, &plan::System::new())?;
    Ok((parsed.events, parsed.metrics))
}

/// The report's options: perf's header names the programs as given.
fn options(a: &Settled, list: &str, format: Format, metrics: Vec<crate::metrics::Use>) -> Options {
    Options {
        format,
        thousands: match a.no_big_num {
            true => None,
            false => sys::locale_thousands_separator(),
        },
        interval: a.interval.map(Duration::from_millis),
        target: Some(format!("'BPF program(s) {list}'")),
        summary: a.summary,
        csv_summary_prefix: !a.no_csv_summary,
        runs: 1,
        no_scale: a.no_scale,
        metrics,
        quiet: a.quiet,
        version: a.perf_version.unwrap_or_default(),
        ..Options::default()
    }
}

/// One interval's counts: what each program counted since `prev`.
fn since(now: &[ProgCounts], prev: Option<&[ProgCounts]>) -> Vec<ProgCounts> {
    let Some(prev) = prev else {
        return now.to_vec();
    };
    now.iter()
        .zip(prev)
        .map(|(n, p)| ProgCounts {
            events: n
                .events
                .iter()
                .zip(&p.events)
                .map(|(n, p)| n.map(|n| n.since(&p.unwrap_or_default())))
                .collect(),
            runs: n.runs.since(&p.runs),
            ..n.clone()
        })
        .collect()
}

fn print(
    report: &mut Report<Box<dyn std::io::Write>>,
    events: &[Event],
    counts: &[ProgCounts],
    multi: bool,
    ts: Duration,
) -> std::io::Result<()> {
    report.opts.extra_lines = run_lines(&report.opts, events, counts, multi, Some(ts));
    let lines = event_lines(events, counts, multi);
    report.interval(ts, events, &lines)
}

/// The column that names the program, with several.
fn label(p: &ProgCounts, multi: bool) -> Option<String> {
    multi.then(|| format!("{}:{}", p.id, p.name))
}

/// Each program's event lines, in the output module's terms.
fn event_lines(events: &[Event], counts: &[ProgCounts], multi: bool) -> Vec<Line> {
    let mut lines = Vec::new();
    for p in counts {
        for (i, _) in events.iter().enumerate() {
            lines.push(Line {
                event: i,
                cgroup: label(p, multi),
                container: None,
                cpu: None,
                place: None,
                value: match p.events.get(i).copied().flatten() {
                    Some(r) => Value::Counted(r),
                    None => Value::NotSupported,
                },
            });
        }
    }
    lines
}

/// bperf's own lines: each program's runs with its time per run, and each counted
/// event per run, in the report's format.
fn run_lines(
    opts: &Options,
    events: &[Event],
    counts: &[ProgCounts],
    multi: bool,
    ts: Option<Duration>,
) -> Vec<String> {
    let mut out = Vec::new();
    if opts.quiet {
        return out;
    }
    for p in counts {
        let label = label(p, multi);
        let RunStats {
            run_cnt,
            run_time_ns,
        } = p.runs;
        let per_run = |x: f64| (run_cnt > 0).then(|| x / run_cnt as f64);
        let mut metrics = vec![(per_run(run_time_ns as f64), "ns per run".to_string())];
        for (ev, r) in events.iter().zip(&p.events) {
            if let Some(count) = r.as_ref().and_then(Reading::scaled) {
                metrics.push((per_run(count), per_run_unit(ev)));
            }
        }
        let line = RunsLine {
            ts,
            runs: run_cnt,
            run_time_ns,
            label: label.as_deref(),
            metrics: &metrics,
        };
        out.extend(match &opts.format {
            Format::Table => line.table(opts.thousands.as_deref()),
            Format::Csv(sep) => line.csv(sep),
            Format::Json => line.json(),
        });
    }
    out
}

/// What an event's count per run is: a clock's in ns, which its name does not say.
fn per_run_unit(ev: &Event) -> String {
    let clock = ev.attr.type_ == crate::event::TYPE_SOFTWARE && ev.attr.config <= 1;
    match clock && ev.tool.is_none() {
        true => format!("ns {} per run", ev.name),
        false => format!("{} per run", ev.name),
    }
}

/// One program's runs and what is worked out per run.
struct RunsLine<'a> {
    ts: Option<Duration>,
    runs: u64,
    run_time_ns: u64,
    label: Option<&'a str>,
    /// (value per run, unit); None when the program did not run.
    metrics: &'a [(Option<f64>, String)],
}

/// perf's table columns (output/table.rs): counts, event name, cgroup.
const COUNTS_LEN: usize = 18;
const EVNAME_LEN: usize = 32;
const CGROUP_LEN: usize = 16;

impl RunsLine<'_> {
    fn time(&self, table: bool) -> String {
        match (self.ts, table) {
            (Some(t), true) => format!("{:6}.{:09} ", t.as_secs(), t.subsec_nanos()),
            (Some(t), false) => format!("{}.{:09}", t.as_secs(), t.subsec_nanos()),
            (None, _) => String::new(),
        }
    }

    fn table(&self, thousands: Option<&str>) -> Vec<String> {
        let time = self.time(true);
        let count = group_thousands(self.runs, thousands);
        let mut first = format!("{time}{count:>COUNTS_LEN$}      {:<EVNAME_LEN$}", "runs");
        if let Some(l) = self.label {
            first.push_str(&format!(" {l:<CGROUP_LEN$}"));
        }
        let lead = first.len() - time.len();
        let metric = |(v, unit): &(Option<f64>, String)| {
            v.map(|v| format!(" # {} {unit}", group_float(v, thousands)))
        };
        let mut lines = Vec::new();
        let mut shown = self.metrics.iter().filter_map(metric);
        if let Some(m) = shown.next() {
            first.push_str(&m);
        }
        lines.push(first);
        for m in shown {
            lines.push(format!("{time}{:lead$}{m}", ""));
        }
        lines
    }

    fn csv(&self, sep: &str) -> Vec<String> {
        let time: Vec<String> = self.ts.map(|_| self.time(false)).into_iter().collect();
        let label: Vec<String> = self.label.map(str::to_string).into_iter().collect();
        let metric = |m: &(Option<f64>, String)| {
            m.0.map(|v| [format!("{v:.2}"), m.1.clone()])
                .unwrap_or_default()
        };
        let mut cols = time.clone();
        cols.extend([self.runs.to_string(), String::new(), "runs".into()]);
        cols.extend(label.iter().cloned());
        cols.extend([self.run_time_ns.to_string(), "100.00".into()]);
        cols.extend(metric(&self.metrics[0]));
        let mut lines = vec![cols.join(sep)];
        for m in self.metrics[1..].iter().filter(|m| m.0.is_some()) {
            let mut more = time.clone();
            more.extend(std::iter::repeat_n(String::new(), 5 + label.len()));
            more.extend(metric(m));
            lines.push(more.join(sep));
        }
        lines
    }

    fn json(&self) -> Vec<String> {
        let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
        let lead: Vec<String> = self
            .ts
            .map(|_| format!("\"interval\" : {}", self.time(false)))
            .into_iter()
            .collect();
        let metric = |m: &(Option<f64>, String)| {
            [
                format!("\"metric-value\" : \"{:.6}\"", m.0.unwrap_or(0.0)),
                format!("\"metric-unit\" : {}", q(&m.1)),
            ]
        };
        let mut parts = lead.clone();
        parts.push(format!("\"counter-value\" : \"{}.000000\"", self.runs));
        parts.push("\"unit\" : \"\"".into());
        parts.push("\"event\" : \"runs\"".into());
        if let Some(l) = self.label {
            parts.push(format!("\"cgroup\" : {}", q(l)));
        }
        parts.push(format!("\"event-runtime\" : {}", self.run_time_ns));
        parts.push("\"pcnt-running\" : 100.00".into());
        parts.extend(metric(&self.metrics[0]));
        let mut lines = vec![format!("{{{}}}", parts.join(", "))];
        for m in self.metrics[1..].iter().filter(|m| m.0.is_some()) {
            let mut more = lead.clone();
            more.extend(metric(m));
            lines.push(format!("{{{}}}", more.join(", ")));
        }
        lines
    }
}

fn group_digits(digits: &str, sep: Option<&str>) -> String {
    let Some(sep) = sep else {
        return digits.to_string();
    };
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push_str(sep);
        }
        out.push(c);
    }
    out
}

fn group_thousands(n: u64, sep: Option<&str>) -> String {
    group_digits(&n.to_string(), sep)
}

/// `v` with two decimals, its integer part grouped, right-aligned in 11 columns.
fn group_float(v: f64, sep: Option<&str>) -> String {
    let s = format!("{v:.2}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, "00"));
    format!("{:>11}", format!("{}.{frac}", group_digits(int, sep)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(metrics: &'a [(Option<f64>, String)], label: Option<&'a str>) -> RunsLine<'a> {
        RunsLine {
            ts: None,
            runs: 1234,
            run_time_ns: 2_000_000,
            label,
            metrics,
        }
    }

    #[test]
    fn runs_line_in_each_format() {
        let m = vec![
            (Some(1620.75), "ns per run".to_string()),
            (Some(600.0), "instructions per run".to_string()),
        ];
        let t = line(&m, None).table(Some(","));
        assert_eq!(
            t[0],
            "             1,234      runs                             #    1,620.75 ns per run"
        );
        assert_eq!(
            t[1],
            format!("{:56} #      600.00 instructions per run", "")
        );
        assert_eq!(
            line(&m, Some("7:prog")).csv(";"),
            [
                "1234;;runs;7:prog;2000000;100.00;1620.75;ns per run",
                ";;;;;;600.00;instructions per run"
            ]
        );
        let j = line(&m[..1], None).json();
        let v: serde_json::Value = serde_json::from_str(&j[0]).unwrap();
        assert_eq!(v["event"], "runs");
        assert_eq!(v["metric-unit"], "ns per run");
    }

    #[test]
    fn a_program_that_did_not_run_has_no_time_per_run() {
        let m = vec![(None, "ns per run".to_string())];
        let t = line(&m, None).table(None);
        assert_eq!(t.len(), 1);
        assert!(t[0].trim_end().ends_with("runs"), "{}", t[0]);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(1234567, Some(",")), "1,234,567");
        assert_eq!(group_thousands(123, Some(",")), "123");
        assert_eq!(group_thousands(1234, None), "1234");
        assert_eq!(group_float(1234.5, Some(".")).trim(), "1.234.50");
    }
}
