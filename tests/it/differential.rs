//! Differential test: random perf stat command lines, from a fixed seed, each run
//! through perf 7.2 and bperf, and through perf 6.12 and bperf printing perf 6.12's
//! output; their transcripts (exit status, stderr, stdout, the -o file) must have the
//! same shape (tests/it/common/parity.rs), but for the differences docs/perf-versions.md
//! lists as on purpose, which ALLOWED (and ALLOWED_72) name. At least 97% of the lines must pass.
//!
//! BPERF_DIFF_LINES=N sets how many command lines (DEFAULT_LINES, a couple of minutes,
//! without it), BPERF_DIFF_SEED=S the seed. Needs root and the perf builds ($PERF or
//! /opt/perf-bpf/bin/perf, $PERF72 or /opt/perf-72/bin/perf); skips, saying so, without
//! them.

use crate::common;

use std::path::{Path, PathBuf};

use common::parity::*;
use common::*;

/// Command lines run when BPERF_DIFF_LINES does not say: about two minutes here.
const DEFAULT_LINES: usize = 50;
const DEFAULT_SEED: u64 = 23;
/// The seed of the comparison with perf 7.2.
const DEFAULT_SEED_72: u64 = 72;

/// SplitMix64: a small generator whose sequence a seed fixes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `pct` percent.
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Software events, and msr/tsc/ (a PMU perf counts as software), as typed.
const EVENTS: &[&str] = &[
    "task-clock",
    "cpu-clock",
    "context-switches",
    "cs",
    "page-faults",
    "faults",
    "minor-faults",
    "major-faults",
    "cpu-migrations",
    "msr/tsc/",
    "cycles",
    // Last: never in a group.
    "duration_time",
];

const MODIFIERS: &[&str] = &["", "", "", ":u", ":k"];

/// An -e list: one to three events or groups.
fn event_list(rng: &mut Rng) -> String {
    let mut items = Vec::new();
    for _ in 0..1 + rng.next() % 3 {
        let item = match rng.chance(25) {
            true => {
                // duration_time in a group crashes perf 6.12 ([tool-in-group]).
                let members: Vec<&str> = (0..2 + rng.next() % 2)
                    .map(|_| rng.pick(&EVENTS[..EVENTS.len() - 1]))
                    .collect();
                format!("{{{}}}{}", members.join(","), rng.pick(MODIFIERS))
            }
            false => {
                let e = rng.pick(EVENTS);
                // perf refuses modifiers after a PMU's slash-terms written with a colon.
                let m = match e.ends_with('/') || e == "duration_time" {
                    true => "",
                    false => rng.pick(MODIFIERS),
                };
                format!("{e}{m}")
            }
        };
        items.push(item);
    }
    items.join(",")
}

/// Commands short enough that --timeout never ends them.
const COMMANDS: &[&[&str]] = &[
    &["sleep", "0.05"],
    &["sleep", "0.02"],
    &["true"],
    &[
        "sh",
        "-c",
        "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done",
    ],
];

/// Commands for counting cgroups, in which something wakes every 10 ms on each CPU.
/// (None a whole number of -I's intervals long: a last interval of a few ms may find a
/// cgroup that did not run.)
const CGROUP_COMMANDS: &[&[&str]] = &[&["sleep", "0.05"], &["sleep", "0.07"]];

