//! `bperf record` and `bperf report`: every slice of time a CPU gives a monitored cgroup,
//! with what each event counted in it, streamed from the BPF program through one BPF
//! ring buffer into a file (bperf.data, see bperf_data.rs), and read back as totals,
//! breakdowns, distributions and a timeline.
//!
//! Recording: the counter is stat's, with the ring buffer; one thread drains the ring
//! into the file while the main thread waits for the command or a signal. The counter's
//! last read closes the recording (no slice is sent after it), so the slices add up to
//! the totals the file ends with.

pub mod analysis;
pub mod bperf_data;
pub mod perfetto;
mod print;
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

use crate::bpf::slice_ring::{self, SliceRing};
use crate::cli::{RecordArgs, ReportArgs};
use crate::session::containers::ContainerNames;
use crate::session::{self, Open, Plan, Wake};
use crate::sys::process::Workload;
use crate::UsageError;
use bperf_data::{End, Header, RecordedCgroup};

pub use print::report;

/// What record counts when told nothing: time and switches, the two every slice has.
pub const DEFAULT_EVENTS: &str = "task-clock,context-switches";

/// Ring buffer pages for each CPU when -m is not given (bench/results/levers.md: no
/// slice lost at the highest switch rate this VM reaches).
pub const DEFAULT_PAGES: usize = 256;

/// How often the reader drains the ring even when no CPU woke it.
const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// -m: a number of pages (a power of two) or a size with B, K, M or G, rounded up to a
/// power of two pages, as perf takes it.
pub fn parse_pages(s: &str, page_size: usize) -> Result<usize> {
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
    out: bperf_data::Writer<Output>,
    slices: u64,
}

/// Drains the ring buffer into `out` until `stop`, then once more.
fn drain_ring(
    ring: SliceRing,
    out: bperf_data::Writer<Output>,
    stop: Arc<AtomicBool>,
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
    loop {
        let last = stop.load(Ordering::Acquire);
        reader.drain()?;
        if let Some(e) = sink.borrow_mut().2.take() {
            return Err(e).context("writing the slices");
        }
        if last {
            break;
        }
        reader.wait_and_drain(DRAIN_EVERY)?;
    }
    drop(reader);
    let (out, slices, _) = sink.into_inner();
    Ok(Drained { out, slices })
}

/// A file being written, and how many bytes went into it.
struct Counted {
    file: File,
    bytes: u64,
}

