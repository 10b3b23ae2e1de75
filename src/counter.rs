//! The counter: opens one counting perf event per (event, CPU) and, when cgroups are
//! monitored, loads the BPF program that splits those counts between cgroups.
//!
//! This and perf_event.rs are the only modules that touch the kernel.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;
#[cfg(test)]
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, ProgramInput};

use crate::counts::Reading;
use crate::event::{Attr, Event};
use crate::perf_event::{self, RawAttr, Role, Target};
use crate::skel::*;

/// The BPF program's own limits (src/bpf/bperf.h).
pub const MAX_EVENTS: usize = 64;

const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// What counting in a mode takes when the kernel says no.
fn privilege_hint(setup: &Setup) -> &'static str {
    match (setup.task, setup.cgroups.is_empty()) {
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
    /// Count this (not yet exec'd) task and its children instead of the CPUs.
    pub task: Option<libc::pid_t>,
    /// Monitored cgroup ids; empty means no BPF, plain per-CPU counting.
    pub cgroups: &'a [u64],
    /// perf_event controller on cgroup v1.
    pub cgroup_v1: bool,
    /// -v: libbpf's diagnostics; -vv: also every perf_event_attr opened, as perf prints them.
    pub verbose: u8,
}

/// Cumulative readings since the counter started.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    nr_events: usize,
    nr_cpus: usize,
    /// index (slot * nr_events + event) * nr_cpus + cpu position; one slot when not per-cgroup.
    data: Vec<Reading>,
}

impl Snapshot {
    pub fn new(nr_slots: usize, nr_events: usize, nr_cpus: usize) -> Snapshot {
        Snapshot {
            nr_events,
            nr_cpus,
            data: vec![Reading::default(); nr_slots.max(1) * nr_events * nr_cpus],
        }
    }

    fn idx(&self, slot: usize, event: usize, cpu_pos: usize) -> usize {
        (slot * self.nr_events + event) * self.nr_cpus + cpu_pos
    }

    /// The reading of `event` for cgroup `slot` (0 when not per-cgroup) on the CPU at `cpu_pos`.
    pub fn get(&self, slot: usize, event: usize, cpu_pos: usize) -> Reading {
        self.data[self.idx(slot, event, cpu_pos)]
    }

    pub fn set(&mut self, slot: usize, event: usize, cpu_pos: usize, r: Reading) {
        let i = self.idx(slot, event, cpu_pos);
        self.data[i] = r;
    }

    /// Sum over all CPUs.
    pub fn total(&self, slot: usize, event: usize) -> Reading {
        let mut sum = Reading::default();
        for c in 0..self.nr_cpus {
            sum.add(&self.get(slot, event, c));
        }
        sum
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            data: self
                .data
                .iter()
                .zip(&earlier.data)
                .map(|(a, b)| a.since(b))
                .collect(),
            ..*self
        }
    }
}

pub struct Counter<'obj> {
    cpus: Vec<u32>,
    /// CPUs, or 1 for a task.
    nr_targets: usize,
    nr_events: usize,
    /// Declared before fds: dropped (detached) before the perf events are closed.
    bpf: Option<Bpf<'obj>>,
    /// fds[event][cpu position]; None where the kernel refused the event.
    fds: Vec<Vec<Option<OwnedFd>>>,
    supported: Vec<bool>,
    user_only: Vec<bool>,
    /// Readings at start: what a read reports is counted from here.
    base: Snapshot,
}

/// The loaded BPF side: skeleton, its attachments and the mmapped count array.
// Fields drop in order: the programs are detached first, so none runs while the maps
// and perf events they read go away (the BPF side keeps pointers to the perf events).
struct Bpf<'obj> {
    _links: Vec<Link>,
    skel: BperfSkel<'obj>,
    counts: Mapping,
    nr_slots: usize,
    nr_possible: usize,
}

/// A read-only shared mapping of the BPF `counts` array.
struct Mapping {
    ptr: NonNull<Reading>,
    len: usize,
    bytes: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/bytes came from a successful mmap that nothing else unmaps.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

impl Mapping {
    fn new(fd: &impl AsFd, len: usize) -> io::Result<Mapping> {
        let page = 4096usize;
        let bytes = (len * std::mem::size_of::<Reading>()).div_ceil(page) * page;
        // SAFETY: mapping a BPF array created with BPF_F_MMAPABLE, read-only.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
            bytes,
        })
    }

    fn get(&self, i: usize) -> Reading {
        assert!(i < self.len);
        // SAFETY: in bounds of the mapping; the BPF program writes whole aligned u64s.
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(i)) }
    }
}

