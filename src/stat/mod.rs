//! `bperf stat`: options (settled by rules) -> plan (session::plan, with perf's checks
//! between its steps) -> runs (repeats, each a run) -> report (output). perf's
//! `stat record` and `stat report` are in record.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::StatArgs;
use crate::output::{runq, Format, Options, Report};
use crate::session::plan::{self, PlanEvents};
use crate::session::{forward_signals, Plan};
use crate::sys;
use crate::UsageError;
use record::{write_record, PipeRecord, RecordTo};
use repeats::{print_runs, Done, Runs};
use rules::Settled;

mod bpf_prog;
mod lines;
mod record;
mod repeats;
mod rules;
mod run;
mod tool;

pub use record::report;

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

/// The plan of the settled options `a`, with perf's refusals in perf's order between
/// its steps, then bperf's own.
fn plan_of(a: &Settled) -> Result<Plan> {
    rules::check_targets(a)?;
    let req = a.request()?;
    let machine = plan::System::new();
    let events = PlanEvents::of_lists(&req, &a.lists, &machine)?;
    rules::check_unavailable(a)?;
    rules::check_cgroups(a)?;
    let plan = Plan::resolve(&req, events, &machine)?;
    plan.warnings.iter().for_each(|w| eprintln!("{w}"));
    rules::check_timing(a)?;
    rules::check_own_limits(a)?;
    crate::session::runq::check(&plan, a.culprits.is_some())?;
    Ok(plan)
}

/// Runs `bperf stat`; returns the process exit code.
pub fn run(a: &StatArgs, record: bool) -> Result<i32> {
    let a = &rules::settle(a, record)?;
    let (mut out, output) = open_output(a)?;
    // As perf: recording to a pipe prints no counts (standard output is the record).
    if a.recording == Some(RecordTo::Pipe) {
        out = Box::new(io::sink());
    }
    rules::check_after_output(a)?;
    let format = Format::of(a.field_separator.as_deref(), a.json)?;
    if let Some(list) = &a.bpf_prog {
        return bpf_prog::run(a, list, format, (out, output));
    }
    if let Some(what) = a.overridden {
        eprintln!("PID/TID switch overriding {what}");
    }
    if a.verbose.level > 0 && a.events.list.is_empty() && a.metrics.is_empty() && !a.null_run {
        // perf looks its tables up as it adds its default events.
        rules::say_cpuid();
    }
    let mut plan = plan_of(a)?;
    let options = report_options(a, &plan, format);
    if a.verbose.level > 0 && a.control.is_none() {
        eprintln!("Control descriptor is not initialized");
    }
    let (tx, wakes) = mpsc::channel();
    forward_signals(tx.clone())?;
    let ack = match &a.control {
        Some(spec) => run::forward_control(spec, tx.clone())?,
        None => None,
    };
    let mut runs = Runs {
        report: Report::new(options, out),
        output,
        wakes,
        tx,
        ack,
        record: a.recording.is_some(),
        pipe: (a.recording == Some(RecordTo::Pipe)).then(PipeRecord::default),
    };
    let measured = match repeats::repeat(a, &mut plan, &mut runs)? {
        Done::Runs(measured) => measured,
        Done::Stopped(code) => return Ok(code),
    };
    if a.table {
        runs.report.opts.run_table = measured.iter().map(|r| r.elapsed).collect();
    }
    if let Some(last) = measured.last() {
        let format = &runs.report.opts.format;
        runs.report.opts.extra_lines = runq::lines(&last.culprits, format, None);
    }
    let code = print_runs(&plan, &mut runs.report, &runs.output, &measured)?;
    match (&a.recording, measured.last(), &mut runs.pipe) {
        (Some(RecordTo::File(path)), Some(run), _) => {
            if let Some(given_up) = write_record(path, &plan, run, a, &runs.wakes)? {
                return Ok(given_up);
            }
        }
        (Some(RecordTo::Pipe), Some(run), Some(pipe)) => pipe.finish(&plan, a, run)?,
        _ => {}
    }
    Ok(code)
}

/// Where the report goes: the -o file (named in errors) or stderr.
fn open_output(a: &Settled) -> Result<(Box<dyn Write>, String)> {
    use std::io::IsTerminal;
    // --quiet: no -o file (the report prints no counts), and -v's lines on stderr, as
    // perf's.
    if a.quiet {
        return Ok((Box::new(io::BufWriter::new(io::stderr())), "stderr".into()));
    }
    // As perf: the clearing is for a terminal, and perf says so once the file is open.
    let clear_refused = || anyhow::anyhow!("--interval-clear does not work with output");
    if let Some(fd) = a.log_fd {
        let file = sys::file_from_fd(fd).with_context(|| format!("--log-fd {fd}"))?;
        if a.interval_clear && !file.is_terminal() {
            return Err(clear_refused());
        }
        return Ok((Box::new(io::BufWriter::new(file)), format!("fd {fd}")));
    }
    let Some(path) = &a.output else {
        if a.interval_clear && !io::stderr().is_terminal() {
            return Err(clear_refused());
        }
        return Ok((Box::new(io::BufWriter::new(io::stderr())), "stderr".into()));
    };
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(a.append)
        .truncate(!a.append)
        .open(path)
        .with_context(|| format!("cannot open output file {}", path.display()))?;
    let name = path.display().to_string();
    // Buffered: the report flushes once per interval and at the end, not once per line.
    let mut out = io::BufWriter::new(file);
    // As perf, when the file is not JSON: when counting started.
    if !a.json {
        write!(out, "# started on {}\n\n", sys::ctime_now())
            .with_context(|| format!("cannot write to {name}"))?;
    }
    if a.interval_clear {
        out.flush()
            .with_context(|| format!("cannot write to {name}"))?;
        return Err(clear_refused());
    }
    Ok((Box::new(out), name))
}

fn report_options(a: &Settled, plan: &Plan, format: Format) -> Options {
    // As perf: thousands grouped as the locale groups them, unless told not to.
    let thousands = match a.no_big_num {
        true => None,
        false => sys::locale_thousands_separator(),
    };
    Options {
        format,
        thousands,
        interval: a.interval.map(Duration::from_millis),
        per_cpu: a.no_aggr,
        aggr: plan.aggr.as_ref().map(|(mode, _)| *mode),
        per_thread: a.per_thread,
        target: Some(plan.target.clone()),
        summary: a.summary,
        csv_summary_prefix: !a.no_csv_summary,
        null_run: a.null_run,
        interval_clear: a.interval_clear,
        runs: a.repeat.unwrap_or(1).max(0) as usize,
        no_scale: a.no_scale,
        verbose: a.verbose.level > 0,
        run_table: Vec::new(),
        metrics: plan.metrics.clone(),
        metric_only: a.metric_only,
        quiet: a.quiet,
        cgroup_rows: a.cgroups.all || a.cgroups.containers || !a.cgroups.for_each.is_empty(),
        nmi_watchdog: sys::nmi_watchdog(),
        extra_lines: Vec::new(),
        forever: false,
        version: a.perf_version.unwrap_or_default(),
        // perf 7.2 reads a command's duration_time after -D's delay only.
        timed_targets: !plan.task_mode || a.delay.is_some_and(|ms| ms > 0),
        // perf 7.2's default set: no events, metrics or null run asked for.
        default_metrics: a.perf_version == Some(crate::perf_version::PerfVersion::V7_2)
            && a.events.list.is_empty()
            && a.metrics.is_empty()
            && !a.null_run,
    }
}
