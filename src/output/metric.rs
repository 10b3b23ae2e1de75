//! perf's metric comments: derived values printed after `#`.

use std::borrow::Cow;

use rustc_hash::FxHashMap as HashMap;

use super::{Line, Place, Value};
use crate::event::{Attr, Event};
use crate::metrics::Use;

const HW: u32 = 0;
const SW: u32 = 1;

/// What kind of event, as far as metrics care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Clock, // task-clock, cpu-clock: ns, shown as msec
    Cycles,
    Instructions,
    Branches,
    BranchMisses,
    CacheRefs,
    CacheMisses,
    Other,
}

pub fn kind(a: &Attr) -> Kind {
    // A hybrid machine's hardware events carry their core PMU's type in the upper half.
    let config = match a.type_ {
        HW => a.config & 0xffff_ffff,
        _ => a.config,
    };
    match (a.type_, config) {
        (SW, 0) | (SW, 1) => Kind::Clock,
        (HW, 0) => Kind::Cycles,
        (HW, 1) => Kind::Instructions,
        (HW, 2) => Kind::CacheRefs,
        (HW, 3) => Kind::CacheMisses,
        (HW, 4) => Kind::Branches,
        (HW, 5) => Kind::BranchMisses,
        _ => Kind::Other,
    }
}

/// The unit column: clocks are counted in ns and printed in msec.
pub fn unit(a: &Attr) -> &'static str {
    if kind(a) == Kind::Clock {
        "msec"
    } else {
        ""
    }
}

/// The value printed for a count, in the event's unit.
pub fn shown(a: &Attr, count: f64) -> f64 {
    if kind(a) == Kind::Clock {
        count / 1e6
    } else {
        count
    }
}

/// A metric: value and its unit text, and how the table prints the value.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub value: f64,
    pub unit: Cow<'static, str>,
    style: Style,
    /// Asked for with -M (perf's metric groups), not one perf adds by itself.
    pub named: bool,
    /// Where the metric's threshold puts its value (`good`, `bad`), if it has one.
    pub threshold: Option<&'static str>,
}

/// How the table prints a metric's value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Style {
    /// `   0.345`
    Three,
    /// `     0.3` (a named metric with a unit)
    One,
    /// `    1.23` (insn per cycle)
    Two,
    /// `   5.00%`
    Percent,
}

impl Metric {
    fn new(value: f64, unit: &'static str) -> Metric {
        Metric::styled(value, unit, Style::Three)
    }

    fn percent(value: f64, unit: &'static str) -> Metric {
        Metric::styled(value, unit, Style::Percent)
    }

    fn styled(value: f64, unit: &'static str, style: Style) -> Metric {
        Metric {
            value,
            unit: Cow::Borrowed(unit),
            style,
            named: false,
            threshold: None,
        }
    }

    /// Whether --metric-only shows it: as perf, not the rates per second nor the CPUs
    /// utilized it adds by itself; every metric asked for with -M.
    pub(crate) fn in_metric_only(&self) -> bool {
        self.named || !(self.unit.contains("/sec") || self.unit.contains("CPUs utilized"))
    }

    /// The value as CSV and --metric-only JSON print it: the table's digits without
    /// padding, up to the first character that is neither a digit nor a point (perf's
    /// loop: no percent sign, and nothing of a `nan`).
    pub(crate) fn digits(&self) -> String {
        let s = self.to_string();
        let s = s.trim_start();
        let end = s
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len());
        s[..end].to_string()
    }
}

/// `v` as C's `%.Nf` prints it: `nan`, `-nan` and `inf` as C spells them.
pub(crate) fn c_fixed(v: f64, decimals: usize) -> String {
    match v {
        _ if v.is_nan() && v.is_sign_negative() => "-nan".to_string(),
        _ if v.is_nan() => "nan".to_string(),
        _ if v.is_infinite() => if v > 0.0 { "inf" } else { "-inf" }.to_string(),
        _ => format!("{v:.decimals$}"),
    }
}