impl<'obj> Counter<'obj> {
    /// Opens the events and, with cgroups, loads and attaches the BPF program. `storage`
    /// holds the BPF object for as long as the counter lives.
    pub fn open(setup: &Setup, storage: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        let nr_events = setup.events.len();
        if nr_events > MAX_EVENTS {
            bail!("too many events: {nr_events} (bperf counts at most {MAX_EVENTS} at once)");
        }
        if setup.verbose == 0 {
            libbpf_rs::set_print(None);
        }
        let targets: Vec<Target> = match setup.task {
            Some(pid) => vec![Target::Task(pid)],
            None => setup.cpus.iter().map(|&c| Target::Cpu(c)).collect(),
        };
        let path = ReadPath::of_this_kernel();
        // Read by the BPF side from the run queue: no perf event for those.
        let rq_switches = match setup.cgroups.is_empty() {
            true => 0,
            false => path.rq_switches(setup.events),
        };
        let opened =
            open_events(setup.events, &targets, rq_switches, setup.verbose >= 2).map_err(|e| {
                match e {
                    OpenError::Denied(event, e) => anyhow::anyhow!(
                        "cannot open event '{}': {e}: {}",
                        setup.events[event].name,
                        privilege_hint(setup)
                    ),
                    OpenError::Other(e) => e,
                }
            })?;
        let bpf = if setup.cgroups.is_empty() {
            None
        } else {
            Some(Bpf::load(setup, &path, rq_switches, &opened.fds, storage)?)
        };
        let mut c = Counter {
            cpus: setup.cpus.to_vec(),
            nr_targets: targets.len(),
            nr_events,
            fds: opened.fds,
            supported: opened.supported,
            user_only: opened.user_only,
            bpf,
            base: Snapshot::new(setup.cgroups.len(), nr_events, targets.len()),
        };
        c.base = c.read_raw()?;
        Ok(c)
    }

    pub fn supported(&self, event: usize) -> bool {
        self.supported[event]
    }

    /// Whether `event` counts user space only because the kernel refused more (perf's
    /// fallback at kernel.perf_event_paranoid > 1; perf then names it `event:u`).
    pub fn user_only(&self, event: usize) -> bool {
        self.user_only[event]
    }

    /// Counts since the counter was opened.
    pub fn read(&mut self) -> Result<Snapshot> {
        Ok(self.read_raw()?.since(&self.base))
    }

    fn read_raw(&mut self) -> Result<Snapshot> {
        match &self.bpf {
            Some(bpf) => bpf.read(&self.cpus, self.nr_events),
            None => {
                let mut s = Snapshot::new(1, self.nr_events, self.nr_targets);
                for (e, per_cpu) in self.fds.iter().enumerate() {
                    for (c, fd) in per_cpu.iter().enumerate() {
                        if let Some(fd) = fd {
                            s.set(0, e, c, perf_event::read(fd).context("reading a counter")?);
                        }
                    }
                }
                Ok(s)
            }
        }
    }
}

type Fds = Vec<Vec<Option<OwnedFd>>>;

