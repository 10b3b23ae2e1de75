//! The part of a counter that counts through the shared counters (src/bpf/shared/):
//! which shared targets stand for the counter's targets, and where their readings go in
//! the counter's snapshots.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};

use super::{open_one, privilege_hint, ReadPath, Setup, SharedSetup};
use crate::bpf::shared::{EventKey, JoinRequest, Membership, Target};
use crate::bpf::{self, ReadMasks};
use crate::reading::{Reading, Snapshot};
use crate::sys::{self, perf_event, perf_event::Role, perf_event::Scope};

/// Where one shared target's readings go in the counter's snapshot.
struct SnapshotPlace {
    /// The snapshot's slot (a cgroup's, or 0).
    slot: usize,
    /// The CPU whose reading goes at a position, for targets counted per CPU; None: the
    /// sum over every CPU goes at `position`.
    per_cpu: bool,
    position: usize,
}

pub(super) struct Shared {
    membership: Membership,
    /// One bit per counter event counted here.
    events: u64,
    /// The counter's CPUs (per-CPU targets), or every online CPU (tasks).
    cpus: Vec<u32>,
    places: Vec<SnapshotPlace>,
}

impl Shared {
    /// Joins the shared counters with the events of `sh` for the targets of `setup`.
    pub(super) fn join(setup: &Setup, sh: &SharedSetup, targets: &[Scope]) -> Result<Shared> {
        let (shared_targets, places) = targets_of(setup, sh, targets);
        let path = ReadPath::of_this_kernel();
        let picked: Vec<usize> = (0..setup.events.len())
            .filter(|&i| sh.events & 1 << i != 0)
            .collect();
        if let Some(e) = picked
            .iter()
            .map(|&i| &setup.events[i])
            .find(|e| ambiguous(e))
        {
            anyhow::bail!(
                "{}: this kernel cannot name the core PMU of a hardware or cache event, which the shared counters need to tell it from the same event on the other core PMUs",
                e.name
            );
        }
        let keys: Vec<EventKey> = picked
            .iter()
            .map(|&i| {
                let ev = &setup.events[i];
                let attr = perf_event::counting_attr(&ev.attr, Scope::Cpu(0), Role::Single);
                EventKey {
                    attr: perf_event::attr_bytes(&attr).to_vec(),
                    read: path.masks(std::slice::from_ref(ev)),
                }
            })
            .collect();
        let online = sys::online_cpus()?;
        let mut open = |k: usize| open_on_cpus(setup, picked[k], &online);
        // The instance charges cgroups of one hierarchy, for every session: this
        // session's when it counts cgroups, else the machine's if it has one (a
        // session without cgroups needs no cgroup tree at all).
        let cgroup_v1 = match setup.cgroups.is_empty() {
            false => setup.cgroup_v1,
            true => sys::cgroupfs::discover().is_ok_and(|h| h.v1),
        };
        let config = bpf::Config {
            nr_slots: 0,
            live: false,
            nr_events: 0,
            cpus: &[],
            cgroups: &[],
            cgroup_v1,
            masks: ReadMasks::default(),
            own_events: Default::default(),
            helper_only: path.helper_only,
            plain_loads: path.loads,
            privilege_hint: "shared counters need CAP_PERFMON, CAP_BPF and CAP_SYS_ADMIN (or root)",
            shared: true,
            slice_ring: None,
            tasks: &[],
            runq: None,
        };
        let membership = Membership::join(JoinRequest {
            dir: sh.dir,
            events: &keys,
            targets: &shared_targets,
            open: &mut open,
            config: &config,
            warn: sh.warn,
        })
        .context("cannot join the shared BPF counters")?;
        let per_cpu = places.iter().all(|p| p.per_cpu);
        Ok(Shared {
            membership,
            events: sh.events,
            cpus: if per_cpu { setup.cpus.to_vec() } else { online },
            places,
        })
    }

    /// Whether counter event `i` is counted (false for one the machine cannot count).
    pub(super) fn counts_event(&self, i: usize) -> bool {
        self.shared_index(i)
            .is_some_and(|k| self.membership.counts_event(k))
    }

    /// Counter event `i`'s position among the shared events.
    fn shared_index(&self, i: usize) -> Option<usize> {
        (self.events & 1 << i != 0).then(|| (self.events & ((1 << i) - 1)).count_ones() as usize)
    }

