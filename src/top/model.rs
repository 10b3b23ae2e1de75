//! What `bperf top` shows, apart from how: one row per cgroup with each event's rate
//! and the metrics that apply, worked out from the counts of one refresh; the order,
//! the filter and a short history of every figure per row. Pure: the tests feed it
//! snapshots.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::event::{Event, Tool};
use crate::output::metric::{self, Kind, Partners};
use crate::reading::Reading;

/// How many refreshes of each figure a row keeps for its sparkline.
pub(crate) const HISTORY: usize = 60;

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
    /// A time (ns) per ns of wall time: bperf/runq-wait/ as CPUs' worth of waiting.
    Share,
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
        if ev.tool == Some(Tool::RunqWait) {
            out.push(col("wait".into(), Figure::Share));
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
        "bperf/preemptions/" => "preempt",
        "cache-misses" => "c-miss",
        "cache-references" => "c-refs",
        n => n,
    }
}

/// A cgroup the model shows: what the session knows of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cgroup {
    pub id: u64,
    /// Where its counts are in the counter's snapshots.
    pub slot: usize,
    /// Its path below the mount (`/` for the root).
    pub path: String,
    /// With --for-each-container, the name of the container it is the cgroup of.
    pub container: Option<String>,
    /// That container's image, where its runtime said.
    pub image: Option<String>,
}

/// A reading of a window in which the event never ran (a cgroup with nothing to run)
/// as one that counted nothing: top shows zero there, not perf's `<not counted>`.
fn ran(r: Reading) -> f64 {
    r.scaled().unwrap_or(0.0)
}

/// A cgroup's row: its latest figures and their recent history.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub cgroup: Cgroup,
    /// The row of the nearest ancestor cgroup shown (None: a top of the tree).
    parent: Option<usize>,
    /// Whether a row has this one as its parent.
    has_children: bool,
    pub values: Vec<Option<f64>>,
    /// Per column, the last HISTORY figures, oldest first (NaN: none).
    history: Vec<VecDeque<f32>>,
}

impl Row {
    fn new(cgroup: Cgroup, nr_columns: usize) -> Row {
        Row {
            cgroup,
            parent: None,
            has_children: false,
            values: vec![None; nr_columns],
            history: vec![VecDeque::with_capacity(HISTORY); nr_columns],
        }
    }

    /// The name the table shows: the container's, else the cgroup's path.
    pub fn name(&self) -> &str {
        self.cgroup
            .container
            .as_deref()
            .unwrap_or(&self.cgroup.path)
    }

    /// The name under its parent in the tree view: the container's, else the last
    /// part of the path.
    pub(crate) fn leaf(&self) -> &str {
        if let Some(c) = &self.cgroup.container {
            return c;
        }
        match self.cgroup.path.rsplit_once('/') {
            Some((_, leaf)) if !leaf.is_empty() => leaf,
            _ => &self.cgroup.path,
        }
    }

    /// The history of column `c`, oldest first; None where there was no figure.
    pub(crate) fn history(&self, c: usize) -> impl Iterator<Item = Option<f64>> + '_ {
        self.history[c]
            .iter()
            .map(|v| (!v.is_nan()).then_some(*v as f64))
    }

    fn push(&mut self) {
        for (h, v) in self.history.iter_mut().zip(&self.values) {
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back(v.map_or(f32::NAN, |v| v as f32));
        }
    }
}

/// What the table is sorted by: the name, or a column's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Name,
    Column(usize),
}

/// A row as the table shows it: in the tree view, how deep and whether folded.
#[derive(Clone, Copy, Debug)]
pub struct Shown<'a> {
    pub row: &'a Row,
    /// 0 in the flat view.
    pub depth: usize,
    pub fold: Fold,
}

/// Whether a row of the tree view has rows under it, shown or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    /// No rows under it (and every row of the flat view).
    Leaf,
    Open,
    Closed,
}

