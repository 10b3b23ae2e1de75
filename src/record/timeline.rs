//! bperf report --timeline: the slices on one track per CPU, as Chrome trace-event JSON
//! (ui.perfetto.dev, chrome://tracing) or as an SVG picture.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value as Json};

use super::analysis::slot_names;
use super::file::{Recording, Slice};

/// The process id every track is under in the trace.
const TRACE_PID: u32 = 1;

/// Times in the trace are µs from the first slice, with ns kept as decimals.
fn micros(ns: u64, t0: u64) -> f64 {
    ns.saturating_sub(t0) as f64 / 1e3
}

fn first_start(rec: &Recording) -> u64 {
    rec.slices.iter().map(|s| s.start).min().unwrap_or(0)
}

/// A slice's args in the trace: who ran, what each event counted, and its metrics.
fn slice_args(s: &Slice, events: &[String]) -> Json {
    let mut args = Map::new();
    args.insert("comm".into(), json!(s.comm));
    args.insert("pid".into(), json!(s.pid));
    args.insert("tid".into(), json!(s.tid));
    args.insert("cgroup_id".into(), json!(s.cgid));
    for (name, d) in events.iter().zip(&s.deltas) {
        args.insert(name.clone(), json!(d.counter));
    }
    let count = |name: &str| {
        events
            .iter()
            .position(|e| e.split(':').next() == Some(name))
            .and_then(|i| s.deltas.get(i))
            .map(|d| d.counter as f64)
    };
    if let (Some(ins), Some(cyc)) = (count("instructions"), count("cycles")) {
        if cyc > 0.0 {
            args.insert("IPC".into(), json!(ins / cyc));
        }
    }
    if let (Some(tc), true) = (count("task-clock"), s.length > 0) {
        args.insert("CPUs".into(), json!(tc / s.length as f64));
    }
    if s.cut {
        args.insert("cut".into(), json!(true));
    }
    Json::Object(args)
}

/// The trace-event JSON of the recording: metadata naming each CPU's track, then one
/// complete ("X") event per slice, named after its cgroup.
pub fn trace_json(rec: &Recording) -> String {
    let names = slot_names(rec);
    let t0 = first_start(rec);
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": TRACE_PID,
        "args": {"name": format!("bperf record {}", rec.header.command.join(" "))},
    })];
    for &cpu in &rec.header.cpus {
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": TRACE_PID, "tid": cpu,
                           "args": {"name": format!("CPU {cpu}")}}),
        );
        events.push(
            json!({"name": "thread_sort_index", "ph": "M", "pid": TRACE_PID,
                           "tid": cpu, "args": {"sort_index": cpu}}),
        );
    }
    for s in &rec.slices {
        events.push(json!({
            "name": names.get(s.slot as usize).cloned().unwrap_or_default(),
            "cat": "slice",
            "ph": "X",
            "ts": micros(s.start, t0),
            "dur": s.length as f64 / 1e3,
            "pid": TRACE_PID,
            "tid": s.cpu,
            "args": slice_args(s, &rec.header.events),
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"events": rec.header.events, "clock": rec.header.clock},
    })
    .to_string()
}

/// Picture layout.
const WIDTH: usize = 1200;
const LEFT: usize = 70;
const ROW: usize = 26;
const TOP: usize = 40;
const COLUMNS: usize = WIDTH - LEFT - 10;
/// The most characters of the title (the command) that fit the width.
const TITLE_CHARS: usize = 160;

/// A distinct colour for slot `i` (hues a golden angle apart).
fn colour(i: usize) -> String {
    format!("hsl({:.0},65%,55%)", (i as f64 * 137.508) % 360.0)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Which slot ran most of each pixel column of each CPU: [cpu row][column].
fn dominant(rec: &Recording, t0: u64, span: u64) -> Vec<Vec<Option<usize>>> {
    let row_of: HashMap<u32, usize> = rec
        .header
        .cpus
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, i))
        .collect();
    let mut time: Vec<Vec<HashMap<usize, u64>>> =
        vec![vec![HashMap::new(); COLUMNS]; rec.header.cpus.len()];
    let ns_per_col = (span as f64 / COLUMNS as f64).max(1.0);
    for s in &rec.slices {
        let Some(&row) = row_of.get(&s.cpu) else {
            continue;
        };
        let (from, to) = (
            s.start.saturating_sub(t0),
            s.start.saturating_sub(t0).saturating_add(s.length),
        );
        let first = ((from as f64 / ns_per_col) as usize).min(COLUMNS - 1);
        let last = ((to as f64 / ns_per_col) as usize).min(COLUMNS - 1);
        for (col, per_slot) in time[row].iter_mut().enumerate().take(last + 1).skip(first) {
            let (c0, c1) = (col as f64 * ns_per_col, (col + 1) as f64 * ns_per_col);
            let overlap = (to as f64).min(c1) - (from as f64).max(c0);
            if overlap > 0.0 {
                *per_slot.entry(s.slot as usize).or_default() += overlap as u64;
            }
        }
    }
    let least = (ns_per_col / 10.0) as u64;
    time.into_iter()
        .map(|cols| {
            cols.into_iter()
                .map(|c| {
                    c.into_iter()
                        .filter(|&(_, t)| t > least)
                        .max_by_key(|&(slot, t)| (t, std::cmp::Reverse(slot)))
                        .map(|(slot, _)| slot)
                })
                .collect()
        })
        .collect()
}

