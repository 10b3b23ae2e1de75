//! A counting session: options -> (events, cgroups, CPUs) -> counter -> counts -> report.
//! Runs the workload, ticks intervals, handles Ctrl-C and SIGTERM.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cgroup::{Cgroup, Hierarchy};
use crate::cli::StatArgs;
use crate::counter::{Counter, Setup, Snapshot};
use crate::counts::{Line, Value};
use crate::event::{self, Event, Sysfs};
use crate::report::{Footer, Format, Options, Report};
use crate::workload::{self, Workload};
use crate::UsageError;

/// Everything a session counts, resolved from the options.
pub struct Plan {
    pub events: Vec<Event>,
    pub cpus: Vec<u32>,
    /// Monitored cgroups, one BPF slot each; empty when counting system-wide only.
    pub cgroups: Vec<Cgroup>,
    pub cgroup_v1: bool,
    /// Count only the workload and its children (perf's default without -a, -C or cgroups).
    pub task_mode: bool,
    /// What to print, in order: which event, for which slot.
    pub rows: Vec<Row>,
}

/// One output row before per-CPU expansion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub event: usize,
    /// Slot in the snapshot (0 when not per-cgroup).
    pub slot: usize,
    /// Cgroup column, when per-cgroup.
    pub cgroup: Option<String>,
}

pub const MIN_INTERVAL_MS: u64 = 10;

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

impl Plan {
    pub fn from_args(a: &StatArgs) -> Result<Plan> {
        if let Some(ms) = a.interval {
            if ms < MIN_INTERVAL_MS {
                return Err(usage(format!(
                    "print interval must be >= {MIN_INTERVAL_MS} ms (got -I {ms})"
                )));
            }
        }
        let list = if a.events.is_empty() {
            event::DEFAULT_EVENTS.to_string()
        } else {
            a.events.join(",")
        };
        let events =
            event::parse_events(&list, &Sysfs::system()).map_err(|e| usage(e.to_string()))?;
        if events.is_empty() {
            return Err(usage("no events to count".into()));
        }

        let online = crate::perf_event::online_cpus().context("reading online CPUs")?;
        let cpus = match &a.cpu {
            Some(list) => {
                let cpus = crate::cpus::parse_list(list).map_err(|e| usage(e.to_string()))?;
                if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
                    return Err(usage(format!("CPU {c} is not online (online: {online:?})")));
                }
                cpus
            }
            None => online,
        };

        let split = |v: &[String]| -> Vec<String> {
            v.iter()
                .flat_map(|s| s.split(','))
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        let per_cgroup = a.all_cgroups || !a.for_each_cgroup.is_empty();
        let mut cgroups = Vec::new();
        let mut cgroup_v1 = false;
        let mut rows = Vec::new();
        if per_cgroup || !a.cgroup.is_empty() {
            let h = Hierarchy::discover()?;
            cgroup_v1 = h.v1;
            if per_cgroup {
                let names = if a.all_cgroups {
                    h.all_names()?
                } else {
                    split(&a.for_each_cgroup)
                };
                cgroups = h.expand(&names)?;
                for (slot, cg) in cgroups.iter().enumerate() {
                    for e in 0..events.len() {
                        rows.push(Row {
                            event: e,
                            slot,
                            cgroup: Some(cg.name.clone()),
                        });
                    }
                }
            } else {
                // -G: the i-th event counts in the i-th cgroup; later events system-wide,
                // which is the root cgroup's count.
                let names = split(&a.cgroup);
                if names.len() > events.len() {
                    return Err(usage(format!(
                        "-G lists {} cgroups for {} events",
                        names.len(),
                        events.len()
                    )));
                }
                let slot_of = |name: &str, cgroups: &mut Vec<Cgroup>| -> Result<usize> {
                    let id = h.id_of(name)?;
                    Ok(match cgroups.iter().position(|c| c.id == id) {
                        Some(s) => s,
                        None => {
                            cgroups.push(Cgroup {
                                name: name.to_string(),
                                id,
                            });
                            cgroups.len() - 1
                        }
                    })
                };
                for e in 0..events.len() {
                    let (name, shown) = match names.get(e) {
                        Some(n) => (n.as_str(), Some(n.clone())),
                        None => ("/", None),
                    };
                    let slot = slot_of(name, &mut cgroups)?;
                    rows.push(Row {
                        event: e,
                        slot,
                        cgroup: shown,
                    });
                }
            }
        } else {
            rows = (0..events.len())
                .map(|e| Row {
                    event: e,
                    slot: 0,
                    cgroup: None,
                })
                .collect();
        }
        let system_wide = a.all_cpus || a.cpu.is_some() || a.no_aggr || !rows_are_plain(&rows);
        Ok(Plan {
            events,
            cpus,
            cgroups,
            cgroup_v1,
            task_mode: !system_wide && !a.command.is_empty(),
            rows,
        })
    }

