//! What sessions hold of the shared instance: registering an event (opening it on every
//! CPU the first time) or a slot (a cgroup, process or thread to charge), and letting
//! go of them when the last session that holds them leaves or dies.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::instance::{proc_bytes, proc_from, Instance};
use super::registry::{
    read_bits, EventEntry, Holders, Registry, SlotEntry, KIND_CGROUP, KIND_FREE,
};
use super::{EventKey, Target, ATTR_BYTES, EVENTS, SESSIONS, SLOTS};
use crate::bpf::skel::types::bperf_proc;
use crate::bpf::PROC_SLOTS;
use crate::sys::process::start_time;

impl Instance {
    /// Registers event `key` for session `s`: an event counted already, or a new one
    /// opened with `open`. None when the machine cannot count it.
    pub(super) fn hold_event(
        &self,
        reg: &mut Registry,
        s: usize,
        key: &EventKey,
        asked: usize,
        open: &mut dyn FnMut() -> Result<Option<Vec<(u32, OwnedFd)>>>,
    ) -> Result<Option<usize>> {
        let mut attr = [0u8; ATTR_BYTES];
        let n = key.attr.len().min(ATTR_BYTES);
        attr[..n].copy_from_slice(&key.attr[..n]);
        let read = read_bits(&key.read);
        let same = |e: &EventEntry| e.used != 0 && e.attr == attr && e.read == read;
        if let Some(i) = reg.events.iter().position(same) {
            reg.events[i].holders.add(s);
            return Ok(Some(i));
        }
        let Some(i) = reg.events.iter().position(|e| e.used == 0) else {
            let others = reg.events.iter().filter(|e| e.holders.others_than(s));
            return Err(no_room("events", EVENTS, others.count(), asked));
        };
        let Some(fds) = open()? else {
            return Ok(None);
        };
        for (cpu, fd) in &fds {
            let k = (i * self.nr_possible + *cpu as usize) as u32;
            let v = fd.as_raw_fd() as u32;
            self.events
                .update(&k.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .context("adding an event to the shared perf event array")?;
        }
        // The array holds the events now (BPF_F_PRESERVE_ELEMS): our fds can go.
        drop(fds);
        let bit = 1u64 << i;
        let m = &key.read;
        self.update_live(|l| {
            let set = |mask: &mut u64, on: u64| {
                *mask = (*mask & !bit) | if on & 1 != 0 { bit } else { 0 }
            };
            set(&mut l.always_running, m.always_running);
            set(&mut l.plain_count, m.plain_count);
            set(&mut l.cpu_clock, m.cpu_clock);
            set(&mut l.task_clock, m.task_clock);
            set(&mut l.rq_switches, m.rq_switches);
            l.event_gen[i] = l.event_gen[i].wrapping_add(1);
            l.nr_events = l.nr_events.max(i as u32 + 1);
        });
        reg.events[i] = EventEntry {
            attr,
            used: 1,
            read,
            holders: Holders::default(),
        };
        reg.events[i].holders.add(s);
        Ok(Some(i))
    }

    /// Stops counting event `i`: its perf events are closed.
    fn drop_event(&self, reg: &mut Registry, i: usize) {
        for cpu in 0..self.nr_possible {
            let k = (i * self.nr_possible + cpu) as u32;
            let _ = self.events.delete(&k.to_ne_bytes());
        }
        reg.events[i].used = 0;
        let last = reg
            .events
            .iter()
            .rposition(|e| e.used != 0)
            .map_or(0, |j| j + 1);
        let bit = 1u64 << i;
        self.update_live(|l| {
            for mask in [
                &mut l.always_running,
                &mut l.plain_count,
                &mut l.cpu_clock,
                &mut l.task_clock,
                &mut l.rq_switches,
            ] {
                *mask &= !bit;
            }
            l.event_gen[i] = l.event_gen[i].wrapping_add(1);
            l.nr_events = last as u32;
        });
    }

    /// Registers `target` for session `s`: its slot.
    pub(super) fn hold_slot(
        &self,
        reg: &mut Registry,
        s: usize,
        target: Target,
        asked: usize,
    ) -> Result<usize> {
        let (kind, key, inherit) = target.kind_key();
        let same = |e: &SlotEntry| e.kind == kind && e.key == key && e.inherit == inherit as u32;
        if let Some(i) = reg.slots.iter().position(same) {
            reg.slots[i].holders.add(s);
            return Ok(i);
        }
        let Some(i) = reg.slots.iter().position(|e| e.kind == KIND_FREE) else {
            let others = reg.slots[1..].iter().filter(|e| e.holders.others_than(s));
            let what = "cgroups, processes and threads";
            return Err(no_room(what, SLOTS - 1, others.count(), asked));
        };
        // Whatever a process that died with a session left pointing at this slot.
        self.unlink_slot(i);
        match target {
            Target::Cpus => unreachable!("slot 0 counts the CPUs"),
            Target::Cgroup(id) => self
                .cgrp_slot
                .update(&id.to_ne_bytes(), &(i as u32).to_ne_bytes(), MapFlags::ANY)
                .context("adding a cgroup to the shared counters")?,
            Target::Process { pid, inherit } => self.track(&self.proc_tgid, pid, i, inherit)?,
            Target::Thread { tid, inherit } => self.track(&self.proc_tid, tid, i, inherit)?,
        }
        reg.slots[i] = SlotEntry {
            kind,
            inherit: inherit.into(),
            key,
            holders: Holders::default(),
        };
        reg.slots[i].holders.add(s);
        let nr_procs = reg.nr_procs();
        self.update_live(|l| {
            l.nr_procs = nr_procs;
            l.slots_gen += 1;
        });
        Ok(i)
    }

    /// Charges what task `id` (a key of `map`) runs to `slot` too.
    fn track(&self, map: &MapHandle, id: u32, slot: usize, inherit: bool) -> Result<()> {
        let mut p = match map.lookup(&id.to_ne_bytes(), MapFlags::ANY)? {
            Some(bytes) => proc_from(&bytes),
            None => bperf_proc::default(),
        };
        let Some(k) = p.slot.iter().position(|&s| s == 0) else {
            bail!("task {id} is counted by {PROC_SLOTS} sessions through shared counters already");
        };
        p.slot[k] = slot as u32 + 1;
        if inherit {
            p.inherit |= 1 << k;
        }
        map.update(&id.to_ne_bytes(), proc_bytes(&p), MapFlags::ANY)
            .with_context(|| format!("tracking task {id}"))?;
        self.tracked_word(id)
            .fetch_or(1 << (id & 63), Ordering::SeqCst);
        Ok(())
    }

    /// Stops charging `slot`: every tracked task and cgroup that charges it lets go.
    fn drop_slot(&self, reg: &mut Registry, i: usize) {
        if reg.slots[i].kind == KIND_CGROUP {
            let _ = self.cgrp_slot.delete(&reg.slots[i].key.to_ne_bytes());
        }
        self.unlink_slot(i);
        reg.slots[i].kind = KIND_FREE;
        let nr_procs = reg.nr_procs();
        self.update_live(|l| {
            l.nr_procs = nr_procs;
            l.slots_gen += 1;
        });
    }

    /// Removes `slot` from every tracked task (children that inherited it included).
    fn unlink_slot(&self, slot: usize) {
        let mine = slot as u32 + 1;
        for map in [&self.proc_tgid, &self.proc_tid] {
            let keys: Vec<Vec<u8>> = map.keys().collect();
            for key in keys {
                let Ok(Some(bytes)) = map.lookup(&key, MapFlags::ANY) else {
                    continue;
                };
                let mut p = proc_from(&bytes);
                if !p.slot.contains(&mine) {
                    continue;
                }
                for k in 0..PROC_SLOTS {
                    if p.slot[k] == mine {
                        p.slot[k] = 0;
                        p.inherit &= !(1 << k);
                    }
                }
                let id = u32::from_ne_bytes(key[..4].try_into().unwrap());
                if p.slot.iter().any(|&s| s != 0) {
                    let _ = map.update(&key, proc_bytes(&p), MapFlags::ANY);
                    continue;
                }
                let _ = map.delete(&key);
                self.untrack_if_unused(id);
            }
        }
    }

    fn untrack_if_unused(&self, id: u32) {
        let k = id.to_ne_bytes();
        let used = |m: &MapHandle| matches!(m.lookup(&k, MapFlags::ANY), Ok(Some(_)));
        if !used(&self.proc_tgid) && !used(&self.proc_tid) {
            self.tracked_word(id)
                .fetch_and(!(1 << (id & 63)), Ordering::SeqCst);
        }
    }

    /// Releases everything session `s` holds.
    pub(super) fn release(&self, reg: &mut Registry, s: usize) {
        for i in 0..EVENTS {
            let e = &mut reg.events[i];
            if e.used != 0 && e.holders.has(s) {
                e.holders.remove(s);
                if e.holders.is_empty() {
                    self.drop_event(reg, i);
                }
            }
        }
        for i in 1..SLOTS {
            let e = &mut reg.slots[i];
            if e.kind != KIND_FREE && e.holders.has(s) {
                e.holders.remove(s);
                if e.holders.is_empty() {
                    self.drop_slot(reg, i);
                }
            }
        }
        reg.sessions[s].used = 0;
    }

    /// Releases the sessions whose process is gone (killed, or crashed).
    pub(super) fn reap(&self, reg: &mut Registry) {
        for s in 0..SESSIONS {
            let e = reg.sessions[s];
            if e.used != 0 && start_time(e.pid) != Some(e.start) {
                self.release(reg, s);
            }
        }
    }
}

/// Why a session that asks for `asked` of the `capacity` places for `what` does not get
/// them all, when other sessions hold `others` of them (and it holds the rest).
fn no_room(what: &str, capacity: usize, others: usize, asked: usize) -> anyhow::Error {
    match others {
        0 => anyhow::anyhow!(
            "this session asks for {asked} {what}, and the shared counters count at most {capacity} at once"
        ),
        _ => anyhow::anyhow!(
            "the shared counters count at most {capacity} {what} at once, and other sessions hold {others} of them: this session asks for {asked}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_room_says_who_holds_the_places() {
        let alone = no_room("things", 255, 0, 256).to_string();
        assert_eq!(
            alone,
            "this session asks for 256 things, and the shared counters count at most 255 at once"
        );
        let beside = no_room("things", 255, 200, 60).to_string();
        assert!(
            beside.contains("at most 255 things") && beside.contains("other sessions hold 200"),
            "{beside}"
        );
        assert!(beside.contains("asks for 60"), "{beside}");
    }
}
