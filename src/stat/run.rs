//! One run of a counting session: the counter read at every interval and at the end,
//! --control's commands carried out, live cgroups followed, until the command ends, a
//! signal comes or the intervals are done.

use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::Signal;

use super::lines::{self, event_status, EventStatus};
use super::record::PipeRecord;
use super::rules::Settled;
use super::tool::ToolTimes;
use crate::counter::Counter;
use crate::output::runq::{self, Culprit};
use crate::output::{Line, Place, Report, Value};
use crate::perf_version::PerfVersion;
use crate::reading::{Reading, Snapshot};
use crate::session::containers::ContainerNames;
use crate::session::runq::RunqCounts;
use crate::session::{open_counter, wait_until, LiveCgroups, Next, Open, Plan, Schedule, Wake};
use crate::sys;
use crate::sys::process::{self, Child, Workload};
use crate::UsageError;

/// How counting ended.
pub(super) enum Ended {
    /// The command exited (its status and resource usage).
    Command(ExitStatus, libc::rusage),
    /// A signal stopped counting, with no command to wait for.
    Signal(i32),
    /// The intervals asked for were printed.
    Done,
}

impl Ended {
    /// bperf's exit status, as perf's: the command's, or 128 + the signal's number
    /// (130 after Ctrl-C, 143 after SIGTERM).
    pub(super) fn exit_code(&self) -> i32 {
        match self {
            Ended::Command(st, _) => process::exit_code(*st),
            Ended::Signal(sig) => 128 + sig,
            Ended::Done => 0,
        }
    }
}

/// Opens --control's files and sends each command line to the counting loop; returns
/// the file for acknowledgements.
pub(super) fn forward_control(spec: &str, tx: mpsc::Sender<Wake>) -> Result<Option<std::fs::File>> {
    use std::io::BufRead;
    let (ctl, ack) =
        sys::open_control(spec).map_err(|e| UsageError(format!("--control {spec}: {e}")))?;
    std::thread::spawn(move || {
        for line in io::BufReader::new(ctl).lines().map_while(|l| l.ok()) {
            if tx.send(Wake::Control(line.trim().to_string())).is_err() {
                return;
            }
        }
    });
    Ok(ack)
}

/// How long stat's counts at the end (without -I) wait for runtimes still being asked
/// for a container's name: as long as one runtime may take to answer.
const NAMES_WAIT: Duration = crate::sys::engine_api::TIMEOUT;

/// The names of the plan's containers, as counting starts.
fn name_containers(plan: &mut Plan, live: Option<&LiveCgroups>) -> ContainerNames {
    let mut names = ContainerNames::system();
    names.add(&plan.cgroups).say();
    put_container_columns(plan, live, &names);
    names
}

/// The rows' container columns, as `names` has them now.
fn put_container_columns(plan: &mut Plan, live: Option<&LiveCgroups>, names: &ContainerNames) {
    match live {
        Some(live) => plan.series = live.series(plan.events.len(), Some(names)),
        None => {
            for row in &mut plan.series {
                row.container = plan
                    .cgroups
                    .get(row.slot)
                    .and_then(|cg| names.column(cg.id));
            }
        }
    }
}

/// One flush-and-read of every counter; with BPERF_TIME_READS=1, says how long it took
/// (the benchmark reads this line).
fn timed_read(counter: &mut Counter, plan: &Plan) -> Result<Snapshot> {
    let t = Instant::now();
    let snap = counter.read()?;
    if std::env::var_os("BPERF_TIME_READS").is_some_and(|v| v == "1") {
        eprintln!(
            "bperf: flush+read of {} cgroups x {} events took {} us",
            plan.cgroups.len(),
            plan.events.len(),
            t.elapsed().as_micros()
        );
    }
    Ok(snap)
}

