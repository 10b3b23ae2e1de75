//! The words and digits of bperf top, shared by --batch and the full-screen view: the
//! header's facts and each figure as a column shows it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::model::{Column, Figure, Model, Row, Shown, SortKey};
use crate::output::metric::{self, Kind};
use crate::output::people::escape_controls;

/// What the header says besides the time.
#[derive(Clone, Debug, PartialEq)]
pub struct ScreenHeader {
    /// The wall time the last refresh covered.
    pub window: Duration,
    pub cpus: usize,
    pub cgroups: usize,
    /// Cgroups not counted for want of a place (--max-cgroups).
    pub left_out: usize,
}

impl ScreenHeader {
    /// `bperf top 19:34:13  0.501 s  2 CPUs  7 cgroups`.
    pub fn line(&self) -> String {
        let mut s = format!(
            "bperf top {}  {:.3} s  {} CPUs  {} cgroups",
            clock_now(),
            self.window.as_secs_f64(),
            self.cpus,
            self.cgroups
        );
        if self.left_out > 0 {
            s += &format!(" ({} left out)", self.left_out);
        }
        s
    }
}

/// The local time of day, HH:MM:SS.
fn clock_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: localtime_r fills the tm it is given from a valid time_t.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// How wide every figure's column is.
pub(crate) const WIDTH: usize = 8;

/// A figure as its column shows it: CPUs with three decimals, IPC two, miss rates in
/// percent, rates with K, M, G; `-` for none.
pub fn cell(c: &Column, kind: Kind, v: Option<f64>) -> String {
    let Some(v) = v else {
        return "-".into();
    };
    match (c.figure, kind) {
        (Figure::Metric, Kind::Clock) | (Figure::Share, _) => format!("{v:.3}"),
        (Figure::Metric, Kind::Instructions) => format!("{v:.2}"),
        (Figure::Metric, _) => format!("{v:.2}%"),
        (Figure::Rate, _) => rate(v),
    }
}

/// A rate in at most 7 characters.
fn rate(v: f64) -> String {
    match v {
        v if v >= 1e15 => format!("{v:.1e}"),
        v if v >= 1e12 => format!("{:.1}T", v / 1e12),
        v if v >= 1e9 => format!("{:.2}G", v / 1e9),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e4 => format!("{:.1}K", v / 1e3),
        v if v >= 100.0 => format!("{v:.0}"),
        v => format!("{v:.1}"),
    }
}

/// `name` in at most `width` characters: its end, which tells cgroups of one parent
/// apart, after a `…` where the start is cut; control characters as escapes.
pub fn tail(name: &str, width: usize) -> String {
    let name = escape_controls(name);
    let n = name.chars().count();
    match n <= width {
        true => name,
        false => {
            let skip = n - width.saturating_sub(1);
            std::iter::once('…')
                .chain(name.chars().skip(skip))
                .collect()
        }
    }
}

/// The kind of each column's event.
pub fn kinds(events: &[crate::event::Event], columns: &[Column]) -> Vec<Kind> {
    columns
        .iter()
        .map(|c| metric::kind(&events[c.event].attr))
        .collect()
}

/// A figure's column's width: WIDTH, or where its head is longer, the head and its
/// sort mark.
pub(crate) fn figure_width(c: &Column) -> usize {
    match c.title.chars().count() {
        n if n > WIDTH => n + 1,
        _ => WIDTH,
    }
}

/// A column's head, marked when the table is sorted by it.
pub fn head(title: &str, sorted: bool, descending: bool) -> String {
    match (sorted, descending) {
        (false, _) => title.to_string(),
        (true, true) => format!("{title}v"),
        (true, false) => format!("{title}^"),
    }
}

/// One refresh as --batch prints it: the header, the column heads and a line per row,
/// then an empty line. A line starts with the row's name (with containers, the
/// container's name and image, `-` where none was said), then come the figures; with
/// containers it ends with the cgroup's path. In the tree view every line ends with the
/// cgroup's whole path, drawn into the tree as `ps f` draws its forest (each level four
/// columns deeper, ` \_ ` before a nested row's path), and the name column goes where
/// it would only repeat that path (without containers): the path stays the last field.
pub fn page(header: &ScreenHeader, model: &Model, kinds: &[Kind]) -> String {
    let shown = model.shown();
    let layout = PageLayout::new(model, &shown);
    let mut s = header.line() + "\n";
    s += &layout.heads(model);
    for r in &shown {
        s += &layout.line(model, kinds, r);
    }
    s + "\n"
}

