//! bperf top on real cgroups: --batch's figures against the kernel's cpu.stat, and the
//! full-screen view driven through tmux (send-keys, capture-pane). Needs root.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::*;

/// A child process killed and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The workload spinning for `ms` in `cg`, once it is there.
fn spinner(cg: &TestCgroup, ms: u32) -> Running {
    let child = Command::new(workload())
        .args(["spin", &ms.to_string(), &cg.procs()])
        .spawn()
        .unwrap();
    assert!(wait_for(10, || !std::fs::read_to_string(cg.procs())
        .unwrap_or_default()
        .trim()
        .is_empty()));
    Running(child)
}

/// One refresh of --batch as the test saw it: the window bperf says it covered, the
/// rows (name, CPUs), and, read as its header arrived, each cgroup's cpu.stat usage,
/// what cpu.stat leaves out, and the time.
struct Page {
    window_s: f64,
    rows: Vec<(String, f64)>,
    usage: Vec<u64>,
    unaccounted: f64,
    at: Instant,
}

/// The window of a header line `bperf top HH:MM:SS  0.501 s  2 CPUs  3 cgroups`.
fn window_of(header: &str) -> f64 {
    let words: Vec<&str> = header.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "s").expect(header);
    words[at - 1].parse().expect(header)
}

/// --batch -n 3 -d 0.5 with two cgroups spinning and one idle: the busy ones come first,
/// sorted by CPUs, each refresh's CPUs within 5% of what cpu.stat says the cgroup used
/// between the refreshes; the idle one last, at about zero.
#[test]
#[ignore = "needs root (make test runs it)"]
fn batch_rows_follow_cpu_stat_busy_first() {
    require_root();
    let _s = serial();
    let busy = [TestCgroup::new("top-busy1"), TestCgroup::new("top-busy2")];
    let idle = TestCgroup::new("top-idle");
    let _spin: Vec<Running> = busy.iter().map(|cg| spinner(cg, 30_000)).collect();
    let cgs = [&busy[0], &busy[1], &idle];
    let pattern = format!("bperf-test-{}-top-.*", std::process::id());
    let mut top = Running(
        bperf()
            .args([
                "top",
                "--batch",
                "-n",
                "3",
                "-d",
                "0.5",
                "--for-each-cgroup",
                &pattern,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = BufReader::new(top.0.stdout.take().unwrap());
    let mut pages: Vec<Page> = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        if line.starts_with("bperf top ") {
            pages.push(Page {
                window_s: window_of(&line),
                rows: Vec::new(),
                usage: cgs.iter().map(|c| c.usage_ns()).collect(),
                unaccounted: unaccounted_ns(),
                at: Instant::now(),
            });
        } else if let Some(page) = pages.last_mut() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() > 1 && words[0] != "CGROUP" {
                page.rows
                    .push((words[0].to_string(), words[1].parse().expect(&line)));
            }
        }
    }
    assert!(top.0.wait().unwrap().success());
    assert_eq!(pages.len(), 3);
    for (k, page) in pages.iter().enumerate() {
        let names: Vec<&str> = page.rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names[..2].contains(&busy[0].name.as_str()), "{names:?}");
        assert!(names[..2].contains(&busy[1].name.as_str()), "{names:?}");
        assert_eq!(names[2], idle.name);
        assert!(
            page.rows[0].1 >= page.rows[1].1,
            "sorted by CPUs: {:?}",
            page.rows
        );
        assert!(page.rows[2].1 < 0.01, "idle: {:?}", page.rows);
        assert!(
            (page.window_s - 0.5).abs() < 0.1,
            "window {}",
            page.window_s
        );
        if k == 0 {
            continue;
        }
        // Each refresh against cpu.stat between the arrivals of its page and the one
        // before.
        let before = &pages[k - 1];
        let wall = (page.at - before.at).as_secs_f64();
        let unaccounted = page.unaccounted - before.unaccounted + 1e7;
        for (i, cg) in busy.iter().enumerate() {
            let cpus = page.rows.iter().find(|(n, _)| *n == cg.name).unwrap().1;
            let kernel_ns = (page.usage[i] - before.usage[i]) as f64;
            let ours_ns = cpus * wall * 1e9;
            eprintln!(
                "refresh {k}, {}: {cpus} CPUs, cpu.stat {:.4}",
                cg.name,
                kernel_ns / wall / 1e9
            );
            let ok = ours_ns >= kernel_ns * 0.95 && ours_ns <= kernel_ns * 1.05 + unaccounted;
            assert!(
                ok,
                "refresh {k}, {}: {cpus} CPUs over {wall:.3} s against cpu.stat's {:.3} CPUs",
                cg.name,
                kernel_ns / wall / 1e9
            );
        }
    }
}
