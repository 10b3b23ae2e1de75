//! `bperf record` and `bperf report`: every slice of time a CPU gives a monitored cgroup,
//! with what each event counted in it, streamed from the BPF program through one BPF
//! ring buffer into a file (bperf.data, see bperf_data/), and read back as totals,
//! breakdowns, distributions and a timeline.
//!
//! Recording: the counter is stat's, with the ring buffer; one thread drains the ring
//! into the file while the main thread waits for the command, the targets' end or a
//! signal, and follows the cgroup tree. The counter's last read closes the recording
//! (no slice is sent after it), so the slices add up to the totals the file ends with.
//!
//! Targets: cgroups (fixed, or live: --all-cgroups, patterns, --for-each-container), or
//! tasks (-p, -t, a command alone), which the BPF side tracks with their children as it
//! does for the shared counters, charging them to slot 0.
//!
//! Live cgroups: the file gives each cgroup a slot of its own, never reused, where the
//! BPF program reuses the slots of removed cgroups. When the tree changes, the main
//! thread stops counting the removed cgroups and reads the counter (every CPU then has
//! sent their last slices); the reader thread, between two drains, writes that they
//! ended, with their totals, and that the new ones began; only then are the new ones
//! counted. Every slice is thus written under the cgroup its BPF slot counted.

pub(crate) mod analysis;
pub mod bperf_data;
pub mod flight;
pub mod perfetto;
mod print;
mod runq;
pub mod snapshot;
pub mod timeline;

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::Signal;

use crate::bpf::shared::Target;
use crate::bpf::slice_ring::{self, SliceRing};
use crate::cli::{RecordArgs, ReportArgs};
use crate::counter::Counter;
use crate::output::people::escape_controls;
use crate::reading::Reading;
use crate::session::containers::ContainerNames;
use crate::session::plan::NoProcess;
use crate::session::{self, LiveCgroups, Open, Plan, Wake};
use crate::sys::process::{Child, Workload};
use crate::{ErrnoError, UsageError};
use bperf_data::{End, Header, RecordedCgroup};

pub use print::report;

/// Ring buffer pages for each CPU when -m is not given (bench/results/levers.md: no
/// slice lost at the highest switch rate this VM reaches).
pub(crate) const DEFAULT_PAGES: usize = 256;

/// How often the reader drains the ring even when no CPU woke it.
const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// How often the reader writes what it drained as a chunk and flushes the file: a
/// recording killed (or cut short by a full disk) keeps all but its last half second
/// or so (a chunk's slices, and those still in the ring).
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// -m: a number of pages (a power of two) or a size with B, K, M or G, rounded up to a
/// power of two pages, as perf takes it.
pub(crate) fn parse_pages(s: &str, page_size: usize) -> Result<usize> {
    let s = s.trim();
    let unit = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('B') => Some(1),
        Some('K') => Some(1 << 10),
        Some('M') => Some(1 << 20),
        Some('G') => Some(1 << 30),
        _ => None,
    };
    let bad = || {
        UsageError(format!(
            "-m {s}: give a power of two pages, or a size such as 512K"
        ))
    };
    let pages = match unit {
        Some(unit) => {
            let n: usize = s[..s.len() - 1].parse().map_err(|_| bad())?;
            let bytes = n.checked_mul(unit).ok_or_else(bad)?;
            bytes.div_ceil(page_size).max(1).next_power_of_two()
        }
        None => {
            let n: usize = s.parse().map_err(|_| bad())?;
            if !n.is_power_of_two() {
                return Err(UsageError(format!(
                    "-m {s}: the number of pages must be a power of two"
                ))
                .into());
            }
            n
        }
    };
    if pages > 1 << 20 {
        return Err(bad().into());
    }
    Ok(pages)
}

/// What the reader thread brings back.
struct Drained {
    out: Sink,
    slices: u64,
}

