//! Run-queue wait and preemptions by culprit (issue 39), against the kernel's own
//! accounting: schedstat's run_delay and getrusage's involuntary switches, which the
//! workload processes report as they exit.

mod common;

use std::mem::MaybeUninit;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use bperf::bpf::runq::{Config, Runq, Waits};
use common::{report_field, workload, TestCgroup};

/// The workload with `args`, in cgroup `cg` and pinned to `cpu` from before its exec.
fn pinned(cg: &TestCgroup, cpu: usize, args: &[&str]) -> Child {
    let procs = cg.procs();
    let mut cmd = Command::new(workload());
    cmd.args(args).stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec; it only writes a file
    // and calls sched_setaffinity(2), and allocates nothing the parent shares.
    unsafe {
        cmd.pre_exec(move || {
            std::fs::write(&procs, "0")?;
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and
            // sched_setaffinity only write inside it.
            let set = {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                set
            };
            // SAFETY: pins this (child) process to the set built above.
            match libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    cmd.spawn().expect("starting the workload")
}

/// The reports of a finished workload (one line per process).
fn reports(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    common::stderr(&out)
}

fn sum_field(reports: &str, name: &str) -> f64 {
    reports.lines().map(|l| report_field(l, name)).sum()
}

fn cgroup_id(cg: &TestCgroup) -> u64 {
    std::fs::metadata(&cg.path).unwrap().ino()
}

/// Loads the program for `cgroups` (slots in that order), runs `work`, reads.
fn counted(cgroups: &[&TestCgroup], work: impl FnOnce()) -> Waits {
    let ids: Vec<u64> = cgroups.iter().map(|c| cgroup_id(c)).collect();
    let config = Config {
        cgroups: &ids,
        nr_slots: ids.len(),
        cgroup_v1: false,
        max_pairs: 64,
    };
    let mut storage = MaybeUninit::uninit();
    let runq = Runq::load(&config, &mut storage).expect("loading runq.bpf.c");
    work();
    runq.read().unwrap()
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn two_spinners_on_one_cpu_wait_behind_each_other() {
    common::require_root();
    let _serial = common::serial();
    let (a, b, c) = (
        TestCgroup::new("rq-a"),
        TestCgroup::new("rq-b"),
        TestCgroup::new("rq-c"),
    );
    let mut delays = [0.0; 3];
    let waits = counted(&[&a, &b, &c], || {
        let spinners = [
            pinned(&a, 0, &["spin", "2000"]),
            pinned(&b, 0, &["spin", "2000"]),
            pinned(&c, 1, &["spin", "2000"]),
        ];
        for (d, s) in delays.iter_mut().zip(spinners) {
            *d = sum_field(&reports(s), "run_delay_ns");
        }
    });
    eprintln!("{waits:?} run_delay {delays:?}");
    for (slot, other) in [(0, 1), (1, 0)] {
        let total = waits.total[slot].wait_ns as f64;
        assert!(
            common::within(total, delays[slot], 2.0),
            "slot {slot}: waited {total} ns, run_delay {} ns",
            delays[slot]
        );
        let behind = waits.by.get(&(slot, other)).copied().unwrap_or_default();
        assert!(
            behind.wait_ns as f64 >= 0.95 * total,
            "slot {slot}: {} of {total} ns behind the other spinner, {:?} behind none monitored",
            behind.wait_ns,
            waits.other(slot)
        );
    }
    let c_behind_ab: u64 = [0, 1]
        .iter()
        .filter_map(|&s| waits.by.get(&(2, s)))
        .map(|w| w.wait_ns)
        .sum();
    assert!(
        (c_behind_ab as f64) < 0.01 * delays[0],
        "the spinner on CPU 1 waited {c_behind_ab} ns behind those on CPU 0"
    );
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn a_spinner_preempts_a_ping_pong_on_its_cpu() {
    common::require_root();
    let _serial = common::serial();
    let (pp, spin) = (TestCgroup::new("rq-pp"), TestCgroup::new("rq-spin"));
    let mut ivcs = 0.0;
    let waits = counted(&[&pp, &spin], || {
        let spinner = pinned(&spin, 0, &["spin", "3000"]);
        let pingpong = pinned(&pp, 0, &["pingpong", "20000"]);
        ivcs = sum_field(&reports(pingpong), "ivcs");
        reports(spinner);
    });
    eprintln!("{waits:?} ivcs {ivcs}");
    let by_spinner = waits.by.get(&(0, 1)).copied().unwrap_or_default();
    assert!(
        ivcs > 0.0,
        "the ping-pong was never preempted: nothing to compare"
    );
    assert!(
        common::within(by_spinner.preemptions as f64, ivcs, 5.0),
        "preempted by the spinner {} times, involuntary switches {ivcs}",
        by_spinner.preemptions
    );
}
