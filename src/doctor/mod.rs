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

/// How run-queue wait is timed: from the task's own sched_info by the one switch
/// program, or by programs of their own that follow wake-ups.
fn runq_waits(f: &Facts) -> Check {
    if !f.btf {
        return without_btf("run-queue waits");
    }
    match (f.kernel.sched_info, f.kernel.cfs_rq_rq) {
        (true, true) => check("run-queue waits", Status::Ok, "read from each task's sched_info by the switch program that counts (serve --runq, top --runq, stat's and a recording's bperf/runq-wait/): no second switch program, no wake-up programs"),
        (false, _) => check("run-queue waits", Status::Warn, "timed by a second switch program and wake-up programs (no CONFIG_SCHED_INFO), which cost more")
            .fix("a kernel with CONFIG_SCHED_INFO (CONFIG_SCHEDSTATS or CONFIG_TASK_DELAY_ACCT)"),
        (true, false) => check("run-queue waits", Status::Warn, "timed by a second switch program and wake-up programs (no CONFIG_FAIR_GROUP_SCHED, the way to the run queue's clock), which cost more")
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
mod tests;
