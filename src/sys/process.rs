//! The command bperf counts (fork, exec, signals, wait): forked first, held before exec
//! until the counters are open, then released, so that counting covers it from its
//! first instruction.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

pub struct Workload {
    pid: libc::pid_t,
    /// Writing a byte here lets the child exec; closing it unwritten makes the child exit.
    go: Option<OwnedFd>,
    /// Closed by a successful exec; carries errno when exec fails.
    err: OwnedFd,
    pidfd: Option<OwnedFd>,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(pipe_with(PipeFlags::CLOEXEC)?)
}

impl Workload {
    /// Forks a child that waits for `start` before it executes `argv`.
    pub(crate) fn prepare(argv: &[String]) -> Result<Workload> {
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("the command contains a NUL byte")?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let (go_r, go_w) = pipe().context("creating a pipe")?;
        let (err_r, err_w) = pipe().context("creating a pipe")?;

        // SAFETY: no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child only makes async-signal-safe calls before exec or _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error()).context("cannot fork the workload");
        }
        if pid == 0 {
            // SAFETY: child side; no allocation, only raw syscalls.
            unsafe {
                // Our copies of the parent's ends: without this, the parent closing `go`
                // would not wake us.
                libc::close(go_w.as_raw_fd());
                libc::close(err_r.as_raw_fd());
                // bperf's own handlers mean nothing here: a signal kills a held child.
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                // Ended with bperf, however bperf ends (SIGKILL included), as on every
                // other way out, where bperf sends SIGTERM itself.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::getppid() != parent {
                    libc::_exit(127);
                }
                let mut b = 0u8;
                if libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) != 1 {
                    libc::_exit(127);
                }
                libc::execvp(ptrs[0], ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        let mut workload = Workload {
            pid,
            go: Some(go_w),
            err: err_r,
            pidfd: None,
        };
        // Our own unreaped child: the pid cannot be anybody else's yet.
        let pid = Pid::from_raw(pid).expect("fork returned a positive pid");
        let pidfd = pidfd_open(pid, PidfdFlags::empty()).context("cannot open a pidfd")?;
        workload.pidfd = Some(pidfd);
        Ok(workload)
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Lets the child exec and calls `on_exit` with its status once it has ended and
    /// been reaped. On failure the child has exited; the error is exec's.
    pub fn start(
        mut self,
        on_exit: impl FnOnce(ExitStatus, libc::rusage) + Send + 'static,
    ) -> io::Result<Child> {
        let go = self.go.take().expect("a workload starts once");
        let _ = rustix::io::write(&go, &[1u8]);
        drop(go);
        let mut errno = [0u8; 4];
        if let Ok(4) = rustix::io::read(&self.err, &mut errno) {
            let errno = i32::from_ne_bytes(errno);
            let _ = wait4(self.pid);
            return Err(io::Error::from_raw_os_error(errno));
        }
        let pid = self.pid;
        let waiter = std::thread::spawn(move || {
            if let Some((status, rusage)) = wait4(pid) {
                on_exit(status, rusage);
            }
        });
        Ok(Child {
            pidfd: self.pidfd.take().expect("a workload has a pidfd"),
            waiter: Some(waiter),
        })
    }
}

/// A command's exit status as a shell gives it: its code, or 128 + the signal that
/// ended it.
pub(crate) fn exit_code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// A started command. It is ended and reaped at the latest when this is dropped, on
/// every way out of bperf: SIGTERM, then SIGKILL if it is still there after
/// `GRACE`.
pub struct Child {
    /// Signals through it reach this process, never one that reuses its pid.
    pidfd: OwnedFd,
    /// Reaps the child; finished once it has.
    waiter: Option<JoinHandle<()>>,
}

/// How long a command has to end after SIGTERM before it gets SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

impl Child {
    /// Sends `sig`, unless the child has been reaped already.
    pub fn signal(&self, sig: Signal) {
        let _ = pidfd_send_signal(&self.pidfd, sig);
    }

