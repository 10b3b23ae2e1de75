//! The lines a report prints: each event's value as counted, for a cgroup, a CPU, a
//! thread or a group of CPUs (`Line`), and the same in perf's units (`Fields`), with
//! its count as perf writes it, before any format is applied.

use super::metric::{self, Metric, Siblings};
use super::report::Options;
use crate::event::{Event, Tool};
use crate::perf_version::PerfVersion;
use crate::reading::Reading;

/// The value of one output line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// The event was opened; the reading may still show it never ran (`<not counted>`).
    Counted(Reading),
    /// The kernel refused the event on this machine (`<not supported>`).
    NotSupported,
}

/// One output line's worth of data: an event, optionally for one cgroup and/or one CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Index into the session's event list.
    pub event: usize,
    /// Cgroup name as the user gave it (perf prints it in its own column), if per-cgroup.
    pub cgroup: Option<String>,
    /// The container whose cgroup it is (--for-each-container), in a column after the
    /// cgroup's.
    pub container: Option<String>,
    /// CPU number, with -A/--no-aggr.
    pub cpu: Option<u32>,
    /// What the line is of besides its event and cgroup: a thread or a group of CPUs.
    pub place: Option<Place>,
    pub value: Value,
}

/// A thread (--per-thread) or a group of CPUs (--per-socket and the like).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    Thread {
        comm: String,
        tid: i32,
    },
    Group {
        mode: crate::aggr::Mode,
        /// perf's name for the group (`S0-D0-C1`).
        name: String,
        /// How many CPUs were counted in it.
        cpus: usize,
    },
}

/// One output line, in perf's units, before any format is applied.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Fields<'a> {
    pub(super) cpu: Option<u32>,
    pub(super) place: Option<&'a Place>,
    /// `None` for `<not counted>` / `<not supported>` (see `status`).
    pub(super) value: Option<f64>,
    pub(super) status: &'static str,
    pub(super) unit: &'static str,
    pub(super) event: &'a str,
    /// What kind of event, for the metric perf gives it.
    pub(super) kind: metric::Kind,
    pub(super) cgroup: Option<&'a str>,
    pub(super) container: Option<&'a str>,
    pub(super) run_ns: u64,
    pub(super) pct: f64,
    /// Show ` (xx.xx%)`: the event ran less than it was enabled.
    pub(super) multiplexed: bool,
    /// perf's metric for the event, then the -M metrics it leads, each on its own line.
    pub(super) metrics: Vec<Metric>,
    /// With -r: the standard error of the mean over the runs, in % of the mean.
    pub(super) noise: Option<f64>,
    /// Whose perf's line it is.
    pub(super) version: PerfVersion,
}

impl Fields<'_> {
    /// The metrics the line shows: perf 6.12 shows those with a value on a line with a
    /// count; perf 7.2 shows every metric of the event, `nan` where it has no value.
    pub(super) fn shown_metrics(&self) -> impl Iterator<Item = &Metric> {
        let counted = self.value.is_some();
        let all = self.version != PerfVersion::V6_12;
        self.metrics
            .iter()
            .filter(move |m| all || counted && !m.value.is_nan())
    }
}

/// One line's fields, its metrics worked out from `siblings` (the lines of the same
/// print) over `wall_ns` of time; `noise` with -r.
pub(super) fn fields<'a>(
    events: &'a [Event],
    opts: &Options,
    siblings: &Siblings,
    line: &'a Line,
    wall_ns: f64,
    noise: Option<f64>,
) -> Fields<'a> {
    let ev = &events[line.event];
    let scale = !opts.no_scale;
    let named_wall_ns = match opts.version == PerfVersion::V7_2 && !opts.timed_targets {
        true => f64::NAN,
        false => wall_ns,
    };
    // perf 6.12's own metrics beside each event; perf 7.2 has only its metric
    // definitions' (-M's, and those of its default events).
    let builtin = match opts.version.builtin_metrics() {
        true => metric::metric(events, siblings, line, wall_ns),
        false => None,
    };
    let (value, status, run_ns, pct, multiplexed) = match line.value {
        Value::NotSupported => (None, "<not supported>", 0, 100.0, false),
        Value::Counted(r) => match if scale { r.scaled() } else { r.raw() } {
            None => (None, "<not counted>", 0, 100.0, false),
            Some(v) => (
                Some(match ev.tool {
                    // A wait, in ns, shown in msec as the clocks are.
                    Some(Tool::RunqWait) => v / 1e6,
                    _ => metric::shown(&ev.attr, v),
                }),
                "",
                r.running,
                r.pct_running(),
                r.running < r.enabled,
            ),
        },
    };
    Fields {
        cpu: line.cpu,
        place: line.place.as_ref(),
        value,
        status,
        // perf 6.12's tool events count ns; perf 7.2's (the tool PMU's) have no unit.
        unit: match ev.tool {
            Some(Tool::RunqWait) => "msec",
            Some(Tool::Preemptions) => "",
            Some(_) if opts.version == PerfVersion::V6_12 => "ns",
            Some(_) => "",
            None => metric::unit(&ev.attr),
        },
        event: &ev.name,
        kind: metric::kind(&ev.attr),
        cgroup: line.cgroup.as_deref(),
        container: line.container.as_deref(),
        run_ns,
        pct,
        multiplexed,
        metrics: builtin
            .into_iter()
            .chain(metric::named(&opts.metrics, siblings, line, named_wall_ns))
            .collect(),
        noise,
        version: opts.version,
    }
}

/// Writes a plain decimal number with its integer part grouped in thousands by `sep`:
/// 1234567.89 -> 1,234,567.89.
fn push_grouped(out: &mut String, s: &str, sep: &str) {
    let (int, frac) = s.split_at(s.find('.').unwrap_or(s.len()));
    let (sign, digits) = int.split_at(if int.starts_with('-') { 1 } else { 0 });
    out.push_str(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push_str(sep);
        }
        out.push(c);
    }
    out.push_str(frac);
}

/// Groups the integer part of a plain decimal number in thousands.
#[cfg(test)]
fn group_thousands(s: &str) -> String {
    let mut out = String::new();
    push_grouped(&mut out, s, ",");
    out
}

/// The count as perf prints it: msec with two decimals, counts as integers.
pub(super) fn count_text(f: &Fields) -> String {
    let mut out = String::new();
    write_count(&mut out, &mut String::new(), f, None);
    out
}

/// Appends the count as perf prints it to `out`, grouped by `thousands` if given;
/// `digits` is scratch space.
pub(super) fn write_count(
    out: &mut String,
    digits: &mut String,
    f: &Fields,
    thousands: Option<&str>,
) {
    use std::fmt::Write as _;
    let Some(v) = f.value else {
        out.push_str(f.status);
        return;
    };
    digits.clear();
    let _ = match f.unit {
        "msec" => write!(digits, "{v:.2}"),
        // A whole count of at most 2^53 prints exactly as an integer, and faster.
        _ if v.fract() == 0.0 && v.abs() < 9e15 => write!(digits, "{}", v as i64),
        _ => write!(digits, "{v:.0}"),
    };
    match thousands {
        Some(sep) => push_grouped(out, digits, sep),
        None => out.push_str(digits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands() {
        assert_eq!(group_thousands("1234567.89"), "1,234,567.89");
        assert_eq!(group_thousands("123"), "123");
        assert_eq!(group_thousands("1234"), "1,234");
        assert_eq!(group_thousands("-1234"), "-1,234");
        assert_eq!(group_thousands("0.50"), "0.50");
    }
}
