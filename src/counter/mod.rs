//! The counter: opens one counting perf event per (event, CPU) and, when cgroups are
//! monitored, loads the BPF program that splits those counts between cgroups. It calls
//! the kernel only through src/sys/ and the BPF loader (src/bpf/).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
#[cfg(test)]
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::OpenObject;
use perf_event_open_sys::bindings as sw;

pub mod bpf_prog;
mod shared_counts;

use crate::bpf::{self, Bpf, ReadMasks, MAX_EVENTS};
use crate::event::{Attr, Event, Tool, TYPE_SOFTWARE, TYPE_TRACEPOINT};
use crate::reading::Snapshot;
use crate::sys::{self, perf_event, perf_event::Role, perf_event::Scope};

/// What counting in a mode takes when the kernel says no.
fn privilege_hint(setup: &Setup) -> &'static str {
    match (setup.task, !setup.per_cgroup()) {
        (Some(_), _) => "counting a command needs kernel.perf_event_paranoid <= 2, or CAP_PERFMON",
        (None, true) => {
            "counting CPUs (-a, -C) needs CAP_PERFMON (or root), or kernel.perf_event_paranoid <= 0"
        }
        (None, false) => "counting per cgroup needs CAP_PERFMON and CAP_BPF (or root)",
    }
}

/// What to count: events on CPUs, optionally split by cgroup ids (slots), or events of
/// one task.
pub struct Setup<'a> {
    pub events: &'a [Event],
    pub cpus: &'a [u32],
    /// Count this (not yet exec'd) task instead of the CPUs.
    pub task: Option<libc::pid_t>,
    /// With the task, its children too (perf's default; -i turns it off).
    pub inherit: bool,
    /// Count these threads, which run already (-p, -t), instead of the CPUs.
    pub threads: &'a [libc::pid_t],
    /// Monitored cgroup ids; empty means no BPF, plain per-CPU counting.
    pub cgroups: &'a [u64],
    /// Live cgroups: room for this many, added and removed while counting (see
    /// [`Counter::change_cgroups`]); None when the cgroups are fixed.
    pub live_slots: Option<usize>,
    /// perf_event controller on cgroup v1.
    pub cgroup_v1: bool,
    /// -v: libbpf's diagnostics.
    pub verbose: u8,
    /// -vv: where to say every perf_event_attr opened, as perf prints them.
    pub trace: Option<&'a dyn Fn(&str)>,
    /// Events counted through the shared counters (--bpf-counters, the `b` modifier).
    pub shared: Option<SharedSetup<'a>>,
    /// bperf record: the ring buffer all CPUs send every slice of a monitored cgroup to,
    /// from the counter's first read to its last.
    pub slice_ring: Option<&'a crate::bpf::slice_ring::SliceRing>,
    /// bperf record of processes or threads: the tasks the BPF side charges to slot 0
    /// (and the children they fork, where they inherit), with the events on the CPUs.
    pub tasks: &'a [bpf::shared::Target],
    /// The maps of a run-queue object without programs, for the BPF side to charge
    /// (where [`charges_runq`] says it can); None: it counts no run-queue culprits.
    pub runq: Option<bpf::runq::RunqMaps<'a>>,
}

/// Whether a per-cgroup counter's BPF side can count run-queue wait and preemptions
/// by culprit itself, in its switch program: where the kernel keeps each task's
/// sched_info and the counter loads a BPF side of its own (no `shared` counters).
pub fn charges_runq(shared: bool) -> bool {
    !shared && ReadPath::of_this_kernel().waits_from_sched_info
}

impl Setup<'_> {
    /// Counting per cgroup: some cgroups now, or room for live ones (which may all come
    /// later, as containers do).
    fn per_cgroup(&self) -> bool {
        !self.cgroups.is_empty() || self.live_slots.is_some() || !self.tasks.is_empty()
    }
}

/// The events a counter counts through the shared counters, and where those live.
pub struct SharedSetup<'a> {
    /// One bit per event.
    pub events: u64,
    /// The directory of the shared instance on a BPF file system.
    pub dir: &'a std::path::Path,
    /// -p: the processes, tracked whole (the threads then are theirs); empty for -t.
    pub processes: &'a [libc::pid_t],
    /// Where the command says a failure to leave the shared counters as the counter is
    /// dropped, which has no caller to return to.
    pub warn: fn(&str),
}

