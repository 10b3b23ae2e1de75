//! How long the report takes to format one interval of many lines (run by bench/run):
//! 1000 cgroups x 4 events x 64 CPUs with -A, 256,000 lines by default, in perf's table,
//! CSV and JSON. Prints one line per format with the median of 5 rounds in ms.
//!
//!   format_bench [CGROUPS EVENTS CPUS]

use std::time::{Duration, Instant};

use bperf::event::Event;
use bperf::output::{Format, Line, Options, Report, Value};
use bperf::reading::Reading;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let (cgroups, nr_events, cpus) = match args[..] {
        [g, e, c] => (g, e, c),
        _ => (1000, 4, 64),
    };
    let events: Vec<Event> = [
        ("task-clock", 1),
        ("context-switches", 3),
        ("page-faults", 2),
    ]
    .iter()
    .chain(&[("cpu-clock", 0)])
    .cycle()
    .take(nr_events)
    .map(|&(name, config)| Event::plain(name, 1, config))
    .collect();
    let lines = interval_lines(cgroups, nr_events, cpus);
    for (name, format) in [
        ("table", Format::Table),
        ("csv", Format::Csv(",".into())),
        ("json", Format::Json),
    ] {
        let mut rounds: Vec<Duration> =
            (0..5).map(|_| time_one(&format, &events, &lines)).collect();
        rounds.sort();
        println!(
            "format {name}: {} lines in {:.1} ms",
            lines.len(),
            rounds[2].as_secs_f64() * 1e3
        );
    }
}

/// One interval's lines, in the report's order: cgroup, event, CPU.
fn interval_lines(cgroups: usize, nr_events: usize, cpus: usize) -> Vec<Line> {
    let mut lines = Vec::with_capacity(cgroups * nr_events * cpus);
    for g in 0..cgroups {
        let cgroup = format!("system.slice/job-{g}.service");
        for event in 0..nr_events {
            for cpu in 0..cpus {
                let n = (g * 7919 + event * 104_729 + cpu * 13) as u64;
                lines.push(Line {
                    event,
                    cgroup: Some(cgroup.clone()),
                    cpu: Some(cpu as u32),
                    place: None,
                    value: Value::Counted(Reading {
                        counter: n * 1_000,
                        enabled: 1_000_000_000,
                        running: 1_000_000_000,
                    }),
                });
            }
        }
    }
    lines
}

/// Formats one interval to a sink; how long that took.
fn time_one(format: &Format, events: &[Event], lines: &[Line]) -> Duration {
    let options = Options {
        format: format.clone(),
        thousands: Some(",".into()),
        interval: Some(Duration::from_secs(1)),
        per_cpu: true,
        ..Options::default()
    };
    let mut report = Report::new(options, std::io::sink());
    let t = Instant::now();
    report
        .interval(Duration::from_secs(1), events, lines)
        .expect("a sink takes everything");
    t.elapsed()
}
