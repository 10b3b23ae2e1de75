//! --metric-only: one line per cgroup and CPU, thread or group of CPUs, holding the
//! metrics of all its events, under a header of their units (perf 6.12's layout).

use std::io::{self, Write};
use std::time::Duration;

use super::json::{json_quote, json_where};
use super::line::Fields;
use super::table::{push_where, CGROUP_LEN, SPACES};
use super::{Format, Report};
use crate::aggr::Mode;
use crate::perf_version::PerfVersion;

/// perf's narrowest metric column.
const METRIC_ONLY_LEN: usize = 20;

/// One column of a metric-only line: the metric's unit and its value as printed.
struct Cell {
    unit: String,
    value: String,
}

/// What a line of metrics is of besides its cgroup: a CPU, a thread or a group of CPUs
/// (by name: an event that did not count has no CPUs in it, but the same line).
type Place<'a> = (Option<u32>, Option<&'a str>, Option<i32>);

fn place_of<'a>(f: &Fields<'a>) -> Place<'a> {
    match f.place {
        Some(super::Place::Thread { comm, tid }) => (f.cpu, Some(comm.as_str()), Some(*tid)),
        Some(super::Place::Group { name, .. }) => (f.cpu, Some(name.as_str()), None),
        None => (f.cpu, None, None),
    }
}

/// The lines' fields, grouped by where they were counted, in order of first appearance:
/// by cgroup too when the cgroups are rows of every event (with -G, each event's cgroup
/// is its own and the line is the first event's, as perf prints it).
fn rows<'f, 'a>(
    all: impl Iterator<Item = &'f Fields<'a>>,
    cgroup_rows: bool,
) -> Vec<Vec<&'f Fields<'a>>> {
    let mut rows: Vec<Vec<&Fields>> = Vec::new();
    // Row of each place, so that grouping costs time in proportion to the lines.
    let mut row_of = rustc_hash::FxHashMap::default();
    for f in all {
        let cgroup = f.cgroup.filter(|_| cgroup_rows);
        let row = *row_of.entry((cgroup, place_of(f))).or_insert_with(|| {
            rows.push(Vec::new());
            rows.len() - 1
        });
        rows[row].push(f);
    }
    rows
}

/// A unit as perf heads and names it: a share names its event
/// (`branch-misses of all branches`).
fn unit_of(f: &Fields, unit: &str) -> String {
    match unit.starts_with("of all") {
        true => format!("{} {unit}", f.event),
        false => unit.to_string(),
    }
}

/// The columns of one line: an empty one for an event that did not count, as perf
/// 6.12; perf 7.2 gives such an event its metrics, `nan`.
fn cells(row: &[&Fields]) -> Vec<Cell> {
    let mut out = Vec::new();
    for f in row {
        if f.value.is_none() && f.version == PerfVersion::V6_12 {
            out.push(Cell {
                unit: String::new(),
                value: String::new(),
            });
            continue;
        }
        // perf's own metric of the event has a column even when it cannot be worked out.
        if let Some(unit) =
            super::metric::fixed_unit(f.kind).filter(|_| f.version.builtin_metrics())
        {
            if !f.metrics.iter().any(|m| m.unit == unit) {
                out.push(Cell {
                    unit: unit_of(f, unit),
                    value: String::new(),
                });
            }
        }
        for m in f.metrics.iter().filter(|m| m.in_metric_only()) {
            let value = match m.value.is_nan() {
                true if f.version == PerfVersion::V7_2 => "nan".to_string(),
                true => String::new(),
                false => m.to_string(),
            };
            out.push(Cell {
                unit: unit_of(f, &m.unit),
                value,
            });
        }
    }
    out
}

/// The header's units, as perf 6.12 heads its columns: the -M metrics of the events of
/// the first line and, per CPU (-A), the metric perf gives each of them, whether or not
/// it counted. With -G, perf heads only the events that have no cgroup.
fn units(row: &[&Fields], per_cpu: bool, cgroup_rows: bool) -> Vec<String> {
    let headed = |f: &&&Fields| cgroup_rows || f.cgroup.is_none_or(str::is_empty);
    let mut out = Vec::new();
    for f in row.iter().filter(headed) {
        if per_cpu && f.version.builtin_metrics() {
            out.extend(super::metric::fixed_unit(f.kind).map(|u| unit_of(f, u)));
        }
        let named = f.metrics.iter().filter(|m| m.named);
        out.extend(named.map(|m| unit_of(f, &m.unit)));
    }
    out
}

