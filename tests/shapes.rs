//! bperf's output has perf 6.12's shape, line by line: the same lines, fields and
//! padding, whatever the numbers. Checked against perf 6.12's output recorded in
//! tests/fixtures/perf-6.12/ and, when a perf 6.12 is on the machine ($PERF, or
//! /opt/perf-bpf/bin/perf), against perf itself, live. Needs root.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// Each case: a name and perf stat's arguments, the same for both tools.
const CASES: &[(&str, &[&str])] = &[
    (
        "task",
        &[
            "-e",
            "task-clock,context-switches,cycles,page-faults",
            "--",
            "sleep",
            "0.1",
        ],
    ),
    (
        "system",
        &[
            "-a",
            "-e",
            "task-clock,context-switches,cycles",
            "--",
            "sleep",
            "0.1",
        ],
    ),
    (
        "cgroup",
        &[
            "-a",
            "-e",
            "task-clock,context-switches,cycles",
            "--for-each-cgroup",
            "/",
            "--",
            "sleep",
            "0.1",
        ],
    ),
    (
        "interval",
        &[
            "-a",
            "-I",
            "100",
            "--interval-count",
            "2",
            "-e",
            "task-clock,cycles",
        ],
    ),
    (
        "interval-cgroup",
        &[
            "-a",
            "-I",
            "100",
            "--interval-count",
            "2",
            "-e",
            "task-clock,cycles",
            "-G",
            "/",
        ],
    ),
    (
        "csv",
        &[
            "-a",
            "-x,",
            "-e",
            "task-clock,context-switches,cycles",
            "--for-each-cgroup",
            "/",
            "--",
            "sleep",
            "0.1",
        ],
    ),
    (
        "csv-interval",
        &[
            "-a",
            "-x;",
            "-I",
            "100",
            "--interval-count",
            "2",
            "-e",
            "task-clock,cycles",
        ],
    ),
    (
        "json",
        &[
            "-a",
            "-j",
            "-e",
            "task-clock,context-switches,cycles",
            "--for-each-cgroup",
            "/",
            "--",
            "sleep",
            "0.1",
        ],
    ),
    (
        "json-interval",
        &[
            "-a",
            "-j",
            "-I",
            "100",
            "--interval-count",
            "1",
            "-e",
            "task-clock",
        ],
    ),
    (
        "summary",
        &[
            "-a",
            "-I",
            "100",
            "--interval-count",
            "2",
            "--summary",
            "-e",
            "task-clock,cycles",
        ],
    ),
    (
        "summary-csv",
        &[
            "-a",
            "-x,",
            "-I",
            "100",
            "--interval-count",
            "1",
            "--summary",
            "-e",
            "task-clock",
        ],
    ),
    (
        "summary-csv-plain",
        &[
            "-a",
            "-x,",
            "-I",
            "100",
            "--interval-count",
            "1",
            "--summary",
            "--no-csv-summary",
            "-e",
            "task-clock",
        ],
    ),
    ("null", &["-n", "--", "sleep", "0.1"]),
    (
        "per-cpu",
        &[
            "-a",
            "-A",
            "-e",
            "task-clock,cs,cycles,msr/tsc/,tsc",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-cpu-csv",
        &[
            "-a",
            "-A",
            "-x,",
            "-e",
            "task-clock,cycles",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-cpu-json",
        &["-a", "-A", "-j", "-e", "task-clock", "--", "sleep", "0.05"],
    ),
    (
        "per-cpu-interval",
        &[
            "-a",
            "-A",
            "-I",
            "100",
            "--interval-count",
            "1",
            "-e",
            "task-clock,cs",
        ],
    ),
    ("default-system", &["-a", "--", "sleep", "0.05"]),
    ("default-command", &["--", "sleep", "0.05"]),
    (
        "metric-only",
        &[
            "--metric-only",
            "-e",
            "task-clock,context-switches",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "metric-only-csv-per-cpu",
        &[
            "--metric-only",
            "-x,",
            "-A",
            "-a",
            "-e",
            "task-clock",
            "-I",
            "100",
            "--interval-count",
            "2",
        ],
    ),
    (
        "metric-only-json-cgroup",
        &[
            "--metric-only",
            "-j",
            "-a",
            "-e",
            "task-clock,cycles",
            "-G",
            "/,/",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "metric-only-per-socket",
        &[
            "--metric-only",
            "--per-socket",
            "-a",
            "-e",
            "task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "detailed",
        &["-a", "-ddd", "-e", "task-clock", "--", "sleep", "0.05"],
    ),
    (
        "per-socket",
        &[
            "-a",
            "--per-socket",
            "-e",
            "task-clock,cycles",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-die",
        &[
            "-a",
            "--per-die",
            "-e",
            "task-clock,cycles",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-cluster",
        &[
            "-a",
            "--per-cluster",
            "-e",
            "task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-cache",
        &[
            "-a",
            "--per-cache",
            "-e",
            "task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-core",
        &[
            "-a",
            "--per-core",
            "-e",
            "task-clock,cycles",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-node",
        &[
            "-a",
            "--per-node",
            "-e",
            "task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-core-csv",
        &[
            "-a",
            "--per-core",
            "-x,",
            "-e",
            "task-clock,cycles",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-socket-json",
        &[
            "-a",
            "--per-socket",
            "-j",
            "-e",
            "task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "per-core-interval",
        &[
            "-a",
            "--per-core",
            "-I",
            "100",
            "--interval-count",
            "1",
            "-e",
            "task-clock",
        ],
    ),
    (
        "repeat",
        &[
            "-r",
            "3",
            "-e",
            "task-clock,context-switches,cycles",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "repeat-csv",
        &[
            "-r",
            "2",
            "-a",
            "-x,",
            "-e",
            "task-clock,cycles",
            "--for-each-cgroup",
            "/",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "repeat-json",
        &["-r", "2", "-j", "-e", "task-clock", "--", "sleep", "0.05"],
    ),
    (
        "no-inherit",
        &["-i", "-e", "task-clock,page-faults", "--", "sleep", "0.1"],
    ),
    (
        "all-user",
        &[
            "--all-user",
            "-e",
            "task-clock,page-faults",
            "--",
            "sleep",
            "0.1",
        ],
    ),
];

/// A line with every number made `N`, runs of spaces made one, and, for the table's
/// lines, their length: what stays the same whatever was counted.
fn shape(text: &str) -> Vec<(String, Option<usize>)> {
    let number = regex::Regex::new(r"\d[\d,]*(\.\d+)?").unwrap();
    let spaces = regex::Regex::new(r" +").unwrap();
    let unpadded_rate = regex::Regex::new(r"([^ 0-9]) /sec").unwrap();
    text.lines()
        .map(|l| {
            // With -r, an event's error is left out when it is 0, which depends on the
            // counts; the time's error has as many decimals as it needs.
            let elapsed_error = l.contains(" +- ") && l.contains("seconds time elapsed");
            let l = match l.find("  ( +-") {
                Some(i) if !elapsed_error => &l[..i],
                _ => l,
            };
            // Rates carry a prefix for their size: /sec, K/sec, M/sec, G/sec (the line
            // keeps its length).
            let l = l
                .replace("K/sec", " /sec")
                .replace("M/sec", " /sec")
                .replace("G/sec", " /sec");
            // Without padding (CSV, JSON: after a separator or a quote), the prefix is
            // left out.
            let l = unpadded_rate.replace_all(&l, "$1/sec").into_owned();
            let s = number.replace_all(&l, "N");
            let s = spaces.replace_all(&s, " ").into_owned();
            let table = !l.starts_with('{') && !l.contains([',', ';']) && !elapsed_error;
            (s, table.then_some(l.len()))
        })
        .collect()
}

fn stat_output(tool: &Path, args: &[&str]) -> String {
    let out = Command::new(tool).arg("stat").args(args).output().unwrap();
    assert!(out.status.success(), "{tool:?} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/perf-6.12/{name}.txt"))
}

/// A perf 6.12 to compare with live, if the machine has one.
fn perf_612() -> Option<PathBuf> {
    let perf = std::env::var_os("PERF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/perf-bpf/bin/perf"));
    let version = Command::new(&perf).arg("version").output().ok()?;
    String::from_utf8_lossy(&version.stdout)
        .contains("perf version 6.12")
        .then_some(perf)
}

fn assert_same_shape(name: &str, want: &str, got: &str, whose: &str) {
    let (want, got) = (shape(want), shape(got));
    assert_eq!(
        want.len(),
        got.len(),
        "{name}: {whose} has {} lines, bperf {}",
        want.len(),
        got.len()
    );
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(
            w,
            g,
            "{name}, line {}: {whose}'s shape, then bperf's",
            i + 1
        );
    }
}

#[test]
fn output_has_perf_612s_shape() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let bperf = PathBuf::from(env!("CARGO_BIN_EXE_bperf"));
    let perf = perf_612();
    let record = std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some();
    for (name, args) in CASES {
        let ours = stat_output(&bperf, args);
        if let Some(perf) = &perf {
            let theirs = stat_output(perf, args);
            if record {
                fs::write(fixture(name), &theirs).unwrap();
            }
            assert_same_shape(name, &theirs, &ours, "perf (live)");
        }
        let recorded = fs::read_to_string(fixture(name))
            .unwrap_or_else(|e| panic!("{}: {e}", fixture(name).display()));
        assert_same_shape(name, &recorded, &ours, "perf (recorded)");
    }
}

/// The count and unit columns of a table line.
const COUNT_AND_UNIT: usize = 23;

/// A directory removed however the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(prefix: &str) -> TempDir {
        let dir = TempDir(std::env::temp_dir().join(format!("{prefix}-{}", std::process::id())));
        fs::create_dir_all(&dir.0).unwrap();
        dir
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn report(tool: &Path, file: &Path) -> String {
    let out = Command::new(tool)
        .args(["stat", "report", "-i"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool:?} stat report: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The count lines and the time elapsed of a stat output.
fn counts(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            l.contains(" task-clock ") || l.contains(" context-switches ") || l.contains(" cycles ")
        })
        .chain(text.lines().filter(|l| l.contains("seconds time elapsed")))
        .collect()
}

/// `bperf stat record` writes what `bperf stat report` and perf 6.12's `perf stat
/// report` print with the same counts as the run printed; bperf reads perf's file as
/// perf does.
#[test]
fn stat_record_and_report_agree_with_perf() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("bperf-record");
    let bperf = PathBuf::from(env!("CARGO_BIN_EXE_bperf"));
    let args = [
        "-e",
        "task-clock,context-switches,cycles",
        "--",
        "sleep",
        "0.1",
    ];
    let ours = dir.0.join("bperf.data");
    let mut record = vec!["record", "-o", ours.to_str().unwrap()];
    record.extend(args);
    let counted = stat_output(&bperf, &record);
    let reported = report(&bperf, &ours);
    assert_eq!(counts(&counted).len(), 4, "{counted}");
    assert_eq!(counts(&counted)[..3], counts(&reported)[..3], "{reported}");
    assert!(
        reported.contains(" Performance counter stats for '"),
        "{reported}"
    );
    // With -I, each interval: bperf stat report prints the lines bperf printed, and
    // perf stat report too, without the CPUs utilized it cannot work out (it has no
    // interval's time).
    let intervals = dir.0.join("intervals.data");
    let record = [
        "record",
        "-o",
        intervals.to_str().unwrap(),
        "-I",
        "100",
        "-e",
        "task-clock,context-switches",
        "--",
        "sleep",
        "0.25",
    ];
    let without_metrics = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split(" #").next().unwrap().trim_end().to_string())
            .collect()
    };
    let counted = stat_output(&bperf, &record);
    assert!(counted.lines().count() >= 5, "{counted}");
    assert_eq!(
        report(&bperf, &intervals),
        counted,
        "bperf stat report of intervals"
    );
    if let Some(perf) = perf_612() {
        assert_eq!(
            without_metrics(&report(&perf, &intervals)),
            without_metrics(&counted),
            "perf stat report of bperf's intervals"
        );
    }
    // -A and the modes perf stat report can group itself: counts per CPU, which it
    // prints knowing the CPUs' places.
    for mode in [
        "-A",
        "--per-socket",
        "--per-die",
        "--per-core",
        "--per-node",
    ] {
        let file = dir.0.join("per-cpu.data");
        let record = [
            "record",
            "-o",
            file.to_str().unwrap(),
            "-a",
            mode,
            "-e",
            "cpu-clock,context-switches",
            "--",
            "sleep",
            "0.1",
        ];
        let counted = stat_output(&bperf, &record);
        let reported = report(&bperf, &file);
        // All but the header, which names the command line.
        let body = |t: &str| t.lines().skip(3).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            body(&reported),
            body(&counted),
            "bperf stat report of {mode}"
        );
        if let Some(perf) = perf_612() {
            assert_eq!(report(&perf, &file), reported, "perf stat report of {mode}");
        }
    }
    // Per cgroup: each cgroup's counts, in the order printed (perf's report, like
    // perf's, prints them without the cgroup column).
    let cg = TestCgroup::new("record");
    let file = dir.0.join("cgroups.data");
    let cgroups = format!("{},/", cg.name);
    let record = [
        "record",
        "-o",
        file.to_str().unwrap(),
        "-a",
        "-e",
        "cpu-clock,context-switches",
        "--for-each-cgroup",
        &cgroups,
        "--",
        "sleep",
        "0.1",
    ];
    let values = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with(" Performance counter stats"))
            .filter(|l| l.contains("cpu-clock") || l.contains("context-switches"))
            .map(|l| l[..COUNT_AND_UNIT].to_string())
            .collect()
    };
    let counted = stat_output(&bperf, &record);
    assert_eq!(values(&counted).len(), 4, "{counted}");
    assert_eq!(values(&report(&bperf, &file)), values(&counted));
    if let Some(perf) = perf_612() {
        assert_eq!(values(&report(&perf, &file)), values(&counted));
    }
    let Some(perf) = perf_612() else {
        return;
    };
    assert_eq!(
        report(&perf, &ours),
        reported,
        "perf stat report of bperf's file"
    );
    let theirs = dir.0.join("perf.data");
    let mut record = vec!["record", "-o", theirs.to_str().unwrap()];
    record.extend(args);
    stat_output(&perf, &record);
    assert_eq!(
        report(&bperf, &theirs),
        report(&perf, &theirs),
        "reports of perf's file"
    );
}

/// `--per-thread -p PID`, as a script runs it on its shell: a line per thread, with
/// perf's comm-pid column.
#[test]
fn per_thread_of_a_process_has_perfs_shape() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = sleeper.id().to_string();
    // Until the child has exec'd, its thread bears the test thread's name.
    let comm = format!("/proc/{pid}/comm");
    for _ in 0..500 {
        if fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let args = [
        "--per-thread",
        "-p",
        &pid,
        "-e",
        "task-clock,context-switches",
        "--timeout",
        "200",
    ];
    let bperf = PathBuf::from(env!("CARGO_BIN_EXE_bperf"));
    let ours = stat_output(&bperf, &args);
    let name = "per-thread-pid";
    if let Some(perf) = perf_612() {
        let theirs = stat_output(&perf, &args);
        if std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some() {
            fs::write(fixture(name), &theirs).unwrap();
        }
        assert_same_shape(name, &theirs, &ours, "perf (live)");
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // The recorded process had another id, perhaps of another width, which moves
    // the padding after it: the recorded shape is compared without line lengths.
    let recorded = fs::read_to_string(fixture(name)).unwrap();
    let fields = |text: &str| -> Vec<String> { shape(text).into_iter().map(|(s, _)| s).collect() };
    assert_eq!(
        fields(&recorded),
        fields(&ours),
        "{name}: perf (recorded), then bperf"
    );
}

/// Runs tests/scripts/perf-stat-uses.sh with `perf` as given; its output (all of it on
/// standard error), with the tool's own path written as PERF.
fn script_output(perf: &Path, tool_path: &str, workdir: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/perf-stat-uses.sh");
    let out = Command::new("sh")
        .arg(script)
        .env("PERF", perf)
        .env("WORKDIR", workdir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{perf:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).replace(tool_path, "PERF")
}

/// A script written for perf, with perf replaced by a wrapper that runs bperf, prints
/// the same lines as with perf 6.12: the default table, -a, -A, -I, -e, every --per-*
/// mode, --per-thread -p $$, -x, -j, --summary, --metric-only, -r 3, stat record then
/// stat report.
#[test]
fn a_script_for_perf_runs_on_bperf() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("bperf-script");
    let bperf = env!("CARGO_BIN_EXE_bperf");
    let wrapper = dir.0.join("perf");
    fs::write(&wrapper, format!("#!/bin/sh\nexec {bperf} \"$@\"\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let ours = script_output(&wrapper, bperf, &dir.0);
    let name = "script";
    if let Some(perf) = perf_612() {
        let theirs = script_output(&perf, perf.to_str().unwrap(), &dir.0);
        if std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some() {
            fs::write(fixture(name), &theirs).unwrap();
        }
        assert_same_shape(name, &theirs, &ours, "perf (live)");
    }
    // Recorded elsewhere: process ids and paths of other widths move the padding, so
    // the lines are compared without their lengths.
    let recorded = fs::read_to_string(fixture(name)).unwrap();
    let fields = |text: &str| -> Vec<String> { shape(text).into_iter().map(|(s, _)| s).collect() };
    assert_eq!(
        fields(&recorded),
        fields(&ours),
        "{name}: perf (recorded), then bperf"
    );
}
