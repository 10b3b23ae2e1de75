//! bperf report --timeline: the slices on one track per CPU, as Chrome trace-event JSON
//! (ui.perfetto.dev, chrome://tracing) or as an SVG picture. Both are written from the
//! slices as they are read, in a second pass over the file once the first has found
//! where they lie in time: memory does not grow with the number of slices.

use std::io::{self, Write};

use rustc_hash::FxHashMap;
use serde_json::{json, Map, Value as Json};

use super::analysis::track_names;
use super::bperf_data::{Header, Slice};

/// The process id every track is under in the trace.
const TRACE_PID: u32 = 1;

/// Times in the trace are µs from the first slice, with ns kept as decimals.
fn micros(ns: u64, t0: u64) -> f64 {
    ns.saturating_sub(t0) as f64 / 1e3
}

/// Where the slices lie in time: the first start and the last end.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    first: Option<u64>,
    last: u64,
}

impl Span {
    pub fn add(&mut self, s: &Slice) {
        self.first = Some(self.first.map_or(s.start, |f| f.min(s.start)));
        self.last = self.last.max(s.start.saturating_add(s.length));
    }

    /// The first slice's start (0 without slices).
    pub fn t0(&self) -> u64 {
        self.first.unwrap_or(0)
    }

    /// From the first start to the last end, at least 1 ns.
    pub fn length(&self) -> u64 {
        self.last.saturating_sub(self.t0()).max(1)
    }
}

