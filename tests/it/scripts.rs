//! The project's own scripts, without root: scripts/apt-mirror finds the Debian archive
//! in apt sources of both formats (fixtures under a temporary $APT_ETC, each checked
//! against apt's own reading of it, `apt-get update --print-uris`, where apt is
//! installed), and no file of the project names a mirror host: the scripts that fetch
//! from Debian take the machine's own mirror.

use crate::common::TempDir;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// A temporary directory of its own for each call (the tests run in parallel).
fn temp_dir(tag: &str) -> TempDir {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    TempDir::new(&format!("{tag}-{}", CALLS.fetch_add(1, Ordering::Relaxed)))
}

/// An apt configuration directory: sources.list and sources.list.d's files.
fn apt_etc(files: &[(&str, &str)]) -> TempDir {
    let dir = temp_dir("apt-etc");
    std::fs::create_dir(dir.join("sources.list.d")).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

fn apt_mirror(etc: &Path) -> Output {
    Command::new(Path::new(MANIFEST).join("scripts/apt-mirror"))
        .env("APT_ETC", etc)
        .env_remove("DEBIAN_MIRROR")
        .output()
        .unwrap()
}

/// The index files apt would fetch for the sources in `etc`, as apt itself reads them;
/// None without apt-get.
fn apt_print_uris(etc: &Path) -> Option<String> {
    if !Path::new("/usr/bin/apt-get").exists() {
        return None;
    }
    let state = temp_dir("apt-state");
    std::fs::create_dir_all(state.join("lists/partial")).unwrap();
    let out = Command::new("apt-get")
        .arg(format!("-oDir::Etc={}", etc.display()))
        .arg(format!("-oDir::State={}", state.path().display()))
        .arg(format!("-oDir::Cache={}", state.path().display()))
        .args(["-oDebug::NoLocking=1", "update", "--print-uris"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// apt-mirror prints `uri` for the sources `files`, which apt reads as an enabled
/// source of `suite` (and not `off`, a URI the fixture disables).
fn finds(files: &[(&str, &str)], uri: &str, suite: &str, off: &str) {
    let etc = apt_etc(files);
    let out = apt_mirror(etc.path());
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    assert_eq!(printed.trim(), uri, "{files:?}");
    if let Some(apt) = apt_print_uris(etc.path()) {
        assert!(
            apt.contains(&format!("'{uri}/dists/{suite}/InRelease'")),
            "apt does not read {uri} {suite} as a source: {apt}"
        );
        assert!(!apt.contains(off), "apt reads {off}: {apt}");
    }
}

#[test]
fn apt_mirror_takes_the_debian_archive_from_one_line_sources() {
    let list = "\
# deb http://commented.invalid/debian bookworm main
deb cdrom:[Debian GNU/Linux 12]/ bookworm main
deb-src http://source.invalid/debian bookworm main
deb http://security.invalid/debian-security bookworm-security main
deb http://vendor.invalid/apt cloud-sdk-bookworm main
deb [ arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ] http://one.invalid/debian/ bookworm main contrib
deb http://later.invalid/debian bookworm main
";
    finds(
        &[("sources.list", list)],
        "http://one.invalid/debian",
        "bookworm",
        "commented.invalid",
    );
    // sources.list.d's *.list files, in name order, after an empty sources.list; a file
    // of another name there is not read.
    finds(
        &[
            ("sources.list", "\n"),
            (
                "sources.list.d/a.list.disabled",
                "deb http://off.invalid/debian bookworm main\n",
            ),
            (
                "sources.list.d/b.list",
                "deb [signed-by=/k.gpg] http://two.invalid/mirror/debian sid main\n",
            ),
            (
                "sources.list.d/c.list",
                "deb http://three.invalid/debian bookworm main\n",
            ),
        ],
        "http://two.invalid/mirror/debian",
        "sid",
        "off.invalid",
    );
}

#[test]
fn apt_mirror_takes_the_debian_archive_from_deb822_sources() {
    let sources = "\
Types: deb
URIs: http://security.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://off.invalid/debian
Suites: bookworm
Components: main
Enabled: no

# A comment between stanzas.
Types: deb-src
URIs: http://source.invalid/debian
Suites: bookworm
Components: main

types: deb-src deb
uris: http://two.invalid/debian/
suites: bookworm-updates
 bookworm
components: main
";
    finds(
        &[("sources.list.d/debian.sources", sources)],
        "http://two.invalid/debian",
        "bookworm-updates",
        "off.invalid",
    );
    // Files in name order, both formats; a disabled file's name is not read, and the last
    // stanza of a file (no blank line after it) counts.
    finds(
        &[
            (
                "sources.list.d/a.sources.disabled-by-admin",
                "Types: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\n",
            ),
            (
                "sources.list.d/b.sources",
                "Types: deb\nURIs: http://vendor.invalid/node\nSuites: nodistro\nComponents: main\n",
            ),
            (
                "sources.list.d/c.sources",
                "Types: deb\nURIs: https://three.invalid/debian\nSuites: trixie\nComponents: main",
            ),
            (
                "sources.list.d/d.list",
                "deb http://four.invalid/debian trixie main\n",
            ),
        ],
        "https://three.invalid/debian",
        "trixie",
        "off.invalid",
    );
}

#[test]
fn apt_mirror_says_so_when_no_source_is_debian_s_and_takes_debian_mirror() {
    let etc = apt_etc(&[
        (
            "sources.list",
            "deb http://security.invalid/debian-security bookworm-security main\n",
        ),
        (
            "sources.list.d/x.sources",
            "Types: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\nEnabled: no\n",
        ),
    ]);
    let out = apt_mirror(etc.path());
    let err = crate::common::stderr(&out);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        err.starts_with("apt-mirror: no Debian archive") && err.contains("DEBIAN_MIRROR"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = Command::new(Path::new(MANIFEST).join("scripts/apt-mirror"))
        .env("APT_ETC", etc.path())
        .env("DEBIAN_MIRROR", "http://local.invalid/debian/")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "http://local.invalid/debian\n"
    );
}

/// Every file under `dir` (target and .git left out).
fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&path, found);
        } else if kind.is_file() {
            found.push(path);
        }
    }
}

#[test]
fn no_file_of_the_project_names_debian_s_mirror_host() {
    // Spelled apart, so that this file does not name it either.
    let host = ["deb", "debian", "org"].join(".");
    let root = Path::new(MANIFEST);
    let mut files = Vec::new();
    for top in ["scripts", "tests", "src", "deploy", "bench"] {
        files_under(&root.join(top), &mut files);
    }
    files.extend(["Makefile", "Dockerfile"].map(|f| root.join(f)));
    let naming: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read(f).unwrap_or_default();
            String::from_utf8_lossy(&text).contains(&host)
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(files.len() > 50, "{files:?}");
    assert_eq!(naming, Vec::<String>::new(), "name {host}");
}