pub struct Counter<'obj> {
    cpus: Vec<u32>,
    /// CPUs, or 1 for a task.
    nr_targets: usize,
    nr_events: usize,
    /// Declared before fds: dropped (detached) before the perf events are closed.
    bpf: Option<Bpf<'obj>>,
    shared: Option<shared_counts::Shared>,
    nr_slots: usize,
    /// fds[event][cpu position]; None where the kernel refused the event.
    fds: Vec<Vec<Option<OwnedFd>>>,
    supported: Vec<bool>,
    /// The errno the kernel refused each refused event with.
    refused_with: Vec<Option<i32>>,
    user_only: Vec<bool>,
    /// Readings at start: what a read reports is counted from here.
    base: Snapshot,
    /// The raw reading when counting was paused, while it is.
    paused: Option<Snapshot>,
}

impl<'obj> Counter<'obj> {
    /// Opens the events and, with cgroups, loads and attaches the BPF program. `storage`
    /// holds the BPF object for as long as the counter lives.
    pub fn open(setup: &Setup, storage: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        let nr_events = setup.events.len();
        if nr_events > MAX_EVENTS {
            bail!("too many events: {nr_events} (bperf counts at most {MAX_EVENTS} at once)");
        }
        // libbpf's diagnostics with -vv only: -v prints what perf's -v prints.
        if setup.verbose < 2 {
            libbpf_rs::set_print(None);
        }
        let targets = targets_of(setup);
        // With cgroups, some context-switches are read by the BPF side from the run
        // queue: no perf event for those.
        let path = setup.per_cgroup().then(ReadPath::of_this_kernel);
        let shared_events = setup.shared.as_ref().map_or(0, |s| s.events);
        let masks = path
            .as_ref()
            .map_or_else(ReadMasks::default, |p| p.masks(setup.events))
            .without(shared_events);
        let opened = open_events(setup, &targets, masks.rq_switches).map_err(|e| match e {
            OpenError::Denied(event, e) => anyhow::anyhow!(
                "cannot open event '{}': {e}: {}",
                setup.events[event].name,
                privilege_hint(setup)
            ),
            OpenError::Other(e) => e,
        })?;
        let all_shared = shared_events.count_ones() as usize == nr_events;
        let bpf = match &path {
            Some(_) if all_shared => None,
            None => None,
            Some(path) => Some(load_bpf(setup, path, masks, &opened.fds, storage)?),
        };
        let mut supported = opened.supported;
        let shared = join_shared(setup, &targets, &mut supported)?;
        let mut c = Counter {
            cpus: setup.cpus.to_vec(),
            nr_targets: targets.len(),
            nr_events,
            fds: opened.fds,
            supported,
            refused_with: opened.refused_with,
            user_only: opened.user_only,
            bpf,
            shared,
            nr_slots: nr_slots(setup),
            base: Snapshot::new(nr_slots(setup), nr_events, targets.len()),
            paused: None,
        };
        c.base = c.read_raw()?;
        Ok(c)
    }

    pub fn supported(&self, event: usize) -> bool {
        self.supported[event]
    }

    /// The errno the kernel refused `event` with, if it did (perf words its warning
    /// after it).
    pub(crate) fn refused_with(&self, event: usize) -> Option<i32> {
        self.refused_with[event]
    }

    /// Whether `event` counts user space only because the kernel refused more (perf's
    /// fallback at kernel.perf_event_paranoid > 1; perf then names it `event:u`).
    pub(crate) fn user_only(&self, event: usize) -> bool {
        self.user_only[event]
    }

    /// Counts from now on: what was counted so far is left out of every later read
    /// (-D: counting starts after a delay).
    pub(crate) fn restart(&mut self) -> Result<()> {
        self.base = self.read_raw()?;
        Ok(())
    }

    /// Counts nothing until `resume` (-D -1): as if paused when it was opened.
    pub(crate) fn start_paused(&mut self) {
        self.paused = Some(self.base.clone());
    }

    /// Stops counting (--control's disable): reads return what was counted up to now
    /// until `resume`.
    pub fn pause(&mut self) -> Result<()> {
        if self.paused.is_none() {
            self.paused = Some(self.read_raw()?);
        }
        Ok(())
    }

    /// Counts again from now on, leaving out what happened while paused.
    pub fn resume(&mut self) -> Result<()> {
        if let Some(paused) = self.paused.take() {
            let skipped = self.read_raw()?.since(&paused);
            self.base = self.base.plus(&skipped);
        }
        Ok(())
    }

    /// Counts since the counter was opened (or restarted), less any pause.
    pub fn read(&mut self) -> Result<Snapshot> {
        let mut s = Snapshot::new(0, 0, 0);
        self.read_into(&mut s)?;
        Ok(s)
    }

