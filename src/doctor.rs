//! `bperf doctor`: what works on this machine and why not, one line per check with the
//! fix. The facts come from sys::doctor; the verdicts here are plain Rust on them.

use std::io::Write;
use std::path::Path;

use anyhow::Result;

use crate::bpf::probe::Answer;
use crate::cgroup::{perf_event_hierarchy, Hierarchy, Mount};
use crate::sys::doctor::{Facts, BPFFS, MAGICS};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, with less: some events, options or speed are lost.
    Warn,
    Fail,
    /// Cannot tell: the kernel would not be asked (no privileges).
    Unknown,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Unknown => "unknown",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do about it; None when there is nothing to do.
    pub fix: Option<String>,
    /// Counting per cgroup needs this check to pass.
    pub needed: bool,
}

fn check(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: None,
        needed: false,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        if self.status != Status::Ok {
            self.fix = Some(fix.into());
        }
        self
    }

    fn needed(mut self) -> Check {
        self.needed = true;
        self
    }
}

/// The capabilities bperf uses (bit numbers of linux/capability.h).
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn has(f: &Facts, cap: u32) -> bool {
    f.capabilities & (1 << cap) != 0
}

/// May this process load BPF programs and open CPU-wide counters?
fn privileged(f: &Facts) -> bool {
    has(f, CAP_SYS_ADMIN) || (has(f, CAP_BPF) && has(f, CAP_PERFMON))
}

/// Every check, in order, ending with the verdict on counting per cgroup.
pub fn checks(f: &Facts) -> Vec<Check> {
    let mut all = vec![
        kernel(f),
        bpf_loop(f),
        read_path(f),
        runq_waits(f),
        trampolines(f),
        ring_buffer(f),
        task_storage(f),
        pmu(f),
        nmi_watchdog(f),
        capabilities(f),
        paranoid(f),
        cgroup_layout(f),
        perf_event_controller(f),
        bpffs(f),
        tracefs(f),
        runtimes(f),
    ];
    all.push(verdict(&all));
    all
}

fn kernel(f: &Facts) -> Check {
    match f.btf {
        true => check("kernel", Status::Ok, format!("Linux {}, with BTF (/sys/kernel/btf/vmlinux)", f.kernel_release)),
        false => check("kernel", Status::Fail, format!("Linux {}, without BTF (no /sys/kernel/btf/vmlinux)", f.kernel_release))
            .fix("a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian, Ubuntu, Fedora and RHEL kernels are)"),
    }
    .needed()
}

/// A feature probe's line: `what` is what the feature gives, `without` what is lost.
fn feature(
    name: &'static str,
    answer: &Answer,
    f: &Facts,
    (what, without, fix): (&str, &str, &str),
) -> Check {
    match answer {
        Ok(true) => check(name, Status::Ok, what),
        Ok(false) => check(name, Status::Warn, without).fix(fix),
        Err(e) if !privileged(f) => check(
            name,
            Status::Unknown,
            format!("cannot tell: the kernel would not be asked ({e})"),
        )
        .fix("run bperf doctor as root, or with CAP_BPF and CAP_PERFMON"),
        Err(e) => check(
            name,
            Status::Warn,
            format!("{without} (the kernel refused: {e})"),
        )
        .fix(fix),
    }
}

fn bpf_loop(f: &Facts) -> Check {
    let mut c = feature(
        "bpf_loop",
        &f.bpf.bpf_loop,
        f,
        (
            "the bpf_loop helper, which bperf's programs loop with",
            "no bpf_loop helper: bperf's programs cannot load",
            "Linux >= 5.17",
        ),
    );
    if c.status == Status::Warn {
        c.status = Status::Fail;
    }
    c.needed()
}

fn read_path(f: &Facts) -> Check {
    if f.bpf.read_value.is_err() && !privileged(f) {
        return feature("read path", &f.bpf.read_value, f, ("", "", ""));
    }
    if !f.btf && f.bpf.read_value.is_ok() {
        return without_btf("read path");
    }
    if f.bpf.read_value == Ok(false) {
        return check(
            "read path",
            Status::Fail,
            "no bpf_perf_event_read_value helper: counters cannot be read from BPF",
        )
        .fix("Linux >= 4.15")
        .needed();
    }
    match (f.kernel.rdonly_cast, f.kernel.cfs_rq_rq) {
        (true, true) => check("read path", Status::Ok, "counters read with plain loads (bpf_rdonly_cast), context-switches from the run queue"),
        (true, false) => check("read path", Status::Ok, "counters read with plain loads (bpf_rdonly_cast); context-switches through the read helper (no CONFIG_FAIR_GROUP_SCHED)"),
        (false, _) => check("read path", Status::Warn, "counters read through bpf_perf_event_read_value (no bpf_rdonly_cast kfunc): each switch costs more")
            .fix("Linux >= 6.2"),
    }
}

