//! perf's own stat shell tests (tools/perf/tests/shell of the perf source), run with a
//! `perf` that hands `stat` and `list` to bperf and everything else to that perf: each
//! test perf itself passes here passes with bperf too. perf 7.2's with bperf's default
//! output; perf 6.12's with BPERF_PERF_VERSION=6.12. The shell tests come with the
//! reference builds (scripts/build-perf-72: /opt/perf-72/tests/shell; $PERF72_SHELL
//! names another directory); without them the test is skipped, saying so.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::parity::{perf_612, perf_72};
use common::*;

/// The stat and list tests of perf 7.2's suite.
const TESTS_72: &[&str] = &[
    "stat.sh",
    "stat+std_output.sh",
    "stat+csv_output.sh",
    "stat+json_output.sh",
    "stat+csv_summary.sh",
    "stat_bpf_counters_cgrp.sh",
    "stat+shadow_stat.sh",
    "stat+event_uniquifying.sh",
    "stat_metrics_cgrp.sh",
    "list.sh",
    "stat_all_metricgroups.sh",
    "stat_all_metrics.sh",
    "stat_all_pmu.sh",
];

/// perf 6.12's stat shell tests: the seven its bperf-counters work was checked with.
/// They are the first seven of perf 7.2's list, under the same names.
const TESTS_612: &[&str] = TESTS_72.split_at(7).0;

/// What perf's shell tests exit with when they skip.
const SKIP: i32 = 2;

/// A directory with a `perf` that runs `bperf stat` and `bperf list`, and `perf` for
/// the rest (perf script, perf record, perf test).
fn wrapper(dir: &Path, perf: &Path) -> PathBuf {
    let bperf = common::BPERF_EXE;
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  stat|list) exec {bperf} \"$@\" ;;\n  *) exec {} \"$@\" ;;\nesac\n",
        perf.display()
    );
    let path = dir.join("perf");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    dir.to_path_buf()
}

/// Runs one shell test with `bin` first in PATH (at most 10 minutes): its exit status
/// and output.
fn run(script: &Path, bin: &Path, version: Option<&str>) -> (i32, String) {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("timeout");
    cmd.args(["600", "bash"])
        .arg(script)
        .current_dir(script.parent().unwrap())
        .env("PATH", path);
    match version {
        Some(v) => cmd.env(PERF_VERSION_ENV, v),
        None => cmd.env_remove(PERF_VERSION_ENV),
    };
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Each of `tests` in `shell` (a perf tree's tools/perf/tests/shell) that `perf` passes
/// passes with bperf as perf, printing perf `version`'s output (None: bperf's default).
fn same_verdicts(shell: &Path, perf: &Path, tests: &[&str], version: Option<&str>) {
    let dir = TempDir::new("perf-shell");
    let bin_dir = dir.0.join("bin");
    fs::create_dir_all(&bin_dir).unwrap();
    let bin = wrapper(&bin_dir, perf);
    let perf_dir = perf.parent().unwrap();
    let mut failed = Vec::new();
    for name in tests {
        let script = shell.join(name);
        if !script.exists() {
            failed.push(format!("{name}: not in {}", shell.display()));
            continue;
        }
        let (theirs, _) = run(&script, perf_dir, version);
        if theirs != 0 {
            eprintln!("{name}: perf itself exits {theirs} here (docs/perf-versions.md says why)");
            continue;
        }
        let (ours, text) = run(&script, &bin, version);
        eprintln!("{name}: perf 0, bperf {ours}");
        if ours != 0 && ours != SKIP {
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            failed.push(format!("{name} exits {ours}:\n{}", tail.join("\n")));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// perf 7.2's stat and list shell tests, bperf printing its default (perf 7.2's)
/// output.
#[test]
#[ignore = "needs root (make test runs it)"]
fn perf_72s_stat_shell_tests_pass_on_bperf() {
    let Some(perf) = perf_72() else {
        eprintln!("skipped: no perf 7.2 (scripts/build-perf-72) whose shell tests to run");
        return;
    };
    let shell = std::env::var_os("PERF72_SHELL")
        .map(PathBuf::from)
        .unwrap_or_else(|| perf.parent().unwrap().join("../tests/shell"));
    if !shell.join("stat.sh").exists() {
        eprintln!("skipped: no perf 7.2 shell tests in {}", shell.display());
        return;
    }
    let _g = serial();
    same_verdicts(&shell, &perf, TESTS_72, None);
}

/// perf 6.12's stat shell tests, bperf printing perf 6.12's output
/// (BPERF_PERF_VERSION=6.12, as a script written against it sets).
#[test]
#[ignore = "needs root (make test runs it)"]
fn perf_612s_stat_shell_tests_pass_on_bperf_as_612() {
    let Some(perf) = perf_612() else {
        eprintln!("skipped: no perf 6.12 (scripts/build-perf-612) whose shell tests to run");
        return;
    };
    let shell = perf.parent().unwrap().join("../tests/shell");
    if !shell.join("stat.sh").exists() {
        eprintln!(
            "skipped: no perf 6.12 shell tests in {} (scripts/build-perf-612 --shell-tests)",
            shell.display()
        );
        return;
    }
    let _g = serial();
    same_verdicts(&shell, &perf, TESTS_612, Some("6.12"));
}
