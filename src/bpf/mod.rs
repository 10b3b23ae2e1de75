//! The BPF loader: loads bperf.bpf.c (beside this file), fills its maps, attaches its
//! programs, and flushes and reads the per-cgroup counts it keeps. With src/sys/, the
//! only code that talks to the kernel.

pub mod probe;
pub mod prog_profile;
pub mod shared;
pub mod slice_ring;

mod skel {
    #![allow(
        clippy::all,
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_snake_case
    )]
    include!(concat!(env!("OUT_DIR"), "/bperf.skel.rs"));
}

/// The structs the BPF program sends to user space, as the skeleton generates them from
/// bperf.h: bperf record's slices (bperf.data) are decoded through them.
pub mod sent {
    pub use super::skel::types::{bperf_reading, bperf_slice};

    // SAFETY: integers and arrays of integers, no padding: any bit pattern is valid.
    unsafe impl plain::Plain for bperf_slice {}
    // SAFETY: three u64s.
    unsafe impl plain::Plain for bperf_reading {}
}

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys::{BPF_FUNC_loop, BPF_F_TEST_RUN_ON_CPU};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, ProgramInput, ProgramType};
use memmap2::{Mmap, MmapOptions};

use crate::reading::{Reading, Snapshot};
use skel::types::{bperf_proc, bperf_reading, cpu_state};
use skel::{BperfSkel, BperfSkelBuilder};

/// bperf record's phases (RECORD_OPENING and RECORD_CLOSING in bperf.bpf.c).
const RECORD_OPENING: u32 = 1;
const RECORD_CLOSING: u32 = 2;

/// The length of the array field that `field` points at, at compile time.
const fn array_len<T, const N: usize>(_field: fn(&cpu_state) -> &[T; N]) -> usize {
    N
}

const fn array_len_proc<T, const N: usize>(_field: fn(&bperf_proc) -> &[T; N]) -> usize {
    N
}

/// Most events one counter can count: the BPF side keeps one reading per event per CPU
/// (BPERF_MAX_EVENTS in bperf.h, as the skeleton has it).
pub const MAX_EVENTS: usize = array_len(|s| &s.prev);

/// Most slots of one tracked process or thread (BPERF_PROC_SLOTS in bperf.h).
pub const PROC_SLOTS: usize = array_len_proc(|p| &p.slot);

/// Most monitored cgroups one cgroup's time is charged to: itself and its monitored
/// ancestors (BPERF_MAX_LEVELS in bperf.h; a charge list also holds the slots of a
/// tracked process and thread).
pub const MAX_LEVELS: usize = array_len(|s| &s.charge.slot) - 2 * PROC_SLOTS;

/// How the BPF side reads each event, one bit per event (see bperf.bpf.c).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadMasks {
    /// Never multiplexed: read without their times (always_running).
    pub always_running: u64,
    /// Counts the kernel keeps current, read with plain loads (plain_count).
    pub plain_count: u64,
    /// cpu-clock and task-clock, worked out by plain loads from the run queue clock.
    pub cpu_clock: u64,
    pub task_clock: u64,
    /// context-switches from the run queue's count of switches, with no perf event.
    pub rq_switches: u64,
}

impl ReadMasks {
    /// The masks without the events in `events`.
    pub fn without(self, events: u64) -> ReadMasks {
        ReadMasks {
            always_running: self.always_running & !events,
            plain_count: self.plain_count & !events,
            cpu_clock: self.cpu_clock & !events,
            task_clock: self.task_clock & !events,
            rq_switches: self.rq_switches & !events,
        }
    }
}

/// What the BPF side counts.
pub struct Config<'a> {
    pub nr_events: usize,
    /// The CPUs counted.
    pub cpus: &'a [u32],
    /// Monitored cgroup ids; slot i counts cgroups[i].
    pub cgroups: &'a [u64],
    /// Slots for cgroups, at least cgroups.len().
    pub nr_slots: usize,
    /// Cgroups are added and removed while counting (see [`Bpf::add_cgroup`]).
    pub live: bool,
    /// The perf_event controller sits on a cgroup v1 hierarchy.
    pub cgroup_v1: bool,
    pub masks: ReadMasks,
    /// Read every counter with the read helper and time with ktime (BPERF_READ_HELPER=1).
    pub helper_only: bool,
    /// The kernel lets the programs read kernel memory through bpf_rdonly_cast (see
    /// LOADED_EVENTS and untrusted() in bperf.bpf.c); the masks' loads need it.
    pub plain_loads: bool,
    /// What a permission error at load means in this mode.
    pub privilege_hint: &'a str,
    /// Load the instance shared by every session (see shared/) rather than one for
    /// this counter alone: nr_events, cgroups and masks are then left to the sessions.
    pub shared: bool,
    /// bperf record: the ring buffer every CPU sends its slices to; None when not
    /// recording.
    pub slice_ring: Option<&'a slice_ring::SliceRing>,
    /// bperf record of processes or threads: what slot 0 charges (processes, threads,
    /// with their children when they inherit), instead of cgroups.
    pub tasks: &'a [shared::Target],
}