/// How a recording's bperf/runq-wait/ times a wait: from the task's own sched_info at the
/// switch, or from wake-up programs.
fn runq_waits(f: &Facts) -> Check {
    if !f.btf {
        return without_btf("run-queue waits");
    }
    match (f.kernel.sched_info, f.kernel.cfs_rq_rq) {
        (true, true) => check("run-queue waits", Status::Ok, "a recording's bperf/runq-wait/ is read from each task's sched_info at the switch, with no wake-up programs (serve --runq and stat's run-queue events follow wake-ups)"),
        (false, _) => check("run-queue waits", Status::Warn, "a recording's bperf/runq-wait/ is timed from wake-up programs (no CONFIG_SCHED_INFO), which cost more")
            .fix("a kernel with CONFIG_SCHED_INFO (CONFIG_SCHEDSTATS or CONFIG_TASK_DELAY_ACCT)"),
        (true, false) => check("run-queue waits", Status::Warn, "a recording's bperf/runq-wait/ is timed from wake-up programs (no CONFIG_FAIR_GROUP_SCHED, the way to the run queue's clock), which cost more")
            .fix("a kernel with CONFIG_FAIR_GROUP_SCHED"),
    }
}

/// A check that reads the kernel's BTF, on a kernel without it.
fn without_btf(name: &'static str) -> Check {
    check(
        name,
        Status::Unknown,
        "cannot tell without the kernel's BTF (see kernel)",
    )
}

fn trampolines(f: &Facts) -> Check {
    if !f.btf && privileged(f) {
        return without_btf("trampolines");
    }
    feature(
        "trampolines",
        &f.bpf.trampolines,
        f,
        (
            "fentry/fexit programs load and attach: bperf stat -b counts inside BPF programs",
            "no BPF trampolines (fentry/fexit): bperf stat -b cannot count inside BPF programs; nothing else needs them",
            "a kernel that allows fentry programs (x86-64 or arm64 with CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS, no lockdown or LSM refusing them)",
        ),
    )
}

fn ring_buffer(f: &Facts) -> Check {
    feature(
        "ring buffer",
        &f.bpf.ring_buffer,
        f,
        (
            "BPF ring buffers: bperf record sends its slices through one",
            "no BPF ring buffer: bperf record cannot record",
            "Linux >= 5.8",
        ),
    )
}

fn task_storage(f: &Facts) -> Check {
    feature(
        "task storage",
        &f.bpf.task_storage,
        f,
        (
            "BPF task storage maps",
            "no BPF task storage maps",
            "Linux >= 5.11",
        ),
    )
}

/// The PMUs that count no hardware: what every machine has.
const SOFTWARE_PMUS: [&str; 7] = [
    "software",
    "tracepoint",
    "breakpoint",
    "kprobe",
    "uprobe",
    "msr",
    "power",
];

fn pmu(f: &Facts) -> Check {
    let others: Vec<&str> = f
        .pmus
        .iter()
        .map(String::as_str)
        .filter(|p| !SOFTWARE_PMUS.contains(p))
        .collect();
    if f.cycles {
        return check(
            "pmu",
            Status::Ok,
            format!(
                "hardware counters count (cycles opens; PMUs: {})",
                f.pmus.join(", ")
            ),
        );
    }
    let which = match others.is_empty() {
        true => "no hardware PMU".to_string(),
        false => format!(
            "no PMU here counts cycles ({} opened none)",
            others.join(", ")
        ),
    };
    check(
        "pmu",
        Status::Warn,
        format!("{which} (PMUs: {}): hardware and cache events print <not supported>; software events (task-clock, context-switches, page-faults) are counted", f.pmus.join(", ")),
    )
    .fix("on a virtual machine, give the guest a virtual PMU (KVM: -cpu host with the host's kvm enable_pmu=1; VMware: virtualize CPU performance counters; a cloud: an instance type with a PMU)")
}

/// The fix for a /proc/sys file that cannot be read.
const PROC_SYS_FIX: &str =
    "run bperf doctor where /proc/sys can be read (a container runtime may hide it)";

