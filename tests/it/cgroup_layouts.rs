//! Cgroup layouts perf counts on, besides the machine's own: perf_event on a mounted
//! cgroup v1 hierarchy, and on a v1 hierarchy mounted nowhere (as a container runtime can
//! leave it). Each test makes its layout and puts the machine back as it was, however it
//! ends. Counts are checked against the kernel's accounting. Root only; each test holds
//! the counting lock (other tests' cgroups would be looked for in the wrong place).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::v1::{self, mount_v1, perf_event_hierarchy, perf_event_mounted, umount};
use common::*;

/// perf_event on a cgroup v1 hierarchy of the test's own, mounted at `dir`, with a child
/// cgroup that holds a sleeping task: that task keeps the hierarchy alive once unmounted.
/// Dropped: mounted again, emptied, and unmounted until perf_event is back on cgroup2.
struct V1Hierarchy {
    dir: TempDir,
    holder: Option<Child>,
}

impl V1Hierarchy {
    /// None when perf_event is not on cgroup2 to begin with: a layout these tests do
    /// not start from.
    fn mount() -> Option<V1Hierarchy> {
        if perf_event_hierarchy() != 0 || perf_event_mounted() {
            eprintln!("skipped: perf_event is not on cgroup2 on this machine");
            return None;
        }
        let dir = TempDir::new("v1");
        let mut h = V1Hierarchy { dir, holder: None };
        assert!(
            v1::mount_for_test(h.dir.path()),
            "cannot mount perf_event as cgroup v1"
        );
        fs::create_dir(h.child()).unwrap();
        let holder = Command::new("sleep").arg("600").spawn().unwrap();
        let pid = holder.id().to_string();
        h.holder = Some(holder);
        fs::write(h.child().join("cgroup.procs"), pid).unwrap();
        assert_ne!(perf_event_hierarchy(), 0);
        Some(h)
    }

    fn child(&self) -> PathBuf {
        self.dir.join("child")
    }

    /// Leaves the hierarchy mounted nowhere, alive.
    fn unmount(&self) {
        assert!(umount(self.dir.path()));
        assert!(!perf_event_mounted());
        assert_ne!(
            perf_event_hierarchy(),
            0,
            "the hierarchy did not outlive its mount"
        );
    }

    /// Mounts the hierarchy again where it was.
    fn remount(&self) {
        assert!(mount_v1(self.dir.path()));
    }
}

impl Drop for V1Hierarchy {
    fn drop(&mut self) {
        if let Some(mut h) = self.holder.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        v1::put_back_or_fail(self.dir.path());
    }
}

/// Counts cgroup `name` of the hierarchy bperf finds (with `extra` options) while a
/// workload spins in `cg`, after moving to `also` first: it agrees with cg's cpu.stat or
/// with the workload's own task-clock.
fn check_cgroup_count(name: &str, cg: &TestCgroup, also: Option<&Path>, extra: &[&str]) {
    let w = workload();
    let mut script = String::new();
    if let Some(procs) = also {
        script += &format!("echo $$ > {} && ", procs.display());
    }
    script += &format!("echo $$ > {} && exec {} spin 600", cg.procs(), w.display());
    let before = cg.usage_ns() as f64;
    let unaccounted = unaccounted_ns();
    let o = run_ok(
        bperf()
            .args([
                "stat",
                "-a",
                "-x,",
                "-e",
                "task-clock",
                "--for-each-cgroup",
                name,
            ])
            .args(extra)
            .args(["--", "sh", "-c", &script]),
    );
    let err = stderr(&o);
    let ours = csv_value(&err, "task-clock", Some(name)) * 1e6;
    let own = own_task_clock_ns(&err, &["spin"]);
    let kernel = cg.usage_ns() as f64 - before;
    assert!(
        agrees_with_kernel(ours, own, kernel, unaccounted_since(unaccounted)),
        "{name} {extra:?}: counted {ours} ns, own task-clock {own}, cpu.stat {kernel}: {err}"
    );
}

/// Shared counters with no cgroup option: every CPU's whole time.
fn check_shared_cpus_count() {
    let o = run_ok(bperf().args([
        "stat",
        "--bpf-counters",
        "-a",
        "-e",
        "task-clock",
        "--",
        "sleep",
        "1",
    ]));
    let (ms, secs) = table_clock_and_elapsed(&stderr(&o));
    let cpus = bperf::sys::online_cpus().unwrap().len() as f64;
    assert!(
        within(ms * 1e6, cpus * secs * 1e9, 3.0),
        "{ms} ms on {cpus} CPUs in {secs} s"
    );
}

/// Waits for shared counters an earlier test left to their keeper to go: a new instance
/// takes the layout of the machine as it is now.
fn settle_shared() {
    let dir = Path::new("/sys/fs/bpf/bperf");
    wait_for(3, || !dir.exists());
}

