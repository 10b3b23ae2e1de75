//! `bperf top`: a live view of every cgroup's counters. The counter and the live
//! cgroups are serve's (session module); every `-d` the counts since the last refresh
//! become the model's rows (model.rs), printed as text (`--batch`) or drawn full-screen
//! (screen.rs).

pub(crate) mod model;
mod screen;
mod text;

use std::io::{IsTerminal, Write};
use std::mem::MaybeUninit;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use signal_hook::consts::SIGHUP;

use crate::cli::TopArgs;
use crate::counter::Counter;
use crate::reading::Snapshot;
use crate::session::containers::ContainerNames;
use crate::session::runq::RunqCounts;
use crate::session::{self, LiveCgroups, Open, Plan};
use crate::{Notes, UsageError};
use model::Model;

/// How many culprits of the selected cgroup the view shows (--runq).
const CULPRITS_SHOWN: usize = 3;

/// What wakes top besides the counting session's wakes: the terminal's input.
pub type Wake = session::Wake<screen::TermEvent>;

pub fn run(a: &TopArgs) -> Result<i32> {
    if !a.batch && !std::io::stdout().is_terminal() {
        return Err(UsageError(
            "bperf top: stdout is not a terminal; use bperf top --batch, or bperf stat -a --all-cgroups -I 1000"
                .into(),
        )
        .into());
    }
    let mut plan = Plan::new(&a.request())?;
    plan.warnings.iter().for_each(|w| eprintln!("{w}"));
    let (tx, wakes) = mpsc::channel();
    session::forward_signals(tx.clone())?;
    let mut storage = MaybeUninit::uninit();
    let mut runq_storage = MaybeUninit::uninit();
    session::runq::check(&plan, false)?;
    // Loaded before the counters open, as stat loads it.
    let culprits = a.shows_runq().then_some(CULPRITS_SHOWN);
    let runq = RunqCounts::start(&plan, culprits, &mut runq_storage)?;
    let how = Open {
        inherit: true,
        verbose: a.verbose.level,
        warn: crate::session::Warn(crate::to_stderr),
        trace: (a.verbose.level >= 2).then_some(&crate::to_stderr as &dyn Fn(&str)),
        name_user_only: true,
        runq: runq.as_ref().and_then(RunqCounts::counter_maps),
        ..Open::default()
    };
    let counter = session::open_counter(&mut plan, &how, &mut storage)?;
    let live = session::follow_cgroups(&plan, &tx)?;
    let mut notes = Notes::default();
    let containers = a.cgroups.containers.then(|| {
        let mut names = ContainerNames::system();
        notes = names.add(&plan.cgroups);
        names
    });
    let mut top = Top {
        prev: Snapshot::new(0, 0, 0),
        now: Snapshot::new(0, 0, 0),
        slots: Vec::new(),
        prev_at: Instant::now(),
        window: Duration::ZERO,
        model: Model::new(&plan.events),
        plan: &plan,
        verbose: a.verbose.level,
        counter,
        runq,
        live,
        containers,
        notes,
    };
    top.model.tree = a.tree;
    top.counter.read_into(&mut top.prev)?;
    if let Some(runq) = &mut top.runq {
        runq.started()?;
        runq.fill(&mut top.prev)?;
    }
    top.prev_at = Instant::now();
    top.refresh_cgroups()?;
    match a.batch {
        true => top.batch(&wakes, a.delay, a.iterations),
        false => screen::run(&mut top, tx, &wakes, a.delay, a.iterations),
    }
}

/// The counter, the cgroups it follows and the rows made of its counts.
pub struct Top<'a, 'obj> {
    plan: &'a Plan,
    counter: Counter<'obj>,
    /// --runq, bperf's own events: the run-queue program.
    runq: Option<RunqCounts<'obj>>,
    live: Option<LiveCgroups>,
    /// With --for-each-container, the names of the containers among the cgroups.
    containers: Option<ContainerNames>,
    /// The reading the last refresh ended with, and when it was taken.
    prev: Snapshot,
    prev_at: Instant,
    /// Where the next reading goes (kept to reuse its memory).
    now: Snapshot,
    /// The slots of the cgroups shown: those read.
    slots: Vec<usize>,
    /// The wall time the last refresh covered.
    window: Duration,
    pub model: Model,
    verbose: u8,
    /// What there is to say since the screen last took it: shown on the status line, or
    /// on stderr with --batch.
    notes: Notes,
}

