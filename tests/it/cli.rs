//! Bad input: one clear line on stderr, perf's exit status, no panic. No root needed
//! except where noted.

use crate::common;

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
    // perf reads --interval-count without -I, then refuses it (-EINVAL).
    let (code, _) = fails(&["stat", "--interval-count", "3", "true"]);
    assert_eq!(code, 234);
}

/// The binary, copied where any user may run it, for tests that drop privileges.
fn bperf_for_anyone() -> TempFile {
    let copy = TempFile::new("bperf-bin");
    std::fs::copy(common::BPERF_EXE, &copy.0).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// Runs the binary at `exe` as nobody, through setpriv (as root); None where that cannot
/// be done (no setpriv).
fn as_nobody(exe: &TempFile, args: &[&str]) -> Option<std::process::Output> {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe.0)
        .args(args)
        .output();
    match out {
        Ok(o) => Some(o),
        Err(e) => {
            assert!(
                std::env::var_os("BPERF_REQUIRE_PRIV").is_none(),
                "setpriv: {e}"
            );
            eprintln!("skipped: no setpriv ({e})");
            None
        }
    }
}

/// Sets kernel.perf_event_paranoid for as long as it lives, then puts it back.
struct Paranoid(String);

const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

impl Paranoid {
    fn set(level: i32) -> Paranoid {
        let old = std::fs::read_to_string(PARANOID).unwrap();
        std::fs::write(PARANOID, level.to_string()).unwrap();
        Paranoid(old)
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let _ = std::fs::write(PARANOID, self.0.trim());
    }
}

/// At Debian's and Ubuntu's default, kernel.perf_event_paranoid=2, anyone counts their
/// own command as perf does: in user space only, the events named `:u`. Counting CPUs
/// or cgroups is refused in one line that says what it needs.
#[test]
#[ignore = "needs root (make test runs it)"]
fn unprivileged_user_counts_own_command_and_is_told_what_else_needs() {
    let exe = bperf_for_anyone();
    let _paranoid = Paranoid::set(2);
    let Some(out) = as_nobody(
        &exe,
        &["stat", "-x,", "-e", "task-clock,page-faults", "--", "true"],
    ) else {
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    let faults = err
        .lines()
        .find(|l| l.split(',').nth(2) == Some("page-faults:u"))
        .unwrap_or_else(|| panic!("no page-faults:u line: {err}"));
    let n: u64 = faults.split(',').next().unwrap().parse().unwrap();
    assert!(n > 0, "{err}");
    assert!(err.lines().any(|l| l.contains(",task-clock:u,")), "{err}");

    for (args, needs, not) in [
        (
            &["stat", "-a", "-e", "task-clock", "--", "true"][..],
            "CAP_PERFMON",
            "CAP_BPF",
        ),
        (
            &[
                "stat",
                "-a",
                "-e",
                "task-clock",
                "--for-each-cgroup",
                "/",
                "--",
                "true",
            ][..],
            "CAP_BPF",
            "paranoid",
        ),
    ] {
        let out = as_nobody(&exe, args).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(255), "{args:?}: {err}");
        assert!(err.contains(needs) && !err.contains(not), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// A name with no letter or digit resembles no event: no "did you mean".
#[test]
fn nonsense_events_get_no_suggestion() {
    for bad in [":::", "🔥", "%%"] {
        let (code, err) = fails(&["stat", "-a", "-e", bad, "true"]);
        assert_eq!(code, 129, "{bad}: {err}");
        assert!(
            err.contains("see 'bperf list'") && !err.contains("did you mean"),
            "{bad}: {err}"
        );
    }
    let (_, err) = fails(&["stat", "-a", "-e", "task-clok", "true"]);
    assert!(err.contains("did you mean 'task-clock'"), "{err}");
}

/// What the user typed is quoted with its control characters escaped, in bperf's own
/// errors and in clap's.
#[test]
fn control_characters_are_escaped_in_errors() {
    // An unknown cgroup of --for-each-cgroup is refused as perf refuses it, once the
    // command line is read (-EINVAL).
    for (args, want) in [
        (&["stat", "-a", "-e", "x\u{1b}[2Jy", "true"][..], 129),
        (&["stat", "-a", "-I", "\u{1b}[2J", "true"][..], 129),
        (
            &["stat", "-a", "--for-each-cgroup", "a\nb", "true"][..],
            234,
        ),
    ] {
        let (code, err) = fails(args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(!err.contains('\u{1b}'), "{args:?}: raw escape in {err:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(
            err.contains("\\x1b") || err.contains("\\n"),
            "{args:?}: {err:?}"
        );
    }
}

/// A negative number after an option is that option's value, refused as one in a line
/// that names the option, as perf takes it ("-d -1"), not as an unknown option '-1'.
#[test]
fn a_negative_number_is_the_options_value() {
    for (args, option) in [
        (&["top", "--batch", "-d", "-1"][..], "--delay"),
        (&["top", "--batch", "-n", "-1"], "--iterations"),
        (&["record", "-m", "-1", "--", "true"], "-m -1"),
        (
            &["record", "--max-cgroups", "-1", "--", "true"],
            "--max-cgroups",
        ),
        (&["stat", "-I", "-1", "-a", "--", "true"], "-1"),
    ] {
        one_line_usage_error(args, option);
        let (_, err) = fails(args);
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

/// The output options stat refuses with -a are refused with -b too, with the same line
/// and status: -b goes through stat's checks. perf 6.12 refuses -B with -x under -b with
/// the status bperf gives (it takes an empty -x, and -x with -j, where bperf refuses
/// both, and so does report). The program (ID 999999, not there) is never looked for.
/// No privilege.
#[test]
fn stat_b_refuses_what_stat_refuses() {
    let perf = common::parity::perf_612();
    if perf.is_none() {
        eprintln!("no perf 6.12 ($PERF or /opt/perf-bpf/bin/perf): bperf -b checked against bperf -a only");
    }
    let cases: [&[&str]; 4] = [
        &["-B", "-x,"],
        &["-x,", "-j"],
        &["-x", ""],
        &["-x", "", "-j"],
    ];
    for options in cases {
        let mut results = Vec::new();
        for target in [&["-a"][..], &["-b", "999999"]] {
            let args = [&["stat"], target, options, &["true"]].concat();
            let (code, err) = fails(&args);
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            results.push((code, err));
        }
        assert_eq!(results[0], results[1], "{options:?}: -a, then -b");
        let Some(perf) = perf.as_ref().filter(|_| options == ["-B", "-x,"]) else {
            continue;
        };
        let args = [&["stat", "-b", "999999"], options, &["true"]].concat();
        let theirs = std::process::Command::new(perf)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            theirs.status.code(),
            Some(results[1].0),
            "{args:?}: perf, then bperf"
        );
    }
    let (code, err) = fails(&["report", "-i", "/nonexistent/bperf.data", "-x", ""]);
    assert_eq!((code, err.lines().count()), (129, 1), "{err}");
    assert!(err.contains("-x needs a separator"), "{err}");
}
