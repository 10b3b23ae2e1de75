//! perf stat record and perf stat report: the counts of a run written to a perf.data
//! file as perf writes them, and such a file, perf's or bperf's, printed again.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::rules::Settled;
use super::run::Measured;
use super::usage;
use crate::aggr;
use crate::cli::{StatArgs, StatReportArgs};
use crate::event::{self, Event};
use crate::output::{Footer, Line, Options, Place, Report, Value};
use crate::reading::Reading;
use crate::session::Plan;
use crate::sys::topology;
use crate::sys::{self, sysfs::Sysfs};

/// Where stat record writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RecordTo {
    /// A perf.data file.
    File(std::path::PathBuf),
    /// Standard output, in perf's pipe format: `-o -`, or no -o when standard output
    /// is a pipe (as perf). Nothing else is printed then.
    Pipe,
}

/// Where stat record writes (-o, perf.data without it), once its options are checked:
/// counts summed over CPUs or per CPU (-A), of the whole run and with -I of each
/// interval.
pub(super) fn record_to(a: &StatArgs) -> Result<RecordTo> {
    if a.repeat.is_some_and(|r| r != 1) {
        bail!("Cannot use -r option with perf stat record.");
    }
    let refused = [
        (
            !matches!(
                a.aggr_mode()?,
                None | Some(
                    aggr::Mode::Socket | aggr::Mode::Die | aggr::Mode::Core | aggr::Mode::Node
                )
            ),
            "--per-cluster or --per-cache",
        ),
        (a.per_thread, "--per-thread"),
    ];
    if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
        return Err(usage(format!(
            "stat record writes counts summed, per CPU, socket, die, core or node; not {what} yet"
        )));
    }
    let stdout_is_pipe = || {
        rustix::fs::fstat(io::stdout()).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
        })
    };
    Ok(match &a.output {
        Some(path) if path.as_os_str() == crate::data_file::STDOUT => RecordTo::Pipe,
        Some(path) => RecordTo::File(path.clone()),
        None if stdout_is_pipe() => RecordTo::Pipe,
        None => RecordTo::File("perf.data".into()),
    })
}

/// The id the first event's counts are recorded under.
const FIRST_RECORD_ID: u64 = 1;

/// The rows a run's counts are recorded as: one recorded event per printed row (per
/// cgroup, as perf records an event it counts in several cgroups; its report prints
/// them without their cgroups), each under an id of its own.
struct RecordedRows(Vec<(usize, Option<String>)>);

impl RecordedRows {
    fn of(plan: &Plan) -> RecordedRows {
        RecordedRows(
            plan.series
                .iter()
                .map(|r| (r.event, r.cgroup.clone()))
                .collect(),
        )
    }

    /// The id of a line's row; none for a row that is not recorded.
    fn id(&self, l: &Line) -> Option<u64> {
        let row = self
            .0
            .iter()
            .position(|(event, cgroup)| *event == l.event && *cgroup == l.cgroup)?;
        Some(FIRST_RECORD_ID + row as u64)
    }

    /// The counts of some lines, as recorded: the counted ones of recorded rows.
    fn counts(&self, lines: &[Line]) -> Vec<crate::perfdata::StatCount> {
        lines
            .iter()
            .filter_map(|l| match (l.value, self.id(l)) {
                (Value::Counted(r), Some(id)) => Some(crate::perfdata::StatCount {
                    id,
                    cpu: l.cpu.map_or(-1, |c| c as i32),
                    thread: 0,
                    val: r.counter,
                    ena: r.enabled,
                    run: r.running,
                }),
                _ => None,
            })
            .collect()
    }

