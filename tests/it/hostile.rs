//! What a careless or hostile user does to bperf, scripted: output that fails, bperf
//! killed, deep nesting, cgroups that come and go, names that lead off the mount, and
//! a fuzz of the command line. Needs root, except where noted.

use crate::common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// A command for bperf to run that writes its pid to `pidfile` and sleeps 30 s.
fn sleeper(pidfile: &TempFile) -> Vec<String> {
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.0.display());
    vec!["sh".into(), "-c".into(), script]
}

/// The pid in `pidfile`, once the command has written it.
fn pid_in(pidfile: &TempFile) -> i32 {
    // bperf starts the command once counting: seconds under emulation (5.10's most).
    let secs = if emulated() { 60 } else { 5 };
    wait_for_some(secs, || pidfile.read().trim().parse().ok())
        .unwrap_or_else(|| panic!("the command never wrote {}", pidfile.0.display()))
}

/// Whether `pid` is gone, or a zombie about to be reaped by init, within two seconds.
fn ended(pid: i32) -> bool {
    wait_for(2, || !bperf::sys::process::alive(pid))
}

/// Whether the sleeper that writes `pidfile` is gone, bperf having ended: it wrote its
/// pid and that process ends, or it never wrote it and no process is left that could
/// (bperf may end the command before its shell runs the echo, as under emulation).
fn sleeper_ended(pidfile: &TempFile) -> bool {
    let path = pidfile.0.display().to_string();
    let secs = if emulated() { 60 } else { 5 };
    let gone = wait_for_some(secs, || {
        if let Ok(pid) = pidfile.read().trim().parse::<i32>() {
            return Some(ended(pid));
        }
        // The shell writes the file before its exec: with no process naming the file
        // left, a file still empty was never going to be written.
        let shell_left = fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|p| fs::read(p.path().join("cmdline")).is_ok_and(|c| contains(&c, &path)));
        (!shell_left && pidfile.read().trim().is_empty()).then_some(true)
    });
    gone == Some(true)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// An output bperf cannot write to ends bperf with one line naming it, and the command
/// it started ends with it: the full device, and a pipe whose reader has gone.
#[test]
#[ignore = "needs root (make test runs it)"]
fn command_ends_when_output_fails() {
    let _g = serial();
    let pidfile = TempFile::new("pid-full");
    let t = Instant::now();
    let out = bperf()
        .args([
            "stat",
            "-a",
            "--all-cgroups",
            "-I",
            "100",
            "-e",
            "task-clock",
        ])
        .args(["-o", "/dev/full", "--"])
        .args(sleeper(&pidfile))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{err}");
    assert!(
        err.contains("/dev/full") && err.lines().count() == 1,
        "{err}"
    );
    assert!(sleeper_ended(&pidfile), "the command outlived bperf");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "bperf waited for the command"
    );

    let pidfile = TempFile::new("pid-pipe");
    let mut child = bperf()
        .args([
            "stat",
            "-a",
            "-I",
            "100",
            "-e",
            "task-clock",
            "-o",
            "/dev/stdout",
        ])
        .arg("--")
        .args(sleeper(&pidfile))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone: the next write fails, as `| head -1` would make it.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "{err}");
    assert!(sleeper_ended(&pidfile), "the command outlived bperf");
    assert!(bperf_programs().is_empty());
}

/// bperf killed with SIGKILL takes the command it started with it.
#[test]
#[ignore = "needs root (make test runs it)"]
fn command_ends_when_bperf_is_killed() {
    let _g = serial();
    let pidfile = TempFile::new("pid-kill");
    let mut child = bperf()
        .args(["stat", "-a", "-e", "task-clock", "--"])
        .args(sleeper(&pidfile))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = pid_in(&pidfile);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ended(pid), "the command outlived bperf");
    assert!(bperf_programs().is_empty());
}

/// `levels` cgroups nested in `top`, outermost first.
fn nest(top: &TestCgroup, levels: usize) -> Vec<TestCgroup> {
    let mut chain: Vec<TestCgroup> = Vec::new();
    for i in 1..=levels {
        let next = match chain.last() {
            Some(parent) => parent.child(&format!("l{i}")),
            None => top.child(&format!("l{i}")),
        };
        chain.push(next);
    }
    chain
}