impl<W: Write> Report<W> {
    /// Prints the lines' metrics, with the header of units first when `header`.
    pub(super) fn metric_only(
        &mut self,
        ts: Option<Duration>,
        header: bool,
        all: &[Fields],
    ) -> io::Result<()> {
        let valued = rows(all.iter().filter(|f| self.valued(f)), self.opts.cgroup_rows);
        let lines: Vec<(&Fields, Vec<Cell>)> = valued.iter().map(|r| (r[0], cells(r))).collect();
        if header {
            let units = rows(all.iter(), self.opts.cgroup_rows)
                .first()
                .map(|r| units(r, self.opts.per_cpu, self.opts.cgroup_rows))
                .unwrap_or_default();
            let cgroups = all.iter().any(|f| f.cgroup.is_some());
            self.metric_only_header(ts.is_some(), cgroups, &units)?;
        }
        for (first, cells) in &lines {
            let line = match &self.opts.format {
                Format::Table => table_row(ts, first, cells),
                Format::Csv(sep) => csv_row(ts, first, cells, sep),
                Format::Json => json_row(ts, first, cells),
            };
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()
    }

    fn metric_only_header(
        &mut self,
        interval: bool,
        cgroups: bool,
        units: &[String],
    ) -> io::Result<()> {
        let mut s = String::new();
        match &self.opts.format {
            Format::Json => return Ok(()),
            Format::Csv(sep) => {
                if interval {
                    s.push_str("time");
                    s.push_str(sep);
                }
                for col in self.csv_place_header() {
                    s.push_str(col);
                    s.push_str(sep);
                }
                for u in units {
                    s.push_str(u);
                    s.push_str(sep);
                }
            }
            Format::Table => {
                if interval {
                    s.push_str(&format!("#{:>15}{}", "time", self.interval_place_header()));
                }
                s.push(' ');
                if !interval {
                    s.push_str(&SPACES[..self.place_width() + cgroups as usize * (CGROUP_LEN + 1)]);
                }
                for u in units {
                    s.push_str(&format!("{u:>METRIC_ONLY_LEN$} "));
                }
            }
        }
        writeln!(self.out, "{s}")
    }

    /// perf's width of what a line is of besides its event (0 without -A, --per-*).
    fn place_width(&self) -> usize {
        match (self.opts.per_cpu, self.opts.aggr, self.opts.per_thread) {
            (true, _, _) => 6,
            (_, Some(mode), _) => mode.width(),
            (_, _, true) => 16,
            _ => 0,
        }
    }

    /// perf's CSV header columns for what a line is of besides its event.
    fn csv_place_header(&self) -> Vec<&'static str> {
        match (self.opts.per_cpu, self.opts.aggr, self.opts.per_thread) {
            (true, _, _) => vec!["cpu"],
            (_, Some(Mode::Node), _) => vec!["node"],
            (_, Some(mode), _) => vec![mode.json_key(), "cpus"],
            (_, _, true) => vec!["comm-pid"],
            _ => Vec::new(),
        }
    }
}

fn table_row(ts: Option<Duration>, f: &Fields, cells: &[Cell]) -> String {
    let mut s = String::new();
    push_where(&mut s, ts, f);
    if let Some(cg) = f.cgroup {
        s.push_str(&format!(" {cg:<CGROUP_LEN$}"));
    }
    for c in cells {
        match f.version {
            // perf 6.12: a column one wider than its unit, and a space.
            PerfVersion::V6_12 => {
                let width = METRIC_ONLY_LEN.max(c.unit.len() + 1);
                s.push_str(&format!("{:>width$} ", c.value));
            }
            // perf 7.2: as wide as its unit, nothing between.
            PerfVersion::V7_2 => {
                let width = METRIC_ONLY_LEN.max(c.unit.len());
                s.push_str(&format!("{:>width$}", c.value));
            }
        }
    }
    s
}

fn csv_row(ts: Option<Duration>, f: &Fields, cells: &[Cell], sep: &str) -> String {
    let mut s = String::new();
    for col in super::csv::csv_where(ts, f) {
        s.push_str(&col);
        s.push_str(sep);
    }
    if let Some(cg) = f.cgroup {
        // As perf: the cgroup after a separator. perf 6.12 then glues the first value
        // to it; a separator keeps them apart.
        s.push_str(sep);
        s.push_str(cg);
        if cells.first().is_some_and(|c| !c.value.is_empty()) {
            s.push_str(sep);
        }
    }
    for c in cells {
        let value = c.value.trim().trim_end_matches('%');
        s.push_str(if value == "nan" { "" } else { value });
        s.push_str(sep);
    }
    s
}

fn json_row(ts: Option<Duration>, f: &Fields, cells: &[Cell]) -> String {
    let mut parts = json_where(ts, f);
    if let Some(cg) = f.cgroup {
        parts.push(format!("\"cgroup\" : {}", json_quote(cg)));
    }
    let metrics: Vec<String> = cells
        .iter()
        .map(|c| (c.unit.as_str(), c.value.trim().trim_end_matches('%')))
        .map(|(u, v)| (u, if v == "nan" { "none" } else { v }))
        .filter(|(u, v)| !u.is_empty() && !v.is_empty())
        .map(|(u, v)| format!("{} : \"{v}\"", json_quote(u)))
        .collect();
    // `none` for a row without metrics: perf 6.12's always, perf 7.2's only where the
    // row has nothing else either (no time, CPU, group or cgroup).
    let bare = parts.is_empty() || f.version == crate::perf_version::PerfVersion::V6_12;
    match metrics.is_empty() {
        true if bare => parts.push("\"metric-value\" : \"none\"".to_string()),
        true => {}
        false => parts.extend(metrics),
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::*;

    #[test]
    fn metric_only_lines() {
        let (ev, l, footer) = (events(), lines(None), half_second());
        let mut o = opts(Format::Table);
        o.metric_only = true;
        o.metrics = named("CPUs_utilized", &[0]);
        let out = render(o.clone(), |r| r.summary(&ev, &l, &footer).unwrap());
        let want: Vec<&str> = out.lines().skip(3).take(2).collect();
        // The /sec and CPUs utilized metrics perf adds are left out; cycles did not
        // count, which leaves an empty column.
        assert_eq!(
            want,
            [
                "  CPUs  CPUs_utilized ",
                "                 2.0                      ",
            ]
        );
        o.format = Format::Csv(";".into());
        let out = render(o.clone(), |r| r.summary(&ev, &l, &footer).unwrap());
        assert_eq!(out, "CPUs  CPUs_utilized;\n2.0;;\n");
        o.format = Format::Json;
        let out = render(o, |r| r.summary(&ev, &l, &footer).unwrap());
        assert_eq!(out, "{\"CPUs  CPUs_utilized\" : \"2.0\"}\n");
    }
}