/// The value as the table prints it.
impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.value;
        if !v.is_finite() {
            // As C's printf: `     nan` in the value's width.
            let decimals = 0;
            return match self.style {
                Style::Percent => write!(f, "{:>7}%", c_fixed(v, decimals)),
                _ => write!(f, "{:>8}", c_fixed(v, decimals)),
            };
        }
        match self.style {
            Style::Three => write!(f, "{v:8.3}"),
            Style::One => write!(f, "{v:8.1}"),
            Style::Two => write!(f, "{v:8.2}"),
            Style::Percent => write!(f, "{v:7.2}%"),
        }
    }
}

/// The lines of one print, indexed for metrics: each event's scaled count where it was
/// counted, and for each event the events perf may take another kind's count from.
/// Built once per print, so that a print costs time in proportion to its lines.
pub struct Siblings<'a> {
    /// The scaled count of each event (None: it did not count), by where it was counted.
    by_event: HashMap<(Where<'a>, usize), Option<f64>>,
    partners: Partners,
}

/// For each event, the events whose counts its metric may use, with their kinds, in
/// the order perf looks at them (see [`Partners::of_kind`]). Kept as lists of the events
/// that pair alike, so that it takes memory in proportion to the events, not to their
/// square (every event may pair with every other).
pub(crate) struct Partners {
    /// The events of a kind, modifiers and PMU (None for the clocks, which pair across
    /// PMUs), in order.
    alike: HashMap<(Kind, [bool; 5], Option<usize>), Vec<usize>>,
    /// Each event's own kind, modifiers and PMU (an index into the distinct PMUs), its
    /// leader, and whether it is in a group of more than one.
    events: Vec<Pairing>,
}

struct Pairing {
    context: [bool; 5],
    pmu: usize,
    leader: Option<usize>,
    grouped: bool,
}

impl Partners {
    pub fn new(events: &[Event]) -> Partners {
        let mut sizes: HashMap<usize, usize> = HashMap::default();
        for l in events.iter().filter_map(|e| e.leader) {
            *sizes.entry(l).or_default() += 1;
        }
        let mut pmus: Vec<(u32, Option<&str>)> = Vec::new();
        let mut alike: HashMap<_, Vec<usize>> = HashMap::default();
        let mut pairings = Vec::with_capacity(events.len());
        for (e, ev) in events.iter().enumerate() {
            let p = pmu_of(ev);
            let pmu = pmus.iter().position(|&q| q == p).unwrap_or_else(|| {
                pmus.push(p);
                pmus.len() - 1
            });
            let (k, context) = (kind(&ev.attr), context(&ev.attr));
            let pmu_key = (k != Kind::Clock).then_some(pmu);
            alike.entry((k, context, pmu_key)).or_default().push(e);
            pairings.push(Pairing {
                context,
                pmu,
                leader: ev.leader,
                grouped: ev
                    .leader
                    .and_then(|l| sizes.get(&l))
                    .is_some_and(|&n| n > 1),
            });
        }
        Partners {
            alike,
            events: pairings,
        }
    }

    /// The events perf may pair `e` with for a `want` metric, in order: not `e` itself;
    /// of `e`'s group when `e` is in a group of more than one; with the same modifiers;
    /// and, but for the clocks, on the same PMU.
    fn of_kind(&self, e: usize, want: Kind) -> impl Iterator<Item = usize> + '_ {
        let p = &self.events[e];
        let pmu = (want != Kind::Clock).then_some(p.pmu);
        let alike = self.alike.get(&(want, p.context, pmu));
        alike
            .into_iter()
            .flatten()
            .copied()
            .filter(move |&c| c != e && (!p.grouped || self.events[c].leader == p.leader))
    }

    /// The count perf takes for a `want` metric of event `e`, from `counts`, every
    /// event's count in one place (None: not counted): that of the first partner of
    /// that kind, if it counted anything.
    pub fn count(&self, e: usize, want: Kind, counts: &[Option<f64>]) -> Option<f64> {
        self.of_kind(e, want)
            .next()
            .and_then(|c| counts.get(c).copied().flatten())
            .filter(|v| *v > 0.0)
    }
}

/// Where a line's count was counted: its cgroup, CPU, and thread or group of CPUs.
pub type Where<'a> = (Option<&'a str>, Option<u32>, Option<&'a Place>);

pub(crate) fn where_of(l: &Line) -> Where<'_> {
    (l.cgroup.as_deref(), l.cpu, l.place.as_ref())
}

