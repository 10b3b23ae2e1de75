//! `bperf report`: prints a recording's totals as bperf stat prints counts, its
//! breakdowns and distributions as tables (or -x, -j), or writes its timeline.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Map, Value as Json};

use super::analysis::{self, Breakdown, BreakdownRow, Distributions, Key, SliceTotals};
use super::bperf_data::{End, Header};
use super::perfetto::PerfettoTrace;
use super::runq::Culprits;
use super::timeline::{Picture, Span, Trace};
use crate::cli::ReportArgs;
use crate::data_file::{WholeFile, STDOUT};
use crate::event::{self, Event};
use crate::output::people::{self, Column};
use crate::output::{Footer, Format, Line, Options, Report, Value};
use crate::sys::{self, sysfs::Sysfs};

/// Runs `bperf report`; returns the exit code. Each mode reads the file as a stream.
pub fn report(a: &ReportArgs) -> Result<i32> {
    super::check_report_args(a)?;
    let keys = match &a.sort {
        Some(s) => Some(analysis::parse_keys(s).map_err(|e| crate::UsageError(e.to_string()))?),
        None => None,
    };
    if let Some(path) = &a.timeline {
        return write_timeline(&a.input, path);
    }
    let out = &mut io::stdout().lock();
    let format = Format::of(a.field_separator.as_deref(), a.json)?;
    let mut input = super::open(&a.input)?;
    let start = input.header().clone();
    // The header once every slice is read names the cgroups that came meanwhile too.
    match keys {
        Some(keys) => {
            let mut groups = Breakdown::new(&start, &keys);
            let end = input.each_slice(|s| groups.add(s))?;
            input.say_dropped();
            say_lost(&end);
            let header = input.header();
            let table = breakdown_table(header, &keys, groups.groups(header));
            print_table(out, &format, &table)?;
        }
        None if a.hist => {
            let mut dists = Distributions::new(analysis::measures(&start.events, &start.supported));
            let end = input.each_slice(|s| dists.add(s))?;
            input.say_dropped();
            dists.close();
            say_lost(&end);
            print_table(out, &format, &hist_table(input.header(), &dists))?;
        }
        None => {
            let mut totals = SliceTotals::new(&start);
            let mut culprits = match a.culprits {
                Some(_) => Some(Culprits::new(&start).ok_or_else(no_culprits)?),
                None => None,
            };
            let end = input.each_slice(|s| {
                totals.add(s);
                culprits.iter_mut().for_each(|c| c.add(s));
            })?;
            input.say_dropped();
            say_lost(&end);
            let header = input.header();
            let totals = match end.lost_total() {
                0 => totals.totals(header),
                _ => analysis::counter_totals(&end),
            };
            print_totals(out, header, &end, &totals, &format)?;
            if let (Some(c), Some(top)) = (culprits, a.culprits) {
                print_culprits(out, header, c, top, &format)?;
            }
        }
    }
    Ok(0)
}

fn no_culprits() -> anyhow::Error {
    crate::UsageError(
        "--culprits: the recording has neither bperf/runq-wait/ nor bperf/preemptions/ (bperf record -e bperf/runq-wait/,bperf/preemptions/ ...)".into(),
    )
    .into()
}

/// The rows the report prints: each recorded cgroup (slot, name), or the recorded tasks'
/// slot 0 without a cgroup.
fn rows_of(h: &Header) -> Vec<(usize, Option<String>)> {
    match h.tasks {
        true => vec![(0, None)],
        false => h
            .cgroups
            .iter()
            .map(|c| (c.slot, Some(c.name.clone())))
            .collect(),
    }
}

/// Each recorded cgroup's `top` culprits after the totals, as stat's --culprits.
fn print_culprits(
    out: &mut dyn Write,
    h: &Header,
    culprits: Culprits,
    top: usize,
    format: &Format,
) -> Result<()> {
    let rows: Vec<(usize, String)> = rows_of(h)
        .into_iter()
        .map(|(slot, cgroup)| (slot, cgroup.unwrap_or_else(|| "-".into())))
        .collect();
    let rows = crate::session::runq::top_culprits(&rows, &culprits.waits(), top);
    for line in crate::output::runq::lines(&rows, format, None) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn say_lost(end: &End) {
    let lost = end.lost_total();
    if lost > 0 {
        eprintln!(
            "bperf report: {lost} slices were lost while recording: breakdowns, distributions and the timeline miss them; the totals are the counters' own"
        );
    }
}

/// The forms of --timeline, by the output file's extension.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TimelineForm {
    /// Chrome trace-event JSON (any other name).
    Json,
    /// .svg
    Picture,
    /// .perfetto-trace or .pftrace: Perfetto's protobuf trace.
    Perfetto,
}

fn timeline_form(path: &Path) -> TimelineForm {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext.to_ascii_lowercase().as_str() {
        "svg" => TimelineForm::Picture,
        "perfetto-trace" | "pftrace" => TimelineForm::Perfetto,
        _ => TimelineForm::Json,
    }
}

