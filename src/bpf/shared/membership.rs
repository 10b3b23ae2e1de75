//! One session on the shared counters: joining (loading the instance if it is the
//! first), registering what it counts, reading, and leaving (the last one out removes
//! the instance).

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::instance::{create, load, remove_instance, Instance};
use super::keeper::{start_keeper, KeeperWatch};
use super::lock::{check_dir, check_instance_dir, lock};
use super::registry::{read_bits, Registry, SessionEntry};
use super::{EventKey, Target, SESSIONS};
use crate::bpf::Config;
use crate::reading::Reading;
use crate::sys::process::start_time;

/// One session on the shared counters.
pub struct Membership {
    inst: Instance,
    id: usize,
    /// The shared index of each event the session registered; None for one the
    /// machine cannot count.
    events: Vec<Option<usize>>,
    /// The slot of each target.
    slots: Vec<usize>,
    /// Starts a keeper whenever the instance has none; stopped before the session leaves.
    watch: Option<KeeperWatch>,
    /// Says a failure to leave, which happens as the membership is dropped.
    warn: fn(&str),
}

/// Opens session event i on every CPU: (CPU, fd) pairs, or None where the machine
/// cannot count it.
pub type OpenEvent<'a> = dyn FnMut(usize) -> Result<Option<Vec<(u32, OwnedFd)>>> + 'a;

/// What a session asks for: its events, its targets, how a new event is opened on
/// every CPU (None where the machine cannot count it), and how the instance is loaded
/// if there is none.
pub struct JoinRequest<'a> {
    pub dir: &'a Path,
    pub events: &'a [EventKey],
    pub targets: &'a [Target],
    pub open: &'a mut OpenEvent<'a>,
    pub config: &'a Config<'a>,
    /// Where a failure to leave is said, when the membership is dropped.
    pub warn: fn(&str),
}

impl Membership {
    /// Joins the shared counters (creating them if this is the first session), registers
    /// the request's events and targets, and flushes every CPU so that what is counted
    /// from now on is current.
    pub fn join(req: JoinRequest) -> Result<Membership> {
        check_dir(req.dir)?;
        let parent = req.dir.parent().expect("checked");
        let has_instance = || req.dir.join("registry").exists();
        // Where there is no instance yet, its programs are loaded before the lock (see
        // load); unused if another session pins one meanwhile.
        let (mut early, mut late) = (MaybeUninit::uninit(), MaybeUninit::uninit());
        let loaded = match has_instance() {
            true => None,
            false => Some(load(req.config, &mut early)?),
        };
        let lock = lock(parent, true, true)?.expect("mounted");
        check_instance_dir(req.dir)?;
        let mut keeper = None;
        if !has_instance() {
            let loaded = match loaded {
                Some(loaded) => loaded,
                None => load(req.config, &mut late)?,
            };
            create(req.dir, req.config, loaded).inspect_err(|_| remove_instance(req.dir))?;
            keeper = start_keeper(req.dir);
        }
        let inst = Instance::open(req.dir)?;
        let mut reg = inst.load_registry()?;
        inst.reap(&mut reg);
        let warn = req.warn;
        let registered = register(&inst, &mut reg, req);
        let stored = inst.store_registry(&reg);
        let mut session = match (registered, stored) {
            (Ok((id, events, slots)), Ok(())) => Membership {
                inst,
                id,
                events,
                slots,
                watch: None,
                warn,
            },
            (Err(e), _) | (_, Err(e)) => {
                if reg.live_sessions() == 0 {
                    remove_instance(&inst.dir);
                }
                return Err(e);
            }
        };
        drop(lock);
        session.watch = Some(KeeperWatch::start(&session.inst.dir, keeper)?);
        session.flush_all()?;
        Ok(session)
    }

    /// Whether session event `i` is counted (the machine could open it).
    pub(crate) fn counts_event(&self, i: usize) -> bool {
        self.events[i].is_some()
    }

    fn flush_all(&self) -> Result<()> {
        for cpu in crate::sys::online_cpus()? {
            self.inst.flush(cpu)?;
        }
        Ok(())
    }

