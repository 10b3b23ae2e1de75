//! The registry lock (an flock of a directory only root may open, beside the instance's
//! directory), the BPF file system it lives on, mounted when there is none (for root
//! alone), and the checks of the directory given for the shared counters.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::PERF_ATTR_MAP;

/// Where perf and bpftool expect a BPF file system; mounted when none is.
pub(super) const BPFFS: &str = "/sys/fs/bpf";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;
/// The source bperf names when it mounts the BPF file system (mountinfo shows it), so
/// that whichever session or keeper is the last out knows the mount is bperf's to undo,
/// whoever of them made it.
const MOUNT_SOURCE: &str = "bperf";
/// A directory bperf makes at the top of the BPF file system it mounts: before 5.11 the
/// kernel shows every BPF file system's source as `none`, and this says it is bperf's.
pub(super) const MOUNT_MARKER: &str = "bperf-mounted-this";

/// Whether the file system mounted on top at `point` is a BPF file system bperf mounted.
pub(super) fn mounted_by_bperf(point: &Path) -> bool {
    let mounts = crate::sys::mounts().unwrap_or_default();
    let top = mounts.iter().rev().find(|m| m.point == point);
    let marked = || fs::symlink_metadata(point.join(MOUNT_MARKER)).is_ok_and(|m| m.is_dir());
    top.is_some_and(|m| m.fstype == "bpf" && (m.source == MOUNT_SOURCE || marked()))
}

/// The registry lock: an flock of `LOCK_DIR` in the directory that holds the instance's
/// directory, a directory only its owner (root) may open, so that no other user can
/// hold the lock.
pub(super) struct Lock {
    _dir: OwnedFd,
}

/// The lock's directory, beside the instances; removed with the last instance.
pub(super) const LOCK_DIR: &str = "bperf-lock";
/// The lock bperf takes before it mounts a BPF file system: a file only root may open.
const MOUNT_LOCK: &str = "/run/bperf-bpffs.lock";
/// How long bperf waits for a lock: sessions hold it for a moment.
const LOCK_WAIT: Duration = Duration::from_secs(5);
const LOCK_POLL: Duration = Duration::from_millis(10);

/// Set once SIGINT or SIGTERM came: a session that waits to join gives up.
pub static STOP_ASKED: AtomicBool = AtomicBool::new(false);

fn same_file(fd: BorrowedFd, path: &Path) -> bool {
    let (Ok(a), Ok(b)) = (rustix::fs::fstat(fd), fs::symlink_metadata(path)) else {
        return false;
    };
    a.st_ino == b.ino() && a.st_dev == b.dev()
}

fn is_bpffs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type == BPF_FS_MAGIC)
}

/// Takes the registry lock on `parent`, mounting a BPF file system at /sys/fs/bpf
/// first when none is there and `mount` says so (None if it does not: there is no
/// instance). A session that joins (`interruptible`) gives up on SIGINT or SIGTERM.
pub(super) fn lock(parent: &Path, mount: bool, interruptible: bool) -> Result<Option<Lock>> {
    let path = parent.join(LOCK_DIR);
    loop {
        if !is_bpffs(parent) {
            if !mount {
                return Ok(None);
            }
            mount_bpffs(parent, interruptible)?;
        }
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
        let fd = open_private(&path, true)?;
        flock_within(&fd, &path, interruptible)?;
        // Removed (by the last instance out) or unmounted while we waited: lock what is
        // there now.
        if same_file(fd.as_fd(), &path) {
            return Ok(Some(Lock { _dir: fd }));
        }
    }
}

/// Mounts a BPF file system at `point` (which must be /sys/fs/bpf) that only root may
/// enter, under `MOUNT_LOCK`, unless another session mounted one meanwhile.
fn mount_bpffs(point: &Path, interruptible: bool) -> Result<()> {
    if point != Path::new(BPFFS) {
        bail!(
            "{} is not on a BPF file system (mount -t bpf bpf DIR)",
            point.display()
        );
    }
    let lock_path = Path::new(MOUNT_LOCK);
    loop {
        let fd = match open_private(lock_path, false) {
            Ok(fd) => Some(fd),
            // No /run to lock in (a read-only or missing one): mounted unlocked.
            Err(e) if e.downcast_ref::<std::io::Error>().is_some() => None,
            Err(e) => return Err(e),
        };
        if let Some(fd) = &fd {
            flock_within(fd, lock_path, interruptible)?;
            if !same_file(fd.as_fd(), lock_path) {
                continue;
            }
        }
        let mounted = match is_bpffs(point) {
            true => Ok(()),
            false => rustix::mount::mount(
                MOUNT_SOURCE,
                point,
                "bpf",
                rustix::mount::MountFlags::empty(),
                Some(c"mode=0700"),
            )
            .with_context(|| format!("mounting a BPF file system at {}", point.display())),
        };
        if mounted.is_ok() {
            // Said by its source too where the kernel keeps it; not being able to mark
            // it only leaves it mounted.
            let _ = fs::DirBuilder::new()
                .mode(0o700)
                .create(point.join(MOUNT_MARKER));
        }
        if fd.is_some() {
            let _ = fs::remove_file(lock_path);
        }
        return mounted;
    }
}

