//! Repeats (-r): the command run N times, or again and again until interrupted (-r 0),
//! with --pre and --post around each run; the mean of each count over the runs, and
//! its noise, as perf prints them.

use std::fs::File;
use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::record::PipeRecord;
use super::rules::Settled;
use super::run::{run_once, Ended, Measured, RunIo};
use crate::output::{Footer, Line, Report, Value};
use crate::reading::Reading;
use crate::session::{Plan, Wake};
use crate::sys::{self, process};

/// What every run takes its wakes from and prints to.
pub(super) struct Runs {
    pub(super) report: Report<Box<dyn Write>>,
    /// The output's name, for errors.
    pub(super) output: String,
    pub(super) wakes: mpsc::Receiver<Wake>,
    pub(super) tx: mpsc::Sender<Wake>,
    /// --control's acknowledgements.
    pub(super) ack: Option<File>,
    /// stat record: each interval's lines are kept for the file.
    pub(super) record: bool,
    /// stat record to a pipe: where each interval's lines go.
    pub(super) pipe: Option<PipeRecord>,
}

/// How the runs went.
pub(super) enum Done {
    /// Every run asked for, or those before a signal: their counts, to print.
    Runs(Vec<Measured>),
    /// bperf ends with this status, nothing more to print: a --pre or --post command
    /// failed, the command could not be run, or -r 0 was interrupted.
    Stopped(i32),
}

/// Runs the command as -r says (once without it), printing each run's counts with -r 0.
pub(super) fn repeat(a: &Settled, plan: &mut Plan, r: &mut Runs) -> Result<Done> {
    let mut runs = Vec::new();
    // -r 0: run again and print each run's counts until interrupted, as perf.
    let forever = a.repeat == Some(0);
    r.report.opts.forever = forever;
    let mut run = 0;
    while forever || run < a.repeat.unwrap_or(1) {
        if a.verbose.level > 0 && a.repeat.is_some_and(|r| r > 1) {
            // Flushed now: the run's own lines go straight to stderr after it.
            writeln!(
                r.report.out,
                "[ perf stat: executing run #{} ... ]",
                run + 1
            )
            .and_then(|()| r.report.out.flush())
            .with_context(|| format!("cannot write to {}", r.output))?;
        }
        if let Some(code) = shell_step(a.pre.as_deref())? {
            return Ok(Done::Stopped(code));
        }
        if a.sync {
            sys::sync();
        }
        let io = RunIo {
            ack: r.ack.as_mut(),
            wakes: &r.wakes,
            tx: &r.tx,
            report: &mut r.report,
            output: &r.output,
            record: r.record,
            pipe: r.pipe.as_mut(),
        };
        let Some(measured) = run_once(a, plan, io, run == 0)? else {
            return Ok(Done::Stopped(255));
        };
        let interrupted = measured.interrupted;
        if forever && interrupted {
            // The run cut short is not printed.
            return Ok(Done::Stopped(measured.ended.exit_code()));
        }
        runs.push(measured);
        if forever {
            print_runs(plan, &mut r.report, &r.output, &runs)?;
            runs.clear();
        }
        if let Some(code) = shell_step(a.post.as_deref())? {
            return Ok(Done::Stopped(code));
        }
        if interrupted {
            break;
        }
        run += 1;
    }
    Ok(Done::Runs(runs))
}

/// Runs --pre's or --post's command, if any; its status when it failed, which ends
/// bperf as it ends perf.
fn shell_step(command: Option<&str>) -> Result<Option<i32>> {
    let Some(command) = command else {
        return Ok(None);
    };
    let code = sys::shell(command).with_context(|| format!("cannot run '{command}'"))?;
    Ok((code != 0).then_some(code))
}

/// The mean of `xs` and its standard error in % of it (0 for one value or a mean of 0),
/// as perf's stats compute them.
fn mean_and_noise(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 || mean == 0.0 {
        return (mean, 0.0);
    }
    let variance = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 100.0 * (variance / n).sqrt() / mean)
}

/// The mean of each line over the runs, and its noise in %. As perf's, the mean count
/// goes with the last run's enabled and running times: a last run that did not count
/// makes the line `<not counted>`.
fn mean_lines(runs: &[Measured]) -> (Vec<Line>, Vec<f64>) {
    let first = &runs[0].lines;
    let mut noise = Vec::with_capacity(first.len());
    let lines = first
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let readings: Vec<Reading> = runs
                .iter()
                .filter_map(|r| match r.lines[i].value {
                    Value::Counted(r) => Some(r),
                    Value::NotSupported => None,
                })
                .collect();
            let scaled: Vec<f64> = readings.iter().map(|r| r.scaled().unwrap_or(0.0)).collect();
            let value = match readings.is_empty() {
                true => Value::NotSupported,
                false => {
                    let mean = |f: fn(&Reading) -> u64| {
                        mean_and_noise(&readings.iter().map(|r| f(r) as f64).collect::<Vec<_>>()).0
                            as u64
                    };
                    let last = readings[readings.len() - 1];
                    Value::Counted(match last.scaled() {
                        None => last,
                        Some(_) => Reading {
                            counter: mean(|r| r.counter),
                            ..last
                        },
                    })
                }
            };
            noise.push(if scaled.is_empty() {
                0.0
            } else {
                mean_and_noise(&scaled).1
            });
            Line {
                value,
                ..line.clone()
            }
        })
        .collect();
    (lines, noise)
}

/// Prints the summary of the runs; returns bperf's exit code.
pub(super) fn print_runs(
    plan: &Plan,
    report: &mut Report<Box<dyn Write>>,
    output: &str,
    runs: &[Measured],
) -> Result<i32> {
    let last = runs.last().expect("at least one run");
    let written = if runs.len() == 1 {
        // As perf: user and system time only for a command counted on its own.
        let rusage = match &last.ended {
            Ended::Command(_, ru) if plan.task_mode && !report.opts.forever => {
                Some((process::timeval(ru.ru_utime), process::timeval(ru.ru_stime)))
            }
            _ => None,
        };
        let footer = Footer {
            elapsed: last.elapsed,
            elapsed_error: None,
            rusage,
        };
        report.summary(&plan.events, &last.lines, &footer)
    } else {
        report.opts.runs = runs.len();
        let secs: Vec<f64> = runs.iter().map(|r| r.elapsed.as_secs_f64()).collect();
        let (mean, pct) = mean_and_noise(&secs);
        let footer = Footer {
            elapsed: Duration::from_secs_f64(mean),
            elapsed_error: Some(Duration::from_secs_f64(mean * pct / 100.0)),
            rusage: None,
        };
        let (lines, noise) = mean_lines(runs);
        report.summary_of_runs(&plan.events, &lines, &noise, &footer)
    };
    written
        .and_then(|_| report.out.flush())
        .with_context(|| format!("cannot write to {output}"))?;
    Ok(last.ended.exit_code())
}
