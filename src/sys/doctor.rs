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
    pub nmi_watchdog: bool,
    pub paranoid: i32,
    pub euid: u32,
    /// CapEff of /proc/self/status.
    pub capabilities: u64,
    /// /proc/cgroups.
    pub proc_cgroups: String,
    pub mounts: Vec<Mount>,
    /// Each runtime socket that exists, and whether it answered a connect.
    pub runtimes: Vec<(String, PathBuf, Result<(), String>)>,
}

/// Reads the running system.
pub(crate) fn gather() -> Facts {
    Facts {
        kernel_release: bounded("/proc/sys/kernel/osrelease").trim().to_string(),
        btf: Path::new("/sys/kernel/btf/vmlinux").exists(),
        bpf: probe::probe(),
        kernel: KernelFeatures::probe(),
        pmus: pmus(),
        cycles: cycles_open(),
        nmi_watchdog: super::nmi_watchdog(),
        paranoid: super::paranoid(),
        euid: rustix::process::geteuid().as_raw(),
        capabilities: effective_capabilities(&bounded("/proc/self/status")),
        proc_cgroups: bounded("/proc/cgroups"),
        mounts: super::mounts().unwrap_or_default(),
        runtimes: runtimes(),
    }
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
