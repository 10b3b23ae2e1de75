//! bperf's own events (bperf/runq-wait/, bperf/preemptions/), for stat and top: what
//! the run-queue program counts for each cgroup on each CPU, put into each snapshot in
//! place of the dummy event each is opened as; and stat --culprits' rows of whom each
//! cgroup waited behind.

use std::collections::HashMap;
use std::mem::MaybeUninit;

use anyhow::Result;
use libbpf_rs::OpenObject;

use crate::bpf::runq::{self, Runq, Wait, Waits, OTHER};
use crate::counter::Counter;
use crate::event::Tool;
use crate::output::runq::Culprit;
use crate::reading::{Reading, Snapshot};
use crate::session::plan::Plan;
use crate::session::slots::Changes;
use crate::UsageError;

/// The run-queue program of a run and where its counts go in a snapshot.
pub(crate) struct RunqCounts<'obj> {
    runq: Runq<'obj>,
    /// Each of bperf's own events: its index among the events.
    events: Vec<(usize, Tool)>,
    /// The place in a snapshot of each possible CPU (None: a CPU not counted).
    place_of_cpu: Vec<Option<usize>>,
    /// What each slot had counted on each CPU when counting started.
    base: Vec<Vec<Wait>>,
    /// --culprits: how many culprits of each cgroup to show.
    top: Option<usize>,
    /// The reading counting started with, and the one the last interval ended with.
    first: Waits,
    last: Waits,
}

/// The run-queue object for `plan`'s cgroups, in the counter's slots: those of the
/// plan now, and room for those that come later (see [`follow`]). Loaded before the
/// counter opens: where the counter's switch program can count into its maps (see
/// [`Runq::counter_maps`], for [`Open`](super::Open)'s `runq`), it has no programs of
/// its own.
pub fn load<'obj>(plan: &Plan, storage: &'obj mut MaybeUninit<OpenObject>) -> Result<Runq<'obj>> {
    let ids: Vec<u64> = plan.cgroups.iter().map(|c| c.id).collect();
    let nr_slots = plan.live.as_ref().map_or(ids.len(), |l| l.capacity);
    let config = runq::RunqConfig {
        cgroups: &ids,
        nr_slots,
        cgroup_v1: plan.cgroup_v1,
        max_pairs: runq::pairs_for(nr_slots),
        programs: !crate::counter::charges_runq(plan.shared.is_some()),
    };
    Runq::load(&config, storage)
}

/// Counts `plan`'s cgroups' run-queue wait and preemptions by culprit, as serve --runq
/// does, with the counter of `plan`'s events, whose switch program charges the
/// run-queue maps where it can (see [`load`]). Read the counter before the run-queue
/// object: a counter's read adds to the culprit matrix what each CPU holds back. For
/// tests and benchmarks; dropping the two stops it.
pub fn count<'obj>(
    plan: &mut Plan,
    runq_storage: &'obj mut MaybeUninit<OpenObject>,
    counter_storage: &'obj mut MaybeUninit<OpenObject>,
) -> Result<(Runq<'obj>, Counter<'obj>)> {
    let runq = load(plan, runq_storage)?;
    let how = super::Open {
        inherit: true,
        runq: runq.counter_maps(),
        ..super::Open::default()
    };
    let counter = super::open_counter(plan, &how, counter_storage)?;
    Ok((runq, counter))
}

/// Follows the counter's cgroups as they change: removed ones charge nothing more,
/// added ones count in their slots from nothing.
pub fn follow(runq: &Runq, changes: &Changes) -> Result<()> {
    changes
        .removed
        .iter()
        .for_each(|(_, cg)| runq.remove_cgroup(cg.id));
    for (slot, cg) in &changes.added {
        runq.assign(cg.id, *slot)?;
    }
    Ok(())
}

/// bperf's own events of `plan`: each one's index among the events.
fn own_events(plan: &Plan) -> Vec<(usize, Tool)> {
    plan.events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.tool.filter(|t| !t.is_perfs()).map(|t| (i, t)))
        .collect()
}

/// Refuses bperf's own events and `culprits` (stat's --culprits) where they cannot
/// count: they count each cgroup's tasks on the CPUs counted (--for-each-cgroup,
/// --all-cgroups or --for-each-container).
pub fn check(plan: &Plan, culprits: bool) -> Result<()> {
    let asked = own_events(plan).first().map(|(_, t)| t.name());
    let Some(what) = asked.or(culprits.then_some("--culprits")) else {
        return Ok(());
    };
    let per_cgroup = plan.cgroup_rows && (!plan.cgroups.is_empty() || plan.live.is_some());
    match per_cgroup && !plan.task_mode {
        true => Ok(()),
        false => Err(UsageError(format!(
            "{what} counts per cgroup: give -a with --for-each-cgroup, --all-cgroups or --for-each-container"
        ))
        .into()),
    }
}

impl<'obj> RunqCounts<'obj> {
    /// Loads the run-queue program when `plan` counts bperf's own events or `top`
    /// culprits are asked for (None otherwise), the plan's cgroups in the counter's
    /// slots: as many slots as the counter has (more than the plan's cgroups when
    /// cgroups come and go).
    pub fn start(
        plan: &Plan,
        top: Option<usize>,
        storage: &'obj mut MaybeUninit<OpenObject>,
    ) -> Result<Option<Self>> {
        let events = own_events(plan);
        if events.is_empty() && top.is_none() {
            return Ok(None);
        }
        let runq = load(plan, storage)?;
        let nr_cpus = libbpf_rs::num_possible_cpus()?;
        let mut place_of_cpu = vec![None; nr_cpus];
        for (place, &cpu) in plan.cpus.iter().enumerate() {
            if let Some(p) = place_of_cpu.get_mut(cpu as usize) {
                *p = Some(place);
            }
        }
        Ok(Some(RunqCounts {
            runq,
            events,
            place_of_cpu,
            base: Vec::new(),
            top,
            first: Waits::default(),
            last: Waits::default(),
        }))
    }

