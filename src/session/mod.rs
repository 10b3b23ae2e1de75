//! What the counting commands (bperf stat, serve, record) share around their counter:
//! the plan of what to count (plan), the cgroups that follow the tree (live), the
//! counter opened for a plan, and the wakes that end or interrupt the wait between
//! reads (signals, the command's end, changes of the cgroup tree).

pub mod containers;
pub mod live;
pub mod plan;
pub mod runq;
pub(crate) mod schedule;
pub mod slots;

use std::mem::MaybeUninit;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGCONT, SIGHUP, SIGINT, SIGTERM, SIGTSTP, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::counter::{Counter, Setup, SharedSetup};
pub use live::LiveCgroups;
pub use plan::{Plan, Request};
pub use schedule::{Next, Schedule};

/// What ends or interrupts the wait between reads. `R` is what a command is asked for
/// besides (serve: a scrape); none for the others.
pub enum Wake<R = std::convert::Infallible> {
    /// The command exited: its status and resource usage.
    Exited(ExitStatus, libc::rusage),
    /// SIGINT, SIGTERM or SIGHUP.
    Signal(i32),
    /// What -p or -t count has all ended.
    TargetsEnded,
    /// A --control command.
    Control(String),
    /// The cgroup tree changed (live cgroups).
    Cgroups,
    /// A request of the command's own.
    Request(R),
}

/// The next wake, or None when `until` comes first; SIGTERM when every sender is gone.
pub(crate) fn wait_until<R>(
    wakes: &mpsc::Receiver<Wake<R>>,
    until: Option<Instant>,
) -> Option<Wake<R>> {
    let gone = || Wake::Signal(SIGTERM);
    match until {
        Some(t) => match wakes.recv_timeout(t.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Ok(w) => Some(w),
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(gone()),
        },
        None => Some(wakes.recv().unwrap_or_else(|_| gone())),
    }
}

/// Sends SIGINT, SIGTERM and SIGHUP to the counting loop as wakes, instead of letting
/// them end bperf before it prints. signal-hook says which signal came (ctrlc does
/// not), for perf's exit status.
pub(crate) fn forward_signals<R: Send + 'static>(tx: mpsc::Sender<Wake<R>>) -> Result<()> {
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing signal handlers")?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if sig != SIGHUP {
                // A session still waiting to join the shared counters stops waiting.
                let stop = &crate::bpf::shared::STOP_ASKED;
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let _ = tx.send(Wake::Signal(sig));
        }
    });
    Ok(())
}

/// The control command a snapshot is asked for by (perf's word for it).
pub(crate) const SNAPSHOT: &str = "snapshot";

/// Sends SIGUSR1 as the control command SNAPSHOT: a flight recorder's snapshot.
pub(crate) fn forward_snapshot_signal<R: Send + 'static>(tx: mpsc::Sender<Wake<R>>) -> Result<()> {
    let mut signals = Signals::new([SIGUSR1]).context("installing signal handlers")?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            let _ = tx.send(Wake::Control(SNAPSHOT.to_string()));
        }
    });
    Ok(())
}

/// Sends SIGTSTP and SIGCONT as wakes, for a full-screen view to give the terminal back
/// before it stops, and take it again when continued (bperf top).
pub(crate) fn forward_job_control<R: Send + 'static>(tx: mpsc::Sender<Wake<R>>) -> Result<()> {
    let mut signals = Signals::new([SIGTSTP, SIGCONT]).context("installing signal handlers")?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let _ = tx.send(Wake::Signal(sig));
        }
    });
    Ok(())
}

/// How often an output that waits for its reader (a FIFO) looks for a signal.
const SIGNAL_LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// A recording given up while its FIFO waited for a reader: the exit status, and what
/// to say.
#[derive(Debug, thiserror::Error)]
#[error("nothing recorded: nobody opened {} for reading", .path.display())]
pub(crate) struct NobodyRead {
    pub status: i32,
    pub path: std::path::PathBuf,
}

/// Opens `path` for a recording (data_file::create), a FIFO once its reader comes or
/// until SIGINT, SIGTERM or SIGHUP: [`NobodyRead`] then. The other wakes that come
/// meanwhile are given to `other`.
pub(crate) fn create_output<R>(
    path: &std::path::Path,
    wakes: &mpsc::Receiver<Wake<R>>,
    mut other: impl FnMut(Wake<R>),
) -> Result<std::result::Result<std::fs::File, NobodyRead>> {
    let mut signal = None;
    let mut give_up = || {
        signal = signal_within(wakes, &mut other);
        signal.is_some()
    };
    if let Some(file) = crate::data_file::create_or_give_up(path, &mut give_up)? {
        return Ok(Ok(file));
    }
    Ok(Err(NobodyRead {
        status: 128 + signal.unwrap_or(libc::SIGTERM),
        path: path.to_path_buf(),
    }))
}

