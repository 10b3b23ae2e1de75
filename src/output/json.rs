//! -j: perf's JSON lines, one object a line.

use std::time::Duration;

use super::line::{Fields, Place};
use super::metric::{self, Metric};
use super::people;
use crate::perf_version::PerfVersion;

/// `s` as a JSON string: JSON's own escapes (`\n`, `\u001b`), which a JSON reader
/// undoes, and `\u007f`-style ones for DEL and the C1 controls, which JSON allows raw
/// but a terminal would take as controls; a byte a name carries that is not UTF-8 as
/// the text `\xNN` (see people::text_of_bytes).
pub(super) fn json_quote(s: &str) -> String {
    let quoted = serde_json::Value::String(people::bytes_as_text(s).into_owned()).to_string();
    match quoted.chars().any(char::is_control) {
        false => quoted,
        true => quoted
            .chars()
            .map(|c| match c.is_control() {
                true => format!("\\u{:04x}", c as u32),
                false => c.to_string(),
            })
            .collect(),
    }
}

/// The JSON members before the count: the time, and the CPU, thread or group of CPUs.
pub(super) fn json_where(ts: Option<Duration>, f: &Fields) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(ts) = ts {
        parts.push(format!(
            "\"interval\" : {}.{:09}",
            ts.as_secs(),
            ts.subsec_nanos()
        ));
    }
    if let Some(cpu) = f.cpu {
        parts.push(format!("\"cpu\" : \"{cpu}\""));
    }
    match f.place {
        Some(Place::Thread { comm, tid }) => {
            parts.push(format!(
                "\"thread\" : {}",
                json_quote(&format!("{comm}-{tid}"))
            ));
        }
        Some(Place::Group { mode, name, cpus }) => {
            parts.push(format!("\"{}\" : {}", mode.json_key(), json_quote(name)));
            // perf 7.2 calls the number of CPUs summed `counters`.
            let key = match f.version {
                PerfVersion::V6_12 => "aggregate-number",
                PerfVersion::V7_2 => "counters",
            };
            parts.push(format!("\"{key}\" : {cpus}"));
        }
        None => {}
    }
    parts
}

pub(super) fn json_line(ts: Option<Duration>, f: &Fields) -> String {
    let q = json_quote;
    let lead = json_where(ts, f);
    let mut parts = lead.clone();
    let value = match f.value {
        Some(v) => format!("{v:.6}"),
        None => f.status.to_string(),
    };
    parts.push(format!("\"counter-value\" : {}", q(&value)));
    parts.push(format!("\"unit\" : {}", q(f.unit)));
    parts.push(format!("\"event\" : {}", q(f.event)));
    if let Some(cg) = f.cgroup {
        parts.push(format!("\"cgroup\" : {}", q(cg)));
    }
    if let Some(c) = f.container {
        parts.push(format!("\"container\" : {}", q(c)));
    }
    if let Some(pct) = f.noise {
        parts.push(format!("\"variance\" : {pct:.2}"));
    }
    parts.push(format!("\"event-runtime\" : {}", f.run_ns));
    parts.push(format!("\"pcnt-running\" : {:.2}", f.pct));
    let mut shown = f.shown_metrics();
    match shown.next() {
        Some(m) => parts.extend(json_metric(m, f.version)),
        // perf 6.12 writes an empty metric for an event without one; 7.2 none.
        None if f.version == PerfVersion::V6_12 => parts.extend([
            "\"metric-value\" : \"0.000000\"".to_string(),
            "\"metric-unit\" : \"\"".to_string(),
        ]),
        None => {}
    }
    let mut out = format!("{{{}}}", parts.join(", "));
    for m in shown {
        let mut more = lead.clone();
        more.extend(json_metric(m, f.version));
        out.push_str(&format!("\n{{{}}}", more.join(", ")));
    }
    out
}

/// A metric's JSON members: its value and unit, and with perf 7.2 where its threshold
/// puts it (`good`, `bad`) when it has one and a value to compare.
fn json_metric(m: &Metric, version: PerfVersion) -> Vec<String> {
    let mut parts = vec![
        format!("\"metric-value\" : \"{}\"", metric::c_fixed(m.value, 6)),
        format!("\"metric-unit\" : {}", json_quote(&m.unit)),
    ];
    if let Some(t) = m.threshold.filter(|_| version != PerfVersion::V6_12) {
        parts.push(format!("\"metric-threshold\" : \"{t}\""));
    }
    parts
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Format;
    use crate::output::fixtures::*;

    #[test]
    fn json_lines_with_perfs_keys() {
        let ev = events();
        let l = lines(Some("web"));
        let footer = one_second();
        let out = render(opts(Format::Json), |r| r.summary(&ev, &l, &footer).unwrap());
        let first = out.lines().next().unwrap();
        assert_eq!(
            first,
            r#"{"counter-value" : "1013.750000", "unit" : "msec", "event" : "task-clock", "cgroup" : "web", "event-runtime" : 1000000000, "pcnt-running" : 100.00, "metric-value" : "1.013750", "metric-unit" : "CPUs utilized"}"#
        );
        let last = out.lines().last().unwrap();
        assert_eq!(
            last,
            r#"{"counter-value" : "<not supported>", "unit" : "", "event" : "cycles", "cgroup" : "web", "event-runtime" : 0, "pcnt-running" : 100.00, "metric-value" : "0.000000", "metric-unit" : ""}"#
        );
        let mut o = opts(Format::Json);
        o.interval = Some(Duration::from_secs(1));
        let l = vec![counted(1, 7, 1_000_000_000, None, Some(0))];
        let out = render(o, |r| r.interval(Duration::from_secs(2), &ev, &l).unwrap());
        assert!(
            out.starts_with(
                r#"{"interval" : 2.000000000, "cpu" : "0", "counter-value" : "7.000000""#
            ),
            "{out}"
        );
        for line in out.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v.is_object());
        }
    }
}
