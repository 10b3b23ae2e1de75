//! `bperf doctor` on this machine: it names what the machine lacks, as the kernel's own
//! sysfs and /proc/cgroups say it, run as root, as nobody, and with a perf_event v1
//! hierarchy left mounted nowhere (made in a private mount namespace, and ended again).

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use common::v1::perf_event_hierarchy;
use common::{serial, stdout, wait_for};

fn doctor(args: &[&str]) -> Output {
    common::bperf().arg("doctor").args(args).output().unwrap()
}

/// The line of check `name` in doctor's text output.
fn line<'t>(text: &'t str, name: &str) -> &'t str {
    text.lines()
        .find(|l| {
            l.get(8..)
                .is_some_and(|r| r.starts_with(&format!("{name} ")))
        })
        .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_names_what_this_machine_lacks_and_says_per_cgroup_counting_works() {
    let out = doctor(&[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", common::stderr(&out));
    // The kernel's own list of PMUs: no core PMU here.
    let has_core_pmu = Path::new("/sys/bus/event_source/devices/cpu").exists();
    let pmu = line(&text, "pmu");
    assert_eq!(pmu.starts_with("warn"), !has_core_pmu, "{pmu}");
    if !has_core_pmu {
        assert!(
            pmu.contains("no hardware PMU") && pmu.contains("[fix: "),
            "{pmu}"
        );
    }
    let trampolines = line(&text, "trampolines");
    assert!(
        trampolines.starts_with("ok") || trampolines.contains("no BPF trampolines"),
        "{trampolines}"
    );
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(line(&text, "kernel").contains(release.trim()));
    assert!(line(&text, "per-cgroup").starts_with("ok"), "{text}");
    let h = perf_event_hierarchy();
    let pe = line(&text, "perf_event");
    match h {
        0 => assert!(pe.contains("on cgroup2"), "{pe}"),
        n => assert!(pe.contains(&format!("hierarchy {n}")), "{pe}"),
    }
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_json_is_one_object_per_check_with_the_text_checks() {
    let text = stdout(&doctor(&[]));
    let out = doctor(&["-j"]);
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(rows.len(), text.lines().count());
    for (row, l) in rows.iter().zip(text.lines()) {
        assert!(
            l.starts_with(row["status"].as_str().unwrap()),
            "{row} / {l}"
        );
        assert!(
            l[8..].starts_with(row["check"].as_str().unwrap()),
            "{row} / {l}"
        );
    }
    assert_eq!(rows.last().unwrap()["check"], "per-cgroup");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_as_nobody_names_the_missing_capabilities_and_exits_1() {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
        .arg(common::BPERF_EXE)
        .arg("doctor")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", common::stderr(&out));
    let caps = line(&text, "capabilities");
    assert!(
        caps.starts_with("fail") && caps.contains("euid 65534") && caps.contains("CAP_BPF"),
        "{caps}"
    );
    // libbpf's own probes answer "missing" when nothing may be loaded: doctor says it
    // cannot tell instead.
    for check in ["bpf_loop", "read path", "ring buffer", "trampolines"] {
        assert!(line(&text, check).starts_with("unknown"), "{text}");
    }
    assert!(line(&text, "per-cgroup").contains("capabilities"), "{text}");
}

/// Makes perf_event a v1 hierarchy whose only mount, in a private mount namespace, is
/// gone while a sleeping task keeps a child cgroup alive; runs doctor (text, then -j)
/// there; then ends the hierarchy: kills the task, mounts it again, removes the child
/// and unmounts, until /proc/cgroups shows perf_event at hierarchy 0. Prints the
/// hierarchy's number, then doctor's outputs.
const STRAY_V1: &str = r#"
set -u
d=$(mktemp -d /tmp/bperf-doctor-v1.XXXXXX)
pid=
restore() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    for i in $(seq 1 80); do
        mountpoint -q "$d" || mount -t cgroup -o perf_event none "$d" 2>/dev/null
        rmdir "$d/child" 2>/dev/null
        umount "$d" 2>/dev/null
        awk '$1 == "perf_event" && $2 == 0 { ok = 1 } END { exit !ok }' /proc/cgroups && break
        sleep 0.25
    done
    rmdir "$d"
}
trap restore EXIT
mount -t cgroup -o perf_event none "$d" || exit 90
mkdir "$d/child"
sleep 600 &
pid=$!
echo "$pid" > "$d/child/cgroup.procs"
umount "$d"
awk '$1 == "perf_event" { print "hierarchy", $2 }' /proc/cgroups
"$BPERF" doctor
echo "exit $?"
"$BPERF" doctor -j
"#;

/// Ends a stray perf_event hierarchy a failed run left (mount, unmount once empty).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        if perf_event_hierarchy() == 0 {
            return;
        }
        let script = "d=$(mktemp -d) && mount -t cgroup -o perf_event none $d && \
                      rmdir $d/* 2>/dev/null; umount $d; rmdir $d";
        wait_for(20, || {
            let _ = Command::new("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c", script])
                .status();
            perf_event_hierarchy() == 0
        });
    }
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_names_a_perf_event_v1_hierarchy_mounted_nowhere() {
    let _g = serial();
    if perf_event_hierarchy() != 0 {
        eprintln!("skipped: perf_event is not on cgroup2 here to begin with");
        return;
    }
    let restore = Restore;
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", STRAY_V1])
        .env("BPERF", common::BPERF_EXE)
        .output()
        .unwrap();
    drop(restore);
    assert_eq!(perf_event_hierarchy(), 0, "perf_event not back on cgroup2");
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    let n: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("hierarchy "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert_ne!(n, 0, "{text}");
    let pe = line(&text, "perf_event");
    assert!(
        pe.starts_with("warn")
            && pe.contains(&format!("hierarchy {n}, which is mounted nowhere"))
            && pe.contains("[fix: "),
        "{pe}"
    );
    assert!(text.contains("\nexit 0\n"), "{text}");
    let json = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["check"] == "perf_event")
        .unwrap();
    assert_eq!(json["status"], "warn");
}