/// The rows of every refresh so far, sorted and filtered for showing.
pub struct Model {
    pub columns: Vec<Column>,
    /// Each event's kind, and the events its metric takes counts from.
    kinds: Vec<Kind>,
    partners: Partners,
    /// In the order of the tree (by path); only the cgroups the session reports.
    rows: Vec<Row>,
    /// Each event's count in the row being worked out (None: not supported).
    counts: Vec<Option<f64>>,
    pub sort: SortKey,
    /// Largest first (the default: what runs hot on top).
    pub descending: bool,
    /// Only rows whose name (or container) holds this text are shown.
    pub filter: String,
    /// Rows under their parent cgroup's, rather than one flat list.
    pub tree: bool,
    /// The cgroups (ids) whose rows the tree view shows folded.
    collapsed: HashSet<u64>,
    /// With the run-queue program (--runq): by row name, whom its cgroup waited behind
    /// in the last refresh, most first, each in CPUs' worth of waiting.
    pub culprits: Option<HashMap<String, Vec<(String, f64)>>>,
}

impl Model {
    /// The columns of `events`, sorted by the first (CPUs with task-clock first),
    /// largest first.
    pub fn new(events: &[Event]) -> Model {
        let columns = columns(events);
        let sort = match columns.is_empty() {
            true => SortKey::Name,
            false => SortKey::Column(0),
        };
        Model {
            columns,
            kinds: events.iter().map(|e| metric::kind(&e.attr)).collect(),
            partners: Partners::new(events),
            rows: Vec::new(),
            counts: Vec::with_capacity(events.len()),
            sort,
            descending: true,
            filter: String::new(),
            tree: false,
            collapsed: HashSet::default(),
            culprits: None,
        }
    }

    /// Each row's slot and name (its container's, else its path).
    pub(crate) fn named_slots(&self) -> Vec<(usize, String)> {
        let named = |r: &Row| (r.cgroup.slot, r.name().to_string());
        self.rows.iter().map(named).collect()
    }

    /// Whom each row's cgroup waited behind over a refresh of `wall_ns`: `culprits`,
    /// as session::runq gives them (by the rows' names).
    pub(crate) fn set_culprits(&mut self, culprits: &[crate::output::runq::Culprit], wall_ns: f64) {
        let mut by_row: HashMap<String, Vec<(String, f64)>> = HashMap::default();
        for c in culprits.iter().filter(|_| wall_ns > 0.0) {
            let share = c.wait_ns as f64 / wall_ns;
            by_row
                .entry(c.cgroup.clone())
                .or_default()
                .push((c.by.clone(), share));
        }
        self.culprits = Some(by_row);
    }

    /// The cgroups to show from now on, in the order of the tree (a parent before its
    /// children): rows of cgroups no longer in it go, new ones start an empty history.
    /// Called when the session's cgroups change, not at every refresh.
    pub(crate) fn set_cgroups(&mut self, cgroups: Vec<Cgroup>) {
        let mut old: HashMap<u64, Row> = self.rows.drain(..).map(|r| (r.cgroup.id, r)).collect();
        let nr_columns = self.columns.len();
        for cg in cgroups {
            let row = match old.remove(&cg.id) {
                Some(mut row) => {
                    row.cgroup = cg;
                    row
                }
                None => Row::new(cg, nr_columns),
            };
            self.rows.push(row);
        }
        self.collapsed
            .retain(|id| self.rows.iter().any(|r| r.cgroup.id == *id));
        self.link_parents();
    }

