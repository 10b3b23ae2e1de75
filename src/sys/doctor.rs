//! What `bperf doctor` reads from the running system: the kernel, its BPF features, the
//! PMUs, privileges, mounts and runtime sockets. The verdicts are crate::doctor's.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::bpf::probe::{self, BpfFeatures};
use crate::cgroup::Mount;
use crate::sys::KernelFeatures;

/// Container runtimes' API sockets, by runtime.
pub(crate) const RUNTIME_SOCKETS: &[(&str, &str)] = &[
    ("docker", "/var/run/docker.sock"),
    ("podman", "/run/podman/podman.sock"),
    ("containerd", "/run/containerd/containerd.sock"),
    ("cri-o", "/var/run/crio/crio.sock"),
];

/// Everything the checks look at.
#[derive(Clone, Debug)]
pub struct Facts {
    /// /proc/sys/kernel/osrelease.
    pub kernel_release: String,
    pub btf: bool,
    pub bpf: BpfFeatures,
    pub kernel: KernelFeatures,
    /// The PMUs in /sys/bus/event_source/devices.
    pub pmus: Vec<String>,
    /// Whether a `cycles` counter opens for this process.
    pub cycles: bool,
    /// /proc/sys/kernel/nmi_watchdog, or why it could not be read.
    pub nmi_watchdog: Result<bool, String>,
    /// /proc/sys/kernel/perf_event_paranoid, or why it could not be read.
    pub paranoid: Result<i32, String>,
    /// Whether a process without privileges may count itself (user space only): what
    /// perf_event_paranoid 3 means on this kernel, asked of it.
    pub user_counts_itself: Result<bool, String>,
    pub euid: u32,
    /// CapEff of /proc/self/status.
    pub capabilities: u64,
    /// /proc/cgroups.
    pub proc_cgroups: String,
    pub mounts: Vec<Mount>,
    /// What each cgroup, BPF and trace file system's mount point shows now, and
    /// /sys/fs/bpf's: a later mount over it or above it hides a mount mountinfo lists.
    pub looks: Vec<(PathBuf, Look)>,
    /// Each runtime socket that exists, and whether it answered a connect.
    pub runtimes: Vec<(String, PathBuf, Result<(), String>)>,
}

/// The file systems doctor looks at, by mountinfo's type, with their magic numbers
/// (linux/magic.h).
pub(crate) const MAGICS: &[(&str, i64)] = &[
    ("cgroup", 0x27e0eb),
    ("cgroup2", 0x6367_7270),
    ("bpf", 0xcafe_4a11),
    ("tracefs", 0x7472_6163),
    ("tmpfs", 0x0102_1994),
    ("proc", 0x9fa0),
    ("sysfs", 0x6265_6572),
];

/// What a path shows: the file system there (its magic number) and whether it is
/// mounted read-only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub magic: i64,
    pub read_only: bool,
}

/// A path looked at, or why it could not be.
pub type Look = Result<Seen, String>;

/// Where bperf's shared counters (:b, --bpf-counters) pin their maps.
pub(crate) const BPFFS: &str = "/sys/fs/bpf";

/// Reads the running system. libbpf's own lines are not printed: each probe's answer
/// is in its check's line.
pub(crate) fn gather() -> Facts {
    libbpf_rs::set_print(None);
    let mounts = super::mounts().unwrap_or_default();
    Facts {
        kernel_release: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        btf: Path::new("/sys/kernel/btf/vmlinux").exists(),
        bpf: probe::probe(),
        kernel: KernelFeatures::probe(),
        pmus: pmus(),
        cycles: cycles_open(),
        nmi_watchdog: read_number("/proc/sys/kernel/nmi_watchdog").map(|v| v > 0),
        paranoid: read_number("/proc/sys/kernel/perf_event_paranoid")
            .and_then(|v| i32::try_from(v).map_err(|e| e.to_string())),
        user_counts_itself: super::perf_event::user_counts_itself(),
        euid: rustix::process::geteuid().as_raw(),
        capabilities: effective_capabilities(&bounded("/proc/self/status")),
        proc_cgroups: bounded("/proc/cgroups"),
        looks: looks(&mounts),
        mounts,
        runtimes: runtimes(),
    }
}

/// A number in a /proc/sys file, or why there is none: a file that cannot be read (a
/// container runtime may hide /proc/sys) is not the kernel's default.
fn read_number(path: &str) -> Result<i64, String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{path} holds no number: {:?}", text.trim()))
}

/// Each mount point of the file systems doctor checks, and /sys/fs/bpf, looked at.
fn looks(mounts: &[Mount]) -> Vec<(PathBuf, Look)> {
    let mut points: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| ["cgroup", "cgroup2", "bpf", "tracefs"].contains(&m.fstype.as_str()))
        .map(|m| m.point.clone())
        .chain([PathBuf::from(BPFFS)])
        .take(4096)
        .collect();
    points.sort();
    points.dedup();
    points
        .into_iter()
        .map(|p| {
            let look = look(&p);
            (p, look)
        })
        .collect()
}

/// The file system at `path` now.
fn look(path: &Path) -> Look {
    use rustix::fs::StatVfsMountFlags;
    let fs = rustix::fs::statfs(path).map_err(|e| std::io::Error::from(e).to_string())?;
    let vfs = rustix::fs::statvfs(path).map_err(|e| std::io::Error::from(e).to_string())?;
    Ok(Seen {
        magic: fs.f_type,
        read_only: vfs.f_flag.contains(StatVfsMountFlags::RDONLY),
    })
}

/// The first 1 MiB of a file, "" when it cannot be read.
fn bounded(path: &str) -> String {
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(1 << 20).read_to_string(&mut text);
    }
    text
}

fn pmus() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .take(4096)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether the hardware `cycles` event opens here (for this process, any CPU).
fn cycles_open() -> bool {
    let sysfs = super::sysfs::Sysfs::system();
    crate::event::parse_events("cycles", &sysfs)
        .ok()
        .and_then(|e| e.into_iter().next())
        .is_some_and(|e| super::perf_event::probe(&e.attr))
}

/// The CapEff mask of a /proc/PID/status text (0 when absent).
pub(crate) fn effective_capabilities(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// The runtime sockets that exist, each connected to once.
fn runtimes() -> Vec<(String, PathBuf, Result<(), String>)> {
    RUNTIME_SOCKETS
        .iter()
        .filter(|(_, p)| Path::new(p).exists())
        .map(|(name, p)| {
            let answer = std::os::unix::net::UnixStream::connect(p)
                .map(drop)
                .map_err(|e| e.to_string());
            (name.to_string(), PathBuf::from(p), answer)
        })
        .collect()
}
