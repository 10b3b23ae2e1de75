//! The event sources sysfs and tracefs describe: PMUs with their formats and named
//! events under /sys/bus/event_source/devices, tracepoint ids under tracefs.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};

use crate::event::{Attr, Pmu, Sources, TYPE_HARDWARE};

/// Where PMU and tracepoint descriptions live.
#[derive(Clone, Debug)]
pub(crate) struct Sysfs {
    /// Normally /sys/bus/event_source/devices.
    pub root: PathBuf,
    /// Normally /sys/kernel/tracing.
    pub tracefs: PathBuf,
    /// Mount tracefs at `tracefs` the first time a tracepoint is looked up, if nothing
    /// is mounted there yet (as perf does): the running system only.
    mount_tracefs: bool,
    /// The core PMUs, read once.
    core_pmus: OnceLock<Vec<Pmu>>,
    /// Whether the kernel takes a core PMU's type in a legacy event's config: asked of
    /// the running kernel once, the first time it matters; a fixture says.
    extended_type: OnceLock<bool>,
}

impl Sysfs {
    pub fn system() -> Self {
        let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("events").is_dir());
        Sysfs {
            root: PathBuf::from("/sys/bus/event_source/devices"),
            mount_tracefs: tracefs.is_none(),
            tracefs: tracefs.unwrap_or_else(|| PathBuf::from("/sys/kernel/tracing")),
            core_pmus: OnceLock::new(),
            extended_type: OnceLock::new(),
        }
    }

    /// The tracepoint directory (tracefs/events), mounting tracefs first if this is the
    /// running system and it is not mounted.
    pub fn tracepoints(&self) -> PathBuf {
        let events = self.tracefs.join("events");
        if self.mount_tracefs && !events.is_dir() {
            // Without it there are no tracepoints, which the caller reports.
            let _ = mount_tracefs(&self.tracefs);
        }
        events
    }

    /// A fixture tree: PMUs under `root`, tracepoints (if any) under `root/../tracing`,
    /// on a kernel that takes extended types (see [`Sources::extended_type`]).
    #[cfg(test)]
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let tracefs = root.parent().unwrap_or(Path::new("/")).join("tracing");
        Sysfs {
            root,
            tracefs,
            mount_tracefs: false,
            core_pmus: OnceLock::new(),
            extended_type: OnceLock::from(true),
        }
    }

    /// The same fixture on a kernel that does not take extended types (arm64 before
    /// Linux 6.6).
    #[cfg(test)]
    pub(crate) fn without_extended_type(self) -> Self {
        Sysfs {
            extended_type: OnceLock::from(false),
            ..self
        }
    }
}

impl Sources for Sysfs {
    fn pmu_root(&self) -> &Path {
        &self.root
    }

    fn pmu(&self, name: &str) -> Option<Pmu> {
        if name.is_empty() || name.contains(['/', '.']) {
            return None;
        }
        load_pmu(&self.root.join(name)).ok()
    }