/// The columns of a --batch page, and how wide each is.
struct PageLayout {
    /// The head and width of the name column, where there is one.
    name: Option<(&'static str, usize)>,
    /// The width of the image column, with containers.
    image: Option<usize>,
    /// Each figure's column's width: WIDTH, or where its head is longer, the head and
    /// its sort mark.
    figures: Vec<usize>,
    /// Whether a line ends with the cgroup's path (with containers, and in the tree).
    path_last: bool,
    /// Whether that path is drawn into the tree.
    tree: bool,
}

/// A row's container image as shown: `-` where none was said.
pub fn image(r: &Row) -> &str {
    r.cgroup.image.as_deref().unwrap_or("-")
}

impl PageLayout {
    fn new(model: &Model, shown: &[Shown]) -> PageLayout {
        let containers = model.has_containers();
        let widest = |f: &dyn Fn(&Row) -> &str, head: &str| {
            shown
                .iter()
                .map(|s| escape_controls(f(s.row)).chars().count())
                .chain([head.chars().count()])
                .max()
                .unwrap_or(0)
        };
        let name = match (containers, model.tree) {
            (true, _) => Some(("CONTAINER", widest(&|r| r.name(), "CONTAINER"))),
            (false, false) => Some(("CGROUP", widest(&|r| r.name(), "CGROUP"))),
            (false, true) => None,
        };
        let figures = model.columns.iter().map(figure_width).collect();
        PageLayout {
            name,
            image: containers.then(|| widest(&image, "IMAGE")),
            figures,
            path_last: containers || model.tree,
            tree: model.tree,
        }
    }

    /// The line of column heads; the one sorted by marked.
    fn heads(&self, model: &Model) -> String {
        let by_name = model.sort == SortKey::Name;
        let mut fields = Vec::new();
        if let Some((title, w)) = self.name {
            fields.push(format!("{:<w$}", head(title, by_name, model.descending)));
        }
        if let Some(w) = self.image {
            fields.push(format!("{:<w$}", "IMAGE"));
        }
        for (i, c) in model.columns.iter().enumerate() {
            let sorted = model.sort == SortKey::Column(i);
            let w = self.figures[i];
            fields.push(format!("{:>w$}", head(&c.title, sorted, model.descending)));
        }
        if self.path_last {
            // Marked when it is the name sorted by: without containers in the tree.
            let marked = by_name && self.name.is_none();
            fields.push(head("CGROUP", marked, model.descending));
        }
        fields.join(" ") + "\n"
    }

