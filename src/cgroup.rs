//! Cgroups: where the perf_event controller is mounted, and names <-> ids.
//!
//! Names are paths relative to that mount, as perf takes them (`web`, `system.slice/db.service`,
//! `/` for the root). A cgroup's id is the inode number of its directory. A name must
//! lead, after `..` and symlinks, to a directory of the mounted cgroup file system.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use regex::Regex;

use crate::UsageError;

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
    /// The name printed in the cgroup column, as the user gave it.
    pub name: String,
    pub id: u64,
    /// Where it is, relative to the mount, without `..` or symlinks ("" for the root).
    pub path: PathBuf,
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

    fn usage(&self, name: &str, what: &str) -> anyhow::Error {
        UsageError(format!(
            "cgroup '{name}' {what} (searched {})",
            self.mount.display()
        ))
        .into()
    }

    /// The cgroup called `name` (relative to the mount). Refused unless it leads, after
    /// `..` and symlinks, to a directory on the cgroup file system at the mount.
    pub fn resolve(&self, name: &str) -> Result<Cgroup> {
        let rel = name.trim_start_matches('/');
        let joined = match rel.is_empty() {
            true => self.mount.clone(),
            false => self.mount.join(rel),
        };
        let real = fs::canonicalize(&joined).map_err(|_| self.usage(name, "does not exist"))?;
        let mount = fs::canonicalize(&self.mount)
            .with_context(|| format!("cannot resolve {}", self.mount.display()))?;
        let md = fs::metadata(&real).map_err(|_| self.usage(name, "does not exist"))?;
        let on_mount = md.dev() == fs::metadata(&mount)?.dev();
        let path = match real.strip_prefix(&mount) {
            Ok(p) if on_mount && md.is_dir() => p.to_path_buf(),
            _ => return Err(self.usage(name, "is not a cgroup")),
        };
        Ok(Cgroup {
            name: name.to_string(),
            id: md.ino(),
            path,
        })
    }

    /// Every cgroup there is, root first, named by its path relative to the mount.
    pub fn all(&self) -> Result<Vec<Cgroup>> {
        let root = fs::metadata(&self.mount)
            .with_context(|| format!("cannot read {}", self.mount.display()))?;
        let mut out = vec![Cgroup {
            name: "/".into(),
            id: root.ino(),
            path: PathBuf::new(),
        }];
        walk(&self.mount, Path::new(""), &mut out)
            .with_context(|| format!("cannot list cgroups under {}", self.mount.display()))?;
        Ok(out)
    }

    /// Expands the items of --for-each-cgroup, as perf does: an empty item is the root;
    /// when any item holds a regex metacharacter, every item is a pattern matching whole
    /// names, and the matches come in the order of the tree; otherwise each item is a
    /// name that must exist. A name given twice is counted once. Two names of one cgroup
    /// are two rows.
    pub fn expand(&self, items: &[String]) -> Result<Vec<Cgroup>> {
        if items.iter().any(|i| is_pattern(i)) {
            return self.matching(items);
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for item in items {
            let name = if item.is_empty() { "/" } else { item.as_str() };
            if seen.insert(name) {
                out.push(self.resolve(name)?);
            }
        }
        Ok(out)
    }

    /// The cgroups whose names match any of the patterns (an empty one: the root).
    fn matching(&self, patterns: &[String]) -> Result<Vec<Cgroup>> {
        let mut regexes = Vec::new();
        for p in patterns.iter().filter(|p| !p.is_empty()) {
            let re = Regex::new(&format!("^(?:{p})$"))
                .map_err(|_| UsageError(format!("invalid cgroup pattern '{p}'")))?;
            regexes.push(re);
        }
        let with_root = patterns.iter().any(|p| p.is_empty());
        let out: Vec<Cgroup> = self
            .all()?
            .into_iter()
            .enumerate()
            .filter(|(i, cg)| {
                (*i == 0 && with_root)
                    || regexes
                        .iter()
                        .any(|re| re.is_match(&cg.name) || re.is_match(&format!("/{}", cg.name)))
            })
            .map(|(_, cg)| cg)
            .collect();
        if out.is_empty() {
            return Err(self.usage(&patterns.join(","), "matches no cgroup"));
        }
        Ok(out)
    }
}

/// The deepest chain of monitored cgroups: how many of `cgroups` a cgroup's time is
/// charged to at most (itself and its monitored ancestors), and the cgroup where that is.
pub fn deepest_chain(cgroups: &[Cgroup]) -> Option<(usize, &Cgroup)> {
    let monitored: HashSet<&Path> = cgroups.iter().map(|c| c.path.as_path()).collect();
    cgroups
        .iter()
        .map(|cg| {
            let levels = cg
                .path
                .ancestors()
                .filter(|a| monitored.contains(a))
                .count();
            (levels, cg)
        })
        .max_by_key(|(levels, _)| *levels)
}

/// Splits a comma-separated list of cgroup names or patterns, keeping empty items. A
/// comma inside braces, brackets or parentheses belongs to a pattern (`a{1,3}`).
pub fn split_list(s: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut depth = 0i32;
    for c in s.chars() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth = (depth - 1).max(0),
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        items.last_mut().expect("never empty").push(c);
    }
    items
}

