//! The command bperf counts: forked first, held before exec until the counters are
//! open, then released, so that counting covers it from its first instruction.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{Context, Result};

pub struct Workload {
    pid: libc::pid_t,
    /// Writing a byte here lets the child exec; closing it unwritten makes the child exit.
    go: Option<OwnedFd>,
    /// Closed by a successful exec; carries errno when exec fails.
    err: OwnedFd,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is two writable ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned these fds to us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Workload {
    /// Forks a child that waits for `start` before it executes `argv`.
    pub fn prepare(argv: &[String]) -> Result<Workload> {
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("the command contains a NUL byte")?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let (go_r, go_w) = pipe().context("creating a pipe")?;
        let (err_r, err_w) = pipe().context("creating a pipe")?;

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
        Ok(Workload {
            pid,
            go: Some(go_w),
            err: err_r,
        })
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Lets the child exec. On failure the child has exited; the error is exec's.
    pub fn start(mut self) -> io::Result<libc::pid_t> {
        let go = self.go.take().expect("a workload starts once");
        let b = 1u8;
        // SAFETY: writing one byte from a live buffer.
        unsafe { libc::write(go.as_raw_fd(), (&b as *const u8).cast(), 1) };
        drop(go);
        let mut errno = 0i32;
        // SAFETY: reading into a live i32.
        let n = unsafe { libc::read(self.err.as_raw_fd(), (&mut errno as *mut i32).cast(), 4) };
        if n == 4 {
            let _ = wait4(self.pid);
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(self.pid)
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

/// Waits for `pid` and returns its status and resource usage.
pub fn wait4(pid: libc::pid_t) -> Option<(ExitStatus, libc::rusage)> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Some((ExitStatus::from_raw(status), ru));
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

pub fn timeval(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}