/// Where the reader puts the slices and the cgroups' changes: the file, or the flight
/// recorder, whose content goes to the file (`Output`) when recording ends.
enum Sink {
    File(Box<bperf_data::Writer<Output>>),
    Flight(Box<flight::FlightRecording>, Output),
}

impl Sink {
    fn write_slice(&mut self, raw: &[u8]) -> io::Result<bool> {
        match self {
            Sink::File(out) => out.write_slice(raw),
            Sink::Flight(kept, _) => kept.push(raw),
        }
    }

    fn change(&mut self, c: &CgroupChange) -> io::Result<()> {
        match self {
            Sink::File(out) => write_change(out, c),
            Sink::Flight(kept, _) => {
                for (id, _) in &c.ended {
                    kept.ended(*id)?;
                }
                for (slot, cg) in &c.began {
                    kept.began(*slot, cg)?;
                }
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(out) => out.flush(),
            Sink::Flight(..) => Ok(()),
        }
    }
}

/// Cgroups that came and went, for the reader thread to write between two drains.
#[derive(Default)]
struct CgroupChange {
    /// Cgroups removed (ids), no longer counted, their last slices sent; their totals.
    ended: Vec<(u64, Vec<Vec<Reading>>)>,
    /// New cgroups and their BPF slots, counted once the change is written.
    began: Vec<(usize, RecordedCgroup)>,
}

/// The reader thread's side of cgroup changes: each change, and word that it is
/// written; and the flight recorder's snapshots asked for (SIGUSR1).
struct ChangeQueue {
    changes: mpsc::Receiver<CgroupChange>,
    written: mpsc::Sender<()>,
    snapshots: mpsc::Receiver<()>,
    snapshot: Option<snapshot::Snapshots>,
}

/// Drains the ring buffer into `out` until `stop`, then once more. A cgroup change is
/// written after a drain that began after it came: past every slice sent before it.
fn drain_ring(
    ring: SliceRing,
    out: Sink,
    stop: Arc<AtomicBool>,
    mut queue: ChangeQueue,
) -> Result<Drained> {
    let sink = RefCell::new((out, 0u64, None::<io::Error>));
    let reader = ring.reader(|raw| {
        let (out, slices, failed) = &mut *sink.borrow_mut();
        if failed.is_none() {
            match out.write_slice(raw) {
                Ok(true) => *slices += 1,
                Ok(false) => {}
                Err(e) => *failed = Some(e),
            }
        }
    })?;
    let mut flushed = Instant::now();
    loop {
        let last = stop.load(Ordering::Acquire);
        let change = queue.changes.try_recv().ok();
        reader.drain()?;
        {
            let (out, _, failed) = &mut *sink.borrow_mut();
            if let Some(c) = change {
                if let Err(e) = out.change(&c) {
                    failed.get_or_insert(e);
                }
                let _ = queue.written.send(());
            }
            if queue.snapshots.try_recv().is_ok() {
                take_snapshot(out, &mut queue.snapshot);
            }
            if !last && flushed.elapsed() >= FLUSH_EVERY {
                if let Err(e) = out.flush() {
                    failed.get_or_insert(e);
                }
                flushed = Instant::now();
            }
            if let Some(e) = failed.take() {
                return Err(e).context("writing the slices");
            }
        }
        if last {
            break;
        }
        reader.wait_and_drain(DRAIN_EVERY)?;
    }
    drop(reader);
    if let Some(s) = &mut queue.snapshot {
        s.finish();
    }
    let (out, slices, _) = sink.into_inner();
    Ok(Drained { out, slices })
}

/// SIGUSR1: a snapshot of what the flight recorder holds, or word that there is none.
fn take_snapshot(out: &Sink, snapshots: &mut Option<snapshot::Snapshots>) {
    match (out, snapshots) {
        (Sink::Flight(kept, _), Some(s)) => s.take(kept),
        _ => eprintln!(
            "bperf record: SIGUSR1 asks for a snapshot of the flight recorder, and there is none (--flight-recorder SIZE)"
        ),
    }
}

fn write_change(out: &mut bperf_data::Writer<Output>, c: &CgroupChange) -> io::Result<()> {
    for (id, totals) in &c.ended {
        out.ended(*id, totals)?;
    }
    for (slot, cg) in &c.began {
        out.began(*slot, cg)?;
    }
    Ok(())
}

/// A file being written, and how many bytes went into it.
struct CountingFile {
    file: File,
    bytes: u64,
}

impl Write for CountingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Where the recording goes, buffered.
type Output = BufWriter<CountingFile>;

/// Opens `path` for the recording (see data_file::create: an earlier recording is
/// kept as `path`.old, a device, FIFO or `-` written into). A FIFO waits for its
/// reader until SIGINT, SIGTERM or SIGHUP: Err(bperf's exit status) then, said. The
/// other wakes that came meanwhile are sent again, for the wait that follows.
fn create_output(
    path: &Path,
    wakes: &mpsc::Receiver<Wake>,
    tx: &mpsc::Sender<Wake>,
) -> Result<std::result::Result<Output, i32>> {
    let mut later = Vec::new();
    let file = session::create_output(path, wakes, |wake| later.push(wake))?;
    later.into_iter().for_each(|w| drop(tx.send(w)));
    Ok(file
        .map(|file| BufWriter::with_capacity(1 << 20, CountingFile { file, bytes: 0 }))
        .map_err(|gave_up| {
            eprintln!("bperf: {gave_up}");
            gave_up.status
        }))
}

/// How long a cgroup's beginning waits for its container's name from the runtimes (the
/// file keeps the name it had when recorded): as long as one runtime may take.
const NAMES_WAIT: std::time::Duration = crate::sys::engine_api::TIMEOUT;

/// A cgroup of the plan as the file names it; `containers` knows its container's name.
fn recorded(slot: usize, c: &crate::cgroup::Cgroup, containers: &ContainerNames) -> RecordedCgroup {
    RecordedCgroup {
        slot,
        id: c.id,
        name: c.name.clone(),
        path: crate::output::people::text_of_bytes(c.path.as_os_str().as_encoded_bytes()),
        container: containers.column(c.id),
        ..RecordedCgroup::default()
    }
}

/// The header of the recording of `plan`; `containers` knows the plan's containers.
fn header(
    plan: &Plan,
    supported: &[bool],
    a: &RecordArgs,
    tasks: bool,
    containers: &ContainerNames,
) -> Header {
    let cgroups = plan
        .cgroups
        .iter()
        .enumerate()
        .map(|(slot, c)| recorded(slot, c, containers))
        .collect();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Header {
        events: plan.events.iter().map(|e| e.name.clone()).collect(),
        supported: supported.to_vec(),
        cgroups,
        cpus: plan.cpus.clone(),
        clock: match std::env::var_os("BPERF_READ_HELPER").is_some_and(|v| v == "1")
            || crate::bpf::Variant::of_this_kernel() == crate::bpf::Variant::Old
        {
            true => "ktime".into(),
            false => "sched_clock".into(),
        },
        command: a.command.clone(),
        started,
        target: plan.target.clone(),
        tasks,
    }
}

/// The tasks recorded, which the BPF side charges with the tasks they start: -p's
/// processes, -t's threads, or the command (`workload`, not yet exec'd) when it is
/// recorded alone. None when cgroups are recorded.
fn recorded_tasks(a: &RecordArgs, plan: &Plan, workload: Option<&Workload>) -> Vec<Target> {
    if a.pid.is_some() {
        let process = |&pid: &libc::pid_t| Target::Process {
            pid: pid as u32,
            inherit: true,
        };
        return plan.watched.iter().map(process).collect();
    }
    if a.tid.is_some() {
        let thread = |&tid: &libc::pid_t| Target::Thread {
            tid: tid as u32,
            inherit: true,
        };
        return plan.watched.iter().map(thread).collect();
    }
    match (a.records_tasks(), workload) {
        (true, Some(w)) => vec![Target::Process {
            pid: w.pid() as u32,
            inherit: true,
        }],
        _ => Vec::new(),
    }
}

/// The plan of a recording, after the refusals of what record cannot do.
fn plan_of(a: &RecordArgs) -> Result<Plan> {
    if (a.pid.is_some() || a.tid.is_some()) && a.asks_for_cgroups() {
        return Err(UsageError(
            "-p and -t record tasks, cgroup options record cgroups: give one".into(),
        )
        .into());
    }
    let plan = Plan::new(&a.request()).map_err(|e| match e.downcast::<NoProcess>() {
        Ok(NoProcess(_)) => ErrnoError {
            errno: libc::ENOMEM,
            message: "Couldn't create thread/CPU maps: No such process".into(),
        }
        .into(),
        Err(e) => e,
    })?;
    plan.warnings.iter().for_each(|w| eprintln!("{w}"));
    if plan.shared.is_some() {
        return Err(UsageError(
            "bperf record counts on its own: no --bpf-counters or :b events".into(),
        )
        .into());
    }
    Ok(plan)
}

/// Starts the command (`workload`, running `command`), whose end is sent as a wake, or
/// else watches the processes -p and -t record until they all end. Err(255) when the
/// command could not run (said in one line naming it, as perf record names it).
fn start_targets(
    plan: &Plan,
    (workload, command): (Option<Workload>, &[String]),
    tx: &mpsc::Sender<Wake>,
) -> Result<std::result::Result<Option<Child>, i32>> {
    let exited = tx.clone();
    match workload.map(|w| w.start(move |st, ru| drop(exited.send(Wake::Exited(st, ru))))) {
        Some(Err(e)) => {
            let name = command.first().map_or("", String::as_str);
            eprintln!("bperf: cannot run '{}': {e}", escape_controls(name));
            Ok(Err(255))
        }
        Some(Ok(child)) => Ok(Ok(Some(child))),
        None if plan.watched.is_empty() => Ok(Ok(None)),
        None => {
            let ended = tx.clone();
            crate::sys::process::when_all_end(plan.watched.clone(), move || {
                drop(ended.send(Wake::TargetsEnded))
            })
            .context("watching the processes recorded")?;
            Ok(Ok(None))
        }
    }
}

/// How often the end of a recording looks for a signal while the file is finished.
const END_LOOK_EVERY: Duration = Duration::from_millis(5);

/// Ends a recording: the last slices sent, the reader stopped once it has drained them,
/// and the file finished with the counters' totals and what was lost. The file is
/// finished on a thread of its own, and a signal meanwhile (Ctrl-C again) gives it up:
/// a FIFO or pipe whose reader takes no more would hold bperf for ever, as a blocking
/// write ignores signals. Some(exit status) when given up (said).
fn end_recording(
    mut counter: Counter,
    start: Instant,
    reader: (Arc<AtomicBool>, JoinHandle<Result<Drained>>),
    output: &Path,
    wakes: &mpsc::Receiver<Wake>,
) -> Result<Option<i32>> {
    counter.close_recording();
    let totals = counter.read()?;
    let duration = start.elapsed();
    let lost = counter.slices_lost()?;
    let sent = counter.slices_sent()?;
    drop(counter);
    let (stop, reader) = reader;
    stop.store(true, Ordering::Release);
    let path = output.to_path_buf();
    let finisher = std::thread::spawn(move || -> Result<()> {
        let drained = reader.join().expect("the ring reader does not panic")?;
        let out = match drained.out {
            Sink::File(out) => *out,
            Sink::Flight(kept, output) => return write_kept(&kept, output, &path, &lost),
        };
        let end = End {
            duration_ns: duration.as_nanos() as u64,
            lost,
            // The program counts every slice the ring had no room for in `lost`.
            ring_lost: Vec::new(),
            totals: out.file_totals(|slot| slot_of(&totals, slot)),
            sent,
        };
        let bytes = finish_file(out, &end, &path)?;
        say_written(&path, bytes, drained.slices, end.lost_total());
        Ok(())
    });
    while !finisher.is_finished() {
        match wakes.recv_timeout(END_LOOK_EVERY) {
            Ok(Wake::Signal(sig)) => {
                eprintln!(
                    "bperf: gave up writing {}: it took no more (nobody reads it?)",
                    output.display()
                );
                return Ok(Some(128 + sig));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(END_LOOK_EVERY),
            _ => {}
        }
    }
    finisher.join().expect("the file's end does not panic")?;
    Ok(None)
}

/// Runs `bperf record`; returns the process exit code.
pub fn run(a: &RecordArgs) -> Result<i32> {
    let mut plan = plan_of(a)?;
    let ring = open_ring(plan.cpus.len(), ring_pages(a)?)?;
    let (tx, wakes) = mpsc::channel();
    session::forward_signals(tx.clone())?;
    session::forward_snapshot_signal(tx.clone())?;
    let workload = match a.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&a.command)?),
    };
    let tasks = recorded_tasks(a, &plan, workload.as_ref());
    let mut storage = MaybeUninit::uninit();
    let how = Open {
        inherit: true,
        verbose: a.verbose.level,
        warn: crate::session::Warn(crate::to_stderr),
        trace: (a.verbose.level >= 2).then_some(&crate::to_stderr as &dyn Fn(&str)),
        name_user_only: true,
        slice_ring: Some(&ring),
        tasks: &tasks,
        ..Open::default()
    };
    let mut counter = session::open_counter(&mut plan, &how, &mut storage)?;
    // The time recorded runs from here, where counting starts, however long the command
    // takes to start and the output to open (a FIFO waits for its reader): the totals
    // are of that time, and CPUs utilized is over it.
    let start = Instant::now();
    let mut live = session::follow_cgroups(&plan, &tx)?;
    let supported: Vec<bool> = (0..plan.events.len())
        .map(|i| counter.supported(i))
        .collect();
    // The command runs before the file is touched: a command that cannot run leaves an
    // earlier recording as it was. Its first slices wait in the ring meanwhile.
    let child = match start_targets(&plan, (workload, &a.command), &tx)? {
        Ok(child) => child,
        Err(code) => return Ok(code),
    };
    // The containers' names as their runtimes give them now: report needs no runtime.
    let mut containers = ContainerNames::system();
    containers.add(&plan.cgroups).say();
    containers.settle(NAMES_WAIT).1.say();
    let output = match create_output(&a.output, &wakes, &tx)? {
        Ok(output) => output,
        Err(code) => return Ok(code),
    };
    let head = header(&plan, &supported, a, !tasks.is_empty(), &containers);
    let out = sink_of(a, head, output)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (to_reader, changes) = mpsc::channel();
    let (written, done) = mpsc::channel();
    let (to_snapshot, snapshots) = mpsc::channel();
    let queue = ChangeQueue {
        changes,
        written,
        snapshots,
        snapshot: a.flight_recorder.map(|_| snapshots_of(a)),
    };
    let reader = spawn_reader(ring, out, stop.clone(), queue);
    let mut follow = live.as_mut().map(|live| Follow {
        live,
        containers: &mut containers,
        to_reader: &to_reader,
        done: &done,
    });
    // Cgroups made between the plan and the watch are found by a first look.
    if let Some(f) = &mut follow {
        f.refresh(&mut counter)?;
    }
    let code = wait_for_end(
        &wakes,
        child.as_ref(),
        &mut counter,
        &mut follow,
        &to_snapshot,
    )?;
    let given_up = end_recording(counter, start, (stop, reader), &a.output, &wakes)?;
    Ok(given_up.unwrap_or(code))
}

