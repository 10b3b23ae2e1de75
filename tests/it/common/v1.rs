//! perf_event mounted as a cgroup v1 hierarchy by a test, and put back on cgroup2 when the
//! test ends however it ends. A v1 hierarchy outlives its unmount while any cgroup below
//! its root exists (one with a task, or one removed but not yet freed): /proc/cgroups
//! then shows perf_event on a hierarchy mounted nowhere, and perf's own `-G` on cgroup2
//! counts nothing until someone mounts it again, empties it and unmounts it. So does the
//! drop here, until /proc/cgroups shows hierarchy 0, and the test fails if it cannot.
//!
//! A test killed outright cannot drop it: the path of every hierarchy a test mounts is
//! kept in MOUNTED_AT while mounted, and the next test that mounts one first puts back
//! what such a test left.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::wait_for;

/// Where the mount point of a test's v1 hierarchy is written while it is mounted.
const MOUNTED_AT: &str = "/tmp/bperf-test-perf_event-v1";

/// perf_event's hierarchy in /proc/cgroups (0: cgroup2).
pub fn perf_event_hierarchy() -> u32 {
    let text = fs::read_to_string("/proc/cgroups").unwrap_or_default();
    bperf::cgroup::perf_event_hierarchy(&text).unwrap_or(0)
}

fn mounts() -> Vec<bperf::cgroup::Mount> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    bperf::cgroup::Mount::parse_mountinfo(&text)
}

/// Whether perf_event is mounted anywhere as a cgroup v1 hierarchy.
pub fn perf_event_mounted() -> bool {
    mounts()
        .iter()
        .any(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == "perf_event"))
}

pub fn is_mount_point(dir: &Path) -> bool {
    mounts().iter().any(|m| m.point == dir)
}

/// Mounts perf_event as a v1 hierarchy at `dir` (the existing one, if one lives on).
pub fn mount_v1(dir: &Path) -> bool {
    let st = Command::new("mount")
        .args(["-t", "cgroup", "-o", "perf_event", "cgroup"])
        .arg(dir)
        .status();
    st.is_ok_and(|s| s.success())
}

pub fn umount(dir: &Path) -> bool {
    let st = Command::new("umount").arg(dir).status();
    st.is_ok_and(|s| s.success())
}

/// The cgroup directories below `dir`.
pub fn child_dirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the cgroups below `dir`, deepest first (those still holding tasks stay).
pub fn remove_cgroups_below(dir: &Path) {
    for child in child_dirs(dir) {
        remove_cgroups_below(&child);
        let _ = fs::remove_dir(&child);
    }
}

/// Mounts perf_event as a v1 hierarchy at `dir` for a test, first putting back one a
/// killed test left. False (nothing mounted) if the mount fails.
pub fn mount_for_test(dir: &Path) -> bool {
    put_back_what_a_killed_test_left();
    if !mount_v1(dir) {
        return false;
    }
    let _ = fs::write(MOUNTED_AT, dir.as_os_str().as_encoded_bytes());
    true
}

/// Puts perf_event back on cgroup2 from the v1 hierarchy a test mounted at `dir`: mounted
/// again where it is not, emptied of its cgroups (their tasks must be gone), unmounted,
/// and so again until /proc/cgroups shows hierarchy 0. Whether it is.
pub fn put_back(dir: &Path) -> bool {
    let _ = fs::create_dir_all(dir);
    let restored = wait_for(60, || {
        if !is_mount_point(dir) && !mount_v1(dir) {
            return perf_event_hierarchy() == 0;
        }
        remove_cgroups_below(dir);
        umount(dir);
        wait_for(2, || perf_event_hierarchy() == 0)
    });
    if is_mount_point(dir) {
        umount(dir);
    }
    if restored {
        let _ = fs::remove_file(MOUNTED_AT);
    }
    restored
}

/// put_back() for a test that fails when it cannot: a machine left with perf_event on a
/// hierarchy mounted nowhere is a machine changed (not while the test is already failing:
/// a second panic would abort the run).
pub fn put_back_or_fail(dir: &Path) {
    if !put_back(dir) && !std::thread::panicking() {
        panic!(
            "perf_event is still on v1 hierarchy {} (mounted at {} by this test): not back on cgroup2",
            perf_event_hierarchy(),
            dir.display()
        );
    }
}

/// A hierarchy whose mount point MOUNTED_AT names, left by a test that was killed.
pub fn put_back_what_a_killed_test_left() {
    let Ok(dir) = fs::read_to_string(MOUNTED_AT) else {
        return;
    };
    let dir = PathBuf::from(dir);
    if perf_event_hierarchy() != 0 {
        eprintln!(
            "putting back perf_event's v1 hierarchy a killed test left at {}",
            dir.display()
        );
        put_back(&dir);
    }
    // The mount point the test made, where the layout's other controllers are.
    let _ = fs::remove_dir(&dir);
    let _ = fs::remove_file(MOUNTED_AT);
}