    fn reaped(&self) -> bool {
        self.waiter.as_ref().is_none_or(|w| w.is_finished())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped() {
            self.signal(Signal::TERM);
            let deadline = Instant::now() + GRACE;
            while !self.reaped() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.signal(Signal::KILL);
        }
        if let Some(w) = self.waiter.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Workload {
    /// A workload never started (counting failed to set up) is not left behind: closing
    /// `go` makes the child exit, and it is reaped here.
    fn drop(&mut self) {
        if let Some(go) = self.go.take() {
            drop(go);
            let _ = wait4(self.pid);
        }
    }
}

/// Stops this process, as SIGSTOP does (procps top does so on SIGTSTP, once it has
/// given the terminal back); returns once it is continued.
pub(crate) fn stop_self() -> io::Result<()> {
    rustix::process::kill_process(rustix::process::getpid(), Signal::STOP)?;
    Ok(())
}

/// Waits for `pid` and returns its status and resource usage.
pub fn wait4(pid: libc::pid_t) -> Option<(ExitStatus, libc::rusage)> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4(2) with pointers to a live int and rusage.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Some((ExitStatus::from_raw(status), ru));
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

pub(crate) fn timeval(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

/// The threads of process `pid` as (thread id, command name), by thread id; an error if
/// there is no such process.
pub(crate) fn threads_of(pid: libc::pid_t) -> io::Result<Vec<(libc::pid_t, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = entry?.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that has just gone is not counted.
        if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) {
            out.push((tid, comm.trim_end().to_string()));
        }
    }
    out.sort();
    Ok(out)
}

/// Every thread of the system as (thread id, command name), process by process in the
/// order of their ids; those that end while they are listed are left out.
pub(crate) fn all_threads() -> Vec<(libc::pid_t, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<libc::pid_t> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .filter_map(|pid| threads_of(pid).ok())
        .flatten()
        .collect()
}

/// Thread `tid` as (thread id, command name); an error if there is no such thread.
pub fn thread(tid: libc::pid_t) -> io::Result<(libc::pid_t, String)> {
    let comm = std::fs::read_to_string(format!("/proc/{tid}/comm"))?;
    Ok((tid, comm.trim_end().to_string()))
}

/// Whether the process or thread `id` still runs (a zombie has ended).
pub fn alive(id: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{id}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// When process `pid` started (field 22 of /proc/PID/stat, in clock ticks since boot),
/// if it runs: with the pid, it names one process even after the pid is reused.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields count from after it.
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split(' ').nth(19)?.parse().ok()
}

/// The user and system time of process `id` so far (fields 14 and 15 of
/// /proc/ID/stat), in ns; None once it has been reaped.
pub(crate) fn cpu_times(id: libc::pid_t) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{id}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ').skip(11);
    let mut next = || fields.next()?.parse::<u64>().ok();
    let (user, system) = (next()?, next()?);
    Some((super::ticks_to_ns(user), super::ticks_to_ns(system)))
}

/// Calls `then` once every process or thread of `ids` has ended, from a thread of its
/// own. Processes are watched through pidfds, which tell at once; a thread that is not
/// a process's first has none before Linux 6.9, and is looked at every 20 ms.
pub(crate) fn when_all_end(
    ids: Vec<libc::pid_t>,
    then: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    let mut pidfds = Vec::new();
    let mut polled = Vec::new();
    for id in ids {
        match Pid::from_raw(id).map(|p| pidfd_open(p, PidfdFlags::empty())) {
            Some(Ok(fd)) => pidfds.push(fd),
            _ => polled.push(id),
        }
    }
    std::thread::Builder::new()
        .name("bperf-watch".into())
        .spawn(move || {
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let every = Timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            loop {
                polled.retain(|&id| alive(id));
                if pidfds.is_empty() && polled.is_empty() {
                    then();
                    return;
                }
                // A pidfd reads as ready once its process has ended.
                let mut fds: Vec<PollFd> = pidfds
                    .iter()
                    .map(|fd| PollFd::new(fd, PollFlags::IN))
                    .collect();
                let _ = poll(&mut fds, Some(&every));
                let ended: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
                drop(fds);
                let mut ended = ended.into_iter();
                pidfds.retain(|_| !ended.next().unwrap_or(false));
            }
        })?;
    Ok(())
}
