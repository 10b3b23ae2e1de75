//! The keeper: a small process the first session starts that releases what dead
//! sessions registered and removes the instance when its last session was killed, and
//! the watch in every session that starts a new keeper when the keeper is gone.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::instance::{remove_instance, Instance};
use super::lock::{lock, open_dir};

/// The hidden argument that makes bperf the keeper of the shared counters.
pub const KEEPER_ARG: &str = "__keep-shared";

/// How often the keeper looks for sessions that died.
const KEEPER_PERIOD: Duration = Duration::from_secs(1);

/// How often each session checks that the instance has a keeper, and starts one if not.
const KEEPER_CHECK: Duration = Duration::from_secs(1);

/// How long a new keeper tries to take the keeper lock: a session's check holds it for
/// a moment; another keeper holds it for good.
const KEEPER_LOCK_TRIES: u32 = 20;
const KEEPER_LOCK_WAIT: Duration = Duration::from_millis(10);

/// Whether the instance in `dir` (the directory with inode `ino`) has a keeper: the
/// keeper holds an exclusive flock of the directory for as long as it runs. True as
/// well when there is no such directory any more: nothing to keep.
fn has_keeper(dir: &Path, ino: u64) -> bool {
    use rustix::fs::FlockOperation::NonBlockingLockShared;
    let Ok(fd) = open_dir(dir) else {
        return true;
    };
    if !rustix::fs::fstat(&fd).is_ok_and(|st| st.st_ino == ino) {
        return true;
    }
    // Taken (and let go with the fd) only when no keeper holds it.
    rustix::fs::flock(&fd, NonBlockingLockShared).is_err()
}

/// Takes the keeper lock of `dir` for the life of this process; None when another
/// keeper holds it.
fn keeper_lock(dir: &Path) -> Option<OwnedFd> {
    let fd = open_dir(dir).ok()?;
    for _ in 0..KEEPER_LOCK_TRIES {
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Some(fd),
            Err(rustix::io::Errno::WOULDBLOCK) => std::thread::sleep(KEEPER_LOCK_WAIT),
            Err(_) => return None,
        }
    }
    None
}

/// Starts a keeper of the instance in `dir` (see `keep`), in a process group of its own
/// so that the terminal's signals to this session do not reach it.
pub(super) fn start_keeper(dir: &Path) -> Option<std::process::Child> {
    // This very binary, even if it was replaced or removed since it started.
    let mut cmd = std::process::Command::new("/proc/self/exe");
    std::os::unix::process::CommandExt::arg0(&mut cmd, "bperf");
    cmd.arg(KEEPER_ARG).arg(dir);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn().ok()
}

/// A session's thread that starts a keeper whenever the instance has none (the keeper
/// was killed), so that the instance is removed whatever ends in whatever order.
pub(super) struct KeeperWatch {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl KeeperWatch {
    /// Watches the instance in `dir`; `started` is the keeper this session started, if
    /// any (a child of this process, reaped here once it ends).
    pub(super) fn start(dir: &Path, started: Option<std::process::Child>) -> Result<KeeperWatch> {
        let ino = fs::metadata(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .ino();
        let dir = dir.to_path_buf();
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("bperf-keeper-watch".into())
            .spawn(move || {
                let mut children: Vec<std::process::Child> = started.into_iter().collect();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(KEEPER_CHECK)
                {
                    children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
                    if !has_keeper(&dir, ino) {
                        children.extend(start_keeper(&dir));
                    }
                }
            })
            .context("starting the shared counters' keeper watch")?;
        Ok(KeeperWatch { stop, thread })
    }

    pub(super) fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The keeper of the instance in `dir`: until the instance is gone, releases what dead
/// sessions registered, and removes the instance once no session is left, which is how
/// the last session's SIGKILL leaves nothing behind. One keeper at a time: a second
/// one, started by a session that found none, returns at once.
pub fn keep(dir: &Path) -> Result<()> {
    // SAFETY: plain signal dispositions: the keeper ignores the terminal's signals.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let parent = dir.parent().context("no parent directory")?;
    let Some(held) = keeper_lock(dir) else {
        return Ok(());
    };
    let dir_ino = rustix::fs::fstat(&held)?.st_ino;
    let inst = {
        let Some(_lock) = lock(parent, false, false)? else {
            return Ok(());
        };
        // The directory locked is the instance's (not one removed meanwhile).
        let same_dir = fs::metadata(dir).is_ok_and(|m| m.ino() == dir_ino);
        match same_dir && dir.join("registry").exists() {
            true => Instance::open(dir)?,
            false => return Ok(()),
        }
    };
    loop {
        std::thread::sleep(KEEPER_PERIOD);
        let Some(_lock) = lock(parent, false, false)? else {
            return Ok(());
        };
        // Removed by the last session out (a new instance has a keeper of its own).
        let same_dir = fs::metadata(dir).is_ok_and(|m| m.ino() == dir_ino);
        if !same_dir || !dir.join("registry").exists() {
            return Ok(());
        }
        let mut reg = inst.load_registry()?;
        let before = reg.live_sessions();
        inst.reap(&mut reg);
        if reg.live_sessions() == 0 {
            remove_instance(dir);
            return Ok(());
        }
        if reg.live_sessions() != before {
            inst.store_registry(&reg)?;
        }
    }
}
