//! Hybrid machines (several core PMUs) against perf 6.12 itself. Needs root.
//!
//! This machine has no hybrid PMU (no CPU PMU at all), so both tools run on a fixture:
//! the sysfs tree of a hybrid machine (tests/fixtures/sysfs/hybrid-*, its core PMUs'
//! `cpus` cut down to this machine's first two CPUs) mounted over
//! /sys/bus/event_source/devices in a mount namespace of their own, with the shim
//! tests/hybrid/fakepmu.c preloaded. The shim logs every perf_event_open(2) and opens
//! the fixture PMUs' events as software dummy events (count 0, real times), so that
//! both tools run to the end and print.
//!
//! Compared with perf 6.12 (live, or as recorded in tests/fixtures/perf-6.12/hybrid/
//! where the machine has none; BPERF_RECORD_PERF_SHAPES=1 records again): the output,
//! times aside, and the set of events each tool opened (type, config words, exclusion
//! bits, task, CPU). Proven here: which events bperf makes of an event string on such a
//! machine, on which CPUs it opens them, and how it prints them. Not proven: that a
//! hybrid PMU counts them as the kernel documents (no such PMU here), nor their counts.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::parity::perf_612;
use common::*;

/// A fixture machine: its sysfs tree, and the shim that fakes its PMUs.
struct FakeMachine {
    dir: TempDir,
    /// The PMU types the shim fakes (FAKEPMU_TYPES).
    types: &'static str,
}

impl FakeMachine {
    /// The fixture `name`, its core PMUs (in perf's order) on CPUs `cpus[0]`,
    /// `cpus[1]`; the shim built for it. None (the test skips, saying why) without a C
    /// compiler or unshare(1).
    fn new(name: &str, types: &'static str, cpus: [u32; 2]) -> Option<FakeMachine> {
        let dir = TempDir::new(&format!("hybrid-{name}-{types}"));
        let m = FakeMachine { dir, types };
        let fixture = common::fixture(&format!("sysfs/{name}"));
        let devices = m.devices();
        copy_tree(&fixture.join("devices"), &devices);
        let mut cores: Vec<PathBuf> = fs::read_dir(&devices)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("cpus").exists())
            .collect();
        cores.sort();
        assert_eq!(cores.len(), 2, "{name}: two core PMUs");
        for (pmu, cpu) in cores.iter().zip(cpus) {
            fs::write(pmu.join("cpus"), format!("{cpu}\n")).unwrap();
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hybrid/fakepmu.c");
        let built = ["cc", "clang"].iter().any(|cc| {
            Command::new(cc)
                .args(["-O2", "-shared", "-fPIC", "-o"])
                .arg(m.shim())
                .arg(&src)
                .arg("-ldl")
                .status()
                .is_ok_and(|s| s.success())
        });
        if !built {
            eprintln!("no C compiler to build {}: skipped", src.display());
            return None;
        }
        if Command::new("unshare").arg("--version").output().is_err() {
            eprintln!("no unshare(1): skipped");
            return None;
        }
        Some(m)
    }

    fn devices(&self) -> PathBuf {
        self.dir.join("devices")
    }

    fn shim(&self) -> PathBuf {
        self.dir.join("fakepmu.so")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("opens.log")
    }

    /// Runs `tool stat ARGS` on this machine: (stdout, stderr, the events it opened).
    fn stat(&self, tool: &Path, args: &[&str]) -> Run {
        let _ = fs::remove_file(self.log());
        let out = Command::new("unshare")
            .env("BPERF_PERF_VERSION", "6.12")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                r#"mount --bind "$0" /sys/bus/event_source/devices && exec "$@""#,
            ])
            .arg(self.devices())
            .arg("env")
            .arg(format!("FAKEPMU_LOG={}", self.log().display()))
            .arg(format!("FAKEPMU_TYPES={}", self.types))
            .arg(format!("LD_PRELOAD={}", self.shim().display()))
            .arg(tool)
            .arg("stat")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool:?} stat {args:?}: {out:?}");
        Run {
            stdout: normalized(&String::from_utf8_lossy(&out.stdout)),
            stderr: normalized(&String::from_utf8_lossy(&out.stderr)),
            opens: opens(&fs::read_to_string(self.log()).unwrap_or_default()),
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        match e.file_type().unwrap().is_dir() {
            true => copy_tree(&e.path(), &dest),
            false => {
                fs::copy(e.path(), dest).unwrap();
            }
        }
    }
}

/// One tool's run, in the form compared.
#[derive(Debug, PartialEq)]
struct Run {
    stdout: String,
    stderr: String,
    /// The events opened (see [`opens`]), the task's pid left out.
    opens: String,
}

impl Run {
    fn recorded(&self) -> String {
        format!(
            "== stdout\n{}== stderr\n{}== opens\n{}",
            self.stdout, self.stderr, self.opens
        )
    }
}