    /// What a recording says before its counts: command line, events, CPUs, modes.
    fn header(&self, plan: &Plan, a: &Settled) -> Result<crate::perfdata::StatFile> {
        use crate::perfdata::{RecordedEvent, StatFile};
        use crate::sys::perf_event::{recorded_attr, Scope};
        let target = match plan.task_mode {
            true => Scope::Task(0),
            false => Scope::Cpu(0),
        };
        let events = self.0.iter().enumerate().map(|(i, (event, _))| {
            let e = &plan.events[*event];
            RecordedEvent {
                name: e.name.clone(),
                attr: recorded_attr(&e.attr, target),
                ids: vec![FIRST_RECORD_ID + i as u64],
            }
        });
        let per_cpu = a.no_aggr || plan.aggr.is_some();
        Ok(StatFile {
            cmdline: recorded_cmdline(),
            events: events.collect(),
            // Counts summed over CPUs are recorded for "any CPU", as perf records a
            // task's.
            cpus: match per_cpu {
                true => plan.cpus.iter().map(|&c| c as i32).collect(),
                false => vec![-1],
            },
            aggr_mode: recorded_aggr_mode(a.no_aggr, plan.aggr.as_ref().map(|(m, _)| *m)),
            interval_ms: a.interval.unwrap_or(0),
            topology: per_cpu.then(recorded_topology).transpose()?,
            ..StatFile::default()
        })
    }
}

/// The counts of a whole run as recorded: per CPU for --per-socket and the like, which
/// perf's report groups itself.
fn run_counts(rows: &RecordedRows, plan: &Plan, run: &Measured) -> Vec<crate::perfdata::StatCount> {
    rows.counts(match plan.aggr {
        Some(_) => &run.cpu_lines,
        None => &run.lines,
    })
}

/// Writes the run's counts to a perf.data file as `perf stat record` writes them. A
/// FIFO waits for its reader until a signal comes (`wakes`): Some(bperf's exit status)
/// then, said.
pub(super) fn write_record(
    path: &std::path::Path,
    plan: &Plan,
    run: &Measured,
    a: &Settled,
    wakes: &std::sync::mpsc::Receiver<crate::session::Wake>,
) -> Result<Option<i32>> {
    use crate::perfdata::Round;
    let rows = RecordedRows::of(plan);
    let mut file = rows.header(plan, a)?;
    // With -I, each interval's counts as printed (what was counted in it), so that
    // perf stat report prints the same lines.
    file.rounds = run
        .intervals
        .iter()
        .map(|(ts, lines)| Round {
            time_ns: ts.as_nanos() as u64,
            counts: rows.counts(lines),
        })
        .collect();
    file.counts = run_counts(&rows, plan, run);
    file.elapsed_ns = run.elapsed.as_nanos() as u64;
    let mut out = match crate::session::create_output(path, wakes, drop)? {
        Ok(out) => out,
        Err(gave_up) => {
            eprintln!("bperf: {gave_up}");
            return Ok(Some(gave_up.status));
        }
    };
    out.write_all(&file.to_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(None)
}

/// stat record to a pipe: perf's pipe records written as counting goes, each
/// interval's round when it ends, so that a reader prints them as they come (and
/// nothing is held for a long run). The rows are those of the first interval: a
/// cgroup that appears later is not in the pipe, whose reader knows only the events
/// it was told of first.
#[derive(Default)]
pub(super) struct PipeRecord {
    rows: Option<RecordedRows>,
}

impl PipeRecord {
    /// Writes an interval's counts (and, first, what the pipe says before them).
    pub(super) fn interval(
        &mut self,
        plan: &Plan,
        a: &Settled,
        ts: Duration,
        lines: &[Line],
    ) -> Result<()> {
        use crate::perfdata::{round_bytes, Round, RoundKind};
        let rows = self.start(plan, a)?;
        let round = Round {
            time_ns: ts.as_nanos() as u64,
            counts: rows.counts(lines),
        };
        write_stdout(&round_bytes(&round, RoundKind::Interval))
    }

    /// Ends the pipe: without -I, the counts of the whole run.
    pub(super) fn finish(&mut self, plan: &Plan, a: &Settled, run: &Measured) -> Result<()> {
        use crate::perfdata::{round_bytes, Round, RoundKind};
        let rows = self.start(plan, a)?;
        if a.interval.is_some() {
            return Ok(());
        }
        let round = Round {
            time_ns: run.elapsed.as_nanos() as u64,
            counts: run_counts(rows, plan, run),
        };
        write_stdout(&round_bytes(&round, RoundKind::Final))
    }

    /// The recorded rows, once what comes before the counts is written.
    fn start(&mut self, plan: &Plan, a: &Settled) -> Result<&RecordedRows> {
        if self.rows.is_none() {
            let rows = RecordedRows::of(plan);
            write_stdout(&rows.header(plan, a)?.pipe_header())?;
            self.rows = Some(rows);
        }
        self.rows.as_ref().context("no recorded rows")
    }
}

fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = io::stdout().lock();
    (out.write_all(bytes))
        .and_then(|_| out.flush())
        .context("cannot write to standard output")
}

