//! `make deb`'s package (scripts/build-deb) in a clean Debian 12: a minbase bookworm
//! root made by debootstrap (scripts/debian-root, cached under target/debian), imported
//! into Docker and run there. Installed, `bperf --version` and `man bperf-stat` work and
//! /etc/default/bperf is a conffile; purged, nothing of it is left on the file system
//! (a listing of the root before install and after purge, and dpkg -L's files). The
//! systemd unit is checked by the host's `systemd-analyze verify` against the unpacked
//! package (--root), as the minbase root has no systemd.
//!
//! The unit's sandbox, for real: a second root with systemd (scripts/debian-root
//! --systemd) booted by systemd-nspawn (volatile: the cached root is not changed), where
//! the package installs and its postinst starts bperf.service, whose bperf serve must
//! run as the unit says (a dynamic uid, CAP_BPF and CAP_PERFMON only, no_new_privs, a
//! seccomp filter), listen on loopback only, count a cgroup's task-clock as the kernel's
//! cpu.stat does, and stop with status 0. And `systemd-analyze security --offline=yes`
//! scores the unit at most 2.5 (no root needed).
//!
//! Root only (but the score). Skipped when docker.io, debootstrap or systemd-nspawn is
//! missing, unless BPERF_REQUIRE_DOCKER=1.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::docker::{docker, docker_ok, tools_available, Daemon, DOCKERD};
use common::{run_ok, serial, TempDir, TestCgroup};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

fn tools() -> bool {
    tools_available(&[
        (DOCKERD, "docker.io"),
        ("/usr/bin/docker", "docker.io"),
        ("/usr/sbin/debootstrap", "debootstrap"),
        ("/usr/bin/systemd-analyze", "systemd"),
    ])
}

/// Builds the package from the test's binary, once for all the tests here (build-deb
/// stages it in one directory); its path.
fn build_deb() -> PathBuf {
    static BUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built.get_or_insert_with(build_deb_now).clone()
}

fn build_deb_now() -> PathBuf {
    let out = run_ok(
        Command::new(Path::new(MANIFEST).join("scripts/build-deb"))
            .env("BPERF_BIN", common::BPERF_EXE),
    );
    Path::new(MANIFEST).join(String::from_utf8_lossy(&out.stdout).trim())
}

/// The cached Debian 12 root (made the first time: a few minutes).
fn debian_root() -> PathBuf {
    let out = run_ok(&mut Command::new(
        Path::new(MANIFEST).join("scripts/debian-root"),
    ));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// An image of `root` under a name of this test's, removed when dropped.
struct Image(String);

impl Image {
    fn import(root: &Path) -> Image {
        let name = format!("bperf-test-bookworm:{}", std::process::id());
        let image = Image(name.clone());
        let st = Command::new("sh")
            .args([
                "-c",
                "tar -C \"$0\" --exclude=./.complete -c . | docker import - \"$1\" >/dev/null",
            ])
            .arg(root)
            .arg(&name)
            .status()
            .unwrap();
        assert!(st.success(), "docker import of {}", root.display());
        image
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        docker(&["rmi", "-f", &self.0]);
    }
}

/// Run in the container: the file system listed, the package installed and used,
/// purged, and listed again; each step's output between markers.
const IN_DEBIAN: &str = r#"
set -e
list() { find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /var/lib/dpkg -o -path /var/log -o -path /var/cache \) -prune -o -print | sort; }
list > /tmp/before
dpkg -i /tmp/bperf.deb > /tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
echo "== version"; bperf --version
echo "== man"; man -P cat bperf-stat 2>&1 | head -40
echo "== documentation"; man -w bperf-serve bperf-doctor
echo "== conffiles"; dpkg-query -W -f='${Conffiles}\n' bperf
echo "== files"; dpkg -L bperf
dpkg -L bperf > /tmp/files
dpkg --purge bperf > /tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
echo "== left"
while read -r f; do [ -d "$f" ] || { [ -e "$f" ] && echo "$f"; }; done < /tmp/files
list > /tmp/after
diff /tmp/before /tmp/after || true
echo "== end"
"#;

/// The lines of `text` after `== NAME` up to the next marker.
fn section<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    text.lines()
        .skip_while(|l| *l != format!("== {name}"))
        .skip(1)
        .take_while(|l| !l.starts_with("== "))
        .collect()
}