/// A busy task 40 levels below a monitored cgroup is charged to it, and to every level
/// between, within 2% of the top's cpu.stat.
#[test]
#[ignore = "needs root (make test runs it)"]
fn forty_levels_deep_charge_the_top() {
    let _g = serial();
    let top = TestCgroup::new("deep");
    let chain = nest(&top, 40);
    let bottom = chain.last().unwrap();
    let names: Vec<&str> = std::iter::once(&top)
        .chain(&chain)
        .map(|c| c.name.as_str())
        .collect();
    let before = top.usage_ns();
    let unaccounted = unaccounted_ns();
    let out = TempFile::new("deep");
    let o = run_ok(
        bperf()
            .args(["stat", "-a", "-x,", "-e", "task-clock", "-o"])
            .arg(&out.0)
            .args(["--for-each-cgroup", &names.join(","), "--"])
            .args([
                &workload().display().to_string(),
                "spin",
                "500",
                &bottom.procs(),
            ]),
    );
    let kernel = (top.usage_ns() - before) as f64;
    let unaccounted = unaccounted_since(unaccounted);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let own = own_task_clock_ns(&stderr, &["spin"]);
    let lines = parse_csv(&out.read(), false);
    for name in &names {
        let ours = value(&lines, "task-clock", name) * 1e6;
        assert!(
            agrees_with_kernel(ours, own, kernel, unaccounted),
            "{name}: {ours} ns vs the spinner's {own} ns, cpu.stat {kernel} ns (+ {unaccounted})"
        );
    }
}

