//! perf stat's run-control options, by what they do: -i, --all-user/--all-kernel, -n,
//! --timeout, -D, --summary, --quiet, and their refusals. Needs root, except where
//! noted.

use crate::common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

fn stat(args: &[&str]) -> Output {
    bperf().arg("stat").args(args).output().unwrap()
}

/// The task-clock (ms) bperf counted, from -x, output (no cgroups) on stderr.
fn task_clock_ms(err: &str) -> f64 {
    err.lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "task-clock")
        .and_then(|f| f[0].parse().ok())
        .unwrap_or_else(|| panic!("no task-clock in {err}"))
}

/// -i counts the command alone: a child's 300 ms of spinning are left out.
#[test]
#[ignore = "needs root (make test runs it)"]
fn no_inherit_leaves_children_out() {
    let _g = serial();
    let w = workload().display().to_string();
    let spin = format!("{w} spin 300");
    // The spinner (a child of sh) reports its own task-clock: the kernel's count of what
    // -i must leave out and counting with children must include, however loaded the
    // machine is.
    let run = |args: &[&str]| {
        let err = stderr(&stat(args));
        (
            task_clock_ms(&err),
            own_task_clock_ns(&err, &["spin"]) / 1e6,
        )
    };
    let (with, child_with) = run(&["-x,", "-e", "task-clock", "--", "sh", "-c", &spin]);
    let (without, child_without) = run(&["-x,", "-i", "-e", "task-clock", "--", "sh", "-c", &spin]);
    assert!(
        with >= child_with && with < child_with + 50.0,
        "with children: {with} ms, the spinner's own {child_with} ms"
    );
    assert!(
        without < child_without / 3.0,
        "-i: {without} ms, the spinner's own {child_without} ms"
    );
}

/// --all-user and --all-kernel set every event's exclusions, as :u and :k would.
#[test]
#[ignore = "needs root (make test runs it)"]
fn all_user_and_all_kernel_set_every_attr() {
    let _g = serial();
    for (opt, excluded, kept) in [
        ("--all-user", "exclude_kernel", "exclude_user"),
        ("--all-kernel", "exclude_user", "exclude_kernel"),
    ] {
        let o = stat(&[
            "-vv",
            opt,
            "-e",
            "task-clock,cs:u,page-faults:k",
            "--",
            "true",
        ]);
        let err = stderr(&o);
        let attrs: Vec<&str> = err.split("perf_event_attr:").skip(1).collect();
        assert_eq!(attrs.len(), 3, "{opt}: {err}");
        for a in attrs {
            assert!(a.contains(&format!("  {excluded:<32} 1")), "{opt}: {a}");
            assert!(!a.contains(&format!("  {kept:<32} 1")), "{opt}: {a}");
        }
    }
}

