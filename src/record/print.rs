//! `bperf report`: prints a recording's totals as bperf stat prints counts, its
//! breakdowns and distributions as tables (or -x, -j), or writes its timeline.

use std::io::{self, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Map, Value as Json};

use super::analysis::{self, Group, Key};
use super::file::Recording;
use super::timeline;
use crate::cli::ReportArgs;
use crate::event::{self, Event};
use crate::report::{Footer, Format, Line, Options, Report, Value};
use crate::sys::{self as kernel, sysfs::Sysfs};

/// Runs `bperf report`; returns the exit code.
pub fn report(a: &ReportArgs) -> Result<i32> {
    super::check_report_args(a)?;
    let rec = super::load(&a.input)?;
    let lost = rec.end.lost_total();
    if lost > 0 {
        eprintln!(
            "bperf report: {lost} slices were lost while recording: breakdowns, distributions and the timeline miss them; the totals are the counters' own"
        );
    }
    let out = &mut io::stdout().lock();
    if let Some(path) = &a.timeline {
        return write_timeline(&rec, path);
    }
    let format = format_of(a);
    let keys = match &a.sort {
        Some(s) => Some(analysis::parse_keys(s).map_err(|e| crate::UsageError(e.to_string()))?),
        None => None,
    };
    match keys {
        Some(keys) => print_table(out, &format, &breakdown_table(&rec, &keys))?,
        None if a.hist => print_table(out, &format, &hist_table(&rec))?,
        None => print_totals(out, &rec, format)?,
    }
    Ok(0)
}

fn format_of(a: &ReportArgs) -> Format {
    match (&a.field_separator, a.json) {
        (_, true) => Format::Json,
        (Some(sep), _) => Format::Csv(sep.clone()),
        _ => Format::Table,
    }
}

fn write_timeline(rec: &Recording, path: &std::path::Path) -> Result<i32> {
    let svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    let text = match svg {
        true => timeline::svg(rec),
        false => timeline::trace_json(rec),
    };
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!(
        "[ bperf report: wrote the timeline of {} slices on {} CPUs to {} ]",
        rec.slices.len(),
        rec.header.cpus.len(),
        path.display()
    );
    Ok(0)
}

/// The recorded events as the report prints them (their units and metrics).
fn events_of(rec: &Recording) -> Vec<Event> {
    let sysfs = Sysfs::system();
    let names = rec.header.events.iter();
    names.map(|name| event::recorded(name, &sysfs)).collect()
}

/// Per-cgroup totals as bperf stat prints them: summed from the slices, or the
/// counters' own when slices were lost.
fn print_totals(out: &mut dyn Write, rec: &Recording, format: Format) -> Result<()> {
    let totals = match rec.end.lost_total() {
        0 => analysis::slice_totals(rec),
        _ => analysis::counter_totals(rec),
    };
    let events = events_of(rec);
    let mut lines = Vec::new();
    for cg in &rec.header.cgroups {
        for (i, _) in events.iter().enumerate() {
            let reading = totals
                .get(cg.slot)
                .and_then(|t| t.get(i))
                .copied()
                .unwrap_or_default();
            let supported = rec.header.supported.get(i).copied().unwrap_or(true);
            lines.push(Line {
                event: i,
                cgroup: Some(cg.name.clone()),
                cpu: None,
                place: None,
                value: match supported {
                    true => Value::Counted(reading),
                    false => Value::NotSupported,
                },
            });
        }
    }
    let options = Options {
        format,
        thousands: kernel::locale_thousands_separator(),
        target: Some("'system wide'".into()),
        runs: 1,
        ..Options::default()
    };
    let footer = Footer {
        elapsed: Duration::from_nanos(rec.end.duration_ns),
        ..Footer::default()
    };
    let mut report = Report::new(options, out);
    report.summary(&events, &lines, &footer)?;
    Ok(())
}

/// Rows of text under named columns.
struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Columns printed right-aligned (numbers).
    numeric: Vec<bool>,
}