    /// `read` into `out`, reusing its memory: what a reader that reads often (top)
    /// calls, so that a read allocates nothing.
    pub(crate) fn read_into(&mut self, out: &mut Snapshot) -> Result<()> {
        match &self.paused {
            Some(paused) => out.clone_from(paused),
            None => self.read_raw_into(out, None)?,
        }
        out.subtract(&self.base);
        Ok(())
    }

    /// `read_into` for the cgroups of `slots` alone: the other slots of `out` are left
    /// as they were. What a reader of a few live cgroups among many places calls.
    pub(crate) fn read_slots_into(&mut self, slots: &[usize], out: &mut Snapshot) -> Result<()> {
        if self.paused.is_some() || self.bpf.is_none() {
            return self.read_into(out);
        }
        self.read_raw_into(out, Some(slots))?;
        let nr_slots = out.nr_slots();
        for &slot in slots.iter().filter(|&&s| s < nr_slots) {
            out.subtract_slot(slot, &self.base);
        }
        Ok(())
    }

    /// Stops counting the cgroups `removed` (ids): every CPU works out what it charges
    /// again at its next switch or read. Their slots keep what they counted.
    pub(crate) fn remove_cgroups(&mut self, removed: &[u64]) -> Result<()> {
        if removed.is_empty() {
            return Ok(());
        }
        let Some(bpf) = &mut self.bpf else {
            bail!("cgroups can only change while counting cgroups");
        };
        removed.iter().for_each(|&id| bpf.remove_cgroup(id));
        // A flush first: what each CPU holds back of the run-queue culprits goes into
        // their map before the slots change (what it holds past a change is left out).
        self.read_raw_into(&mut Snapshot::new(0, 0, 0), Some(&[]))?;
        let bpf = self.bpf.as_mut().expect("checked above");
        bpf.slots_changed();
        Ok(())
    }

    /// Counts cgroups `added` (slot, id) from now on, from zero.
    pub(crate) fn add_cgroups(&mut self, added: &[(usize, u64)]) -> Result<()> {
        if added.is_empty() {
            return Ok(());
        }
        if self.bpf.is_none() {
            bail!("cgroups can only change while counting cgroups");
        }
        // The new slots start from what they hold now (a removed cgroup's counts).
        let raw = self.read_raw()?;
        for &(slot, _) in added {
            self.base.copy_slot(slot, &raw);
            if let Some(paused) = &mut self.paused {
                paused.copy_slot(slot, &raw);
            }
        }
        let bpf = self.bpf.as_mut().expect("checked above");
        for &(slot, id) in added {
            bpf.add_cgroup(id, slot)?;
        }
        bpf.slots_changed();
        Ok(())
    }

    /// bperf record: the next read is the last one slices are sent for.
    pub(crate) fn close_recording(&mut self) {
        if let Some(bpf) = &mut self.bpf {
            bpf.close_recording();
        }
    }

    /// bperf record: the slices each CPU could not send, in the order of the CPUs.
    pub(crate) fn slices_lost(&self) -> Result<Vec<u64>> {
        match &self.bpf {
            Some(bpf) => bpf.slices_lost(&self.cpus),
            None => Ok(vec![0; self.cpus.len()]),
        }
    }

    /// bperf record: the slices each CPU sent or tried to, in the order of the CPUs.
    pub(crate) fn slices_sent(&self) -> Result<Vec<u64>> {
        match &self.bpf {
            Some(bpf) => bpf.slices_sent(&self.cpus),
            None => Ok(vec![0; self.cpus.len()]),
        }
    }

    fn read_raw(&mut self) -> Result<Snapshot> {
        let mut s = Snapshot::new(0, 0, 0);
        self.read_raw_into(&mut s, None)?;
        Ok(s)
    }

    /// The raw readings of `slots` (None: all) into `s`.
    fn read_raw_into(&mut self, s: &mut Snapshot, slots: Option<&[usize]>) -> Result<()> {
        match &self.bpf {
            Some(bpf) => bpf.read_into(&self.cpus, self.nr_events, slots, s)?,
            None => {
                s.reset(self.nr_slots, self.nr_events, self.nr_targets);
                for (e, per_cpu) in self.fds.iter().enumerate() {
                    for (c, fd) in per_cpu.iter().enumerate() {
                        if let Some(fd) = fd {
                            s.set(0, e, c, perf_event::read(fd).context("reading a counter")?);
                        }
                    }
                }
            }
        }
        if let Some(shared) = &self.shared {
            shared.read_into(s)?;
        }
        Ok(())
    }
}