/// A counting session under way: the counter, what it printed so far, and where.
pub(super) struct Run<'a, 'obj> {
    args: &'a Settled,
    plan: &'a mut Plan,
    /// --all-cgroups and patterns: the cgroups as the tree changes, and whether a change
    /// waits to be looked at.
    live: Option<LiveCgroups>,
    /// --for-each-container: the containers' names, looked up as their cgroups come.
    containers: Option<ContainerNames>,
    counter: Counter<'obj>,
    report: &'a mut Report<Box<dyn Write>>,
    /// A signal came: no more runs of -r.
    interrupted: bool,
    /// perf's tool events, timed here.
    tools: Option<ToolTimes>,
    /// bperf's own events: the run-queue program.
    runq: Option<RunqCounts<'obj>>,
    /// How the kernel took each event.
    status: Vec<EventStatus>,
    /// --control's acknowledgements.
    ack: Option<&'a mut std::fs::File>,
    /// The output's name, for errors.
    output: String,
    start: Instant,
    /// The reading the last interval ended with.
    prev: Snapshot,
    /// stat record with -I: each interval's time and lines, for the file.
    recorded: Option<Vec<(Duration, Vec<Line>)>>,
    /// stat record to a pipe: where each interval's lines go instead.
    pipe: Option<&'a mut PipeRecord>,
}

impl Run<'_, '_> {
    /// A flush and read of every counter, the tool events' times put in.
    fn read(&mut self) -> Result<Snapshot> {
        let mut snap = timed_read(&mut self.counter, self.plan)?;
        if let Some(tools) = &self.tools {
            tools.fill(&mut snap);
        }
        if let Some(runq) = &self.runq {
            runq.fill(&mut snap)?;
        }
        Ok(snap)
    }

    /// The report's lines of `snap`, as perf prints them: events the kernel refused
    /// `<not supported>`, those of groups perf cannot read `<not counted>`.
    fn lines_of(&self, snap: &Snapshot, per_cpu_only: bool) -> Vec<Line> {
        let status = &self.status;
        let supported = |e: usize| status[e] != EventStatus::Refused;
        let mut lines = match per_cpu_only {
            true => lines::cpu_lines(self.plan, snap, &supported),
            false => lines::lines(
                self.plan,
                snap,
                &supported,
                self.args.no_aggr,
                self.args.per_thread,
            ),
        };
        for l in lines
            .iter_mut()
            .filter(|l| status[l.event] == EventStatus::Unread)
        {
            l.value = Value::Counted(Reading::default());
            // Nothing was read, on any CPU of its group.
            if let Some(Place::Group { cpus, .. }) = &mut l.place {
                *cpus = 0;
            }
        }
        lines
    }

    /// -v's lines about a read (Report::counts_read).
    fn say_read(&mut self, lines: &[Line]) -> Result<()> {
        let unread: Vec<bool> = self
            .status
            .iter()
            .map(|s| *s != EventStatus::Counted)
            .collect();
        self.report
            .counts_read(&self.plan.events, lines, &unread)
            .with_context(|| format!("cannot write to {}", self.output))
    }

    /// Prints what was counted since the last interval.
    fn print_interval(&mut self) -> Result<()> {
        let now = self.read()?;
        self.name_containers(None);
        let lines = self.lines_of(&now.since(&self.prev), false);
        let ts = self.start.elapsed();
        self.say_read(&lines)?;
        let culprits = self.culprits(false)?;
        self.report.opts.extra_lines = runq::lines(&culprits, &self.report.opts.format, Some(ts));
        self.report
            .interval(ts, &self.plan.events, &lines)
            .with_context(|| format!("cannot write to {}", self.output))?;
        if self.recorded.is_some() {
            // --per-socket and the like are recorded per CPU, as perf records them.
            let lines = match self.plan.aggr {
                Some(_) => self.lines_of(&now.since(&self.prev), true),
                None => lines,
            };
            match (&mut self.pipe, &mut self.recorded) {
                (Some(pipe), _) => pipe.interval(self.plan, self.args, ts, &lines)?,
                (None, Some(recorded)) => recorded.push((ts, lines)),
                (None, None) => {}
            }
        }
        self.prev = now;
        // Removed cgroups were reported once more: they go, and cgroups left out for
        // want of a place may take theirs.
        if let Some(live) = &mut self.live {
            let waiting = live.release_gone();
            self.plan.series = live.series(self.plan.events.len(), self.containers.as_ref());
            if let Some(c) = &mut self.containers {
                let kept: Vec<u64> = live.reported().iter().map(|(_, cg)| cg.id).collect();
                c.retain(&kept);
            }
            if waiting {
                self.refresh_cgroups()?;
            }
        }
        Ok(())
    }