/// -n opens no counter: the header and the time elapsed, the command's status.
#[test]
#[ignore = "needs root (make test runs it)"]
fn null_run_times_only() {
    let o = stat(&["-n", "--", "sh", "-c", "exit 3"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("seconds time elapsed"), "{err}");
    assert!(!err.contains("task-clock") && !err.contains('#'), "{err}");
}

/// --timeout ends the command with SIGTERM and prints the counts, as perf; without a
/// command it ends counting.
#[test]
#[ignore = "needs root (make test runs it)"]
fn timeout_ends_counting() {
    let _g = serial();
    let t = Instant::now();
    let o = stat(&["--timeout", "300", "-e", "task-clock", "--", "sleep", "10"]);
    let err = stderr(&o);
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "the command was not stopped"
    );
    assert!(err.contains("sleep: Terminated"), "{err}");
    assert!(err.contains("task-clock"), "{err}");
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{err}");
    let o = stat(&["-a", "--timeout", "200", "-x,", "-e", "task-clock"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(task_clock_ms(&stderr(&o)) > 0.0);
}

/// -D starts counting later: a spinner's first 300 ms of 700 are left out.
#[test]
#[ignore = "needs root (make test runs it)"]
fn delay_starts_counting_later() {
    let _g = serial();
    let w = workload().display().to_string();
    let o = stat(&[
        "-D",
        "300",
        "-x,",
        "-e",
        "task-clock",
        "--",
        &w,
        "spin",
        "700",
    ]);
    let err = stderr(&o);
    assert!(
        err.starts_with("Events disabled\nEvents enabled\n"),
        "{err}"
    );
    let own = own_task_clock_ns(&err, &["spin"]) / 1e6;
    let counted = task_clock_ms(&err);
    assert!(
        counted < own - 200.0 && counted > own - 400.0,
        "-D 300: {counted} ms of the spinner's {own} ms"
    );
}

/// --summary adds the whole run after the intervals: in CSV its lines start with
/// `summary`, and it is the sum of the intervals.
#[test]
#[ignore = "needs root (make test runs it)"]
fn summary_sums_the_intervals() {
    let _g = serial();
    let o = stat(&[
        "-a",
        "-x,",
        "-I",
        "100",
        "--interval-count",
        "3",
        "--summary",
        "-e",
        "cs",
    ]);
    let err = stderr(&o);
    let (summary, intervals): (Vec<&str>, Vec<&str>) =
        err.lines().partition(|l| l.starts_with("summary,"));
    assert_eq!((summary.len(), intervals.len()), (1, 3), "{err}");
    let count =
        |l: &str, field: usize| -> f64 { l.split(',').nth(field).unwrap().parse().unwrap() };
    let sum: f64 = intervals.iter().map(|l| count(l, 1)).sum();
    assert_eq!(count(summary[0], 1), sum, "{err}");
    let o = stat(&[
        "-a",
        "-x,",
        "-I",
        "100",
        "--interval-count",
        "1",
        "--summary",
        "--no-csv-summary",
        "-e",
        "cs",
    ]);
    assert!(!stderr(&o).contains("summary"), "{}", stderr(&o));
}

/// --quiet prints no counts (and here no message either); the exit status still tells.
#[test]
#[ignore = "needs root (make test runs it)"]
fn quiet_prints_nothing() {
    let o = stat(&["--quiet", "-e", "task-clock", "--", "sh", "-c", "exit 4"]);
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(stderr(&o), "");
}

/// What perf refuses, bperf refuses in one line with perf's status: 129 for bad input,
/// 234 (-EINVAL) for what perf refuses once the command line is read, 255 for an
/// output it cannot use. No root needed.
#[test]
fn run_control_refusals() {
    for (args, code, needle) in [
        (
            &["--timeout", "5", "--", "true"][..],
            234,
            "timeout must be >= 10ms",
        ),
        (
            &["-a", "--timeout", "200", "-I", "100"][..],
            234,
            "not supported with interval-print",
        ),
        (&["-D", "-1", "--", "true"][..], 129, "needs --control"),
        (
            &["-a", "--control", "bogus", "--", "true"][..],
            129,
            "--control bogus",
        ),
        (
            &["-a", "-I", "100", "--interval-clear", "-o", "/dev/null"][..],
            255,
            "does not work with output",
        ),
        (
            &["-a", "-B", "-x,", "--", "true"][..],
            234,
            "-B option not supported with -x",
        ),
    ] {
        assert_refused(args, code, needle);
    }
}

/// `bperf stat ARGS` exits `code` with one line on stderr that says `needle`.
fn assert_refused(args: &[&str], code: i32, needle: &str) {
    let o = stat(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.contains(needle) && err.lines().count() == 1,
        "{args:?}: {err}"
    );
}

/// -r N runs the command N times and prints the mean, with perf's header and error.
#[test]
#[ignore = "needs root (make test runs it)"]
fn repeat_runs_the_command_n_times() {
    let _g = serial();
    let log = TempFile::new("repeat");
    let script = format!("echo run >> {}; exit 3", log.0.display());
    let o = stat(&["-r", "3", "-e", "task-clock", "--", "sh", "-c", &script]);
    let err = stderr(&o);
    assert_eq!(log.read().lines().count(), 3, "{err}");
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("' (3 runs):"), "{err}");
    assert!(
        err.contains(" +- ") && err.contains("seconds time elapsed  ( +-"),
        "{err}"
    );
}

/// --pre and --post run around each run, in order, and a failing one ends bperf with
/// its status; --table lists each run's time.
#[test]
#[ignore = "needs root (make test runs it)"]
fn pre_post_and_table_around_each_run() {
    let _g = serial();
    let log = TempFile::new("prepost");
    let (pre, post) = (
        format!("echo pre >> {}", log.0.display()),
        format!("echo post >> {}", log.0.display()),
    );
    let cmd = format!("echo run >> {}", log.0.display());
    let o = stat(&[
        "-r",
        "2",
        "--table",
        "-S",
        "--pre",
        &pre,
        "--post",
        &post,
        "-e",
        "task-clock",
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(log.read(), "pre\nrun\npost\npre\nrun\npost\n");
    let table = err
        .split("# Table of individual measurements:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no table: {err}"));
    let rows = table.lines().take_while(|l| !l.is_empty()).count();
    assert_eq!(rows, 2, "{err}");
    assert!(err.contains("# Final result:\n"), "{err}");

    let o = stat(&[
        "--pre",
        "exit 7",
        "-e",
        "task-clock",
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(
        log.read().lines().count(),
        6,
        "the command ran after a failed --pre"
    );
}

/// -v prints perf's `name: count enabled running` lines; --log-fd writes the counts to
/// a descriptor the caller opened.
#[test]
#[ignore = "needs root (make test runs it)"]
fn verbose_counts_and_log_fd() {
    let _g = serial();
    let o = stat(&["-v", "-e", "task-clock,cs", "--", "true"]);
    let err = stderr(&o);
    let counts: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("task-clock: ") || l.starts_with("cs: "))
        .collect();
    assert_eq!(counts.len(), 2, "{err}");
    for l in counts {
        let numbers: Vec<u64> = l
            .split_whitespace()
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(numbers.len(), 3, "{l}");
    }
    let file = TempFile::new("logfd");
    let script = format!(
        "exec 3>{}; exec {} stat --log-fd 3 -x, -e task-clock -- true",
        file.0.display(),
        common::BPERF_EXE
    );
    let o = std::process::Command::new("sh")
        .env("BPERF_PERF_VERSION", "6.12")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(file.read().contains(",task-clock,"), "{}", file.read());
}

/// A running spinner, and the line it reports when it ends; returned once it has
/// exec'd (its command name is the workload's).
fn spinner(ms: &str) -> std::process::Child {
    let child = std::process::Command::new(workload())
        .args(["spin", ms])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let comm = format!("/proc/{}/comm", child.id());
    for _ in 0..200 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "workload") {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

/// -p and -t count a process that runs already, until it ends: its task-clock from
/// when bperf started, against its own.
#[test]
#[ignore = "needs root (make test runs it)"]
fn pid_and_tid_count_running_processes() {
    let _g = serial();
    for opt in ["-p", "-t"] {
        let spin = spinner("600");
        let pid = spin.id().to_string();
        let t = Instant::now();
        let o = stat(&[opt, &pid, "-x,", "-e", "task-clock"]);
        let took = t.elapsed();
        let own = spin.wait_with_output().unwrap();
        let own = own_task_clock_ns(&String::from_utf8_lossy(&own.stderr), &["spin"]) / 1e6;
        let counted = task_clock_ms(&stderr(&o));
        assert!(o.status.success(), "{opt}: {}", stderr(&o));
        assert!(
            took < Duration::from_secs(3),
            "{opt}: bperf outlived the process"
        );
        assert!(
            counted <= own * 1.02 && counted >= own - 200.0,
            "{opt}: {counted} ms of the spinner's {own} ms"
        );
    }
}

/// --per-thread: one line per thread, named comm-tid as perf names it.
#[test]
#[ignore = "needs root (make test runs it)"]
fn per_thread_lines() {
    let _g = serial();
    let (a, b) = (spinner("300"), spinner("300"));
    let pids = format!("{},{}", a.id(), b.id());
    let o = stat(&["-p", &pids, "--per-thread", "-x,", "-e", "task-clock"]);
    let err = stderr(&o);
    for p in [a.id(), b.id()] {
        let label = format!("workload-{p},");
        let line = err
            .lines()
            .find(|l| l.starts_with(&label))
            .unwrap_or_else(|| panic!("no line for {label}: {err}"));
        let ms: f64 = line.split(',').nth(1).unwrap().parse().unwrap();
        assert!(ms > 100.0, "{line}");
    }
    let _ = (a.wait_with_output(), b.wait_with_output());
}

/// What needs hardware or tables this machine has not, refused with perf's message and
/// bperf's status for a counter that cannot be set up. No root needed.
#[test]
fn unavailable_features_are_refused_as_perf_refuses_them() {
    for (opt, needle) in [
        ("--topdown", "topdown metric groups aren't present"),
        ("--smi-cost", "freeze_on_smi is not supported"),
        ("-T", "Missing transaction metrics"),
    ] {
        let mut args = vec!["-a", opt];
        args.extend(["--", "true"]);
        assert_refused(&args, 255, needle);
    }
}

/// --bpf-counters and :b count the CPUs through the BPF program (loaded while counting),
/// and each interval's cpu-clock is what the CPUs' clocks ran: CPUs x interval.
#[test]
#[ignore = "needs root (make test runs it)"]
fn bpf_counters_count_cpus_through_bpf() {
    let _g = serial();
    for events in ["cpu-clock", "cpu-clock:b"] {
        let mut args = vec![
            "stat",
            "-a",
            "-x,",
            "-I",
            "200",
            "--interval-count",
            "3",
            "-e",
            events,
        ];
        if !events.ends_with(":b") {
            args.insert(1, "--bpf-counters");
        }
        let child = bperf()
            .args(&args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut loaded = false;
        for _ in 0..100 {
            loaded |= !loaded_bperf_programs().is_empty();
            std::thread::sleep(Duration::from_millis(5));
        }
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(
            o.status.success() && loaded,
            "{events}: programs loaded {loaded}: {err}"
        );
        let cpus = bperf::sys::online_cpus().unwrap().len() as f64;
        let lines = parse_csv(&err, true);
        assert_eq!(lines.len(), 3, "{err}");
        for l in &lines {
            let ms = l.value.unwrap();
            assert!(
                within(ms, cpus * 200.0, 5.0),
                "{events}: {ms} ms in 200 ms on {cpus} CPUs"
            );
        }
    }
    assert!(bperf_programs().is_empty());
}

/// -d, -dd and -ddd add perf's detailed events: 4, 10 and 12 of them.
#[test]
#[ignore = "needs root (make test runs it)"]
fn detailed_adds_perfs_events() {
    let _g = serial();
    for (flag, added) in [("-d", 4), ("-dd", 10), ("-ddd", 12)] {
        let o = stat(&["-a", flag, "-x,", "-e", "task-clock", "--", "true"]);
        let err = stderr(&o);
        assert_eq!(
            err.lines().filter(|l| l.contains(',')).count(),
            1 + added,
            "{flag}: {err}"
        );
        assert!(err.contains(",LLC-load-misses,"), "{flag}: {err}");
    }
}

/// --control with -D -1: nothing counted until 'enable', CPUs x interval while enabled,
/// nothing after 'disable'; every command acknowledged, as perf does.
#[test]
#[ignore = "needs root (make test runs it)"]
fn control_enables_and_disables_counting() {
    let _g = serial();
    let dir = TempDir::new("control");
    let (ctl, ack) = (dir.0.join("ctl"), dir.0.join("ack"));
    for f in [&ctl, &ack] {
        assert!(std::process::Command::new("mkfifo")
            .arg(f)
            .status()
            .unwrap()
            .success());
    }
    let spec = format!("fifo:{},{}", ctl.display(), ack.display());
    let child = bperf()
        .args([
            "stat",
            "-a",
            "-x,",
            "-I",
            "100",
            "--interval-count",
            "9",
            "-D",
            "-1",
        ])
        .args(["--control", &spec, "-e", "cpu-clock"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let acks = std::thread::spawn({
        let ack = ack.clone();
        move || std::fs::read_to_string(ack).unwrap_or_default()
    });
    let send = |cmd: &str, after: u64| {
        std::thread::sleep(Duration::from_millis(after));
        std::fs::write(&ctl, format!("{cmd}\n")).unwrap();
    };
    send("enable", 250);
    send("disable", 350);
    send("ping", 100);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    let cpus = bperf::sys::online_cpus().unwrap().len() as f64;
    let (before, rest) = err.split_once("Events enabled\n").expect("enabled");
    let (during, after) = rest.split_once("Events disabled\n").expect("disabled");
    let values = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(",cpu-clock,"))
            .map(|l| l.split(',').nth(1).unwrap().to_string())
            .collect()
    };
    assert!(values(before).iter().all(|v| v == "<not counted>"), "{err}");
    let full = values(during)
        .iter()
        .filter_map(|v| v.parse::<f64>().ok())
        .filter(|ms| within(*ms, cpus * 100.0, 5.0))
        .count();
    assert!(full >= 2, "{err}");
    assert!(
        values(after).iter().skip(1).all(|v| v == "<not counted>"),
        "{err}"
    );
    // bperf has ended: its end of the ack pipe is closed, and the reader sees the end.
    let acks = acks.join().unwrap();
    assert_eq!(acks, "ack\nack\nack\n", "{err}");
}

/// A directory a test made, removed with what is in it however the test ends.
/// -M: each metric is worked out from the counts printed beside it, and CPUs_utilized
/// over all CPUs is their number (each CPU's cpu-clock runs the whole time).
#[test]
#[ignore = "needs root (make test runs it)"]
fn named_metrics_follow_the_counts() {
    let _g = serial();
    let o = stat(&[
        "-a",
        "-x,",
        "-M",
        "CPUs_utilized,cs_per_second,page_faults_per_second",
        "--",
        "sleep",
        "0.3",
    ]);
    assert!(o.status.success(), "{o:?}");
    let err = stderr(&o);
    let rows: Vec<Vec<&str>> = err.lines().map(|l| l.split(',').collect()).collect();
    let count = |event: &str| -> f64 {
        let r = rows.iter().find(|r| r[2] == event).expect(event);
        r[0].parse().unwrap()
    };
    let metric = |unit: &str| -> f64 {
        let r = rows.iter().find(|r| r.last() == Some(&unit)).expect(unit);
        r[r.len() - 2].parse().unwrap()
    };
    let clock_ms = count("cpu-clock");
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(within(metric("CPUs  CPUs_utilized"), cpus, 10.0), "{err}");
    // The metric is printed to 0.1, and the clock it is checked against to 0.01 ms: a
    // rate's own error from the clock's rounding is rate * 0.005 / clock_ms.
    let agrees =
        |printed: f64, rate: f64| (printed - rate).abs() <= 0.051 + rate * 0.005 / clock_ms;
    let cs = count("context-switches") * 1e3 / clock_ms;
    assert!(agrees(metric("cs/sec  cs_per_second"), cs), "{err}");
    let pf = count("page-faults") * 1e3 / clock_ms;
    assert!(
        agrees(metric("faults/sec  page_faults_per_second"), pf),
        "{err}"
    );
}

/// -M with a name perf does not know: perf's message and exit status.
#[test]
fn unknown_metric_is_refused_as_perf_refuses_it() {
    let o = stat(&["-M", "no_such_metric", "true"]);
    assert_eq!(o.status.code(), Some(234));
    assert_eq!(
        stderr(&o).trim(),
        "bperf: Cannot find metric or group `no_such_metric'"
    );
}

/// A process's context switches so far, as the kernel counts them in /proc.
fn switches_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .map(|l| l.split_whitespace().last().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// --filter: the tracepoint counts only what the filter lets through. A shell that
/// sleeps in a loop switches out about 100 times a second; counted system-wide with
/// a filter on its pid, sched_switch counts its switches, no more than /proc says it
/// made over a longer time, and most of them; the same event without the filter counts
/// more.
#[test]
#[ignore = "needs root (make test runs it)"]
fn filter_counts_one_process_switches() {
    let _g = serial();
    let mut looper = std::process::Command::new("sh")
        .args(["-c", "while :; do sleep 0.01; done"])
        .spawn()
        .unwrap();
    let pid = looper.id();
    let before = switches_of(pid);
    let o = stat(&[
        "-a",
        "-x,",
        "-e",
        "sched:sched_switch",
        "--filter",
        &format!("prev_pid == {pid}"),
        "-e",
        "sched:sched_switch",
        "--",
        "sleep",
        "0.5",
    ]);
    let after = switches_of(pid);
    looper.kill().unwrap();
    looper.wait().unwrap();
    assert!(o.status.success(), "{o:?}");
    let err = stderr(&o);
    let counts: Vec<f64> = err
        .lines()
        .filter(|l| l.contains("sched:sched_switch"))
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    let (filtered, all) = (counts[0], counts[1]);
    let made = (after - before) as f64;
    assert!(filtered <= made, "{filtered} counted, {made} made: {err}");
    assert!(
        filtered >= 0.5 * made,
        "{filtered} counted, {made} made: {err}"
    );
    assert!(all > filtered, "{err}");
}

/// --filter must follow a tracepoint, as in perf (tracepoints are named from tracefs,
/// which only root may read).
#[test]
#[ignore = "needs root (make test runs it)"]
fn filter_needs_a_tracepoint_before_it() {
    for args in [
        &["--filter", "x", "-e", "sched:sched_switch", "-a", "true"][..],
        &["-e", "cpu-clock", "--filter", "x", "-a", "true"],
    ] {
        let o = stat(args);
        assert_eq!(o.status.code(), Some(129), "{args:?}");
        assert!(stderr(&o).contains("--filter option should follow a -e tracepoint"));
    }
}

/// -r 0 runs the command again and again, printing each run as it ends (the header
/// once, no user and system times), until interrupted; the run cut short is not printed.
#[test]
#[ignore = "needs root (make test runs it)"]
fn repeat_forever_until_interrupted() {
    let _g = serial();
    let child = bperf()
        .args(["stat", "-r", "0", "-e", "task-clock", "--", "sleep", "0.05"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    // SAFETY: signalling a child we have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    let runs = err.matches("seconds time elapsed").count();
    assert!(runs >= 3, "{err}");
    assert_eq!(err.matches(" task-clock ").count(), runs, "{err}");
    assert_eq!(
        err.matches("Performance counter stats for").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("seconds user"), "{err}");
}

/// --per-thread -a counts every thread of the system, showing those that ran: a
/// spinning thread's task-clock is what the kernel's own task-clock counter of the
/// thread gave while bperf counted, within what it gave over a longer time.
#[test]
#[ignore = "needs root (make test runs it)"]
fn per_thread_system_wide_counts_each_thread() {
    let _g = serial();
    let w = workload();
    let mut spinner = std::process::Command::new(&w)
        .args(["spin", "3000"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = spinner.id();
    std::thread::sleep(Duration::from_millis(50));
    let clock = TaskClock::of(pid);
    let before = clock.ns();
    let o = stat(&[
        "--per-thread",
        "-a",
        "-x,",
        "-e",
        "task-clock",
        "--",
        "sleep",
        "0.3",
    ]);
    let ran_ms = (clock.ns() - before) / 1e6;
    let _ = spinner.kill();
    let _ = spinner.wait();
    assert!(o.status.success(), "{o:?}");
    let err = stderr(&o);
    let ours: f64 = err
        .lines()
        .find(|l| l.starts_with(&format!("workload-{pid},")))
        .unwrap_or_else(|| panic!("no line for workload-{pid}: {err}"))
        .split(',')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        ours <= ran_ms * 1.01,
        "{ours} ms counted, {ran_ms} ms ran: {err}"
    );
    assert!(
        ours >= ran_ms * 0.7,
        "{ours} ms counted, {ran_ms} ms ran: {err}"
    );
    // A thread that ran a few µs prints 0.00 msec; one that counted nothing has no
    // task-clock time at all (the field after the event name) and must not be shown.
    let counted_nothing = |l: &&str| l.split(',').nth(4).is_some_and(|t| t == "0");
    assert!(
        !err.lines().any(|l| counted_nothing(&l)),
        "idle threads shown: {err}"
    );
}

/// -r with -I: each run prints its intervals, timed from its own start (perf 6.12 prints
/// only the first run's).
#[test]
#[ignore = "needs root (make test runs it)"]
fn repeat_with_intervals_prints_every_run() {
    let _g = serial();
    let o = stat(&[
        "-r",
        "3",
        "-I",
        "100",
        "-x,",
        "-e",
        "task-clock",
        "--",
        "sleep",
        "0.25",
    ]);
    assert!(o.status.success(), "{o:?}");
    let err = stderr(&o);
    let times: Vec<f64> = err
        .lines()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    // About three intervals a run: two whole ones and the end of the command.
    assert!((6..=12).contains(&times.len()), "{err}");
    let restarts = times.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(restarts, 2, "{err}");
}