    fn pmus(&self) -> Vec<Pmu> {
        let Ok(rd) = std::fs::read_dir(&self.root) else {
            return vec![];
        };
        let mut v: Vec<Pmu> = rd
            .flatten()
            .filter_map(|e| load_pmu(&e.path()).ok())
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn core_pmus(&self) -> Vec<Pmu> {
        let read = || {
            let mut v: Vec<Pmu> = self.pmus().into_iter().filter(|p| p.core).collect();
            v.sort_by(|a, b| crate::event::pmu_name_order(&a.name, &b.name));
            v
        };
        self.core_pmus.get_or_init(read).clone()
    }

    fn extended_type(&self) -> bool {
        *self
            .extended_type
            .get_or_init(|| kernel_takes_extended_type(&self.core_pmus()))
    }

    fn tracepoint_id(&self, sys: &str, name: &str) -> Option<u64> {
        let ok = |s: &str| !s.is_empty() && !s.contains(['/', '.']);
        if !ok(sys) || !ok(name) {
            return None;
        }
        let p = self.tracepoints().join(sys).join(name).join("id");
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    }

    fn tracepoints(&self) -> Vec<(String, String, u64)> {
        let mut out = vec![];
        for sys in subdirs(&self.tracepoints()) {
            for event in subdirs(&self.tracepoints().join(&sys)) {
                if let Some(id) = self.tracepoint_id(&sys, &event) {
                    out.push((sys.clone(), event, id));
                }
            }
        }
        out
    }
}

/// The names of the directories in `dir`; none when it cannot be read.
fn subdirs(dir: &Path) -> Vec<String> {
    let Ok(rd) = fs::read_dir(dir) else {
        return vec![];
    };
    rd.flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// Whether the kernel takes a hardware event for each of the core `pmus` (cycles, with
/// the PMU's type in the config's upper 32 bits), asked as perf asks: opened for this
/// thread, then for user space only (kernel.perf_event_paranoid), then excluding the
/// guest (as Apple's PMU wants). Only a machine with several core PMUs is asked.
fn kernel_takes_extended_type(pmus: &[Pmu]) -> bool {
    pmus.len() > 1
        && pmus.iter().all(|p| {
            let cycles = Attr {
                type_: TYPE_HARDWARE,
                config: u64::from(p.type_) << 32,
                ..Attr::default()
            };
            let user = Attr {
                exclude_kernel: true,
                ..cycles
            };
            let no_guest = Attr {
                exclude_guest: true,
                ..user
            };
            [cycles, user, no_guest]
                .iter()
                .any(crate::sys::perf_event::probe)
        })
}

/// The PMU described in `dir`. A core PMU is `cpu` (and s390's `cpum_cf`), or one with a
/// `cpus` file; its CPUs come from `cpumask` or `cpus`, as perf reads them.
fn load_pmu(dir: &Path) -> Result<Pmu> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("bad PMU directory {}", dir.display()))?;
    let type_file = fs::read_to_string(dir.join("type"))
        .with_context(|| format!("reading {}/type", dir.display()))?;
    let formats = files_in(&dir.join("format"));
    let events = files_in(&dir.join("events"));
    let mut pmu = Pmu::from_files(name, &type_file, &formats, &events)?;
    pmu.core = matches!(name, "cpu" | "cpum_cf") || dir.join("cpus").exists();
    pmu.cpus = ["cpumask", "cpus"]
        .iter()
        .find_map(|f| read_cpu_list(&dir.join(f)));
    Ok(pmu)
}

/// The most a PMU's CPU list file is read of: a list of every CPU of the largest
/// machines Linux runs on is a few KB.
const CPU_LIST_MAX: u64 = 64 * 1024;

/// The CPUs a `cpus` or `cpumask` file lists (`0-15`, or empty for none); None when it
/// is missing or unreadable.
fn read_cpu_list(path: &Path) -> Option<Vec<u32>> {
    let mut s = String::new();
    fs::File::open(path)
        .ok()?
        .take(CPU_LIST_MAX)
        .read_to_string(&mut s)
        .ok()?;
    match s.trim() {
        "" => Some(Vec::new()),
        list => crate::cpus::parse_list(list).ok(),
    }
}

/// Files of a directory as (name, content), sorted by name; empty when it is missing.
fn files_in(dir: &Path) -> Vec<(String, String)> {
    let Ok(rd) = fs::read_dir(dir) else {
        return vec![];
    };
    let mut out: Vec<(String, String)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let content = fs::read_to_string(e.path()).ok()?;
            Some((name, content))
        })
        .collect();
    out.sort();
    out
}

/// Mounts tracefs at `at` (normally /sys/kernel/tracing), where tracepoint ids live.
fn mount_tracefs(at: &Path) -> std::io::Result<()> {
    use rustix::mount::{mount, MountFlags};
    mount("nodev", at, "tracefs", MountFlags::empty(), None)?;
    Ok(())
}