    /// Names the containers whose runtime answered since (after a read, never during
    /// one; the runtimes are asked by a thread of their own). `wait`: how long to wait for
    /// the look-ups under way, where no interval follows.
    fn name_containers(&mut self, wait: Option<Duration>) {
        if let Some(c) = &mut self.containers {
            let (named, notes) = match wait {
                Some(timeout) => c.settle(timeout),
                None => c.name_unnamed(),
            };
            notes.say();
            if named {
                put_container_columns(self.plan, self.live.as_ref(), c);
            }
        }
    }

    /// Follows the cgroup tree after it changed: new cgroups get rows (counted from
    /// zero), removed ones stop counting.
    fn refresh_cgroups(&mut self) -> Result<()> {
        let Some(live) = &mut self.live else {
            return Ok(());
        };
        let (changes, notes) = live.refresh(&mut self.counter)?;
        notes.say();
        if let Some(runq) = &mut self.runq {
            runq.follow(&changes)?;
        }
        for (slot, _) in &changes.added {
            self.prev.clear_slot(*slot);
        }
        if let Some(c) = &mut self.containers {
            c.add(changes.added.iter().map(|(_, cg)| cg)).say();
        }
        self.plan.series = live.series(self.plan.events.len(), self.containers.as_ref());
        Ok(())
    }

    /// Counts until the command ends, a signal comes or, without a command, the
    /// intervals are done; prints every interval, the last, partial one included.
    /// `early`: a wake that came before counting started (during -D's delay).
    fn count(
        &mut self,
        mut early: Option<Wake>,
        wakes: &mpsc::Receiver<Wake>,
        child: Option<&Child>,
    ) -> Result<Ended> {
        let a = self.args;
        let mut schedule = Schedule::new(self.start, a.interval, a.interval_count, a.timeout);
        // A command that ended during -D's delay leaves no interval to print, as in perf.
        let ended_in_delay = matches!(early, Some(Wake::Exited(..)));
        loop {
            let next = match early.take() {
                Some(w) => Next::Wake(w),
                None => schedule.wait(wakes),
            };
            let wake = match next {
                Next::Wake(w) => w,
                // As perf: the command gets SIGTERM and is waited for.
                Next::Timeout => match child {
                    Some(c) => {
                        c.signal(Signal::TERM);
                        continue;
                    }
                    None => return Ok(Ended::Done),
                },
                Next::Tick => {
                    self.print_interval()?;
                    // Like perf: no more intervals; a command runs to its end.
                    if schedule.ticked() && child.is_none() {
                        return Ok(Ended::Done);
                    }
                    continue;
                }
            };
            let ended = match wake {
                // Stop the command too (after Ctrl-C it has usually had SIGINT already);
                // the summary follows once it has exited, with its status.
                Wake::Signal(_) if child.is_some() => {
                    self.interrupted = true;
                    child.into_iter().for_each(|c| c.signal(Signal::TERM));
                    continue;
                }
                Wake::Signal(sig) => {
                    self.interrupted = true;
                    Ended::Signal(sig)
                }
                Wake::Exited(st, ru) => Ended::Command(st, ru),
                Wake::TargetsEnded => Ended::Done,
                Wake::Control(cmd) => {
                    self.control(&cmd)?;
                    continue;
                }
                Wake::Cgroups => {
                    self.refresh_cgroups()?;
                    continue;
                }
                Wake::Request(none) => match none {},
            };
            if schedule.ticking() && !ended_in_delay {
                self.print_interval()?;
            }
            return Ok(ended);
        }
    }

