//! The event language against perf itself, groups on this machine, and `bperf list`.

use crate::common;

use std::process::Command;

use common::parity::perf_612;
use common::*;

/// Identity fields of each perf_event_attr block of a `-vv` dump, in the notation of
/// tests/fixtures/perf-attrs.tsv: `type config config1 config2 [flags]`. A retry of the
/// same event (perf and bperf both retry without exclude_guest on EINVAL) is folded into
/// the first attempt.
fn attr_blocks(dump: &str) -> Vec<String> {
    let mut out: Vec<(String, String)> = vec![];
    let mut cur: Option<Vec<(String, String)>> = None;
    for line in dump.lines() {
        if line.starts_with("perf_event_attr:") {
            cur = Some(vec![]);
        } else if line.starts_with("sys_perf_event_open") {
            let Some(fields) = cur.take() else { continue };
            let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            let num = |k: &str| {
                get(k).map_or(0, |v| match v.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16).unwrap(),
                    None => v.parse().unwrap(),
                })
            };
            let mut flags = vec![];
            for (k, f) in [
                ("exclude_user", "u"),
                ("exclude_kernel", "k"),
                ("exclude_hv", "h"),
                ("exclude_idle", "I"),
                ("exclude_host", "H"),
                ("exclude_guest", "G"),
                ("pinned", "D"),
                ("exclusive", "e"),
            ] {
                if get(k) == Some("1") {
                    flags.push(f.to_string());
                }
            }
            if let Some(p) = get("precise_ip") {
                flags.push(format!("p{p}"));
            }
            let id = format!(
                "{} {:#x} {:#x} {:#x}",
                num("type"),
                num("config"),
                num("config1"),
                num("config2")
            );
            if out.last().map(|(i, _)| i) != Some(&id) {
                out.push((id, flags.join(" ")));
            }
        } else if let Some(fields) = cur.as_mut() {
            let l = line.trim();
            if l.is_empty() || l.starts_with("---") {
                continue;
            }
            // `{ bp_addr, config1 }  0x3` names its field last inside the braces.
            let (name, value) = match l.strip_prefix('{') {
                Some(rest) => {
                    let (names, value) = rest.split_once('}').unwrap();
                    (names.rsplit(',').next().unwrap().trim(), value.trim())
                }
                None => {
                    let mut it = l.split_whitespace();
                    (it.next().unwrap(), it.next().unwrap_or(""))
                }
            };
            fields.push((name.to_string(), value.to_string()));
        }
    }
    out.into_iter()
        .map(|(id, f)| format!("{id} [{f}]"))
        .collect()
}

