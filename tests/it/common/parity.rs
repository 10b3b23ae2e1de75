//! Comparing bperf stat with perf 6.12, for tests/it/shapes.rs and tests/it/differential.rs:
//! both run on the same command line, their output (exit status, stderr, stdout, the -o
//! file) compared by shape, numbers and timing left out.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{cgroup2_mount, TestCgroup};

/// A line with every number made `N`, runs of spaces made one, and, for the table's
/// lines, their length: what stays the same whatever was counted.
pub fn shape(text: &str) -> Vec<(String, Option<usize>)> {
    let number = regex::Regex::new(r"\d[\d,]*(\.\d+)?").unwrap();
    let spaces = regex::Regex::new(r" +").unwrap();
    let unpadded_rate = regex::Regex::new(r"([^ 0-9]) /sec").unwrap();
    let verbose_count = regex::Regex::new(r"^\S+: \d+ \d+ \d+$").unwrap();
    let run_row = regex::Regex::new(r"^ +[\d.]+ \([+-][\d.]+\) #+$").unwrap();
    text.lines()
        .map(|l| {
            // With -r, an event's error is left out when it is 0, which depends on the
            // counts; the time's error has as many decimals as it needs.
            let elapsed_error = l.contains(" +- ") && l.contains("seconds time elapsed");
            let l = match l.find("  ( +-") {
                Some(i) if !elapsed_error => &l[..i],
                _ => l,
            };
            // Rates carry a prefix for their size: /sec, K/sec, M/sec, G/sec (the line
            // keeps its length).
            let l = l
                .replace("K/sec", " /sec")
                .replace("M/sec", " /sec")
                .replace("G/sec", " /sec");
            // Without padding (CSV, JSON: after a separator or a quote), the prefix is
            // left out.
            let l = unpadded_rate.replace_all(&l, "$1/sec").into_owned();
            // --table's runs: each one's difference from the mean, signed, and a bar as
            // long as it.
            let l = match run_row.is_match(&l) {
                true => "N (N) #".to_string(),
                false => l,
            };
            let s = number.replace_all(&l, "N");
            let s = spaces.replace_all(&s, " ").into_owned();
            // -v's `name: count enabled running`: numbers of any width, unpadded; --table's
            // lines, indented by the width of the mean, which has as many decimals as
            // its error needs.
            let count_dump = verbose_count.is_match(&l);
            let run_table = run_row.is_match(&l)
                || l.contains("# Table of individual")
                || l.contains("# Final result:");
            let table = !l.starts_with('{')
                && !l.contains([',', ';'])
                && !elapsed_error
                && !count_dump
                && !run_table;
            (s, table.then_some(l.len()))
        })
        .collect()
}

/// A perf 6.12 to compare with live, if the machine has one.
pub fn perf_612() -> Option<PathBuf> {
    let perf = std::env::var_os("PERF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/perf-bpf/bin/perf"));
    let version = Command::new(&perf).arg("version").output().ok()?;
    String::from_utf8_lossy(&version.stdout)
        .contains("perf version 6.12")
        .then_some(perf)
}

/// perf's PERF_CPUID for the runs bperf is compared with: a model that no metric table
/// of perf's lists, so that perf's default metrics are its common ones, the ones bperf
/// prints. On a CPU model with a table of its own (TopdownL1 on recent Intel models)
/// perf adds model-specific default metrics, which bperf does not compute; with no
/// PMU to count them, perf 7.2's plain `perf stat` then stops ("No supported events
/// found") and 6.12 prints an event syntax error before its table.
pub const NEUTRAL_CPUID: (&str, &str) = ("PERF_CPUID", "GenuineIntel-6-0-0");

/// A perf 7.2 to compare bperf's default output with, if the machine has one
/// (scripts/build-perf-72 builds it to /opt/perf-72; $PERF72 names another). Where CI
/// builds it (BPERF_REQUIRE_PERF72), its absence fails the test.
pub fn perf_72() -> Option<PathBuf> {
    let perf = std::env::var_os("PERF72")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/perf-72/bin/perf"));
    let found = Command::new(&perf)
        .arg("version")
        .output()
        .ok()
        .filter(|v| String::from_utf8_lossy(&v.stdout).contains("perf version 7.2"))
        .map(|_| perf.clone());
    if found.is_none() && std::env::var_os("BPERF_REQUIRE_PERF72").is_some() {
        panic!(
            "BPERF_REQUIRE_PERF72 is set but {} is no perf 7.2 (scripts/build-perf-72)",
            perf.display()
        );
    }
    found
}

/// What one run of a tool left: its exit status, and what it wrote (standard error,
/// standard output under `--- stdout`, the -o file under `--- file`).
pub struct Transcript {
    pub code: i32,
    pub text: String,
}

impl Transcript {
    /// As the fixtures keep it: `exit N`, then the text.
    pub fn to_fixture(&self) -> String {
        format!("exit {}\n{}", self.code, self.text)
    }

    pub fn from_fixture(s: &str) -> Transcript {
        let (first, text) = s.split_once('\n').unwrap_or((s, ""));
        let code = first
            .strip_prefix("exit ")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("fixture without its exit status: {first}"));
        Transcript {
            code,
            text: text.to_string(),
        }
    }
}

/// Two test cgroups, each with a shell on every CPU that wakes every 10 ms.
pub struct BusyCgroups {
    pub a: TestCgroup,
    pub b: TestCgroup,
    shells: Vec<std::process::Child>,
}

impl Drop for BusyCgroups {
    fn drop(&mut self) {
        for shell in &mut self.shells {
            let _ = shell.kill();
            let _ = shell.wait();
        }
    }
}

