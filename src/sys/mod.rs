//! The kernel boundary: every system call, sysfs and procfs read and mount bperf makes,
//! except the BPF loader's (src/bpf/). The rest of the crate is plain Rust on the data
//! these functions return.

pub mod bpf_prog;
pub mod cgroupfs;
pub mod doctor;
pub mod engine_api;
pub mod kubelet;
pub mod perf_event;
pub mod process;
pub mod sysfs;
pub mod topology;

use anyhow::Result;

/// kernel.perf_event_paranoid; 2, the kernel's default, when it cannot be read.
pub fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The online CPUs, from /sys/devices/system/cpu/online.
pub fn online_cpus() -> Result<Vec<u32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    crate::cpus::parse_list(s.trim())
}

/// The CPU as perf's -v names it when it looks up its event tables: on x86,
/// `vendor-family-model-stepping` (family in decimal, model and stepping in hex), from
/// /proc/cpuinfo; None elsewhere or when it cannot be read.
pub fn cpuid() -> Option<String> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "x86")) {
        return None;
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let field = |name: &str| {
        info.lines()
            .take_while(|l| !l.trim().is_empty())
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
    };
    let number = |name: &str| field(name)?.parse::<u32>().ok();
    Some(format!(
        "{}-{}-{:X}-{:X}",
        field("vendor_id")?,
        number("cpu family")?,
        number("model")?,
        number("stepping")?
    ))
}

/// Whether the NMI watchdog is on (kernel.nmi_watchdog), which holds a hardware counter.
pub(crate) fn nmi_watchdog() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/nmi_watchdog")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .is_some_and(|v| v > 0)
}

/// Clock ticks (USER_HZ, as /proc counts times) in ns.
pub(crate) fn ticks_to_ns(ticks: u64) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks.saturating_mul(1_000_000_000 / hz)
}

/// The user and system time each of `cpus` has spent so far (/proc/stat's `cpuN` lines,
/// fields 1 and 3), in ns; (0, 0) for a CPU /proc/stat does not list.
pub(crate) fn cpu_times(cpus: &[u32]) -> Vec<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut times = std::collections::HashMap::new();
    for line in stat.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields.next().and_then(|f| f.strip_prefix("cpu")) else {
            continue;
        };
        let Ok(cpu) = cpu.parse::<u32>() else {
            continue;
        };
        let numbers: Vec<u64> = fields.take(3).filter_map(|f| f.parse().ok()).collect();
        if let [user, _nice, system] = numbers[..] {
            times.insert(cpu, (ticks_to_ns(user), ticks_to_ns(system)));
        }
    }
    cpus.iter()
        .map(|c| times.get(c).copied().unwrap_or_default())
        .collect()
}

/// Whether this process runs as root.
/// The mounts this process sees, from /proc/self/mountinfo (its first 64 MiB: memory
/// stays bounded on a machine with millions of mounts).
pub fn mounts() -> std::io::Result<Vec<crate::cgroup::Mount>> {
    use std::io::Read;
    const MAX: u64 = 64 << 20;
    let mut text = Vec::new();
    std::fs::File::open("/proc/self/mountinfo")?
        .take(MAX)
        .read_to_end(&mut text)?;
    // Paths are bytes: a name that is not UTF-8 is not one bperf looks for.
    Ok(crate::cgroup::Mount::parse_mountinfo(
        &String::from_utf8_lossy(&text),
    ))
}

/// Makes effective the capabilities this process holds but was not given effective: a
/// binary whose file capabilities are permitted only (`setcap cap_bpf,cap_perfmon=p`, as
/// the container image's bperf has them, for a non-root uid) gets them so. Without the
/// file's effective bit, exec does not fail where the container's bounding set lacks
/// one of them (root there keeps what it has). Capabilities are per thread: called
/// first, before any thread starts.
pub fn use_permitted_capabilities() {
    use rustix::thread::{capabilities, set_capabilities};
    let Ok(mut sets) = capabilities(None) else {
        return;
    };
    if sets.effective.contains(sets.permitted) {
        return;
    }
    sets.effective |= sets.permitted;
    // Refused, bperf runs with what it has and says what is missing where it is needed.
    let _ = set_capabilities(None, sets);
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// What the BPF side may use on the running kernel, from its BTF (read once: parsing
/// vmlinux's BTF takes milliseconds). Backports carry what they add there too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelFeatures {
    /// BPF programs can read kernel memory through the bpf_rdonly_cast kfunc (Linux 6.2).
    pub rdonly_cast: bool,
    /// A task's run queue can be reached through its sched_entity (struct cfs_rq has
    /// `rq`: CONFIG_FAIR_GROUP_SCHED).
    pub cfs_rq_rq: bool,
    /// Each task keeps since when it waits on a run queue (struct sched_info has
    /// `last_queued`: CONFIG_SCHED_INFO).
    pub sched_info: bool,
}

