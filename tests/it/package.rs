//! `make deb`'s package (scripts/build-deb) in a clean Debian 12: a minbase bookworm
//! root made by debootstrap (scripts/debian-root, cached under target/debian), imported
//! into Docker and run there. Installed, `bperf --version` and `man bperf-stat` work and
//! /etc/default/bperf is a conffile; purged, nothing of it is left on the file system
//! (a listing of the root before install and after purge, and dpkg -L's files). The
//! systemd unit is checked by the host's `systemd-analyze verify` against the unpacked
//! package (--root), as the minbase root has no systemd.
//!
//! Root only. Skipped when docker.io or debootstrap is missing, unless
//! BPERF_REQUIRE_DOCKER=1.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::docker::{docker, docker_ok, tools_available, Daemon, DOCKERD};
use common::{require_root, run_ok, TempDir};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

fn tools() -> bool {
    tools_available(&[
        (DOCKERD, "docker.io"),
        ("/usr/bin/docker", "docker.io"),
        ("/usr/sbin/debootstrap", "debootstrap"),
        ("/usr/bin/systemd-analyze", "systemd"),
    ])
}

/// Builds the package from the test's binary; its path.
fn build_deb() -> PathBuf {
    let out = run_ok(
        Command::new(Path::new(MANIFEST).join("scripts/build-deb"))
            .env("BPERF_BIN", env!("CARGO_BIN_EXE_bperf")),
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
    require_root();
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
