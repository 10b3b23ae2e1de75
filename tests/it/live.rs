//! Live cgroups: cgroups created while bperf counts are counted from their creation,
//! removed ones report their final counts once and free their place. Checked against
//! cpu.stat and the processes' own task-clock. Needs root.

use crate::common;

use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// bperf stat counting task-clock with -x, -I 200 and `args`, started and counting: its
/// first interval line has come. Its output lines arrive on the receiver.
fn start_task_clock(args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let args = [&["-e", "task-clock"], args].concat();
    let (child, rx, first) = start_stat(&args, Duration::from_secs(10));
    assert!(first.contains("task-clock"), "{first}");
    (child, rx)
}

/// Stops bperf (SIGINT, as Ctrl-C) and returns everything else it printed.
fn stop(mut child: Child, rx: mpsc::Receiver<String>) -> Vec<String> {
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "bperf ended with {st}");
    rx.into_iter().collect()
}

/// Spins `ms` in `cg` (the workload moves itself there) and returns its own task-clock.
fn spin_in(cg: &TestCgroup, ms: u32) -> f64 {
    let o = run_ok(Command::new(workload()).args(["spin", &ms.to_string(), &cg.procs()]));
    own_task_clock_ns(&stderr(&o), &["spin"])
}

/// The CSV lines among bperf's output (the rest are messages).
fn csv(lines: &[String]) -> Vec<CsvLine> {
    let text: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| !l.starts_with("bperf:"))
        .collect();
    parse_csv(&text.join("\n"), true)
}

/// The (time, task-clock ns) rows of cgroup `name`.
fn rows(lines: &[String], name: &str) -> Vec<(f64, f64)> {
    csv(lines)
        .into_iter()
        .filter(|l| l.cgroup == name && l.event == "task-clock")
        .map(|l| (l.time.unwrap(), l.value.unwrap_or(0.0) * 1e6))
        .collect()
}

fn last_time(lines: &[String]) -> f64 {
    csv(lines).iter().filter_map(|l| l.time).fold(0.0, f64::max)
}

/// A cgroup created after bperf started is counted from its creation, with what the
/// kernel charged it; once removed, it prints its final counts once and drops out.
#[test]
#[ignore = "needs root (make test runs it)"]
fn all_cgroups_follows_a_cgroup_created_and_removed_while_counting() {
    let _g = serial();
    let (child, rx) = start_task_clock(&["--all-cgroups"]);
    let unaccounted = unaccounted_ns();
    let cg = TestCgroup::new("live");
    let own = spin_in(&cg, 800);
    let kernel = cg.usage_ns() as f64;
    let name = cg.name.clone();
    drop(cg);
    std::thread::sleep(Duration::from_millis(600));
    let lines = stop(child, rx);
    let counted = rows(&lines, &name);
    assert!(!counted.is_empty(), "no rows for {name}: {lines:?}");
    let ours: f64 = counted.iter().map(|r| r.1).sum();
    assert!(
        agrees_with_kernel(ours, own, kernel, unaccounted_since(unaccounted)),
        "{name}: counted {ours} ns, own task-clock {own}, cpu.stat {kernel}"
    );
    // Gone before the end: its rows stop while the other rows go on.
    let last = counted.last().unwrap().0;
    assert!(last < last_time(&lines), "{name} still printed at the end");
    assert_eq!(bperf_programs(), Vec::<String>::new());
}

/// With every place taken, a new cgroup is left out and said so; a removed cgroup's
/// place goes to the next new cgroup, which starts from zero.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_removed_cgroups_place_is_reused_without_its_counts() {
    let _g = serial();
    let existing = count_cgroups();
    let max = (existing + 1).to_string();
    let (child, rx) = start_task_clock(&["--all-cgroups", "--max-cgroups", &max]);
    let unaccounted = unaccounted_ns();
    let a = TestCgroup::new("reuse-a");
    let own_a = spin_in(&a, 400);
    let kernel_a = a.usage_ns() as f64;
    let name_a = a.name.clone();
    drop(a);
    // An interval reports a's final counts; then its place is free.
    std::thread::sleep(Duration::from_millis(500));
    let b = TestCgroup::new("reuse-b");
    std::thread::sleep(Duration::from_millis(300));
    let c = TestCgroup::new("reuse-c");
    let own_b = spin_in(&b, 300);
    let kernel_b = b.usage_ns() as f64;
    std::thread::sleep(Duration::from_millis(300));
    let (name_b, name_c) = (b.name.clone(), c.name.clone());
    let lines = stop(child, rx);
    drop((b, c));
    let slack = unaccounted_since(unaccounted);
    let ours_a: f64 = rows(&lines, &name_a).iter().map(|r| r.1).sum();
    let ours_b: f64 = rows(&lines, &name_b).iter().map(|r| r.1).sum();
    assert!(
        agrees_with_kernel(ours_a, own_a, kernel_a, slack),
        "{name_a}: counted {ours_a} ns, own {own_a}, cpu.stat {kernel_a}"
    );
    assert!(
        agrees_with_kernel(ours_b, own_b, kernel_b, slack),
        "{name_b}: counted {ours_b} ns, own {own_b}, cpu.stat {kernel_b}"
    );
    assert!(rows(&lines, &name_c).is_empty(), "{name_c} was counted");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("1 cgroups are not counted")),
        "{lines:?}"
    );
}

/// Patterns pick up new cgroups whose names match, and only those.
#[test]
#[ignore = "needs root (make test runs it)"]
fn patterns_follow_new_cgroups_that_match() {
    let _g = serial();
    let pattern = format!("bperf-test-{}-re-.*", std::process::id());
    let (child, rx) = start_task_clock(&["--for-each-cgroup", &format!("/,{pattern}")]);
    let unaccounted = unaccounted_ns();
    let yes = TestCgroup::new("re-yes");
    let no = TestCgroup::new("other");
    let own = spin_in(&yes, 400);
    spin_in(&no, 100);
    let kernel = yes.usage_ns() as f64;
    std::thread::sleep(Duration::from_millis(300));
    let lines = stop(child, rx);
    let ours: f64 = rows(&lines, &yes.name).iter().map(|r| r.1).sum();
    assert!(
        agrees_with_kernel(ours, own, kernel, unaccounted_since(unaccounted)),
        "{}: counted {ours} ns, own {own}, cpu.stat {kernel}",
        yes.name
    );
    assert!(rows(&lines, &no.name).is_empty());
    assert!(!rows(&lines, "/").is_empty());
}

/// How many cgroups the tree holds now, the root included.
fn count_cgroups() -> usize {
    fn walk(dir: &std::path::Path) -> usize {
        1 + std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| walk(&e.path()))
            .sum::<usize>()
    }
    walk(&cgroup2_mount())
}
