//! What `bperf top` shows, apart from how: one row per cgroup with each event's rate
//! and the metrics that apply, worked out from the counts of one refresh; the order,
//! the filter and a short history of every figure per row. Pure: the tests feed it
//! snapshots.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use crate::event::Event;
use crate::output::metric::{self, Kind, Siblings};
use crate::output::{Line, Value};
use crate::reading::{Reading, Snapshot};

/// How many refreshes of each figure a row keeps for its sparkline.
pub const HISTORY: usize = 60;

/// A column of figures: what it shows of which event.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub title: String,
    pub event: usize,
    pub figure: Figure,
}

/// The figures a column can show of its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// Counts per second of wall time.
    Rate,
    /// The metric perf prints beside the event (CPUs utilized for a clock, insn per
    /// cycle for instructions, the miss rates), from output::metric's pairing.
    Metric,
}

/// The columns for `events`: a clock shows as CPUs, every other event as its rate,
/// and instructions and the misses also show their metric (IPC, the miss rates).
pub fn columns(events: &[Event]) -> Vec<Column> {
    let mut out = Vec::new();
    for (e, ev) in events.iter().enumerate() {
        let col = |title: String, figure| Column {
            title,
            event: e,
            figure,
        };
        let k = metric::kind(&ev.attr);
        if k == Kind::Clock {
            out.push(col("CPUs".into(), Figure::Metric));
            continue;
        }
        out.push(col(format!("{}/s", short_name(&ev.name)), Figure::Rate));
        let metric_title = match k {
            Kind::Instructions => Some("IPC"),
            Kind::BranchMisses => Some("br-miss%"),
            Kind::CacheMisses => Some("miss%"),
            _ => None,
        };
        if let Some(t) = metric_title {
            out.push(col(t.into(), Figure::Metric));
        }
    }
    out
}

/// A name short enough for a column head: perf's long names abbreviated.
fn short_name(name: &str) -> &str {
    match name {
        "context-switches" => "cs",
        "cpu-migrations" => "migr",
        "page-faults" => "faults",
        "instructions" => "insn",
        "branch-misses" => "br-miss",
        "cache-misses" => "c-miss",
        "cache-references" => "c-refs",
        n => n,
    }
}

/// One refresh's figures for each cgroup (name, a figure per column; None where the
/// event did not count or the metric has nothing to be worked out from), from what
/// was counted in `delta` over `wall_ns` of wall time. `rows` are (slot, name);
/// `supported` says which events the machine counts.
pub fn figures(
    events: &[Event],
    columns: &[Column],
    rows: &[(usize, String)],
    delta: &Snapshot,
    wall_ns: f64,
    supported: &dyn Fn(usize) -> bool,
) -> Vec<(String, Vec<Option<f64>>)> {
    let mut lines = Vec::with_capacity(rows.len() * events.len());
    for (slot, name) in rows {
        for e in 0..events.len() {
            let value = match supported(e) {
                true => Value::Counted(ran(delta.total(*slot, e))),
                false => Value::NotSupported,
            };
            lines.push(Line {
                event: e,
                cgroup: Some(name.clone()),
                container: None,
                cpu: None,
                place: None,
                value,
            });
        }
    }
    let siblings = Siblings::new(events, &lines);
    rows.iter()
        .enumerate()
        .map(|(r, (_, name))| {
            let of_row = &lines[r * events.len()..(r + 1) * events.len()];
            let values = columns
                .iter()
                .map(|c| {
                    let line = &of_row[c.event];
                    match c.figure {
                        Figure::Rate => rate(line, wall_ns),
                        Figure::Metric => metric::metric(events, &siblings, line, wall_ns)
                            .map(|m| m.value)
                            .filter(|v| v.is_finite()),
                    }
                })
                .collect();
            (name.clone(), values)
        })
        .collect()
}

/// A reading of a window in which the event never ran (a cgroup with nothing to run)
/// as one that counted nothing: top shows zero there, not perf's `<not counted>`.
fn ran(r: Reading) -> Reading {
    match r.scaled() {
        Some(_) => r,
        None => Reading {
            counter: 0,
            enabled: 1,
            running: 1,
        },
    }
}

fn rate(line: &Line, wall_ns: f64) -> Option<f64> {
    match line.value {
        Value::Counted(r) if wall_ns > 0.0 => r.scaled().map(|c| c / (wall_ns / 1e9)),
        Value::Counted(_) => None,
        Value::NotSupported => None,
    }
}

/// A cgroup's row: its latest figures and their recent history.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// Per column, the last HISTORY figures, oldest first (NaN: none).
    history: Vec<VecDeque<f32>>,
}

impl Row {
    /// The history of column `c`, oldest first; None where there was no figure.
    pub fn history(&self, c: usize) -> impl Iterator<Item = Option<f64>> + '_ {
        self.history[c]
            .iter()
            .map(|v| (!v.is_nan()).then_some(*v as f64))
    }
}

