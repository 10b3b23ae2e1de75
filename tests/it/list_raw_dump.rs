//! `bperf list --raw-dump [WORD...]`: the names perf's scripts (and its shell completion)
//! enumerate, in perf 6.12's words and form: each name followed by a space, on one line
//! without a newline. Checked against perf 6.12 live when it is there, and against its
//! output recorded on this project's machines.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::TempDir;

const PERF: &str = "/opt/perf-bpf/bin/perf";
/// perf's tool events, which bperf does not count and so does not list.
const TOOL_EVENTS: [&str; 3] = ["duration_time", "user_time", "system_time"];

/// `tool list --raw-dump WORDS`, with an empty home of the test's: an empty build-id cache:
/// perf lists the SDT probes of the binaries it has cached (~/.debug, filled by `perf
/// record` and the like), which bperf does not read.
fn raw_dump(tool: &str, words: &[&str]) -> String {
    let cache = TempDir::new("buildid");
    let out = Command::new(tool)
        .args(["list", "--raw-dump"])
        .args(words)
        .env("HOME", cache.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{tool} list --raw-dump {words:?}: {out:?}"
    );
    String::from_utf8(out.stdout).unwrap()
}

fn bperf(words: &[&str]) -> String {
    raw_dump(common::BPERF_EXE, words)
}

/// The names of a raw dump, without perf's tool events.
fn names(dump: &str) -> Vec<&str> {
    dump.split(' ')
        .filter(|n| !n.is_empty() && !TOOL_EVENTS.contains(n))
        .collect()
}

/// Each name followed by one space, no newline: perf's form.
fn assert_perfs_form(dump: &str, words: &[&str]) {
    assert!(!dump.contains('\n'), "{words:?}: {dump:?}");
    assert!(
        dump.is_empty() || dump.ends_with(' '),
        "{words:?}: {dump:?}"
    );
    assert!(
        !dump.contains("  ") && !dump.starts_with(' '),
        "{words:?}: {dump:?}"
    );
}

/// Software events are probed, as perf probes them: the kernel must let us (root).
#[test]
#[ignore = "needs root (make test runs it)"]
fn raw_dump_is_in_perfs_form_and_words() {
    for words in [
        &[][..],
        &["sw"],
        &["hw"],
        &["metric"],
        &["metricgroup"],
        &["sdt"],
        &["sched:sched_switch"],
        &["task"],
        &["sw", "pmu"],
    ] {
        assert_perfs_form(&bperf(words), words);
    }
    for (words, fixture) in [
        (&["sw"][..], "sw.txt"),
        (&["software"], "sw.txt"),
        (&["sched:sched_switch"], "sched-switch.txt"),
        (&["sdt"], "sdt.txt"),
    ] {
        let perfs =
            std::fs::read_to_string(common::fixture(&format!("perf-6.12/raw-dump/{fixture}")))
                .unwrap();
        assert_eq!(names(&bperf(words)), names(&perfs), "{words:?}");
    }
    // bperf's metrics and their groups, as its list prints them.
    let metrics = bperf(&["metric"]);
    assert!(names(&metrics).contains(&"CPUs_utilized"), "{metrics}");
    assert_eq!(
        names(&bperf(&["metricgroup"])),
        ["Default", "Default2", "Default3", "Default4"]
    );
    assert_eq!(
        names(&bperf(&["*per_second"])),
        [
            "Default",
            "cs_per_second",
            "migrations_per_second",
            "page_faults_per_second"
        ]
    );
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn raw_dump_names_what_perf_names() {
    if !Path::new(PERF).exists() {
        return;
    }
    for words in [
        &["hw"][..],
        &["hardware"],
        &["sw"],
        &["software"],
        &["cache"],
        &["hwcache"],
        &["pmu"],
        &["tracepoint"],
        &["sdt"],
        &["sched:*"],
        &["sched:sched_switch"],
        &["task"],
        &["msr"],
        &["fib"],
        &["nonsense"],
        &["sw", "pmu"],
    ] {
        let (ours, theirs) = (bperf(words), raw_dump(PERF, words));
        assert_perfs_form(&theirs, words);
        assert_eq!(names(&ours), names(&theirs), "{words:?}");
    }
    // Everything: the same events and syntaxes up to the last tracepoint, but for what
    // bperf does not take (perf's mem: breakpoints, and the core PMU perf makes up
    // when the machine has none); then the metrics, which are bperf's own.
    let (ours, theirs) = (bperf(&[]), raw_dump(PERF, &[]));
    let no_core_pmu = !Path::new("/sys/bus/event_source/devices/cpu").exists();
    let events = |dump: &str| -> Vec<String> {
        let all = names(dump);
        let last_tracepoint = all.iter().rposition(|n| n.contains(':')).unwrap();
        all[..=last_tracepoint]
            .iter()
            .filter(|n| !(n.starts_with("mem:") || no_core_pmu && n.starts_with("cpu/")))
            .map(|n| n.to_string())
            .collect()
    };
    assert_eq!(events(&ours), events(&theirs));
    let all = names(&ours);
    let tail = &all[all.iter().rposition(|n| n.contains(':')).unwrap() + 1..];
    let (metrics, groups) = (bperf(&["metric"]), bperf(&["metricgroup"]));
    let mut expected: Vec<&str> = names(&metrics).into_iter().chain(names(&groups)).collect();
    let mut got = tail.to_vec();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(tail.first(), names(&groups).first());
}