    /// Each row's parent: the row of its nearest ancestor among the rows.
    fn link_parents(&mut self) {
        let by_path: HashMap<&str, usize> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.cgroup.path.as_str(), i))
            .collect();
        let parents: Vec<Option<usize>> = self
            .rows
            .iter()
            .map(|r| ancestors(&r.cgroup.path).find_map(|a| by_path.get(a).copied()))
            .collect();
        for r in &mut self.rows {
            r.has_children = false;
        }
        for (i, p) in parents.into_iter().enumerate() {
            self.rows[i].parent = p;
            if let Some(p) = p {
                self.rows[p].has_children = true;
            }
        }
    }

    /// Takes one refresh: `count(slot, event)` is what the event counted in the cgroup
    /// in the window of `wall_ns` (None: the machine does not count the event). Every
    /// row's figures become the rates and metrics of those counts.
    pub fn refresh(&mut self, wall_ns: f64, count: impl Fn(usize, usize) -> Option<Reading>) {
        let per_second = |c: f64| (wall_ns > 0.0).then(|| c / (wall_ns / 1e9));
        for row in &mut self.rows {
            self.counts.clear();
            let slot = row.cgroup.slot;
            self.counts
                .extend((0..self.kinds.len()).map(|e| count(slot, e).map(ran)));
            for (c, v) in self.columns.iter().zip(&mut row.values) {
                let Some(n) = self.counts[c.event] else {
                    *v = None;
                    continue;
                };
                *v = match c.figure {
                    Figure::Rate => per_second(n),
                    Figure::Share => (wall_ns > 0.0).then(|| n / wall_ns),
                    Figure::Metric => {
                        let ratio = |k| self.partners.count(c.event, k, &self.counts);
                        metric::metric_of(self.kinds[c.event], n, ratio, wall_ns)
                            .map(|m| m.value)
                            .filter(|v| v.is_finite())
                    }
                };
            }
            row.push();
        }
    }

    /// The counter's slots of the rows' cgroups.
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.rows.iter().map(|r| r.cgroup.slot)
    }

    /// How many cgroups the last refresh had (the filter aside).
    pub(crate) fn nr_rows(&self) -> usize {
        self.rows.len()
    }

    /// Whether the filter lets row `r` through.
    fn passes(&self, r: &Row) -> bool {
        r.cgroup.path.contains(&self.filter)
            || r.cgroup
                .container
                .as_deref()
                .is_some_and(|c| c.contains(&self.filter))
    }

    /// How rows `a` and `b` go in the order asked for. Rows without a figure in the
    /// sort column come last, whichever the direction; ties go by name.
    fn order(&self, a: &Row, b: &Row) -> std::cmp::Ordering {
        let by_name = || a.name().cmp(b.name());
        match self.sort {
            SortKey::Name => match self.descending {
                true => by_name().reverse(),
                false => by_name(),
            },
            SortKey::Column(c) => {
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
                order.then_with(by_name)
            }
        }
    }

    /// The rows to show, in the order asked for: in the flat view those the filter lets
    /// through; in the tree view each row under its parent, siblings in that order, the
    /// rows under a folded one left out, and with a filter the rows it lets through
    /// with their ancestors.
    pub fn shown(&self) -> Vec<Shown<'_>> {
        if !self.tree {
            let mut rows: Vec<&Row> = self.rows.iter().filter(|r| self.passes(r)).collect();
            rows.sort_by(|a, b| self.order(a, b));
            return rows
                .into_iter()
                .map(|row| Shown {
                    row,
                    depth: 0,
                    fold: Fold::Leaf,
                })
                .collect();
        }
        let mut wanted = vec![self.filter.is_empty(); self.rows.len()];
        if !self.filter.is_empty() {
            for (i, r) in self.rows.iter().enumerate() {
                if self.passes(r) {
                    let mut at = Some(i);
                    while let Some(a) = at.filter(|&a| !wanted[a]) {
                        wanted[a] = true;
                        at = self.rows[a].parent;
                    }
                }
            }
        }
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.rows.len() + 1];
        for (i, r) in self.rows.iter().enumerate().filter(|(i, _)| wanted[*i]) {
            children[r.parent.unwrap_or(self.rows.len())].push(i);
        }
        for list in &mut children {
            list.sort_by(|&a, &b| self.order(&self.rows[a], &self.rows[b]));
        }
        let mut out = Vec::with_capacity(self.rows.len());
        let mut stack: Vec<(usize, usize)> = children[self.rows.len()]
            .iter()
            .rev()
            .map(|&i| (i, 0))
            .collect();
        while let Some((i, depth)) = stack.pop() {
            let row = &self.rows[i];
            let closed = self.collapsed.contains(&row.cgroup.id);
            let fold = match (row.has_children, closed) {
                (false, _) => Fold::Leaf,
                (true, false) => Fold::Open,
                (true, true) => Fold::Closed,
            };
            out.push(Shown { row, depth, fold });
            if fold == Fold::Open {
                stack.extend(children[i].iter().rev().map(|&c| (c, depth + 1)));
            }
        }
        out
    }

    /// Folds (`open` false) or unfolds the tree view's row of cgroup `id`.
    pub(crate) fn set_open(&mut self, id: u64, open: bool) {
        match open {
            true => self.collapsed.remove(&id),
            false => self.collapsed.insert(id),
        };
    }

    /// The cgroup (id) of the row `id`'s row is under in the tree, if any.
    pub fn parent_of(&self, id: u64) -> Option<u64> {
        let r = self.rows.iter().find(|r| r.cgroup.id == id)?;
        r.parent.map(|p| self.rows[p].cgroup.id)
    }

    /// Sorts by the next column (`forward`) or the one before, the name counting as
    /// the column before the first; the direction stays.
    pub(crate) fn next_sort(&mut self, forward: bool) {
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
    pub(crate) fn sort_title(&self) -> &str {
        match self.sort {
            SortKey::Name => "CGROUP",
            SortKey::Column(c) => &self.columns[c].title,
        }
    }

    /// Whether any row has a container column.
    pub(crate) fn has_containers(&self) -> bool {
        self.rows.iter().any(|r| r.cgroup.container.is_some())
    }
}