/// One random command line of perf stat's options over software events.
fn command_line(rng: &mut Rng) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let push = |a: &mut Vec<String>, words: &[&str]| a.extend(words.iter().map(|w| w.to_string()));
    // The events, and -G between or after -e options.
    let mut cgroup_given = false;
    if rng.chance(80) {
        for _ in 0..1 + rng.next() % 2 {
            push(&mut a, &["-e", &event_list(rng)]);
            if rng.chance(12) {
                push(
                    &mut a,
                    &["-G", rng.pick(&["{A}", "{A},{B}", ",{B}", "{B}"])],
                );
                cgroup_given = true;
            }
        }
    }
    if rng.chance(10) {
        push(&mut a, &[rng.pick(&["-d", "-dd"])]);
    }
    // The target.
    let target = rng.next() % 100;
    let (system, pid) = match target {
        0..=34 => (false, false),
        35..=69 => {
            push(&mut a, &["-a"]);
            (true, false)
        }
        70..=84 => {
            push(&mut a, &["-C", rng.pick(&["0", "1", "0-1", "1,0"])]);
            (true, false)
        }
        _ => {
            push(&mut a, &["-p", "{PID}"]);
            if rng.chance(40) {
                push(&mut a, &["--per-thread"]);
            }
            (false, true)
        }
    };
    if system && !cgroup_given && rng.chance(20) {
        push(
            &mut a,
            &["--for-each-cgroup", rng.pick(&["{A}", "{A},{B}"])],
        );
    }
    // Now and then, what needs a system target without one: perf's refusal.
    if (system || rng.chance(5)) && rng.chance(30) {
        let modes = [
            "-A",
            "--per-socket",
            "--per-core",
            "--per-die",
            "--per-node",
            "--per-cache",
            "--per-cluster",
        ];
        push(&mut a, &[rng.pick(&modes)]);
    }
    // The output.
    match rng.next() % 10 {
        0..=1 => push(&mut a, &["-x", rng.pick(&[",", ";"])]),
        2..=3 => push(&mut a, &["-j"]),
        _ => {}
    }
    if rng.chance(8) {
        push(&mut a, &["-B"]);
    }
    if rng.chance(8) {
        push(&mut a, &["--no-big-num"]);
    }
    if rng.chance(10) {
        push(&mut a, &["--metric-only"]);
    }
    if rng.chance(5) {
        push(
            &mut a,
            &["-M", rng.pick(&["CPUs_utilized", "cs_per_second"])],
        );
    }
    if rng.chance(12) {
        push(&mut a, &["-o", "{OUT}"]);
        if rng.chance(40) {
            push(&mut a, &["--append"]);
        }
    }
    for (pct, flag) in [
        (6, "-v"),
        (5, "--quiet"),
        (6, "--all-user"),
        (3, "--all-kernel"),
        (5, "-n"),
    ] {
        if rng.chance(pct) {
            push(&mut a, &[flag]);
        }
    }
    // When counting ends: intervals, a timeout, or the command (and runs of it).
    let command = !pid && (!system || rng.chance(60));
    let intervals = !command && rng.chance(50) || command && rng.chance(15);
    if intervals {
        push(
            &mut a,
            &[
                "-I",
                rng.pick(&["100", "150"]),
                "--interval-count",
                rng.pick(&["1", "2"]),
            ],
        );
        if rng.chance(30) {
            push(&mut a, &["--summary"]);
        }
    } else if !command || rng.chance(10) {
        push(&mut a, &["--timeout", rng.pick(&["100", "200"])]);
    }
    if command {
        if !intervals && rng.chance(15) {
            push(&mut a, &["-r", "2"]);
            if rng.chance(40) {
                push(&mut a, &["--table"]);
            }
        }
        let delay = rng.chance(6);
        // Cgroups are counted while they run: a command long enough for theirs to; and
        // one long enough for an interval (a command that ends at once can race perf's
        // start, which then counts nothing).
        let cgroups = has(&a, "-G") || has(&a, "--for-each-cgroup") || intervals;
        let cmd = match cgroups {
            true => CGROUP_COMMANDS[(rng.next() % CGROUP_COMMANDS.len() as u64) as usize],
            false => COMMANDS[(rng.next() % COMMANDS.len() as u64) as usize],
        };
        // A delay well within the command: one as long races it to the end.
        if delay {
            push(&mut a, &["-D", "20", "--", "sleep", "0.06"]);
        } else {
            push(&mut a, &["--"]);
            push(&mut a, cmd);
        }
    } else if rng.chance(5) {
        // --table without -r: perf's refusal.
        push(&mut a, &["--table"]);
    }
    a
}