/// What the counter's perf events are opened on: the task, each thread, or each CPU.
fn targets_of(setup: &Setup) -> Vec<Scope> {
    match setup.task {
        Some(pid) => vec![Scope::Task(pid)],
        None if !setup.threads.is_empty() => {
            setup.threads.iter().map(|&t| Scope::Thread(t)).collect()
        }
        None => setup.cpus.iter().map(|&c| Scope::Cpu(c)).collect(),
    }
}

/// Loads and attaches the BPF side that charges the opened events (`fds`) to cgroups,
/// reading them as `path` says this kernel can.
fn load_bpf<'obj>(
    setup: &Setup,
    path: &ReadPath,
    masks: ReadMasks,
    fds: &Fds,
    storage: &'obj mut MaybeUninit<OpenObject>,
) -> Result<Bpf<'obj>> {
    let config = bpf::Config {
        nr_events: setup.events.len(),
        cpus: setup.cpus,
        cgroups: setup.cgroups,
        nr_slots: nr_slots(setup),
        live: setup.live_slots.is_some(),
        cgroup_v1: setup.cgroup_v1,
        masks,
        own_events: own_events(setup, path),
        helper_only: path.helper_only,
        plain_loads: path.loads,
        privilege_hint: privilege_hint(setup),
        shared: false,
        slice_ring: setup.slice_ring,
        tasks: setup.tasks,
        runq: setup.runq,
    };
    Bpf::load(&config, &event_fds(fds, setup.cpus), storage)
}

/// bperf's own events that the BPF side counts: a recording's (stat and top fill them in
/// from the run-queue program, src/session/runq.rs, which also finds their culprits).
fn own_events(setup: &Setup, path: &ReadPath) -> bpf::OwnEventMasks {
    if setup.slice_ring.is_none() {
        return bpf::OwnEventMasks::default();
    }
    let tool = |t: Tool| mask_of(setup.events, |e| e.tool == Some(t));
    bpf::OwnEventMasks {
        runq_wait: tool(Tool::RunqWait),
        preemptions: tool(Tool::Preemptions),
        from_sched_info: path.waits_from_sched_info,
    }
}

/// Joins the shared counters for the events the setup counts through them; an event
/// the shared instance cannot count is marked unsupported.
fn join_shared(
    setup: &Setup,
    targets: &[Scope],
    supported: &mut [bool],
) -> Result<Option<shared_counts::Shared>> {
    let Some(sh) = &setup.shared else {
        return Ok(None);
    };
    let counts = shared_counts::Shared::join(setup, sh, targets)?;
    for (i, ok) in supported.iter_mut().enumerate() {
        if sh.events & 1 << i != 0 {
            *ok = counts.counts_event(i);
        }
    }
    Ok(Some(counts))
}

/// Slots in the counts: one per cgroup, or as many as live cgroups may take; one
/// without cgroups.
fn nr_slots(setup: &Setup) -> usize {
    setup
        .live_slots
        .unwrap_or(0)
        .max(setup.cgroups.len())
        .max(1)
}

type Fds = Vec<Vec<Option<OwnedFd>>>;

/// Every opened perf event as (event, CPU, fd), for the BPF side's perf event array.
fn event_fds<'a>(fds: &'a Fds, cpus: &[u32]) -> Vec<(usize, u32, std::os::fd::BorrowedFd<'a>)> {
    let mut out = Vec::new();
    for (event, per_cpu) in fds.iter().enumerate() {
        for (fd, &cpu) in per_cpu.iter().zip(cpus) {
            if let Some(fd) = fd {
                out.push((event, cpu, fd.as_fd()));
            }
        }
    }
    out
}

/// The perf events of a counter, and what became of each event.
struct Opened {
    fds: Fds,
    supported: Vec<bool>,
    refused_with: Vec<Option<i32>>,
    user_only: Vec<bool>,
}

enum OpenError {
    /// The kernel refused event `.0` for want of privilege.
    Denied(usize, io::Error),
    Other(anyhow::Error),
}