/// perf's number for the aggregation mode a file records.
fn recorded_aggr_mode(per_cpu: bool, mode: Option<aggr::Mode>) -> u64 {
    use crate::perfdata::{AGGR_CORE, AGGR_DIE, AGGR_GLOBAL, AGGR_NODE, AGGR_NONE, AGGR_SOCKET};
    match (per_cpu, mode) {
        (true, _) => AGGR_NONE,
        (_, Some(aggr::Mode::Socket)) => AGGR_SOCKET,
        (_, Some(aggr::Mode::Die)) => AGGR_DIE,
        (_, Some(aggr::Mode::Core)) => AGGR_CORE,
        (_, Some(aggr::Mode::Node)) => AGGR_NODE,
        _ => AGGR_GLOBAL,
    }
}

/// Where each CPU is, for perf stat report to print counts per CPU.
fn recorded_topology() -> Result<crate::perfdata::Topology> {
    let online = sys::online_cpus().context("reading online CPUs")?;
    let highest = online.iter().copied().max().unwrap_or(0);
    let all: Vec<u32> = (0..=highest).collect();
    let places = topology::read(&topology::system_root(), &all);
    let cpus = places
        .iter()
        .map(|t| (t.socket as i32, t.die as i32, t.core as i32))
        .collect();
    let mut node_ids: Vec<i64> = places.iter().map(|t| t.node).collect();
    node_ids.sort_unstable();
    node_ids.dedup();
    let nodes = node_ids
        .into_iter()
        .map(|node| {
            let (total, free) = topology::node_memory_kb(node);
            crate::perfdata::Node {
                node: node as u32,
                mem_total_kb: total,
                mem_free_kb: free,
                cpus: (0..=highest)
                    .filter(|&c| places[c as usize].node == node)
                    .collect(),
            }
        })
        .collect();
    Ok(crate::perfdata::Topology {
        online: online.len() as u32,
        cpus,
        nodes,
    })
}

/// The command line as perf records it: the program's path, then its arguments.
fn recorded_cmdline() -> Vec<String> {
    let exe = std::env::current_exe().map_or_else(|_| "bperf".into(), |p| p.display().to_string());
    std::iter::once(exe)
        .chain(std::env::args().skip(1))
        .collect()
}

