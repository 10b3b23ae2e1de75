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
    let hidden =
        "cannot read /proc/sys/kernel/perf_event_paranoid: No such file or directory (os error 2)";
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