/// Opens every event on every CPU, except those in the `rq_switches` mask, which the BPF
/// side counts without a perf event. An event the machine cannot count is marked
/// unsupported and the rest go on; a permission error stops everything.
fn open_events(setup: &Setup, targets: &[Scope], rq_switches: u64) -> Result<Opened, OpenError> {
    let shared = setup.shared.as_ref().map_or(0, |s| s.events);
    let (events, trace) = (setup.events, setup.trace);
    let mut o = Opened {
        fds: Vec::with_capacity(events.len()),
        supported: Vec::with_capacity(events.len()),
        refused_with: vec![None; events.len()],
        user_only: vec![false; events.len()],
    };
    for (i, ev) in events.iter().enumerate() {
        if shared & 1 << i != 0 {
            if let Some(say) = trace {
                say(&format!("{}: counted through the shared counters", ev.name));
            }
            o.fds.push(targets.iter().map(|_| None).collect());
            o.supported.push(true);
            continue;
        }
        if rq_switches & 1 << i != 0 {
            if let Some(say) = trace {
                say(&format!(
                    "{}: no perf event opened: counted from each CPU's run queue switch count (rq->nr_switches)",
                    ev.name
                ));
            }
            o.fds.push(targets.iter().map(|_| None).collect());
            o.supported.push(true);
            continue;
        }
        let leader = ev.leader.filter(|&l| l != i && o.supported[l]);
        let mut per_cpu = Vec::with_capacity(targets.len());
        for (pos, &target) in targets.iter().enumerate() {
            if !opens_on(ev, target) {
                per_cpu.push(None);
                continue;
            }
            let group = leader.and_then(|l| o.fds[l][pos].as_ref());
            let role = match (group, ev.leader) {
                (Some(_), _) => Role::Member,
                (None, Some(l)) if l == i => Role::Leader,
                _ => Role::Single,
            };
            match open_one(ev, target, role, group, setup) {
                Ok((fd, user_only)) => {
                    o.user_only[i] |= user_only;
                    per_cpu.push(Some(fd));
                }
                Err(e) if perf_event::is_permission(&e) => return Err(OpenError::Denied(i, e)),
                // A thread that ended since it was listed counts nothing.
                Err(e)
                    if e.raw_os_error() == Some(libc::ESRCH)
                        && matches!(target, Scope::Thread(_)) =>
                {
                    per_cpu.push(None)
                }
                Err(e) if perf_event::is_unsupported(&e) => {
                    o.refused_with[i] = e.raw_os_error();
                    per_cpu.clear();
                    break;
                }
                Err(e) => {
                    return Err(OpenError::Other(anyhow::anyhow!(
                        "cannot open event '{}' ({target:?}): {e}",
                        ev.name
                    )))
                }
            }
        }
        let ok = per_cpu.len() == targets.len();
        if !ok {
            per_cpu = targets.iter().map(|_| None).collect();
        }
        o.fds.push(per_cpu);
        o.supported.push(ok);
    }
    enable_cpu_groups(events, targets, &o.fds).map_err(OpenError::Other)?;
    Ok(o)
}

/// Whether the counter opens `ev` on `target`: a hybrid event on its core PMU's CPUs
/// only (elsewhere it reads as never counted); anything on a task or thread.
pub(crate) fn opens_on(ev: &Event, target: Scope) -> bool {
    match target {
        Scope::Cpu(cpu) => ev.counts_on(cpu),
        Scope::Task(_) | Scope::Thread(_) => true,
    }
}

/// Opens one event on one target. As perf does, a task's event the kernel refuses
/// (EACCES) at kernel.perf_event_paranoid > 1 is opened again for user space only:
/// true in the result says so.
fn open_one(
    ev: &Event,
    target: Scope,
    role: Role,
    group: Option<&OwnedFd>,
    setup: &Setup,
) -> io::Result<(OwnedFd, bool)> {
    let trace = setup.trace;
    let attr_of = |a: &Attr| {
        let mut attr = perf_event::counting_attr(a, target, role);
        if !setup.inherit {
            attr.set_inherit(0);
        }
        attr
    };
    let attr = attr_of(&ev.attr);
    match perf_event::open_with_fallback(attr, target, group, trace) {
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES)
                && matches!(target, Scope::Task(_))
                && !ev.attr.exclude_kernel
                && !ev.attr.exclude_user
                && sys::paranoid() > 1 =>
        {
            if let Some(say) = trace {
                say(
                    "kernel.perf_event_paranoid > 1: trying again, excluding kernel and hypervisor",
                );
            }
            let user = Attr {
                exclude_kernel: true,
                exclude_hv: true,
                ..ev.attr
            };
            let attr = attr_of(&user);
            perf_event::open_with_fallback(attr, target, group, trace).map(|fd| (fd, true))
        }
        r => r.map(|fd| (fd, false)),
    }
    .and_then(|(fd, user_only)| {
        if let Some(filter) = &ev.filter {
            perf_event::set_filter(&fd, filter).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "failed to set filter \"{filter}\" on event {}: {e}",
                        ev.name
                    ),
                )
            })?;
        }
        Ok((fd, user_only))
    })
}

