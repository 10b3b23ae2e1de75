//! perf's pipe mode: `bperf stat record -o -` writes perf's pipe format, which perf
//! 6.12's `stat report` and `script` read from a pipe; `bperf stat report -i -` reads
//! perf's, from a pipe, as perf's own report prints it. The perf-dependent checks run
//! when /opt/perf-bpf/bin/perf is there; committed pipe output of perf 6.12 (with what
//! its report printed) keeps bperf's reader tested without it.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bperf::perfdata::StatFile;
use common::{fixture, serial};

const PERF: &str = "/opt/perf-bpf/bin/perf";

fn perf() -> Option<PathBuf> {
    Path::new(PERF).exists().then(|| PERF.into())
}

fn bperf() -> PathBuf {
    common::BPERF_EXE.into()
}

/// `tool args`, with `bytes` fed to it through a pipe on standard input.
fn through_pipe(tool: &Path, args: &[&str], bytes: &[u8]) -> Output {
    let mut child = Command::new(tool)
        .env("BPERF_PERF_VERSION", "6.12")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let bytes = bytes.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// What a stat report printed (on standard error), which must have succeeded.
fn report_text(tool: &Path, args: &[&str], bytes: &[u8]) -> String {
    let out = through_pipe(tool, args, bytes);
    assert!(out.status.success(), "{tool:?} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Report lines without the metric column (bperf's report of intervals keeps the CPUs
/// utilized bperf printed; perf's leaves it out).
fn without_metrics(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split(" # ").next().unwrap_or(l).trim_end().to_string())
        .collect()
}

#[test]
fn perfs_pipe_output_is_read_from_standard_input() {
    for (name, intervals) in [
        ("perf-6.12-stat.pipe", false),
        ("perf-6.12-stat-A-I.pipe", true),
    ] {
        let bytes = std::fs::read(fixture(&format!("perfdata/{name}"))).unwrap();
        let perfs =
            String::from_utf8(std::fs::read(fixture(&format!("perfdata/{name}.report"))).unwrap())
                .unwrap();
        // -i -, and no -i with a pipe on standard input (as perf).
        for args in [&["stat", "report", "-i", "-"][..], &["stat", "report"]] {
            let ours = report_text(&bperf(), args, &bytes);
            match intervals {
                false => assert_eq!(ours, perfs, "{name}, {args:?}"),
                true => assert_eq!(without_metrics(&ours), without_metrics(&perfs), "{name}"),
            }
        }
        // perf 6.12 reads it as it did when it was recorded.
        if let Some(perf) = perf() {
            let now = report_text(&perf, &["stat", "report", "-i", "-"], &bytes);
            assert_eq!(now, perfs, "perf's report of {name}");
        }
    }
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn perfs_live_pipe_is_read_as_perf_reads_it() {
    let Some(perf) = perf() else {
        return;
    };
    for args in [
        &["-e", "task-clock,context-switches,page-faults", "true"][..],
        &[
            "-a",
            "-A",
            "-e",
            "task-clock,context-switches",
            "sleep",
            "0.05",
        ],
    ] {
        let recorded = {
            let _g = serial();
            let out = Command::new(&perf)
                .args(["stat", "record", "-o", "-"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "perf stat record: {out:?}");
            out.stdout
        };
        let theirs = report_text(&perf, &["stat", "report", "-i", "-"], &recorded);
        let ours = report_text(&bperf(), &["stat", "report", "-i", "-"], &recorded);
        assert!(theirs.contains("Performance counter stats for 'pipe':"));
        assert_eq!(ours, theirs, "perf stat record {args:?}");
    }
}

/// The counts bperf wrote to a pipe, read back by bperf's own reader.
fn recorded_counts(bytes: &[u8]) -> StatFile {
    StatFile::read(std::io::Cursor::new(bytes)).unwrap()
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn bperfs_pipe_output_is_read_by_perf() {
    let record = |args: &[&str]| {
        let _g = serial();
        let out = Command::new(bperf())
            .env("BPERF_PERF_VERSION", "6.12")
            .args(["stat", "record"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "bperf stat record {args:?}: {out:?}");
        // As perf: recording to a pipe prints nothing.
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
        assert_eq!(&out.stdout[..16], b"PERFILE2\x10\0\0\0\0\0\0\0", "{args:?}");
        out.stdout
    };
    let bytes = record(&["-e", "task-clock", "-o", "-", "true"]);
    // Without -o, standard output being a pipe, as perf.
    record(&["-e", "task-clock", "true"]);
    let file = recorded_counts(&bytes);
    let ours = report_text(&bperf(), &["stat", "report", "-i", "-"], &bytes);
    assert!(
        ours.contains("Performance counter stats for 'pipe':"),
        "{ours}"
    );
    let Some(perf) = perf() else {
        return;
    };
    let theirs = report_text(&perf, &["stat", "report", "-i", "-"], &bytes);
    assert_eq!(theirs, ours, "perf stat report, then bperf's");
    // perf script prints each count in its columns: CPU, THREAD, VAL, ENA, RUN, TIME
    // (the time elapsed), EVENT.
    let out = through_pipe(&perf, &["script", "-i", "-"], &bytes);
    assert!(out.status.success(), "perf script: {out:?}");
    let script = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = script
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.first().map(Vec::as_slice),
        Some(&["CPU", "THREAD", "VAL", "ENA", "RUN", "TIME", "EVENT"][..]),
        "{script}"
    );
    let c = &file.counts[0];
    let row = [c.val, c.ena, c.run, file.elapsed_ns].map(|v| v.to_string());
    assert_eq!(rows.len(), 2, "{script}");
    assert_eq!(rows[1][2..6], row, "{script}");
    assert_eq!(rows[1][6], "task-clock", "{script}");
    assert!(c.val > 0);

    // Counts per CPU, of each interval.
    let args = ["-a", "-A", "-I", "100", "-e", "task-clock,context-switches"];
    let bytes = record(&[&args[..], &["-o", "-", "sleep", "0.25"]].concat());
    let ours = report_text(&bperf(), &["stat", "report", "-i", "-"], &bytes);
    let theirs = report_text(&perf, &["stat", "report", "-i", "-"], &bytes);
    assert_eq!(without_metrics(&theirs), without_metrics(&ours), "-A -I");
    assert_eq!(
        ours.lines().filter(|l| l.contains(" CPU1 ")).count(),
        2 * 3,
        "{ours}"
    );
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn intervals_go_down_the_pipe_as_they_end() {
    use bperf::perfdata::{RoundKind, StatReader};
    use std::os::fd::OwnedFd;
    let _g = serial();
    let mut child = Command::new(bperf())
        .env("BPERF_PERF_VERSION", "6.12")
        .args(["stat", "record", "-I", "100", "-e", "task-clock", "-o", "-"])
        .args(["sleep", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = std::fs::File::from(OwnedFd::from(child.stdout.take().unwrap()));
    let mut reader = StatReader::open(std::io::BufReader::new(pipe)).unwrap();
    let (kind, round) = reader.next_round().unwrap().unwrap();
    // The first interval is read while the command still runs.
    let running = child.try_wait().unwrap().is_none();
    assert_eq!(kind, RoundKind::Interval);
    assert!(round.counts.iter().any(|c| c.val > 0), "{round:?}");
    let mut rounds = 1;
    while let Some((kind, _)) = reader.next_round().unwrap() {
        assert_eq!(kind, RoundKind::Interval);
        rounds += 1;
    }
    assert!(child.wait().unwrap().success());
    assert!(
        running,
        "the first interval came when the command had ended"
    );
    assert!(rounds >= 25, "{rounds} intervals of 100 ms in 3 s");
}