/// Writes the timeline of `input` to `path` (`-`: standard output), whole or not at all
/// (data_file::WholeFile): a first pass finds where the slices lie in time and which
/// cgroups they are of (and checks the whole file), a second writes them.
fn write_timeline(input: &Path, path: &Path) -> Result<i32> {
    let written = match path.as_os_str() == STDOUT {
        true => Path::new("/dev/stdout"),
        false => path,
    };
    if same_file(input, written) {
        return Err(crate::UsageError(format!(
            "--timeline {}: that is the recording read (-i {}): give the timeline another file",
            path.display(),
            input.display()
        ))
        .into());
    }
    let (header, span, seen, slices) = first_pass(input)?;
    let mut second = super::open_again(input)?;
    let cannot_write = || format!("cannot write {}", path.display());
    let whole = WholeFile::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, whole.file());
    let mut failed = None;
    match timeline_form(path) {
        TimelineForm::Picture => {
            let mut picture = Picture::new(&header, span);
            second.each_slice(|s| picture.add(s))?;
            picture
                .write(&mut out, &header)
                .with_context(cannot_write)?;
        }
        TimelineForm::Json => {
            let mut trace =
                Trace::begin(&mut out, &header, span.t0()).with_context(cannot_write)?;
            second.each_slice(|s| {
                if failed.is_none() {
                    failed = trace.add(s).err();
                }
            })?;
            trace.finish().with_context(cannot_write)?;
        }
        TimelineForm::Perfetto => {
            let mut trace =
                PerfettoTrace::begin(&mut out, &header, span, &seen).with_context(cannot_write)?;
            second.each_slice(|s| {
                if failed.is_none() {
                    failed = trace.add(s).err();
                }
            })?;
            trace.finish().with_context(cannot_write)?;
        }
    }
    if let Some(e) = failed {
        return Err(e).with_context(cannot_write);
    }
    out.flush().with_context(cannot_write)?;
    drop(out);
    whole.finish()?;
    let to = match path.as_os_str() == STDOUT {
        true => "standard output".into(),
        false => path.display().to_string(),
    };
    eprintln!(
        "[ bperf report: wrote the timeline of {slices} slices on {} CPUs to {to} ]",
        header.cpus.len(),
    );
    Ok(0)
}

/// The timeline's first pass over `input`: its header, the span of its slices, which
/// cgroup slots have slices (every cgroup of the recording, those that came while
/// recording too), and how many slices there are. Says what was dropped or lost.
fn first_pass(input: &Path) -> Result<(Header, Span, Vec<bool>, u64)> {
    let mut first = super::open_again(input)?;
    let mut span = Span::default();
    let mut seen = Vec::new();
    let mut slices = 0u64;
    let end = first.each_slice(|s| {
        span.add(s);
        let slot = s.slot as usize;
        if seen.len() <= slot {
            seen.resize(slot + 1, false);
        }
        seen[slot] = true;
        slices += 1;
    })?;
    first.say_dropped();
    say_lost(&end);
    let header = first.header().clone();
    seen.resize(analysis::slot_names(&header).len(), false);
    Ok((header, span, seen, slices))
}

/// Whether `a` and `b` are one file, under one name or two (links).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// The recorded events as the report prints them (their units and metrics).
fn events_of(h: &Header) -> Vec<Event> {
    let sysfs = Sysfs::system();
    let names = h.events.iter();
    names.map(|name| event::recorded(name, &sysfs)).collect()
}