    /// The line of shown row `s`.
    fn line(&self, model: &Model, kinds: &[Kind], s: &Shown) -> String {
        let r = s.row;
        let mut fields = Vec::new();
        if let Some((_, w)) = self.name {
            fields.push(format!("{:<w$}", escape_controls(r.name())));
        }
        if let Some(w) = self.image {
            fields.push(format!("{:<w$}", escape_controls(image(r))));
        }
        for (i, c) in model.columns.iter().enumerate() {
            let v = r.values.get(i).copied().flatten();
            let w = self.figures[i];
            fields.push(format!("{:>w$}", cell(c, kinds[i], v)));
        }
        if self.path_last {
            let branch = match (self.tree, s.depth) {
                (false, _) | (_, 0) => String::new(),
                (true, d) => format!("{} \\_ ", "    ".repeat(d - 1)),
            };
            fields.push(branch + &escape_controls(&r.cgroup.path));
        }
        fields.join(" ") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page's header: `window`, 2 CPUs, `cgroups`, none left out.
    fn header(window: Duration, cgroups: usize) -> ScreenHeader {
        ScreenHeader {
            window,
            cpus: 2,
            cgroups,
            left_out: 0,
        }
    }
    use crate::top::model::Model;

    #[test]
    fn a_page_is_a_header_heads_and_rows_sorted() {
        let events = vec![
            crate::event::Event::plain("task-clock", 1, 1),
            crate::event::Event::plain("cycles", 0, 0),
            crate::event::Event::plain("instructions", 0, 1),
        ];
        let columns = crate::top::model::columns(&events);
        let kinds = kinds(&events, &columns);
        let mut m = Model::new(&events);
        m.set_cgroups(vec![cgroup(1, 0, "idle"), cgroup(2, 1, "a/web")]);
        // idle ran nothing; a/web 0.98765 s of task-clock in the 1 s, 2.5 G cycles
        // and 3 G instructions.
        let web = [987_650_000, 2_500_000_000, 3_000_000_000];
        m.refresh(1e9, |slot, e| {
            let counter = if slot == 1 { web[e] } else { 0 };
            let supported = slot == 1 || e == 0;
            supported.then_some(crate::reading::Reading {
                counter,
                enabled: 1,
                running: 1,
            })
        });
        let h = header(Duration::from_millis(500), 2);
        let page = page(&h, &m, &kinds);
        let lines: Vec<&str> = page.lines().collect();
        assert!(lines[0].starts_with("bperf top "), "{page}");
        assert!(lines[0].ends_with("  0.500 s  2 CPUs  2 cgroups"), "{page}");
        assert_eq!(lines[1], "CGROUP    CPUsv cycles/s   insn/s      IPC");
        assert_eq!(lines[2], "a/web     0.988    2.50G    3.00G     1.20");
        assert_eq!(lines[3], "idle      0.000        -        -        -");
        assert_eq!(lines[4], "");
    }

    /// A cgroup named with control characters (anyone with a delegated subtree can
    /// make one) prints them as escapes: the terminal is not cleared, the columns stay.
    #[test]
    fn control_characters_in_a_name_are_escaped() {
        // The full screen's cells, too.
        assert_eq!(tail("a\u{1b}[2J", 10), "a\\x1b[2J");
        let events = vec![crate::event::Event::plain("task-clock", 1, 1)];
        let columns = crate::top::model::columns(&events);
        let kinds = kinds(&events, &columns);
        for tree in [false, true] {
            let mut m = Model::new(&events);
            m.tree = tree;
            m.set_cgroups(vec![cgroup(1, 0, "e\u{1b}[2Jx"), cgroup(2, 1, "ok")]);
            m.refresh(1e9, |_, _| Some(crate::reading::Reading::default()));
            let h = header(Duration::from_millis(500), 2);
            let page = page(&h, &m, &kinds);
            assert!(!page.contains('\u{1b}'), "{page}");
            let lines: Vec<&str> = page.lines().collect();
            let at = |l: &str| l.find("0.000").unwrap();
            let (esc, ok) = (
                lines.iter().find(|l| l.contains("e\\x1b[2Jx")),
                lines.iter().find(|l| l.contains("ok")),
            );
            assert_eq!(at(esc.expect(&page)), at(ok.expect(&page)), "{page}");
        }
    }

    fn cgroup(id: u64, slot: usize, path: &str) -> crate::top::model::Cgroup {
        crate::top::model::Cgroup {
            id,
            slot,
            path: path.into(),
            container: None,
            image: None,
        }
    }

    /// With containers, a line names the container and its image first and ends with
    /// the cgroup's path.
    #[test]
    fn a_container_line_has_its_name_image_and_cgroup() {
        let events = vec![crate::event::Event::plain("task-clock", 1, 1)];
        let columns = crate::top::model::columns(&events);
        let kinds = kinds(&events, &columns);
        let mut m = Model::new(&events);
        let mut web = cgroup(1, 0, "docker/3474383178be");
        web.container = Some("web".into());
        web.image = Some("busybox".into());
        let mut db = cgroup(2, 1, "docker/99aa");
        db.container = Some("db".into());
        m.set_cgroups(vec![web, db]);
        m.refresh(1e9, |slot, _| {
            Some(crate::reading::Reading {
                counter: [500_000_000, 0][slot],
                enabled: 1,
                running: 1,
            })
        });
        let h = header(Duration::from_secs(1), 2);
        let page = page(&h, &m, &kinds);
        let lines: Vec<&str> = page.lines().collect();
        assert_eq!(lines[1], "CONTAINER IMAGE      CPUsv CGROUP");
        assert_eq!(lines[2], "web       busybox    0.500 docker/3474383178be");
        assert_eq!(lines[3], "db        -          0.000 docker/99aa");
    }

    /// A --batch page of task-clock's CPUs: `cgroups[i]` ran `cpus[i]` CPUs.
    fn cpus_page(cgroups: Vec<crate::top::model::Cgroup>, cpus: &[f64], tree: bool) -> String {
        let events = vec![crate::event::Event::plain("task-clock", 1, 1)];
        let columns = crate::top::model::columns(&events);
        let kinds = kinds(&events, &columns);
        let mut m = Model::new(&events);
        m.tree = tree;
        m.set_cgroups(cgroups);
        m.refresh(1e9, |slot, _| {
            Some(crate::reading::Reading {
                counter: (cpus[slot] * 1e9) as u64,
                enabled: 1,
                running: 1,
            })
        });
        let h = header(Duration::from_secs(1), cpus.len());
        page(&h, &m, &kinds)
    }

    /// The tree: the figures first, then each cgroup's whole path, under its parent's
    /// in the order of the tree, siblings by CPUs, drawn as `ps f` draws a forest; the
    /// path is the last field (what `awk '{print $NF}'` prints).
    #[test]
    fn a_tree_page_ends_each_line_with_the_path_under_its_parent() {
        let paths = ["/", "batch", "shop", "shop/db", "shop/web", "shop/web/x"];
        let cgroups = (0..paths.len())
            .map(|i| cgroup(i as u64 + 1, i, paths[i]))
            .collect();
        let page = cpus_page(cgroups, &[2.0, 0.0, 1.5, 0.5, 1.0, 0.25], true);
        let lines: Vec<&str> = page.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "   CPUsv CGROUP",
                "   2.000 /",
                "   1.500  \\_ shop",
                "   1.000      \\_ shop/web",
                "   0.250          \\_ shop/web/x",
                "   0.500      \\_ shop/db",
                "   0.000  \\_ batch",
                "",
            ],
            "{page}"
        );
        let last: Vec<&str> = lines[1..6]
            .iter()
            .map(|l| l.split_whitespace().last().unwrap())
            .collect();
        assert_eq!(last, ["/", "shop", "shop/web", "shop/web/x", "shop/db"]);
    }