    /// Carries out a --control command as perf stat does: enable and disable print an
    /// interval with -I; all but snapshot and unknown ones are acknowledged.
    fn control(&mut self, cmd: &str) -> Result<()> {
        let answered = match cmd {
            "enable" | "disable" => {
                match cmd {
                    "enable" => self.counter.resume()?,
                    _ => self.counter.pause()?,
                }
                eprintln!("Events {cmd}d");
                if self.args.interval.is_some() {
                    self.print_interval()?;
                }
                true
            }
            "evlist" => {
                self.plan
                    .events
                    .iter()
                    .for_each(|e| eprintln!("{}", e.name));
                true
            }
            "ping" | "stop" => true,
            _ => false,
        };
        if let (true, Some(ack)) = (answered, self.ack.as_mut()) {
            ack.write_all(b"ack\n").context("writing --control's ack")?;
        }
        Ok(())
    }

    /// The counts of the whole run.
    fn finish(mut self, ended: Ended) -> Result<Measured> {
        // After intervals, the whole run is what they added up to (--summary), as perf.
        let total = match self.args.interval {
            Some(_) => self.prev.clone(),
            None => {
                if let (Some(tools), Ended::Command(_, ru)) = (&mut self.tools, &ended) {
                    tools.command_ended(ru);
                }
                self.read()?
            }
        };
        // The run's time ends once its counts are read, so that they are counts of it.
        let elapsed = self.start.elapsed();
        // Without -I, the one print of the counts has the names the runtimes give, if
        // they answer within their timeout.
        let wait = self.args.interval.is_none().then_some(NAMES_WAIT);
        self.name_containers(wait);
        let lines = self.lines_of(&total, false);
        let culprits = self.culprits(true)?;
        // As perf: the last read, said with -v, whether or not it is printed. After
        // intervals, --summary reads nothing more: perf goes over the sums, which every
        // event has, and says nothing failed.
        match self.args.interval.is_some() && self.args.summary {
            false => self.say_read(&lines)?,
            true => {
                let sums: Vec<Line> = lines
                    .iter()
                    .map(|l| Line {
                        value: match l.value {
                            Value::NotSupported => Value::Counted(Reading::default()),
                            v => v,
                        },
                        ..l.clone()
                    })
                    .collect();
                let unread = vec![false; self.plan.events.len()];
                self.report
                    .counts_read(&self.plan.events, &sums, &unread)
                    .with_context(|| format!("cannot write to {}", self.output))?;
            }
        }
        let cpu_lines = match (&self.recorded, &self.plan.aggr) {
            (Some(_), Some(_)) => self.lines_of(&total, true),
            _ => Vec::new(),
        };
        Ok(Measured {
            lines,
            cpu_lines,
            elapsed,
            ended,
            interrupted: self.interrupted,
            intervals: self.recorded.take().unwrap_or_default(),
            culprits,
        })
    }

    /// --culprits' rows of the cgroups reported, since the last interval or (`whole`)
    /// over the run.
    fn culprits(&mut self, whole: bool) -> Result<Vec<Culprit>> {
        let Some(runq) = &mut self.runq else {
            return Ok(Vec::new());
        };
        let mut rows: Vec<(usize, String)> = Vec::new();
        for s in &self.plan.series {
            if let Some(name) = s
                .cgroup
                .as_ref()
                .filter(|_| !rows.iter().any(|r| r.0 == s.slot))
            {
                rows.push((s.slot, name.clone()));
            }
        }
        runq.culprits(&rows, whole)
    }
}

/// What one run measured.
pub(super) struct Measured {
    pub(super) lines: Vec<Line>,
    /// stat record with --per-socket and the like: the lines of each CPU.
    pub(super) cpu_lines: Vec<Line>,
    pub(super) elapsed: Duration,
    pub(super) ended: Ended,
    pub(super) interrupted: bool,
    /// stat record with -I: each interval's time and lines.
    pub(super) intervals: Vec<(Duration, Vec<Line>)>,
    /// --culprits: whom each cgroup waited behind, over the run.
    pub(super) culprits: Vec<Culprit>,
}

