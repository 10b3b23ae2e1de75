//! Events, lines and options the report's tests print.

use std::time::Duration;

use super::{Footer, Format, Line, Options, Report, Value};
use crate::event::Event;
use crate::metrics::Use;
use crate::perf_version::PerfVersion;
use crate::reading::Reading;

pub(super) fn ev(name: &str, type_: u32, config: u64) -> Event {
    Event::plain(name, type_, config)
}

pub(super) fn events() -> Vec<Event> {
    vec![ev("task-clock", 1, 1), ev("cs", 1, 3), ev("cycles", 0, 0)]
}

pub(super) fn counted(
    event: usize,
    counter: u64,
    run: u64,
    cg: Option<&str>,
    cpu: Option<u32>,
) -> Line {
    Line {
        event,
        cgroup: cg.map(str::to_string),
        container: None,
        cpu,
        place: None,
        value: Value::Counted(Reading {
            counter,
            enabled: 1_000_000_000,
            running: run,
        }),
    }
}

pub(super) fn lines(cg: Option<&str>) -> Vec<Line> {
    vec![
        counted(0, 1_013_750_000, 1_000_000_000, cg, None),
        counted(1, 75_000, 1_000_000_000, cg, None),
        Line {
            event: 2,
            cgroup: cg.map(str::to_string),
            container: None,
            cpu: None,
            place: None,
            value: Value::NotSupported,
        },
    ]
}

pub(super) fn opts(format: Format) -> Options {
    Options {
        format,
        thousands: Some(",".into()),
        interval: None,
        per_cpu: false,
        aggr: None,
        per_thread: false,
        target: None,
        summary: false,
        csv_summary_prefix: true,
        null_run: false,
        interval_clear: false,
        runs: 1,
        no_scale: false,
        verbose: false,
        run_table: Vec::new(),
        metrics: Vec::new(),
        metric_only: false,
        quiet: false,
        cgroup_rows: false,
        forever: false,
        nmi_watchdog: false,
        extra_lines: Vec::new(),
        version: PerfVersion::V6_12,
        default_metrics: false,
        timed_targets: true,
    }
}

pub(super) fn render(o: Options, f: impl FnOnce(&mut Report<Vec<u8>>)) -> String {
    let mut r = Report::new(o, Vec::new());
    f(&mut r);
    String::from_utf8(r.out).unwrap()
}

/// The summary, in `format`, of one line of container `name`'s cgroup.
pub(super) fn container_summary(name: &str, format: Format) -> String {
    let l = vec![Line {
        container: Some(name.into()),
        ..counted(1, 75_000, 1_000_000_000, Some("docker/3474383178be"), None)
    }];
    render(opts(format), |r| {
        r.summary(&events(), &l, &one_second()).unwrap()
    })
}

pub(super) fn cgroup_summary(cgroup: &str, format: Format) -> String {
    let l = vec![counted(1, 75_000, 1_000_000_000, Some(cgroup), None)];
    render(opts(format), |r| {
        r.summary(&events(), &l, &one_second()).unwrap()
    })
}

pub(super) fn named(names: &str, events: &[usize]) -> Vec<Use> {
    crate::metrics::parse_list(names)
        .unwrap()
        .into_iter()
        .map(|def| Use {
            def,
            shown_on: events[0],
            events: events.to_vec(),
        })
        .collect()
}

pub(super) fn one_second() -> Footer {
    Footer {
        elapsed: Duration::from_secs(1),
        ..Footer::default()
    }
}

pub(super) fn half_second() -> Footer {
    Footer {
        elapsed: Duration::from_millis(500),
        ..Footer::default()
    }
}