/// perf_event on a v1 hierarchy mounted nowhere: counting needs no cgroup tree, and
/// cgroups are those of cgroup2 (as with perf 6.12's --bpf-counters), with and without
/// shared counters.
#[test]
#[ignore = "needs root (make test runs it)"]
fn perf_event_on_a_v1_hierarchy_mounted_nowhere() {
    let _g = serial();
    settle_shared();
    let Some(v1) = V1Hierarchy::mount() else {
        return;
    };
    v1.unmount();
    check_shared_cpus_count();
    let cg = TestCgroup::new("unmounted-v1");
    check_cgroup_count(&cg.name, &cg, None, &[]);
    check_cgroup_count(&cg.name, &cg, None, &["--bpf-counters"]);
    drop(cg);
    drop(v1);
    assert_eq!(perf_event_hierarchy(), 0, "perf_event not back on cgroup2");
}

/// perf_event on a mounted v1 hierarchy: its cgroups are counted, named from its mount,
/// with and without shared counters (the workload is in a cgroup2 cgroup too, whose
/// cpu.stat is the kernel's account of it).
#[test]
#[ignore = "needs root (make test runs it)"]
fn perf_event_on_a_mounted_v1_hierarchy() {
    let _g = serial();
    settle_shared();
    // Made first: the tests' cgroups are found on cgroup2.
    let cg = TestCgroup::new("mounted-v1");
    let Some(v1) = V1Hierarchy::mount() else {
        return;
    };
    let procs = v1.child().join("cgroup.procs");
    check_cgroup_count("child", &cg, Some(&procs), &[]);
    check_cgroup_count("child", &cg, Some(&procs), &["--bpf-counters"]);
    check_shared_cpus_count();
    drop(cg);
    drop(v1);
    assert_eq!(perf_event_hierarchy(), 0, "perf_event not back on cgroup2");
}