/// -m's pages for each CPU's share of the ring.
fn ring_pages(a: &RecordArgs) -> Result<usize> {
    match &a.mmap_pages {
        Some(s) => parse_pages(s, slice_ring::page_size()),
        None => Ok(DEFAULT_PAGES),
    }
}

/// Where the slices go: the file, or the flight recorder that writes it at the end.
fn sink_of(a: &RecordArgs, head: Header, output: Output) -> Result<Sink> {
    Ok(match a.flight_recorder {
        Some(budget) => {
            let kept = flight::FlightRecording::new(budget, head, a.compression_level)?;
            Sink::Flight(Box::new(kept), output)
        }
        None => Sink::File(Box::new(
            bperf_data::Writer::new(output, &head, a.compression_level)
                .with_context(|| format!("cannot write to {}", a.output.display()))?,
        )),
    })
}

/// Where the flight recorder's snapshots go: --snapshot-dir, else the directory of -o.
fn snapshots_of(a: &RecordArgs) -> snapshot::Snapshots {
    let beside_output = || match a.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = a.snapshot_dir.clone().unwrap_or_else(beside_output);
    snapshot::Snapshots::new(dir, a.max_snapshots as usize)
}

/// Live cgroups in a recording: the tree followed, and the reader thread told.
struct Follow<'a> {
    live: &'a mut LiveCgroups,
    containers: &'a mut ContainerNames,
    to_reader: &'a mpsc::Sender<CgroupChange>,
    done: &'a mpsc::Receiver<()>,
}