    /// The report's lines for a snapshot, in perf's order (row, then CPU with -A).
    pub fn lines(
        &self,
        snap: &Snapshot,
        supported: &dyn Fn(usize) -> bool,
        per_cpu: bool,
    ) -> Vec<Line> {
        let mut out = Vec::new();
        for row in &self.rows {
            let value = |r| {
                if supported(row.event) {
                    Value::Counted(r)
                } else {
                    Value::NotSupported
                }
            };
            if per_cpu {
                for (pos, &cpu) in self.cpus.iter().enumerate() {
                    out.push(Line {
                        event: row.event,
                        cgroup: row.cgroup.clone(),
                        cpu: Some(cpu),
                        value: value(snap.get(row.slot, row.event, pos)),
                    });
                }
            } else {
                out.push(Line {
                    event: row.event,
                    cgroup: row.cgroup.clone(),
                    cpu: None,
                    value: value(snap.total(row.slot, row.event)),
                });
            }
        }
        out
    }
}

fn rows_are_plain(rows: &[Row]) -> bool {
    rows.iter().all(|r| r.cgroup.is_none() && r.slot == 0)
}

/// What ends or interrupts the wait between reads.
enum Wake {
    Exited(ExitStatus, libc::rusage),
    Signal,
}

/// Runs `bperf stat`; returns the process exit code.
/// One flush-and-read of every counter; with -v, says how long it took (the benchmark
/// reads this line).
fn timed_read(counter: &mut Counter, verbose: u8, plan: &Plan) -> Result<Snapshot> {
    let t = Instant::now();
    let snap = counter.read()?;
    if verbose > 0 {
        eprintln!(
            "bperf: flush+read of {} cgroups x {} events took {} us",
            plan.cgroups.len(),
            plan.events.len(),
            t.elapsed().as_micros()
        );
    }
    Ok(snap)
}