/// More nested monitored cgroups than the BPF side can charge is refused in one line,
/// never counted short.
#[test]
#[ignore = "needs root (make test runs it)"]
fn too_deep_a_chain_is_refused() {
    // Its cgroups must not exist while another test counts --all-cgroups.
    let _g = serial();
    let top = TestCgroup::new("toodeep");
    let chain = nest(&top, 70);
    let names: Vec<&str> = chain.iter().map(|c| c.name.as_str()).collect();
    let out = bperf()
        .args([
            "stat",
            "-a",
            "-e",
            "task-clock",
            "--for-each-cgroup",
            &names.join(","),
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(129), "{err}");
    assert!(
        err.contains("at most 64") && err.lines().count() == 1,
        "{err}"
    );
    // 64 levels are counted.
    run_ok(
        bperf()
            .args(["stat", "-a", "-e", "task-clock", "-o", "/dev/null"])
            .args(["--for-each-cgroup", &names[..64].join(","), "--", "true"]),
    );
}

/// Cgroups created and removed while --all-cgroups counts: a removed cgroup's rows
/// stop after its final counts, a cgroup created meanwhile is counted from its creation,
/// cgroups that churn leave no rows behind, and the parent agrees with its cpu.stat
/// throughout.
#[test]
#[ignore = "needs root (make test runs it)"]
fn cgroups_that_come_and_go() {
    let _g = serial();
    let parent = TestCgroup::new("churn");
    let gone = parent.child("gone");
    let w = workload().display().to_string();
    let made = parent.path.join("made");
    // Spin in `gone`, remove it, spin in `made` (created after bperf started), remove
    // that too, then churn cgroups, then idle while bperf prints more intervals. Each
    // cgroup's cpu.stat is printed just before its removal. Under emulation a process
    // starts in tenths of a second: 20 cgroups churned there instead of 100.
    let churned = if emulated() { 20 } else { 100 };
    let script = format!(
        "sleep 0.2; {w} spin 300 {gone_procs}; grep usage_usec {gone}/cpu.stat; rmdir {gone}; \
         mkdir {made}; {w} spin 300 {made}/cgroup.procs; grep usage_usec {made}/cpu.stat; \
         rmdir {made}; \
         for i in $(seq {churned}); do mkdir {p}/c$i && rmdir {p}/c$i; done; sleep 0.5",
        gone_procs = gone.procs(),
        gone = gone.path.display(),
        made = made.display(),
        p = parent.path.display(),
    );
    let before = parent.usage_ns();
    let unaccounted = unaccounted_ns();
    let out = TempFile::new("churn");
    let o = run_ok(
        bperf()
            .args([
                "stat",
                "-a",
                "-x,",
                "-I",
                "100",
                "-e",
                "task-clock",
                "--all-cgroups",
            ])
            .arg("-o")
            .arg(&out.0)
            .args(["--", "sh", "-c", &script]),
    );
    let kernel = (parent.usage_ns() - before) as f64;
    let unaccounted = unaccounted_since(unaccounted);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let own = own_task_clock_ns(&stderr, &["spin"]);
    let removed: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("usage_usec "))
        .map(|v| v.trim().parse::<f64>().unwrap() * 1e3)
        .collect();
    assert_eq!(removed.len(), 2, "no cpu.stat of gone and made: {stderr}");
    // A spinner's own task-clock since it joined its cgroup: the oracle on a real
    // machine. Under emulation its exit, which its own clock cannot see, takes tens of ms
    // or more (see self_moving_processes_are_charged_in_full in tests/it/stat.rs): there its
    // cgroup's cpu.stat is.
    let spinner_agrees = |ours: f64, own: f64, kernel: f64| match emulated() {
        false => within(ours, own, 3.0),
        true => agrees_with_cpu_stat(ours, kernel, unaccounted),
    };
    let csv = out.read();
    let lines = parse_csv(&csv, true);
    let ours = value(&lines, "task-clock", &parent.name) * 1e6;
    assert!(
        agrees_with_kernel(ours, own, kernel, unaccounted),
        "{}: {ours} ns vs the spinners' {own} ns, cpu.stat {kernel} ns\n{csv}",
        parent.name
    );
    // `gone` was charged its spinner's time, then nothing: its last intervals, after
    // its removal, count nothing.
    let gone_rows: Vec<&CsvLine> = lines.iter().filter(|l| l.cgroup == gone.name).collect();
    let gone_ns = value(&lines, "task-clock", &gone.name) * 1e6;
    // The first spinner's own task-clock since it joined `gone` (the script runs them
    // one after the other).
    let first = stderr
        .lines()
        .find(|l| l.contains(" mode=spin "))
        .map(|l| report_field(l, "task_clock_ns"))
        .unwrap_or_else(|| panic!("no spinner report: {stderr}"));
    assert!(
        spinner_agrees(gone_ns, first, removed[0]),
        "gone: {gone_ns} ns vs its spinner's {first} ns, its cpu.stat {} ns\n{csv}",
        removed[0]
    );
    let end = lines.iter().filter_map(|l| l.time).fold(0.0, f64::max);
    let last_gone = gone_rows.last().and_then(|l| l.time).unwrap_or(end);
    assert!(
        last_gone < end,
        "{} still printed at the end\n{csv}",
        gone.name
    );
    // `made` was counted from its creation: its spinner's time.
    let second = stderr
        .lines()
        .filter(|l| l.contains(" mode=spin "))
        .map(|l| report_field(l, "task_clock_ns"))
        .nth(1)
        .unwrap_or_else(|| panic!("no second spinner report: {stderr}"));
    let made_ns = value(&lines, "task-clock", &format!("{}/made", parent.name)) * 1e6;
    assert!(
        spinner_agrees(made_ns, second, removed[1]),
        "made: {made_ns} ns vs its spinner's {second} ns, its cpu.stat {} ns\n{csv}",
        removed[1]
    );
    // The last interval shows only cgroups that exist.
    let last_rows: Vec<&CsvLine> = lines.iter().filter(|l| l.time == Some(end)).collect();
    assert!(
        !last_rows
            .iter()
            .any(|l| l.cgroup.ends_with("/made") || l.cgroup.contains("/c")),
        "{last_rows:?}"
    );
}