impl Top<'_, '_> {
    /// Reads the counters: the model's rows become what was counted since the last
    /// refresh, per second of it.
    pub fn refresh(&mut self) -> Result<()> {
        let t = Instant::now();
        self.counter.read_slots_into(&self.slots, &mut self.now)?;
        if let Some(runq) = &self.runq {
            runq.fill_slots(&mut self.now, &self.slots)?;
        }
        let at = Instant::now();
        if self.verbose > 0 {
            let took = format!("flush+read took {} us", t.elapsed().as_micros());
            self.notes.0.push(took);
        }
        self.window = at - self.prev_at;
        let (now, prev, counter) = (&self.now, &self.prev, &self.counter);
        self.model
            .refresh(self.window.as_nanos() as f64, |slot, e| {
                counter
                    .supported(e)
                    .then(|| now.total(slot, e).since(&prev.total(slot, e)))
            });
        if let Some(runq) = &mut self.runq {
            let culprits = runq.culprits(&self.model.named_slots(), false)?;
            self.model
                .set_culprits(&culprits, self.window.as_nanos() as f64);
        }
        std::mem::swap(&mut self.prev, &mut self.now);
        self.prev_at = at;
        // Removed cgroups were shown once more with their final counts: they go, and
        // cgroups left out for want of a place may take theirs.
        if let Some(live) = self.live.as_mut().filter(|l| l.any_gone()) {
            match live.release_gone() {
                true => self.refresh_cgroups()?,
                false => self.set_rows(),
            }
        }
        if let Some(names) = &mut self.containers {
            let (named, notes) = names.name_unnamed();
            self.notes.0.extend(notes.0);
            if named {
                self.set_rows();
            }
        }
        Ok(())
    }

    /// What there is to say since the last time it was taken.
    pub(crate) fn take_notes(&mut self) -> Notes {
        std::mem::take(&mut self.notes)
    }

    /// Follows the cgroup tree after it changed: new cgroups are counted from zero.
    pub(crate) fn refresh_cgroups(&mut self) -> Result<()> {
        if let Some(live) = &mut self.live {
            let (changes, notes) = live.refresh(&mut self.counter)?;
            self.notes.0.extend(notes.0);
            if let Some(runq) = &mut self.runq {
                runq.follow(&changes)?;
            }
            for (slot, _) in &changes.added {
                self.prev.clear_slot(*slot);
            }
            if let Some(names) = &mut self.containers {
                let notes = names.add(changes.added.iter().map(|(_, cg)| cg));
                self.notes.0.extend(notes.0);
            }
        }
        self.set_rows();
        Ok(())
    }

    /// The model's rows: the cgroups reported, their paths (`/` for the root) and
    /// containers.
    fn set_rows(&mut self) {
        let reported: Vec<(usize, &crate::cgroup::Cgroup)> = match &self.live {
            Some(live) => live.reported(),
            None => self.plan.cgroups.iter().enumerate().collect(),
        };
        let containers = self.containers.as_ref();
        let rows = reported
            .into_iter()
            .map(|(slot, cg)| {
                let labels = containers.and_then(|c| c.get(cg.id));
                model::Cgroup {
                    id: cg.id,
                    slot,
                    path: crate::cgroup::path_name(&cg.path),
                    container: labels.map(|l| l.display()),
                    image: labels.and_then(|l| l.image.clone()),
                }
            })
            .collect();
        self.model.set_cgroups(rows);
        self.slots = self.model.slots().collect();
        if let (Some(names), Some(live)) = (&mut self.containers, &self.live) {
            let kept: Vec<u64> = live.reported().iter().map(|(_, cg)| cg.id).collect();
            names.retain(&kept);
        }
    }

    /// The kind of each column's event.
    pub fn kinds(&self) -> Vec<crate::output::metric::Kind> {
        text::kinds(&self.plan.events, &self.model.columns)
    }

    /// The header's facts: the window, CPUs and cgroups.
    pub fn header(&self) -> text::ScreenHeader {
        text::ScreenHeader {
            window: self.window,
            cpus: self.plan.cpus.len(),
            cgroups: self.model.nr_rows(),
            left_out: self.live.as_ref().map_or(0, |l| l.left_out()),
        }
    }

    /// --batch: `iterations` refreshes (or until a signal), each printed as text.
    fn batch(
        &mut self,
        wakes: &mpsc::Receiver<Wake>,
        every: Duration,
        iterations: Option<u64>,
    ) -> Result<i32> {
        let mut out = std::io::stdout().lock();
        let mut next = Instant::now() + every;
        let mut done = 0;
        while iterations.is_none_or(|n| done < n) {
            self.take_notes().say();
            match session::wait_until(wakes, Some(next)) {
                Some(Wake::Signal(SIGHUP) | Wake::Cgroups) => self.refresh_cgroups()?,
                Some(Wake::Signal(_)) => break,
                Some(_) => {}
                None => {
                    self.refresh()?;
                    let page = text::page(&self.header(), &self.model, &self.kinds());
                    out.write_all(page.as_bytes())
                        .and_then(|()| out.flush())
                        .context("cannot write to stdout")?;
                    done += 1;
                    next = (next + every).max(Instant::now());
                }
            }
        }
        self.take_notes().say();
        Ok(0)
    }
}