impl Follow<'_> {
    /// Follows the tree after it changed: removed cgroups end in the file, with their
    /// totals, and new ones begin, before their first slice. Removed cgroups' slots are
    /// free at once: their counts are in the file.
    fn refresh(&mut self, counter: &mut Counter) -> Result<()> {
        loop {
            let (to_reader, done, containers) = (self.to_reader, self.done, &mut *self.containers);
            let (_, notes) = self.live.refresh_with(counter, |changes, counter| {
                if changes.removed.is_empty() && changes.added.is_empty() {
                    return Ok(());
                }
                let mut change = CgroupChange::default();
                if !changes.removed.is_empty() {
                    // Every CPU charges them no more, and has sent their last slices.
                    let totals = counter.read()?;
                    change.ended = changes
                        .removed
                        .iter()
                        .map(|(slot, c)| (c.id, slot_of(&totals, *slot)))
                        .collect();
                }
                containers.add(changes.added.iter().map(|(_, c)| c)).say();
                containers.settle(NAMES_WAIT).1.say();
                change.began = changes
                    .added
                    .iter()
                    .map(|(slot, c)| (*slot, recorded(*slot, c, containers)))
                    .collect();
                to_reader
                    .send(change)
                    .map_err(|_| anyhow::anyhow!("the ring reader stopped"))?;
                done.recv()
                    .map_err(|_| anyhow::anyhow!("the ring reader stopped"))
            })?;
            notes.say();
            if !self.live.release_gone() {
                return Ok(());
            }
        }
    }
}

