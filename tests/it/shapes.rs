//! bperf's output has perf 6.12's shape, line by line: the same lines, fields and
//! padding, whatever the numbers. Checked against perf 6.12's output recorded in
//! tests/fixtures/perf-6.12/ or, when a perf 6.12 is on the machine ($PERF, or
//! /opt/perf-bpf/bin/perf), against perf itself, live: the recorded output carries the
//! topology of the machine that recorded it (one cluster, where this kind of machine
//! has had one a CPU), so where perf can run, its live output is the reference. Needs root.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::parity::*;
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

fn stat_output(tool: &Path, args: &[&str]) -> String {
    stat_output_as(tool, args, Some("6.12"))
}

/// What `tool stat ARGS` printed, bperf printing perf `version`'s output (None: its
/// default, perf 7.2's).
fn stat_output_as(tool: &Path, args: &[&str], version: Option<&str>) -> String {
    let mut cmd = Command::new(tool);
    cmd.env(NEUTRAL_CPUID.0, NEUTRAL_CPUID.1);
    match version {
        Some(v) => cmd.env(common::PERF_VERSION_ENV, v),
        None => cmd.env_remove(common::PERF_VERSION_ENV),
    };
    let out = cmd.arg("stat").args(args).output().unwrap();
    assert!(out.status.success(), "{tool:?} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// perf 6.12's recorded output of case `name`.
fn fixture_612(name: &str) -> PathBuf {
    fixture(&format!("perf-6.12/{name}.txt"))
}

/// Where `got` first differs in shape from `want`, if it does.
fn shape_difference(name: &str, want: &str, got: &str, whose: &str) -> Option<String> {
    let (want, got) = (shape(want), shape(got));
    if let Some((i, (w, g))) = want.iter().zip(&got).enumerate().find(|(_, (w, g))| w != g) {
        return Some(format!(
            "{name}, line {}: {whose}'s shape, then bperf's:\n  {w:?}\n  {g:?}",
            i + 1
        ));
    }
    (want.len() != got.len()).then(|| {
        format!(
            "{name}: {whose} has {} lines, bperf {}",
            want.len(),
            got.len()
        )
    })
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
#[ignore = "needs root (make test runs it)"]
fn output_has_perf_612s_shape() {
    let _g = serial();
    let bperf = PathBuf::from(common::BPERF_EXE);
    let perf = perf_612();
    let record = std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some();
    for (name, args) in CASES {
        let ours = stat_output(&bperf, args);
        if let Some(perf) = &perf {
            let theirs = stat_output(perf, args);
            if record {
                fs::write(fixture_612(name), &theirs).unwrap();
            }
            assert_same_shape(name, &theirs, &ours, "perf (live)");
            continue;
        }
        let recorded = fs::read_to_string(fixture_612(name))
            .unwrap_or_else(|e| panic!("{}: {e}", fixture_612(name).display()));
        assert_same_shape(name, &recorded, &ours, "perf (recorded)");
    }
}

/// perf 7.2's default events and metrics, in each format, beside CASES.
const DEFAULT_CASES: &[(&str, &[&str])] = &[
    ("default-task", &["--", "sleep", "0.1"]),
    ("default-system", &["-a", "--", "sleep", "0.1"]),
    ("default-csv", &["-a", "-x,", "--", "sleep", "0.1"]),
    ("default-json", &["-a", "-j", "--", "sleep", "0.1"]),
    (
        "default-interval",
        &["-a", "-I", "100", "--interval-count", "2"],
    ),
    (
        "default-cgroup",
        &["-a", "--for-each-cgroup", "/", "--", "sleep", "0.1"],
    ),
    ("default-repeat", &["-a", "-r", "2", "--", "sleep", "0.1"]),
];

/// CASES whose perf 7.2 shape bperf does not have yet (docs/perf-versions.md).
const NOT_YET_72: &[&str] = &[];

/// perf 7.2's recorded output of case `name`.
fn fixture_72(name: &str) -> PathBuf {
    fixture(&format!("perf-7.2/{name}.txt"))
}

/// bperf's default output has perf 7.2's shape, case by case: live against perf 7.2
/// where the machine has it (scripts/build-perf-72), else against its recorded output.
#[test]
#[ignore = "needs root (make test runs it)"]
fn output_has_perf_72s_shape() {
    let _g = serial();
    let bperf = PathBuf::from(common::BPERF_EXE);
    let perf = perf_72();
    let record = std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some();
    let cases = CASES.iter().chain(DEFAULT_CASES);
    let mut differ = Vec::new();
    for (name, args) in cases.filter(|(name, _)| !NOT_YET_72.contains(name)) {
        let ours = stat_output_as(&bperf, args, None);
        if let Some(perf) = &perf {
            let theirs = stat_output_as(perf, args, None);
            if record {
                fs::create_dir_all(fixture_72(name).parent().unwrap()).unwrap();
                fs::write(fixture_72(name), &theirs).unwrap();
            }
            differ.extend(shape_difference(name, &theirs, &ours, "perf 7.2 (live)"));
            continue;
        }
        let recorded = fs::read_to_string(fixture_72(name))
            .unwrap_or_else(|e| panic!("{}: {e}", fixture_72(name).display()));
        differ.extend(shape_difference(
            name,
            &recorded,
            &ours,
            "perf 7.2 (recorded)",
        ));
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The count and unit columns of a table line.
const COUNT_AND_UNIT: usize = 23;

fn report(tool: &Path, file: &Path) -> String {
    let out = Command::new(tool)
        .env(common::PERF_VERSION_ENV, "6.12")
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
#[ignore = "needs root (make test runs it)"]
fn stat_record_and_report_agree_with_perf() {
    let _g = serial();
    let dir = TempDir::new("record");
    let bperf = PathBuf::from(common::BPERF_EXE);
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
#[ignore = "needs root (make test runs it)"]
fn per_thread_of_a_process_has_perfs_shape() {
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
    let bperf = PathBuf::from(common::BPERF_EXE);
    let ours = stat_output(&bperf, &args);
    let name = "per-thread-pid";
    if let Some(perf) = perf_612() {
        let theirs = stat_output(&perf, &args);
        if std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some() {
            fs::write(fixture_612(name), &theirs).unwrap();
        }
        assert_same_shape(name, &theirs, &ours, "perf (live)");
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // The recorded process had another id, perhaps of another width, which moves
    // the padding after it: the recorded shape is compared without line lengths.
    let recorded = fs::read_to_string(fixture_612(name)).unwrap();
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
        .env(NEUTRAL_CPUID.0, NEUTRAL_CPUID.1)
        .env(common::PERF_VERSION_ENV, "6.12")
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
#[ignore = "needs root (make test runs it)"]
fn a_script_for_perf_runs_on_bperf() {
    let _g = serial();
    let dir = TempDir::named("bperf-script");
    let bperf = common::BPERF_EXE;
    let wrapper = dir.0.join("perf");
    fs::write(&wrapper, format!("#!/bin/sh\nexec {bperf} \"$@\"\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let ours = script_output(&wrapper, bperf, &dir.0);
    let name = "script";
    if let Some(perf) = perf_612() {
        let theirs = script_output(&perf, perf.to_str().unwrap(), &dir.0);
        if std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some() {
            fs::write(fixture_612(name), &theirs).unwrap();
        }
        assert_same_shape(name, &theirs, &ours, "perf (live)");
        return;
    }
    // Recorded elsewhere: process ids and paths of other widths move the padding, so
    // the lines are compared without their lengths.
    let recorded = fs::read_to_string(fixture_612(name)).unwrap();
    let fields = |text: &str| -> Vec<String> { shape(text).into_iter().map(|(s, _)| s).collect() };
    assert_eq!(
        fields(&recorded),
        fields(&ours),
        "{name}: perf (recorded), then bperf"
    );
}

/// perf stat command lines, by the ways bperf's output could part from perf 6.12's
/// (numbered below), each compared whole: exit status, standard error, standard output
/// and the -o file. In the arguments, `{A}` and `{B}` stand for two test cgroups in
/// which something runs on every CPU, `{OUT}` for an output file.
const PARITY_CASES: &[(&str, &[&str])] = &[
    // 1: -C without -a: the header names the CPUs as written.
    ("cpu-list", &["-C", "0", "-e", "cs", "--", "sleep", "0.05"]),
    (
        "cpu-list-runs",
        &["-C", "1,0", "-r", "2", "-e", "cs", "--", "sleep", "0.02"],
    ),
    // 2: a group cannot span PMUs: perf sorts it by PMU, splits it, and says so.
    (
        "regroup",
        &["-e", "{cs,msr/tsc/,faults}", "--", "sleep", "0.05"],
    ),
    (
        "regroup-rates",
        &[
            "-a",
            "-e",
            "{cs,msr/tsc/,faults},task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "regroup-tracepoint",
        &[
            "-a",
            "-e",
            "{sched:sched_switch,cs,msr/tsc/}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    // ... a group with a member the kernel refuses is not read (a refused leader ends
    // counting), a -G group across cgroups has its other cgroup's members refused, and
    // duration_time (on the first CPU only) leaves a group counting all CPUs.
    (
        "group-member-refused",
        &["-e", "{cs,cycles,faults},task-clock", "--", "sleep", "0.05"],
    ),
    ("group-leader-refused", &["-e", "{cycles,cs}", "--", "true"]),
    (
        "group-across-cgroups",
        &[
            "-a",
            "-e",
            "{cs,faults}",
            "-G",
            "{A},{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "group-duration-system",
        &[
            "-a",
            "-v",
            "-e",
            "{cs,duration_time}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "repeat-table",
        &["-r", "2", "--table", "-e", "cs", "--", "sleep", "0.02"],
    ),
    // 3: a rate per second only where perf pairs the event with a clock: in its group,
    // with the same modifiers.
    (
        "rate-group",
        &["-e", "{cs,faults},task-clock", "--", "sleep", "0.05"],
    ),
    (
        "rate-modifiers-csv",
        &[
            "-x,",
            "-e",
            "context-switches,task-clock:u",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "rate-all-user",
        &["--all-user", "-e", "cs,task-clock:k", "--", "sleep", "0.05"],
    ),
    // 4: -v says what perf says: its CPU, what it cannot count, each run, each read.
    ("verbose", &["-v", "-e", "cs,cycles", "--", "sleep", "0.05"]),
    (
        "verbose-runs-output",
        &[
            "-v",
            "-o",
            "{OUT}",
            "-r",
            "2",
            "-e",
            "cs,cycles",
            "--",
            "sleep",
            "0.02",
        ],
    ),
    (
        "verbose-interval",
        &[
            "-v",
            "-a",
            "-e",
            "cs,cycles",
            "-I",
            "100",
            "--interval-count",
            "2",
        ],
    ),
    (
        "verbose-per-cpu",
        &["-v", "-a", "-A", "-e", "cs,cycles", "--", "sleep", "0.02"],
    ),
    (
        "verbose-cgroups",
        &[
            "-v",
            "-a",
            "-e",
            "cs",
            "--for-each-cgroup",
            "{A},{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "verbose-summary",
        &[
            "-v",
            "-a",
            "-e",
            "cs,cycles",
            "-I",
            "100",
            "--interval-count",
            "1",
            "--summary",
        ],
    ),
    (
        "verbose-after-events",
        &["-e", "cs", "-v", "-x,", "--", "sleep", "0.02"],
    ),
    // 5: what perf refuses, with its exit status, after writing the -o file's first line.
    (
        "refuse-big-num-csv",
        &["-B", "-x,", "-o", "{OUT}", "-e", "cs", "--", "true"],
    ),
    (
        "refuse-metric-only-runs",
        &["--metric-only", "-r", "2", "-e", "cs", "--", "true"],
    ),
    (
        "refuse-metric-only-per-thread",
        &[
            "--metric-only",
            "--per-thread",
            "-p",
            "1",
            "-e",
            "cs",
            "--timeout",
            "100",
        ],
    ),
    (
        "refuse-cgroup-first",
        &["-G", "{A}", "-a", "-e", "cs", "--", "true"],
    ),
    (
        "refuse-pmu-colon-modifier",
        &["-e", "msr/tsc/:u", "--", "true"],
    ),
    ("refuse-table", &["--table", "-e", "cs", "--", "true"]),
    (
        "refuse-all-user-kernel",
        &["--all-user", "--all-kernel", "-e", "cs", "--", "true"],
    ),
    ("refuse-per-cpu-of-task", &["-A", "-e", "cs", "--", "true"]),
    (
        "refuse-interval-count",
        &["--interval-count", "2", "-e", "cs", "--", "true"],
    ),
    (
        "refuse-timeout-interval",
        &["--timeout", "200", "-I", "100", "-a", "-e", "cs"],
    ),
    // With no target and no command, perf counts the whole system.
    (
        "no-target",
        &["-e", "cs", "-I", "100", "--interval-count", "1"],
    ),
    // 6: -G gives cgroups to the events before it; the others count system-wide, with
    // an empty cgroup column.
    (
        "cgroup-then-events",
        &[
            "-a", "-e", "cs", "-G", "{A}", "-e", "faults", "--", "sleep", "0.05",
        ],
    ),
    (
        "cgroup-detailed",
        &["-a", "-e", "cs", "-G", "{A}", "-d", "--", "sleep", "0.05"],
    ),
    (
        "cgroup-empty-name-csv",
        &[
            "-a",
            "-x,",
            "-e",
            "cs,faults",
            "-G",
            ",{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "cgroup-twice",
        &[
            "-a",
            "-e",
            "cs,faults",
            "-G",
            "{A}",
            "-G",
            "{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    // 11: --metric-only: with -G one line, the first event's cgroup; columns headed as
    // perf heads them; an event that did not count adds no line.
    (
        "metric-only-cgroup-events",
        &[
            "--metric-only",
            "-a",
            "-e",
            "task-clock,cs",
            "-G",
            "{A},{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "metric-only-per-socket-unsupported",
        &[
            "--metric-only",
            "-a",
            "--per-socket",
            "-e",
            "cycles,task-clock",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    (
        "metric-only-per-cpu-header",
        &[
            "--metric-only",
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
        "metric-only-per-core-cgroups",
        &[
            "--metric-only",
            "-a",
            "--per-core",
            "-e",
            "cs",
            "--for-each-cgroup",
            "{A},{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    // ... and the lines of groups of CPUs per cgroup come cgroup by cgroup.
    (
        "per-core-cgroups",
        &[
            "-a",
            "--per-core",
            "-e",
            "cs,faults",
            "--for-each-cgroup",
            "{A},{B}",
            "--",
            "sleep",
            "0.05",
        ],
    ),
    // 12: perf's tool events: duration_time, user_time, system_time, in ns.
    (
        "tool-events",
        &[
            "-e",
            "duration_time,user_time,task-clock",
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
        ],
    ),
    (
        "tool-events-system-csv",
        &[
            "-a",
            "-x,",
            "-e",
            "duration_time,user_time,system_time",
            // Byte-at-a-time copying spends both user and system time, so neither line
            // is left out for having counted nothing (a sleep could leave either out).
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            "count=300000",
            "status=none",
        ],
    ),
    (
        "tool-duration-per-cpu",
        &["-a", "-A", "-e", "duration_time,cs", "--", "sleep", "0.05"],
    ),
    // duration_time alone: perf counts the whole system.
    (
        "tool-duration-command",
        &["-e", "duration_time", "--", "sleep", "0.05"],
    ),
    // 13: on purpose (docs/perf-versions.md, [metric-unit-null]): JSON's metric unit of an event without
    // a metric is empty, where perf 6.12 writes "(null)".
    ("json-no-metric", &["-j", "-e", "cs", "--", "sleep", "0.02"]),
    // 10: --quiet leaves out the counts only, not the messages.
    (
        "quiet-delay",
        &["--quiet", "-D", "100", "-e", "cs", "--", "sleep", "0.2"],
    ),
    (
        "quiet-timeout",
        &["--quiet", "--timeout", "50", "-a", "-e", "cs"],
    ),
    // 7: the events perf adds itself are named from their attrs, modifiers included.
    ("all-user-default", &["--all-user", "--", "sleep", "0.05"]),
    (
        "all-kernel-detailed",
        &["--all-kernel", "-d", "-e", "cs", "--", "sleep", "0.05"],
    ),
    // 8: ... and never with their PMU per CPU.
    ("per-cpu-default", &["-a", "-A", "--", "sleep", "0.05"]),
    // 9: -n with events counts them all the same.
    (
        "null-events",
        &["-n", "-e", "task-clock,cs", "--", "sleep", "0.05"],
    ),
    (
        "null-events-csv",
        &["-n", "-x,", "-a", "-e", "cs", "--", "sleep", "0.05"],
    ),
];

/// The same exit status and the same shape (parity::difference), or a panic that
/// shows both.
fn assert_same_transcript(name: &str, want: &Transcript, got: &Transcript, whose: &str) {
    if let Some(why) = difference(want, got) {
        panic!(
            "{name}: {why}\n--- {whose}:\n{}--- bperf:\n{}",
            want.text, got.text
        );
    }
}

/// Each of PARITY_CASES prints what perf 6.12 prints, live when perf 6.12 is here, and
/// as recorded. BPERF_SHAPES_ONLY=NAME[,NAME] runs the cases whose names start so;
/// BPERF_BIN=PATH checks another build of bperf (an older one, to see a case fail).
#[test]
#[ignore = "needs root (make test runs it)"]
fn parity_cases_have_perf_612s_shape() {
    let _g = serial();
    let bperf = std::env::var_os("BPERF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(common::BPERF_EXE));
    let perf = perf_612();
    let record = std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some();
    let only = std::env::var("BPERF_SHAPES_ONLY").unwrap_or_default();
    let dir = TempDir::new("parity");
    let out = dir.0.join("out.txt");
    let cgroups = BusyCgroups::new();
    let picked = |name: &str| only.split(',').any(|prefix| name.starts_with(prefix));
    for (name, args) in PARITY_CASES.iter().filter(|(n, _)| picked(n)) {
        let ours = transcript(&bperf, args, &cgroups, &out);
        if let Some(perf) = &perf {
            let theirs = transcript(perf, args, &cgroups, &out);
            if record {
                fs::write(fixture_612(name), theirs.to_fixture()).unwrap();
            }
            assert_same_transcript(name, &theirs, &ours, "perf (live)");
        }
        let recorded = fs::read_to_string(fixture_612(name))
            .unwrap_or_else(|e| panic!("{}: {e}", fixture_612(name).display()));
        assert_same_transcript(
            name,
            &Transcript::from_fixture(&recorded),
            &ours,
            "perf (recorded)",
        );
    }
}

/// `bperf list sw` prints what perf 6.12's prints: the software events, then perf's
/// tool events under their heading.
#[test]
fn list_of_software_events_is_perfs() {
    let list = |tool: &Path| {
        let out = Command::new(tool).args(["list", "sw"]).output().unwrap();
        assert!(out.status.success(), "{tool:?} list sw: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ours = list(Path::new(common::BPERF_EXE));
    let name = "list-sw";
    if let Some(perf) = perf_612() {
        let theirs = list(&perf);
        if std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some() {
            fs::write(fixture_612(name), &theirs).unwrap();
        }
        assert_eq!(ours, theirs, "bperf list sw, then perf's (live)");
    }
    let recorded = fs::read_to_string(fixture_612(name)).unwrap();
    assert_eq!(ours, recorded, "bperf list sw, then perf's (recorded)");
}

/// Command lines perf 7.2 refuses, each with its own words: nothing counted (the first
/// event refused named, worded after the last refusal's error: EINVAL counting a
/// command is "Invalid event ... in per-thread mode" for msr/tsc/k, and perf's
/// sys_perf_event_open() line otherwise), and -B with -x, after which perf prints the
/// two options' usage.
const REFUSALS_72: &[&[&str]] = &[
    &["-e", "msr/tsc/k", "--", "true"],
    &["-e", "msr/tsc/k,msr/tsc/u", "--", "true"],
    &["-e", "{msr/tsc/k,msr/tsc/u}", "--", "true"],
    &["-a", "-e", "msr/tsc/k", "--", "true"],
    &["-e", "cycles,msr/tsc/k", "--", "true"],
    &["-e", "msr/tsc/k,cycles", "--", "true"],
    &["-e", "cycles", "--", "true"],
    &["-B", "-x,", "--", "true"],
];

/// A refusal's exit status and stderr, bperf printing perf 7.2's output.
fn refusal(tool: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(tool)
        .env_remove(common::PERF_VERSION_ENV)
        .arg("stat")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What bperf says for perf's refusal `perf`: perf's first paragraph on one line after
/// `bperf: ` (its `Error:` heading left out), then the rest as perf prints it, naming
/// bperf.
fn in_bperfs_words(perf: &str) -> String {
    let text = perf.strip_prefix("Error:\n").unwrap_or(perf);
    let (head, rest) = text.split_once("\n\n").unwrap_or((text, ""));
    let line = head.trim_end().lines().collect::<Vec<_>>().join(" ");
    match rest.trim_end() {
        "" => format!("bperf: {line}\n"),
        rest => format!(
            "bperf: {line}\n\n{}\n",
            rest.replace("perf stat", "bperf stat")
        ),
    }
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn refusals_say_what_perf_72_says() {
    let Some(perf) = perf_72() else {
        eprintln!("skipped: no perf 7.2 ($PERF72 or /opt/perf-72/bin/perf, scripts/build-perf-72) to compare with");
        return;
    };
    let _g = serial();
    let bperf = PathBuf::from(common::BPERF_EXE);
    let mut differ = Vec::new();
    for args in REFUSALS_72 {
        let (code, theirs) = refusal(&perf, args);
        let (ours_code, ours) = refusal(&bperf, args);
        assert_ne!(code, Some(0), "perf 7.2 {args:?} counted:\n{theirs}");
        let want = in_bperfs_words(&theirs);
        if (code, &want) != (ours_code, &ours) {
            differ.push(format!(
                "{args:?}: perf 7.2 exits {code:?}, bperf {ours_code:?}\n--- perf in bperf's words:\n{want}--- bperf:\n{ours}"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
