//! bperf.data's versions: version 1 and 2 recordings (tests/fixtures/bperfdata, made by
//! bperf record before versions 2 and 3) read as they did, every report of them the
//! same; version 3, plain and compressed (-z), reports what its slices say, in a
//! fraction of version 1's bytes. Needs no privilege.

use crate::common;

use std::path::Path;

use common::{bperf, fixture, recording, run_ok, TempFile};

fn report(input: &Path, args: &[&str]) -> String {
    let o = run_ok(bperf().args(["report", "-i"]).arg(input).args(args));
    String::from_utf8(o.stdout).unwrap()
}

/// The version 1 fixture's totals, breakdown and distributions, as bperf printed them
/// when it wrote version 1 (the .csv files beside it).
#[test]
fn a_version_1_recording_reads_as_it_did() {
    let data = fixture("bperfdata/v1-pingpong.data");
    let bytes = std::fs::read(&data).unwrap();
    assert_eq!(
        &bytes[8..12],
        &1u32.to_le_bytes(),
        "the fixture is version 1"
    );
    for (args, expected) in [
        (&["-x,"][..], "v1-pingpong.totals.csv"),
        (
            &["-x,", "--sort", "cgroup,cpu,comm"][..],
            "v1-pingpong.sort.csv",
        ),
        (&["-x,", "--hist"][..], "v1-pingpong.hist.csv"),
    ] {
        let expected = std::fs::read_to_string(fixture(&format!("bperfdata/{expected}"))).unwrap();
        assert_eq!(report(&data, args), expected, "report {args:?}");
    }
}

/// The version 2 fixtures (a command's tasks, plain; a cgroup with -a -z), made by bperf
/// record before version 3: their totals, breakdown and distributions as bperf printed
/// them then (the .csv files beside them), and nothing said on stderr.
#[test]
fn version_2_recordings_read_as_they_did() {
    for name in ["v2-tasks", "v2-cgroup-zstd"] {
        let data = fixture(&format!("bperfdata/{name}.data"));
        let bytes = std::fs::read(&data).unwrap();
        assert_eq!(&bytes[8..12], &2u32.to_le_bytes(), "{name} is version 2");
        for (args, expected) in [
            (&["-x,"][..], "totals"),
            (&["-x,", "--sort", "cgroup,cpu,pid,tid,comm"][..], "sort"),
            (&["-x,", "--hist"][..], "hist"),
        ] {
            let expected =
                std::fs::read_to_string(fixture(&format!("bperfdata/{name}.{expected}.csv")));
            let o = run_ok(bperf().args(["report", "-i"]).arg(&data).args(args));
            assert_eq!(common::stderr(&o), "", "{name} {args:?}");
            assert_eq!(
                String::from_utf8(o.stdout).unwrap(),
                expected.unwrap(),
                "{name} {args:?}"
            );
        }
    }
}

/// Version 3, plain and through zstd, gives report the slices the synthetic recording
/// wrote: the same outputs from both, and the totals the slices add up to.
#[test]
fn version_3_plain_and_compressed_report_the_same() {
    const SLICES: u64 = 50_000;
    let plain = TempFile::new("v2.data");
    let zstd = TempFile::new("v2z.data");
    std::fs::write(&plain.0, recording::bytes(SLICES)).unwrap();
    std::fs::write(&zstd.0, recording::compressed_bytes(SLICES, Some(1))).unwrap();
    for args in [
        &["-x,"][..],
        &["-x,", "--sort", "cgroup,cpu,pid,tid,comm"],
        &["-x,", "--hist"],
    ] {
        assert_eq!(report(&plain.0, args), report(&zstd.0, args), "{args:?}");
    }
    let totals = report(&plain.0, &["-x,"]);
    let lines = common::parse_csv(&totals, false);
    let web = (0..SLICES).filter(|&i| matches!(recording::slot_of(i), 1 | 2));
    let ns: u64 = web.map(recording::length_of).sum();
    let ms = common::value(&lines, "task-clock", "web");
    assert!(
        common::within(ms, ns as f64 / 1e6, 0.01),
        "{ms} ms for {ns} ns"
    );
    let size = |f: &TempFile| std::fs::metadata(&f.0).unwrap().len() as f64 / SLICES as f64;
    let (plain_b, zstd_b) = (size(&plain), size(&zstd));
    eprintln!("version 3: {plain_b:.1} bytes a slice, {zstd_b:.1} with -z (version 1: 120)");
    assert!(plain_b <= 40.0, "{plain_b} bytes a slice");
    assert!(zstd_b < plain_b, "zstd: {zstd_b}, plain: {plain_b}");
}
