//! Slots: which slot counts which cgroup, process or thread. A slot is a row of the
//! BPF program's counts (src/bpf/bperf.bpf.c): what a task runs is charged to the slot
//! of its cgroup and to those of its monitored ancestors.
//!
//! - Fixed cgroups ([`FixedSlots`]): slot i counts the i-th distinct cgroup of the
//!   plan, for the whole session (bperf stat's cgroup options, serve and record
//!   without patterns).
//! - Live cgroups ([`LiveSlots`]): --all-cgroups and patterns. A created cgroup takes a
//!   free slot and is counted from then on. A removed one keeps its slot, with its
//!   final counts, until the report has shown them once (bperf record: once its file
//!   says it ended, with its totals); the slot is then free for another cgroup, which
//!   starts from zero. At most `capacity` cgroups have slots:
//!   cgroups beyond that are left out, their time counted only in their counted
//!   ancestors, until a slot frees up.
//! - Shared counters (--bpf-counters, the `b` modifier): one slot per cgroup, process
//!   or thread any session counts, held in the shared registry on the BPF file system
//!   (`hold_slot` in src/bpf/shared/holding.rs), since sessions of other bperf processes share
//!   them.
//!
//! The BPF maps follow what is decided here: bpf::Bpf::load fills the cgroup -> slot
//! map with the plan's cgroups (slot i: cgroups[i]), and counter::Counter::change_cgroups
//! adds and removes live cgroups (bpf::Bpf::add_cgroup, remove_cgroup).

use std::collections::{HashMap, HashSet};

use crate::cgroup::Cgroup;

/// The slots of fixed cgroups: slot i counts cgroups[i], no two with the same id.
#[derive(Debug, Default)]
pub(crate) struct FixedSlots {
    cgroups: Vec<Cgroup>,
}

impl FixedSlots {
    /// The slot of `cg`: where its id is counted already, or a new one. Two names of one
    /// cgroup print two rows from one slot.
    pub fn slot_of(&mut self, cg: &Cgroup) -> usize {
        match self.cgroups.iter().position(|c| c.id == cg.id) {
            Some(slot) => slot,
            None => {
                self.cgroups.push(cg.clone());
                self.cgroups.len() - 1
            }
        }
    }

    /// The cgroups, slot i counting the i-th.
    pub fn cgroups(&self) -> &[Cgroup] {
        &self.cgroups
    }

    /// Keeps the first `n` slots only.
    pub fn truncate(&mut self, n: usize) {
        self.cgroups.truncate(n);
    }

    pub(crate) fn into_cgroups(self) -> Vec<Cgroup> {
        self.cgroups
    }
}

/// What one slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    Counting(Cgroup),
    /// Removed from the tree; its final counts are still to be reported.
    Gone(Cgroup),
}

/// The slots of live cgroups.
#[derive(Debug)]
pub(crate) struct LiveSlots {
    slots: Vec<Slot>,
}

/// What one update of the slots changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// New cgroups and their slots: counted from now on.
    pub added: Vec<(usize, Cgroup)>,
    /// Cgroups no longer in the tree and their slots: counted no more.
    pub removed: Vec<(usize, Cgroup)>,
    /// How many cgroups of the tree have no slot, all being taken.
    pub left_out: usize,
}