/// Every parent counts at least what its children count, for every event and cgroup of
/// the machine, and the root agrees with the kernel's own totals.
#[test]
#[ignore = "needs root (make test runs it)"]
fn parents_hold_their_children_and_the_root_everything() {
    let _g = serial();
    let a = TestCgroup::new("consA");
    let ab = a.child("b");
    let w = workload().display().to_string();
    let script = format!(
        "{w} spin 300 {pa} & {w} faults 5000 {pab} & {w} pingpong 5000 {pab} & wait",
        pa = a.procs(),
        pab = ab.procs()
    );
    let ctxt = || proc_stat_field("/proc/stat", "ctxt");
    let faults = || proc_stat_field("/proc/vmstat", "pgfault");
    let (ctxt0, faults0) = (ctxt(), faults());
    let out = TempFile::new("cons");
    let o = run_ok(
        bperf()
            .args([
                "stat",
                "-a",
                "-x,",
                "-e",
                "cpu-clock,context-switches,page-faults",
            ])
            .args(["--all-cgroups", "-o"])
            .arg(&out.0)
            .args(["--", "sh", "-c", &script]),
    );
    let (ctxt1, faults1) = (ctxt(), faults());
    let lines = parse_csv(&out.read(), false);
    for l in &lines {
        let children: f64 = lines
            .iter()
            .filter(|c| c.event == l.event && c.cgroup != "/" && parent_of(&c.cgroup) == l.cgroup)
            .map(|c| c.value.unwrap_or(0.0))
            .sum();
        let own = l.value.unwrap_or(0.0);
        // cpu-clock is printed in msec with two decimals.
        assert!(
            own + 0.01 * 64.0 >= children,
            "{} {}: {own} < its children's {children}",
            l.cgroup,
            l.event
        );
    }
    // The root saw every switch and fault of the workload, which the workload's own
    // rusage counts, and no more than the kernel counted on the whole machine while
    // bperf ran (which includes bperf's own start and end, and anything else running).
    let root = |event| value(&lines, event, "/");
    let (cs, pf) = (root("context-switches"), root("page-faults"));
    let (kcs, kpf) = ((ctxt1 - ctxt0) as f64, (faults1 - faults0) as f64);
    let (own_cs, own_faults) = rusage_totals(&String::from_utf8_lossy(&o.stderr));
    assert!(
        cs <= kcs && cs >= own_cs as f64,
        "root cs {cs} vs the workload's {own_cs} and /proc/stat's {kcs}"
    );
    assert!(
        pf <= kpf && pf >= own_faults as f64,
        "root faults {pf} vs the workload's {own_faults} and /proc/vmstat's {kpf}"
    );
    assert!(root("cpu-clock") >= value(&lines, "cpu-clock", &a.name));
}

/// The parent of a cgroup named relative to the mount ("/" for the top level).
fn parent_of(name: &str) -> &str {
    match name.rsplit_once('/') {
        Some((parent, _)) if !parent.is_empty() => parent,
        _ => "/",
    }
}

/// The number after `name ` in a /proc file of `name value` lines.
fn proc_stat_field(file: &str, name: &str) -> u64 {
    fs::read_to_string(file)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {file}"))
}

