//! `bperf serve`: counts until stopped and exports the counts for Prometheus, read
//! afresh at every scrape (HTTP /metrics) and at every write of the textfile.
//!
//! One thread owns the counter and answers everything in turn: scrapes (sent by the
//! HTTP thread), textfile ticks, changes of the cgroup tree and signals. The BPF side
//! counts whatever the threads do; a scrape only flushes and reads.

mod exposition;
mod http;
mod runq;
mod textfile;

use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use signal_hook::consts::SIGHUP;

pub use exposition::{ExpositionFormat, Family, FamilyType, Sample, SampleValue};

use crate::bpf::runq::Runq;
use crate::cgroup::Cgroup;
use crate::cli::ServeArgs;
use crate::counter::Counter;
use crate::event::Event;
use crate::reading::{Reading, Snapshot};
use crate::session::containers::ContainerNames;
use crate::session::{self, LiveCgroups, Open, Plan};
use crate::UsageError;
use textfile::{check_textfile_dir, write_atomically, WriteFailure};

/// Where bperf listens when told nothing: Prometheus's port for exporters like this,
/// on loopback only.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

/// A scrape: the metrics in this format, sent back to the HTTP server's task that waits
/// for them (or why they could not be encoded).
pub struct Scrape(
    pub ExpositionFormat,
    pub tokio::sync::oneshot::Sender<Result<String, String>>,
);

/// What wakes the counting thread: a scrape; the cgroup tree changed, or SIGHUP asked
/// to read it again; SIGTERM or SIGINT: stop.
pub type Wake = session::Wake<Scrape>;

pub fn run(a: &ServeArgs) -> Result<i32> {
    let mut plan = Plan::new(&a.request())?;
    plan.warnings.iter().for_each(|w| eprintln!("{w}"));
    let runq_series = runq_series(a, &plan)?;
    let listen = match (&a.listen, &a.textfile) {
        (Some(l), _) => Some(l.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(DEFAULT_LISTEN.to_string()),
    };
    if let Some(dir) = &a.textfile {
        check_textfile_dir(dir)?;
    }
    let (tx, wakes) = mpsc::channel();
    // Listening first: a port in use is said before anything is loaded.
    let server = match &listen {
        Some(addr) => Some(http::serve(addr, tx.clone())?),
        None => None,
    };
    session::forward_signals(tx.clone())?;
    let mut storage = MaybeUninit::uninit();
    let mut runq_storage = MaybeUninit::uninit();
    let runq = match runq_series {
        true => Some(session::runq::load(&plan, &mut runq_storage)?),
        false => None,
    };
    let how = Open {
        inherit: true,
        verbose: a.verbose.level,
        warn: crate::session::Warn(crate::to_stderr),
        trace: (a.verbose.level >= 2).then_some(&crate::to_stderr as &dyn Fn(&str)),
        name_user_only: true,
        runq: runq.as_ref().and_then(Runq::counter_maps),
        ..Open::default()
    };
    let counter = session::open_counter(&mut plan, &how, &mut storage)?;
    say_unsupported(&plan, &counter);
    let live = session::follow_cgroups(&plan, &tx)?;
    if let Some(s) = &server {
        eprintln!("bperf: serving metrics on http://{}/metrics", s.addr);
    }
    let mut containers = ContainerNames::system();
    containers.add(&plan.cgroups).say();
    let mut exporter = Exporter {
        plan: &plan,
        counter,
        runq,
        live,
        containers,
        per_cpu: a.no_aggr,
        verbose: a.verbose.level,
        unseen: Outputs::default(),
        outputs: Outputs {
            http: server.is_some(),
            textfile: a.textfile.is_some(),
        },
    };
    let textfile = a
        .textfile
        .as_ref()
        .map(|dir| (dir.join("bperf.prom"), Duration::from_millis(a.interval)));
    let result = exporter.serve(&wakes, textfile.as_ref().map(|(p, i)| (p.as_path(), *i)));
    if let Some((path, _)) = &textfile {
        let _ = std::fs::remove_file(path);
    }
    drop(server);
    result.map(|()| 0)
}

/// Whether serve exports the run-queue series: by default wherever cgroups are counted,
/// unless --no-runq; --runq without cgroups is an error.
fn runq_series(a: &ServeArgs, plan: &Plan) -> Result<bool> {
    let per_cgroup = !plan.cgroups.is_empty() || plan.live.is_some();
    if a.runq && !per_cgroup {
        return Err(UsageError(
            "--runq counts per cgroup: give --for-each-cgroup, --all-cgroups or --for-each-container".into(),
        )
        .into());
    }
    Ok(per_cgroup && !a.no_runq)
}

/// Says which of the plan's events the counter cannot count here: they are not exported.
fn say_unsupported(plan: &Plan, counter: &Counter) {
    for (i, e) in plan.events.iter().enumerate() {
        if !counter.supported(i) {
            eprintln!(
                "bperf: event '{}' is not supported here: not exported",
                e.name
            );
        }
    }
}

/// The counter and what it counts, exported on request.
struct Exporter<'a, 'obj> {
    plan: &'a Plan,
    counter: Counter<'obj>,
    /// --runq: the run-queue program, its slots the counter's.
    runq: Option<Runq<'obj>>,
    live: Option<LiveCgroups>,
    /// The containers among the cgroups, whose series carry their labels.
    containers: ContainerNames,
    per_cpu: bool,
    verbose: u8,
    /// The outputs (HTTP, textfile) that have not exported since cgroups were last
    /// removed: removed cgroups are exported until each output has shown them.
    unseen: Outputs,
    outputs: Outputs,
}

/// A set of outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Outputs {
    http: bool,
    textfile: bool,
}