impl Write for Counted {
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
type Output = BufWriter<Counted>;

/// Opens `path` for the recording (see data_file::create: an earlier recording is
/// kept as `path`.old, a device, FIFO or `-` written into).
fn create_output(path: &Path) -> Result<Output> {
    let file = crate::data_file::create(path)?;
    Ok(BufWriter::with_capacity(
        1 << 20,
        Counted { file, bytes: 0 },
    ))
}

/// The header of the recording of `plan`.
fn header(plan: &Plan, supported: &[bool], a: &RecordArgs) -> Header {
    // The containers' names as their runtimes give them now: report needs no runtime.
    let mut containers = ContainerNames::system();
    containers.add(&plan.cgroups);
    let cgroups = plan
        .cgroups
        .iter()
        .enumerate()
        .map(|(slot, c)| RecordedCgroup {
            slot,
            id: c.id,
            name: c.name.clone(),
            path: c.path.display().to_string(),
            container: containers.column(c.id),
        })
        .collect();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Header {
        events: plan.events.iter().map(|e| e.name.clone()).collect(),
        supported: supported.to_vec(),
        cgroups,
        cpus: plan.cpus.clone(),
        clock: match std::env::var_os("BPERF_READ_HELPER").is_some_and(|v| v == "1") {
            true => "ktime".into(),
            false => "sched_clock".into(),
        },
        command: a.command.clone(),
        started,
    }
}

/// Runs `bperf record`; returns the process exit code.
pub fn run(a: &RecordArgs) -> Result<i32> {
    let mut plan = Plan::new(&a.request())?;
    if plan.shared.is_some() {
        return Err(UsageError(
            "bperf record counts on its own: no --bpf-counters or :b events".into(),
        )
        .into());
    }
    let pages = match &a.mmap_pages {
        Some(s) => parse_pages(s, slice_ring::page_size())?,
        None => DEFAULT_PAGES,
    };
    let ring = open_ring(plan.cpus.len(), pages)?;
    let (tx, wakes) = mpsc::channel();
    session::forward_signals(tx.clone())?;
    let workload = match a.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&a.command)?),
    };
    let mut storage = MaybeUninit::uninit();
    let how = Open {
        inherit: true,
        verbose: a.verbose.level,
        name_user_only: true,
        slice_ring: Some(&ring),
        ..Open::default()
    };
    let mut counter = session::open_counter(&mut plan, &how, &mut storage)?;
    let supported: Vec<bool> = (0..plan.events.len())
        .map(|i| counter.supported(i))
        .collect();
    // The command runs before the file is touched: a command that cannot run leaves an
    // earlier recording as it was. Its first slices wait in the ring meanwhile.
    let child = match workload.map(|w| w.start(move |st, ru| drop(tx.send(Wake::Exited(st, ru))))) {
        Some(Err(e)) => {
            eprintln!("Workload failed: {e}");
            return Ok(255);
        }
        Some(Ok(child)) => Some(child),
        None => None,
    };
    let out = bperf_data::Writer::new(
        create_output(&a.output)?,
        &header(&plan, &supported, a),
        a.compression_level,
    )
    .with_context(|| format!("cannot write to {}", a.output.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(ring, out, stop.clone());
    let start = Instant::now();
    let code = wait_for_end(&wakes, child.as_ref());
    counter.close_recording();
    let totals = counter.read()?;
    let duration = start.elapsed();
    let lost = counter.slices_lost()?;
    drop(counter);
    stop.store(true, Ordering::Release);
    let drained = reader.join().expect("the ring reader does not panic")?;
    let end = End {
        duration_ns: duration.as_nanos() as u64,
        lost,
        // The program counts every slice the ring had no room for in `lost`.
        ring_lost: Vec::new(),
        totals: per_slot_totals(&plan, &totals),
    };
    let bytes = finish_file(drained.out, &end, &a.output)?;
    say_written(&a.output, bytes, drained.slices, end.lost_total());
    Ok(code)
}

/// The counters' totals as the end block keeps them: [slot][event][CPU position].
fn per_slot_totals(
    plan: &Plan,
    totals: &crate::reading::Snapshot,
) -> Vec<Vec<Vec<crate::reading::Reading>>> {
    (0..plan.cgroups.len())
        .map(|slot| {
            (0..plan.events.len())
                .map(|e| {
                    (0..plan.cpus.len())
                        .map(|c| totals.get(slot, e, c))
                        .collect()
                })
                .collect()
        })
        .collect()
}

fn spawn_reader(
    ring: SliceRing,
    out: bperf_data::Writer<Output>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<Drained>> {
    std::thread::spawn(move || drain_ring(ring, out, stop))
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

/// Waits for the command to end (a signal is passed on to it) or, without one, for a
/// signal; bperf's exit status, as perf's.
fn wait_for_end(wakes: &mpsc::Receiver<Wake>, child: Option<&crate::sys::process::Child>) -> i32 {
    loop {
        match wakes.recv() {
            Ok(Wake::Exited(st, _)) => return crate::sys::process::exit_code(st),
            Ok(Wake::Signal(_)) if child.is_some() => {
                child.into_iter().for_each(|c| c.signal(Signal::TERM));
            }
            Ok(Wake::Signal(sig)) => return 128 + sig,
            // Record sends itself no other wakes.
            Ok(Wake::TargetsEnded | Wake::Control(_) | Wake::Cgroups) => {}
            Ok(Wake::Request(none)) => match none {},
            Err(_) => return 255,
        }
    }
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
pub struct Input {
    reader: bperf_data::Reader<Box<dyn Read>>,
    path: PathBuf,
}

/// How much report reads at once.
const READ_BUFFER: usize = 1 << 20;

/// The recording in `path` (`-`: standard input), its header read, or one line saying
/// why it cannot be read.
pub fn open(path: &Path) -> Result<Input> {
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
    Ok(Input {
        reader,
        path: path.to_path_buf(),
    })
}

/// The recording in `path` opened for another pass: it must be a file, not a pipe.
pub fn open_again(path: &Path) -> Result<Input> {
    let regular = path.as_os_str() != "-" && std::fs::metadata(path).is_ok_and(|m| m.is_file());
    if !regular {
        return Err(UsageError(format!(
            "{}: --timeline reads the recording twice: give it a file, not a pipe",
            path.display()
        ))
        .into());
    }
    open(path)
}

impl Input {
    pub fn header(&self) -> &bperf_data::Header {
        self.reader.header()
    }

    /// Gives every slice to `each`, in the file's order; the end block.
    pub fn each_slice(&mut self, mut each: impl FnMut(&bperf_data::Slice)) -> Result<End> {
        let path = &self.path;
        while let Some(s) = self
            .reader
            .next_slice()
            .with_context(|| path.display().to_string())?
        {
            each(s);
        }
        Ok(self.reader.end().cloned().unwrap_or_default())
    }
}

/// Keeps the options that only make sense together honest.
pub fn check_report_args(a: &ReportArgs) -> Result<()> {
    let modes = [a.sort.is_some(), a.hist, a.timeline.is_some()];
    if modes.iter().filter(|&&m| m).count() > 1 {
        return Err(UsageError(
            "--sort, --hist and --timeline print different things: give one".into(),
        )
        .into());
    }
    if a.field_separator.as_deref() == Some("") {
        return Err(UsageError("-x needs a separator".into()).into());
    }
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