    /// Brings the counts of `cpus` up to now.
    pub fn flush(&self, cpus: &[u32]) -> Result<()> {
        cpus.iter().try_for_each(|&c| self.inst.flush(c))
    }

    /// What target `t` counted of event `e` on `cpu` since the instance was loaded (a
    /// session subtracts its first reading).
    pub fn reading(&self, t: usize, e: usize, cpu: u32) -> Reading {
        match self.events[e] {
            Some(i) => self.inst.reading(self.slots[t], i, cpu),
            None => Reading::default(),
        }
    }
}

/// How many different items there are.
fn distinct<T: std::hash::Hash + Eq>(items: impl Iterator<Item = T>) -> usize {
    items.collect::<std::collections::HashSet<T>>().len()
}

/// Registers the session and what it asks for; its id, events and slots.
fn register(
    inst: &Instance,
    reg: &mut Registry,
    req: JoinRequest,
) -> Result<(usize, Vec<Option<usize>>, Vec<usize>)> {
    let counts_cgroups = req.targets.iter().any(|t| matches!(t, Target::Cgroup(_)));
    if counts_cgroups && reg.cgroup_v1 != req.config.cgroup_v1 as u32 {
        let version = |v1: bool| if v1 { "v1 (perf_event's)" } else { "v2" };
        bail!(
            "the shared counters in {} charge the cgroups of the cgroup {} hierarchy, and this session's are cgroup {}: the perf_event controller was mounted or unmounted since they started; count these cgroups without shared counters, or once their sessions have ended",
            inst.dir.display(),
            version(reg.cgroup_v1 != 0),
            version(req.config.cgroup_v1)
        );
    }
    let Some(id) = reg.sessions.iter().position(|s| s.used == 0) else {
        bail!("{SESSIONS} sessions count through the shared counters already");
    };
    let me = std::process::id();
    reg.sessions[id] = SessionEntry {
        pid: me,
        used: 1,
        start: start_time(me).context("reading this process's start time")?,
    };
    let mut events = Vec::new();
    let asked_events = distinct(req.events.iter().map(|k| (&k.attr, read_bits(&k.read))));
    let with_slot = req.targets.iter().filter(|t| **t != Target::Cpus);
    let asked_slots = distinct(with_slot.map(Target::kind_key));
    let mut done = || -> Result<Vec<usize>> {
        for (i, key) in req.events.iter().enumerate() {
            let open = &mut || (req.open)(i);
            events.push(inst.hold_event(reg, id, key, asked_events, open)?);
        }
        let mut slots = Vec::new();
        for &t in req.targets {
            slots.push(match t {
                Target::Cpus => 0,
                t => inst.hold_slot(reg, id, t, asked_slots)?,
            });
        }
        Ok(slots)
    };
    match done() {
        Ok(slots) => Ok((id, events, slots)),
        Err(e) => {
            inst.release(reg, id);
            Err(e)
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(w) = self.watch.take() {
            w.stop();
        }
        if let Err(e) = leave(&self.inst, self.id) {
            (self.warn)(&format!("bperf: leaving the shared counters: {e:#}"));
        }
    }
}

/// Releases session `id`; the last session out removes the instance.
fn leave(inst: &Instance, id: usize) -> Result<()> {
    let parent = inst.dir.parent().expect("checked at join");
    let Some(_lock) = lock(parent, false, false)? else {
        return Ok(());
    };
    if !inst.dir.join("registry").exists() {
        return Ok(());
    }
    let mut reg = inst.load_registry()?;
    inst.release(&mut reg, id);
    inst.reap(&mut reg);
    if reg.live_sessions() == 0 {
        remove_instance(&inst.dir);
        return Ok(());
    }
    inst.store_registry(&reg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_counts_each_item_once() {
        assert_eq!(distinct([1, 2, 1, 3, 2].into_iter()), 3);
    }

    #[test]
    fn start_time_of_this_process_is_found() {
        let me = start_time(std::process::id());
        assert!(me.is_some_and(|t| t > 0));
        assert_eq!(start_time(u32::MAX), None);
    }
}
