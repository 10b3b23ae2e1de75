//! `bperf stat report` on damaged perf.data files: 2000 damaged copies (fixed seed) of a
//! good file written by bperf's `stat record`, of one written by perf 6.12's, and of
//! perf's pipe output, each read by the binary under an address-space and time limit. Refusing a copy is right;
//! a panic, an abort on a failed allocation or a hang is not, and a refusal is one line
//! that names the file.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{damage, TempDir};

const SEED: u64 = 0x2203;
const COPIES: u64 = 2000;
const PERF: &str = "/opt/perf-bpf/bin/perf";

/// A stat file recorded now by `tool` (counts per CPU, so the topology features are
/// there too), as perf.data or (`pipe`) in perf's pipe format; or the committed one
/// when it cannot be (not root, no perf 6.12).
fn good_file(dir: &Path, tool: &Path, pipe: bool, fixture: &str) -> Vec<u8> {
    if bperf::sys::is_root() && tool.exists() {
        let path = dir.join(format!("{fixture}.good"));
        let output = match pipe {
            true => Path::new("-"),
            false => &path,
        };
        let _serial = common::serial();
        let out = Command::new(tool)
            .env("BPERF_PERF_VERSION", "6.12")
            .args([
                "stat",
                "record",
                "-a",
                "-A",
                "-e",
                "task-clock,context-switches",
            ])
            .arg("-o")
            .arg(output)
            .args(["sleep", "0.05"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool:?} stat record: {out:?}");
        return match pipe {
            true => out.stdout,
            false => std::fs::read(&path).unwrap(),
        };
    }
    std::fs::read(common::fixture(&format!("perfdata/{fixture}"))).unwrap()
}

/// What is wrong with `bperf stat report -i copy`, if anything: misbehaviour, or a
/// refusal that is not one line naming the file. A perf.data file is checked whole
/// before anything of it is printed; a pipe is printed as it comes (as perf prints it),
/// so the counts before the damage may come before the refusal (`streamed`).
fn check(copy: &Path, streamed: bool) -> Option<String> {
    let mut cmd = common::bperf();
    cmd.args(["stat", "report", "-i"]).arg(copy);
    let out = damage::run_limited(&cmd, 10);
    if let Some(bad) = damage::misbehaviour(&out, copy) {
        return Some(bad);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.trim_end().lines().collect();
    let refusal = format!("bperf: {}: ", copy.display());
    let refused_so = match streamed {
        true => lines.last().is_some_and(|l| l.starts_with(&refusal)),
        false => lines.len() == 1 && lines[0].starts_with(&refusal),
    };
    (!out.status.success() && !refused_so).then(|| {
        format!(
            "{}: refused without one line naming it: {err}",
            copy.display()
        )
    })
}

/// Checks `COPIES` damaged copies of `good`, two at a time; what went wrong, by copy.
fn fuzz(dir: &Path, tag: &str, good: &[u8], streamed: bool) -> Vec<String> {
    let threads = 2;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut wrong = Vec::new();
                    for i in (t..COPIES).step_by(threads as usize) {
                        let copy = dir.join(format!("{tag}.{i}"));
                        std::fs::write(&copy, damage::damaged_copy(good, SEED, i)).unwrap();
                        match check(&copy, streamed) {
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
    let bperf = PathBuf::from(common::BPERF_EXE);
    let perf = Path::new(PERF);
    let goods = [
        (
            "bperf",
            good_file(&dir.0, &bperf, false, "bperf-stat-A.data"),
        ),
        (
            "perf",
            good_file(&dir.0, perf, false, "perf-6.12-stat-A.data"),
        ),
        (
            "perf-pipe",
            good_file(&dir.0, perf, true, "perf-6.12-stat-A-I.pipe"),
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
        let found = fuzz(&dir.0, tag, good, tag.ends_with("pipe"));
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
            goods.len() as u64 * COPIES,
            keep.display()
        );
    }
}

/// perf_event_header then body: one record of perf's format.
fn record(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut r = kind.to_le_bytes().to_vec();
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
    r.extend_from_slice(body);
    r
}

/// A pipe's start: the pipe header and one software event (task-clock) of id 1.
fn pipe_start() -> Vec<u8> {
    use bperf::perfdata::{RecordedEvent, StatFile};
    let mut attr = vec![0u8; 136];
    (attr[0], attr[4], attr[8]) = (1, 136, 1);
    let file = StatFile {
        events: vec![RecordedEvent {
            name: "task-clock".into(),
            attr,
            ids: vec![1],
        }],
        cpus: vec![-1],
        ..StatFile::default()
    };
    file.pipe_header()
}

/// `bperf stat report -i FIFO` under the limits, fed `start` and then `unit` again and
/// again until it stops reading (or `times` units were written).
fn endless_pipe(
    dir: &Path,
    tag: &str,
    start: Vec<u8>,
    unit: Vec<u8>,
    times: usize,
) -> std::process::Output {
    let fifo = dir.join(tag);
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) of a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut w = std::io::BufWriter::new(
                std::fs::OpenOptions::new().write(true).open(fifo).unwrap(),
            );
            // Written until the reader stops reading (EPIPE: the test ignores SIGPIPE).
            let _ = w.write_all(&start);
            for _ in 0..times {
                if w.write_all(&unit).is_err() {
                    break;
                }
            }
        })
    };
    let mut cmd = common::bperf();
    cmd.args(["stat", "report", "-i"]).arg(&fifo);
    let out = damage::run_limited(&cmd, 60);
    writer.join().unwrap();
    out
}

#[test]
fn endless_pipes_are_read_in_bounded_memory() {
    let dir = TempDir::new("endless-pipes");
    let stat = {
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        [1_000_000u64, 1_000, 1_000]
            .iter()
            .for_each(|v| body.extend_from_slice(&v.to_le_bytes()));
        record(76, &body)
    };
    let round = {
        let mut body = 0u64.to_le_bytes().to_vec();
        body.extend_from_slice(&1_000_000u64.to_le_bytes());
        record(77, &body)
    };
    let mut attr = vec![0u8; 136];
    (attr[0], attr[4], attr[8]) = (1, 136, 1);
    attr.extend_from_slice(&7u64.to_le_bytes());
    let cases = [
        // Events without end: refused at the cap on events.
        (
            "attrs",
            pipe_start()[..16].to_vec(),
            record(64, &attr),
            10_000_000,
            Some("more than 65536 events"),
        ),
        // Counts without a round to end them: refused at the cap on a round's counts.
        (
            "counts",
            pipe_start(),
            stat.clone(),
            10_000_000,
            Some("more than 1048576 counts in one round"),
        ),
        // Rounds without end: each printed as it comes, nothing held.
        (
            "rounds",
            pipe_start(),
            [stat, round].concat(),
            200_000,
            None,
        ),
    ];
    for (tag, start, unit, times, refusal) in cases {
        let out = endless_pipe(&dir.0, tag, start, unit, times);
        let fifo = dir.0.join(tag);
        assert_eq!(damage::misbehaviour(&out, &fifo), None, "{tag}");
        let err = String::from_utf8_lossy(&out.stderr);
        match refusal {
            Some(why) => {
                let last = err.trim_end().lines().last().unwrap_or_default();
                assert!(
                    last.starts_with(&format!("bperf: {}: damaged at offset", fifo.display())),
                    "{tag}: {last}"
                );
                assert!(last.contains(why), "{tag}: {last}");
            }
            None => {
                assert!(out.status.success(), "{tag}: {out:?}");
                assert_eq!(err.matches(" task-clock ").count(), times, "{tag}");
            }
        }
    }
}