/// Shared counters started while perf_event was mounted nowhere charge cgroup2's
/// cgroups: once it is mounted again, a session counting its v1 cgroups through them is
/// refused, with the reason, rather than counting nothing.
#[test]
#[ignore = "needs root (make test runs it)"]
fn shared_counters_keep_the_hierarchy_they_started_with() {
    let _g = serial();
    settle_shared();
    let Some(v1) = V1Hierarchy::mount() else {
        return;
    };
    v1.unmount();
    let mut first = bperf()
        .args([
            "stat",
            "--bpf-counters",
            "-a",
            "-e",
            "task-clock",
            "--",
            "sleep",
            "30",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let joined = wait_for(10, || Path::new("/sys/fs/bpf/bperf/registry").exists());
    v1.remount();
    let o = bperf()
        .args(["stat", "--bpf-counters", "-a", "-e", "task-clock"])
        .args(["--for-each-cgroup", "child", "--", "true"])
        .output()
        .unwrap();
    // SAFETY: plain kill(2) of our own child: as Ctrl-C, it leaves the counters.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    let _ = first.wait();
    assert!(
        joined,
        "the first session did not start the shared counters"
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        err.contains("/sys/fs/bpf/bperf") && err.contains("cgroup v2"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(v1);
    assert_eq!(perf_event_hierarchy(), 0, "perf_event not back on cgroup2");
}

/// perf 6.12, the reference the counts of v1 cgroups are compared with.
const PERF: &str = "/opt/perf-bpf/bin/perf";

/// A cgroup `name` made in the v1 hierarchy `v1`; removed, with anything in it killed,
/// when dropped.
fn v1_cgroup(v1: &V1Hierarchy, name: &str) -> TestCgroup {
    let path = v1.dir.join(name);
    fs::create_dir(&path).unwrap();
    TestCgroup {
        path,
        name: name.to_string(),
    }
}

/// A shell script that starts one spinner per (cgroup, milliseconds), each moved into its
/// cgroup before it execs (so all it runs from then on is the cgroup's), and waits for
/// them. Each says `cgroup=NAME pid=P ran_ns=R` once in its cgroup (R: what it had run
/// before, from its schedstat), and reports its run time when it exits.
fn spinners_script(spinners: &[(&TestCgroup, u64)]) -> String {
    let w = workload();
    let mut script = String::new();
    for (cg, ms) in spinners {
        script += &format!(
            "sh -c 'echo $$ > {} && read ran _ < /proc/self/schedstat && \
             echo cgroup={} pid=$$ ran_ns=$ran >&2 && exec {} spin {ms}' & ",
            cg.procs(),
            cg.name,
            w.display()
        );
    }
    script + "wait"
}

/// What the spinners of a script's run (its stderr) in cgroup `name` and its descendants
/// did, by the kernel's own accounting: their run time since they joined (schedstat, ns),
/// their context switches (getrusage), and how many they were.
fn spinners_run(err: &str, name: &str) -> (f64, f64, f64) {
    let (mut run, mut cs, mut tasks) = (0.0, 0.0, 0.0);
    for l in err.lines().filter_map(|l| l.strip_prefix("cgroup=")) {
        let (cgroup, pid) = l.split_once(" pid=").unwrap();
        let (pid, ran) = pid.split_once(" ran_ns=").unwrap();
        if cgroup != name && !cgroup.starts_with(&format!("{name}/")) {
            continue;
        }
        let report = err
            .lines()
            .find(|r| r.starts_with(&format!("pid={pid} ")))
            .unwrap_or_else(|| panic!("no report of {pid} in {err}"));
        run += report_field(report, "run_ns") - ran.parse::<f64>().unwrap();
        cs += report_field(report, "cs");
        tasks += 1.0;
    }
    (run, cs, tasks)
}

/// Per-cgroup task-clock within this many percent of the run time the kernel's scheduler
/// gave the cgroup's tasks once in it (/proc/PID/schedstat), for bperf and perf alike:
/// each spinner's exit after its last schedstat reading is the cgroup's too (on a
/// loaded two-CPU VM, +0.05% to +0.51%, bperf and perf alike).
const V1_TOLERANCE_PCT: f64 = 1.5;

/// Whether `counted` task-clock agrees with the schedstat run time `run` (ns), given
/// `unaccounted`: the scheduler's clock leaves out interrupts and time the host steals
/// from this VM, which the perf clocks count (see unaccounted_since).
fn agrees_with_schedstat(counted: f64, run: f64, unaccounted: f64) -> bool {
    let tol = V1_TOLERANCE_PCT / 100.0;
    counted >= run * (1.0 - tol) && counted <= run * (1.0 + tol) + unaccounted
}

/// Context switches counted for a cgroup against those its tasks had (getrusage, which
/// includes the few of each spinner's shell before it moved): no fewer than theirs less
/// one per task, and not many more (2 fewer to 7 more, of 35 to 145).
fn agrees_with_rusage(counted: f64, rusage: f64, tasks: f64) -> bool {
    counted >= rusage - tasks && counted <= rusage * 1.2 + 2.0 * tasks
}

/// Counts (with `counter`'s command line, ending in `--`) the v1 cgroups `names` while
/// `spinners` run, and checks each cgroup's task-clock against the run time of its tasks
/// and its context switches against theirs. Returns each cgroup's task-clock relative to
/// that run time, in percent (the spinners spin for a wall-clock time, so what they run
/// differs from run to run).
fn check_v1_counts(
    who: &str,
    counter: &mut Command,
    names: &[&str],
    spinners: &[(&TestCgroup, u64)],
) -> Vec<f64> {
    let unaccounted = unaccounted_ns();
    let o = run_ok(counter.args(["sh", "-c", &spinners_script(spinners)]));
    let err = stderr(&o);
    let slack = unaccounted_since(unaccounted);
    let mut offsets = Vec::new();
    for name in names {
        let counted = csv_value(&err, "task-clock", Some(name)) * 1e6;
        let switches = csv_value(&err, "context-switches", Some(name));
        let (run, cs, tasks) = spinners_run(&err, name);
        let offset = (counted - run) / run * 100.0;
        eprintln!(
            "{who} {name}: task-clock {counted:.0} ns, schedstat {run:.0} ({offset:+.3}%), \
             unaccounted {slack:.0}; context-switches {switches}, getrusage {cs}"
        );
        assert!(
            agrees_with_schedstat(counted, run, slack),
            "{who} {name}: counted {counted} ns, its tasks ran {run} ns: {err}"
        );
        assert!(
            agrees_with_rusage(switches, cs, tasks),
            "{who} {name}: counted {switches} context switches, its tasks had {cs}: {err}"
        );
        offsets.push(offset);
    }
    offsets
}

/// Cgroups of a mounted v1 perf_event hierarchy, one nested in another, with spinners of
/// different lengths: bperf counts each as its tasks ran (their schedstat), and as perf
/// 6.12 counts the same cgroups with -G in a run of its own.
#[test]
#[ignore = "needs root (make test runs it)"]
fn v1_cgroups_counted_as_perf_counts_them() {
    let _g = serial();
    settle_shared();
    let Some(v1) = V1Hierarchy::mount() else {
        return;
    };
    let a = v1_cgroup(&v1, "a");
    let inner = v1_cgroup(&v1, "a/inner");
    let b = v1_cgroup(&v1, "b");
    let spinners = [(&a, 400), (&inner, 600), (&b, 1000)];
    let names = ["a", "a/inner", "b"];
    let ours = check_v1_counts(
        "bperf",
        bperf()
            .args(["stat", "-a", "-x,", "-e", "task-clock,context-switches"])
            .args(["--for-each-cgroup", "a,a/inner,b", "--"]),
        &names,
        &spinners,
    );
    if Path::new(PERF).exists() {
        let perfs = check_v1_counts(
            "perf",
            Command::new(PERF).args([
                "stat",
                "-a",
                "-x,",
                "-e",
                "task-clock,task-clock,task-clock,context-switches,context-switches,context-switches",
                "-G",
                "a,a/inner,b,a,a/inner,b",
                "--",
            ]),
            &names,
            &spinners,
        );
        for ((name, o), p) in names.iter().zip(&ours).zip(&perfs) {
            eprintln!("{name}: task-clock of schedstat: bperf {o:+.3}%, perf {p:+.3}%");
        }
    } else {
        eprintln!("skipped the comparison with perf: {PERF} is missing");
    }
    drop((inner, a, b));
    drop(v1);
    assert_eq!(perf_event_hierarchy(), 0, "perf_event not back on cgroup2");
}