impl Exporter<'_, '_> {
    /// Answers wakes until told to stop, writing `textfile` (path, interval) on time.
    fn serve(
        &mut self,
        wakes: &mpsc::Receiver<Wake>,
        textfile: Option<(&Path, Duration)>,
    ) -> Result<()> {
        self.refresh_cgroups()?;
        let mut next_write = textfile.map(|(_, every)| Instant::now() + every);
        let mut textfile_failure = WriteFailure::default();
        loop {
            match session::wait_until(wakes, next_write) {
                // SIGHUP reads the cgroup tree again; SIGTERM and SIGINT stop serving.
                Some(Wake::Signal(SIGHUP) | Wake::Cgroups) => self.refresh_cgroups()?,
                Some(Wake::Signal(_)) => return Ok(()),
                // Serve starts no command and watches no process.
                Some(Wake::Exited(..) | Wake::TargetsEnded | Wake::Control(_)) => {}
                Some(Wake::Request(Scrape(format, reply))) => {
                    self.unseen.http = false;
                    let text = exposition::encode(&self.families()?, format);
                    if let Err(e) = &text {
                        eprintln!("bperf: {e}");
                    }
                    // A scraper that gave up is no error.
                    let _ = reply.send(text);
                }
                None => {
                    let (path, every) = textfile.expect("a write is due only with a textfile");
                    // A failed write counts as shown too: removed cgroups do not wait
                    // for a disk that may never come back.
                    self.unseen.textfile = false;
                    let written = exposition::encode(&self.families()?, ExpositionFormat::Text)
                        .and_then(|text| {
                            write_atomically(path, &text).map_err(|e| format!("{e:#}"))
                        });
                    if let Some(say) = textfile_failure.note(written, path) {
                        eprintln!("bperf: {say}");
                    }
                    next_write = next_write.map(|t| (t + every).max(Instant::now()));
                }
            }
        }
    }

    fn refresh_cgroups(&mut self) -> Result<()> {
        if let Some(live) = &mut self.live {
            let (changes, notes) = live.refresh(&mut self.counter)?;
            notes.say();
            if let Some(runq) = &self.runq {
                session::runq::follow(runq, &changes)?;
            }
            if !changes.removed.is_empty() {
                self.unseen = self.outputs;
            }
            self.containers
                .add(changes.added.iter().map(|(_, cg)| cg))
                .say();
        }
        Ok(())
    }

    /// The metrics as of now. Removed cgroups are in them once, with their final counts.
    fn families(&mut self) -> Result<Vec<Family>> {
        let t = Instant::now();
        let snap = self.counter.read()?;
        if self.verbose > 0 {
            eprintln!("bperf: flush+read took {} us", t.elapsed().as_micros());
        }
        // Containers whose runtime did not list them yet when their cgroup came.
        self.containers.name_unnamed().1.say();
        let cgroups: Vec<(usize, &Cgroup)> = match &self.live {
            Some(live) => live.reported(),
            None => self.plan.cgroups.iter().enumerate().collect(),
        };
        let rows: Vec<Row> = match self.plan.cgroups.is_empty() && self.live.is_none() {
            true => vec![(0, Vec::new())],
            false => cgroups
                .into_iter()
                .map(|(slot, cg)| (slot, self.labels_of(cg)))
                .collect(),
        };
        let counter = &self.counter;
        let counted = Exported {
            events: &self.plan.events,
            cpus: &self.plan.cpus,
            supported: &|e| counter.supported(e),
            per_cpu: self.per_cpu,
        };
        let mut out = counted.families(&rows, &snap);
        if let Some(runq) = &self.runq {
            out.extend(runq::families(&rows, &runq.read()?));
        }
        if let Some(live) = &mut self.live {
            out.push(gauge(
                "bperf_cgroups",
                "Cgroups counted, those removed since the last export included.",
                rows.len() as u64,
            ));
            out.push(gauge(
                "bperf_cgroups_left_out",
                "Cgroups not counted because --max-cgroups were counted already.",
                live.left_out() as u64,
            ));
            if self.unseen == Outputs::default() && live.release_gone() {
                // Places freed for cgroups left out: they are counted from now on.
                self.refresh_cgroups()?;
            }
            if let Some(live) = &self.live {
                let kept: Vec<u64> = live.reported().iter().map(|(_, cg)| cg.id).collect();
                self.containers.retain(&kept);
            }
        }
        Ok(out)
    }
}

