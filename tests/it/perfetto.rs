//! bperf report --timeline F.perfetto-trace read back with Perfetto's own protos
//! (perfetto_trace_pb2): tracks, slices, interned names and counters of a synthetic
//! recording, and the memory a million slices' conversion takes. Needs no privilege.

use crate::common;

use common::{bperf, peak_rss_kb, perfetto, recording, run_ok, TempFile};

/// A recording made by the file module's own writer, in a temporary file.
fn synthetic(tag: &str, slices: u64) -> TempFile {
    let file = TempFile::new(tag);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&file.0).unwrap());
    recording::write(&mut out, slices).unwrap();
    std::io::Write::flush(&mut out).unwrap();
    drop(out);
    file
}

fn timeline(input: &TempFile, output: &TempFile) {
    run_ok(
        bperf()
            .args(["report", "-i"])
            .arg(&input.0)
            .arg("--timeline")
            .arg(&output.0),
    );
}

/// Every slice is on its CPU's track, named after its cgroup, lasting what it lasted,
/// with its task, counts and metrics as arguments; each cgroup's counter tracks
/// integrate to what its slices counted (a parent's with its child's).
#[test]
fn the_trace_reads_back_with_perfettos_protos() {
    const SLICES: u64 = 20_000;
    let input = synthetic("pf.data", SLICES);
    for ext in ["perfetto-trace", "pftrace"] {
        let trace = TempFile::new(&format!("pf.{ext}"));
        timeline(&input, &trace);
        let s = perfetto::summary(&trace.0);
        assert_eq!(s["unbalanced"], 0, "{s}");
        let mut children = perfetto::root_children(&s);
        children.sort();
        assert_eq!(children, ["/", "CPU 0", "CPU 1", "db", "web", "web/api"]);
        for cpu in ["CPU 0", "CPU 1"] {
            assert_eq!(s["slice_tracks"][cpu], SLICES / 2, "{}", s["slice_tracks"]);
        }
        for (slot, (name, _)) in recording::CGROUPS.iter().enumerate() {
            let own = (0..SLICES).filter(|&i| recording::slot_of(i) == slot);
            let (n, ns) = own.fold((0, 0), |(n, ns), i| (n + 1, ns + recording::length_of(i)));
            let got = &s["slices"][name];
            assert_eq!(
                (got["count"].as_u64(), got["ns"].as_u64()),
                (Some(n), Some(ns)),
                "{name}: {got}"
            );
            for arg in [
                "comm",
                "pid",
                "tid",
                "cgroup_id",
                "task-clock",
                "context-switches",
                "CPUs",
                "cut",
            ] {
                assert!(
                    got["args"].as_array().unwrap().iter().any(|a| a == arg),
                    "{name}: no {arg}: {got}"
                );
            }
            // Counted with its descendants, as report's totals: web with web/api, / with all.
            let charged = |i: u64| match (slot, recording::slot_of(i)) {
                (0, _) => true,
                (1, 2) => true,
                (a, b) => a == b,
            };
            let task_clock: u64 = (0..SLICES)
                .filter(|&i| charged(i))
                .map(recording::length_of)
                .sum();
            let switches = (0..SLICES).filter(|&i| charged(i) && i % 7 != 0).count() as f64;
            let counters = &s["counters"];
            let cpus = counters[format!("{name} task-clock (CPUs)")]["integral"]
                .as_f64()
                .unwrap();
            assert!(
                (cpus - task_clock as f64).abs() < 1e-6 * task_clock as f64,
                "{name}: {cpus} for {task_clock}"
            );
            let per_s = counters[format!("{name} context-switches /s")]["integral"]
                .as_f64()
                .unwrap()
                / 1e9;
            assert!(
                (per_s - switches).abs() < 1e-6 * switches,
                "{name}: {per_s} for {switches}"
            );
        }
        assert_eq!(
            perfetto::counter_tracks(&s).len(),
            2 * recording::CGROUPS.len()
        );
    }
}

/// Slices in the large recording, and the most its conversion may take: memory that
/// does not grow with the slices (holding them would take hundreds of MB).
const LARGE_SLICES: u64 = 1_000_000;
const RSS_LIMIT_KB: i64 = 64 << 10;

#[test]
fn a_million_slices_convert_in_bounded_memory() {
    let input = synthetic("pf-large.data", LARGE_SLICES);
    let trace = TempFile::new("pf-large.pftrace");
    let (kb, status, err) = peak_rss_kb(
        bperf()
            .args(["report", "-i"])
            .arg(&input.0)
            .arg("--timeline")
            .arg(&trace.0),
    );
    assert!(status.success(), "{err}");
    let bytes = std::fs::metadata(&trace.0).unwrap().len();
    eprintln!(
        "--timeline .pftrace of {LARGE_SLICES} slices: peak RSS {kb} kB, {bytes} bytes ({} a slice)",
        bytes / LARGE_SLICES
    );
    assert!(kb < RSS_LIMIT_KB, "peaked at {kb} kB");
    assert!(
        err.contains(&format!("timeline of {LARGE_SLICES} slices")),
        "{err}"
    );
}