/// A slot's readings in `totals`, [event][CPU position].
fn slot_of(totals: &crate::reading::Snapshot, slot: usize) -> Vec<Vec<Reading>> {
    let (nr_events, nr_cpus) = (totals.nr_events(), totals.nr_places());
    (0..nr_events)
        .map(|e| (0..nr_cpus).map(|c| totals.get(slot, e, c)).collect())
        .collect()
}

fn spawn_reader(
    ring: SliceRing,
    out: Sink,
    stop: Arc<AtomicBool>,
    queue: ChangeQueue,
) -> JoinHandle<Result<Drained>> {
    std::thread::spawn(move || drain_ring(ring, out, stop, queue))
}

/// The ring buffer for `cpus` CPUs of `pages` pages each (see ring_bytes).
fn open_ring(cpus: usize, pages: usize) -> Result<SliceRing> {
    SliceRing::create(ring_bytes(cpus, pages, slice_ring::page_size())?)
}

/// The bytes of a ring buffer for `cpus` CPUs of `pages` pages each: their sum, rounded
/// up to a power of two, as the kernel wants it, up to 2 GiB.
fn ring_bytes(cpus: usize, pages: usize, page_size: usize) -> Result<usize> {
    cpus.max(1)
        .checked_mul(pages)
        .and_then(|p| p.checked_mul(page_size))
        .and_then(usize::checked_next_power_of_two)
        .filter(|&b| b <= 1 << 31)
        .ok_or_else(|| {
            UsageError(format!(
                "-m: {pages} pages for each of {cpus} CPUs is more than the 2 GiB a ring buffer holds"
            ))
            .into()
        })
}