impl BusyCgroups {
    /// A process of cgroup A, which wakes every 10 ms.
    pub fn pid(&self) -> u32 {
        self.shells[0].id()
    }

    pub fn new() -> BusyCgroups {
        // Fixed names: the fixtures hold them, padding included.
        let named = |name: &str| {
            let path = cgroup2_mount().join(name);
            let _ = fs::create_dir(&path);
            assert!(path.is_dir(), "cannot create {}", path.display());
            TestCgroup {
                path,
                name: name.to_string(),
            }
        };
        let mut cgroups = BusyCgroups {
            a: named("bperf-parity-a"),
            b: named("bperf-parity-b"),
            shells: Vec::new(),
        };
        let cpus = bperf::sys::online_cpus().unwrap();
        for procs in [cgroups.a.procs(), cgroups.b.procs()] {
            for cpu in &cpus {
                let script = format!("echo $$ > {procs}; while :; do sleep 0.01; done");
                let shell = Command::new("taskset")
                    .args(["-c", &cpu.to_string(), "sh", "-c", &script])
                    .spawn()
                    .unwrap();
                cgroups.shells.push(shell);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        cgroups
    }
}

/// What is in an -o file before a run with --append.
pub const EARLIER_OUTPUT: &str = "an earlier line\n";

/// How long one run may take before it is stopped (and counts as a difference).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// Runs `tool stat ARGS`, the placeholders filled in: `{A}` and `{B}` the busy cgroups,
/// `{PID}` a process of `{A}` that wakes every 10 ms, `{OUT}` the output file (which
/// holds EARLIER_OUTPUT before a run with --append).
pub fn transcript<S: AsRef<str>>(
    tool: &Path,
    args: &[S],
    cgroups: &BusyCgroups,
    out: &Path,
) -> Transcript {
    transcript_as(tool, args, cgroups, out, "6.12")
}

/// As `transcript`, bperf printing the output of perf `version` ("6.12", "7.2").
pub fn transcript_as<S: AsRef<str>>(
    tool: &Path,
    args: &[S],
    cgroups: &BusyCgroups,
    out: &Path,
    version: &str,
) -> Transcript {
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            a.as_ref()
                .replace("{A}", &cgroups.a.name)
                .replace("{B}", &cgroups.b.name)
                .replace("{PID}", &cgroups.pid().to_string())
                .replace("{OUT}", out.to_str().unwrap())
        })
        .collect();
    let uses_file = args.iter().any(|a| a.contains(out.to_str().unwrap()));
    let _ = fs::remove_file(out);
    if args.iter().any(|a| a == "--append") {
        fs::write(out, EARLIER_OUTPUT).unwrap();
    }
    let mut cmd = Command::new(tool);
    cmd.env("BPERF_PERF_VERSION", version)
        .env(NEUTRAL_CPUID.0, NEUTRAL_CPUID.1)
        .arg("stat")
        .args(&args);
    let (code, stdout, stderr) = run_bounded(&mut cmd);
    let mut text = stderr;
    if !stdout.is_empty() {
        text.push_str("--- stdout\n");
        text.push_str(&stdout);
    }
    if uses_file {
        text.push_str("--- file\n");
        text.push_str(&fs::read_to_string(out).unwrap_or_default());
    }
    Transcript { code, text }
}

/// Runs `cmd` for at most RUN_LIMIT: its exit status (-1 for a signal, -2 when it had
/// to be stopped), stdout and stderr.
fn run_bounded(cmd: &mut Command) -> (i32, String, String) {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let mut bytes = Vec::new();
                let _ = p.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + RUN_LIMIT;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break -2;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (code, out.join().unwrap(), err.join().unwrap())
}

/// perf's output with the differences docs/perf-versions.md lists as on purpose made bperf's:
/// [metric-unit-null].
pub fn documented(perf: &str) -> String {
    perf.replace(r#""metric-unit" : "(null)""#, r#""metric-unit" : """#)
}

/// What differs from one machine to the next: the CPU's name, the date.
pub fn machine_neutral(text: &str) -> String {
    let cpuid = regex::Regex::new(r"(?m)^Using CPUID .*$").unwrap();
    let started = regex::Regex::new(r"(?m)^# started on .*$").unwrap();
    let text = cpuid.replace_all(text, "Using CPUID X");
    started.replace_all(&text, "# started on DATE").into_owned()
}

/// The -o file of a transcript, if it has one.
pub fn file_part(text: &str) -> &str {
    text.find("--- file\n").map_or("", |i| &text[i..])
}

/// How bperf's transcript differs from perf's, if it does: the exit status, or the
/// first line whose shape differs (for what perf refuses, the -o file only: bperf says
/// why on one line, where perf adds its usage). perf's output is taken with the
/// differences docs/perf-versions.md lists as on purpose made bperf's (`documented`).
pub fn difference(perf: &Transcript, bperf: &Transcript) -> Option<String> {
    if perf.code != bperf.code {
        return Some(format!("perf exits {}, bperf {}", perf.code, bperf.code));
    }
    let (w, g) = (
        machine_neutral(&documented(&perf.text)),
        machine_neutral(&bperf.text),
    );
    let (w, g) = match perf.code {
        0 => (w, g),
        _ => (file_part(&w).to_string(), file_part(&g).to_string()),
    };
    let (w, g) = (shape(&w), shape(&g));
    if let Some(i) = (0..w.len().min(g.len())).find(|&i| w[i] != g[i]) {
        return Some(format!(
            "line {}: perf's shape {:?}, bperf's {:?}",
            i + 1,
            w[i],
            g[i]
        ));
    }
    (w.len() != g.len()).then(|| format!("perf has {} lines, bperf {}", w.len(), g.len()))
}