    /// With containers the tree keeps the container's name and image first.
    #[test]
    fn a_tree_page_with_containers_names_them_first() {
        let mut web = cgroup(2, 1, "docker/3474383178be");
        web.container = Some("web".into());
        web.image = Some("busybox".into());
        let page = cpus_page(vec![cgroup(1, 0, "docker"), web], &[0.5, 0.5], true);
        let lines: Vec<&str> = page.lines().skip(1).collect();
        assert_eq!(lines[0], "CONTAINER IMAGE      CPUsv CGROUP");
        assert_eq!(lines[1], "docker    -          0.500 docker");
        assert_eq!(
            lines[2],
            "web       busybox    0.500  \\_ docker/3474383178be"
        );
    }

    /// A head longer than a figure's width widens its column: figures end under it.
    #[test]
    fn long_heads_widen_their_column() {
        let events = vec![crate::event::Event::plain("instructions:u", 0, 1)];
        let columns = crate::top::model::columns(&events);
        let kinds = kinds(&events, &columns);
        let mut m = Model::new(&events);
        m.set_cgroups(vec![cgroup(1, 0, "B")]);
        m.refresh(1e9, |_, _| {
            Some(crate::reading::Reading {
                counter: 5_000_000,
                enabled: 1,
                running: 1,
            })
        });
        let h = header(Duration::from_secs(1), 1);
        let page = page(&h, &m, &kinds);
        let lines: Vec<&str> = page.lines().collect();
        assert_eq!(lines[1], "CGROUP instructions:u/sv      IPC");
        assert_eq!(lines[2], "B                  5.00M        -");
    }

    #[test]
    fn rates_fit_their_column() {
        for v in [
            0.0, 5.55, 99.9, 123.0, 9999.0, 12345.0, 999_999.0, 1.5e6, 7.7e12,
        ] {
            assert!(rate(v).len() <= 7, "{v}: {}", rate(v));
        }
        assert_eq!(rate(12345.0), "12.3K");
    }

    #[test]
    fn long_names_keep_their_end() {
        assert_eq!(tail("system.slice/web", 16), "system.slice/web");
        assert_eq!(tail("system.slice/web", 8), "…ice/web");
        assert_eq!(tail("system.slice/web", 8).chars().count(), 8);
    }
}
