//! Workloads for bperf's integration tests (built by `cargo test`; not part of bperf).
//!
//!   workload spin MS [PROCS [SLEEP_MS]]   sleep SLEEP_MS, write 0 to PROCS (move self), spin MS;
//!                                          SLEEP_MS `stop`: stop (SIGSTOP) until continued;
//!                                          PROCS `-`: stay
//!   workload pingpong ROUNDS [CHILD_PROCS] bounce a byte ROUNDS times with a child process,
//!                                          which first moves itself to CHILD_PROCS
//!   workload echo                          the child side of pingpong
//!   workload faults PAGES [PROCS]          move to PROCS, touch PAGES fresh pages
//!   workload reaped PROCS MODE ARGS...     run `workload MODE ARGS...` as a child that
//!                                          joins PROCS before its exec, reap it and print
//!                                          `reaped_ivcs=I`: its involuntary switches over
//!                                          its whole life, exit included
//!
//! Each process prints `pid=P mode=MODE cs=N faults=M task_clock_ns=T run_ns=R` to stderr just before
//! it exits: its own getrusage (switches and faults since it moved into its cgroup, its
//! whole life if it did not move), and the kernel's task-clock of the process since it moved into its cgroup
//! (its whole life if it did not move), counted by a perf event it opens on itself first
//! thing; then `ivcs=I run_delay_ns=D`: its involuntary switches (getrusage, whole life) and
//! the time this thread waited runnable (/proc/thread-self/schedstat, whole life). task-clock is the clock perf and bperf count with; the
//! scheduler's own accounting, cpu.stat included, leaves out time stolen by the host.
//! With `--stop-at-end` among its arguments, it stops itself (SIGSTOP) after its report,
//! until continued.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bperf::event::{Attr, TYPE_SOFTWARE};
use bperf::sys::perf_event::{self, Role, Scope};

/// The task-clock counter of this process (none if the kernel refuses), and its reading
/// when it joined its cgroup.
static TASK_CLOCK: OnceLock<Option<OwnedFd>> = OnceLock::new();
static JOINED_AT: AtomicU64 = AtomicU64::new(0);
/// Its page faults and context switches when it joined its cgroup.
static FAULTS_AT_JOIN: AtomicU64 = AtomicU64::new(0);
static SWITCHES_AT_JOIN: AtomicU64 = AtomicU64::new(0);

fn rusage() -> libc::rusage {
    // SAFETY: rusage is a plain struct, all zeroes a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage(2) fills the live struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

fn faults(ru: &libc::rusage) -> u64 {
    (ru.ru_minflt + ru.ru_majflt) as u64
}

fn switches(ru: &libc::rusage) -> u64 {
    (ru.ru_nvcsw + ru.ru_nivcsw) as u64
}

fn task_clock_ns() -> u64 {
    let fd = TASK_CLOCK.get().and_then(Option::as_ref);
    fd.and_then(|fd| perf_event::read(fd).ok())
        .map_or(0, |r| r.counter)
}

fn move_self(procs: &str) {
    std::fs::write(procs, "0").unwrap_or_else(|e| panic!("cannot join {procs}: {e}"));
    JOINED_AT.store(task_clock_ns(), Ordering::Relaxed);
    let ru = rusage();
    FAULTS_AT_JOIN.store(faults(&ru), Ordering::Relaxed);
    SWITCHES_AT_JOIN.store(switches(&ru), Ordering::Relaxed);
}

/// Runs the workload with `args` as a child that joins the cgroup of `procs` between its
/// fork and its exec, and prints, once it is reaped, its involuntary switches over its
/// whole life (wait4's rusage), which include those of its exit, after the child's own
/// report. The reaper itself stays where it is.
fn reaped(procs: &str, args: &[String]) {
    let path = std::ffi::CString::new(procs).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(args);
    // SAFETY: the hook runs in the forked child before its exec and calls only open(2),
    // write(2) and close(2) on memory allocated before the fork.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            let wrote = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            if fd >= 0 {
                libc::close(fd);
            }
            match wrote {
                true => Ok(()),
                false => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run it in {procs}: {e}"));
    // SAFETY: rusage is a plain struct, all zeroes a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut status = 0;
    // SAFETY: wait4(2) on our own child, writing into the live status and rusage.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(
        pid,
        child.id() as i32,
        "wait4: {}",
        std::io::Error::last_os_error()
    );
    let line = format!("reaped_ivcs={}\n", ru.ru_nivcsw);
    let _ = std::io::stderr().write_all(line.as_bytes());
    std::process::exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    });
}

/// Opens a task-clock counter on this process (this thread; the workloads have one),
/// through bperf's own perf_event boundary.
fn open_task_clock() -> Option<OwnedFd> {
    let task_clock = Attr {
        type_: TYPE_SOFTWARE,
        config: 1, // PERF_COUNT_SW_TASK_CLOCK
        ..Attr::default()
    };
    // A CPU counter's flags (enabled, not inherited), opened on this thread.
    let attr = perf_event::counting_attr(&task_clock, Scope::Cpu(0), Role::Single);
    perf_event::open_with_fallback(attr, Scope::Task(0), None, None).ok()
}