/// The loaded BPF side: skeleton, its attachments and the mapped count array.
// Fields drop in order: the programs are detached first, so none runs while the maps
// and perf events they read go away (the BPF side keeps pointers to the perf events).
pub struct Bpf<'obj> {
    _links: Vec<Link>,
    skel: BperfSkel<'obj>,
    counts: Counts,
    nr_slots: usize,
}

/// The BPF `counts` array, mapped read-only: (cpu * nr_slots + slot) * nr_events + event.
struct Counts {
    map: Mmap,
    len: usize,
}

impl Counts {
    fn new(fd: BorrowedFd, len: usize) -> Result<Counts> {
        let bytes = len * std::mem::size_of::<bperf_reading>();
        // SAFETY: a BPF array created with BPF_F_MMAPABLE, mapped read-only; only the
        // BPF programs write it, whole aligned u64s at a time.
        let map = unsafe { MmapOptions::new().len(bytes).map(&fd) }
            .context("mapping the BPF count array")?;
        Ok(Counts { map, len })
    }

    fn get(&self, i: usize) -> Reading {
        assert!(i < self.len);
        let base = self.map.as_ptr().cast::<bperf_reading>();
        // SAFETY: in bounds of the mapping, which is page-aligned.
        let r = unsafe { std::ptr::read_volatile(base.add(i)) };
        Reading {
            counter: r.counter,
            enabled: r.enabled,
            running: r.running,
        }
    }
}

/// Refuses a kernel the program cannot run on, before trying to load it.
fn check_kernel() -> Result<()> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("this kernel has no BTF (/sys/kernel/btf/vmlinux): bperf needs a kernel built with CONFIG_DEBUG_INFO_BTF");
    }
    if !ProgramType::RawTracepoint
        .is_helper_supported(BPF_FUNC_loop)
        .unwrap_or(true)
    {
        bail!("this kernel has no bpf_loop helper: bperf needs Linux >= 5.17");
    }
    Ok(())
}

/// Attaches the programs `config` needs: the switch and cgroup-move ones always, the
/// exec one for recordings, the fork and free ones where tasks are tracked.
fn attach(skel: &BperfSkel, config: &Config) -> Result<Vec<Link>> {
    let mut links = vec![
        skel.progs
            .bperf_on_switch
            .attach()
            .context("attaching to sched_switch")?,
        skel.progs
            .bperf_on_attach
            .attach()
            .context("attaching to cgroup_attach_task")?,
    ];
    if config.slice_ring.is_some() {
        links.push(
            skel.progs
                .bperf_on_exec
                .attach()
                .context("attaching to sched_process_exec")?,
        );
    }
    if !config.tasks.is_empty() {
        links.push(
            skel.progs
                .bperf_on_fork
                .attach()
                .context("attaching to sched_process_fork")?,
        );
        links.push(
            skel.progs
                .bperf_on_free
                .attach()
                .context("attaching to sched_process_free")?,
        );
    }
    Ok(links)
}

