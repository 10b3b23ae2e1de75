//! Live cgroups in a counting session: the tree is read again whenever it changes, new
//! cgroups are counted from then on, removed ones stop being counted (see
//! slots::LiveSlots for their slots), and the rows follow.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;

use super::containers::ContainerNames;
use super::plan::{LivePlan, Series};
use crate::cgroup::{Cgroup, Selection, Tree};
use crate::counter::Counter;
use crate::session::slots::{Changes, LiveSlots};
use crate::sys::cgroupfs::{self, Cgroupfs};
use crate::Notes;

/// The cgroups a session counts while the tree changes.
pub struct LiveCgroups {
    selection: Selection,
    tree: Cgroupfs,
    slots: LiveSlots,
    /// Cgroups left out at the last refresh.
    left_out: usize,
    /// The most ever said to be left out.
    left_out_said: LeftOutPeak,
    /// A change of the tree waits to be looked at: set by the watching thread, cleared
    /// by [`refresh`](Self::refresh).
    pending: Arc<AtomicBool>,
    /// What the watching thread had to say, given out by the next refresh.
    watch_notes: Arc<Mutex<Notes>>,
}

impl LiveCgroups {
    /// Starts from `initial`, slot i counting initial[i], and watches the tree: calls
    /// `changed` from another thread whenever it may have changed, until `changed`
    /// returns false. Changes that come while one is pending make no more calls.
    pub fn start(
        plan: &LivePlan,
        initial: &[Cgroup],
        changed: impl Fn() -> bool + Send + 'static,
    ) -> Result<LiveCgroups> {
        let live = LiveCgroups {
            selection: plan.selection.clone(),
            tree: Cgroupfs::new(cgroupfs::discover()?)?,
            slots: LiveSlots::new(initial, plan.capacity),
            left_out: 0,
            left_out_said: LeftOutPeak::default(),
            pending: Arc::new(AtomicBool::new(false)),
            watch_notes: Arc::default(),
        };
        let (flag, notes) = (live.pending.clone(), live.watch_notes.clone());
        let now = cgroupfs::watch(&live.tree.hierarchy().mount, move |said| {
            if !said.is_empty() {
                let mut notes = notes.lock().unwrap_or_else(|e| e.into_inner());
                notes.0.extend(said.0);
            }
            flag.swap(true, Ordering::SeqCst) || changed()
        })?;
        live.watch_notes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .extend(now.0);
        Ok(live)
    }

    /// Reads the tree again: counts new cgroups from now on, stops counting removed
    /// ones (they are reported once more, until [`release_gone`](Self::release_gone)).
    /// The changes, and what there is to say (cgroups left out, watches refused).
    pub fn refresh(&mut self, counter: &mut Counter) -> Result<(Changes, Notes)> {
        self.refresh_with(counter, |_, _| Ok(()))
    }

    /// [`refresh`](Self::refresh), calling `between` once the removed cgroups are no
    /// longer counted and before the new ones are (bperf record ends and begins them
    /// in its file there).
    pub(crate) fn refresh_with(
        &mut self,
        counter: &mut Counter,
        between: impl FnOnce(&Changes, &mut Counter) -> Result<()>,
    ) -> Result<(Changes, Notes)> {
        self.pending.store(false, Ordering::SeqCst);
        let mut notes =
            std::mem::take(&mut *self.watch_notes.lock().unwrap_or_else(|e| e.into_inner()));
        let now = self.selection.select(&self.tree)?;
        let changes = self.slots.update(&now);
        let added: Vec<(usize, u64)> = changes.added.iter().map(|(s, c)| (*s, c.id)).collect();
        let removed: Vec<u64> = changes.removed.iter().map(|(_, c)| c.id).collect();
        counter.remove_cgroups(&removed)?;
        between(&changes, counter)?;
        counter.add_cgroups(&added)?;
        if self.left_out_said.rises(changes.left_out) {
            notes.0.push(format!(
                "{} cgroups are not counted: all {} places are taken (--max-cgroups); their time counts in their counted ancestors",
                changes.left_out,
                self.slots.capacity()
            ));
        }
        self.left_out = changes.left_out;
        Ok((changes, notes))
    }

    /// Whether removed cgroups are still reported, with their final counts.
    pub(crate) fn any_gone(&self) -> bool {
        self.slots.any_gone()
    }

    /// Forgets removed cgroups once their final counts were reported. True when that
    /// freed places that cgroups left out are waiting for: refresh then.
    pub(crate) fn release_gone(&mut self) -> bool {
        self.slots.release_gone() && self.left_out > 0
    }

    /// The rows: every event for each cgroup counted or just removed, in tree order;
    /// with `containers`, their container column.
    pub fn series(&self, nr_events: usize, containers: Option<&ContainerNames>) -> Vec<Series> {
        let mut out = Vec::new();
        for (slot, cg) in self.slots.reported() {
            let container = containers.and_then(|c| c.column(cg.id));
            for event in 0..nr_events {
                out.push(Series {
                    event,
                    slot,
                    cgroup: Some(cg.name.clone()),
                    container: container.clone(),
                });
            }
        }
        out
    }

    /// The cgroups reported, with their slots, in tree order.
    pub fn reported(&self) -> Vec<(usize, &Cgroup)> {
        self.slots.reported()
    }

    /// How many cgroups were left out at the last refresh, every place being taken.
    pub fn left_out(&self) -> usize {
        self.left_out
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity()
    }
}

/// When to say that cgroups are left out: the first time, and whenever more are left
/// out than were said before. Under churn the number changes with every cgroup made or
/// removed; its peak is what tells how many places were missing.
#[derive(Debug, Default)]
pub(crate) struct LeftOutPeak {
    said: usize,
}

impl LeftOutPeak {
    /// True when `left_out`, the number now, is to be said.
    pub(crate) fn rises(&mut self, left_out: usize) -> bool {
        let rises = left_out > self.said;
        self.said = self.said.max(left_out);
        rises
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Churn moves the number up and down at every change of the tree: only new peaks
    /// are said.
    #[test]
    fn left_out_cgroups_are_said_at_new_peaks_only() {
        let mut peak = LeftOutPeak::default();
        let said: Vec<usize> = [0, 0, 3, 2, 3, 1, 0, 3, 5, 4, 5, 5, 0, 2]
            .into_iter()
            .filter(|&n| peak.rises(n))
            .collect();
        assert_eq!(said, [3, 5]);
        // 100 cgroups made and removed a second, 40 to 50 left out, for an hour: the
        // first number (40) and the peak (50).
        let mut peak = LeftOutPeak::default();
        let lines = (0..360_000usize)
            .filter(|i| peak.rises(40 + (i * 7919) % 11))
            .count();
        assert_eq!(lines, 2);
    }
}