/// Per-cgroup totals [slot][event] as bperf stat prints counts; the recorded tasks'
/// without a cgroup column.
fn print_totals(
    out: &mut dyn Write,
    h: &Header,
    end: &End,
    totals: &[Vec<crate::reading::Reading>],
    format: &Format,
) -> Result<()> {
    let events = events_of(h);
    let mut lines = Vec::new();
    for (slot, cgroup) in rows_of(h) {
        for (i, _) in events.iter().enumerate() {
            let reading = totals
                .get(slot)
                .and_then(|t| t.get(i))
                .copied()
                .unwrap_or_default();
            let supported = h.supported.get(i).copied().unwrap_or(true);
            lines.push(Line {
                event: i,
                cgroup: cgroup.clone(),
                container: None,
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
        format: format.clone(),
        thousands: sys::locale_thousands_separator(),
        target: Some(h.target.clone()),
        runs: 1,
        // bperf report's summary keeps perf 6.12's shapes.
        version: crate::perf_version::PerfVersion::V6_12,
        ..Options::default()
    };
    let footer = Footer {
        elapsed: Duration::from_nanos(end.duration_ns),
        ..Footer::default()
    };
    let mut report = Report::new(options, out);
    report.summary(&events, &lines, &footer)?;
    Ok(())
}

/// Rows of text under named columns.
struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

fn breakdown_table(h: &Header, keys: &[Key], groups: Vec<BreakdownRow>) -> Table {
    let rank = analysis::ranking_event(h);
    let all = groups
        .iter()
        .map(|g| g.rank(rank))
        .fold(0u64, u64::saturating_add);
    let key_column = |k: &Key| match k.is_number() {
        true => Column::number(k.name()),
        false => Column::text(k.name()),
    };
    let mut columns: Vec<Column> = keys.iter().map(key_column).collect();
    columns.extend(["slices", "time-ms", "share"].map(Column::number));
    columns.extend(h.events.iter().map(|e| Column::number(e)));
    let rows = groups
        .iter()
        .map(|g| {
            let mut row = g.key.clone();
            row.push(g.slices.to_string());
            row.push(format!("{:.3}", g.time as f64 / 1e6));
            let share = match all {
                0 => 0.0,
                _ => 100.0 * g.rank(rank) as f64 / all as f64,
            };
            row.push(format!("{share:.2}%"));
            row.extend(g.counts.iter().map(u64::to_string));
            row
        })
        .collect();
    Table { columns, rows }
}

fn hist_table(h: &Header, dists: &Distributions) -> Table {
    let mut columns = vec![Column::text("cgroup"), Column::text("measure")];
    columns.extend(["slices", "mean", "p50", "p90", "p99", "max"].map(Column::number));
    let mut rows = Vec::new();
    for (m, per_cgroup) in dists.spreads(h) {
        for (cgroup, s) in per_cgroup {
            let f = |v: f64| format!("{v:.3}");
            rows.push(vec![
                cgroup,
                m.label(&h.events),
                s.n.to_string(),
                f(s.mean),
                f(s.p50),
                f(s.p90),
                f(s.p99),
                f(s.max),
            ]);
        }
    }
    Table { columns, rows }
}

/// Prints `t`: its text (names that tasks and cgroups give themselves) with control
/// characters escaped in the table and CSV, and as strings in JSON, where its numbers
/// are numbers.
fn print_table(out: &mut dyn Write, format: &Format, t: &Table) -> io::Result<()> {
    let printable = || {
        t.rows
            .iter()
            .map(|r| r.iter().map(|v| people::escape_controls(v)).collect())
            .collect::<Vec<Vec<String>>>()
    };
    match format {
        Format::Table => write!(out, "{}", people::draw(&t.columns, &printable()))?,
        Format::Csv(sep) => {
            let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
            writeln!(out, "{}", names.join(sep))?;
            for r in printable() {
                writeln!(out, "{}", r.join(sep))?;
            }
        }
        Format::Json => {
            for r in &t.rows {
                let mut obj = Map::new();
                for (c, v) in t.columns.iter().zip(r) {
                    obj.insert(c.name.clone(), json_value(c, v));
                }
                writeln!(out, "{}", Json::Object(obj))?;
            }
        }
    }
    out.flush()
}

/// A cell as JSON: a number column's figures as integers or numbers (a share without
/// its %), anything else as the string it is.
fn json_value(c: &Column, v: &str) -> Json {
    if c.numeric {
        if let Ok(n) = v.parse::<u64>() {
            return Json::from(n);
        }
        let finite = v.trim_end_matches('%').parse::<f64>().ok();
        if let Some(n) = finite.and_then(serde_json::Number::from_f64) {
            return Json::Number(n);
        }
    }
    Json::String(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_print_in_three_forms() {
        let t = Table {
            columns: vec![Column::text("comm"), Column::number("slices")],
            rows: vec![
                vec!["spin".into(), "12".into()],
                vec!["x".into(), "3".into()],
            ],
        };
        let mut out = Vec::new();
        print_table(&mut out, &Format::Table, &t).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            " comm  slices\n──────────────\n spin      12\n x          3\n"
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
            .starts_with("{\"comm\":\"spin\",\"slices\":12}"));
    }

    /// What a task names itself is text, whatever it looks like: never a number, a null,
    /// a second row or a command to the terminal. Counts are integers, the rest numbers.
    #[test]
    fn names_stay_text_and_on_their_line() {
        let t = Table {
            columns: vec![
                Column::text("comm"),
                Column::number("pid"),
                Column::number("slices"),
                Column::number("time-ms"),
                Column::number("share"),
            ],
            rows: vec![
                vec![
                    "nan".into(),
                    "7".into(),
                    "12".into(),
                    "1.500".into(),
                    "49.33%".into(),
                ],
                vec![
                    "0042".into(),
                    "8".into(),
                    "1".into(),
                    "0.000".into(),
                    "0.00%".into(),
                ],
                vec![
                    "a\nb\u{1b}[2J".into(),
                    "9".into(),
                    "1".into(),
                    "0.000".into(),
                    "0.00%".into(),
                ],
            ],
        };
        let mut out = Vec::new();
        print_table(&mut out, &Format::Json, &t).unwrap();
        let lines: Vec<Json> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            serde_json::json!({"comm": "nan", "pid": 7, "slices": 12, "time-ms": 1.5, "share": 49.33})
        );
        assert_eq!(lines[1]["comm"], "0042");
        assert_eq!(lines[2]["comm"], "a\nb\u{1b}[2J");
        for format in [Format::Table, Format::Csv(",".into())] {
            let mut out = Vec::new();
            print_table(&mut out, &format, &t).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(!text.contains('\u{1b}'), "{text}");
            let row = text.lines().find(|l| l.contains("a\\nb")).expect(&text);
            assert!(row.contains("a\\nb\\x1b[2J") && row.contains('9'), "{text}");
        }
    }
}