/// What perf compares of two events' modifiers before it pairs them for a metric.
fn context(a: &Attr) -> [bool; 5] {
    [
        a.exclude_kernel,
        a.exclude_user,
        a.exclude_hv,
        a.exclude_host,
        a.exclude_idle,
    ]
}

/// The PMU an event counts on, as far as pairing goes: hardware, cache and raw events
/// all count on the core PMU, on a hybrid machine each on its own.
fn pmu_of(e: &Event) -> (u32, Option<&str>) {
    let type_ = match e.attr.type_ {
        crate::event::TYPE_HW_CACHE | crate::event::TYPE_RAW => HW,
        t => t,
    };
    (type_, core_pmu(e))
}

impl<'a> Siblings<'a> {
    pub fn new(events: &[Event], lines: &'a [Line]) -> Siblings<'a> {
        let mut by_event = HashMap::default();
        for l in lines {
            let count = match l.value {
                Value::Counted(r) => r.scaled(),
                Value::NotSupported => None,
            };
            by_event.insert((where_of(l), l.event), count);
        }
        Siblings {
            by_event,
            partners: Partners::new(events),
        }
    }

    /// The count perf takes for a `want` metric of `line`: that of the first partner of
    /// that kind counted where `line` was, if it counted anything.
    fn of(&self, line: &Line, want: Kind) -> Option<f64> {
        let at = where_of(line);
        self.partners
            .of_kind(line.event, want)
            .find_map(|c| self.by_event.get(&(at, c)))
            .copied()
            .flatten()
            .filter(|v| *v > 0.0)
    }
}

/// The core PMU that counts `e` on a hybrid machine.
fn core_pmu(e: &Event) -> Option<&str> {
    e.hybrid.as_ref().map(|h| h.pmu.as_str())
}

/// The -M metrics shown on `line`'s line: those whose first event it counts, worked out
/// from the counts of their events counted where it was.
pub fn named(uses: &[Use], siblings: &Siblings, line: &Line, wall_ns: f64) -> Vec<Metric> {
    let at = where_of(line);
    let mut out = Vec::new();
    for u in uses.iter().filter(|u| u.shown_on == line.event) {
        let counts: Option<Vec<f64>> = u
            .events
            .iter()
            .map(|e| siblings.by_event.get(&(at, *e)).copied().flatten())
            .collect();
        let value = counts.and_then(|c| u.def.value(&c, wall_ns));
        let value = value.unwrap_or(f64::NAN);
        out.push(Metric {
            value,
            threshold: u.def.classify(value),
            unit: Cow::Owned(u.def.unit()),
            style: if u.def.one_decimal() {
                Style::One
            } else {
                Style::Two
            },
            named: true,
        });
    }
    out
}

/// The metric perf prints for `line`, given the other lines of the same print and the
/// wall time they cover (ns).
pub fn metric(events: &[Event], siblings: &Siblings, line: &Line, wall_ns: f64) -> Option<Metric> {
    let count = match line.value {
        Value::Counted(r) => r.scaled()?,
        Value::NotSupported => return None,
    };
    let event = &events[line.event];
    // A wait in ns is no rate of anything (preemptions are, as context-switches).
    if event.tool == Some(crate::event::Tool::RunqWait) {
        return None;
    }
    metric_of(
        kind(&event.attr),
        count,
        |other| siblings.of(line, other),
        wall_ns,
    )
}

/// The metric perf prints beside an event of kind `k` that counted `count`, given the
/// count `ratio` finds for each other kind counted where it was, and the wall time
/// (ns).
pub(crate) fn metric_of(
    k: Kind,
    count: f64,
    ratio: impl Fn(Kind) -> Option<f64>,
    wall_ns: f64,
) -> Option<Metric> {
    match k {
        Kind::Clock => (wall_ns > 0.0).then(|| Metric::new(count / wall_ns, "CPUs utilized")),
        Kind::Cycles => ratio(Kind::Clock).map(|ns| Metric::new(count / ns, "GHz")),
        Kind::Instructions => {
            ratio(Kind::Cycles).map(|c| Metric::styled(count / c, "insn per cycle", Style::Two))
        }
        Kind::BranchMisses => {
            ratio(Kind::Branches).map(|b| Metric::percent(100.0 * count / b, "of all branches"))
        }
        Kind::CacheMisses => {
            ratio(Kind::CacheRefs).map(|r| Metric::percent(100.0 * count / r, "of all cache refs"))
        }
        Kind::Branches | Kind::CacheRefs | Kind::Other => {
            ratio(Kind::Clock).map(|ns| per_second(count / (ns / 1e9)))
        }
    }
}

/// The unit of the metric perf always gives an event of this kind, whether or not it
/// has what to work it out from (--metric-only shows an empty column then).
pub(crate) fn fixed_unit(k: Kind) -> Option<&'static str> {
    match k {
        Kind::Cycles => Some("GHz"),
        Kind::Instructions => Some("insn per cycle"),
        Kind::BranchMisses => Some("of all branches"),
        Kind::CacheMisses => Some("of all cache refs"),
        _ => None,
    }
}