/// The paths `path` is under, nearest first, the root (`/`) last: `a/b/c` gives `a/b`,
/// `a`, `/`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut at = (path != "/").then_some(path);
    std::iter::from_fn(move || {
        let p = at?;
        let up = match p.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &p[..i],
        };
        at = (up != "/").then_some(up);
        Some(up)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reading::Snapshot;

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

    /// Cgroups at slots 0, 1, ... named by their paths.
    fn cgroups(paths: &[&str]) -> Vec<Cgroup> {
        paths
            .iter()
            .enumerate()
            .map(|(slot, p)| Cgroup {
                id: id_of(p),
                slot,
                path: p.to_string(),
                container: None,
                image: None,
            })
            .collect()
    }

    fn id_of(path: &str) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(path)
    }

    fn values<'a>(m: &'a Model, name: &str) -> &'a [Option<f64>] {
        let shown = m.shown();
        let row = shown.iter().find(|s| s.row.name() == name).unwrap().row;
        &row.values
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
        let mut m = Model::new(&ev);
        m.set_cgroups(cgroups(&["a", "b"]));
        m.refresh(5e8, |slot, e| Some(snap.total(slot, e)));
        let a = values(&m, "a");
        assert!((a[0].unwrap() - 1.4).abs() < 1e-9, "{a:?}");
        assert_eq!(a[1], Some(20.0));
        assert_eq!(a[2], Some(2000.0));
        assert_eq!(a[3], Some(5000.0));
        assert_eq!(a[4], Some(2.5));
        let b = values(&m, "b");
        assert!((b[0].unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(b[4], Some(0.25));
        // Nothing ran in b: zero switches, not none.
        assert_eq!(b[1], Some(0.0));
        m.refresh(5e8, |slot, e| (e < 2).then(|| snap.total(slot, e)));
        assert_eq!(values(&m, "a")[2..], [None, None, None]);
        assert!(values(&m, "a")[0].is_some());
    }

    #[test]
    fn miss_rates_pair_with_their_event() {
        let ev = vec![
            Event::plain("branches", 0, 4),
            Event::plain("branch-misses", 0, 5),
        ];
        let titles: Vec<String> = columns(&ev).into_iter().map(|c| c.title).collect();
        assert_eq!(titles, ["branches/s", "br-miss/s", "br-miss%"]);
        let mut snap = Snapshot::new(1, 2, 1);
        snap.set(0, 0, 0, counted(1000));
        snap.set(0, 1, 0, counted(50));
        let mut m = Model::new(&ev);
        m.set_cgroups(cgroups(&["/"]));
        m.refresh(1e9, |slot, e| Some(snap.total(slot, e)));
        assert_eq!(values(&m, "/")[2], Some(5.0));
    }

    /// A model of CPUs and cs/s whose rows' CPUs are `cpus` and cs/s (100 - `cpus`) * 10.
    fn model(rows: &[(&str, f64)]) -> Model {
        let mut m = Model::new(&events()[..2]);
        let paths: Vec<&str> = rows.iter().map(|r| r.0).collect();
        m.set_cgroups(cgroups(&paths));
        feed(&mut m, rows);
        m
    }

    /// One refresh of 1 s in which each named row's CPUs are its figure.
    fn feed(m: &mut Model, rows: &[(&str, f64)]) {
        let by_slot: Vec<f64> = rows.iter().map(|r| r.1).collect();
        m.refresh(1e9, |slot, e| {
            let v = by_slot[slot];
            Some(match e {
                0 => counted((v * 1e9) as u64),
                _ => counted(((100.0 - v) * 10.0) as u64),
            })
        });
    }

    fn names(m: &Model) -> Vec<&str> {
        m.shown().into_iter().map(|s| s.row.name()).collect()
    }

    #[test]
    fn sorts_by_any_column_either_way_and_filters_by_name() {
        let mut m = model(&[("idle", 0.0), ("web", 0.9), ("db", 0.5)]);
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
        let ev = events();
        let mut m = Model::new(&ev[..1]);
        m.set_cgroups(cgroups(&["none", "a", "b"]));
        m.refresh(1e9, |slot, _| (slot > 0).then(|| counted(slot as u64)));
        assert_eq!(names(&m), ["b", "a", "none"]);
        m.descending = false;
        assert_eq!(names(&m), ["a", "b", "none"]);
    }

    /// History is bounded, and removed cgroups' rows go: memory stays flat under churn.
    #[test]
    fn history_is_bounded_and_removed_rows_go() {
        let mut m = model(&[]);
        for i in 0..1000 {
            let churn = format!("c{i}");
            m.set_cgroups(cgroups(&["web", &churn]));
            feed(&mut m, &[("web", i as f64), (&churn, 1.0)]);
            assert_eq!(m.nr_rows(), 2);
        }
        let shown = m.shown();
        let web = shown.iter().find(|s| s.row.name() == "web").unwrap().row;
        let h: Vec<Option<f64>> = web.history(0).collect();
        assert_eq!(h.len(), HISTORY);
        assert_eq!(h[HISTORY - 1], Some(999.0));
        assert_eq!(h[0], Some((1000 - HISTORY) as f64));
        let churned = shown.iter().find(|s| s.row.name() == "c999").unwrap().row;
        assert_eq!(churned.history(0).count(), 1);
        m.set_cgroups(cgroups(&["x"]));
        assert_eq!(names(&m), ["x"]);
        assert_eq!(m.shown()[0].row.history(0).count(), 0);
    }

    #[test]
    fn ancestors_go_up_to_the_root() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a/b", "a", "/"]);
        assert_eq!(ancestors("a").collect::<Vec<_>>(), ["/"]);
        assert_eq!(ancestors("/").count(), 0);
    }

    fn tree(m: &Model) -> Vec<String> {
        m.shown()
            .into_iter()
            .map(|s| {
                let mark = match s.fold {
                    Fold::Leaf => "",
                    Fold::Open => "-",
                    Fold::Closed => "+",
                };
                format!("{}{mark}{}", " ".repeat(s.depth), s.row.leaf())
            })
            .collect()
    }

    /// The tree view: each row under its nearest shown ancestor (`svc/a/x`'s parent
    /// `svc/a` is missing: it goes under `svc`), siblings in the sort order; a folded
    /// row hides its subtree and keeps its own figures, which hold its descendants'
    /// (bperf charges a cgroup's counts to every counted ancestor).
    #[test]
    fn the_tree_view_nests_sorts_siblings_and_folds() {
        let mut m = model(&[
            ("/", 2.0),
            ("db", 0.3),
            ("svc", 1.5),
            ("svc/b", 0.5),
            ("svc/c", 1.0),
            ("svc/a/x", 0.0),
        ]);
        m.tree = true;
        assert_eq!(
            tree(&m),
            ["-/", " -svc", "  c", "  b", "  x", " db"],
            "{:?}",
            tree(&m)
        );
        m.descending = false;
        assert_eq!(tree(&m), ["-/", " db", " -svc", "  x", "  b", "  c"]);
        m.set_open(id_of("svc"), false);
        assert_eq!(tree(&m), ["-/", " db", " +svc"]);
        assert_eq!(values(&m, "svc")[0], Some(1.5));
        assert_eq!(m.parent_of(id_of("svc/a/x")), Some(id_of("svc")));
        m.set_open(id_of("svc"), true);
        m.filter = "x".into();
        assert_eq!(tree(&m), ["-/", " -svc", "  x"]);
        // Folds are kept across refreshes and changes of the cgroups, but not for
        // cgroups that went.
        m.filter.clear();
        m.set_open(id_of("svc"), false);
        m.set_cgroups(cgroups(&["/", "svc", "svc/b"]));
        assert_eq!(tree(&m), ["-/", " +svc"]);
        m.set_cgroups(cgroups(&["/"]));
        m.set_cgroups(cgroups(&["/", "svc", "svc/b"]));
        assert_eq!(tree(&m), ["-/", " -svc", "  b"]);
        // The rows of the cgroups that came back have no figures yet: they go last.
        m.tree = false;
        assert_eq!(names(&m), ["/", "svc", "svc/b"]);
    }
}