#[test]
#[ignore = "needs root and Docker (make test runs it)"]
fn the_deb_installs_works_and_purges_to_nothing_in_a_clean_debian_12() {
    if !tools() {
        return;
    }
    let deb = build_deb();
    let arch =
        String::from_utf8(run_ok(Command::new("dpkg").arg("--print-architecture")).stdout).unwrap();
    let expected = format!("bperf_{}_{}.deb", env!("CARGO_PKG_VERSION"), arch.trim());
    assert_eq!(deb.file_name().unwrap().to_str(), Some(expected.as_str()));
    verify_unit(&deb);
    let root = debian_root();
    let _daemon = Daemon::ensure();
    let image = Image::import(&root);
    let mount = format!("{}:/tmp/bperf.deb:ro", deb.display());
    let out = docker_ok(&["run", "--rm", "-v", &mount, &image.0, "sh", "-c", IN_DEBIAN]);
    let version = section(&out, "version");
    assert_eq!(
        version,
        [format!("bperf {}", env!("CARGO_PKG_VERSION"))],
        "{out}"
    );
    let man = section(&out, "man").join("\n");
    assert!(
        man.contains("bperf-stat") && man.contains("for-each-cgroup"),
        "{out}"
    );
    assert!(
        section(&out, "conffiles")
            .iter()
            .any(|l| l.trim().starts_with("/etc/default/bperf ")),
        "{out}"
    );
    let docs = section(&out, "documentation");
    assert_eq!(
        docs,
        [
            "/usr/share/man/man1/bperf-serve.1.gz",
            "/usr/share/man/man1/bperf-doctor.1.gz"
        ],
        "{out}"
    );
    let files = section(&out, "files");
    for f in [
        "/usr/bin/bperf",
        "/usr/share/man/man1/bperf-doctor.1.gz",
        "/usr/share/bash-completion/completions/bperf",
        "/lib/systemd/system/bperf.service",
    ] {
        assert!(files.contains(&f), "{f} not in the package: {out}");
    }
    assert_eq!(
        section(&out, "left"),
        Vec::<&str>::new(),
        "left after purge: {out}"
    );
}

/// `systemd-analyze verify` of the packaged unit, against the unpacked package (the
/// unit's ExecStart then names a binary that is there) with the host's own units beside
/// it (the targets it is ordered after). Its Documentation= pages are looked up in the
/// Debian container instead (`man -w`), as verify would look on the host.
fn verify_unit(deb: &Path) {
    let dir = TempDir::new("deb");
    run_ok(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir.path()));
    run_ok(
        Command::new("cp")
            .args(["-rn", "/lib/systemd/system/."])
            .arg(dir.join("lib/systemd/system")),
    );
    let unit = dir.join("lib/systemd/system/bperf.service");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", dir.path().display()))
        .arg(&unit)
        .output()
        .unwrap();
    let err = common::stderr(&out);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "systemd-analyze verify: {err}"
    );
}

/// The unit as it ships.
fn unit() -> PathBuf {
    Path::new(MANIFEST).join("deploy/debian/bperf.service")
}