/// A difference docs/perf-versions.md lists as on purpose, and the command lines it shows in.
struct Allowed {
    /// Its name in docs/perf-versions.md's list, in brackets.
    name: &'static str,
    applies: fn(&[String]) -> bool,
}

/// The differences on purpose with perf `version`: ALLOWED, and with perf 7.2
/// ALLOWED_72 first.
fn allowed(version: &str) -> impl Iterator<Item = &'static Allowed> {
    let newer: &[Allowed] = match version {
        "6.12" => &[],
        _ => ALLOWED_72,
    };
    newer.iter().chain(ALLOWED)
}

/// The differences with perf 7.2 only (docs/perf-versions.md's list).
const ALLOWED_72: &[Allowed] = &[
    Allowed {
        name: "metric-names-72",
        applies: |a| has(a, "-M"),
    },
    Allowed {
        name: "verbose-metrics-72",
        applies: |a| has(a, "-v") && !has(a, "-e") && !has(a, "-n"),
    },
];

fn has(a: &[String], word: &str) -> bool {
    a.iter().any(|w| w == word)
}

/// The differences on purpose that make a command line's transcripts differ whole.
const ALLOWED: &[Allowed] = &[
    Allowed {
        name: "csv-and-json",
        applies: |a| has(a, "-x") && has(a, "-j"),
    },
    Allowed {
        name: "metric-names",
        applies: |a| has(a, "-M"),
    },
    Allowed {
        name: "metric-only-per-cpu-cgroups",
        applies: |a| has(a, "--metric-only") && has(a, "-A") && has(a, "--for-each-cgroup"),
    },
    Allowed {
        name: "tool-in-group",
        applies: |a| groups_with(a, "duration_time"),
    },
    Allowed {
        name: "tool-aggregated",
        applies: |a| {
            let aggregated = [
                "--per-socket",
                "--per-die",
                "--per-cluster",
                "--per-cache",
                "--per-node",
            ]
            .iter()
            .any(|m| has(a, m));
            aggregated && has(a, "-C") && a.iter().any(|w| w.contains("duration_time"))
        },
    },
    Allowed {
        name: "refused-leader-runs",
        applies: |a| has(a, "-r") && refused_leader(a),
    },
    Allowed {
        name: "metric-only-null",
        applies: |a| has(a, "--metric-only") && has(a, "-n"),
    },
];

/// Whether an -e list of `a` has a group whose leader the kernel here refuses: cycles
/// (no PMU), or msr/tsc/ with modifiers (it counts everything or nothing).
fn refused_leader(a: &[String]) -> bool {
    a.windows(2).any(|w| {
        w[0] == "-e"
            && w[1].split('{').skip(1).any(|g| {
                let leader = g.split([',', '}']).next().unwrap_or("");
                let group_mods = g.split('}').nth(1).is_some_and(|m| m.starts_with(':'));
                leader.starts_with("cycles") || leader == "msr/tsc/" && group_mods
            })
    })
}

/// At most the first few KiB of a transcript, for the test's report.
fn head(text: &str) -> &str {
    let mut end = text.len().min(4096);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Whether an -e list of `a` has a group with `event` in it.
fn groups_with(a: &[String], event: &str) -> bool {
    a.windows(2).any(|w| {
        w[0] == "-e"
            && w[1].split('{').skip(1).any(|g| {
                g.split('}')
                    .next()
                    .is_some_and(|g| g.split(',').any(|e| e == event))
            })
    })
}

/// The differences on purpose that every comparison takes into account: in
/// parity::difference, and `signal_exit`.
const TAKEN_INTO_ACCOUNT: &[&str] = &["metric-unit-null", "one-line-errors", "signal-exit"];

/// The names of ALLOWED, and those parity::difference applies, each in docs/perf-versions.md.
#[test]
fn allowed_differences_are_documented() {
    let listed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/perf-versions.md"),
    )
    .unwrap();
    for name in ALLOWED
        .iter()
        .chain(ALLOWED_72)
        .map(|a| a.name)
        .chain(TAKEN_INTO_ACCOUNT.iter().copied())
    {
        assert!(
            listed.contains(&format!("- [{name}]")),
            "docs/perf-versions.md does not list [{name}]"
        );
    }
}