/// Waits a moment for a wake: Some(the signal) when it is SIGINT, SIGTERM or SIGHUP;
/// any other wake is given to `other`.
fn signal_within<R>(
    wakes: &mpsc::Receiver<Wake<R>>,
    mut other: impl FnMut(Wake<R>),
) -> Option<i32> {
    match wakes.recv_timeout(SIGNAL_LOOK_EVERY) {
        Ok(Wake::Signal(sig)) => Some(sig),
        Ok(wake) => {
            other(wake);
            None
        }
        Err(mpsc::RecvTimeoutError::Timeout) => None,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::thread::sleep(SIGNAL_LOOK_EVERY);
            None
        }
    }
}

/// How a counter is opened for a plan, beyond what the plan counts.
#[derive(Default)]
pub(crate) struct Open<'a> {
    /// Count this (not yet exec'd) task rather than the CPUs.
    pub task: Option<libc::pid_t>,
    /// The task's children too (perf's default; stat's -i turns it off).
    pub inherit: bool,
    /// -v: libbpf's diagnostics.
    pub verbose: u8,
    /// -vv: where the command says every perf_event_attr opened.
    pub trace: Option<&'a dyn Fn(&str)>,
    /// Name the events perf's way when the kernel let them count user space only (the
    /// first run of stat's -r; later runs keep the names).
    pub name_user_only: bool,
    /// bperf record: the ring buffer all CPUs send their slices to.
    pub slice_ring: Option<&'a crate::bpf::slice_ring::SliceRing>,
    /// bperf record of processes or threads: the tasks recorded, tracked by the BPF
    /// side on the CPUs rather than counted by events of their own.
    pub tasks: &'a [crate::bpf::shared::Target],
    /// Where the command says a warning no caller can be given: the shared counters not
    /// left as the counter is dropped.
    pub warn: Warn,
    /// The run-queue object whose maps the counter charges (see runq::load).
    pub runq: Option<crate::bpf::runq::RunqMaps<'a>>,
}

/// A sink for warnings; Default says nothing.
#[derive(Clone, Copy)]
pub(crate) struct Warn(pub fn(&str));

impl Default for Warn {
    fn default() -> Warn {
        Warn(|_| {})
    }
}

/// With --all-cgroups, patterns or --for-each-container: the cgroups followed as the tree
/// changes, each change sent as `Wake::Cgroups`; None when the plan's cgroups are fixed.
pub(crate) fn follow_cgroups<R: Send + 'static>(
    plan: &Plan,
    tx: &mpsc::Sender<Wake<R>>,
) -> Result<Option<LiveCgroups>> {
    let Some(lp) = &plan.live else {
        return Ok(None);
    };
    let tx = tx.clone();
    let changed = move || tx.send(Wake::Cgroups).is_ok();
    LiveCgroups::start(lp, &plan.cgroups, changed).map(Some)
}

/// The counter of `plan`, opened as `how` says.
pub(crate) fn open_counter<'obj>(
    plan: &mut Plan,
    how: &Open,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<Counter<'obj>> {
    let ids: Vec<u64> = plan.cgroups.iter().map(|c| c.id).collect();
    let threads: Vec<libc::pid_t> = match how.tasks.is_empty() {
        true => plan.threads.iter().map(|(tid, _)| *tid).collect(),
        false => Vec::new(),
    };
    let setup = Setup {
        threads: &threads,
        events: &plan.events,
        cpus: &plan.cpus,
        task: how.task,
        inherit: how.inherit,
        cgroups: &ids,
        live_slots: plan.live.as_ref().map(|l| l.capacity),
        cgroup_v1: plan.cgroup_v1,
        verbose: how.verbose,
        trace: how.trace,
        shared: plan.shared.as_ref().map(|sh| SharedSetup {
            events: sh.events,
            dir: &sh.dir,
            processes: if sh.by_process { &plan.watched } else { &[] },
            warn: how.warn.0,
        }),
        slice_ring: how.slice_ring,
        tasks: how.tasks,
        runq: how.runq,
    };
    let counter = Counter::open(&setup, storage)?;
    for (i, event) in plan.events.iter_mut().enumerate() {
        if how.name_user_only && counter.user_only(i) {
            event.name = event.user_only_name();
        }
    }
    Ok(counter)
}