pub fn run(a: &StatArgs) -> Result<i32> {
    let plan = Plan::from_args(a)?;
    if a.field_separator.as_deref() == Some("") {
        return Err(usage("-x needs a separator".into()));
    }
    // Buffered: the report flushes once per interval and at the end, not once per line.
    let out: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(io::BufWriter::new(
            OpenOptions::new()
                .create(true)
                .write(true)
                .append(a.append)
                .truncate(!a.append)
                .open(path)
                .with_context(|| format!("cannot open output file {}", path.display()))?,
        )),
        None => Box::new(io::BufWriter::new(io::stderr())),
    };
    let format = if a.json {
        Format::Json
    } else if let Some(sep) = &a.field_separator {
        Format::Csv(sep.clone())
    } else {
        Format::Table
    };
    let interval = a.interval.map(Duration::from_millis);
    let mut report = Report::new(
        Options {
            format,
            big_num: !a.no_big_num,
            interval,
            per_cpu: a.no_aggr,
            target: plan.task_mode.then(|| a.command.join(" ")),
        },
        out,
    );

    let (tx, rx) = mpsc::channel();
    {
        let tx = tx.clone();
        ctrlc::set_handler(move || {
            let _ = tx.send(Wake::Signal);
        })
        .context("installing the Ctrl-C handler")?;
    }

    // The workload is forked first and held before exec, so that a task counter can be
    // attached to it and every counter sees it from its first instruction.
    let workload = match a.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&a.command)?),
    };
    let ids: Vec<u64> = plan.cgroups.iter().map(|c| c.id).collect();
    let mut storage = MaybeUninit::uninit();
    let mut counter = Counter::open(
        &Setup {
            events: &plan.events,
            cpus: &plan.cpus,
            task: workload
                .as_ref()
                .filter(|_| plan.task_mode)
                .map(Workload::pid),
            cgroups: &ids,
            cgroup_v1: plan.cgroup_v1,
            verbose: a.verbose,
        },
        &mut storage,
    )?;
    let start = Instant::now();

    let mut child_pid = None;
    if let Some(w) = workload {
        match w.start() {
            Ok(pid) => {
                child_pid = Some(pid);
                let tx = tx.clone();
                std::thread::spawn(move || {
                    if let Some((st, ru)) = workload::wait4(pid) {
                        let _ = tx.send(Wake::Exited(st, ru));
                    }
                });
            }
            Err(e) => {
                eprintln!("Workload failed: {e}");
                return Ok(255);
            }
        }
    }
    drop(tx);

    let mut exit = None;
    let mut prev = Snapshot::new(plan.cgroups.len(), plan.events.len(), plan.cpus.len());
    let mut ticks = 0u64;
    let mut next_tick = interval.map(|i| start + i);
    loop {
        let wake = match next_tick {
            Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
                Ok(w) => Some(w),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => Some(Wake::Signal),
            },
            None => Some(rx.recv().unwrap_or(Wake::Signal)),
        };
        let done = match wake {
            None => false,
            Some(Wake::Exited(st, ru)) => {
                exit = Some((st, ru));
                true
            }
            Some(Wake::Signal) => {
                // Stop the workload too (after Ctrl-C it has usually had SIGINT already);
                // the summary follows once it has exited.
                if let Some(pid) = child_pid {
                    // SAFETY: plain kill(2) of our own child.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
                child_pid.is_none()
            }
        };
        if let Some(i) = interval {
            if wake.is_none() || done {
                let now = timed_read(&mut counter, a.verbose, &plan)?;
                let lines = plan.lines(&now.since(&prev), &|e| counter.supported(e), a.no_aggr);
                report.interval(start.elapsed(), &plan.events, &lines)?;
                prev = now;
                ticks += 1;
                next_tick = next_tick.map(|t| t + i);
                if a.interval_count.is_some_and(|n| ticks >= n) && !done {
                    // Like perf: the count is reached, so the workload is told to stop.
                    if let Some(pid) = child_pid {
                        // SAFETY: plain kill(2) of our own child.
                        unsafe { libc::kill(pid, libc::SIGTERM) };
                        if let Ok(Wake::Exited(st, ru)) = rx.recv() {
                            exit = Some((st, ru));
                        }
                    }
                    break;
                }
            }
        }
        if done {
            break;
        }
    }
    let elapsed = start.elapsed();
    let total = timed_read(&mut counter, a.verbose, &plan)?;
    let lines = plan.lines(&total, &|e| counter.supported(e), a.no_aggr);
    drop(counter);
    let rusage = exit.as_ref().map(|(_, ru)| {
        (
            workload::timeval(ru.ru_utime),
            workload::timeval(ru.ru_stime),
        )
    });
    report.summary(&plan.events, &lines, &Footer { elapsed, rusage })?;
    report.out.flush()?;

    Ok(match exit {
        Some((st, _)) => st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)),
        None => 0,
    })
}
