//! stat's culprit view (--culprits): for each cgroup, the cgroups it waited behind for
//! a CPU most, printed after the counts in the report's format: a table of bperf's own
//! (no perf output has this shape), or one CSV or JSON line per row.

use std::time::Duration;

use super::people::{self, Column};
use super::Format;

/// One row: a cgroup, one it waited behind (the culprit), and what it waited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Culprit {
    pub cgroup: String,
    pub by: String,
    pub wait_ns: u64,
    pub preemptions: u64,
}

/// The first field of each CSV line, which tells the view's lines from the counts'.
pub(crate) const CSV_MARK: &str = "culprit";

/// The view's lines of `rows`, in `format`; `ts`: the interval's time, with -I.
pub fn lines(rows: &[Culprit], format: &Format, ts: Option<Duration>) -> Vec<String> {
    if rows.is_empty() {
        return Vec::new();
    }
    let time = ts.map(|t| format!("{}.{:09}", t.as_secs(), t.subsec_nanos()));
    let msec = |c: &Culprit| format!("{:.2}", c.wait_ns as f64 / 1e6);
    match format {
        Format::Table => table(rows, time.as_deref()),
        Format::Csv(sep) => rows
            .iter()
            .map(|c| {
                let cgroup = people::escape_also(&c.cgroup, |ch| sep.contains(ch));
                let by = people::escape_also(&c.by, |ch| sep.contains(ch));
                let fields = [
                    CSV_MARK.into(),
                    cgroup,
                    by,
                    msec(c),
                    c.preemptions.to_string(),
                ];
                let mut all: Vec<String> = time.iter().cloned().collect();
                all.extend(fields);
                all.join(sep)
            })
            .collect(),
        Format::Json => rows
            .iter()
            .map(|c| {
                let mut obj = serde_json::Map::new();
                if let Some(t) = &time {
                    obj.insert("interval".into(), serde_json::json!(t.parse::<f64>().ok()));
                }
                obj.insert("cgroup".into(), c.cgroup.clone().into());
                obj.insert("waited-behind".into(), c.by.clone().into());
                obj.insert(
                    "wait-msec".into(),
                    serde_json::json!(c.wait_ns as f64 / 1e6),
                );
                obj.insert("preemptions".into(), c.preemptions.into());
                serde_json::Value::Object(obj).to_string()
            })
            .collect(),
    }
}

/// The view as a table of bperf's own, after a blank line: its cells' control
/// characters escaped.
fn table(rows: &[Culprit], time: Option<&str>) -> Vec<String> {
    let mut columns = Vec::new();
    if time.is_some() {
        columns.push(Column::number("time"));
    }
    columns.extend([Column::text("cgroup"), Column::text("waited behind")]);
    columns.extend([Column::number("wait msec"), Column::number("preemptions")]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|c| {
            let mut row: Vec<String> = time.iter().map(|t| t.to_string()).collect();
            row.push(people::escape_controls(&c.cgroup));
            row.push(people::escape_controls(&c.by));
            row.push(format!("{:.2}", c.wait_ns as f64 / 1e6));
            row.push(c.preemptions.to_string());
            row
        })
        .collect();
    let drawn = people::draw(&columns, &cells);
    std::iter::once(String::new())
        .chain(drawn.lines().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Culprit> {
        vec![
            Culprit {
                cgroup: "web".into(),
                by: "db,1".into(),
                wait_ns: 1_500_000,
                preemptions: 3,
            },
            Culprit {
                cgroup: "db\n".into(),
                by: "/other".into(),
                wait_ns: 0,
                preemptions: 1,
            },
        ]
    }

    #[test]
    fn the_view_prints_in_each_format() {
        let csv = lines(&rows(), &Format::Csv(",".into()), None);
        assert_eq!(csv[0], "culprit,web,db\\x2c1,1.50,3");
        assert_eq!(csv[1], "culprit,db\\n,/other,0.00,1");
        let csv = lines(
            &rows(),
            &Format::Csv(";".into()),
            Some(Duration::from_millis(1500)),
        );
        assert_eq!(csv[0], "1.500000000;culprit;web;db,1;1.50;3");
        let json = lines(&rows(), &Format::Json, Some(Duration::from_secs(2)));
        let v: serde_json::Value = serde_json::from_str(&json[1]).unwrap();
        assert_eq!(v["cgroup"], "db\n");
        assert_eq!(v["waited-behind"], "/other");
        assert_eq!(v["preemptions"], 1);
        assert_eq!(v["interval"], 2.0);
        let table = lines(&rows(), &Format::Table, None);
        assert_eq!(table[0], "");
        assert!(table[1].contains("waited behind"), "{table:?}");
        assert!(table
            .iter()
            .any(|l| l.contains("db\\n") && l.ends_with('1')));
        assert!(lines(&[], &Format::Table, None).is_empty());
    }
}