/// What the table is sorted by: the name, or a column's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Name,
    Column(usize),
}

/// The rows of every refresh so far, sorted and filtered for showing.
#[derive(Debug)]
pub struct Model {
    pub columns: Vec<Column>,
    /// In the order of the last refresh; only the cgroups it had.
    rows: Vec<Row>,
    pub sort: SortKey,
    /// Largest first (the default: what runs hot on top).
    pub descending: bool,
    /// Only rows whose name holds this text are shown.
    pub filter: String,
}

impl Model {
    /// Sorted by the first column (CPUs with task-clock first), largest first.
    pub fn new(columns: Vec<Column>) -> Model {
        let sort = match columns.is_empty() {
            true => SortKey::Name,
            false => SortKey::Column(0),
        };
        Model {
            columns,
            rows: Vec::new(),
            sort,
            descending: true,
            filter: String::new(),
        }
    }

    /// Takes one refresh's figures: rows of cgroups not in it are dropped, new ones start
    /// an empty history.
    pub fn update(&mut self, figures: Vec<(String, Vec<Option<f64>>)>) {
        let mut old: HashMap<String, Row> =
            self.rows.drain(..).map(|r| (r.name.clone(), r)).collect();
        let nr_columns = self.columns.len();
        for (name, values) in figures {
            let mut row = old.remove(&name).unwrap_or_else(|| Row {
                name,
                values: Vec::new(),
                history: vec![VecDeque::with_capacity(HISTORY); nr_columns],
            });
            for (h, v) in row.history.iter_mut().zip(&values) {
                if h.len() == HISTORY {
                    h.pop_front();
                }
                h.push_back(v.map_or(f32::NAN, |v| v as f32));
            }
            row.values = values;
            self.rows.push(row);
        }
    }

    /// How many cgroups the last refresh had (the filter aside).
    pub fn nr_rows(&self) -> usize {
        self.rows.len()
    }