/// Waits for the command to end (a signal is passed on to it), or -p's and -t's tasks
/// to, or, without either, for a signal; follows the cgroup tree meanwhile. bperf's exit
/// status, as perf's.
fn wait_for_end(
    wakes: &mpsc::Receiver<Wake>,
    child: Option<&Child>,
    counter: &mut Counter,
    follow: &mut Option<Follow>,
    to_snapshot: &mpsc::Sender<()>,
) -> Result<i32> {
    loop {
        match wakes.recv() {
            Ok(Wake::Exited(st, _)) => return Ok(crate::sys::process::exit_code(st)),
            Ok(Wake::Signal(_)) if child.is_some() => {
                child.into_iter().for_each(|c| c.signal(Signal::TERM));
            }
            Ok(Wake::Signal(sig)) => return Ok(128 + sig),
            Ok(Wake::TargetsEnded) => return Ok(0),
            Ok(Wake::Cgroups) => {
                if let Some(f) = follow {
                    f.refresh(counter)?;
                }
            }
            Ok(Wake::Control(c)) if c == session::SNAPSHOT => {
                let _ = to_snapshot.send(());
            }
            Ok(Wake::Control(_)) => {}
            Ok(Wake::Request(none)) => match none {},
            Err(_) => return Ok(255),
        }
    }
}