/// Starts the groups opened on CPUs or threads, which start disabled (see
/// perf_event::counting_attr).
fn enable_cpu_groups(events: &[Event], targets: &[Scope], fds: &Fds) -> Result<()> {
    if targets.iter().any(|t| matches!(t, Scope::Task(_))) {
        return Ok(());
    }
    for (i, ev) in events.iter().enumerate() {
        if ev.leader == Some(i) {
            for fd in fds[i].iter().flatten() {
                perf_event::enable(fd).with_context(|| format!("enabling group '{}'", ev.name))?;
            }
        }
    }
    Ok(())
}

/// Events that are never multiplexed: software and tracepoint counters always run while
/// enabled, so the BPF side reads only their count (see read_event in bperf.bpf.c).
fn always_running(events: &[Event]) -> u64 {
    mask_of(events, |e| {
        matches!(e.attr.type_, TYPE_SOFTWARE | TYPE_TRACEPOINT)
    })
}

/// One bit for each of `events` that `pick` picks.
fn mask_of(events: &[Event], pick: impl Fn(&Event) -> bool) -> u64 {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| pick(e))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

const CPU_CLOCK: u64 = sw::PERF_COUNT_SW_CPU_CLOCK as u64;
const TASK_CLOCK: u64 = sw::PERF_COUNT_SW_TASK_CLOCK as u64;

/// Software events whose count the kernel keeps current as things happen (every one but
/// the two clocks), and tracepoints: the BPF side reads them with a plain load of the
/// perf event's count instead of the read helper (see load_count in bperf.bpf.c).
fn plain_counts(events: &[Event]) -> u64 {
    mask_of(events, |e| match e.attr.type_ {
        TYPE_SOFTWARE => !matches!(e.attr.config, CPU_CLOCK | TASK_CLOCK),
        TYPE_TRACEPOINT => true,
        _ => false,
    })
}

/// The software clock `config` (cpu-clock or task-clock), which the BPF side works out
/// with plain loads from the run queue clock.
fn clock_events(events: &[Event], config: u64) -> u64 {
    mask_of(events, |e| {
        e.attr.type_ == TYPE_SOFTWARE && e.attr.config == config
    })
}

/// Plain, ungrouped `context-switches` events, one bit each: the BPF side can read them
/// from the run queue's own count of switches (rq->nr_switches), which counts the same
/// switches as the software event, and then no perf event is opened for them: each
/// switch is charged to the outgoing task's cgroup, as its rusage counts it, and the
/// kernel has one event less to update at every switch (bench/results/levers.md has
/// what that saved: less than this VM's noise). Any modifier keeps the
/// perf event (`cs:u` counts nothing, for one: switches happen in the kernel);
/// exclude_guest is perf's default for every event and means nothing to this one.
fn plain_context_switches(events: &[Event]) -> u64 {
    mask_of(events, |e| {
        let plain = Attr {
            type_: TYPE_SOFTWARE,
            config: sw::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
            exclude_guest: e.attr.exclude_guest,
            ..Attr::default()
        };
        e.attr == plain && e.leader.is_none() && e.hybrid.is_none()
    })
}

/// How the BPF side reads counters on the running kernel.
struct ReadPath {
    /// Plain loads from struct perf_event (see LOADED_EVENTS in bperf.bpf.c).
    loads: bool,
    /// BPERF_READ_HELPER=1: every counter through the read helper (context-switches
    /// included), times from ktime, as on kernels without bpf_rdonly_cast (and as for
    /// the clocks without CONFIG_FAIR_GROUP_SCHED): the tests run that path here too.
    helper_only: bool,
    /// The run queue is reachable from a task (CONFIG_FAIR_GROUP_SCHED).
    run_queue: bool,
    /// A recording's run-queue waits are read from the tasks' own sched_info at the
    /// switch: the kernel keeps it (CONFIG_SCHED_INFO) in the run queue's clock, which
    /// can be reached; unless BPERF_RUNQ_WAKEUPS=1 asks for the wake-up programs of
    /// kernels without it, so that the tests and the benchmark run that way here too.
    waits_from_sched_info: bool,
}