/// Every event string of the recorded table: perf on this machine still gives the
/// recorded attributes, and bperf's `-vv` dump gives the same ones.
#[test]
#[ignore = "needs root (make test runs it)"]
fn table_matches_perf() {
    let _g = serial();
    let table = include_str!("../fixtures/perf-attrs.tsv");
    let perf = perf_612();
    if perf.is_none() {
        eprintln!("no perf 6.12: checking bperf's dumps against the recorded table only");
    }
    let mut failures = vec![];
    for line in table.lines() {
        let (ev, recorded) = line.split_once('\t').unwrap();
        let out = bperf()
            .args(["stat", "-vv", "-e", ev, "--", "true"])
            .output()
            .unwrap();
        let ours = attr_blocks(&String::from_utf8_lossy(&out.stderr)).join(" | ");
        let theirs = if let Some(perf) = &perf {
            let out = Command::new(perf)
                .args(["stat", "-vv", "-e", ev, "true"])
                .output()
                .unwrap();
            attr_blocks(&String::from_utf8_lossy(&out.stderr)).join(" | ")
        } else {
            recorded.to_string()
        };
        if ours != theirs {
            failures.push(format!("{ev}: bperf {ours:?}, perf {theirs:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Groups open as groups (members carry their leader's fd) and count on this machine;
/// one that spans PMUs is split as perf 6.12 splits it (msr/tsc/ leaves a group of
/// software events), its software members still a group.
#[test]
#[ignore = "needs root (make test runs it)"]
fn groups_count_together() {
    let _g = serial();
    for list in [
        "{task-clock,page-faults}",
        "{cpu-clock,task-clock}",
        "{msr/tsc/,cs,page-faults}",
        "{task-clock,cs}:k",
    ] {
        let csv = TempFile::new("groups.csv");
        let out = run_ok(
            bperf()
                .args(["stat", "-vv", "-a", "-x,", "-o"])
                .arg(&csv.0)
                .args(["-e", list, "--", "sleep", "0.2"]),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let joined = err
            .lines()
            .filter(|l| l.starts_with("sys_perf_event_open:") && l.contains(" = "))
            .filter(|l| !l.contains("group_fd -1"))
            .count();
        assert!(joined > 0, "{list}: no member opened into a group:\n{err}");
        let text = csv.read();
        // value,unit,event,run_ns,pct,metric,metric_unit; -v's `name: count enabled
        // running` lines, which perf writes there too, have no commas.
        let rows: Vec<Vec<&str>> = text
            .lines()
            .filter(|l| l.contains(',') && !l.starts_with('#'))
            .map(|l| l.split(',').collect())
            .collect();
        assert_eq!(rows.len(), list.matches(',').count() + 1, "{list}: {text}");
        for r in rows {
            assert!(
                r[0].parse::<f64>().is_ok_and(|v| v > 0.0),
                "{list}: not counted: {r:?}"
            );
            assert_eq!(r[4], "100.00", "{list}: {} ran less than enabled", r[2]);
        }
    }
}

/// `bperf list` shows this machine's software events, msr/tsc/, and marks the hardware
/// events the kernel refuses.
#[test]
#[ignore = "needs root (make test runs it)"]
fn list_shows_this_machine() {
    let out = run_ok(bperf().arg("list"));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("'{name}' not listed:\n{text}"))
            .to_string()
    };
    assert!(!line("task-clock").contains("not supported"));
    assert!(line("context-switches OR cs").contains("[Software event]"));
    if std::path::Path::new("/sys/bus/event_source/devices/msr/events/tsc").exists() {
        assert!(!line("msr/tsc/").contains("not supported"));
    }
    // No core PMU in sysfs means the kernel has none to count cycles with.
    if !std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        assert!(line("cpu-cycles OR cycles").ends_with("<not supported>"));
        assert!(line("L1-dcache-load-misses").ends_with("<not supported>"));
    }
    // bperf's own events, after perf's; `list bperf` lists them alone.
    assert!(line("bperf/runq-wait/").ends_with("[run-queue wait, ns]"));
    let own = run_ok(bperf().args(["list", "bperf"]));
    let own = String::from_utf8_lossy(&own.stdout);
    assert!(own.contains("bperf/preemptions/"), "{own}");
    assert!(!own.contains("task-clock"), "{own}");
    let filtered = run_ok(bperf().args(["list", "sched:sched_sw*"]));
    let text = String::from_utf8_lossy(&filtered.stdout);
    assert!(text.contains("sched:sched_switch"), "{text}");
    assert!(!text.contains("task-clock"), "{text}");
}

/// Bad event strings: one line naming the problem, usage exit status, no panic.
#[test]
fn bad_events_are_one_line() {
    for ev in [
        "cyclez",
        "cpu/event=1/",
        "msr/bogus=1/",
        "msr/event=zz/",
        "{cs",
        "cs:pppp",
    ] {
        let out = bperf()
            .args(["stat", "-e", ev, "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(129), "{ev}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{ev}: {err}");
        assert!(err.starts_with("bperf: "), "{ev}: {err}");
        assert!(!err.contains("panicked"), "{ev}: {err}");
    }
}

/// perf list's categories, JSON and options: `hw`, `sw`, `cache`, `pmu`, `tracepoint`
/// select kinds, `metric` and `metricgroup` the metrics -M takes, -j prints perf's keys,
/// --unit one PMU,
/// -o a file. No root needed.
#[test]
fn list_categories_json_and_options() {
    let list = |args: &[&str]| -> String {
        let o = Command::new(common::BPERF_EXE)
            .arg("list")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let kinds = |text: &str| -> Vec<String> {
        let mut k: Vec<String> = text
            .lines()
            .filter_map(|l| Some(l.split_once('[')?.1.split(']').next()?.to_string()))
            .collect();
        k.dedup();
        k
    };
    assert_eq!(kinds(&list(&["sw"])), ["Software event"]);
    assert_eq!(kinds(&list(&["hw"])), ["Hardware event"]);
    assert_eq!(kinds(&list(&["cache"])), ["Hardware cache event"]);
    assert_eq!(
        kinds(&list(&["sw", "hw"])),
        ["Hardware event", "Software event"]
    );
    let metrics = list(&["metric"]);
    assert!(
        metrics.starts_with("\nMetrics:\n\n  CPUs_utilized\n       [Average CPU utilization]\n"),
        "{metrics}"
    );
    assert!(!metrics.contains("Software event"), "{metrics}");
    assert!(list(&["metricgroup"]).contains("\nMetric Groups:\n\nDefault\n"));
    let json: serde_json::Value = serde_json::from_str(&list(&["-j", "metric"])).unwrap();
    assert!(json
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["MetricName"] == "insn_per_cycle"));
    let json: serde_json::Value = serde_json::from_str(&list(&["-j", "sw"])).unwrap();
    let cs = json
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["EventName"] == "context-switches")
        .unwrap();
    assert_eq!(
        (&cs["EventAlias"], &cs["EventType"]),
        (&"cs".into(), &"Software event".into())
    );
    let sw = list(&["sw"]);
    let names: Vec<&str> = sw.lines().filter(|l| l.contains('[')).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "perf lists a kind's events by name");
    assert!(list(&["--unit", "software"]).contains("task-clock"));
    assert!(!list(&["--unit", "software"]).contains("[Hardware event]"));
    let file = TempFile::new("list.txt");
    let o = Command::new(common::BPERF_EXE)
        .args(["list", "sw", "-o"])
        .arg(&file.0)
        .output()
        .unwrap();
    assert!(o.status.success() && o.stdout.is_empty());
    assert!(file.read().contains("page-faults OR faults"));
}