impl Exporter<'_, '_> {
    /// The labels of cgroup `cg`'s series: `cgroup`, and a container's labels when it
    /// is a container's own cgroup.
    fn labels_of(&self, cg: &Cgroup) -> Vec<(&'static str, String)> {
        let name = crate::cgroup::path_name(&cg.path);
        let name = crate::output::people::bytes_as_text(&name).into_owned();
        let mut labels = vec![("cgroup", name)];
        if let Some(c) = self.containers.get(cg.id) {
            labels.extend(c.pairs());
        }
        labels
    }
}

/// One row of series: its slot and its labels besides `event` and `cpu`.
pub type Row = (usize, Vec<(&'static str, String)>);

fn gauge(name: &'static str, help: &'static str, v: u64) -> Family {
    Family {
        name,
        help,
        kind: FamilyType::Gauge,
        samples: vec![Sample {
            labels: Vec::new(),
            value: SampleValue::Int(v),
        }],
    }
}

/// What was counted, and how to export it.
pub struct Exported<'a> {
    pub events: &'a [Event],
    pub cpus: &'a [u32],
    pub supported: &'a dyn Fn(usize) -> bool,
    /// One series per CPU (a cpu label) rather than their sum.
    pub per_cpu: bool,
}

impl Exported<'_> {
    /// The count, enabled and running time of every event the machine counts, for each
    /// row (slot, cgroup label) of `snap`.
    pub fn families(&self, rows: &[Row], snap: &Snapshot) -> Vec<Family> {
        let mut count = Vec::new();
        let mut enabled = Vec::new();
        let mut running = Vec::new();
        for (slot, row_labels) in rows {
            for (e, event) in self.events.iter().enumerate() {
                if !(self.supported)(e) {
                    continue;
                }
                for (cpu, r) in self.readings(snap, *slot, e) {
                    let mut labels = vec![("event", event.name.clone())];
                    labels.extend(row_labels.iter().cloned());
                    labels.extend(cpu.map(|c| ("cpu", c.to_string())));
                    let sample = |value| Sample {
                        labels: labels.clone(),
                        value,
                    };
                    count.push(sample(SampleValue::Int(r.counter)));
                    enabled.push(sample(SampleValue::Float(r.enabled as f64 / 1e9)));
                    running.push(sample(SampleValue::Float(r.running as f64 / 1e9)));
                }
            }
        }
        vec![
            Family {
                name: "bperf_count",
                help: "Events counted since bperf started (task-clock and cpu-clock in ns), not scaled for multiplexing.",
                kind: FamilyType::Counter,
                samples: count,
            },
            Family {
                name: "bperf_enabled_seconds",
                help: "Time the event was enabled while counting for the series.",
                kind: FamilyType::Counter,
                samples: enabled,
            },
            Family {
                name: "bperf_running_seconds",
                help: "Time the event was on the PMU while counting for the series (less than enabled when multiplexed).",
                kind: FamilyType::Counter,
                samples: running,
            },
        ]
    }

    /// The readings of `event` in `slot`: each CPU's, or their sum.
    fn readings(&self, snap: &Snapshot, slot: usize, event: usize) -> Vec<(Option<u32>, Reading)> {
        match self.per_cpu {
            true => self
                .cpus
                .iter()
                .enumerate()
                .map(|(pos, &cpu)| (Some(cpu), snap.get(slot, event, pos)))
                .collect(),
            false => vec![(None, snap.total(slot, event))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_event_and_cpu_is_a_series() {
        let sysfs = crate::test_fixtures::sysfs_at(format!(
            "{}/tests/fixtures/sysfs/intel/devices",
            env!("CARGO_MANIFEST_DIR")
        ));
        let events =
            crate::event::parse_events("task-clock,context-switches,page-faults", &sysfs).unwrap();
        let mut snap = Snapshot::new(2, 3, 2);
        let r = |n: u64| Reading {
            counter: n,
            enabled: 2_000_000_000,
            running: 1_000_000_000,
        };
        snap.set(1, 0, 0, r(5));
        snap.set(1, 0, 1, r(7));
        let supported = |e: usize| e != 2;
        let rows = vec![
            (0, vec![("cgroup", "/".to_string())]),
            (1, vec![("cgroup", "a/b".to_string())]),
        ];
        let counted = Exported {
            events: &events,
            cpus: &[0, 3],
            supported: &supported,
            per_cpu: false,
        };
        let f = counted.families(&rows, &snap);
        assert_eq!(f[0].samples.len(), 4, "page-faults is not supported");
        let ab = &f[0].samples[2];
        assert_eq!(
            ab.labels,
            vec![("event", "task-clock".into()), ("cgroup", "a/b".into())]
        );
        assert_eq!(ab.value, SampleValue::Int(12));
        assert_eq!(f[1].samples[2].value, SampleValue::Float(4.0));
        assert_eq!(f[2].samples[2].value, SampleValue::Float(2.0));
        let per_cpu = Exported {
            per_cpu: true,
            ..counted
        };
        let f = per_cpu.families(&rows, &snap);
        assert_eq!(f[0].samples.len(), 8);
        assert_eq!(f[0].samples[5].labels[2], ("cpu", "3".into()));
        assert_eq!(f[0].samples[5].value, SampleValue::Int(7));
    }
}