impl KernelFeatures {
    /// The running kernel's features, from its BTF: parsed once per process (a few
    /// milliseconds), since the kernel does not change under it.
    pub fn probe() -> KernelFeatures {
        static PROBED: std::sync::OnceLock<KernelFeatures> = std::sync::OnceLock::new();
        *PROBED.get_or_init(KernelFeatures::probe_btf)
    }

    fn probe_btf() -> KernelFeatures {
        use libbpf_rs::btf::types::{Func, Struct};
        use libbpf_rs::btf::Btf;
        let Ok(btf) = Btf::from_vmlinux() else {
            return KernelFeatures::default();
        };
        let has_member = |name: &str, member: &str| {
            btf.type_by_name::<Struct>(name).is_some_and(|s| {
                s.iter()
                    .any(|m| m.name.is_some_and(|n| n == std::ffi::OsStr::new(member)))
            })
        };
        KernelFeatures {
            rdonly_cast: btf.type_by_name::<Func>("bpf_rdonly_cast").is_some(),
            cfs_rq_rq: has_member("cfs_rq", "rq"),
            sched_info: has_member("sched_info", "last_queued"),
        }
    }
}

/// The thousands separator of the user's numeric locale (LC_ALL, LC_NUMERIC, LANG), as
/// perf's `%'` takes it; None where the locale has none, as C and POSIX do.
pub(crate) fn locale_thousands_separator() -> Option<String> {
    // SAFETY: called before bperf starts any thread; setlocale copies the empty name's
    // meaning from the environment, and localeconv's result is read before any other
    // locale call.
    unsafe {
        libc::setlocale(libc::LC_NUMERIC, c"".as_ptr());
        let conv = libc::localeconv();
        if conv.is_null() || (*conv).thousands_sep.is_null() {
            return None;
        }
        let sep = std::ffi::CStr::from_ptr((*conv).thousands_sep).to_string_lossy();
        (!sep.is_empty()).then(|| sep.into_owned())
    }
}

/// Now in ctime(3)'s form, `Mon Nov 23 23:20:00 2026`, in local time.
pub(crate) fn ctime_now() -> String {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: time(NULL) has no preconditions; ctime_r writes at most 26 bytes into
    // buf, which holds 64.
    let text = unsafe {
        let now = libc::time(std::ptr::null_mut());
        if libc::ctime_r(&now, buf.as_mut_ptr()).is_null() {
            return String::new();
        }
        std::ffi::CStr::from_ptr(buf.as_ptr())
    };
    text.to_string_lossy().trim_end().to_string()
}

/// The description of signal `sig`, as strsignal(3) and psignal(3) give it
/// (`Terminated`).
pub(crate) fn signal_description(sig: i32) -> String {
    // SAFETY: strsignal returns a string valid until the next call; it is copied at once.
    unsafe {
        let s = libc::strsignal(sig);
        match s.is_null() {
            true => format!("Signal {sig}"),
            false => std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned(),
        }
    }
}

/// The open file descriptor `fd` the user handed bperf (--log-fd), as a file bperf now
/// owns; an error if it is not open.
pub(crate) fn file_from_fd(fd: i32) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD only asks whether fd is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is open, and nothing else in bperf uses it: the user passed it on for
    // bperf to write to.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// sync(2): flush the file systems' caches (-S).
pub fn sync() {
    rustix::fs::sync();
}

/// Runs `command` with `sh -c` and waits for it; its exit code (128 + signal if killed).
pub fn shell(command: &str) -> std::io::Result<i32> {
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()?;
    Ok(process::exit_code(st))
}

/// perf's --control: `fd:CTL[,ACK]` (descriptors the caller opened) or
/// `fifo:CTL[,ACK]` (named pipes, opened here). Returns the command and the
/// acknowledgement files.
pub(crate) fn open_control(spec: &str) -> std::io::Result<(std::fs::File, Option<std::fs::File>)> {
    use std::io::{Error, ErrorKind};
    let bad = || {
        Error::new(
            ErrorKind::InvalidInput,
            "expected fd:CTL[,ACK] or fifo:CTL[,ACK]",
        )
    };
    let (kind, rest) = spec.split_once(':').ok_or_else(bad)?;
    let mut parts = rest.splitn(2, ',');
    let (ctl, ack) = (parts.next().ok_or_else(bad)?, parts.next());
    let open = |name: &str| -> std::io::Result<std::fs::File> {
        match kind {
            "fd" => file_from_fd(name.parse().map_err(|_| bad())?),
            // Read and write, so that the pipe neither blocks here nor ends when the
            // controlling process closes its end.
            "fifo" => std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(name),
            _ => Err(bad()),
        }
    };
    Ok((open(ctl)?, ack.map(open).transpose()?))
}