/// The overall exposure `systemd-analyze security` gives the unit (0 to 10, lower is
/// better): its last line, "→ Overall exposure level for bperf.service: 1.7 OK".
fn exposure(report: &str) -> Option<f64> {
    let last = report
        .lines()
        .rev()
        .find(|l| l.contains("Overall exposure level"))?;
    last.rsplit_once(": ")?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn systemd_analyze_security_scores_the_unit_at_most_2_5() {
    if !tools_available(&[("/usr/bin/systemd-analyze", "systemd")]) {
        return;
    }
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(unit())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let score = exposure(&report)
        .unwrap_or_else(|| panic!("no exposure level: {report}{}", common::stderr(&out)));
    eprintln!("bperf.service: exposure {score}");
    assert!(score <= 2.5, "exposure {score} above 2.5:\n{report}");
}

/// The systemd root: made the first time (a few minutes).
fn systemd_root() -> PathBuf {
    let out =
        run_ok(Command::new(Path::new(MANIFEST).join("scripts/debian-root")).arg("--systemd"));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The unit the booted machine runs instead of its default target: the check below,
/// then power off, whatever its result.
const CHECK_UNIT: &str = "\
[Unit]
Description=bperf's package test
After=basic.target
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/bin/bash /check/check.sh
StandardOutput=append:/check/out
StandardError=append:/check/out
";

/// Run in the booted machine: the package installed (its postinst starts the service),
/// then what the service's bperf is and does, each between markers. The counts: a
/// cgroup of the check's, read from cpu.stat around bperf's two scrapes around a second
/// of spinning in it (cpu-clock: serve's default events).
const CHECK_SCRIPT: &str = r#"
set -u
dpkg -i /check/bperf.deb >/tmp/dpkg.log 2>&1 || { echo "== dpkg"; cat /tmp/dpkg.log; exit 1; }
scrape() {
    exec 3<>/dev/tcp/127.0.0.1/9464 || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    cat <&3
    exec 3<&-
}
mnt=$(findmnt -n -t cgroup2 -o TARGET | head -1)
cg=bperf-spin
mkdir "$mnt/$cg"
series="bperf_count_total{event=\"cpu-clock\",cgroup=\"$cg\"} "
count() { scrape 2>/dev/null | grep -F "$series" | awk '{ print $NF }'; }
usage() { sed -n 's/^usage_usec //p' "$mnt/$cg/cpu.stat"; }
# What cpu.stat leaves out and the perf clocks count (irq, softirq, steal), in ticks.
unaccounted() { awk '$1 == "cpu" { print $7 + $8 + $9 }' /proc/stat; }
for _ in $(seq 150); do [ -n "$(count)" ] && break; sleep 0.2; done
echo "== counts"
echo "unaccounted_ticks $(unaccounted)"
echo "usage_us $(usage)"
echo "bperf_ns $(count)"
timeout 1 bash -c "echo \$\$ > $mnt/$cg/cgroup.procs; while :; do :; done"
echo "bperf_ns $(count)"
echo "usage_us $(usage)"
echo "unaccounted_ticks $(unaccounted)"
[ -n "$(count)" ] || { echo "no $series in:"; scrape | grep -F cpu-clock | head -20; }
rmdir "$mnt/$cg"
pid=$(systemctl show -p MainPID --value bperf)
echo "== status"
grep -E '^(Uid|CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "/proc/$pid/status"
echo "== listening"
awk 'NR > 1 && $4 == "0A" && $2 ~ /:24F8$/ { print $2 }' /proc/net/tcp /proc/net/tcp6
systemctl stop bperf
echo "== stopped"
systemctl show bperf -p Result -p ExecMainStatus -p NRestarts
echo "== journal"
journalctl -u bperf -o cat --no-pager
echo "== end"
"#;

/// What the test's nspawn would leave: the cgroups it is confined in (cgroup2 and, on a
/// hybrid machine, the name=systemd hierarchy, where nspawn makes its payload and
/// supervisor cgroups) and nspawn's state directory in /run when it was not there.
struct Confinement {
    cgroups: Vec<TestCgroup>,
    state: Option<PathBuf>,
}

impl Confinement {
    fn new() -> Confinement {
        let mut cgroups = vec![TestCgroup::new("nspawn")];
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let named = mounts.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let super_opts = right.split(' ').nth(2)?;
            let named =
                right.starts_with("cgroup ") && super_opts.split(',').any(|o| o == "name=systemd");
            let point = left.split(' ').nth(4)?;
            named.then(|| PathBuf::from(point))
        });
        if let Some(mount) = named {
            let name = cgroups[0].name.clone();
            let path = mount.join(&name);
            std::fs::create_dir(&path).unwrap();
            cgroups.push(TestCgroup { path, name });
        }
        let state = Path::new("/run/systemd/nspawn");
        let state = (!state.exists()).then(|| state.to_path_buf());
        Confinement { cgroups, state }
    }
}