fn breakdown_table(rec: &Recording, keys: &[Key]) -> Table {
    let groups = analysis::breakdown(rec, keys);
    let all: u64 = groups.iter().map(first_count).sum();
    let mut columns: Vec<String> = keys.iter().map(|k| k.name().to_string()).collect();
    columns.extend(["slices".into(), "time-ms".into(), "share".into()]);
    columns.extend(rec.header.events.iter().cloned());
    let mut numeric = vec![false; keys.len()];
    numeric.extend(vec![true; 3 + rec.header.events.len()]);
    let rows = groups
        .iter()
        .map(|g| {
            let mut row = g.key.clone();
            row.push(g.slices.to_string());
            row.push(format!("{:.3}", g.time as f64 / 1e6));
            let share = match all {
                0 => 0.0,
                _ => 100.0 * first_count(g) as f64 / all as f64,
            };
            row.push(format!("{share:.2}%"));
            row.extend(g.counts.iter().map(u64::to_string));
            row
        })
        .collect();
    Table {
        columns,
        rows,
        numeric,
    }
}

/// What a group is ranked by: its first event's count.
fn first_count(g: &Group) -> u64 {
    g.counts.first().copied().unwrap_or(g.time)
}

fn hist_table(rec: &Recording) -> Table {
    let columns: Vec<String> = [
        "cgroup", "measure", "slices", "mean", "p50", "p90", "p99", "max",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut rows = Vec::new();
    for m in analysis::measures(&rec.header.events) {
        for (cgroup, s) in analysis::distributions(rec, &m) {
            let f = |v: f64| format!("{v:.3}");
            rows.push(vec![
                cgroup,
                m.label(&rec.header.events),
                s.n.to_string(),
                f(s.mean),
                f(s.p50),
                f(s.p90),
                f(s.p99),
                f(s.max),
            ]);
        }
    }
    Table {
        columns,
        rows,
        numeric: vec![false, false, true, true, true, true, true, true],
    }
}

fn print_table(out: &mut dyn Write, format: &Format, t: &Table) -> io::Result<()> {
    match format {
        Format::Table => {
            let width: Vec<usize> = (0..t.columns.len())
                .map(|c| {
                    t.rows
                        .iter()
                        .map(|r| r[c].len())
                        .chain([t.columns[c].len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |cells: &[String]| {
                let parts: Vec<String> = cells
                    .iter()
                    .enumerate()
                    .map(|(c, v)| match t.numeric[c] {
                        true => format!("{v:>w$}", w = width[c]),
                        false => format!("{v:<w$}", w = width[c]),
                    })
                    .collect();
                parts.join("  ").trim_end().to_string()
            };
            writeln!(out, "# {}", line(&t.columns))?;
            for r in &t.rows {
                writeln!(out, "  {}", line(r))?;
            }
        }
        Format::Csv(sep) => {
            writeln!(out, "{}", t.columns.join(sep))?;
            for r in &t.rows {
                writeln!(out, "{}", r.join(sep))?;
            }
        }
        Format::Json => {
            for r in &t.rows {
                let mut obj = Map::new();
                for (c, v) in t.columns.iter().zip(r) {
                    let value = match v.trim_end_matches('%').parse::<f64>() {
                        Ok(n) if !v.is_empty() => serde_json::json!(n),
                        _ => Json::String(v.clone()),
                    };
                    obj.insert(c.clone(), value);
                }
                writeln!(out, "{}", Json::Object(obj))?;
            }
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_print_in_three_forms() {
        let t = Table {
            columns: vec!["comm".into(), "slices".into()],
            rows: vec![
                vec!["spin".into(), "12".into()],
                vec!["x".into(), "3".into()],
            ],
            numeric: vec![false, true],
        };
        let mut out = Vec::new();
        print_table(&mut out, &Format::Table, &t).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# comm  slices\n  spin      12\n  x          3\n"
        );
        let mut out = Vec::new();
        print_table(&mut out, &Format::Csv(",".into()), &t).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "comm,slices\nspin,12\nx,3\n"
        );
        let mut out = Vec::new();
        print_table(&mut out, &Format::Json, &t).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .starts_with("{\"comm\":\"spin\",\"slices\":12.0}"));
    }
}
