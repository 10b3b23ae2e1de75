//! The shared instance pinned on a BPF file system: how it is loaded and pinned, opened
//! by a session, read and flushed, and removed by the last session out.

use std::fs;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, ProgramHandle};
use memmap2::{MmapMut, MmapOptions};

use super::lock::{mounted_by_bperf, BPFFS, LOCK_DIR, MOUNT_MARKER};
use super::registry::{Registry, REGISTRY_VERSION};
use super::{EVENTS, SLOTS};
use crate::bpf::skel::types::{bperf_live, bperf_proc};
use crate::bpf::skel::OpenBperfMaps;
use crate::bpf::{check_kernel, hooks, open_and_load, visit_cpus, Config, Counts, Variant};
use crate::reading::Reading;

/// Process and thread ids tracked at once, inherited children included.
const PROC_KEYS: u32 = 16384;
/// Words of the tracked-id bitmap: one bit for every possible pid (PID_MAX_LIMIT, 2^22).
const TRACKED_WORDS: u32 = 1 << 16;

/// Everything pinned, in the order it is removed: the registry first, since a directory
/// without one is no instance whatever is left, then the links, which stop the programs.
const PINS: [&str; 13] = [
    "registry",
    "on_switch",
    "on_attach",
    "on_fork",
    "on_free",
    "flush",
    "events",
    "cgrp_slot",
    "proc_tgid",
    "proc_tid",
    "tracked",
    "counts",
    "live",
];
const LINKS: [&str; 4] = ["on_switch", "on_attach", "on_fork", "on_free"];

/// The pinned instance, opened by one session.
pub(super) struct Instance {
    pub(super) dir: PathBuf,
    pub(super) nr_possible: usize,
    pub(super) events: MapHandle,
    pub(super) cgrp_slot: MapHandle,
    pub(super) proc_tgid: MapHandle,
    pub(super) proc_tid: MapHandle,
    pub(super) registry: MapHandle,
    pub(super) tracked: MmapMut,
    pub(super) live: MmapMut,
    pub(super) counts: Counts,
    pub(super) flush: ProgramHandle,
}

fn map_at(dir: &Path, name: &str) -> Result<MapHandle> {
    MapHandle::from_pinned_path(dir.join(name))
        .with_context(|| format!("opening {}", dir.join(name).display()))
}

fn mmap_of(map: &MapHandle, bytes: usize) -> Result<MmapMut> {
    // SAFETY: a BPF array created with BPF_F_MMAPABLE; the BPF side and other sessions
    // write it too, so it is only read and written with volatile or atomic accesses.
    unsafe { MmapOptions::new().len(bytes).map_mut(&map.as_fd()) }
        .with_context(|| format!("mapping BPF map {:?}", map.name()))
}

/// What to do about a directory that holds no instance this bperf can use.
pub(super) fn remedy(dir: &Path) -> String {
    format!(
        "if no bperf session counts through it, remove it (rm -r {}), or name another directory with --bpf-attr-map",
        dir.display()
    )
}

impl Instance {
    /// Opens the instance pinned in `dir`, or says what is wrong with the directory and
    /// what to do.
    pub(super) fn open(dir: &Path) -> Result<Instance> {
        Instance::open_pins(dir).map_err(|e| {
            anyhow::anyhow!(
                "{} holds no shared counters this bperf can use ({e:#}): {}",
                dir.display(),
                remedy(dir)
            )
        })
    }

    fn open_pins(dir: &Path) -> Result<Instance> {
        let registry = map_at(dir, "registry")?;
        let fits = registry.map_type() == MapType::Array
            && registry.key_size() == 4
            && registry.value_size() as usize == size_of::<Registry>();
        if !fits {
            bail!(
                "{} is not a registry of this bperf's",
                dir.join("registry").display()
            );
        }
        let nr_possible = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
        let counts_map = map_at(dir, "counts")?;
        let counts = Counts::new(counts_map.as_fd(), nr_possible * SLOTS * EVENTS)?;
        let live = mmap_of(&map_at(dir, "live")?, size_of::<bperf_live>())?;
        let tracked = mmap_of(&map_at(dir, "tracked")?, TRACKED_WORDS as usize * 8)?;
        Ok(Instance {
            dir: dir.to_path_buf(),
            nr_possible,
            events: map_at(dir, "events")?,
            cgrp_slot: map_at(dir, "cgrp_slot")?,
            proc_tgid: map_at(dir, "proc_tgid")?,
            proc_tid: map_at(dir, "proc_tid")?,
            registry,
            tracked,
            live,
            counts,
            flush: ProgramHandle::from_pinned_path(dir.join("flush"))
                .context("opening the shared flush program")?,
        })
    }

    pub(super) fn live(&self) -> *mut bperf_live {
        self.live.as_ptr() as *mut bperf_live
    }