    /// Flushes and puts the current readings of the shared events into `s`.
    pub(super) fn read_into(&self, s: &mut Snapshot) -> Result<()> {
        self.membership.flush(&self.cpus)?;
        for e in (0..64).filter(|&e| self.events & 1 << e != 0) {
            let k = self.shared_index(e).expect("a shared event");
            for (t, place) in self.places.iter().enumerate() {
                if place.per_cpu {
                    for (pos, &cpu) in self.cpus.iter().enumerate() {
                        s.set(place.slot, e, pos, self.membership.reading(t, k, cpu));
                    }
                    continue;
                }
                let mut sum = Reading::default();
                for &cpu in &self.cpus {
                    sum.add(&self.membership.reading(t, k, cpu));
                }
                s.set(place.slot, e, place.position, sum);
            }
        }
        Ok(())
    }
}

/// A hybrid event whose attr does not say which core PMU counts it: a cache event on a
/// kernel without extended types, the same attr as on the other core PMUs. The shared
/// counters know events by their attr alone.
fn ambiguous(e: &crate::event::Event) -> bool {
    use crate::event::{TYPE_HARDWARE, TYPE_HW_CACHE};
    e.hybrid.is_some()
        && matches!(e.attr.type_, TYPE_HARDWARE | TYPE_HW_CACHE)
        && e.attr.config >> 32 == 0
}

/// The shared targets that stand for the counter's, and where each one's readings go.
fn targets_of(
    setup: &Setup,
    sh: &SharedSetup,
    targets: &[Scope],
) -> (Vec<Target>, Vec<SnapshotPlace>) {
    let whole = |slot, position| SnapshotPlace {
        slot,
        per_cpu: false,
        position,
    };
    let inherit = setup.inherit;
    if let Some(pid) = setup.task {
        let t = Target::Process {
            pid: pid as u32,
            inherit,
        };
        return (vec![t], vec![whole(0, 0)]);
    }
    if !sh.processes.is_empty() {
        // -p: each process whole; its count goes where its main thread's would.
        return sh
            .processes
            .iter()
            .map(|&pid| {
                let pos = setup.threads.iter().position(|&t| t == pid).unwrap_or(0);
                let t = Target::Process {
                    pid: pid as u32,
                    inherit,
                };
                (t, whole(0, pos))
            })
            .unzip();
    }
    if !setup.threads.is_empty() {
        return targets
            .iter()
            .enumerate()
            .filter_map(|(pos, t)| match *t {
                Scope::Thread(tid) => Some((
                    Target::Thread {
                        tid: tid as u32,
                        inherit,
                    },
                    whole(0, pos),
                )),
                _ => None,
            })
            .unzip();
    }
    let per_cpu = |slot| SnapshotPlace {
        slot,
        per_cpu: true,
        position: 0,
    };
    if setup.cgroups.is_empty() {
        return (vec![Target::Cpus], vec![per_cpu(0)]);
    }
    setup
        .cgroups
        .iter()
        .enumerate()
        .map(|(slot, &id)| (Target::Cgroup(id), per_cpu(slot)))
        .unzip()
}

/// Opens counter event `i` on every online CPU it counts on (a hybrid event: those of
/// its core PMU) for the shared counters: None where the machine cannot count it.
fn open_on_cpus(setup: &Setup, i: usize, cpus: &[u32]) -> Result<Option<Vec<(u32, OwnedFd)>>> {
    let ev = &setup.events[i];
    let mut fds = Vec::with_capacity(cpus.len());
    for &cpu in cpus.iter().filter(|&&c| ev.counts_on(c)) {
        match open_one(ev, Scope::Cpu(cpu), Role::Single, None, setup) {
            Ok((fd, _)) => fds.push((cpu, fd)),
            Err(e) if perf_event::is_unsupported(&e) => return Ok(None),
            Err(e) if perf_event::is_permission(&e) => {
                return Err(anyhow::anyhow!(
                    "cannot open event '{}': {e}: {}",
                    ev.name,
                    privilege_hint(setup)
                ))
            }
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cannot open event '{}' on CPU {cpu}: {e}",
                    ev.name
                ))
            }
        }
    }
    Ok(Some(fds))
}