impl LiveSlots {
    /// Slots for `capacity` cgroups, the first taken by `initial` in order (slot i
    /// counts initial[i]); `initial` beyond the capacity are left out.
    pub fn new(initial: &[Cgroup], capacity: usize) -> LiveSlots {
        let mut slots: Vec<Slot> = initial
            .iter()
            .take(capacity)
            .cloned()
            .map(Slot::Counting)
            .collect();
        slots.resize(capacity.max(slots.len()), Slot::Free);
        LiveSlots { slots }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Brings the slots in line with `now`, the selected cgroups as the tree has them:
    /// removed ones are gone, new ones take free slots (the lowest first).
    pub(crate) fn update(&mut self, now: &[Cgroup]) -> Changes {
        let ids: HashSet<u64> = now.iter().map(|c| c.id).collect();
        let mut changes = Changes::default();
        let mut counted = HashMap::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Slot::Counting(cg) = slot {
                if ids.contains(&cg.id) {
                    counted.insert(cg.id, i);
                } else {
                    changes.removed.push((i, cg.clone()));
                    *slot = Slot::Gone(cg.clone());
                }
            }
        }
        let free: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i] == Slot::Free)
            .collect();
        let mut free = free.into_iter();
        for cg in now {
            if let Some(&i) = counted.get(&cg.id) {
                // Renamed (moved) cgroups keep their slot under the new name.
                self.slots[i] = Slot::Counting(cg.clone());
                continue;
            }
            match free.next() {
                Some(i) => changes.added.push((i, cg.clone())),
                None => changes.left_out += 1,
            }
        }
        for (i, cg) in &changes.added {
            self.slots[*i] = Slot::Counting(cg.clone());
        }
        changes
    }

    /// Whether a slot holds a removed cgroup, whose final counts are to be reported.
    pub(crate) fn any_gone(&self) -> bool {
        self.slots.iter().any(|s| matches!(s, Slot::Gone(_)))
    }

    /// Frees the slots of removed cgroups, once their final counts were reported; true
    /// when there were any.
    pub(crate) fn release_gone(&mut self) -> bool {
        let mut freed = false;
        for slot in &mut self.slots {
            if matches!(slot, Slot::Gone(_)) {
                *slot = Slot::Free;
                freed = true;
            }
        }
        freed
    }

    /// The cgroups to report, counted and gone, with their slots, in the order of the
    /// tree (by path; the root first).
    pub fn reported(&self) -> Vec<(usize, &Cgroup)> {
        let mut out: Vec<(usize, &Cgroup)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Slot::Counting(cg) | Slot::Gone(cg) => Some((i, cg)),
                Slot::Free => None,
            })
            .collect();
        out.sort_by(|a, b| a.1.path.cmp(&b.1.path).then(a.0.cmp(&b.0)));
        out
    }

    /// Whether the cgroup in `slot` was removed (its counts are final).
    #[cfg(test)]
    pub(crate) fn is_gone(&self, slot: usize) -> bool {
        matches!(self.slots.get(slot), Some(Slot::Gone(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn cg(path: &str, id: u64) -> Cgroup {
        Cgroup {
            name: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
            id,
            path: PathBuf::from(path),
        }
    }

    fn names(l: &LiveSlots) -> Vec<(usize, String)> {
        l.reported()
            .into_iter()
            .map(|(i, c)| (i, c.name.clone()))
            .collect()
    }

    #[test]
    fn new_cgroups_take_free_slots_and_removed_ones_stay_until_released() {
        let mut l = LiveSlots::new(&[cg("", 1), cg("a", 2)], 4);
        let ch = l.update(&[cg("", 1), cg("b", 3)]);
        assert_eq!(ch.added, vec![(2, cg("b", 3))]);
        assert_eq!(ch.removed, vec![(1, cg("a", 2))]);
        assert_eq!(ch.left_out, 0);
        // a's final counts are still reported, in tree order.
        assert_eq!(
            names(&l),
            [(0, "/".into()), (1, "a".into()), (2, "b".into())]
        );
        assert!(l.is_gone(1));
        l.release_gone();
        assert_eq!(names(&l), [(0, "/".into()), (2, "b".into())]);
        // The freed slot goes to the next new cgroup.
        let ch = l.update(&[cg("", 1), cg("b", 3), cg("c", 4)]);
        assert_eq!(ch.added, vec![(1, cg("c", 4))]);
        assert!(ch.removed.is_empty());
    }

    #[test]
    fn a_cgroup_named_twice_has_one_fixed_slot() {
        let mut s = FixedSlots::default();
        assert_eq!(s.slot_of(&cg("a", 2)), 0);
        assert_eq!(s.slot_of(&cg("b", 3)), 1);
        assert_eq!(s.slot_of(&cg("/a", 2)), 0);
        assert_eq!(s.cgroups().len(), 2);
    }

    #[test]
    fn an_unchanged_tree_changes_nothing() {
        let start = [cg("", 1), cg("a", 2), cg("a/b", 3)];
        let mut l = LiveSlots::new(&start, 3);
        assert_eq!(l.update(&start), Changes::default());
        assert_eq!(l.reported().len(), 3);
    }

    #[test]
    fn cgroups_beyond_the_capacity_are_left_out_until_a_slot_frees_up() {
        let mut l = LiveSlots::new(&[cg("", 1), cg("a", 2), cg("b", 3)], 2);
        assert_eq!(names(&l), [(0, "/".into()), (1, "a".into())]);
        let ch = l.update(&[cg("", 1), cg("a", 2), cg("b", 3), cg("c", 4)]);
        assert_eq!(ch.left_out, 2);
        assert!(ch.added.is_empty());
        // a goes: its slot is taken only once its final counts were reported.
        let ch = l.update(&[cg("", 1), cg("b", 3), cg("c", 4)]);
        assert_eq!((ch.removed.len(), ch.added.len(), ch.left_out), (1, 0, 2));
        l.release_gone();
        let ch = l.update(&[cg("", 1), cg("b", 3), cg("c", 4)]);
        assert_eq!(ch.added, vec![(1, cg("b", 3))]);
        assert_eq!(ch.left_out, 1);
    }

    #[test]
    fn a_renamed_cgroup_keeps_its_slot() {
        let mut l = LiveSlots::new(&[cg("a", 2)], 2);
        let ch = l.update(&[cg("z", 2)]);
        assert_eq!(ch, Changes::default());
        assert_eq!(names(&l), [(0, "z".into())]);
    }

    #[test]
    fn churn_does_not_grow_the_slots() {
        let mut l = LiveSlots::new(&[cg("", 1)], 3);
        for id in 2..1000 {
            l.update(&[cg("", 1), cg(&format!("x{id}"), id)]);
            l.release_gone();
        }
        assert_eq!(l.capacity(), 3);
        assert_eq!(l.reported().len(), 2);
    }
}
