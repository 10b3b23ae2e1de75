//! perf's table: a count right-aligned, its unit, the event, the cgroup and the
//! metric, each in perf 6.12's column.

use std::time::Duration;

use super::line::{write_count, Fields, Place};
use super::metric::Metric;
use super::people;

/// Widths of perf's table columns (perf 6.12's stat-display.c).
pub(super) const COUNTS_LEN: usize = 18;
const EVNAME_LEN: usize = 32;
pub(super) const CGROUP_LEN: usize = 16;
const METRIC_LEN: usize = 38;

/// Enough spaces for any padding in a table line.
pub(super) const SPACES: &str = "                                                                ";

/// Appends `text` to `s`, then spaces up to `width` characters.
fn push_left(s: &mut String, text: &str, width: usize) {
    s.push_str(text);
    let n = text.chars().count();
    if n < width {
        s.push_str(&SPACES[..width - n]);
    }
}

/// Buffers a Report keeps from line to line, so that a table line costs no allocation.
#[derive(Default)]
pub(super) struct Buffers {
    pub(super) line: String,
    pub(super) count: String,
    pub(super) digits: String,
}

/// What a table line starts with: the time, and the CPU, thread or group of CPUs.
pub(super) fn push_where(s: &mut String, ts: Option<Duration>, f: &Fields) {
    use std::fmt::Write as _;
    if let Some(ts) = ts {
        let _ = write!(s, "{:6}.{:09} ", ts.as_secs(), ts.subsec_nanos());
    }
    if let Some(cpu) = f.cpu {
        let _ = write!(s, "CPU{cpu:<3} ");
    }
    match f.place {
        Some(Place::Thread { comm, tid }) => {
            let _ = write!(s, "{comm:>16}-{tid:<7} ");
        }
        Some(Place::Group { mode, name, cpus }) => {
            let _ = write!(s, "{name:<w$} {cpus:>4} ", w = mode.width());
        }
        None => {}
    }
}

/// How far perf indents a metric on a line of its own, after the line's start.
const NEW_LINE_INDENT: usize = 49;

/// One table line into `b.line` (cleared first), without its newline, padded as perf
/// 6.12 pads it; each metric after the first on a line of its own.
pub(super) fn table_line(
    b: &mut Buffers,
    ts: Option<Duration>,
    f: &Fields,
    thousands: Option<&str>,
) {
    let Buffers {
        line: s,
        count,
        digits,
    } = b;
    s.clear();
    push_where(s, ts, f);
    let start_len = s.len();
    count.clear();
    write_count(count, digits, f, thousands);
    let width = count.chars().count();
    if width < COUNTS_LEN {
        s.push_str(&SPACES[..COUNTS_LEN - width]);
    }
    s.push_str(count);
    s.push(' ');
    push_left(s, f.unit, 4);
    s.push(' ');
    push_left(s, f.event, EVNAME_LEN);
    if let Some(cg) = f.cgroup {
        s.push(' ');
        match people::needs_escape(cg) {
            true => push_left(s, &people::escape_controls(cg), CGROUP_LEN),
            false => push_left(s, cg, CGROUP_LEN),
        }
    }
    if let Some(c) = f.container {
        s.push(' ');
        push_left(s, &people::escape_controls(c), CGROUP_LEN);
    }
    match f.shown_metrics().next() {
        Some(m) => push_metric(s, m),
        None => s.push_str(&SPACES[..METRIC_LEN]),
    }
    let start = s[..start_len].to_string();
    for m in f.shown_metrics().skip(1) {
        s.push('\n');
        s.push_str(&start);
        if f.cpu.is_some() {
            s.push_str(&SPACES[..8]);
        }
        s.push_str(&SPACES[..NEW_LINE_INDENT]);
        push_metric(s, m);
    }
    if f.multiplexed {
        let _ = std::fmt::Write::write_fmt(s, format_args!("  ({:.2}%)", f.pct));
    }
    if let Some(pct) = f.noise.filter(|&p| p != 0.0) {
        let _ = std::fmt::Write::write_fmt(s, format_args!("  ( +-{pct:6.2}% )"));
    }
}

/// ` # value unit`, padded to perf's metric column.
fn push_metric(s: &mut String, m: &Metric) {
    use std::fmt::Write as _;
    let start = s.len();
    let _ = write!(s, " # {m} ");
    let width = METRIC_LEN.saturating_sub(s.len() - start);
    push_left(s, &m.unit, width);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Footer, Format, Line, Value};
    use crate::output::fixtures::*;
    use crate::reading::Reading;

    #[test]
    fn table_summary_system_wide() {
        let ev = events();
        let l = lines(None);
        let footer = half_second();
        let out = render(opts(Format::Table), |r| {
            r.summary(&ev, &l, &footer).unwrap()
        });
        let want = "
 Performance counter stats for 'system wide':

          1,013.75 msec task-clock                       #    2.027 CPUs utilized             
            75,000      cs                               #   73.983 K/sec                     
   <not supported>      cycles                                                                

       0.500000000 seconds time elapsed

";
        assert_eq!(out, want);
    }

    #[test]
    fn table_with_cgroups_workload_and_no_big_num() {
        let ev = events();
        let mut l = lines(Some("web"));
        l.push(Line {
            event: 0,
            cgroup: Some("db".into()),
            container: None,
            cpu: None,
            place: None,
            value: Value::Counted(Reading::default()),
        });
        let footer = Footer {
            elapsed: Duration::from_secs(1),
            elapsed_error: None,
            rusage: Some((Duration::from_millis(1), Duration::from_micros(1382))),
        };
        let mut o = opts(Format::Table);
        o.thousands = None;
        o.target = Some("'sleep 1'".into());
        let out = render(o, |r| r.summary(&ev, &l, &footer).unwrap());
        let want = "
 Performance counter stats for 'sleep 1':

           1013.75 msec task-clock                       web              #    1.014 CPUs utilized             
             75000      cs                               web              #   73.983 K/sec                     
   <not supported>      cycles                           web                                                   
     <not counted> msec task-clock                       db                                                    

       1.000000000 seconds time elapsed

       0.001000000 seconds user
       0.001382000 seconds sys


";
        assert_eq!(out, want);
    }

    #[test]
    fn multiplexed_counts_are_scaled_and_marked() {
        let ev = events();
        let l = vec![counted(1, 500, 500_000_000, None, None)];
        let out = render(opts(Format::Table), |r| {
            r.summary(&ev, &l, &Footer::default()).unwrap()
        });
        assert!(out.contains("             1,000      cs "), "{out}");
        assert!(out.contains("  (50.00%)"), "{out}");
    }

    #[test]
    fn per_cpu_table_and_header() {
        let ev = events();
        let l = vec![counted(0, 100_260_000, 1_000_000_000, None, Some(0))];
        let mut o = opts(Format::Table);
        o.interval = Some(Duration::from_millis(100));
        o.per_cpu = true;
        let out = render(o, |r| {
            r.interval(Duration::from_millis(100), &ev, &l).unwrap()
        });
        assert_eq!(
            out,
"#           time cpu                counts unit events\n     0.100000000 CPU0               100.26 msec task-clock                       #    1.003 CPUs utilized             \n"
        );
    }
}