/// `bperf stat report`: prints a stat record file's counts as perf stat report does,
/// on standard error, round by round as they are read (a pipe's intervals as they come).
pub fn report(a: &StatReportArgs) -> Result<i32> {
    use crate::perfdata::{RoundKind, StatReader, AGGR_NONE};
    let (name, input) = report_input(a.input.as_deref())?;
    let mut reader = StatReader::open(io::BufReader::new(input)).context(name.clone())?;
    let data = reader.file.clone();
    let sysfs = Sysfs::system();
    let events: Vec<Event> = data
        .events
        .iter()
        .map(|r| event::recorded(&r.name, &sysfs))
        .collect();
    let per_cpu = a.no_aggr || data.aggr_mode == AGGR_NONE;
    let groups = if per_cpu {
        None
    } else {
        recorded_groups(&data)
    };
    let version = crate::perf_version::PerfVersion::from_env()
        .map_err(|e| crate::UsageError(e.to_string()))?;
    let options = Options {
        version,
        thousands: sys::locale_thousands_separator(),
        per_cpu,
        aggr: groups.as_ref().map(|(mode, _)| *mode),
        // As perf: a pipe carries no command line.
        target: Some(match data.cmdline.is_empty() {
            true => "'pipe'".to_string(),
            false => format!("'{}'", data.cmdline.join(" ")),
        }),
        runs: 1,
        interval: (data.interval_ms > 0).then(|| Duration::from_millis(data.interval_ms)),
        ..Options::default()
    };
    let rows = Rows::new(&data, per_cpu || groups.is_some());
    let lines = |counts: &[crate::perfdata::StatCount]| match &groups {
        Some((mode, groups)) => recorded_group_lines(&rows, counts, *mode, groups),
        None => rows.lines(counts),
    };
    let mut report = Report::new(options, io::stderr().lock());
    // As perf: each interval's lines, or the counts of the whole run.
    while let Some((kind, round)) = reader.next_round().context(name.clone())? {
        let time = Duration::from_nanos(round.time_ns);
        match kind {
            RoundKind::Interval => report.interval(time, &events, &lines(&round.counts))?,
            RoundKind::Final => {
                let footer = Footer {
                    elapsed: time,
                    ..Footer::default()
                };
                report.summary(&events, &lines(&round.counts), &footer)?;
            }
        }
    }
    Ok(0)
}

/// What stat report reads, and its name for messages: -i FILE; standard input for
/// `-i -`, or without -i when it is a pipe (as perf); perf.data otherwise.
fn report_input(input: Option<&std::path::Path>) -> Result<(String, std::fs::File)> {
    use std::os::fd::AsFd;
    let stdin_is_pipe = || {
        rustix::fs::fstat(io::stdin()).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
        })
    };
    let path = match input {
        Some(p) if p.as_os_str() != "-" => p.to_path_buf(),
        None if !stdin_is_pipe() => "perf.data".into(),
        _ => {
            let fd = io::stdin().as_fd().try_clone_to_owned();
            let fd = fd.context("standard input")?;
            return Ok(("standard input".to_string(), std::fs::File::from(fd)));
        }
    };
    let file =
        std::fs::File::open(&path).with_context(|| format!("failed to open {}", path.display()))?;
    Ok((path.display().to_string(), file))
}

/// The mode and groups of CPUs of a file recorded --per-socket, --per-die, --per-core
/// or --per-node, from the topology it holds.
fn recorded_groups(data: &crate::perfdata::StatFile) -> Option<(aggr::Mode, Vec<aggr::Group>)> {
    use crate::perfdata::{AGGR_CORE, AGGR_DIE, AGGR_NODE, AGGR_SOCKET};
    let mode = match data.aggr_mode {
        AGGR_SOCKET => aggr::Mode::Socket,
        AGGR_DIE => aggr::Mode::Die,
        AGGR_CORE => aggr::Mode::Core,
        AGGR_NODE => aggr::Mode::Node,
        _ => return None,
    };
    let file_topology = data.topology.as_ref()?;
    let places = &file_topology.cpus;
    let node_of = |cpu: u32| {
        file_topology
            .nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map_or(0, |n| n.node as i64)
    };
    let topology: Vec<aggr::CpuTopology> = data
        .cpus
        .iter()
        .map(|&cpu| {
            let (socket, die, core) = places.get(cpu as usize).copied().unwrap_or((-1, -1, -1));
            aggr::CpuTopology {
                socket: socket.into(),
                die: die.into(),
                core: core.into(),
                cluster: -1,
                node: if cpu < 0 { 0 } else { node_of(cpu as u32) },
                caches: Vec::new(),
            }
        })
        .collect();
    Some((mode, aggr::groups(mode, &topology)))
}