fn nmi_watchdog(f: &Facts) -> Check {
    let on = match &f.nmi_watchdog {
        Ok(on) => *on,
        Err(e) => {
            let what = match f.cycles {
                true => "whether it holds a hardware counter is unknown",
                false => "there are no hardware counters for it to hold anyway",
            };
            return check("nmi watchdog", Status::Unknown, format!("{e}: {what}"))
                .fix(PROC_SYS_FIX);
        }
    };
    match (on, f.cycles) {
        (false, _) => check("nmi watchdog", Status::Ok, "off: every hardware counter is free"),
        (true, false) => check("nmi watchdog", Status::Ok, "on, but there are no hardware counters for it to hold"),
        (true, true) => check("nmi watchdog", Status::Warn, "on: it holds one hardware counter on every CPU, which leaves one fewer for bperf (more multiplexing)")
            .fix("sysctl kernel.nmi_watchdog=0"),
    }
}

/// How to give bperf its capabilities without giving them to every user.
const GRANT_FIX: &str = "run as root, or from bperf's systemd unit (AmbientCapabilities=), or grant them to a copy only a group may run: install -o root -g bperf -m 0750 $(command -v bperf) /usr/local/bin/bperf-caps && setcap cap_bpf,cap_perfmon,cap_sys_resource,cap_dac_read_search+ep /usr/local/bin/bperf-caps (setcap on a bperf every user may run lets every local user count and record the whole system)";

