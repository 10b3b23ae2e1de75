//! The man pages in man/ are what the command-line definitions generate, and say every
//! long option `bperf stat --help` lists. `make man` writes them again.

use std::fs;
use std::path::Path;

#[test]
fn man_pages_are_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    for (name, page) in bperf::cli::man_pages() {
        let on_disk = fs::read_to_string(dir.join(&name)).unwrap_or_default();
        assert!(
            on_disk == page,
            "man/{name} is stale: run `make man` and commit the result"
        );
    }
}

/// Each page's SEE ALSO names every other page in man/.
#[test]
fn every_page_refers_to_every_other() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".1").map(String::from))
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    for name in &names {
        let page = fs::read_to_string(dir.join(format!("{name}.1"))).unwrap();
        let see_also = page
            .split(".SH \"SEE ALSO\"\n")
            .nth(1)
            .and_then(|s| s.lines().next())
            .unwrap_or_else(|| panic!("man/{name}.1 has no SEE ALSO"))
            .replace("\\-", "-");
        let named: Vec<&str> = see_also.split(", ").collect();
        for other in names.iter().filter(|o| *o != name) {
            assert!(
                named.contains(&&*format!("{other}(1)")),
                "man/{name}.1's SEE ALSO leaves out {other}(1): {see_also}"
            );
        }
    }
}

#[test]
fn every_long_option_of_stat_is_in_its_man_page() {
    let help = std::process::Command::new(crate::common::BPERF_EXE)
        .args(["stat", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let page = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("man/bperf-stat.1"))
        .unwrap()
        .replace("\\-", "-");
    let longs: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            let end = w[2..]
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                .map_or(w.len(), |i| i + 2);
            &w[..end]
        })
        .collect();
    assert!(longs.len() >= 15, "{help}");
    for long in longs {
        assert!(page.contains(long), "{long} is not in man/bperf-stat.1");
    }
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef bperf"),
        ("fish", "complete -c bperf"),
    ] {
        let out = std::process::Command::new(crate::common::BPERF_EXE)
            .args(["completions", shell])
            .output()
            .unwrap();
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && script.contains(marker),
            "{shell}: {script}"
        );
        assert!(script.contains("for-each-cgroup"), "{shell}");
    }
}