/// Opens the lock at `path` (a directory, or a file made if missing), refusing one that
/// this user does not own alone: another user could hold it.
fn open_private(path: &Path, dir: bool) -> Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = match dir {
        true => rustix::fs::open(path, flags | OFlags::DIRECTORY, Mode::empty()),
        false => rustix::fs::open(path, flags | OFlags::CREATE, Mode::RUSR | Mode::WUSR),
    };
    let fd = opened.map_err(|e| {
        anyhow::Error::from(std::io::Error::from(e)).context(format!("opening {}", path.display()))
    })?;
    let st = rustix::fs::fstat(&fd).with_context(|| format!("reading {}", path.display()))?;
    refuse_foreign(path, st.st_uid, st.st_mode)?;
    Ok(fd)
}

/// Refuses a directory or file of bperf's at `path` (owner `uid`, `mode`) that another
/// user owns or may write.
pub(super) fn refuse_foreign(path: &Path, uid: u32, mode: u32) -> Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if uid != me {
        bail!(
            "{} belongs to uid {uid}, not to uid {me}: bperf keeps nothing there (remove it: rm -r {})",
            path.display(),
            path.display()
        );
    }
    if mode & 0o022 != 0 {
        bail!(
            "{} may be written by other users (mode {:o}): bperf keeps nothing there (remove it: rm -r {})",
            path.display(),
            mode & 0o7777,
            path.display()
        );
    }
    Ok(())
}

/// Takes an exclusive flock of `fd` (the lock at `path`) within `LOCK_WAIT`, or says who
/// may hold it; gives up on SIGINT or SIGTERM when `interruptible`.
fn flock_within(fd: &OwnedFd, path: &Path, interruptible: bool) -> Result<()> {
    use rustix::fs::FlockOperation::NonBlockingLockExclusive;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match rustix::fs::flock(fd, NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
        if interruptible && STOP_ASKED.load(Ordering::Relaxed) {
            bail!("stopped while waiting for the lock {}", path.display());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} stayed locked for {} s: another bperf session holds it (see fuser -v {})",
                path.display(),
                LOCK_WAIT.as_secs(),
                path.display()
            );
        }
        std::thread::sleep(LOCK_POLL);
    }
}

/// Checks the directory for the shared counters (--bpf-attr-map, or the default).
pub fn check_dir(dir: &Path) -> Result<()> {
    if dir == Path::new(PERF_ATTR_MAP) {
        bail!("{PERF_ATTR_MAP} is perf's own registry: give bperf a directory of its own");
    }
    if dir.parent().is_none_or(|p| p.as_os_str().is_empty()) {
        bail!(
            "{}: the shared counters need a directory in a BPF file system",
            dir.display()
        );
    }
    if fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        bail!("{} exists and is not a directory", dir.display());
    }
    Ok(())
}

/// Refuses an instance directory at `dir` that another user owns or may write, and one
/// in a directory every user may write without the sticky bit (anyone could move it).
pub(super) fn check_instance_dir(dir: &Path) -> Result<()> {
    let parent = dir.parent().context("no parent directory")?;
    let p = fs::metadata(parent).with_context(|| format!("reading {}", parent.display()))?;
    if p.mode() & 0o1002 == 0o002 {
        bail!(
            "{} may be written by every user and is not sticky: bperf pins nothing in it",
            parent.display()
        );
    }
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => refuse_foreign(dir, m.uid(), m.mode()),
        Ok(_) => bail!("{} exists and is not a directory", dir.display()),
        Err(_) => Ok(()),
    }
}

pub(super) fn open_dir(dir: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfs_registry_is_refused() {
        assert!(check_dir(Path::new(PERF_ATTR_MAP)).is_err());
        assert!(check_dir(Path::new("/")).is_err());
        assert!(check_dir(Path::new("/sys/fs/bpf/mine")).is_ok());
    }
}