fn capabilities(f: &Facts) -> Check {
    let named = [
        (CAP_BPF, "CAP_BPF"),
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"),
        (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
    ];
    let missing: Vec<&str> = named
        .iter()
        .filter(|(c, _)| !has(f, *c))
        .map(|(_, n)| *n)
        .collect();
    let who = format!("euid {}", f.euid);
    if missing.is_empty() {
        return check(
            "capabilities",
            Status::Ok,
            format!("{who}, with CAP_BPF, CAP_PERFMON, CAP_SYS_RESOURCE and CAP_DAC_READ_SEARCH"),
        );
    }
    let (status, can) = match privileged(f) {
        true => (Status::Warn, "bperf can load BPF and count CPUs"),
        false => (
            Status::Fail,
            "loading BPF and counting CPUs need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)",
        ),
    };
    let c = check(
        "capabilities",
        status,
        format!("{who}, without {}: {can}; CAP_SYS_RESOURCE lifts the locked-memory limit kernels before 5.11 charge BPF maps to; CAP_DAC_READ_SEARCH reads other users' /proc and cgroups", missing.join(", ")),
    )
    .fix(GRANT_FIX);
    c.needed()
}

fn paranoid(f: &Facts) -> Check {
    let p = match &f.paranoid {
        Ok(p) => *p,
        Err(e) => {
            return check(
                "perf_event_paranoid",
                Status::Unknown,
                format!("{e}: what users may count is unknown ({})", self_count(f)),
            )
            .fix(PROC_SYS_FIX)
        }
    };
    if has(f, CAP_PERFMON) || has(f, CAP_SYS_ADMIN) {
        let users = match p >= 3 {
            true => format!("; {}", users_at_3(f)),
            false => String::new(),
        };
        return check(
            "perf_event_paranoid",
            Status::Ok,
            format!("{p}: no limit for this process (CAP_PERFMON){users}"),
        );
    }
    let what = match p {
        i32::MIN..=-1 => {
            return check(
                "perf_event_paranoid",
                Status::Ok,
                format!("{p}: every user may count anything"),
            )
        }
        0 => "users may count CPUs but not kernel-only events".to_string(),
        1 | 2 => "users may count only their own processes (bperf stat COMMAND)".to_string(),
        _ => users_at_3(f),
    };
    check(
        "perf_event_paranoid",
        Status::Warn,
        format!("{p}: {what}; per-cgroup counting needs CAP_PERFMON whatever it is"),
    )
    .fix("sysctl kernel.perf_event_paranoid=-1, or give bperf CAP_PERFMON")
}

/// Whether a process without privileges could count itself here.
fn self_count(f: &Facts) -> String {
    match &f.user_counts_itself {
        Ok(true) => "an unprivileged process counted itself".to_string(),
        Ok(false) => "an unprivileged process could not count itself".to_string(),
        Err(e) => format!("whether an unprivileged process may count itself is unknown: {e}"),
    }
}

/// What perf_event_paranoid 3 means here, as a process without privileges found it.
fn users_at_3(f: &Facts) -> String {
    let patched = "a kernel with Debian's or Android's patch refuses unprivileged users at 3";
    let here = match &f.user_counts_itself {
        Ok(true) => "this kernel does not: users may count their own processes, as at 2",
        Ok(false) => "this kernel does: users may not open perf events at all",
        Err(_) => "whether this kernel does is unknown",
    };
    format!("{patched}; {here} ({})", self_count(f))
}

/// A file system's name, from its magic number.
fn fs_name(magic: i64) -> String {
    match MAGICS.iter().find(|(_, m)| *m == magic) {
        Some((name, _)) => name.to_string(),
        None => format!("a file system of type {magic:#x}"),
    }
}

/// Whether `point` shows a file system of `fstype` now: Ok(read-only) when it does,
/// what it shows instead when it does not (a later mount over it or above it).
fn shown(f: &Facts, point: &Path, fstype: &str) -> Result<bool, String> {
    let want = MAGICS.iter().find(|(n, _)| *n == fstype).map(|(_, m)| *m);
    match f.looks.iter().find(|(p, _)| p == point).map(|(_, l)| l) {
        Some(Ok(seen)) if Some(seen.magic) == want => Ok(seen.read_only),
        Some(Ok(seen)) => Err(format!(
            "{} shows {} instead",
            point.display(),
            fs_name(seen.magic)
        )),
        Some(Err(e)) => Err(format!("{} cannot be seen: {e}", point.display())),
        None => Err(format!("{} was not looked at", point.display())),
    }
}

/// The cgroup v1 hierarchies and cgroup2 mounts that can be seen, and what hides the
/// others.
fn cgroup_mounts(f: &Facts) -> (Vec<&Mount>, Vec<&Mount>, Vec<String>) {
    let (mut v1, mut v2, mut hidden) = (Vec::new(), Vec::new(), Vec::new());
    for m in f.mounts.iter().filter(|m| m.fstype.starts_with("cgroup")) {
        match (shown(f, &m.point, &m.fstype), m.fstype == "cgroup") {
            (Err(why), _) => hidden.push(why),
            (Ok(_), true) => v1.push(m),
            (Ok(_), false) => v2.push(m),
        }
    }
    (v1, v2, hidden)
}

fn cgroup_layout(f: &Facts) -> Check {
    let (v1, v2, hidden) = cgroup_mounts(f);
    let points = |ms: &[&Mount]| {
        ms.iter()
            .map(|m| m.point.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let layout = match (v1.is_empty(), v2.is_empty()) {
        (true, false) => format!("cgroup v2 only, at {}", points(&v2)),
        (false, false) => format!(
            "hybrid: cgroup v1 controllers at {}, cgroup2 at {}",
            points(&v1),
            points(&v2)
        ),
        (false, true) => format!("cgroup v1 only, at {}", points(&v1)),
        (true, true) if hidden.is_empty() => {
            return check(
                "cgroup layout",
                Status::Fail,
                "no cgroup file system is mounted",
            )
            .fix("mount -t cgroup2 none /sys/fs/cgroup")
            .needed()
        }
        (true, true) => "no cgroup file system can be seen".to_string(),
    };
    let status = match (hidden.is_empty(), v1.is_empty() && v2.is_empty()) {
        (true, _) => return check("cgroup layout", Status::Ok, layout),
        (false, true) => Status::Fail,
        (false, false) => Status::Warn,
    };
    let more = match hidden.len() {
        0..=3 => String::new(),
        n => format!("; and {} more", n - 3),
    };
    check(
        "cgroup layout",
        status,
        format!(
            "{layout}; a later mount hides cgroup mounts mountinfo lists: {}{more}",
            hidden[..hidden.len().min(3)].join("; ")
        ),
    )
    .fix(UNHIDE_FIX)
}

/// The fix for a mount another mount hides.
const UNHIDE_FIX: &str =
    "unmount what is mounted over it (findmnt lists it), or run bperf in a mount namespace where it shows";

fn perf_event_controller(f: &Facts) -> Check {
    let h = perf_event_hierarchy(&f.proc_cgroups);
    let found = match Hierarchy::find(h, &f.mounts) {
        Ok(found) => found,
        Err(e) => {
            return check("perf_event", Status::Fail, e.to_string())
                .fix("mount -t cgroup2 none /sys/fs/cgroup")
                .needed()
        }
    };
    let at = found.mount.display();
    let fstype = if found.v1 { "cgroup" } else { "cgroup2" };
    if let Err(why) = shown(f, &found.mount, fstype) {
        return check(
            "perf_event",
            Status::Fail,
            format!("its hierarchy ({fstype}) is mounted at {at}, but a later mount hides it ({why}): bperf cannot read its cgroups"),
        )
        .fix(UNHIDE_FIX)
        .needed();
    }
    match (h, found.v1) {
        (_, true) => check("perf_event", Status::Ok, format!("on cgroup v1 hierarchy {} mounted at {at}: bperf counts its cgroups", h.unwrap_or(0))),
        (Some(n), false) if n != 0 => check(
            "perf_event",
            Status::Warn,
            format!("on cgroup v1 hierarchy {n}, which is mounted nowhere in this mount namespace: bperf counts cgroup2's cgroups (at {at}), but perf's own -G prints <not supported>"),
        )
        .fix("end the stray hierarchy: mount it (mkdir /tmp/pe && mount -t cgroup -o perf_event none /tmp/pe), stop the tasks in its cgroups, rmdir them, then umount /tmp/pe: /proc/cgroups shows perf_event at hierarchy 0 again"),
        _ => check("perf_event", Status::Ok, format!("on cgroup2 (hierarchy 0 in /proc/cgroups), mounted at {at}")),
    }
}

fn bpffs(f: &Facts) -> Check {
    match shown(f, Path::new(BPFFS), "bpf") {
        Ok(false) => check("bpffs", Status::Ok, format!("mounted at {BPFFS}")),
        Ok(true) => check(
            "bpffs",
            Status::Warn,
            format!("mounted read-only at {BPFFS}: the shared counters (:b, --bpf-counters) cannot pin their maps there"),
        )
        .fix(format!("mount -o remount,rw {BPFFS}")),
        Err(_) => check(
            "bpffs",
            Status::Warn,
            format!("no BPF file system mounted at {BPFFS}: --bpf-counters mounts one there while it runs"),
        )
        .fix(format!("mount -t bpf bpf {BPFFS}")),
    }
}

fn tracefs(f: &Facts) -> Check {
    let seen = f
        .mounts
        .iter()
        .filter(|m| m.fstype == "tracefs")
        .find(|m| shown(f, &m.point, "tracefs").is_ok());
    match seen {
        Some(m) => check("tracefs", Status::Ok, format!("mounted at {}", m.point.display())),
        None => check("tracefs", Status::Warn, "not mounted: tracepoint events (-e sched:sched_switch) need it; bperf mounts it at /sys/kernel/tracing when it may")
            .fix("mount -t tracefs nodev /sys/kernel/tracing"),
    }
}

fn runtimes(f: &Facts) -> Check {
    if f.runtimes.is_empty() {
        let paths: Vec<&str> = crate::sys::doctor::RUNTIME_SOCKETS
            .iter()
            .map(|(_, p)| *p)
            .collect();
        return check("containers", Status::Ok, format!("no container runtime socket ({}): --for-each-container names containers from their cgroup paths alone", paths.join(", ")));
    }
    let each: Vec<String> = f
        .runtimes
        .iter()
        .map(|(name, path, answer)| match answer {
            Ok(()) => format!("{name} answers at {}", path.display()),
            Err(e) => format!("{name} at {}: {e}", path.display()),
        })
        .collect();
    match f.runtimes.iter().all(|(_, _, a)| a.is_ok()) {
        true => check("containers", Status::Ok, each.join("; ")),
        false => check("containers", Status::Warn, format!("{}: containers are named from their cgroup paths alone", each.join("; ")))
            .fix("run bperf where it may connect to the socket (root, or the socket's group), or mount it into bperf's container"),
    }
}

fn verdict(checks: &[Check]) -> Check {
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.needed && c.status == Status::Fail)
        .map(|c| c.name)
        .collect();
    match failed.is_empty() {
        true => check("per-cgroup", Status::Ok, "bperf can count per cgroup here"),
        false => check(
            "per-cgroup",
            Status::Fail,
            format!(
                "bperf cannot count per cgroup here: see {}",
                failed.join(", ")
            ),
        ),
    }
}

/// The exit status: 1 when bperf cannot count per cgroup.
pub(crate) fn exit_status(checks: &[Check]) -> i32 {
    i32::from(checks.iter().any(|c| c.needed && c.status == Status::Fail))
}

/// One line per check: status, name, what was found, and the fix.
pub(crate) fn text_line(c: &Check) -> String {
    let mut line = format!("{:<8}{:<20}{}", c.status.name(), c.name, c.detail);
    if let Some(fix) = &c.fix {
        line.push_str(&format!(" [fix: {fix}]"));
    }
    line
}

/// One JSON object per check, on its own line.
pub(crate) fn json_line(c: &Check) -> String {
    serde_json::json!({
        "check": c.name,
        "status": c.status.name(),
        "detail": c.detail,
        "fix": c.fix,
        "needed": c.needed,
    })
    .to_string()
}

/// `bperf doctor`: the checks on this machine, on stdout.
pub fn run(args: &crate::cli::DoctorArgs) -> Result<i32> {
    let checks = checks(&crate::sys::doctor::gather());
    let mut out = std::io::stdout().lock();
    for c in &checks {
        let line = match args.json {
            true => json_line(c),
            false => crate::output::people::escape_controls(&text_line(c)),
        };
        writeln!(out, "{line}")?;
    }
    Ok(exit_status(&checks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::probe::BpfFeatures;
    use crate::sys::doctor::{Look, Seen};
    use crate::sys::KernelFeatures;
    use std::path::PathBuf;

    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 25 0:40 / /sys/kernel/tracing rw - tracefs tracefs rw
41 25 0:41 / /sys/fs/bpf rw - bpf bpf rw";

    const PROC_CGROUPS: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
cpu\t3\t1\t1\nperf_event\t0\t50\t1\n";

    /// This machine as measured: root, no hardware PMU, fentry refused with EPERM.
    fn this_machine() -> Facts {
        Facts {
            kernel_release: "6.18.0".into(),
            btf: true,
            bpf: BpfFeatures {
                bpf_loop: Ok(true),
                read_value: Ok(true),
                trampolines: Err("Operation not permitted (os error 1)".into()),
                ring_buffer: Ok(true),
                task_storage: Ok(true),
            },
            kernel: KernelFeatures {
                rdonly_cast: true,
                cfs_rq_rq: true,
                sched_info: true,
            },
            pmus: ["breakpoint", "msr", "software", "tracepoint", "uprobe"]
                .map(String::from)
                .to_vec(),
            cycles: false,
            nmi_watchdog: Ok(true),
            paranoid: Ok(2),
            user_counts_itself: Ok(true),
            euid: 0,
            capabilities: 0x1ff_ffff_ffff,
            proc_cgroups: PROC_CGROUPS.into(),
            mounts: Mount::parse_mountinfo(HYBRID),
            looks: looks_of(HYBRID),
            runtimes: Vec::new(),
        }
    }

    /// Every mount point of `mountinfo` showing the file system mounted there, writable.
    fn looks_of(mountinfo: &str) -> Vec<(PathBuf, Look)> {
        Mount::parse_mountinfo(mountinfo)
            .into_iter()
            .filter_map(|m| {
                let (_, magic) = MAGICS.iter().find(|(n, _)| *n == m.fstype)?;
                let seen = Seen {
                    magic: *magic,
                    read_only: false,
                };
                Some((m.point, Ok(seen)))
            })
            .collect()
    }

    /// `point`, looked at again.
    fn look_again(f: &mut Facts, point: &str, look: Look) {
        f.looks.retain(|(p, _)| p != Path::new(point));
        f.looks.push((PathBuf::from(point), look));
    }

    fn named<'c>(checks: &'c [Check], name: &str) -> &'c Check {
        checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn this_machine_names_the_missing_pmu_and_trampolines_and_counts_per_cgroup() {
        let checks = checks(&this_machine());
        let pmu = named(&checks, "pmu");
        assert_eq!(pmu.status, Status::Warn);
        assert!(pmu.detail.starts_with("no hardware PMU"), "{}", pmu.detail);
        assert!(pmu.fix.as_deref().unwrap().contains("virtual PMU"));
        let t = named(&checks, "trampolines");
        assert_eq!(t.status, Status::Warn);
        assert!(t.detail.contains("Operation not permitted"), "{}", t.detail);
        assert_eq!(named(&checks, "nmi watchdog").status, Status::Ok);
        assert!(named(&checks, "cgroup layout").detail.starts_with("hybrid"));
        assert!(named(&checks, "perf_event")
            .detail
            .contains("/sys/fs/cgroup/unified"));
        assert_eq!(exit_status(&checks), 0);
        assert_eq!(checks.last().unwrap().status, Status::Ok);
    }

    #[test]
    fn root_without_cap_sys_resource_is_told_what_it_misses_and_still_counts() {
        let mut f = this_machine();
        // This VM's bounding set: everything but CAP_SYS_RESOURCE.
        f.capabilities = 0x1ff_feff_ffff;
        let checks = checks(&f);
        let caps = named(&checks, "capabilities");
        assert_eq!(caps.status, Status::Warn);
        assert!(
            caps.detail
                .contains("without CAP_SYS_RESOURCE: bperf can load BPF"),
            "{}",
            caps.detail
        );
        assert_eq!(exit_status(&checks), 0);
    }

    #[test]
    fn a_v1_hierarchy_mounted_nowhere_is_named_with_its_number() {
        let mut f = this_machine();
        f.proc_cgroups = PROC_CGROUPS.replace("perf_event\t0", "perf_event\t113");
        let checks = checks(&f);
        let pe = named(&checks, "perf_event");
        assert_eq!(pe.status, Status::Warn);
        assert!(
            pe.detail
                .contains("hierarchy 113, which is mounted nowhere"),
            "{}",
            pe.detail
        );
        assert_eq!(exit_status(&checks), 0, "bperf still counts on cgroup2");
        // Mounted: counted there.
        let pe = "50 25 0:50 / /tmp/pe rw - cgroup cgroup rw,perf_event";
        f.mounts.extend(Mount::parse_mountinfo(pe));
        f.looks.extend(looks_of(pe));
        let pe = checks_named(&f, "perf_event");
        assert_eq!(pe.status, Status::Ok);
        assert!(
            pe.detail.contains("hierarchy 113 mounted at /tmp/pe"),
            "{}",
            pe.detail
        );
    }

    fn checks_named(f: &Facts, name: &str) -> Check {
        named(&checks(f), name).clone()
    }

    #[test]
    fn without_privileges_the_missing_capabilities_are_named_and_the_exit_is_1() {
        let mut f = this_machine();
        f.euid = 65534;
        f.capabilities = 0;
        let eperm = Err::<bool, String>("Operation not permitted (os error 1)".into());
        f.bpf.bpf_loop = eperm.clone();
        f.bpf.read_value = eperm.clone();
        f.bpf.ring_buffer = eperm;
        let checks = checks(&f);
        let caps = named(&checks, "capabilities");
        assert_eq!(caps.status, Status::Fail);
        assert!(
            caps.detail.contains("without CAP_BPF, CAP_PERFMON"),
            "{}",
            caps.detail
        );
        assert_eq!(named(&checks, "bpf_loop").status, Status::Unknown);
        assert_eq!(named(&checks, "read path").status, Status::Unknown);
        assert_eq!(named(&checks, "perf_event_paranoid").status, Status::Warn);
        assert_eq!(exit_status(&checks), 1);
        assert!(checks.last().unwrap().detail.contains("capabilities"));
    }

    #[test]
    fn an_old_kernel_without_bpf_loop_cannot_count() {
        let mut f = this_machine();
        f.bpf.bpf_loop = Ok(false);
        f.kernel.rdonly_cast = false;
        let checks = checks(&f);
        assert_eq!(named(&checks, "bpf_loop").status, Status::Fail);
        assert_eq!(named(&checks, "read path").status, Status::Warn);
        assert_eq!(exit_status(&checks), 1);
    }

    #[test]
    fn run_queue_waits_say_whether_wake_up_programs_time_them() {
        let mut f = this_machine();
        assert_eq!(checks_named(&f, "run-queue waits").status, Status::Ok);
        f.kernel.sched_info = false;
        let c = checks_named(&f, "run-queue waits");
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("CONFIG_SCHED_INFO"), "{}", c.detail);
        assert_eq!(exit_status(&checks(&f)), 0);
    }

    #[test]
    fn no_cgroup_mounts_fail_and_lines_carry_their_fix() {
        let mut f = this_machine();
        f.mounts.clear();
        f.looks.clear();
        let checks = checks(&f);
        assert_eq!(named(&checks, "cgroup layout").status, Status::Fail);
        assert_eq!(exit_status(&checks), 1);
        let line = text_line(named(&checks, "bpffs"));
        assert!(line.starts_with("warn    bpffs"), "{line}");
        assert!(
            line.ends_with("[fix: mount -t bpf bpf /sys/fs/bpf]"),
            "{line}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&json_line(named(&checks, "kernel"))).unwrap();
        assert_eq!(json["status"], "ok");
        assert!(json["fix"].is_null());
    }

    #[test]
    fn a_cgroup_mount_a_later_mount_hides_fails_per_cgroup() {
        let mut f = this_machine();
        let tmpfs = Seen {
            magic: 0x0102_1994,
            read_only: false,
        };
        look_again(&mut f, "/sys/fs/cgroup/unified", Ok(tmpfs));
        let checks = checks(&f);
        let pe = named(&checks, "perf_event");
        assert_eq!(pe.status, Status::Fail);
        assert!(
            pe.detail
                .contains("a later mount hides it (/sys/fs/cgroup/unified shows tmpfs instead)"),
            "{}",
            pe.detail
        );
        let layout = named(&checks, "cgroup layout");
        assert_eq!(layout.status, Status::Warn);
        assert!(
            layout.detail.starts_with("cgroup v1 only"),
            "{}",
            layout.detail
        );
        assert_eq!(exit_status(&checks), 1);
        // Gone altogether: no cgroup file system can be seen.
        let gone = Err("No such file or directory (os error 2)".to_string());
        look_again(&mut f, "/sys/fs/cgroup/unified", gone.clone());
        look_again(&mut f, "/sys/fs/cgroup/cpu,cpuacct", gone);
        let layout = checks_named(&f, "cgroup layout");
        assert_eq!(layout.status, Status::Fail);
        assert!(
            layout
                .detail
                .contains("/sys/fs/cgroup/cpu,cpuacct cannot be seen: No such file"),
            "{}",
            layout.detail
        );
    }

    #[test]
    fn a_read_only_bpffs_is_named_and_one_that_is_not_bpf_is_not_mounted() {
        let mut f = this_machine();
        let ro = Seen {
            magic: 0xcafe_4a11,
            read_only: true,
        };
        look_again(&mut f, "/sys/fs/bpf", Ok(ro));
        let b = checks_named(&f, "bpffs");
        assert_eq!(b.status, Status::Warn);
        assert!(
            b.detail.starts_with("mounted read-only at /sys/fs/bpf"),
            "{}",
            b.detail
        );
        assert_eq!(b.fix.as_deref(), Some("mount -o remount,rw /sys/fs/bpf"));
        let sysfs = Seen {
            magic: 0x6265_6572,
            read_only: false,
        };
        look_again(&mut f, "/sys/fs/bpf", Ok(sysfs));
        let b = checks_named(&f, "bpffs");
        assert!(b
            .detail
            .starts_with("no BPF file system mounted at /sys/fs/bpf"));
    }

    #[test]
    fn what_proc_sys_would_not_give_is_unknown_not_a_default() {
        let mut f = this_machine();
        let hidden = "cannot read /proc/sys/kernel/perf_event_paranoid: No such file or directory (os error 2)";
        f.paranoid = Err(hidden.into());
        f.nmi_watchdog = Err(hidden.replace("perf_event_paranoid", "nmi_watchdog"));
        let checks = checks(&f);
        for name in ["perf_event_paranoid", "nmi watchdog"] {
            let c = named(&checks, name);
            assert_eq!(c.status, Status::Unknown, "{}", c.detail);
            assert!(
                c.detail.starts_with("cannot read /proc/sys/kernel/"),
                "{}",
                c.detail
            );
            assert!(c.fix.as_deref().unwrap().contains("/proc/sys"));
        }
        assert_eq!(exit_status(&checks), 0);
    }

    #[test]
    fn without_btf_what_btf_tells_is_unknown() {
        let mut f = this_machine();
        f.btf = false;
        f.kernel = KernelFeatures::default();
        f.bpf.trampolines = Err("no kernel BTF: failed to load BTF from vmlinux".into());
        let checks = checks(&f);
        assert_eq!(named(&checks, "kernel").status, Status::Fail);
        for name in ["read path", "trampolines"] {
            let c = named(&checks, name);
            assert_eq!(c.status, Status::Unknown, "{}", c.detail);
            assert!(!c.detail.contains("Linux >= 6.2") && !c.detail.contains("refused"));
        }
    }

    #[test]
    fn paranoid_3_says_what_this_kernel_does_with_it() {
        let mut f = this_machine();
        f.paranoid = Ok(3);
        f.euid = 1000;
        f.capabilities = 0;
        let p = checks_named(&f, "perf_event_paranoid");
        assert_eq!(p.status, Status::Warn);
        assert!(
            p.detail.contains("patch refuses unprivileged users at 3; this kernel does not: users may count their own processes"),
            "{}",
            p.detail
        );
        f.user_counts_itself = Ok(false);
        let p = checks_named(&f, "perf_event_paranoid");
        assert!(
            p.detail
                .contains("this kernel does: users may not open perf events at all"),
            "{}",
            p.detail
        );
        // Root is told what users get too.
        let mut root = this_machine();
        root.paranoid = Ok(3);
        let p = checks_named(&root, "perf_event_paranoid");
        assert_eq!(p.status, Status::Ok);
        assert!(p.detail.contains("this kernel does not"), "{}", p.detail);
    }

    #[test]
    fn the_capabilities_fix_warns_what_setcap_on_bperf_gives_every_user() {
        let mut f = this_machine();
        f.euid = 1000;
        f.capabilities = 0;
        let fix = checks_named(&f, "capabilities").fix.unwrap();
        assert!(fix.contains("install -o root -g bperf -m 0750"), "{fix}");
        assert!(fix.contains("every local user"), "{fix}");
        assert!(fix.contains("systemd unit"), "{fix}");
        assert!(!fix.contains("+ep $(command -v bperf)"), "{fix}");
    }
}