/// A slice's args in the trace: who ran, what each event counted, and its metrics.
fn slice_args(s: &Slice, events: &[String]) -> Json {
    let mut args = Map::new();
    args.insert("comm".into(), json!(s.comm_str()));
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

/// The trace-event JSON of a recording, written as its slices come: metadata naming
/// each CPU's track, then one complete ("X") event per slice, named after its cgroup.
pub(crate) struct Trace<W: Write> {
    out: W,
    names: Vec<String>,
    events: Vec<String>,
    t0: u64,
}

impl<W: Write> Trace<W> {
    /// Writes what comes before the slices; `t0`: the first slice's start.
    pub fn begin(mut out: W, h: &Header, t0: u64) -> io::Result<Trace<W>> {
        // The keys in the order serde_json writes an object's (sorted).
        let other = json!({"events": h.events, "clock": h.clock});
        write!(
            out,
            r#"{{"displayTimeUnit":"ns","otherData":{other},"traceEvents":["#
        )?;
        let process = json!({
            "name": "process_name", "ph": "M", "pid": TRACE_PID,
            "args": {"name": format!("bperf record {}", h.command.join(" "))},
        });
        write!(out, "{process}")?;
        for &cpu in &h.cpus {
            let name = json!({"name": "thread_name", "ph": "M", "pid": TRACE_PID, "tid": cpu,
                              "args": {"name": format!("CPU {cpu}")}});
            let index = json!({"name": "thread_sort_index", "ph": "M", "pid": TRACE_PID,
                               "tid": cpu, "args": {"sort_index": cpu}});
            write!(out, ",{name},{index}")?;
        }
        Ok(Trace {
            out,
            names: track_names(h),
            events: h.events.clone(),
            t0,
        })
    }

    pub fn add(&mut self, s: &Slice) -> io::Result<()> {
        let event = json!({
            "name": self.names.get(s.slot as usize).cloned().unwrap_or_default(),
            "cat": "slice",
            "ph": "X",
            "ts": micros(s.start, self.t0),
            "dur": s.length as f64 / 1e3,
            "pid": TRACE_PID,
            "tid": s.cpu,
            "args": slice_args(s, &self.events),
        });
        write!(self.out, ",{event}")
    }

    /// Closes the trace; the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"]}")?;
        Ok(self.out)
    }
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

/// `s` as XML text: markup escaped, control characters (which XML does not allow) as
/// `\x1b`-style text.
fn escape(s: &str) -> String {
    crate::output::people::escape_controls(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG picture of a recording, drawn from its slices as they come: a row per CPU,
/// each pixel column coloured by the cgroup that ran most of it. It keeps the time each
/// cgroup ran in each column of each row: no more than rows x columns x cgroups, and
/// never more than one entry per slice.
pub(crate) struct Picture {
    row_of: FxHashMap<u32, u32>,
    span: Span,
    ns_per_col: f64,
    /// Time in ns by (row, column, slot).
    time: FxHashMap<(u32, u32, u32), u64>,
}

impl Picture {
    /// A blank picture of `h`'s CPUs over `span`, where its slices lie.
    pub fn new(h: &Header, span: Span) -> Picture {
        let row_of = h
            .cpus
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        Picture {
            row_of,
            span,
            ns_per_col: (span.length() as f64 / COLUMNS as f64).max(1.0),
            time: FxHashMap::default(),
        }
    }

    pub fn add(&mut self, s: &Slice) {
        let Some(&row) = self.row_of.get(&s.cpu) else {
            return;
        };
        let from = s.start.saturating_sub(self.span.t0());
        let to = from.saturating_add(s.length);
        let first = ((from as f64 / self.ns_per_col) as usize).min(COLUMNS - 1);
        let last = ((to as f64 / self.ns_per_col) as usize).min(COLUMNS - 1);
        for col in first..=last {
            let (c0, c1) = (
                col as f64 * self.ns_per_col,
                (col + 1) as f64 * self.ns_per_col,
            );
            let overlap = (to as f64).min(c1) - (from as f64).max(c0);
            if overlap > 0.0 {
                *self.time.entry((row, col as u32, s.slot)).or_default() += overlap as u64;
            }
        }
    }

    /// Which slot ran most of each (row, column): ties to the lower slot, nothing when
    /// no slot ran a tenth of the column.
    fn dominant(&self) -> FxHashMap<(u32, u32), usize> {
        let least = (self.ns_per_col / 10.0) as u64;
        let mut best: FxHashMap<(u32, u32), (u64, u32)> = FxHashMap::default();
        for (&(row, col, slot), &t) in &self.time {
            if t <= least {
                continue;
            }
            let b = best.entry((row, col)).or_insert((t, slot));
            if (t, std::cmp::Reverse(slot)) > (b.0, std::cmp::Reverse(b.1)) {
                *b = (t, slot);
            }
        }
        best.into_iter()
            .map(|(at, (_, slot))| (at, slot as usize))
            .collect()
    }

    /// Writes the picture: the rows, a time axis and a legend (blank: no recorded
    /// cgroup ran there).
    pub fn write(&self, out: &mut impl Write, h: &Header) -> io::Result<()> {
        let names = track_names(h);
        let dominant = self.dominant();
        let nr_rows = h.cpus.len();
        let legend_rows = names.len().div_ceil(4);
        let height = TOP + nr_rows * ROW + 40 + legend_rows * 20 + 10;
        writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
        )?;
        writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#)?;
        let mut title = format!("bperf record {}", h.command.join(" "));
        if let Some((cut, _)) = title.char_indices().nth(TITLE_CHARS) {
            title.truncate(cut);
            title.push_str("...");
        }
        writeln!(out, r#"<text x="{LEFT}" y="20">{}</text>"#, escape(&title))?;
        for (r, cpu) in h.cpus.iter().enumerate() {
            let y = TOP + r * ROW;
            writeln!(
                out,
                r#"<text x="5" y="{}">CPU {cpu}</text>"#,
                y + ROW / 2 + 4
            )?;
            let cols: Vec<Option<usize>> = (0..COLUMNS as u32)
                .map(|col| dominant.get(&(r as u32, col)).copied())
                .collect();
            let mut col = 0;
            while col < cols.len() {
                let Some(slot) = cols[col] else {
                    col += 1;
                    continue;
                };
                let run = cols[col..].iter().take_while(|&&c| c == Some(slot)).count();
                writeln!(
                    out,
                    r#"<rect x="{}" y="{y}" width="{run}" height="{}" fill="{}"><title>{}</title></rect>"#,
                    LEFT + col,
                    ROW - 4,
                    colour(slot),
                    escape(names.get(slot).map_or("", String::as_str))
                )?;
                col += run;
            }
        }
        let axis_y = TOP + nr_rows * ROW + 15;
        let span = self.span.length();
        for tick in 0..=5 {
            let x = LEFT + tick * COLUMNS / 5;
            let ms = span as f64 * tick as f64 / 5.0 / 1e6;
            writeln!(
                out,
                r#"<text x="{x}" y="{axis_y}" text-anchor="middle">{ms:.1} ms</text>"#
            )?;
        }
        for (i, name) in names.iter().enumerate() {
            let x = LEFT + (i % 4) * 280;
            let y = axis_y + 20 + (i / 4) * 20;
            writeln!(
                out,
                r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{y}">{}</text>"#,
                y - 10,
                colour(i),
                x + 16,
                escape(name)
            )?;
        }
        out.write_all(b"</svg>\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reading::Reading;
    use crate::record::bperf_data::{comm, RecordedCgroup};

    /// Text in the picture is XML's: markup escaped, and control characters (which XML
    /// does not allow, even escaped) written as `\x1b`-style text.
    #[test]
    fn names_in_the_picture_are_well_formed_xml() {
        assert_eq!(
            escape("e\u{1b}[2J<&\"x\"\t"),
            "e\\x1b[2J&lt;&amp;&quot;x&quot;\\t"
        );
    }

    fn header() -> Header {
        let cg = |slot: usize, name: &str| RecordedCgroup {
            slot,
            id: slot as u64 + 10,
            name: name.into(),
            path: name.into(),
            container: None,
            ..RecordedCgroup::default()
        };
        Header {
            events: vec!["task-clock".into()],
            supported: vec![true],
            cgroups: vec![cg(0, "web"), cg(1, "db&co")],
            cpus: vec![0, 1],
            clock: "sched_clock".into(),
            command: vec!["x".into()],
            started: 0.0,
            target: "'system wide'".into(),
            tasks: false,
        }
    }

    fn slices() -> Vec<Slice> {
        let slice = |slot: u32, cpu: u32, start: u64, length: u64| Slice {
            start,
            length,
            cgid: 7,
            cpu,
            slot,
            pid: 1,
            tid: 2,
            comm: comm("a<b"),
            cut: false,
            deltas: vec![Reading {
                counter: length,
                enabled: length,
                running: length,
            }],
        };
        vec![
            slice(0, 0, 1_000_000, 3_000_000),
            slice(1, 1, 2_000_000, 1_000_000),
        ]
    }

    fn span() -> Span {
        let mut span = Span::default();
        slices().iter().for_each(|s| span.add(s));
        span
    }

    #[test]
    fn the_trace_has_a_track_per_cpu_and_a_slice_per_record() {
        let mut trace = Trace::begin(Vec::new(), &header(), span().t0()).unwrap();
        for s in &slices() {
            trace.add(s).unwrap();
        }
        let v: Json = serde_json::from_slice(&trace.finish().unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let slices: Vec<&Json> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["name"], "web");
        assert_eq!(slices[0]["ts"], 0.0);
        assert_eq!(slices[0]["dur"], 3000.0);
        assert_eq!(slices[0]["args"]["comm"], "a<b");
        assert_eq!(slices[1]["tid"], 1);
        assert_eq!(slices[1]["args"]["CPUs"], 1.0);
        let tracks = events.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(tracks, 2);
        assert_eq!(v["otherData"]["clock"], "sched_clock");
    }

    #[test]
    fn the_picture_colours_each_cpu_by_its_cgroups() {
        let mut picture = Picture::new(&header(), span());
        slices().iter().for_each(|s| picture.add(s));
        let mut out = Vec::new();
        picture.write(&mut out, &header()).unwrap();
        let svg = String::from_utf8(out).unwrap();
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