impl Drop for Confinement {
    fn drop(&mut self) {
        if let Some(dir) = &self.state {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Boots `root` (volatile: writes go to memory) with the check as its one unit; what the
/// check wrote, and the machine's console.
fn boot_and_check(root: &Path, deb: &Path) -> (String, String) {
    let dir = TempDir::new("nspawn");
    std::fs::copy(deb, dir.join("bperf.deb")).unwrap();
    std::fs::write(dir.join("check.sh"), CHECK_SCRIPT).unwrap();
    std::fs::write(dir.join("bperf-check.service"), CHECK_UNIT).unwrap();
    let confinement = Confinement::new();
    let procs: Vec<String> = confinement.cgroups.iter().map(|c| c.procs()).collect();
    let out = Command::new("sh")
        .args([
            "-c",
            "for f in $1; do echo $$ > \"$f\"; done; shift; exec \"$@\"",
            "sh",
        ])
        .arg(procs.join(" "))
        .args([
            "timeout",
            "300",
            "systemd-nspawn",
            "--quiet",
            "--keep-unit",
            "--register=no",
        ])
        .args([
            "--volatile=overlay",
            "--boot",
            "--private-network",
            "--console=pipe",
        ])
        .arg("--directory")
        .arg(root)
        // What bperf.service needs; nspawn's own defaults leave out both.
        .args([
            "--capability=CAP_BPF,CAP_PERFMON",
            "--system-call-filter=bpf perf_event_open",
        ])
        .arg(format!("--bind={}:/check", dir.path().display()))
        .arg(format!(
            "--bind-ro={}:/etc/systemd/system/bperf-check.service",
            dir.join("bperf-check.service").display()
        ))
        .args(["--", "systemd.unit=bperf-check.service"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let console = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        common::stderr(&out)
    );
    let written = std::fs::read_to_string(dir.join("out")).unwrap_or_default();
    drop(confinement);
    (written, console)
}

/// The numbers of the lines `NAME VALUE` in `lines`, in order.
fn numbers(lines: &[&str], name: &str) -> Vec<f64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .collect()
}

#[test]
#[ignore = "needs root and systemd-nspawn (make test runs it)"]
fn the_deb_s_service_counts_under_its_sandbox_in_a_booted_debian_12() {
    if !tools() || !tools_available(&[("/usr/bin/systemd-nspawn", "systemd-container")]) {
        return;
    }
    let deb = build_deb();
    let root = systemd_root();
    let _g = serial();
    let (out, console) = boot_and_check(&root, &deb);
    let all = format!("{out}\n-- console:\n{console}");
    // A dynamic uid, the unit's two capabilities and nothing else, no_new_privs, seccomp.
    let status = section(&out, "status");
    let field = |name: &str| {
        status
            .iter()
            .find_map(|l| l.strip_prefix(name)?.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {name}: {all}"))
    };
    assert_ne!(field("Uid:"), "0", "{all}");
    let bpf_perfmon = format!("{:016x}", (1u64 << 39) | (1 << 38));
    for caps in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(caps), bpf_perfmon, "{caps} {all}");
    }
    assert_eq!(field("NoNewPrivs:"), "1", "{all}");
    assert_eq!(field("Seccomp:"), "2", "{all}");
    // The package's default: loopback only (127.0.0.1:9464 in /proc/net/tcp).
    assert_eq!(section(&out, "listening"), ["0100007F:24F8"], "{all}");
    // Counting under the filter: the check's cgroup's cpu-clock as cpu.stat charges it.
    let counts = section(&out, "counts");
    let (usage, ours) = (numbers(&counts, "usage_us"), numbers(&counts, "bperf_ns"));
    let ticks = numbers(&counts, "unaccounted_ticks");
    assert!(
        usage.len() == 2 && ours.len() == 2 && ticks.len() == 2,
        "{all}"
    );
    let kernel = (usage[1] - usage[0]) * 1000.0;
    let counted = ours[1] - ours[0];
    // USER_HZ ticks of 10 ms, and one for their rounding.
    let slack = (ticks[1] - ticks[0] + 1.0) * 1e7;
    eprintln!("bperf.service counted {counted} ns, cpu.stat {kernel} ns");
    assert!(kernel > 1e8, "the spin did not run: {all}");
    let pct = common::clock_tolerance() / 100.0;
    assert!(
        counted >= kernel * (1.0 - pct) && counted <= kernel * (1.0 + pct) + slack,
        "bperf.service counted {counted} ns where cpu.stat says {kernel} ns (+ up to {slack} ns it left out): {all}"
    );
    // SIGTERM: status 0, never restarted; nothing refused on the way.
    let stopped = section(&out, "stopped");
    for want in ["Result=success", "ExecMainStatus=0", "NRestarts=0"] {
        assert!(stopped.contains(&want), "{want}: {all}");
    }
    let journal = section(&out, "journal").join("\n");
    for refused in [
        "Operation not permitted",
        "Bad system call",
        "SIGSYS",
        "Permission denied",
    ] {
        assert!(!journal.contains(refused), "{refused}: {all}");
    }
    assert!(out.contains("== end"), "{all}");
}
