//! The registry lock (an flock of the directory that holds the instance's directory),
//! the BPF file system it lives on, mounted when there is none, and the check of a
//! directory given for the shared counters.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

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

/// The registry lock: an flock of the directory that holds the instance's directory.
pub(super) struct Lock {
    _dir: OwnedFd,
}

fn same_file(fd: BorrowedFd, path: &Path) -> bool {
    let (Ok(a), Ok(b)) = (rustix::fs::fstat(fd), fs::metadata(path)) else {
        return false;
    };
    a.st_ino == b.ino() && a.st_dev == b.dev()
}

fn is_bpffs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type == BPF_FS_MAGIC)
}

/// Takes the registry lock on `parent`, mounting a BPF file system at /sys/fs/bpf
/// first when none is there and `mount` says so (None if it does not: there is no
/// instance).
pub(super) fn lock(parent: &Path, mount: bool) -> Result<Option<Lock>> {
    loop {
        let fd = open_dir(parent).with_context(|| format!("opening {}", parent.display()))?;
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)
            .with_context(|| format!("locking {}", parent.display()))?;
        // Mounted or unmounted while we waited: lock what is there now.
        if !same_file(fd.as_fd(), parent) {
            continue;
        }
        if is_bpffs(parent) {
            return Ok(Some(Lock { _dir: fd }));
        }
        if !mount {
            return Ok(None);
        }
        if parent != Path::new(BPFFS) {
            bail!(
                "{} is not on a BPF file system (mount -t bpf bpf DIR)",
                parent.display()
            );
        }
        rustix::mount::mount(
            MOUNT_SOURCE,
            parent,
            "bpf",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .with_context(|| format!("mounting a BPF file system at {}", parent.display()))?;
        // Said by its source too where the kernel keeps it; not being able to mark it
        // only leaves it mounted.
        let _ = fs::create_dir(parent.join(MOUNT_MARKER));
    }
}

/// Checks a directory given for the shared counters (--bpf-attr-map).
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
