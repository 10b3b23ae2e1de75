//! bperf report on damaged bperf.data files: 2000 copies of small good recordings
//! (version 3, version 3 with a cgroup removed and made again while recording, version
//! 3 through zstd, and the version 1 and 2 fixtures), each damaged its own repeatable
//! way, read by every mode of report under an address-space and a time limit. Each must
//! be read or refused in one line naming the file; none may panic, abort on an
//! allocation, or hang. A version 3 copy that differs from its good file is refused, or
//! read with a line naming the file that says what was dropped: its checks leave no
//! damage unsaid (versions 1 and 2 have none: 116 of their copies here read without a
//! word). Needs no privilege.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use common::{bperf, damage, fixture, recording, stderr, TempDir};

const SEED: u64 = 0x6270_6572_6664_6174;
const COPIES: u64 = 2000;
/// Slices in the good recording: a few of every cgroup on both CPUs, some of them cut.
const SLICES: u64 = 60;
/// Seconds one report may take on a file of a few kB.
const TIME_LIMIT: u32 = 10;

/// report's modes, spread over the copies: the totals, the distributions, and the three
/// timelines (the output file's name picks the form).
const MODES: [&[&str]; 5] = [
    &[],
    &["--hist"],
    &["--timeline", "svg"],
    &["--timeline", "json"],
    &["--timeline", "perfetto-trace"],
];

/// The report of `input` in mode `mode`, its timeline (if any) written into `dir`.
fn report(input: &Path, mode: usize, dir: &Path, tag: u64) -> Command {
    let mut cmd = bperf();
    cmd.args(["report", "-i"]).arg(input);
    match MODES[mode] {
        ["--timeline", ext] => {
            cmd.arg("--timeline")
                .arg(dir.join(format!("timeline-{tag}.{ext}")));
        }
        args => {
            cmd.args(args);
        }
    }
    cmd
}

/// What is wrong with report's run on copy `index`, if anything; `checked`: the copy is
/// of a version 3 file and differs from it, so reading it must say what was dropped.
fn verdict(
    index: u64,
    (mode, checked): (usize, bool),
    input: &Path,
    out: &std::process::Output,
) -> Option<String> {
    let what = format!("copy {index} ({:?})", MODES[mode]);
    if let Some(bad) = damage::misbehaviour(out, input) {
        return Some(format!("{what}: {bad}"));
    }
    let err = stderr(out);
    let name = input.display().to_string();
    if !out.status.success() && (err.lines().count() != 1 || !err.contains(&name)) {
        return Some(format!(
            "{what}: refused, but not in one line naming the file: {err}"
        ));
    }
    let said = format!("bperf report: {name}: ");
    if out.status.success() && checked && !err.lines().any(|l| l.starts_with(&said)) {
        return Some(format!("{what}: damaged, read without a word: {err}"));
    }
    None
}

#[test]
fn damaged_recordings_are_read_or_refused_never_crash() {
    let dir = TempDir::new("fuzz-bperfdata");
    let recorded = |name: &str| std::fs::read(fixture(&format!("bperfdata/{name}"))).unwrap();
    let goods = [
        ("v3", recording::bytes(SLICES)),
        ("v3-live", recording::live_bytes(SLICES)),
        ("v3-zstd", recording::compressed_bytes(SLICES, Some(3))),
        ("v1", recorded("v1-pingpong.data")),
        ("v2", recorded("v2-tasks.data")),
        ("v2-zstd", recorded("v2-cgroup-zstd.data")),
    ];
    for (name, good) in &goods {
        let good_path = dir.0.join(format!("good-{name}.data"));
        std::fs::write(&good_path, good).unwrap();
        for (mode, args) in MODES.iter().enumerate() {
            let out = damage::run_limited(&report(&good_path, mode, &dir.0, u64::MAX), TIME_LIMIT);
            assert!(out.status.success(), "{name} {args:?}: {}", stderr(&out));
        }
    }

    let failures = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicU64::new(0);
    // Each run mostly waits for its processes to start: more threads than CPUs.
    let threads = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= COPIES {
                    return;
                }
                let (name, good) = &goods[(i % goods.len() as u64) as usize];
                let input = dir.0.join(format!("copy-{i}-{name}.data"));
                let copy = damage::damaged_copy(good, SEED, i);
                let checked = name.starts_with("v3") && copy != *good;
                std::fs::write(&input, copy).unwrap();
                let mode = (i % MODES.len() as u64) as usize;
                let out = damage::run_limited(&report(&input, mode, &dir.0, i), TIME_LIMIT);
                if let Some(bad) = verdict(i, (mode, checked), &input, &out) {
                    failures.lock().unwrap().push(bad);
                } else {
                    let _ = std::fs::remove_file(&input);
                }
                for ext in ["svg", "json", "perfetto-trace"] {
                    let _ = std::fs::remove_file(dir.0.join(format!("timeline-{i}.{ext}")));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {COPIES} damaged copies misread:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