/// Names that lead off the cgroup mount, however they get there, are refused in one
/// line, with perf's statuses (129 for -G, which perf reads with the command line, 234
/// for --for-each-cgroup, which it looks up after); so is a cgroup option without -a or
/// -C (as perf, 234).
#[test]
fn cgroup_names_off_the_mount_are_refused() {
    let link = cgroup2_mount().with_file_name(format!("bperf-test-{}-link", std::process::id()));
    let made_link = std::os::unix::fs::symlink("/etc", &link).is_ok();
    let _remove_link = TempFile(link.clone());
    let mut names = vec![
        "..",
        "../..",
        "../../../../etc",
        "/../..",
        "nope/..",
        "cgroup.procs",
    ];
    let link_name = format!("../{}", link.file_name().unwrap().to_string_lossy());
    if made_link {
        names.push(&link_name);
    }
    for name in &names {
        for (opt, code) in [("--for-each-cgroup", 234), ("-G", 129)] {
            let out = bperf()
                .args(["stat", "-a", "-e", "task-clock", opt, name, "--", "true"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{opt} {name}: {err}");
            assert!(
                err.lines().count() == 1 && err.contains(&format!("'{name}'")),
                "{opt} {name}: {err}"
            );
        }
    }
    let out = bperf()
        .args(["stat", "-e", "task-clock", "-G", "/", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(234));
    assert!(String::from_utf8_lossy(&out.stderr).contains("system-wide"));
}

/// perf's rules for lists of cgroups: an empty name is the root, a name given twice is
/// one row, two names of one cgroup are two rows, a comma inside a pattern belongs to
/// it; --interval-count 0 sets no limit.
#[test]
#[ignore = "needs root (make test runs it)"]
fn cgroup_lists_as_perf_reads_them() {
    let _g = serial();
    let a = TestCgroup::new("list");
    let rows = |list: &str| -> Vec<String> {
        let o = run_ok(
            bperf()
                .args([
                    "stat",
                    "-a",
                    "-x,",
                    "-e",
                    "task-clock",
                    "--for-each-cgroup",
                    list,
                ])
                .args(["--", "true"]),
        );
        parse_csv(&String::from_utf8_lossy(&o.stderr), false)
            .into_iter()
            .map(|l| l.cgroup)
            .collect()
    };
    assert_eq!(rows(""), ["/"]);
    assert_eq!(rows(","), ["/"]);
    let (n, also) = (a.name.clone(), format!("/{}", a.name));
    assert_eq!(rows(&format!("{n},{also},{n}")), [n.clone(), also]);
    assert_eq!(rows(&format!("{n}{{1,1}}")), [n]);
    let o = run_ok(
        bperf()
            .args(["stat", "-a", "-x,", "-I", "100", "--interval-count", "0"])
            .args(["-e", "task-clock", "--", "sleep", "0.35"]),
    );
    let intervals = parse_csv(&String::from_utf8_lossy(&o.stderr), true).len();
    assert!(intervals >= 3, "{intervals} intervals");
}

/// A small deterministic generator for the fuzz.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next() as usize % from.len()]
    }
}

/// Values a careless or hostile user might give any option.
const FUZZ_VALUES: &[&str] = &[
    "",
    ",",
    "0",
    "-1",
    "1",
    "10",
    "100",
    "18446744073709551616",
    "999999999999",
    "a",
    "task-clock",
    "cs,page-faults",
    "{task-clock,cs}:u",
    "cycles",
    "msr/tsc/",
    ":::",
    "🔥",
    "\u{1b}[2J",
    "x\ny",
    "/",
    "..",
    "../..",
    ".*",
    ".{0,3}",
    "((",
    "[",
    "0-1",
    "1-0",
    "0,0",
    "9999",
    "%s%n",
    "\\",
    "'",
    "-",
    "--",
    "r1a8",
    "cpu/event=0x3c/",
    "sched:sched_switch",
];

/// Options with values, each with values it takes; half the time one of FUZZ_VALUES.
const FUZZ_OPTIONS: &[(&str, &[&str])] = &[
    (
        "-e",
        &[
            "task-clock",
            "cs,page-faults",
            "{cpu-clock,cs}",
            "cycles",
            "msr/tsc/:u",
        ],
    ),
    ("-C", &["0", "1", "0-1", "0,1"]),
    ("--for-each-cgroup", &["/", "", ".*", "system.slice", ",/"]),
    ("-G", &["/", ",/", ""]),
    ("-I", &["10", "50", "100"]),
    ("--interval-count", &["0", "1", "2"]),
    ("-x", &[",", ";", "  "]),
    ("--timeout", &["10", "100", "1000"]),
    ("-D", &["0", "10", "100"]),
    ("-p", &["1"]),
    ("-t", &["1"]),
];

/// Options without values.
const FUZZ_FLAGS: &[&str] = &[
    "-a",
    "-A",
    "-j",
    "--all-cgroups",
    "--no-big-num",
    "-v",
    "--append",
    "-i",
    "-n",
    "-B",
    "--quiet",
    "--all-user",
    "--all-kernel",
    "--summary",
    "--no-csv-summary",
    "--per-thread",
    "--per-socket",
    "--per-core",
    "--per-cache",
    "--per-node",
    "--interval-clear",
    "--bogus",
];

/// 300 random command lines over every option: none panics, none hangs, and every
/// error is one line.
#[test]
#[ignore = "needs root (make test runs it)"]
fn command_line_fuzz() {
    let _g = serial();
    let out = TempFile::new("fuzz-out");
    let mut rng = Rng(0x5eed_b9e7_2026_1123);
    let mut counted = 0;
    for case in 0..300 {
        let mut args: Vec<String> = vec!["stat".into()];
        // Mostly system-wide, which every cgroup option needs.
        if rng.next() % 5 != 0 {
            args.push("-a".into());
        }
        for _ in 0..1 + rng.next() % 5 {
            if rng.next() % 4 == 0 {
                args.push(rng.pick(FUZZ_FLAGS).into());
            } else {
                let (opt, plausible) = FUZZ_OPTIONS[rng.next() as usize % FUZZ_OPTIONS.len()];
                args.push(opt.into());
                let values = if rng.next() % 2 == 0 {
                    plausible
                } else {
                    FUZZ_VALUES
                };
                args.push(rng.pick(values).into());
            }
        }
        if rng.next() % 4 == 0 {
            args.push("-o".into());
            args.push(out.0.display().to_string());
        }
        args.extend(["--".into(), "sleep".into(), "0.05".into()]);
        if check_fuzz_case(case, &args) == Some(0) {
            counted += 1;
        }
    }
    // The fuzz reaches counting, not only the parser.
    assert!(counted >= 40, "only {counted} of 300 cases counted");
}

/// Runs one fuzz case with a deadline, checks how it ended, and returns its exit code.
fn check_fuzz_case(case: usize, args: &[String]) -> Option<i32> {
    let child = bperf()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Its output is read while it runs: a full pipe must not pass for a hang.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let Ok(out) = rx.recv_timeout(Duration::from_secs(15)) else {
        // SAFETY: plain kill(2) of our child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("case {case} hung: {args:?}");
    };
    let out = out.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        code.is_some() && code != Some(101) && !err.contains("panicked"),
        "case {case} panicked: {args:?}: {err}"
    );
    let verbose = args.iter().any(|a| a == "-v");
    // perf's warnings, which bperf prints as perf does before it goes on or refuses.
    let warning = |l: &&str| {
        [
            "PID/TID switch overriding",
            "WARNING: events were regrouped",
            "timeout < 100ms",
        ]
        .iter()
        .any(|w| l.starts_with(w))
    };
    let err: String = err
        .lines()
        .filter(|l| !warning(l))
        .map(|l| format!("{l}\n"))
        .collect();
    if matches!(code, Some(129) | Some(234) | Some(255)) && !verbose {
        assert!(
            !err.contains('\u{1b}'),
            "case {case} echoed an escape: {args:?}"
        );
        assert!(
            err.lines().count() == 1 && err.starts_with("bperf: "),
            "case {case}: not one line: {args:?}: {err}"
        );
    }
    if std::env::var_os("BPERF_FUZZ_SHOW").is_some() {
        eprintln!("{code:?} {args:?} {}", err.lines().next().unwrap_or(""));
    }
    code
}