fn walk(dir: &Path, rel: &Path, out: &mut Vec<Cgroup>) -> std::io::Result<()> {
    let mut subdirs: Vec<(String, u64)> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.ino())))
        .collect();
    subdirs.sort();
    for (d, id) in subdirs {
        let path = rel.join(&d);
        out.push(Cgroup {
            name: path.display().to_string(),
            id,
            path: path.clone(),
        });
        // A cgroup removed while we walk is simply not there any more.
        let _ = walk(&dir.join(&d), &path, out);
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

    /// A fake mount in a temporary directory, with a sibling directory beside it.
    fn tree(tag: &str) -> (PathBuf, Hierarchy) {
        let top = std::env::temp_dir().join(format!("bperf-cgtest-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&top);
        let root = top.join("mnt");
        for d in ["web", "web/a", "db", "system.slice/x.service"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::create_dir_all(top.join("outside")).unwrap();
        fs::write(root.join("cgroup.procs"), "").unwrap();
        let h = Hierarchy {
            mount: root.clone(),
            v1: false,
        };
        (top, h)
    }

    fn names(h: &Hierarchy, items: &[&str]) -> Result<Vec<String>> {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        Ok(h.expand(&items)?.into_iter().map(|c| c.name).collect())
    }

    #[test]
    fn names_patterns_and_duplicates() {
        let (top, h) = tree("names");
        let r = (|| {
            assert_eq!(names(&h, &["web", "db"])?, ["web", "db"]);
            // As perf: a name given twice is one row; two names of one cgroup are two.
            assert_eq!(
                names(&h, &["web", "/web", "db", "web"])?,
                ["web", "/web", "db"]
            );
            let two = h.expand(&["web".into(), "db/../web".into()])?;
            assert_eq!(two[0].id, two[1].id);
            assert_eq!(two[1].path, PathBuf::from("web"));
            assert_eq!(names(&h, &["web.*"])?, ["web", "web/a"]);
            assert_eq!(names(&h, &["db", "web.*"])?, ["db", "web", "web/a"]);
            assert_eq!(names(&h, &["system.slice/.*"])?, ["system.slice/x.service"]);
            assert_eq!(names(&h, &["/"])?, ["/"]);
            assert_eq!(names(&h, &[""])?, ["/"]);
            assert_eq!(names(&h, &["", "", "/"])?, ["/"]);
            assert_eq!(names(&h, &["", "d.*"])?, ["/", "db"]);
            let e = names(&h, &["nope"]).unwrap_err().to_string();
            assert!(
                e.contains("'nope'") && e.contains(&h.mount.display().to_string()),
                "{e}"
            );
            assert!(names(&h, &["zz.*"]).is_err());
            assert!(names(&h, &["(("]).is_err());
            assert_eq!(h.all()?.len(), 6);
            assert_eq!(h.resolve("/")?.id, fs::metadata(&h.mount)?.ino());
            assert_eq!(
                h.resolve("web/a")?.id,
                fs::metadata(h.mount.join("web/a"))?.ino()
            );
            Ok::<_, anyhow::Error>(())
        })();
        fs::remove_dir_all(&top).unwrap();
        r.unwrap();
    }

    /// `..` and symlinks may not lead off the mount, nor may files count as cgroups.
    #[test]
    fn names_outside_the_mount_are_refused() {
        let (top, h) = tree("outside");
        std::os::unix::fs::symlink(top.join("outside"), top.join("mnt/web/link")).unwrap();
        let r = (|| {
            for bad in [
                "..",
                "../outside",
                "web/../../outside",
                "web/link",
                "cgroup.procs",
            ] {
                let e = h.resolve(bad).unwrap_err();
                assert!(e.downcast_ref::<UsageError>().is_some(), "{bad}: {e}");
                assert!(e.to_string().contains(&format!("'{bad}'")), "{e}");
            }
            assert_eq!(h.resolve("web/a/..")?.path, PathBuf::from("web"));
            assert_eq!(h.resolve("web/..")?.path, PathBuf::new());
            Ok::<_, anyhow::Error>(())
        })();
        fs::remove_dir_all(&top).unwrap();
        r.unwrap();
    }

    #[test]
    fn lists_split_at_commas_outside_patterns() {
        assert_eq!(split_list("a,b"), ["a", "b"]);
        assert_eq!(split_list(""), [""]);
        assert_eq!(split_list(","), ["", ""]);
        assert_eq!(split_list("a,,b"), ["a", "", "b"]);
        assert_eq!(split_list(".{0,65535},x"), [".{0,65535}", "x"]);
        assert_eq!(split_list("(a|b,c)[,]"), ["(a|b,c)[,]"]);
        assert_eq!(split_list("}a,b"), ["}a", "b"]);
    }

    #[test]
    fn deepest_chain_counts_monitored_ancestors() {
        let cg = |p: &str| Cgroup {
            name: p.into(),
            id: 0,
            path: PathBuf::from(p),
        };
        let set = [cg(""), cg("a"), cg("a/b/c"), cg("x"), cg("a/b/c/d")];
        let (levels, at) = deepest_chain(&set).unwrap();
        assert_eq!((levels, at.name.as_str()), (4, "a/b/c/d"));
        assert_eq!(deepest_chain(&[cg("x/y")]).unwrap().0, 1);
        assert!(deepest_chain(&[]).is_none());
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