/// The time this thread has run over its whole life, exec and what came before it
/// included, as the scheduler counts it (ns): schedstat's first field, brought up to
/// date. /proc/thread-self/schedstat leaves out the running slice so far, which the
/// scheduler adds only at its next tick or switch (21 ms and more on a loaded machine);
/// the thread's CPU clock adds it.
fn run_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec, ours.
    match unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } {
        0 => ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        _ => schedstat_field(0),
    }
}

/// Field `i` of /proc/thread-self/schedstat: 0 the time run, 1 the time waited runnable
/// (run_delay), in ns.
fn schedstat_field(i: usize) -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(i)?.parse().ok())
        .unwrap_or(0)
}

/// Touches `pages` pages of fresh anonymous memory: one page fault each. Transparent huge
/// pages are refused for the mapping: where the kernel gives them to every large mapping
/// (Debian's kernels: THP `always`), one fault would fill 512 pages.
fn touch_fresh_pages(pages: usize) {
    let len = pages * 4096;
    // SAFETY: a private anonymous mapping of our own, unmapped below; writes stay in it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert!(p != libc::MAP_FAILED, "mmap of {len} bytes failed");
        libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        let bytes = p.cast::<u8>();
        for i in 0..pages {
            std::ptr::write_volatile(bytes.add(i * 4096), 1);
        }
        libc::munmap(p, len);
    }
}

fn report(mode: &str) {
    let ru = rusage();
    let ns = task_clock_ns().saturating_sub(JOINED_AT.load(Ordering::Relaxed));
    // One write(2), so that reports of processes sharing stderr never interleave.
    let line = format!(
        "pid={} mode={mode} cs={} faults={} task_clock_ns={ns} run_ns={} ivcs={} run_delay_ns={}\n",
        std::process::id(),
        switches(&ru) - SWITCHES_AT_JOIN.load(Ordering::Relaxed),
        faults(&ru) - FAULTS_AT_JOIN.load(Ordering::Relaxed),
        run_ns(),
        ru.ru_nivcsw,
        schedstat_field(1)
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
}

fn main() {
    let _ = TASK_CLOCK.set(open_task_clock());
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let stop_at_end = args.iter().any(|a| a == "--stop-at-end");
    args.retain(|a| a != "--stop-at-end");
    let arg = |i: usize| args.get(i).map(String::as_str);
    match arg(0) {
        Some("spin") => {
            let ms: u64 = arg(1).expect("MS").parse().unwrap();
            match arg(3) {
                // SAFETY: raise(3) of a signal whose default action stops this process.
                Some("stop") => unsafe {
                    libc::raise(libc::SIGSTOP);
                },
                Some(sleep) => std::thread::sleep(Duration::from_millis(sleep.parse().unwrap())),
                None => {}
            }
            if let Some(procs) = arg(2).filter(|p| *p != "-") {
                move_self(procs);
            }
            let end = Instant::now() + Duration::from_millis(ms);
            let mut x = 0u64;
            while Instant::now() < end {
                for i in 0..10_000u64 {
                    x = x.wrapping_mul(31).wrapping_add(i);
                }
                std::hint::black_box(x);
            }
        }
        Some("pingpong") => {
            let rounds: u64 = arg(1).expect("ROUNDS").parse().unwrap();
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.arg("echo").stdin(Stdio::piped()).stdout(Stdio::piped());
            if let Some(p) = arg(2) {
                cmd.arg(p);
            }
            let mut child = cmd.spawn().expect("spawn echo child");
            let mut to = child.stdin.take().unwrap();
            let mut from = child.stdout.take().unwrap();
            let mut b = [0u8; 1];
            // One round first, so the child has moved before counting rounds.
            for _ in 0..rounds {
                to.write_all(&b).unwrap();
                from.read_exact(&mut b).unwrap();
            }
            drop(to);
            child.wait().unwrap();
        }
        Some("echo") => {
            if let Some(p) = arg(1) {
                move_self(p);
            }
            let (mut i, mut o) = (std::io::stdin().lock(), std::io::stdout().lock());
            let mut b = [0u8; 1];
            while i.read_exact(&mut b).is_ok() {
                if o.write_all(&b).and_then(|_| o.flush()).is_err() {
                    break;
                }
            }
        }
        Some("reaped") => reaped(arg(1).expect("PROCS"), &args[2..]),
        Some("faults") => {
            let pages: usize = arg(1).expect("PAGES").parse().unwrap();
            if let Some(p) = arg(2) {
                move_self(p);
            }
            touch_fresh_pages(pages);
        }
        _ => {
            eprintln!("usage: workload spin|pingpong|echo|faults|reaped ...");
            std::process::exit(2);
        }
    }
    report(arg(0).unwrap_or(""));
    // A test whose count must end before this process's exit stops it here, after its
    // report, and continues it once done.
    if stop_at_end {
        // SAFETY: raise(3) of a signal whose default action stops this process.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}