/// Writes what the flight recorder kept to `output` (`path`), and says so: what it
/// holds, and what it dropped or the ring lost before it.
fn write_kept(
    kept: &flight::FlightRecording,
    output: Output,
    path: &Path,
    lost: &[u64],
) -> Result<()> {
    let context = || format!("cannot write to {}", path.display());
    let (mut out, slices) = kept.write(output).with_context(context)?;
    out.flush().with_context(context)?;
    let dropped = kept.dropped();
    say_written(path, out.get_ref().bytes, slices, lost.iter().sum());
    eprintln!(
        "bperf record: the flight recorder kept the newest {slices} slices ({dropped} older ones dropped)"
    );
    Ok(())
}

/// Ends the file with `end`; the bytes written in all.
fn finish_file(out: bperf_data::Writer<Output>, end: &End, path: &Path) -> Result<u64> {
    let out = out
        .finish(end)
        .and_then(|mut out| out.flush().map(|_| out))
        .with_context(|| format!("cannot write to {}", path.display()))?;
    Ok(out.get_ref().bytes)
}

/// perf record's closing line, and a warning when slices were lost.
fn say_written(path: &Path, bytes: u64, slices: u64, lost: u64) {
    let mb = bytes as f64 / 1e6;
    eprintln!(
        "[ bperf record: Captured and wrote {mb:.3} MB {} ({slices} slices, {lost} lost) ]",
        path.display()
    );
    if lost > 0 {
        eprintln!(
            "bperf record: {lost} slices were lost (the ring buffer was full): -m gives it more pages for each CPU; the totals in the file are whole"
        );
    }
}

/// A recording being read, one slice at a time; its errors name the file.
pub struct Recording {
    reader: bperf_data::Reader<Box<dyn Read>>,
    path: PathBuf,
}

/// How much report reads at once.
const READ_BUFFER: usize = 1 << 20;