    /// The maps the counter is to charge (see [`load`]).
    pub fn counter_maps(&self) -> Option<runq::RunqMaps<'_>> {
        self.runq.counter_maps()
    }

    /// Counting starts: what was counted before (while the counters opened) is not.
    pub fn started(&mut self) -> Result<()> {
        self.base = (0..self.runq.nr_slots())
            .map(|slot| self.runq.read_per_cpu(slot))
            .collect::<Result<_>>()?;
        self.first = self.runq.read()?;
        self.last = self.first.clone();
        Ok(())
    }

    /// Follows the counter's cgroups as they change (see [`follow`]); what the new
    /// cgroups' slots counted before is forgotten here too.
    pub fn follow(&mut self, changes: &Changes) -> Result<()> {
        for (slot, _) in &changes.added {
            if let Some(base) = self.base.get_mut(*slot) {
                base.clear();
            }
            self.first.clear_slot(*slot);
            self.last.clear_slot(*slot);
        }
        follow(&self.runq, changes)
    }

    /// --culprits' rows for the cgroups of `rows` (slot, name) since the last interval
    /// (`whole`: since counting started); none without --culprits.
    pub fn culprits(&mut self, rows: &[(usize, String)], whole: bool) -> Result<Vec<Culprit>> {
        let Some(top) = self.top else {
            return Ok(Vec::new());
        };
        let now = self.runq.read()?;
        let since = now.since(if whole { &self.first } else { &self.last });
        self.last = now;
        Ok(top_culprits(rows, &since, top))
    }

    /// Puts the counts so far into `snap`: each slot's wait and preemptions on each
    /// CPU, with the time the dummy event in their place was enabled.
    pub fn fill(&self, snap: &mut Snapshot) -> Result<()> {
        let all: Vec<usize> = (0..snap.nr_slots()).collect();
        self.fill_slots(snap, &all)
    }

    /// [`fill`](Self::fill) for `slots` only (those read).
    pub(crate) fn fill_slots(&self, snap: &mut Snapshot, slots: &[usize]) -> Result<()> {
        let nr_slots = snap.nr_slots().min(self.runq.nr_slots());
        for &slot in slots.iter().filter(|&&s| s < nr_slots) {
            let base = self.base.get(slot);
            for (cpu, wait) in self.runq.read_per_cpu(slot)?.into_iter().enumerate() {
                let Some(place) = self.place_of_cpu.get(cpu).copied().flatten() else {
                    continue;
                };
                let before = base.and_then(|b| b.get(cpu)).copied().unwrap_or_default();
                let wait = wait.minus(before);
                for &(event, tool) in &self.events {
                    let counter = match tool {
                        Tool::RunqWait => wait.wait_ns,
                        _ => wait.preemptions,
                    };
                    // Never scaled: the program counts all the time.
                    let dummy = snap.get(slot, event, place);
                    let time = dummy.enabled.max(dummy.running);
                    let r = Reading {
                        counter,
                        enabled: time,
                        running: time,
                    };
                    snap.set(slot, event, place, r);
                }
            }
        }
        Ok(())
    }
}

/// Each cgroup of `rows` (slot, name) with its `top` culprits, the most waited behind
/// first: the cgroups of `rows` it waited behind, and OTHER for the rest; none behind
/// which it neither waited nor was preempted.
pub(crate) fn top_culprits(rows: &[(usize, String)], waits: &Waits, top: usize) -> Vec<Culprit> {
    let name_of: HashMap<usize, &str> = rows.iter().map(|(s, n)| (*s, n.as_str())).collect();
    let mut out = Vec::new();
    for (slot, cgroup) in rows {
        let (shown, rest) = waits.behind(*slot, |c| name_of.contains_key(&c));
        let mut behind: Vec<(&str, Wait)> = shown.iter().map(|(c, w)| (name_of[c], *w)).collect();
        behind.push((OTHER, rest));
        behind.retain(|(_, w)| *w != Wait::default());
        behind.sort_by_key(|(_, w)| std::cmp::Reverse((w.wait_ns, w.preemptions)));
        out.extend(behind.into_iter().take(top).map(|(by, w)| Culprit {
            cgroup: cgroup.clone(),
            by: by.to_string(),
            wait_ns: w.wait_ns,
            preemptions: w.preemptions,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn each_cgroup_shows_its_top_culprits_the_rest_as_other() {
        let rows = vec![(0, "web".to_string()), (2, "db".to_string())];
        let waits = Waits {
            total: vec![Wait::new(100, 9), Wait::new(5, 5), Wait::new(7, 1)],
            by: BTreeMap::from([
                ((0, 2), Wait::new(60, 2)),
                ((0, 1), Wait::new(30, 6)),
                ((2, 0), Wait::new(7, 1)),
            ]),
        };
        let got = top_culprits(&rows, &waits, 2);
        let view: Vec<(&str, &str, u64, u64)> = got
            .iter()
            .map(|c| (c.cgroup.as_str(), c.by.as_str(), c.wait_ns, c.preemptions))
            .collect();
        // Slot 1 is no row: its 30 ns are the other's, with the 10 the pairs leave.
        assert_eq!(
            view,
            [
                ("web", "db", 60, 2),
                ("web", OTHER, 40, 7),
                ("db", "web", 7, 1)
            ]
        );
        assert_eq!(top_culprits(&rows, &waits, 1).len(), 2);
        assert!(top_culprits(&rows, &waits, 0).is_empty());
    }
}