impl ReadPath {
    fn of_this_kernel() -> ReadPath {
        // Before Linux 5.11 the BPF side cannot time with the run queue's clock
        // (Variant::Old).
        let helper_only = std::env::var_os("BPERF_READ_HELPER").is_some_and(|v| v == "1")
            || crate::bpf::Variant::of_this_kernel() == crate::bpf::Variant::Old;
        let kernel = sys::KernelFeatures::probe();
        let wakeups = std::env::var_os("BPERF_RUNQ_WAKEUPS").is_some_and(|v| v == "1");
        ReadPath {
            loads: !helper_only && kernel.rdonly_cast && !crate::bpf::as_linux_5_10(),
            helper_only,
            run_queue: kernel.cfs_rq_rq,
            waits_from_sched_info: kernel.sched_info && kernel.cfs_rq_rq && !wakeups,
        }
    }

    /// The events to read from the run queue's count of switches (see
    /// plain_context_switches): where the BPF side can reach the run queue from a task,
    /// which takes CONFIG_FAIR_GROUP_SCHED (struct cfs_rq's rq member, in the kernel's BTF).
    fn rq_switches(&self, events: &[Event]) -> u64 {
        let mask = plain_context_switches(events);
        match mask != 0 && !self.helper_only && self.run_queue {
            true => mask,
            false => 0,
        }
    }

    /// How the BPF side reads each of `events`.
    fn masks(&self, events: &[Event]) -> ReadMasks {
        let rq_switches = self.rq_switches(events);
        let mut m = ReadMasks {
            always_running: always_running(events),
            rq_switches,
            ..ReadMasks::default()
        };
        if self.loads {
            m.plain_count = plain_counts(events) & !rq_switches;
            m.cpu_clock = clock_events(events, CPU_CLOCK);
            m.task_clock = clock_events(events, TASK_CLOCK);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Attr;
    use crate::reading::Reading;

    /// Only plain, ungrouped context-switches is read from the scheduler's count: `:u`
    /// counts nothing there, and a group's members are read together.
    #[test]
    fn run_queue_counts_plain_context_switches_only() {
        let cs = sw("cs", 3);
        let mut cs_u = sw("cs:u", 3);
        cs_u.attr.exclude_kernel = true;
        let mut cs_k = sw("cs:k", 3);
        cs_k.attr.exclude_user = true;
        let mut grouped = sw("cs", 3);
        grouped.leader = Some(0);
        let mut cs_precise = sw("cs:p", 3);
        cs_precise.attr.precise_ip = 1;
        let mut cs_default = sw("cs", 3);
        cs_default.attr.exclude_guest = true;
        let events = [
            sw("task-clock", 1),
            cs.clone(),
            cs_u,
            cs_k,
            grouped,
            cs_precise,
            cs_default,
        ];
        assert_eq!(plain_context_switches(&events), 1 << 1 | 1 << 6);
    }

    fn sw(name: &str, config: u64) -> Event {
        Event {
            name: name.into(),
            attr: Attr {
                type_: 1,
                config,
                ..Attr::default()
            },
            leader: None,
            bpf: false,
            filter: None,
            naming: Default::default(),
            tool: None,
            hybrid: None,
        }
    }

    /// Where the counter opens the events of a hybrid machine
    /// (tests/fixtures/sysfs/hybrid-intel), counting its 24 CPUs: each hybrid event on
    /// its core PMU's CPUs only, the rest everywhere; counting a command, all on it.
    #[test]
    fn hybrid_events_open_on_their_pmus_cpus() {
        let root = format!(
            "{}/tests/fixtures/sysfs/hybrid-intel/devices",
            env!("CARGO_MANIFEST_DIR")
        );
        let sysfs = crate::test_fixtures::sysfs_at(root);
        let events =
            crate::event::parse_events("cycles,cs,{cpu_core/instructions/,cs},r1a", &sysfs)
                .unwrap();
        let cpus: Vec<Scope> = (0..24).map(Scope::Cpu).collect();
        let plan: Vec<String> = events
            .iter()
            .map(|e| {
                let on: Vec<u32> = cpus
                    .iter()
                    .filter(|&&t| opens_on(e, t))
                    .map(|t| match t {
                        Scope::Cpu(c) => *c,
                        _ => unreachable!(),
                    })
                    .collect();
                format!("{} {}", e.name, crate::cpus::format_list(&on))
            })
            .collect();
        assert_eq!(
            plan,
            [
                "cpu_atom/cycles/ 16-23",
                "cpu_core/cycles/ 0-15",
                "cs 0-23",
                "cpu_core/instructions/ 0-15",
                "cs 0-23",
                "cpu_core/r1a/ 0-15",
            ]
        );
        assert!(events.iter().all(|e| opens_on(e, Scope::Task(1))));
    }

    /// An event restricted to some CPUs (as a hybrid event is to its core PMU's) reads
    /// as never counted on the others, exactly (0, 0, 0), through the BPF side's perf
    /// event array (indexed event * CPUs + CPU, its slot on the others empty) as through
    /// plain reads, and counts on its own as the unrestricted event does. cpu-clock and
    /// msr/tsc/ stand in for hardware events: the first is read without its times, the
    /// second, as a hardware event is, with them.
    #[test]
    #[ignore = "needs root (make test runs it)"]
    fn restricted_events_read_nothing_elsewhere() {
        crate::test_fixtures::require_root();
        let cpus = sys::online_cpus().unwrap();
        let sysfs = crate::sys::sysfs::Sysfs::system();
        let Ok(tsc) = crate::event::parse_events("msr/tsc/", &sysfs) else {
            return crate::test_fixtures::skip("the msr PMU's tsc event");
        };
        if cpus.len() < 2 {
            return crate::test_fixtures::skip("two CPUs online");
        }
        let only = |mut e: Event, cpu: u32| {
            e.hybrid = Some(crate::event::Hybrid {
                pmu: "test".into(),
                cpus: Some(vec![cpu]),
                written: None,
            });
            e
        };
        let (c0, c1) = (cpus[0], cpus[1]);
        let events = [
            only(sw("cpu-clock", 0), c1),
            sw("cpu-clock", 0),
            only(tsc[0].clone(), c0),
            tsc[0].clone(),
        ];
        let root = std::fs::metadata(sys::cgroupfs::discover().unwrap().mount).unwrap();
        let root_id = std::os::unix::fs::MetadataExt::ino(&root);
        for cgroups in [&[][..], &[root_id][..]] {
            let mut storage = MaybeUninit::uninit();
            let setup = system_wide(&events, &cpus, cgroups);
            let mut counter = Counter::open(&setup, &mut storage).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let s = counter.read().unwrap();
            let bpf = !cgroups.is_empty();
            for (restricted, whole, own, other) in [(0, 1, 1, 0), (2, 3, 0, 1)] {
                let r = s.get(0, restricted, own);
                let w = s.get(0, whole, own).counter as f64;
                assert_eq!(s.get(0, restricted, other), Reading::default(), "bpf {bpf}");
                assert!(r.enabled > 0 && r.running > 0, "bpf {bpf}: {r:?}");
                let c = r.counter as f64;
                assert!((c - w).abs() <= w * 0.05, "bpf {bpf}: {c} vs {w}");
            }
        }
    }

    /// `events` counted on `cpus`, for `cgroups` through BPF (none: plain per-CPU reads).
    fn system_wide<'a>(events: &'a [Event], cpus: &'a [u32], cgroups: &'a [u64]) -> Setup<'a> {
        Setup {
            events,
            cpus,
            task: None,
            inherit: true,
            threads: &[],
            cgroups,
            live_slots: None,
            cgroup_v1: false,
            verbose: 0,
            trace: None,
            shared: None,
            slice_ring: None,
            tasks: &[],
            runq: None,
        }
    }

