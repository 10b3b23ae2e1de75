//! `bperf stat report` on damaged perf.data files: 2000 damaged copies (fixed seed) of a
//! good file written by bperf's `stat record` and of one written by perf 6.12's, each
//! read by the binary under an address-space and time limit. Refusing a copy is right;
//! a panic, an abort on a failed allocation or a hang is not, and a refusal is one line
//! that names the file.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::damage;

const SEED: u64 = 0x2203;
const COPIES: u64 = 2000;
const PERF: &str = "/opt/perf-bpf/bin/perf";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/perfdata");

/// A directory of this test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("bperf-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A stat file recorded now by `tool` (counts per CPU, so the topology features are
/// there too), or the committed one when it cannot be (not root, no perf 6.12).
fn good_file(dir: &Path, tool: &Path, fixture: &str) -> Vec<u8> {
    if common::privileged() && tool.exists() {
        let path = dir.join(format!("{fixture}.good"));
        let _serial = common::serial();
        let out = Command::new(tool)
            .args([
                "stat",
                "record",
                "-a",
                "-A",
                "-e",
                "task-clock,context-switches",
            ])
            .arg("-o")
            .arg(&path)
            .args(["sleep", "0.05"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool:?} stat record: {out:?}");
        return std::fs::read(&path).unwrap();
    }
    std::fs::read(Path::new(FIXTURES).join(fixture)).unwrap()
}

/// What is wrong with `bperf stat report -i copy`, if anything: misbehaviour, or a
/// refusal that is not one line naming the file.
fn check(copy: &Path) -> Option<String> {
    let mut cmd = common::bperf();
    cmd.args(["stat", "report", "-i"]).arg(copy);
    let out = damage::run_limited(&cmd, 10);
    if let Some(bad) = damage::misbehaviour(&out, copy) {
        return Some(bad);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let refused = !out.status.success();
    let one_line = err.trim_end().lines().count() == 1 && err.contains(&*copy.to_string_lossy());
    (refused && !one_line).then(|| {
        format!(
            "{}: refused without one line naming it: {err}",
            copy.display()
        )
    })
}

/// Checks `COPIES` damaged copies of `good`, two at a time; what went wrong, by copy.
fn fuzz(dir: &Path, tag: &str, good: &[u8]) -> Vec<String> {
    let threads = 2;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut wrong = Vec::new();
                    for i in (t..COPIES).step_by(threads as usize) {
                        let copy = dir.join(format!("{tag}.{i}"));
                        std::fs::write(&copy, damage::damaged_copy(good, SEED, i)).unwrap();
                        match check(&copy) {
                            Some(w) => wrong.push(w),
                            None => std::fs::remove_file(&copy).unwrap(),
                        }
                    }
                    wrong
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    })
}

#[test]
fn damaged_stat_files_are_refused_not_crashed_on() {
    let dir = TempDir::new("fuzz-perfdata");
    let bperf = PathBuf::from(env!("CARGO_BIN_EXE_bperf"));
    let goods = [
        ("bperf", good_file(&dir.0, &bperf, "bperf-stat-A.data")),
        (
            "perf",
            good_file(&dir.0, Path::new(PERF), "perf-6.12-stat-A.data"),
        ),
    ];
    let mut wrong = Vec::new();
    for (tag, good) in &goods {
        // The undamaged file reads.
        let path = dir.0.join(tag);
        std::fs::write(&path, good).unwrap();
        let out = common::bperf()
            .args(["stat", "report", "-i"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{tag}'s good file: {out:?}");
        let started = Instant::now();
        let found = fuzz(&dir.0, tag, good);
        eprintln!(
            "{tag}: {COPIES} damaged copies in {:.1} s, {} wrong",
            started.elapsed().as_secs_f64(),
            found.len()
        );
        wrong.extend(found);
    }
    if !wrong.is_empty() {
        // Kept for a look: the copies that went wrong.
        let keep = std::env::temp_dir().join("bperf-fuzz-perfdata-failures");
        let _ = std::fs::create_dir_all(&keep);
        for w in &wrong {
            let copy = Path::new(w.split(": ").next().unwrap());
            let _ = std::fs::copy(copy, keep.join(copy.file_name().unwrap()));
        }
        let shown: Vec<_> = wrong.iter().take(20).collect();
        panic!(
            "{} of {} damaged copies went wrong (kept in {}):\n{shown:#?}",
            wrong.len(),
            2 * COPIES,
            keep.display()
        );
    }
}