impl<'obj> Bpf<'obj> {
    /// Loads and attaches the program for `config`, with `fds` (event, CPU, perf event)
    /// in its perf event array; flushes once so that counting starts from now.
    pub fn load(
        config: &Config,
        fds: &[(usize, u32, BorrowedFd)],
        storage: &'obj mut MaybeUninit<OpenObject>,
    ) -> Result<Self> {
        check_kernel()?;
        let nr_possible = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        if let Some(&cpu) = config.cpus.iter().find(|&&c| c as usize >= nr_possible) {
            bail!("CPU {cpu} does not exist (this machine has {nr_possible} possible CPUs)");
        }
        let nr_slots = config.nr_slots.max(config.cgroups.len());
        let counts_len = nr_possible * nr_slots * config.nr_events.max(1);
        if counts_len > u32::MAX as usize / 2 {
            bail!("too many cgroups x events x CPUs to count ({counts_len})");
        }
        let skel = open_and_load(config, nr_possible, counts_len, storage)?;
        debug_assert!(!config.shared);
        for &(event, cpu, fd) in fds {
            let key = (event * nr_possible + cpu as usize) as u32;
            let val = fd.as_raw_fd() as u32;
            skel.maps
                .events
                .update(&key.to_ne_bytes(), &val.to_ne_bytes(), MapFlags::ANY)
                .context("filling the perf event array")?;
        }
        for (slot, id) in config.cgroups.iter().enumerate() {
            let slot = slot as u32;
            skel.maps
                .cgrp_slot
                .update(&id.to_ne_bytes(), &slot.to_ne_bytes(), MapFlags::ANY)
                .context("filling the cgroup map")?;
        }
        fill_tasks(&skel, config.tasks)?;
        let counts = Counts::new(skel.maps.counts.as_fd(), counts_len)?;
        let links = attach(&skel, config)?;
        let mut bpf = Bpf {
            _links: links,
            skel,
            counts,
            nr_slots,
        };
        if !config.tasks.is_empty() {
            let bss = bpf.bss();
            // SAFETY: the field lives in the mapped .bss, which the programs only read.
            unsafe {
                std::ptr::addr_of_mut!(bss.live.nr_procs).write_volatile(config.tasks.len() as u32)
            };
        }
        // The first flush on each CPU sets its baseline; nothing before it is charged.
        bpf.flush(config.cpus)?;
        // Slices are sent from the next read on: the counter's own baseline.
        if config.slice_ring.is_some() {
            bpf.set_record_phase(RECORD_OPENING);
        }
        Ok(bpf)
    }

    /// bperf record: the next read on each CPU moves it into `phase` (see record_phase
    /// in bperf.bpf.c).
    fn set_record_phase(&mut self, phase: u32) {
        let bss = self.bss();
        // SAFETY: the field lives in the mapped .bss, which the programs only read.
        unsafe { std::ptr::addr_of_mut!(bss.record_phase).write_volatile(phase) };
    }

    /// The program's .bss, mapped: what userspace changes while the programs run.
    fn bss(&mut self) -> &mut skel::types::bss {
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("the BPF object has a .bss")
    }

    /// bperf record: no slice is sent after the next read's.
    pub fn close_recording(&mut self) {
        self.set_record_phase(RECORD_CLOSING);
    }

    /// bperf record: how many slices each of `cpus` could not send (its ring was full).
    pub fn slices_lost(&self, cpus: &[u32]) -> Result<Vec<u64>> {
        per_cpu_u64(&self.skel.maps.slices_lost, 0, cpus).context("reading the lost slice counts")
    }