/// The perf events of a counter, and what became of each event.
struct Opened {
    fds: Fds,
    supported: Vec<bool>,
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
fn open_events(
    events: &[Event],
    targets: &[Target],
    rq_switches: u64,
    dump: bool,
) -> Result<Opened, OpenError> {
    let mut o = Opened {
        fds: Vec::with_capacity(events.len()),
        supported: Vec::with_capacity(events.len()),
        user_only: vec![false; events.len()],
    };
    for (i, ev) in events.iter().enumerate() {
        if rq_switches & 1 << i != 0 {
            if dump {
                eprintln!(
                    "{}: no perf event opened: counted from each CPU's run queue switch count (rq->nr_switches)",
                    ev.name
                );
            }
            o.fds.push(targets.iter().map(|_| None).collect());
            o.supported.push(true);
            continue;
        }
        let leader = ev.leader.filter(|&l| l != i && o.supported[l]);
        let mut per_cpu = Vec::with_capacity(targets.len());
        for (pos, &target) in targets.iter().enumerate() {
            let group = leader.and_then(|l| o.fds[l][pos].as_ref());
            let role = match (group, ev.leader) {
                (Some(_), _) => Role::Member,
                (None, Some(l)) if l == i => Role::Leader,
                _ => Role::Single,
            };
            match open_one(ev, target, role, group, dump) {
                Ok((fd, user_only)) => {
                    o.user_only[i] |= user_only;
                    per_cpu.push(Some(fd));
                }
                Err(e) if perf_event::is_permission(&e) => return Err(OpenError::Denied(i, e)),
                Err(e) if perf_event::is_unsupported(&e) => {
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

/// Opens one event on one target. As perf does, a task's event the kernel refuses
/// (EACCES) at kernel.perf_event_paranoid > 1 is opened again for user space only:
/// true in the result says so.
fn open_one(
    ev: &Event,
    target: Target,
    role: Role,
    group: Option<&OwnedFd>,
    dump: bool,
) -> io::Result<(OwnedFd, bool)> {
    let attr = RawAttr::counting(&ev.attr).for_target(target, role);
    match perf_event::open_with_fallback(attr, target, group, dump) {
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES)
                && matches!(target, Target::Task(_))
                && !ev.attr.exclude_kernel
                && !ev.attr.exclude_user
                && perf_event::paranoid() > 1 =>
        {
            if dump {
                eprintln!(
                    "kernel.perf_event_paranoid > 1: trying again, excluding kernel and hypervisor"
                );
            }
            let user = Attr {
                exclude_kernel: true,
                exclude_hv: true,
                ..ev.attr
            };
            let attr = RawAttr::counting(&user).for_target(target, role);
            perf_event::open_with_fallback(attr, target, group, dump).map(|fd| (fd, true))
        }
        r => r.map(|fd| (fd, false)),
    }
}

/// Starts the groups opened on CPUs, which start disabled (see RawAttr::for_target).
fn enable_cpu_groups(events: &[Event], targets: &[Target], fds: &Fds) -> Result<()> {
    if !targets.iter().all(|t| matches!(t, Target::Cpu(_))) {
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

/// Events that are never multiplexed, one bit each: software and tracepoint counters
/// always run while enabled, so the BPF side reads only their count (see read_event in
/// bperf.bpf.c).
fn always_running(events: &[Event]) -> u64 {
    use crate::event::{TYPE_SOFTWARE, TYPE_TRACEPOINT};
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.attr.type_, TYPE_SOFTWARE | TYPE_TRACEPOINT))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// Software events the BPF side reads with plain loads of the perf event instead of the
/// read helper (see load_count in bperf.bpf.c), as three masks with one bit per event:
/// counts the kernel keeps current as things happen (every software event but the two
/// clocks, and tracepoints), cpu-clock, and task-clock.
fn loaded_events(events: &[Event]) -> (u64, u64, u64) {
    use crate::event::{TYPE_SOFTWARE, TYPE_TRACEPOINT};
    const CPU_CLOCK: u64 = 0;
    const TASK_CLOCK: u64 = 1;
    let (mut plain, mut cpu_clock, mut task_clock) = (0, 0, 0);
    for (i, e) in events.iter().enumerate() {
        match (e.attr.type_, e.attr.config) {
            (TYPE_SOFTWARE, CPU_CLOCK) => cpu_clock |= 1 << i,
            (TYPE_SOFTWARE, TASK_CLOCK) => task_clock |= 1 << i,
            (TYPE_SOFTWARE | TYPE_TRACEPOINT, _) => plain |= 1 << i,
            _ => {}
        }
    }
    (plain, cpu_clock, task_clock)
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
    use crate::event::{Attr, TYPE_SOFTWARE};
    const CONTEXT_SWITCHES: u64 = 3;
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            let plain = Attr {
                type_: TYPE_SOFTWARE,
                config: CONTEXT_SWITCHES,
                exclude_guest: e.attr.exclude_guest,
                ..Attr::default()
            };
            e.attr == plain && e.leader.is_none()
        })
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// How the BPF side may read counters on the running kernel.
struct ReadPath {
    release: String,
    /// Plain loads from struct perf_event (see LOADED_EVENTS in bperf.bpf.c): Linux 6.4.
    loads: bool,
    /// BPERF_READ_HELPER=1: every counter through the read helper (context-switches
    /// included), times from ktime, as on kernels older than 6.4 (and as for the clocks
    /// without CONFIG_FAIR_GROUP_SCHED): the tests run that path here too.
    helper_only: bool,
}

impl ReadPath {
    fn of_this_kernel() -> ReadPath {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let helper_only = std::env::var_os("BPERF_READ_HELPER").is_some_and(|v| v == "1");
        ReadPath {
            loads: !helper_only && !kernel_older_than(&release, (6, 4)),
            release,
            helper_only,
        }
    }

    /// The events to read from the run queue's count of switches (see
    /// plain_context_switches): where the BPF side can reach the run queue from a task,
    /// which takes CONFIG_FAIR_GROUP_SCHED (struct cfs_rq's rq member, in the kernel's BTF).
    fn rq_switches(&self, events: &[Event]) -> u64 {
        let mask = plain_context_switches(events);
        match mask != 0 && !self.helper_only && struct_has_member("cfs_rq", "rq") {
            true => mask,
            false => 0,
        }
    }
}

/// Does the running kernel's `struct name` have `member` (from its BTF)?
fn struct_has_member(name: &str, member: &str) -> bool {
    use libbpf_rs::btf::{types::Struct, Btf};
    let Ok(btf) = Btf::from_vmlinux() else {
        return false;
    };
    btf.type_by_name::<Struct>(name).is_some_and(|s| {
        s.iter()
            .any(|m| m.name.is_some_and(|n| n == std::ffi::OsStr::new(member)))
    })
}

/// Is a `uname -r` release such as `6.18.0-1-amd64` older than `min`? Unparsable
/// releases are taken as new enough.
fn kernel_older_than(release: &str, min: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse().ok());
    let minor = parts.next().and_then(|p| p.parse().ok());
    match (major, minor) {
        (Some(a), Some(b)) => (a, b) < min,
        _ => false,
    }
}

impl<'obj> Bpf<'obj> {
    fn load(
        setup: &Setup,
        path: &ReadPath,
        rq_switches: u64,
        fds: &Fds,
        storage: &'obj mut MaybeUninit<OpenObject>,
    ) -> Result<Self> {
        if kernel_older_than(&path.release, (5, 17)) {
            bail!(
                "this kernel ({}) is too old: bperf needs Linux >= 5.17 (bpf_loop, raw tracepoints with BTF)",
                path.release
            );
        }
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            bail!("this kernel has no BTF (/sys/kernel/btf/vmlinux): bperf needs Linux >= 5.13 built with CONFIG_DEBUG_INFO_BTF");
        }
        let nr_possible = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        if let Some(&cpu) = setup.cpus.iter().find(|&&c| c as usize >= nr_possible) {
            bail!("CPU {cpu} does not exist (this machine has {nr_possible} possible CPUs)");
        }
        let nr_events = setup.events.len();
        let nr_slots = setup.cgroups.len();
        let counts_len = nr_possible * nr_slots * nr_events.max(1);
        if counts_len > u32::MAX as usize / 2 {
            bail!("too many cgroups x events x CPUs to count ({counts_len})");
        }

        let mut open = BperfSkelBuilder::default()
            .open(storage)
            .context("opening the BPF object")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("the BPF object has read-only data");
        ro.nr_events = nr_events as u32;
        ro.nr_cpus = nr_possible as u32;
        ro.nr_slots = nr_slots as u32;
        ro.use_v1 = setup.cgroup_v1;
        ro.always_running = always_running(setup.events);
        ro.use_ktime = path.helper_only;
        ro.rq_switches = rq_switches;
        if path.loads {
            let (plain, cpu_clock, task_clock) = loaded_events(setup.events);
            ro.plain_count = plain & !rq_switches;
            (ro.cpu_clock, ro.task_clock) = (cpu_clock, task_clock);
            ro.cast_tasks = true;
        }
        open.maps
            .events
            .set_max_entries((nr_possible * nr_events.max(1)) as u32)?;
        open.maps.cgrp_slot.set_max_entries(nr_slots as u32)?;
        open.maps.counts.set_max_entries(counts_len as u32)?;
        let skel = open.load().map_err(|e| match e.kind() {
            libbpf_rs::ErrorKind::PermissionDenied => {
                anyhow::anyhow!(
                    "cannot load the BPF program: {e}: {}",
                    privilege_hint(setup)
                )
            }
            _ => anyhow::anyhow!("cannot load the BPF program: {e}"),
        })?;

        for (e, per_cpu) in fds.iter().enumerate() {
            for (pos, fd) in per_cpu.iter().enumerate() {
                if let Some(fd) = fd {
                    let key = (e * nr_possible + setup.cpus[pos] as usize) as u32;
                    let val = fd.as_raw_fd() as u32;
                    skel.maps
                        .events
                        .update(&key.to_ne_bytes(), &val.to_ne_bytes(), MapFlags::ANY)
                        .context("filling the perf event array")?;
                }
            }
        }
        for (slot, id) in setup.cgroups.iter().enumerate() {
            skel.maps
                .cgrp_slot
                .update(
                    &id.to_ne_bytes(),
                    &(slot as u32).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .context("filling the cgroup map")?;
        }
        let counts =
            Mapping::new(&skel.maps.counts, counts_len).context("mapping the BPF count array")?;

        let links = vec![
            skel.progs
                .bperf_on_switch
                .attach()
                .context("attaching to sched_switch")?,
            skel.progs
                .bperf_on_attach
                .attach()
                .context("attaching to cgroup_attach_task")?,
        ];
        let bpf = Bpf {
            _links: links,
            skel,
            counts,
            nr_slots,
            nr_possible,
        };
        // The first flush on each CPU sets its baseline; nothing before it is charged.
        bpf.flush(setup.cpus)?;
        Ok(bpf)
    }

    /// Brings every CPU's counts up to now: runs the flush program on each CPU.
    // ProgramInput is non-exhaustive: it cannot be built with a struct literal.
    #[allow(clippy::field_reassign_with_default)]
    fn flush(&self, cpus: &[u32]) -> Result<()> {
        for &cpu in cpus {
            let mut input = ProgramInput::default();
            input.cpu = cpu;
            input.flags = BPF_F_TEST_RUN_ON_CPU;
            self.skel
                .progs
                .bperf_flush
                .test_run(input)
                .with_context(|| format!("flushing counts on CPU {cpu}"))?;
        }
        Ok(())
    }

    fn read(&self, cpus: &[u32], nr_events: usize) -> Result<Snapshot> {
        self.flush(cpus)?;
        let mut s = Snapshot::new(self.nr_slots, nr_events, cpus.len());
        for slot in 0..self.nr_slots {
            for e in 0..nr_events {
                for (pos, &cpu) in cpus.iter().enumerate() {
                    let i = (cpu as usize * self.nr_slots + slot) * nr_events + e;
                    s.set(slot, e, pos, self.counts.get(i));
                }
            }
        }
        let _ = self.nr_possible;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Attr;

    #[test]
    fn kernel_versions() {
        assert!(kernel_older_than("5.16.0", (5, 17)));
        assert!(kernel_older_than("4.19.0-25-amd64", (5, 17)));
        assert!(!kernel_older_than("5.17.1", (5, 17)));
        assert!(!kernel_older_than("6.18.0-1-cloud-amd64", (5, 17)));
        assert!(!kernel_older_than("weird", (5, 17)));
    }

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

    /// Privileged tests skip unless root; with BPERF_REQUIRE_PRIV set (CI) a skip fails.
    pub fn privileged() -> bool {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return true;
        }
        assert!(
            std::env::var_os("BPERF_REQUIRE_PRIV").is_none(),
            "BPERF_REQUIRE_PRIV is set but this test is not running as root"
        );
        eprintln!("skipped: needs root");
        false
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
        }
    }

    /// The root cgroup sees everything, idle included: its BPF total must match a plain
    /// read of the same kind of per-CPU counters over the same time.
    #[test]
    fn root_cgroup_matches_plain_read() {
        if !privileged() {
            return;
        }
        let events = [sw("cpu-clock", 0), sw("context-switches", 3)];
        let cpus = crate::perf_event::online_cpus().unwrap();
        let root = std::fs::metadata(crate::cgroup::Hierarchy::discover().unwrap().mount).unwrap();
        let root_id = std::os::unix::fs::MetadataExt::ino(&root);
        let mut s1 = MaybeUninit::uninit();
        let mut s2 = MaybeUninit::uninit();
        let setup = |cgroups| Setup {
            events: &events,
            cpus: &cpus,
            task: None,
            cgroups,
            cgroup_v1: false,
            verbose: 0,
        };
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

    #[test]
    fn snapshot_indexing_and_deltas() {
        let mut a = Snapshot::new(2, 3, 2);
        let r = |c| Reading {
            counter: c,
            enabled: 10,
            running: 10,
        };
        a.set(1, 2, 1, r(5));
        a.set(1, 2, 0, r(7));
        a.set(0, 0, 0, r(1));
        assert_eq!(a.get(1, 2, 1), r(5));
        assert_eq!(a.total(1, 2).counter, 12);
        assert_eq!(a.total(1, 2).enabled, 20);
        assert_eq!(a.total(0, 0).counter, 1);
        let mut b = a.clone();
        b.set(1, 2, 1, r(9));
        let d = b.since(&a);
        assert_eq!(d.get(1, 2, 1).counter, 4);
        assert_eq!(d.get(1, 2, 0).counter, 0);
    }
}