/// A rate with perf's K/M/G prefixes.
fn per_second(rate: f64) -> Metric {
    let (v, unit) = if rate >= 1e9 {
        (rate / 1e9, "G/sec")
    } else if rate >= 1e6 {
        (rate / 1e6, "M/sec")
    } else if rate >= 1e3 {
        (rate / 1e3, "K/sec")
    } else {
        (rate, "/sec")
    };
    Metric::new(v, unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reading::Reading;

    fn ev(name: &str, type_: u32, config: u64) -> Event {
        Event::plain(name, type_, config)
    }

    /// The metric of `lines[i]` over a second.
    fn metric_of(events: &[Event], lines: &[Line], i: usize) -> Metric {
        let siblings = Siblings::new(events, lines);
        metric(events, &siblings, &lines[i], 1e9).unwrap()
    }

    fn line(event: usize, counter: u64, cgroup: Option<&str>) -> Line {
        Line {
            event,
            cgroup: cgroup.map(str::to_string),
            container: None,
            cpu: None,
            place: None,
            value: Value::Counted(Reading {
                counter,
                enabled: 100,
                running: 100,
            }),
        }
    }

    #[test]
    fn software_metrics() {
        let events = [ev("task-clock", 1, 1), ev("cs", 1, 3), ev("msr/tsc/", 9, 0)];
        let lines = [
            line(0, 2_000_000_000, None),
            line(1, 58, None),
            line(2, 4_890_000_000, None),
        ];
        let m = |i| metric_of(&events, &lines, i);
        assert_eq!((m(0).value, &*m(0).unit), (2.0, "CPUs utilized"));
        assert_eq!(m(0).to_string(), "   2.000");
        assert_eq!((m(1).value, &*m(1).unit), (29.0, "/sec"));
        assert_eq!(m(2).unit, "G/sec");
        assert!((m(2).value - 2.445).abs() < 1e-9);
    }

    #[test]
    fn rates_use_the_same_cgroups_clock() {
        let events = [ev("task-clock", 1, 1), ev("cs", 1, 3)];
        let lines = [
            line(0, 500_000_000, Some("a")),
            line(1, 1000, Some("a")),
            line(0, 1_000_000_000, Some("b")),
            line(1, 1000, Some("b")),
        ];
        let a = metric(&events, &Siblings::new(&events, &lines), &lines[1], 1e9).unwrap();
        let b = metric(&events, &Siblings::new(&events, &lines), &lines[3], 1e9).unwrap();
        assert_eq!((a.value, &*a.unit), (2.0, "K/sec"));
        assert_eq!((b.value, &*b.unit), (1.0, "K/sec"));
    }

    /// As perf 6.12: a rate needs a clock of the event's group (when it is in one) with
    /// the same modifiers; a lone event may take a grouped clock.
    #[test]
    fn rates_pair_within_groups_and_modifiers() {
        let mut events = vec![
            ev("cs", 1, 3),
            ev("faults", 1, 2),
            ev("task-clock", 1, 1),
            ev("migrations", 1, 4),
        ];
        events[0].leader = Some(0);
        events[1].leader = Some(0);
        let lines: Vec<Line> = (0..4).map(|e| line(e, 1_000_000, None)).collect();
        let siblings = Siblings::new(&events, &lines);
        let rate = |e: usize| metric(&events, &siblings, &lines[e], 1e9).map(|m| m.unit);
        assert_eq!(rate(0), None, "cs in a group without a clock");
        assert_eq!(rate(3).as_deref(), Some("G/sec"), "a lone event");
        events[3].attr.exclude_kernel = true;
        let siblings = Siblings::new(&events, &lines);
        let rate = |e: usize| metric(&events, &siblings, &lines[e], 1e9).map(|m| m.unit);
        assert_eq!(rate(3), None, "other modifiers than the clock's");
        events[2].leader = Some(0);
        events[3].attr.exclude_kernel = false;
        let siblings = Siblings::new(&events, &lines);
        let rate = |e: usize| metric(&events, &siblings, &lines[e], 1e9).map(|m| m.unit);
        assert_eq!(rate(0).as_deref(), Some("G/sec"), "the group's own clock");
        assert_eq!(
            rate(3).as_deref(),
            Some("G/sec"),
            "a lone event, a grouped clock"
        );
    }

    #[test]
    fn hardware_metrics() {
        let events = [
            ev("task-clock", 1, 1),
            ev("cycles", 0, 0),
            ev("instructions", 0, 1),
            ev("branches", 0, 4),
            ev("branch-misses", 0, 5),
            ev("cache-references", 0, 2),
            ev("cache-misses", 0, 3),
        ];
        let lines = [
            line(0, 1_000_000_000, None),
            line(1, 3_000_000_000, None),
            line(2, 6_000_000_000, None),
            line(3, 1_000_000, None),
            line(4, 50_000, None),
            line(5, 2000, None),
            line(6, 500, None),
        ];
        let m = |i| metric_of(&events, &lines, i);
        assert_eq!((m(1).value, &*m(1).unit), (3.0, "GHz"));
        assert_eq!((m(2).value, &*m(2).unit), (2.0, "insn per cycle"));
        assert_eq!(m(2).to_string(), "    2.00");
        assert_eq!((m(4).value, &*m(4).unit), (5.0, "of all branches"));
        assert_eq!(m(4).to_string(), "   5.00%");
        assert_eq!((m(6).value, &*m(6).unit), (25.0, "of all cache refs"));
        assert_eq!(m(3).unit, "M/sec");
    }

    /// On a hybrid machine each core PMU's IPC is its own instructions over its own
    /// cycles; GHz takes any clock (perf's find_stat).
    #[test]
    fn hybrid_metrics_per_core_pmu() {
        let on = |name: &str, config: u64, pmu: &str| Event {
            hybrid: Some(crate::event::Hybrid {
                pmu: pmu.into(),
                cpus: None,
                written: None,
            }),
            ..ev(name, 0, config)
        };
        let events = [
            ev("cpu-clock", 1, 0),
            on("cpu_atom/cycles/", 0xa_0000_0000, "cpu_atom"),
            on("cpu_core/cycles/", 0x4_0000_0000, "cpu_core"),
            on("cpu_atom/instructions/", 0xa_0000_0001, "cpu_atom"),
            on("cpu_core/instructions/", 0x4_0000_0001, "cpu_core"),
        ];
        let lines = [
            line(0, 2_000_000_000, None),
            line(1, 1_000_000_000, None),
            line(2, 4_000_000_000, None),
            line(3, 500_000_000, None),
            line(4, 12_000_000_000, None),
        ];
        let m = |i| metric_of(&events, &lines, i);
        assert_eq!((m(1).value, &*m(1).unit), (0.5, "GHz"));
        assert_eq!((m(2).value, &*m(2).unit), (2.0, "GHz"));
        assert_eq!((m(3).value, &*m(3).unit), (0.5, "insn per cycle"));
        assert_eq!((m(4).value, &*m(4).unit), (3.0, "insn per cycle"));
    }

    #[test]
    fn no_metric_without_a_base() {
        let events = [ev("cs", 1, 3), ev("instructions", 0, 1), ev("cycles", 0, 0)];
        let mut lines = vec![line(0, 10, None), line(1, 10, None)];
        lines.push(Line {
            value: Value::NotSupported,
            ..line(2, 0, None)
        });
        let siblings = Siblings::new(&events, &lines);
        for line in &lines {
            assert_eq!(metric(&events, &siblings, line, 1e9), None);
        }
    }
}