/// Runs `script` in a private mount namespace (whatever it mounts ends with it), with
/// $BPERF naming bperf; the script's output, which ends with doctor's exit status.
fn in_private_namespace(script: &str) -> Output {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .env("BPERF", common::BPERF_EXE)
        .output()
        .unwrap()
}

/// A tmpfs over /sys/fs/cgroup hides the hierarchy mountinfo still lists: counting per
/// cgroup fails there, and doctor says so instead of "ok per-cgroup".
#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_sees_a_cgroup_hierarchy_a_later_mount_hides() {
    let _g = serial();
    let out = in_private_namespace(
        r#"mount -t tmpfs bperf-test /sys/fs/cgroup || exit 90
"$BPERF" stat -a -e task-clock --all-cgroups -- true 2>&1
echo "stat exit $?"
"$BPERF" doctor
echo "exit $?""#,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    // The oracle: bperf itself cannot count per cgroup in this namespace.
    assert!(!text.contains("stat exit 0\n"), "{text}");
    let pe = line(&text, "perf_event");
    assert!(pe.starts_with("fail") && pe.contains("hides it"), "{pe}");
    assert!(line(&text, "cgroup layout").starts_with("fail"), "{text}");
    assert!(line(&text, "per-cgroup").starts_with("fail"), "{text}");
    assert!(text.ends_with("exit 1\n"), "{text}");
}