/// Where one run takes its wakes from and prints to.
pub(super) struct RunIo<'a> {
    pub(super) ack: Option<&'a mut std::fs::File>,
    pub(super) wakes: &'a mpsc::Receiver<Wake>,
    pub(super) tx: &'a mpsc::Sender<Wake>,
    pub(super) report: &'a mut Report<Box<dyn Write>>,
    pub(super) output: &'a str,
    /// stat record: keep each interval's lines for the file.
    pub(super) record: bool,
    /// stat record to a pipe: write each interval's lines to it.
    pub(super) pipe: Option<&'a mut PipeRecord>,
}

/// One run: the command started and counted (intervals printed) until it ends. None
/// when the command could not be run (said on stderr). The first run names the events
/// perf's way when the kernel let them count user space only.
pub(super) fn run_once(
    a: &Settled,
    plan: &mut Plan,
    io: RunIo,
    first: bool,
) -> Result<Option<Measured>> {
    // The command is forked first and held before exec, so that a task counter can be
    // attached to it and every counter sees it from its first instruction.
    let workload = match a.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&a.command)?),
    };
    let mut storage = MaybeUninit::uninit();
    let mut runq_storage = MaybeUninit::uninit();
    let task = workload
        .as_ref()
        .filter(|_| plan.task_mode)
        .map(Workload::pid);
    // Loaded before the counters open: the verifier's time is not counted.
    let mut runq = RunqCounts::start(plan, a.culprits, &mut runq_storage)?;
    let how = Open {
        runq: runq.as_ref().and_then(RunqCounts::counter_maps),
        ..how_to_open(a, task, first)
    };
    let mut counter = open_counter(plan, &how, &mut storage)?;
    let status = event_status(plan, &counter, a.version()?);
    if first && a.verbose.level > 0 {
        say_refused(a, plan, &counter, &status, io.report, io.output)?;
    }
    let status = status?;
    let Some(started) = start(a, plan, &mut counter, workload, io.wakes, io.tx)? else {
        return Ok(None);
    };
    if let Some(runq) = &mut runq {
        runq.started()?;
    }
    let live = crate::session::follow_cgroups(plan, io.tx)?;
    let nr_slots = live
        .as_ref()
        .map_or(plan.cgroups.len(), LiveCgroups::capacity);
    let containers = plan
        .containers
        .then(|| name_containers(plan, live.as_ref()));
    let tool_of: Vec<_> = plan.events.iter().map(|e| e.tool).collect();
    let thread_ids: Vec<libc::pid_t> = plan.threads.iter().map(|(tid, _)| *tid).collect();
    let tools = ToolTimes::start(&tool_of, task, &thread_ids, &plan.cpus);
    let mut session = Run {
        args: a,
        tools,
        runq,
        status,
        prev: Snapshot::new(nr_slots, plan.events.len(), plan.nr_targets()),
        plan,
        live,
        containers,
        counter,
        report: io.report,
        interrupted: false,
        ack: io.ack,
        output: io.output.to_string(),
        start: started.start,
        recorded: io.record.then(Vec::new),
        pipe: io.pipe,
    };
    // What changed in the tree since the cgroups were first read.
    session.refresh_cgroups()?;
    let ended = session.count(started.early, io.wakes, started.child.as_ref())?;
    if let Ended::Command(st, _) = &ended {
        // As perf's psignal(3): which signal ended the command.
        if let Some(sig) = st.signal() {
            eprintln!("{}: {}", a.command[0], sys::signal_description(sig));
        }
    }
    session.finish(ended).map(Some)
}

/// How stat opens its counters: `task`, the command, counted alone; `first`, the first
/// run of -r's.
fn how_to_open(a: &Settled, task: Option<libc::pid_t>, first: bool) -> Open<'static> {
    Open {
        task,
        inherit: !a.no_inherit,
        verbose: a.verbose.level,
        warn: crate::session::Warn(crate::to_stderr),
        trace: (a.verbose.level >= 2).then_some(&crate::to_stderr as &dyn Fn(&str)),
        name_user_only: first,
        slice_ring: None,
        tasks: &[],
        runq: None,
    }
}