/// The lines of a file's counts per group of CPUs, group by group as perf prints them.
fn recorded_group_lines(
    rows: &Rows,
    counts: &[crate::perfdata::StatCount],
    mode: aggr::Mode,
    groups: &[aggr::Group],
) -> Vec<Line> {
    let per_cpu = rows.lines(counts);
    let nr_cpus = rows.cpus.len();
    let mut out = Vec::new();
    for g in groups {
        for (event, lines) in per_cpu.chunks(nr_cpus.max(1)).enumerate() {
            let mut sum = Reading::default();
            let mut counted = false;
            for &pos in &g.cpus {
                if let Some(Value::Counted(r)) = lines.get(pos).map(|l| l.value) {
                    sum.add(&r);
                    counted = true;
                }
            }
            out.push(Line {
                event,
                cgroup: None,
                container: None,
                cpu: None,
                // As perf stat report: the group's CPUs, counted or not.
                place: Some(Place::Group {
                    mode,
                    name: g.name.clone(),
                    cpus: g.cpus.len(),
                }),
                value: if counted {
                    Value::Counted(sum)
                } else {
                    Value::NotSupported
                },
            });
        }
    }
    out
}

/// Where a file's counts go in a report: the row of each event (in the file's order)
/// and, counted per CPU, the place of each CPU.
struct Rows {
    events: usize,
    /// The CPUs of each event's rows; one row of any CPU when not per CPU.
    cpus: Vec<Option<i32>>,
    event_of: HashMap<u64, usize>,
    place_of: HashMap<i32, usize>,
}

impl Rows {
    fn new(data: &crate::perfdata::StatFile, per_cpu: bool) -> Rows {
        let mut event_of = HashMap::new();
        for (i, e) in data.events.iter().enumerate() {
            for &id in &e.ids {
                event_of.entry(id).or_insert(i);
            }
        }
        let cpus: Vec<Option<i32>> = match per_cpu {
            true => data.cpus.iter().map(|&c| Some(c)).collect(),
            false => vec![None],
        };
        let mut place_of = HashMap::new();
        for (place, cpu) in cpus.iter().enumerate() {
            if let Some(cpu) = cpu {
                place_of.entry(*cpu).or_insert(place);
            }
        }
        Rows {
            events: data.events.len(),
            cpus,
            event_of,
            place_of,
        }
    }

    /// The lines of some of a file's counts (a round's or the whole run's): each
    /// event's, summed over its ids, per CPU or over all; an event with no count was
    /// not supported where it was recorded.
    fn lines(&self, counts: &[crate::perfdata::StatCount]) -> Vec<Line> {
        let per_event = self.cpus.len();
        let mut sums: Vec<Option<Reading>> = vec![None; self.events * per_event];
        for c in counts {
            let Some(&event) = self.event_of.get(&c.id) else {
                continue;
            };
            let place = match self.cpus.first() {
                Some(None) => 0,
                _ => match self.place_of.get(&c.cpu) {
                    Some(&place) => place,
                    None => continue,
                },
            };
            let reading = Reading {
                counter: c.val,
                enabled: c.ena,
                running: c.run,
            };
            sums[event * per_event + place]
                .get_or_insert_with(Reading::default)
                .add(&reading);
        }
        sums.into_iter()
            .enumerate()
            .map(|(row, sum)| Line {
                event: row / per_event.max(1),
                cgroup: None,
                container: None,
                cpu: self.cpus[row % per_event.max(1)]
                    .filter(|c| *c >= 0)
                    .map(|c| c as u32),
                place: None,
                value: sum.map_or(Value::NotSupported, Value::Counted),
            })
            .collect()
    }
}