/// The recording in a file of its own, in `dir`, as bperf record writes it.
fn recording_in(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    fs::write(&path, recording::bytes(1000)).unwrap();
    path
}

/// A timeline written over the recording it is read from is refused in one line naming
/// it, with perf's status for options that cannot go together, and the recording stays
/// whole: by its own name, and by another name (a link) for the same file. No privilege.
#[test]
fn a_timeline_over_its_own_recording_is_refused() {
    let dir = TempDir::new("timeline-over");
    let data = recording_in(&dir, "x.data");
    let link = dir.join("x.json");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let before = fs::read(&data).unwrap();
    for out in [&data, &link] {
        let o = bperf()
            .args(["report", "-i"])
            .arg(&data)
            .arg("--timeline")
            .arg(out)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(129), "{err}");
        assert!(
            err.lines().count() == 1 && err.contains(&*out.to_string_lossy()),
            "{err}"
        );
        assert!(fs::read(&data).unwrap() == before, "the recording changed");
    }
    // Another file of the same recording is written as asked.
    let json = dir.join("y.json");
    timeline_ok(&data, &json);
    assert!(fs::read_to_string(&json).unwrap().contains("traceEvents"));
}

/// The timeline of the recording `data` written to `out` by bperf report, which must
/// succeed.
fn timeline_ok(data: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    run_ok(
        bperf()
            .args(["report", "-i"])
            .arg(data)
            .arg("--timeline")
            .arg(out),
    )
}

/// `--timeline -` writes the JSON timeline to standard output, as `-i -` reads standard
/// input: the same bytes as --timeline t.json writes, and no file named `-`. No
/// privilege.
#[test]
fn a_timeline_to_standard_output() {
    let dir = TempDir::new("timeline-stdout");
    let data = recording_in(&dir, "x.data");
    let json = dir.join("t.json");
    timeline_ok(&data, &json);
    let o =
        run_ok(
            bperf()
                .current_dir(dir.path())
                .args(["report", "-i", "x.data", "--timeline", "-"]),
        );
    assert!(
        o.stdout == fs::read(&json).unwrap(),
        "standard output is not the timeline: {} bytes",
        o.stdout.len()
    );
    assert_eq!(dir.names(), ["t.json", "x.data"]);
    assert!(stderr(&o).contains("to standard output"), "{}", stderr(&o));
}