/// A read-only BPF file system at /sys/fs/bpf: the shared counters (:b) cannot pin
/// there, and doctor's bpffs line says so instead of "ok".
#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_names_a_read_only_bpffs() {
    let _g = serial();
    let out = in_private_namespace(
        r#"mount -t bpf -o ro bperf-test /sys/fs/bpf || exit 90
"$BPERF" stat -a -e task-clock:b -- true 2>&1
echo "stat exit $?"
"$BPERF" doctor
echo "exit $?""#,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    assert!(!text.contains("stat exit 0\n"), "{text}");
    let bpffs = line(&text, "bpffs");
    assert!(
        bpffs.starts_with("warn")
            && bpffs.contains("read-only at /sys/fs/bpf")
            && bpffs.contains("[fix: mount -o remount,rw /sys/fs/bpf]"),
        "{bpffs}"
    );
}

/// /proc/sys hidden (a tmpfs over it, as a container runtime may mask it): the values
/// doctor reads there are unknown, not the kernel's defaults, and the kernel's release
/// still comes from uname.
#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_says_unknown_for_what_it_cannot_read_in_proc_sys() {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let out = in_private_namespace(
        r#"mount -t tmpfs bperf-test /proc/sys || exit 90
test -e /proc/sys/kernel/perf_event_paranoid && exit 91
"$BPERF" doctor
echo "exit $?""#,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    for check in ["perf_event_paranoid", "nmi watchdog"] {
        let l = line(&text, check);
        assert!(
            l.starts_with("unknown") && l.contains("cannot read /proc/sys/kernel/"),
            "{l}"
        );
    }
    assert!(
        line(&text, "kernel").contains(&format!("Linux {},", release.trim())),
        "{text}"
    );
}

/// BTF hidden (a tmpfs over /sys/kernel/btf): doctor's lines say what it lacks, and
/// libbpf's own lines are not printed among them; what needs BTF to tell is unknown.
#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_without_btf_prints_its_lines_only() {
    let out = in_private_namespace(
        r#"mount -t tmpfs bperf-test /sys/kernel/btf || exit 90
exec "$BPERF" doctor"#,
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", common::stderr(&out));
    assert_eq!(common::stderr(&out), "", "{text}");
    assert!(line(&text, "kernel").starts_with("fail"), "{text}");
    for check in ["read path", "trampolines"] {
        let l = line(&text, check);
        assert!(l.starts_with("unknown") && l.contains("BTF"), "{l}");
    }
    assert!(line(&text, "per-cgroup").contains("kernel"), "{text}");
}

/// Sets kernel.perf_event_paranoid for as long as it lives, then puts it back.
struct Paranoid(String);

const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

impl Paranoid {
    fn set(level: i32) -> Paranoid {
        let old = fs::read_to_string(PARANOID).unwrap();
        fs::write(PARANOID, level.to_string()).unwrap();
        Paranoid(old)
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let _ = fs::write(PARANOID, self.0.trim());
    }
}

/// bperf run as nobody with no capabilities.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
        .arg(common::BPERF_EXE)
        .args(args)
        .output()
        .unwrap()
}

/// At perf_event_paranoid 3, only kernels with Debian's or Android's patch refuse
/// unprivileged users: doctor says what this kernel does, as root and as nobody, and
/// agrees with an unprivileged `bperf stat COMMAND` run beside it.
#[test]
#[ignore = "needs root (make test runs it)"]
fn doctor_says_what_paranoid_3_does_on_this_kernel() {
    let _g = serial();
    let paranoid = Paranoid::set(3);
    let counted = as_nobody(&["stat", "-x,", "-e", "task-clock", "--", "true"]);
    let as_nobody = as_nobody(&["doctor"]);
    let as_root = doctor(&[]);
    drop(paranoid);
    let claim = match counted.status.success() {
        true => "this kernel does not: users may count their own processes",
        false => "this kernel does: users may not open perf events at all",
    };
    for (out, status) in [(&as_nobody, "warn"), (&as_root, "ok")] {
        let text = stdout(out);
        let l = line(&text, "perf_event_paranoid");
        assert!(
            l.starts_with(status) && l.contains(" 3: ") && l.contains(claim),
            "{l}\nstat as nobody: {:?} {}",
            counted.status,
            common::stderr(&counted)
        );
    }
}