/// What the run found.
#[derive(Default)]
struct Tally {
    same: usize,
    allowed: std::collections::BTreeMap<&'static str, usize>,
    differ: Vec<String>,
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn random_command_lines_print_what_perf_prints() {
    let Some(perf) = perf_612() else {
        eprintln!("skipped: no perf 6.12 ($PERF or /opt/perf-bpf/bin/perf) to compare with");
        return;
    };
    compare_random_lines(&perf, "6.12", DEFAULT_SEED);
}

/// bperf's default output against perf 7.2's, on another seed.
#[test]
#[ignore = "needs root (make test runs it)"]
fn random_command_lines_print_what_perf_72_prints() {
    let Some(perf) = perf_72() else {
        eprintln!("skipped: no perf 7.2 ($PERF72 or /opt/perf-72/bin/perf, scripts/build-perf-72) to compare with");
        return;
    };
    compare_random_lines(&perf, "7.2", DEFAULT_SEED_72);
}

/// Runs BPERF_DIFF_LINES random command lines (BPERF_DIFF_SEED's, else `seed`'s)
/// through `perf` and through bperf printing perf `version`'s output; fails on any
/// difference docs/perf-versions.md does not list.
fn compare_random_lines(perf: &Path, version: &str, seed: u64) {
    let lines: usize = std::env::var("BPERF_DIFF_LINES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_LINES);
    let seed: u64 = std::env::var("BPERF_DIFF_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(seed);
    let _g = serial();
    let bperf = PathBuf::from(common::BPERF_EXE);
    let dir = TempDir::new("differential");
    let out = dir.join("out.txt");
    let cgroups = BusyCgroups::new();
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    for i in 0..lines {
        let args = command_line(&mut rng);
        if let Some(allowed) = allowed(version).find(|a| (a.applies)(&args)) {
            *tally.allowed.entry(allowed.name).or_default() += 1;
            continue;
        }
        let theirs = transcript_as(perf, &args, &cgroups, &out, version);
        let ours = transcript_as(&bperf, &args, &cgroups, &out, version);
        match difference(&theirs, &ours) {
            None => tally.same += 1,
            Some(why) if signal_exit(&theirs, &ours) => {
                let _ = why;
                *tally.allowed.entry("signal-exit").or_default() += 1;
            }
            Some(why) => {
                eprintln!(
                    "#{i} perf stat {}\n  {why}\n--- perf:\n{}--- bperf:\n{}",
                    args.join(" "),
                    head(&theirs.text),
                    head(&ours.text)
                );
                tally.differ.push(format!("#{i} {}: {why}", args.join(" ")));
            }
        }
    }
    drop(dir);
    eprintln!(
        "perf {version}: {lines} command lines (seed {seed}): {} the same, {} differ on purpose {:?}, {} differ",
        tally.same,
        tally.allowed.values().sum::<usize>(),
        tally.allowed,
        tally.differ.len()
    );
    // At least 97% the same or differing on purpose: perf's and bperf's runs race the
    // commands and intervals they count, and a line now and then loses the race.
    assert!(
        tally.differ.len() * 100 <= lines * 3,
        "{} of {lines} command lines differ from perf {version}:\n{}",
        tally.differ.len(),
        tally.differ.join("\n")
    );
}

/// [signal-exit]: perf exits 0 after a command a signal ended, bperf 128 + the signal.
fn signal_exit(perf: &Transcript, bperf: &Transcript) -> bool {
    perf.code == 0 && bperf.code > 128 && bperf.text.contains(": Terminated")
}