    /// bperf record: how many slices each of `cpus` sent or tried to (the written and
    /// the lost).
    pub fn slices_sent(&self, cpus: &[u32]) -> Result<Vec<u64>> {
        let at = std::mem::offset_of!(cpu_state, sent);
        per_cpu_u64(&self.skel.maps.cpu_state, at, cpus).context("reading the sent slice counts")
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

    /// Charges cgroup `id` to `slot` from now on.
    pub fn add_cgroup(&self, id: u64, slot: usize) -> Result<()> {
        assert!(slot < self.nr_slots);
        self.skel
            .maps
            .cgrp_slot
            .update(
                &id.to_ne_bytes(),
                &(slot as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .context("adding a cgroup to the cgroup map")
    }

    /// Stops charging cgroup `id` (it was removed). Its slot keeps what it counted.
    pub fn remove_cgroup(&self, id: u64) {
        // Gone already is fine: the cgroup charges nothing either way.
        let _ = self.skel.maps.cgrp_slot.delete(&id.to_ne_bytes());
    }

    /// Makes every CPU work out its charge lists again, after cgroups were added or
    /// removed (see live_slots in bperf.bpf.c).
    pub fn slots_changed(&mut self) {
        let bss = self.bss();
        // SAFETY: the field lives in the mapped .bss, which the programs only read.
        unsafe {
            let gen = std::ptr::addr_of_mut!(bss.live.slots_gen);
            gen.write_volatile(gen.read_volatile() + 1);
        }
    }

    /// Flushes and reads the counts on `cpus` of `slots` (None: every slot) into `out`,
    /// reusing its memory; other slots keep what `out` held.
    pub fn read_into(
        &self,
        cpus: &[u32],
        nr_events: usize,
        slots: Option<&[usize]>,
        out: &mut Snapshot,
    ) -> Result<()> {
        self.flush(cpus)?;
        out.reshape(self.nr_slots, nr_events, cpus.len());
        let mut read = |slot: usize| {
            for e in 0..nr_events {
                for (pos, &cpu) in cpus.iter().enumerate() {
                    let i = (cpu as usize * self.nr_slots + slot) * nr_events + e;
                    out.set(slot, e, pos, self.counts.get(i));
                }
            }
        };
        match slots {
            Some(slots) => slots
                .iter()
                .filter(|&&s| s < self.nr_slots)
                .for_each(|&s| read(s)),
            None => (0..self.nr_slots).for_each(read),
        }
        Ok(())
    }
}

/// Charges `tasks` to slot 0 (track_tasks in bperf.bpf.c): each in proc_tgid (a
/// process) or proc_tid (a thread), its bit set in `tracked`.
fn fill_tasks(skel: &BperfSkel, tasks: &[shared::Target]) -> Result<()> {
    for &t in tasks {
        let (map, id, inherit) = match t {
            shared::Target::Process { pid, inherit } => (&skel.maps.proc_tgid, pid, inherit),
            shared::Target::Thread { tid, inherit } => (&skel.maps.proc_tid, tid, inherit),
            shared::Target::Cpus | shared::Target::Cgroup(_) => continue,
        };
        let mut p = bperf_proc::default();
        p.slot[0] = 1;
        p.inherit = u32::from(inherit);
        map.update(&id.to_ne_bytes(), shared::proc_bytes(&p), MapFlags::ANY)
            .with_context(|| format!("tracking task {id}"))?;
        let word = id >> 6;
        let bits = match skel
            .maps
            .tracked
            .lookup(&word.to_ne_bytes(), MapFlags::ANY)?
        {
            Some(b) => u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            None => 0,
        };
        let bits = bits | 1 << (id & 63);
        skel.maps
            .tracked
            .update(&word.to_ne_bytes(), &bits.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("tracking task {id}"))?;
    }
    Ok(())
}

/// The u64 at byte `at` of each of `cpus`' values of key 0 of per-CPU array `map`.
fn per_cpu_u64(map: &dyn MapCore, at: usize, cpus: &[u32]) -> Result<Vec<u64>> {
    let per_cpu = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .unwrap_or_default();
    let value = |cpu: u32| {
        per_cpu
            .get(cpu as usize)
            .and_then(|v| v.get(at..at + 8))
            .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    };
    Ok(cpus.iter().map(|&c| value(c)).collect())
}

/// Opens the skeleton, sets its constants and map sizes, and loads it.
fn open_and_load<'obj>(
    config: &Config,
    nr_possible: usize,
    counts_len: usize,
    storage: &'obj mut MaybeUninit<OpenObject>,
) -> Result<BperfSkel<'obj>> {
    let mut open = BperfSkelBuilder::default()
        .open(storage)
        .context("opening the BPF object")?;
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("the BPF object has read-only data");
    let m = &config.masks;
    let (nr_events, nr_slots) = match config.shared {
        true => (shared::EVENTS, shared::SLOTS),
        false => (config.nr_events, config.nr_slots.max(config.cgroups.len())),
    };
    ro.nr_events = nr_events as u32;
    ro.nr_cpus = nr_possible as u32;
    ro.nr_slots = nr_slots as u32;
    ro.shared = config.shared;
    ro.live_slots = config.live;
    ro.use_v1 = config.cgroup_v1;
    ro.always_running = m.always_running;
    ro.use_ktime = config.helper_only;
    ro.rq_switches = m.rq_switches;
    ro.plain_count = m.plain_count & !m.rq_switches;
    (ro.cpu_clock, ro.task_clock) = (m.cpu_clock, m.task_clock);
    ro.cast_tasks = config.plain_loads;
    if let Some(ring) = config.slice_ring {
        ro.record_slices = true;
        // Each CPU wakes the reader every quarter of its share of the ring.
        ro.ring_wake_every = (ring.bytes() / config.cpus.len().max(1) / 4) as u64;
        open.maps
            .slice_ring
            .reuse_fd(ring.fd())
            .context("using the ring buffer")?;
    }
    if config.slice_ring.is_none() {
        // Only a recording's slices are cut at an exec.
        open.progs.bperf_on_exec.set_autoload(false);
    }
    ro.track_tasks = !config.tasks.is_empty();
    if config.shared {
        shared::size_maps(&mut open.maps)?;
    } else {
        if config.tasks.is_empty() {
            // Tracked processes are for shared counters and recordings of tasks only.
            open.progs.bperf_on_fork.set_autoload(false);
            open.progs.bperf_on_free.set_autoload(false);
        } else {
            shared::size_task_maps(&mut open.maps)?;
        }
        open.maps.cgrp_slot.set_max_entries(nr_slots as u32)?;
    }
    let per_cpu = nr_possible * nr_events.max(1);
    open.maps.events.set_max_entries(per_cpu as u32)?;
    open.maps.counts.set_max_entries(counts_len as u32)?;
    open.load().map_err(|e| match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot load the BPF program: {e}: {}",
            config.privilege_hint
        ),
        _ => anyhow::anyhow!("cannot load the BPF program: {e}"),
    })
}