    /// The root cgroup sees everything, idle included: its BPF total must match a plain
    /// read of the same kind of per-CPU counters over the same time.
    #[test]
    #[ignore = "needs root (make test runs it)"]
    fn root_cgroup_matches_plain_read() {
        crate::test_fixtures::require_root();
        let events = [sw("cpu-clock", 0), sw("context-switches", 3)];
        let cpus = sys::online_cpus().unwrap();
        let root = std::fs::metadata(sys::cgroupfs::discover().unwrap().mount).unwrap();
        let root_id = std::os::unix::fs::MetadataExt::ino(&root);
        let mut s1 = MaybeUninit::uninit();
        let mut s2 = MaybeUninit::uninit();
        let setup = |cgroups| system_wide(&events, &cpus, cgroups);
        let mut plain = Counter::open(&setup(&[]), &mut s1).unwrap();
        let mut bpf = Counter::open(&setup(&[root_id]), &mut s2).unwrap();
        let (b0, p0) = (bpf.read().unwrap(), plain.read().unwrap());
        std::thread::sleep(Duration::from_millis(300));
        let b = bpf.read().unwrap().since(&b0);
        let p = plain.read().unwrap().since(&p0);
        for e in 0..events.len() {
            let (b, p) = (b.total(0, e).counter as f64, p.total(0, e).counter as f64);
            assert!(p > 0.0, "event {e} counted nothing");
            assert!(
                (b - p).abs() <= p * 0.02 + 5.0,
                "event {e}: bpf {b} vs plain {p}"
            );
        }
    }
}
