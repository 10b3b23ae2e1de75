//! -x SEP: perf's CSV lines.

use std::time::Duration;

use super::line::{count_text, Fields, Place};
use super::people;

/// The CSV columns before the count: the time, and the CPU, thread or group of CPUs.
pub(super) fn csv_where(ts: Option<Duration>, f: &Fields) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    if let Some(ts) = ts {
        cols.push(format!("{}.{:09}", ts.as_secs(), ts.subsec_nanos()));
    }
    if let Some(cpu) = f.cpu {
        cols.push(format!("CPU{cpu}"));
    }
    match f.place {
        Some(Place::Thread { comm, tid }) => cols.push(format!("{comm}-{tid}")),
        Some(Place::Group { name, cpus, .. }) => {
            cols.push(name.clone());
            cols.push(cpus.to_string());
        }
        None => {}
    }
    cols
}

pub(super) fn csv_line(ts: Option<Duration>, f: &Fields, sep: &str) -> String {
    let lead = csv_where(ts, f);
    let mut cols = lead.clone();
    cols.push(count_text(f));
    cols.push(f.unit.to_string());
    cols.push(f.event.to_string());
    if let Some(cg) = f.cgroup {
        cols.push(csv_name(cg, sep));
    }
    if let Some(c) = f.container {
        cols.push(csv_name(c, sep));
    }
    if let Some(pct) = f.noise {
        cols.push(format!("{pct:.2}%"));
    }
    cols.push(f.run_ns.to_string());
    cols.push(format!("{:.2}", f.pct));
    match f.shown_metrics().next() {
        Some(m) => {
            cols.push(m.digits());
            cols.push(m.unit.to_string());
        }
        None => {
            cols.push(String::new());
            cols.push(String::new());
        }
    }
    let mut out = cols.join(sep);
    // A further metric: perf's line of empty columns up to the metric's.
    let empty = 5 + f.cgroup.is_some() as usize + f.container.is_some() as usize;
    for m in f.shown_metrics().skip(1) {
        let mut more = lead.clone();
        more.extend(std::iter::repeat_n(String::new(), empty));
        more.push(m.digits());
        more.push(m.unit.to_string());
        out.push('\n');
        out.push_str(&more.join(sep));
    }
    out
}

/// A name (a cgroup's, or one from a runtime) as one CSV field: escaped as in the table, and the
/// separator's characters and the quote as `\xNN` too (`a,b` is `a\x2cb` with `-x,`):
/// a name is one field whatever it holds, and no RFC 4180 reader takes a quote in it
/// for the start of a quoted field.
fn csv_name(name: &str, sep: &str) -> String {
    people::escape_also(name, |c| c == '"' || sep.contains(c))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Format, Line};
    use crate::output::fixtures::*;

    #[test]
    fn csv_fields_in_perfs_order() {
        let ev = events();
        let l = lines(Some("web"));
        let footer = one_second();
        let out = render(opts(Format::Csv(",".into())), |r| {
            r.summary(&ev, &l, &footer).unwrap()
        });
        assert_eq!(
            out,
            "1013.75,msec,task-clock,web,1000000000,100.00,1.014,CPUs utilized
75000,,cs,web,1000000000,100.00,73.983,K/sec
<not supported>,,cycles,web,0,100.00,,\n"
        );
        let l = vec![Line {
            cpu: Some(1),
            ..counted(1, 7, 1_000_000_000, None, None)
        }];
        let mut o = opts(Format::Csv(";".into()));
        o.interval = Some(Duration::from_secs(1));
        let out = render(o, |r| {
            r.interval(Duration::from_millis(1500), &ev, &l).unwrap()
        });
        assert_eq!(out, "1.500000000;CPU1;7;;cs;1000000000;100.00;;\n");
    }
}