    /// Changes the live configuration the BPF side reads.
    pub(super) fn update_live(&self, f: impl FnOnce(&mut bperf_live)) {
        // SAFETY: the mapping holds one bperf_live; only sessions holding the registry
        // lock write it, and the BPF side reads each field as a whole.
        unsafe {
            let mut v = std::ptr::read_volatile(self.live());
            f(&mut v);
            std::ptr::write_volatile(self.live(), v);
        }
    }

    pub(super) fn tracked_word(&self, id: u32) -> &AtomicU64 {
        let words = self.tracked.as_ptr() as *const AtomicU64;
        assert!(id >> 6 < TRACKED_WORDS);
        // SAFETY: in bounds; the BPF side changes bits of the same words atomically.
        unsafe { &*words.add((id >> 6) as usize) }
    }

    pub(super) fn load_registry(&self) -> Result<Box<Registry>> {
        let bytes = self
            .registry
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading the shared counters' registry")?
            .context("the shared counters' registry is empty")?;
        let mut r = Registry::new();
        plain::copy_from_bytes(&mut *r, &bytes)
            .map_err(|_| anyhow::anyhow!("the shared counters' registry has the wrong size"))?;
        if r.version != REGISTRY_VERSION {
            bail!(
                "{} holds shared counters of another bperf version (registry version {}, this bperf's is {REGISTRY_VERSION}); they go with their last session: {}",
                self.dir.display(),
                r.version,
                remedy(&self.dir)
            );
        }
        Ok(r)
    }

    pub(super) fn store_registry(&self, r: &Registry) -> Result<()> {
        // SAFETY: plain old data.
        let bytes = unsafe { plain::as_bytes(r) };
        self.registry
            .update(&0u32.to_ne_bytes(), bytes, MapFlags::ANY)
            .context("writing the shared counters' registry")
    }

    /// Runs the flush program on `cpu`: its counts are then current.
    pub(super) fn flush(&self, cpu: u32) -> Result<()> {
        let mut opts = libbpf_sys::bpf_test_run_opts {
            sz: size_of::<libbpf_sys::bpf_test_run_opts>() as _,
            cpu,
            flags: libbpf_sys::BPF_F_TEST_RUN_ON_CPU,
            ..Default::default()
        };
        // SAFETY: opts is a valid, sized bpf_test_run_opts; the fd is a program's.
        let r = unsafe {
            libbpf_sys::bpf_prog_test_run_opts(self.flush.as_fd().as_raw_fd(), &mut opts)
        };
        if r < 0 {
            return Err(std::io::Error::from_raw_os_error(-r))
                .with_context(|| format!("flushing shared counts on CPU {cpu}"));
        }
        Ok(())
    }

    pub(super) fn reading(&self, slot: usize, event: usize, cpu: u32) -> Reading {
        self.counts
            .get((cpu as usize * SLOTS + slot) * EVENTS + event)
    }
}

pub(super) fn proc_from(bytes: &[u8]) -> bperf_proc {
    let mut p = bperf_proc::default();
    // SAFETY: bperf_proc is plain old data of this size (the map's value size).
    let out = unsafe {
        std::slice::from_raw_parts_mut(
            (&mut p as *mut bperf_proc).cast::<u8>(),
            size_of::<bperf_proc>(),
        )
    };
    let n = bytes.len().min(out.len());
    out[..n].copy_from_slice(&bytes[..n]);
    p
}

pub(in crate::bpf) fn proc_bytes(p: &bperf_proc) -> &[u8] {
    // SAFETY: plain old data.
    unsafe {
        std::slice::from_raw_parts(
            (p as *const bperf_proc).cast::<u8>(),
            size_of::<bperf_proc>(),
        )
    }
}

/// Sets the sizes and flags the shared instance's maps need before load.
pub(in crate::bpf) fn size_maps(maps: &mut OpenBperfMaps) -> Result<()> {
    // Events stay in the array after the session that added them exits.
    maps.events
        .set_map_flags(libbpf_sys::BPF_F_PRESERVE_ELEMS)?;
    maps.cgrp_slot.set_max_entries(SLOTS as u32)?;
    size_task_maps(maps)
}

/// Sets the sizes of the maps of tracked processes and threads: the shared instance's,
/// or a recording's own (track_tasks in bperf.bpf.c).
pub(in crate::bpf) fn size_task_maps(maps: &mut OpenBperfMaps) -> Result<()> {
    maps.proc_tgid.set_max_entries(PROC_KEYS)?;
    maps.proc_tid.set_max_entries(PROC_KEYS)?;
    maps.tracked.set_max_entries(TRACKED_WORDS)?;
    maps.tracked.set_map_flags(libbpf_sys::BPF_F_MMAPABLE)?;
    Ok(())
}

/// The instance's programs, loaded (verified) but neither attached nor pinned.
pub(super) struct Loaded<'obj> {
    skel: crate::bpf::skel::BperfSkel<'obj>,
    variant: Variant,
    nr_possible: usize,
}