    /// The rows to show: those the filter lets through, in the order asked for. Rows
    /// without a figure in the sort column come last, whichever the direction; ties go
    /// by name.
    pub fn shown(&self) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| r.name.contains(&self.filter))
            .collect();
        let by_name = |a: &&Row, b: &&Row| a.name.cmp(&b.name);
        match self.sort {
            SortKey::Name => {
                rows.sort_by(by_name);
                if self.descending {
                    rows.reverse();
                }
            }
            SortKey::Column(c) => rows.sort_by(|a, b| {
                let (x, y) = (
                    a.values.get(c).copied().flatten(),
                    b.values.get(c).copied().flatten(),
                );
                let order = match (x, y) {
                    (Some(x), Some(y)) => match self.descending {
                        true => y.total_cmp(&x),
                        false => x.total_cmp(&y),
                    },
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                };
                order.then_with(|| by_name(a, b))
            }),
        }
        rows
    }

    /// Sorts by the next column (`forward`) or the one before, the name counting as
    /// the column before the first; the direction stays.
    pub fn next_sort(&mut self, forward: bool) {
        let n = self.columns.len() + 1;
        let at = match self.sort {
            SortKey::Name => 0,
            SortKey::Column(c) => c + 1,
        };
        let next = match forward {
            true => (at + 1) % n,
            false => (at + n - 1) % n,
        };
        self.sort = match next {
            0 => SortKey::Name,
            c => SortKey::Column(c - 1),
        };
    }

    /// The title of the column sorted by.
    pub fn sort_title(&self) -> &str {
        match self.sort {
            SortKey::Name => "CGROUP",
            SortKey::Column(c) => &self.columns[c].title,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<Event> {
        vec![
            Event::plain("task-clock", 1, 1),
            Event::plain("context-switches", 1, 3),
            Event::plain("cycles", 0, 0),
            Event::plain("instructions", 0, 1),
        ]
    }

    fn counted(n: u64) -> Reading {
        Reading {
            counter: n,
            enabled: 1_000,
            running: 1_000,
        }
    }

    #[test]
    fn columns_are_cpus_rates_and_ipc() {
        let titles: Vec<String> = columns(&events()).into_iter().map(|c| c.title).collect();
        assert_eq!(titles, ["CPUs", "cs/s", "cycles/s", "insn/s", "IPC"]);
    }

    /// Two CPUs, half a second: the rates are per second, CPUs from task-clock over the
    /// wall time, IPC from the cgroup's own cycles; an unsupported event has none.
    #[test]
    fn figures_are_rates_cpus_and_metrics_per_cgroup() {
        let ev = events();
        let cols = columns(&ev);
        let mut snap = Snapshot::new(2, 4, 2);
        // Slot 0: 0.3 s + 0.4 s of task-clock in 0.5 s; slot 1: 0.05 s.
        snap.set(0, 0, 0, counted(300_000_000));
        snap.set(0, 0, 1, counted(400_000_000));
        snap.set(0, 1, 0, counted(10));
        snap.set(0, 2, 0, counted(1000));
        snap.set(0, 3, 1, counted(2500));
        snap.set(1, 0, 0, counted(50_000_000));
        snap.set(1, 2, 0, counted(400));
        snap.set(1, 3, 0, counted(100));
        let rows = vec![(0, "a".to_string()), (1, "b".to_string())];
        let f = figures(&ev, &cols, &rows, &snap, 5e8, &|_| true);
        assert_eq!(f[0].0, "a");
        let a = &f[0].1;
        assert!((a[0].unwrap() - 1.4).abs() < 1e-9, "{a:?}");
        assert_eq!(a[1], Some(20.0));
        assert_eq!(a[2], Some(2000.0));
        assert_eq!(a[3], Some(5000.0));
        assert_eq!(a[4], Some(2.5));
        let b = &f[1].1;
        assert!((b[0].unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(b[4], Some(0.25));
        // Nothing ran in b: zero switches, not none.
        assert_eq!(b[1], Some(0.0));
        let no_hw = figures(&ev, &cols, &rows, &snap, 5e8, &|e| e < 2);
        assert_eq!(no_hw[0].1[2..], [None, None, None]);
        assert!(no_hw[0].1[0].is_some());
    }

    #[test]
    fn miss_rates_pair_with_their_event() {
        let ev = vec![
            Event::plain("branches", 0, 4),
            Event::plain("branch-misses", 0, 5),
        ];
        let cols = columns(&ev);
        let titles: Vec<&str> = cols.iter().map(|c| c.title.as_str()).collect();
        assert_eq!(titles, ["branches/s", "br-miss/s", "br-miss%"]);
        let mut snap = Snapshot::new(1, 2, 1);
        snap.set(0, 0, 0, counted(1000));
        snap.set(0, 1, 0, counted(50));
        let f = figures(&ev, &cols, &[(0, "/".into())], &snap, 1e9, &|_| true);
        assert_eq!(f[0].1[2], Some(5.0));
    }

    fn refresh(m: &mut Model, rows: &[(&str, f64)]) {
        m.update(
            rows.iter()
                .map(|(n, v)| (n.to_string(), vec![Some(*v), Some(100.0 - v)]))
                .collect(),
        );
    }

    fn model() -> Model {
        Model::new(vec![
            Column {
                title: "CPUs".into(),
                event: 0,
                figure: Figure::Metric,
            },
            Column {
                title: "cs/s".into(),
                event: 1,
                figure: Figure::Rate,
            },
        ])
    }

    fn names(m: &Model) -> Vec<&str> {
        m.shown().into_iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn sorts_by_any_column_either_way_and_filters_by_name() {
        let mut m = model();
        refresh(&mut m, &[("idle", 0.0), ("web", 0.9), ("db", 0.5)]);
        assert_eq!(names(&m), ["web", "db", "idle"]);
        m.descending = false;
        assert_eq!(names(&m), ["idle", "db", "web"]);
        m.next_sort(true);
        assert_eq!(m.sort, SortKey::Column(1));
        assert_eq!(m.sort_title(), "cs/s");
        assert_eq!(names(&m), ["web", "db", "idle"]);
        m.next_sort(true);
        assert_eq!(m.sort, SortKey::Name);
        assert_eq!(names(&m), ["db", "idle", "web"]);
        m.next_sort(false);
        assert_eq!(m.sort, SortKey::Column(1));
        m.filter = "d".into();
        assert_eq!(names(&m), ["db", "idle"]);
    }

    #[test]
    fn rows_without_a_figure_come_last_either_way() {
        let mut m = model();
        m.update(vec![
            ("none".into(), vec![None, None]),
            ("a".into(), vec![Some(1.0), None]),
            ("b".into(), vec![Some(2.0), None]),
        ]);
        assert_eq!(names(&m), ["b", "a", "none"]);
        m.descending = false;
        assert_eq!(names(&m), ["a", "b", "none"]);
    }

    /// History is bounded, and removed cgroups' rows go: memory stays flat under churn.
    #[test]
    fn history_is_bounded_and_removed_rows_go() {
        let mut m = model();
        for i in 0..1000 {
            let churn = format!("c{i}");
            refresh(&mut m, &[("web", i as f64), (&churn, 1.0)]);
            assert_eq!(m.nr_rows(), 2);
        }
        let web = m.shown().into_iter().find(|r| r.name == "web").unwrap();
        let h: Vec<Option<f64>> = web.history(0).collect();
        assert_eq!(h.len(), HISTORY);
        assert_eq!(h[HISTORY - 1], Some(999.0));
        assert_eq!(h[0], Some((1000 - HISTORY) as f64));
        let churned = m.shown().into_iter().find(|r| r.name == "c999").unwrap();
        assert_eq!(churned.history(0).count(), 1);
        m.update(vec![("x".into(), vec![None, Some(1.0)])]);
        assert_eq!(names(&m), ["x"]);
        assert_eq!(m.shown()[0].history(0).collect::<Vec<_>>(), [None]);
    }
}