/// The output without what changes from run to run: times, and the counts of the real
/// (software) events.
fn normalized(text: &str) -> String {
    let times = regex::Regex::new(r"\d+\.\d{9} seconds (time elapsed|user|sys)").unwrap();
    // CSV: a count (after the CPU or group columns, if any), and a run time before the
    // percentage.
    let csv_count = regex::Regex::new(r"^((?:CPU\d+,|S\d[^,]*,\d+,)?)\d+,").unwrap();
    let csv_run = regex::Regex::new(r",\d+,(\d+\.\d\d),").unwrap();
    let mut out = String::new();
    for l in text.lines() {
        let l = times.replace_all(l, "T seconds $1");
        let l = match l.contains(',') {
            true => csv_run
                .replace_all(&csv_count.replace(&l, "${1}N,"), ",RUN,$1,")
                .into_owned(),
            false => l.into_owned(),
        };
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The opens of a shim log, each once, sorted; of those the kernel refused, only which
/// event on which CPU (perf retries them with other exclusion bits than bperf).
fn opens(log: &str) -> String {
    let pid = regex::Regex::new(r"pid \d+ cpu -1").unwrap();
    let flags = regex::Regex::new(r" \[\w*\]").unwrap();
    let mut lines: Vec<String> = log
        .lines()
        .map(|l| {
            let l = pid.replace(l, "pid P cpu -1");
            match l.ends_with(": refused") {
                true => flags.replace(&l, "").into_owned(),
                false => l.into_owned(),
            }
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// (recording, fixture, PMU types faked, perf stat's arguments; FIRST_CPU: the CPU
/// of the first core PMU)
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

const CASES: &[Case] = &[
    (
        "intel-events",
        "hybrid-intel",
        "4,10",
        &[
            "-a",
            "-e",
            "cycles,instructions,cycles:u,cpu_core/cycles/,L1-dcache-loads,cpu_atom/cpu-cycles/k,r1a,mem-loads,cpu_core/event=0xc0,name=insns/",
            "sleep",
            "0.1",
        ],
    ),
    (
        "intel-per-cpu",
        "hybrid-intel",
        "4,10",
        &["-a", "-A", "-e", "cycles,instructions", "sleep", "0.1"],
    ),
    (
        "intel-groups-csv",
        "hybrid-intel",
        "4,10",
        &[
            "-a",
            "-x,",
            "-e",
            "{cycles,instructions},{cs,cycles},{cpu_core/cycles/,cpu_core/instructions/}:u",
            "sleep",
            "0.1",
        ],
    ),
    (
        "intel-cpu-list",
        "hybrid-intel",
        "4,10",
        &["-C", "FIRST_CPU", "-x,", "-e", "cycles,{cs,instructions}", "sleep", "0.1"],
    ),
    (
        "intel-command",
        "hybrid-intel",
        "4,10",
        &["-x,", "-e", "cycles:u,cpu_atom/instructions/k", "true"],
    ),
    (
        "arm-events",
        "hybrid-arm",
        "8,9",
        &[
            "-a",
            "-e",
            "cycles,instructions,cpu_cycles,armv8_cortex_a76/inst_retired/,r11,L1-dcache-load-misses,armv8_cortex_a55/cycles/",
            "sleep",
            "0.1",
        ],
    ),
    (
        "arm-per-cpu-groups",
        "hybrid-arm",
        "8,9",
        &["-a", "-A", "-x,", "-e", "{cycles,inst_retired}:u", "sleep", "0.1"],
    ),
    // A kernel that takes no extended type (arm64 before 6.6): nothing faked, the
    // kernel refuses every fixture event.
    (
        "arm-older-kernel",
        "hybrid-arm",
        "",
        &[
            "-a",
            "-e",
            "cycles,L1-dcache-load-misses,cpu_cycles,armv8_cortex_a55/cycles/",
            "sleep",
            "0.1",
        ],
    ),
];

#[test]
#[ignore = "needs root (make test runs it)"]
fn hybrid_machines_as_perf_612_sees_them() {
    let online = bperf::sys::online_cpus().unwrap();
    if online.len() < 2 {
        eprintln!("one CPU: no room for two core PMUs; skipped");
        return;
    }
    let cpus = [online[0], online[1]];
    // The recordings name CPUs 0 and 1.
    let recorded_cpus = cpus == [0, 1];
    let _g = serial();
    let bperf = PathBuf::from(common::BPERF_EXE);
    let perf = perf_612();
    let record = std::env::var_os("BPERF_RECORD_PERF_SHAPES").is_some();
    let mut failures = vec![];
    for (name, fixture, types, args) in CASES {
        let Some(machine) = FakeMachine::new(fixture, types, cpus) else {
            return;
        };
        let cpu0 = cpus[0].to_string();
        let args: Vec<&str> = args
            .iter()
            .map(|&a| if a == "FIRST_CPU" { cpu0.as_str() } else { a })
            .collect();
        let ours = machine.stat(&bperf, &args);
        let file = common::fixture(&format!("perf-6.12/hybrid/{name}.txt"));
        let theirs = match &perf {
            Some(perf) => {
                let theirs = machine.stat(perf, &args).recorded();
                if record && recorded_cpus {
                    fs::create_dir_all(file.parent().unwrap()).unwrap();
                    fs::write(&file, &theirs).unwrap();
                }
                theirs
            }
            None if recorded_cpus => fs::read_to_string(&file).unwrap(),
            None => continue,
        };
        if ours.recorded() != theirs {
            failures.push(format!(
                "{name} (stat {}):\n--- perf 6.12\n{theirs}--- bperf\n{}",
                args.join(" "),
                ours.recorded()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