/// A timeline whose write fails (a full file system: a 16 kB tmpfs, mounted in a mount
/// namespace of the test's own, which ends with it) leaves the timeline that was there
/// as it was, and no part nor temporary file: one line naming the file and the error,
/// in each form.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_failed_timeline_write_leaves_no_part() {
    let dir = TempDir::new("timeline-full");
    let data = recording_in(&dir, "x.data");
    let full = dir.join("full");
    fs::create_dir(&full).unwrap();
    for name in ["t.json", "t.svg", "t.pftrace"] {
        let script = format!(
            "mount -t tmpfs -o size=16k bperf-test \"$1\" || exit 90
            printf old > \"$1/{name}\"
            \"$2\" report -i \"$3\" --timeline \"$1/{name}\" 2>\"$1/../err\"
            echo \"status $?\"; cat \"$1/{name}\"; echo; ls -A \"$1\""
        );
        let o = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
            .arg(&full)
            .arg(common::BPERF_EXE)
            .arg(&data)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = fs::read_to_string(dir.join("err")).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines.len() == 3 && lines[0] != "status 0" && lines[0].starts_with("status "),
            "{name}: {} lines, the first {:?}; {}",
            lines.len(),
            lines.first(),
            stderr(&o)
        );
        assert!(
            lines[1] == "old",
            "{name}: the timeline that was there changed: {} bytes there now",
            lines[1].len()
        );
        assert_eq!(lines[2], name, "{name}: left in the full file system");
        assert!(
            err.lines().count() == 1 && err.contains(name) && err.contains("No space left"),
            "{name}: {err}"
        );
    }
    assert!(
        full.read_dir().unwrap().next().is_none(),
        "the tmpfs outlived its namespace"
    );
}

/// `child`'s exit status within `secs` seconds, or None (and `child` killed) if it is
/// still running then.
fn exit_within(child: &mut std::process::Child, secs: u64) -> Option<std::process::ExitStatus> {
    let status = wait_for_some(secs, || child.try_wait().unwrap());
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// A new FIFO `name` in `dir`, readable and writable by its owner only.
fn make_fifo(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let fifo = dir.join(name);
    let mode = rustix::fs::Mode::from_raw_mode(0o600);
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, mode, 0).unwrap();
    fifo
}

/// A FIFO as -o that nobody opens: bperf record waits for a reader, the command running,
/// and SIGINT ends the wait at once (130, one line naming the FIFO), the command with
/// it, and no program is left. A reader that comes after the command has ended gets the
/// whole recording, its time counted from when counting started (all of what the slices
/// cover, not from the reader's coming).
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_fifo_nobody_reads_is_waited_for_until_a_signal() {
    let _g = serial();
    let dir = TempDir::new("fifo-out");
    let fifo = make_fifo(&dir, "rec.fifo");
    let pidfile = TempFile::new("pid-fifo");
    let child = bperf()
        .args(["record", "-a", "-o"])
        .arg(&fifo)
        .arg("--")
        .args(sleeper(&pidfile))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = pid_in(&pidfile);
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&child).unwrap();
    // Its only line names the FIFO.
    assert_interrupted_naming(child, &fifo, |_| true, None);
    assert!(ended(pid), "the command outlived bperf");

    // The command (0.3 s) ends a second before anybody reads.
    let mut record = bperf()
        .args(["record", "-a", "-o"])
        .arg(&fifo)
        .args(["--", "sleep", "0.3"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    let report = run_ok(bperf().args(["report", "-i"]).arg(&fifo));
    assert_eq!(exit_within(&mut record, 5).and_then(|s| s.code()), Some(0));
    let (clock_ms, elapsed) = table_clock_and_elapsed(&String::from_utf8_lossy(&report.stdout));
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    // At least the command's 0.3 s (how much of the 1.3 s bperf took to start depends
    // on the machine's load), and never more CPUs than there are, within the clocks'
    // tolerance (the task-clock's scheduler clock and the elapsed time's part by more
    // under emulation).
    let most = elapsed * cpus * (1.0 + common::clock_tolerance() / 100.0);
    assert!(
        elapsed >= 0.3 && clock_ms / 1e3 <= most,
        "{clock_ms} ms of task-clock in {elapsed} s elapsed"
    );
}

/// A recording that is not there is said as such with --timeline too (perf's 255 for a
/// file it cannot open), not as a pipe, and no timeline is made. No privilege.
#[test]
fn a_timeline_of_no_recording_names_what_is_missing() {
    let dir = TempDir::new("timeline-none");
    let missing = dir.join("none.data");
    let json = dir.join("t.json");
    let o = bperf()
        .args(["report", "-i"])
        .arg(&missing)
        .arg("--timeline")
        .arg(&json)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        err.lines().count() == 1 && err.contains("cannot open") && !err.contains("pipe"),
        "{err}"
    );
    assert!(dir.names().is_empty(), "{:?}", dir.names());
}