/// Loads the instance's programs. This is the slow part (the verifier takes seconds on
/// an old kernel under an emulator), which is why it is done before the registry lock
/// is taken: a session waits for the lock only while another pins.
pub(super) fn load<'obj>(
    config: &Config,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<Loaded<'obj>> {
    check_kernel()?;
    let nr_possible = libbpf_rs::num_possible_cpus().context("counting possible CPUs")?;
    let counts_len = nr_possible * SLOTS * EVENTS;
    let variant = Variant::of_this_kernel();
    let skel = open_and_load(config, nr_possible, counts_len, variant, storage)?;
    Ok(Loaded {
        skel,
        variant,
        nr_possible,
    })
}

/// Attaches what was `loaded` and pins the instance in `dir`, under the registry lock.
pub(super) fn create(dir: &Path, config: &Config, loaded: Loaded) -> Result<()> {
    remove_pins(dir);
    // Root's alone (mode 0700): another user can neither see nor move what is pinned.
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let Loaded {
        mut skel,
        variant,
        nr_possible,
    } = loaded;
    let pin = |what: &str, r: libbpf_rs::Result<()>| {
        r.with_context(|| format!("pinning {what} in {}", dir.display()))
    };
    let m = &mut skel.maps;
    pin("events", m.events.pin(dir.join("events")))?;
    pin("cgrp_slot", m.cgrp_slot.pin(dir.join("cgrp_slot")))?;
    pin("proc_tgid", m.proc_tgid.pin(dir.join("proc_tgid")))?;
    pin("proc_tid", m.proc_tid.pin(dir.join("proc_tid")))?;
    pin("tracked", m.tracked.pin(dir.join("tracked")))?;
    pin("counts", m.counts.pin(dir.join("counts")))?;
    pin("live", m.bss.pin(dir.join("live")))?;
    if let Some(bss) = m.bss_data.as_deref_mut() {
        bss.live.slots_gen = 1;
    }
    let p = &mut skel.progs;
    let (flush, _) = variant.pick(
        &mut p.bperf_flush,
        &mut p.bperf_flush_bounded,
        &mut p.bperf_flush_old,
    );
    pin("flush", flush.pin(dir.join("flush")))?;
    let [on_switch, on_attach, ..] = hooks(p, variant);
    let links = [
        on_switch.attach(),
        on_attach.attach(),
        p.bperf_on_fork.attach(),
        p.bperf_on_free.attach(),
    ];
    for (name, link) in LINKS.iter().zip(links) {
        let mut link = link.with_context(|| format!("attaching {name}"))?;
        pin(name, link.pin(dir.join(name)))?;
    }
    if variant == Variant::Old {
        let cpus: Vec<u32> = (0..nr_possible as u32).collect();
        visit_cpus(&cpus)?;
    }
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut registry = MapHandle::create(
        MapType::Array,
        Some("bperf_registry"),
        4,
        size_of::<Registry>() as u32,
        1,
        &opts,
    )
    .context("creating the shared counters' registry")?;
    let mut r = Registry::new();
    r.mounted_bpffs = on_bperf_mount(dir).into();
    r.cgroup_v1 = config.cgroup_v1.into();
    // SAFETY: the registry is plain old data (no padding read as anything but bytes).
    let bytes = unsafe { plain::as_bytes(&*r) };
    registry.update(&0u32.to_ne_bytes(), bytes, MapFlags::ANY)?;
    // Pinned last: a directory with a registry holds a whole instance.
    pin("registry", registry.pin(dir.join("registry")))?;
    Ok(())
}

/// Removes the instance's pins and directory (what remains is freed with its last fd).
fn remove_pins(dir: &Path) {
    for name in PINS {
        let _ = fs::remove_file(dir.join(name));
    }
    let _ = fs::remove_dir(dir);
}

/// Whether the instance in `dir` lives at the top of a BPF file system bperf mounted.
fn on_bperf_mount(dir: &Path) -> bool {
    let root = Path::new(BPFFS);
    dir.parent() == Some(root) && mounted_by_bperf(root)
}

/// Removes the instance, and the BPF file system if bperf mounted it and nothing else
/// uses it.
pub(super) fn remove_instance(dir: &Path) {
    let bperf_mount = on_bperf_mount(dir);
    remove_pins(dir);
    // The lock goes too: the next session makes it again, and one waiting on this one
    // sees it gone and locks the new one.
    if let Some(parent) = dir.parent() {
        let _ = fs::remove_dir(parent.join(LOCK_DIR));
    }
    let root = Path::new(BPFFS);
    if bperf_mount {
        // A new BPF file system holds the kernel's preloaded iterators and nothing else
        // but bperf's marker.
        let preloaded = |e: &fs::DirEntry| {
            matches!(
                e.file_name().to_str(),
                Some("maps.debug" | "progs.debug" | MOUNT_MARKER | LOCK_DIR)
            )
        };
        let empty = fs::read_dir(root).is_ok_and(|d| d.flatten().all(|e| preloaded(&e)));
        if empty {
            // Detached: the lock holds the root open until the caller lets go.
            let _ = rustix::mount::unmount(root, rustix::mount::UnmountFlags::DETACH);
        }
    }
}
