//! Bad input: one clear line on stderr, perf's exit status, no panic. No root needed
//! except where noted.

mod common;

use common::*;

/// Runs bperf with `args`; returns (exit code, stderr).
fn fails(args: &[&str]) -> (i32, String) {
    let out = bperf().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    (out.status.code().unwrap_or(-1), err)
}

fn one_line_usage_error(args: &[&str], needle: &str) {
    let (code, err) = fails(args);
    assert_eq!(code, 129, "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?} printed more than one line: {err}");
    assert!(err.contains(needle), "{args:?}: '{needle}' not in: {err}");
}

#[test]
fn unknown_event_is_named() {
    one_line_usage_error(&["stat", "-a", "-e", "task-clokc", "true"], "task-clokc");
}

#[test]
fn short_interval_is_refused() {
    one_line_usage_error(&["stat", "-a", "-I", "5", "true"], "10");
}

#[test]
fn bad_cpu_list_is_refused() {
    one_line_usage_error(&["stat", "-C", "3-1", "-e", "task-clock", "true"], "3-1");
    one_line_usage_error(&["stat", "-C", "9999", "-e", "task-clock", "true"], "9999");
}

#[test]
fn unknown_cgroup_names_the_mount() {
    let (code, err) = fails(&[
        "stat",
        "-a",
        "-e",
        "task-clock",
        "--for-each-cgroup",
        "no-such-cgroup-bperf",
        "true",
    ]);
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no-such-cgroup-bperf"), "{err}");
    assert!(
        err.contains(&cgroup2_mount().display().to_string()),
        "{err}"
    );
}

#[test]
fn conflicting_options_are_usage_errors() {
    let (code, _) = fails(&["stat", "-x,", "-j", "true"]);
    assert_eq!(code, 129);
    let (code, _) = fails(&["stat", "--bogus"]);
    assert_eq!(code, 129);
    let (code, _) = fails(&["stat", "--interval-count", "3", "true"]);
    assert_eq!(code, 129);
}

#[test]
fn unprivileged_user_is_told_which_capabilities() {
    // Only meaningful as root: drop to nobody with setpriv if it is there.
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0
        || std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("skipped: needs root and setpriv to drop privileges");
        return;
    }
    let paranoid =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    if paranoid.trim().parse::<i32>().unwrap_or(2) < 1 {
        eprintln!("skipped: perf_event_paranoid < 1 lets anyone count system-wide");
        return;
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_bperf"))
        .args(["stat", "-a", "-e", "task-clock", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("CAP_PERFMON") && err.contains("CAP_BPF"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