/// Whether a thread of process `pid` waits to write into a full pipe or FIFO.
fn writing_into_a_full_pipe(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        // Before 5.16, x86's wchan is 0 with the ORC unwinder; the stack says it.
        ["wchan", "stack"]
            .iter()
            .any(|f| fs::read_to_string(t.path().join(f)).is_ok_and(|w| w.contains("pipe_write")))
    })
}

/// A FIFO whose reader stops reading while bperf record writes: the first SIGINT ends
/// the recording, which cannot be written, and a second one gives it up at once (130,
/// one line naming the FIFO), with nothing left loaded, where bperf waited for ever.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_second_signal_gives_up_an_output_that_takes_no_more() {
    let _g = serial();
    let dir = TempDir::new("fifo-stalled");
    let fifo = make_fifo(&dir, "rec.fifo");
    // A reader that never reads (read and write, so that opening does not wait).
    let _reader = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let child = bperf()
        .args(["record", "-a", "-o"])
        .arg(&fifo)
        .arg("--")
        .arg(workload())
        .args(["pingpong", "2000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_for(if emulated() { 120 } else { 30 }, || {
            writing_into_a_full_pipe(child.id())
        }),
        "bperf never filled the FIFO"
    );
    interrupt(&child).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // The recording cannot end: bperf still runs, until the second SIGINT.
    let _ = interrupt(&child);
    // bperf's lines (the workload's child says how it ended, too).
    assert_interrupted_naming(child, &fifo, |l| l.contains("bperf"), None);
}

/// bperf stat record to a FIFO nobody opens: the counts printed, it waits for a reader,
/// and SIGINT ends the wait at once (130, one line naming the FIFO), where it waited
/// through every signal.
#[test]
#[ignore = "needs root (make test runs it)"]
fn stat_record_to_a_fifo_nobody_reads_ends_on_a_signal() {
    let _g = serial();
    let dir = TempDir::new("stat-fifo");
    let fifo = make_fifo(&dir, "perf.fifo");
    let err_path = dir.join("stderr");
    let child = bperf()
        .args(["stat", "record", "-e", "task-clock", "-o"])
        .arg(&fifo)
        .args(["--", "true"])
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    // The command has ended and the counts are out before the file is opened (a signal
    // while the command runs is the command's, as in perf stat).
    let said = || fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        wait_for(60, || said().contains("seconds time elapsed")),
        "no counts: {}",
        said()
    );
    interrupt(&child).unwrap();
    assert_interrupted_naming(child, &fifo, |l| l.starts_with("bperf"), Some(&err_path));
}

/// Sends SIGINT to `child`.
fn interrupt(child: &std::process::Child) -> rustix::io::Result<()> {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::INT)
}

/// `child`, interrupted, ends within 5 s with 130, and of the lines of its stderr (piped,
/// or written to `err_file`) that are `bperf_said`, there is one, naming `fifo`; no BPF
/// program is left.
fn assert_interrupted_naming(
    mut child: std::process::Child,
    fifo: &std::path::Path,
    bperf_said: impl Fn(&str) -> bool,
    err_file: Option<&std::path::Path>,
) {
    let status = exit_within(&mut child, 5);
    let out = child.wait_with_output().unwrap();
    let err = match err_file {
        Some(path) => fs::read_to_string(path).unwrap(),
        None => String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| bperf_said(l)).collect();
    assert!(
        said.len() == 1 && said[0].contains(&*fifo.to_string_lossy()),
        "{err}"
    );
    assert!(bperf_programs().is_empty());
}
