//! Cgroups: where the perf_event controller is mounted, and names <-> ids.
//!
//! Names are paths relative to that mount, as perf takes them (`web`, `system.slice/db.service`,
//! `/` for the root). A cgroup's id is the inode number of its directory.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use regex::Regex;

/// The cgroup hierarchy that holds the perf_event controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
    /// true when perf_event sits on a cgroup v1 hierarchy rather than cgroup2.
    pub v1: bool,
}

/// One monitored cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    /// The name printed in the cgroup column.
    pub name: String,
    pub id: u64,
}

impl Hierarchy {
    /// Finds the hierarchy from /proc/cgroups and /proc/self/mountinfo.
    pub fn discover() -> Result<Hierarchy> {
        let cgroups = fs::read_to_string("/proc/cgroups").unwrap_or_default();
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .context("cannot read /proc/self/mountinfo")?;
        Self::from_proc(&cgroups, &mountinfo)
    }

    /// The pure part of `discover`: perf_event on hierarchy 0 (or absent from
    /// /proc/cgroups) means cgroup2; otherwise the v1 mount whose options name it.
    pub fn from_proc(proc_cgroups: &str, mountinfo: &str) -> Result<Hierarchy> {
        let v1 = proc_cgroups
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .any(|f| f.len() >= 2 && f[0] == "perf_event" && f[1] != "0");
        for line in mountinfo.lines() {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount = match left.split_whitespace().nth(4) {
                Some(m) => unescape(m),
                None => continue,
            };
            let mut r = right.split_whitespace();
            let fstype = r.next().unwrap_or("");
            let superopts = r.nth(1).unwrap_or("");
            let found = if v1 {
                fstype == "cgroup" && superopts.split(',').any(|o| o == "perf_event")
            } else {
                fstype == "cgroup2"
            };
            if found {
                return Ok(Hierarchy {
                    mount: PathBuf::from(mount),
                    v1,
                });
            }
        }
        if v1 {
            bail!(
                "the perf_event cgroup controller is on a cgroup v1 hierarchy that is not mounted"
            );
        }
        bail!("no cgroup2 file system is mounted (searched /proc/self/mountinfo)");
    }

    fn path_of(&self, name: &str) -> PathBuf {
        let rel = name.trim_start_matches('/');
        if rel.is_empty() {
            self.mount.clone()
        } else {
            self.mount.join(rel)
        }
    }

    /// The id of the cgroup `name` (relative to the mount).
    pub fn id_of(&self, name: &str) -> Result<u64> {
        let path = self.path_of(name);
        let md = fs::metadata(&path).with_context(|| {
            format!(
                "cannot find cgroup '{name}' (searched {})",
                self.mount.display()
            )
        })?;
        if !md.is_dir() {
            bail!(
                "'{name}' is not a cgroup (searched {})",
                self.mount.display()
            );
        }
        Ok(md.ino())
    }

    /// Every cgroup below the mount, root first, as names relative to the mount.
    pub fn all_names(&self) -> Result<Vec<String>> {
        let mut out = vec!["/".to_string()];
        walk(&self.mount, "", &mut out)
            .with_context(|| format!("cannot list cgroups under {}", self.mount.display()))?;
        Ok(out)
    }

    /// Expands --for-each-cgroup / -G items: plain names must exist; items holding regex
    /// characters match whole relative paths. Duplicates are dropped, first one wins.
    pub fn expand(&self, items: &[String]) -> Result<Vec<Cgroup>> {
        let mut all: Option<Vec<String>> = None;
        let mut names = Vec::new();
        for item in items {
            if is_pattern(item) {
                let re = Regex::new(&format!("^(?:{item})$"))
                    .with_context(|| format!("invalid cgroup pattern '{item}'"))?;
                let all = match &mut all {
                    Some(a) => a,
                    None => all.insert(self.all_names()?),
                };
                let before = names.len();
                names.extend(
                    all.iter()
                        .filter(|n| re.is_match(n.trim_start_matches('/')) || re.is_match(n))
                        .cloned(),
                );
                if names.len() == before {
                    bail!(
                        "no cgroup matches '{item}' (searched {})",
                        self.mount.display()
                    );
                }
            } else {
                names.push(item.clone());
            }
        }
        let mut out: Vec<Cgroup> = Vec::new();
        for name in names {
            let id = self.id_of(&name)?;
            if !out.iter().any(|c| c.id == id) {
                out.push(Cgroup { name, id });
            }
        }
        Ok(out)
    }
}

fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> std::io::Result<()> {
    let mut subdirs: Vec<String> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    subdirs.sort();
    for d in subdirs {
        let name = if rel.is_empty() {
            d.clone()
        } else {
            format!("{rel}/{d}")
        };
        out.push(name.clone());
        // A cgroup removed while we walk is simply not there any more.
        let _ = walk(&dir.join(&d), &name, out);
    }
    Ok(())
}

/// perf treats a name with any regex metacharacter as a pattern.
fn is_pattern(s: &str) -> bool {
    s.contains(['{', '}', '[', ']', '(', ')', '|', '*', '+', '?', '^', '$'])
}

/// Mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn cgroup2_when_perf_event_on_hierarchy_zero() {
        let pc =
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t1\t1\t1\nperf_event\t0\t1\t1\n";
        let h = Hierarchy::from_proc(pc, HYBRID).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/unified"));
        assert!(!h.v1);
    }

    #[test]
    fn v1_when_perf_event_has_a_hierarchy() {
        let pc = "perf_event\t9\t1\t1\n";
        let mi = format!(
            "{HYBRID}50 31 0:40 / /sys/fs/cgroup/perf\\040event rw - cgroup cgroup rw,perf_event\n"
        );
        let h = Hierarchy::from_proc(pc, &mi).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/perf event"));
        assert!(h.v1);
        assert!(Hierarchy::from_proc(pc, HYBRID).is_err());
    }

    #[test]
    fn no_cgroup2_is_an_error() {
        let e = Hierarchy::from_proc("", "1 0 0:1 / / rw - ext4 /dev/sda rw\n").unwrap_err();
        assert!(e.to_string().contains("cgroup2"));
    }

    fn tree() -> (PathBuf, Hierarchy) {
        let root = std::env::temp_dir().join(format!("bperf-cgtest-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for d in ["web", "web/a", "db", "system.slice/x.service"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("cgroup.procs"), "").unwrap();
        let h = Hierarchy {
            mount: root.clone(),
            v1: false,
        };
        (root, h)
    }

    #[test]
    fn names_patterns_and_duplicates() {
        let (root, h) = tree();
        let names = |items: &[&str]| -> Result<Vec<String>> {
            let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
            Ok(h.expand(&items)?.into_iter().map(|c| c.name).collect())
        };
        let r = (|| {
            assert_eq!(names(&["web", "db"])?, ["web", "db"]);
            assert_eq!(names(&["web", "/web", "db", "web"])?, ["web", "db"]);
            assert_eq!(names(&["web.*"])?, ["web", "web/a"]);
            assert_eq!(names(&["system.slice/.*"])?, ["system.slice/x.service"]);
            assert_eq!(names(&["/"])?, ["/"]);
            let e = names(&["nope"]).unwrap_err().to_string();
            assert!(
                e.contains("'nope'") && e.contains(&root.display().to_string()),
                "{e}"
            );
            assert!(names(&["zz.*"]).is_err());
            assert!(names(&["(("]).is_err());
            assert_eq!(h.all_names()?.len(), 6);
            assert_eq!(h.id_of("/")?, fs::metadata(&root)?.ino());
            Ok::<_, anyhow::Error>(())
        })();
        fs::remove_dir_all(&root).unwrap();
        r.unwrap();
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