/// An SVG picture of the timeline: a row per CPU, each pixel column coloured by the
/// cgroup that ran most of it (blank: no recorded cgroup), a time axis and a legend.
pub fn svg(rec: &Recording) -> String {
    let names = slot_names(rec);
    let t0 = first_start(rec);
    let end = rec
        .slices
        .iter()
        .map(|s| s.start.saturating_add(s.length))
        .max()
        .unwrap_or(t0);
    let span = (end - t0).max(1);
    let rows = dominant(rec, t0, span);
    let legend_rows = names.len().div_ceil(4);
    let height = TOP + rows.len() * ROW + 40 + legend_rows * 20 + 10;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let mut title = format!("bperf record {}", rec.header.command.join(" "));
    if let Some((cut, _)) = title.char_indices().nth(TITLE_CHARS) {
        title.truncate(cut);
        title.push_str("...");
    }
    let _ = writeln!(out, r#"<text x="{LEFT}" y="20">{}</text>"#, escape(&title));
    for (r, cols) in rows.iter().enumerate() {
        let y = TOP + r * ROW;
        let _ = writeln!(
            out,
            r#"<text x="5" y="{}">CPU {}</text>"#,
            y + ROW / 2 + 4,
            rec.header.cpus[r]
        );
        let mut col = 0;
        while col < cols.len() {
            let Some(slot) = cols[col] else {
                col += 1;
                continue;
            };
            let run = cols[col..].iter().take_while(|&&c| c == Some(slot)).count();
            let _ = writeln!(
                out,
                r#"<rect x="{}" y="{y}" width="{run}" height="{}" fill="{}"><title>{}</title></rect>"#,
                LEFT + col,
                ROW - 4,
                colour(slot),
                escape(names.get(slot).map_or("", String::as_str))
            );
            col += run;
        }
    }
    let axis_y = TOP + rows.len() * ROW + 15;
    for tick in 0..=5 {
        let x = LEFT + tick * COLUMNS / 5;
        let ms = span as f64 * tick as f64 / 5.0 / 1e6;
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{axis_y}" text-anchor="middle">{ms:.1} ms</text>"#
        );
    }
    for (i, name) in names.iter().enumerate() {
        let x = LEFT + (i % 4) * 280;
        let y = axis_y + 20 + (i / 4) * 20;
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{y}">{}</text>"#,
            y - 10,
            colour(i),
            x + 16,
            escape(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reading::Reading;
    use crate::record::file::{End, Header, RecordedCgroup};

    fn recording() -> Recording {
        let slice = |slot: u32, cpu: u32, start: u64, length: u64| Slice {
            start,
            length,
            cgid: 7,
            cpu,
            slot,
            pid: 1,
            tid: 2,
            comm: "a<b".into(),
            cut: false,
            deltas: vec![Reading {
                counter: length,
                enabled: length,
                running: length,
            }],
        };
        let cg = |slot: usize, name: &str| RecordedCgroup {
            slot,
            id: slot as u64 + 10,
            name: name.into(),
            path: name.into(),
        };
        Recording {
            header: Header {
                events: vec!["task-clock".into()],
                supported: vec![true],
                cgroups: vec![cg(0, "web"), cg(1, "db&co")],
                cpus: vec![0, 1],
                clock: "sched_clock".into(),
                command: vec!["x".into()],
                started: 0.0,
            },
            slices: vec![
                slice(0, 0, 1_000_000, 3_000_000),
                slice(1, 1, 2_000_000, 1_000_000),
            ],
            end: End::default(),
        }
    }

    #[test]
    fn the_trace_has_a_track_per_cpu_and_a_slice_per_record() {
        let v: Json = serde_json::from_str(&trace_json(&recording())).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let slices: Vec<&Json> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["name"], "web");
        assert_eq!(slices[0]["ts"], 0.0);
        assert_eq!(slices[0]["dur"], 3000.0);
        assert_eq!(slices[1]["tid"], 1);
        assert_eq!(slices[1]["args"]["CPUs"], 1.0);
        let tracks = events.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(tracks, 2);
    }

    #[test]
    fn the_picture_colours_each_cpu_by_its_cgroups() {
        let svg = svg(&recording());
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("db&amp;co"));
        let runs: Vec<&str> = svg.lines().filter(|l| l.contains("<title>")).collect();
        assert_eq!(runs.len(), 2);
        // web runs the whole span on CPU 0; db the middle third on CPU 1.
        assert!(runs[0].contains(&format!("width=\"{COLUMNS}\"")));
        assert!(
            runs[1].contains(&format!("width=\"{}\"", COLUMNS / 3))
                || runs[1].contains(&format!("width=\"{}\"", COLUMNS / 3 + 1))
        );
    }
}