/// As perf's -v, once: what the kernel would not open. perf copies the events for each
/// --for-each-cgroup cgroup, and warns for each copy (--all-cgroups, bperf's own, warns
/// once).
fn say_refused(
    a: &Settled,
    plan: &Plan,
    counter: &Counter,
    status: &Result<Vec<EventStatus>>,
    report: &mut Report<Box<dyn Write>>,
    output: &str,
) -> Result<()> {
    report
        .out
        .flush()
        .with_context(|| format!("cannot write to {output}"))?;
    if a.quiet {
        return Ok(());
    }
    let refused = |i| {
        status
            .as_ref()
            .map_or(!counter.supported(i), |s| s[i] == EventStatus::Refused)
    };
    let copies = match a.cgroups.for_each.is_empty() {
        false => plan.cgroups.len().max(1),
        true => 1,
    };
    let version = a.version()?;
    for _ in 0..copies {
        for (i, e) in plan.events.iter().enumerate().filter(|(i, _)| refused(*i)) {
            eprintln!("Warning:\n{} event is not supported by the kernel.", e.name);
            if version == PerfVersion::V7_2 {
                eprintln!("{}", why_refused_72(plan, e, counter.refused_with(i)));
            }
        }
    }
    Ok(())
}

/// perf 7.2's words after its warning about an event refused, after the errno: an
/// invalid argument is "invalid in per-thread mode" for a command or threads, else the
/// system call's failure; anything else, that it is not supported.
fn why_refused_72(plan: &Plan, e: &crate::event::Event, errno: Option<i32>) -> String {
    let per_thread = plan.task_mode || !plan.threads.is_empty();
    match errno {
        Some(libc::EINVAL) if per_thread => format!(
            "Invalid event ({}) in per-thread mode, enable system wide with '-a'.",
            e.name
        ),
        Some(libc::EINVAL) => format!(
            "The sys_perf_event_open() syscall failed for event ({}): Invalid argument\n\"dmesg | grep -i perf\" may provide additional information.",
            e.name
        ),
        _ => format!("The {} event is not supported.", e.name),
    }
}

/// How counting started: the command, a wake that came during -D's delay, and when.
struct Started {
    child: Option<Child>,
    /// A command that ends, or a signal, during the delay ends it early.
    early: Option<Wake>,
    start: Instant,
}

/// Starts counting: the command let go (counting runs from before, as starting it
/// waits for its exec), -p's and -t's targets watched, and -D's delay waited out. None
/// when the command could not be run (said on stderr).
fn start(
    a: &Settled,
    plan: &Plan,
    counter: &mut Counter,
    workload: Option<Workload>,
    wakes: &mpsc::Receiver<Wake>,
    tx: &mpsc::Sender<Wake>,
) -> Result<Option<Started>> {
    let delay = a.delay.filter(|&ms| ms > 0).map(|ms| ms as u64);
    // The run's clock starts, then its counts: what the counters counted while the
    // session was set up (programs attached, the shared counters joined) is not the
    // run's, and each CPU's count starts within the run's time.
    let mut start = Instant::now();
    counter.restart()?;
    if a.delay == Some(-1) {
        counter.start_paused();
    }
    if delay.is_some() || a.delay == Some(-1) {
        eprintln!("Events disabled");
    }
    let exited = tx.clone();
    let child =
        match workload.map(|w| w.start(move |st, ru| drop(exited.send(Wake::Exited(st, ru))))) {
            Some(Err(e)) => {
                eprintln!("Workload failed: {e}");
                return Ok(None);
            }
            Some(Ok(child)) => Some(child),
            None => None,
        };
    if child.is_none() && !plan.watched.is_empty() {
        let ids = plan.watched.clone();
        let tx = tx.clone();
        process::when_all_end(ids, move || drop(tx.send(Wake::TargetsEnded)))
            .context("watching the processes counted")?;
    }
    let mut early = None;
    if let Some(ms) = delay {
        early = wait_until(wakes, Instant::now().checked_add(Duration::from_millis(ms)));
        start = Instant::now();
        counter.restart()?;
        eprintln!("Events enabled");
    }
    Ok(Some(Started {
        child,
        early,
        start,
    }))
}