/// The recording in `path` (`-`: standard input), its header read, or one line saying
/// why it cannot be read.
pub fn open(path: &Path) -> Result<Recording> {
    let (input, size): (Box<dyn Read>, Option<u64>) = match path.as_os_str() == "-" {
        true => (Box::new(io::stdin().lock()), None),
        false => {
            let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
            let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
            (Box::new(f), size)
        }
    };
    let input = Box::new(io::BufReader::with_capacity(READ_BUFFER, input));
    let reader = bperf_data::Reader::new(input as Box<dyn Read>, size)
        .with_context(|| path.display().to_string())?;
    Ok(Recording {
        reader,
        path: path.to_path_buf(),
    })
}

/// The recording in `path` opened for another pass: it must be a file, not a pipe (or a
/// device). What is not there, or a directory, is said by `open`.
pub(crate) fn open_again(path: &Path) -> Result<Recording> {
    let stream = path.as_os_str() == "-"
        || std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir());
    if stream {
        return Err(UsageError(format!(
            "{}: --timeline reads the recording twice: give it a file, not a pipe",
            path.display()
        ))
        .into());
    }
    open(path)
}

impl Recording {
    pub fn header(&self) -> &bperf_data::Header {
        self.reader.header()
    }

    /// Gives every slice to `each`, in the file's order; the end block. A recording
    /// that did not finish has none: its time is then its slices', from the first
    /// start to the last end.
    pub fn each_slice(&mut self, mut each: impl FnMut(&bperf_data::Slice)) -> Result<End> {
        let path = &self.path;
        let (mut first, mut last) = (u64::MAX, 0u64);
        while let Some(s) = self
            .reader
            .next_slice()
            .with_context(|| path.display().to_string())?
        {
            first = first.min(s.start);
            last = last.max(s.start.saturating_add(s.length));
            each(s);
        }
        Ok(match self.reader.end() {
            Some(end) => end.clone(),
            None => End {
                duration_ns: last.saturating_sub(first.min(last)),
                ..End::default()
            },
        })
    }

    /// Says in one line what of the recording could not be read, if anything: where
    /// it stopped short of its end (it did not finish) and what was skipped as damaged.
    pub(crate) fn say_dropped(&self) {
        if let Some(line) = self.reader.dropped().said() {
            let path = self.path.display().to_string();
            eprintln!("bperf report: {}: {line}", escape_controls(&path));
        }
    }
}

/// Keeps the options that only make sense together honest.
pub(crate) fn check_report_args(a: &ReportArgs) -> Result<()> {
    let modes = [a.sort.is_some(), a.hist, a.timeline.is_some()];
    if modes.iter().filter(|&&m| m).count() > 1 {
        return Err(UsageError(
            "--sort, --hist and --timeline print different things: give one".into(),
        )
        .into());
    }
    if a.culprits.is_some() && modes.contains(&true) {
        return Err(UsageError(
            "--culprits follows the totals: give it without --sort, --hist or --timeline".into(),
        )
        .into());
    }
    crate::output::Format::of(a.field_separator.as_deref(), a.json)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap_pages_as_perf_takes_them() {
        assert_eq!(parse_pages("8", 4096).unwrap(), 8);
        assert!(parse_pages("6", 4096).is_err());
        assert_eq!(parse_pages("512K", 4096).unwrap(), 128);
        assert_eq!(parse_pages("100K", 4096).unwrap(), 32);
        assert_eq!(parse_pages("1M", 4096).unwrap(), 256);
        assert!(parse_pages("x", 4096).is_err());
        assert!(parse_pages("99999999G", 4096).is_err());
    }

    #[test]
    fn the_ring_holds_every_cpus_pages_in_a_power_of_two() {
        assert_eq!(ring_bytes(2, 1, 4096).unwrap(), 8192);
        assert_eq!(ring_bytes(3, 1, 4096).unwrap(), 16384);
        assert_eq!(ring_bytes(2, 256, 4096).unwrap(), 2 << 20);
        assert_eq!(ring_bytes(1, 1 << 19, 4096).unwrap(), 1 << 31);
        assert!(ring_bytes(2, 1 << 19, 4096).is_err());
        assert!(ring_bytes(usize::MAX, 2, 4096).is_err());
    }
}
