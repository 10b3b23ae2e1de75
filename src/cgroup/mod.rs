//! Cgroups: which hierarchy holds the perf_event controller, and the lists of names
//! and patterns perf's options take, read into cgroups (a name and an id each).
//!
//! Names are paths relative to the mount, as perf takes them (`web`,
//! `system.slice/db.service`, `/` for the root). A cgroup's id is the inode number of its
//! directory. The file system itself is read by sys::cgroupfs, behind [`Tree`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
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

/// One mounted file system, as /proc/self/mountinfo describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    /// The directory of the file system seen at the mount (`/` unless a bind mount of
    /// part of it).
    pub root: PathBuf,
    pub fstype: String,
    /// What was mounted, as the mount call named it (`cgroup2`, a device, `bperf`).
    pub source: String,
    /// The file system's own options (`perf_event` on a v1 hierarchy that holds it).
    pub options: Vec<String>,
}

impl Mount {
    /// The mounts of a /proc/PID/mountinfo text; lines it cannot read are left out.
    pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
        text.lines().filter_map(Mount::parse_line).collect()
    }

    /// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER_OPTIONS`
    fn parse_line(line: &str) -> Option<Mount> {
        let (before, after) = line.split_once(" - ")?;
        let mut f = before.split(' ');
        let root = f.nth(3)?;
        let point = f.next()?;
        let mut a = after.split(' ');
        let fstype = a.next()?;
        let source = a.next().unwrap_or("");
        let options = a.next().unwrap_or("");
        Some(Mount {
            point: unescape(point),
            root: unescape(root),
            fstype: fstype.to_string(),
            source: source.to_string(),
            options: options.split(',').map(str::to_string).collect(),
        })
    }
}

/// A path of mountinfo, where the kernel writes space, tab, newline and backslash as
/// `\ooo` (octal).
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match code {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The hierarchy of the perf_event controller in a /proc/cgroups text (0: cgroup2, or
/// none); None when the text does not list it.
pub fn perf_event_hierarchy(proc_cgroups: &str) -> Option<u32> {
    proc_cgroups.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == "perf_event").then_some(())?;
        f.next()?.parse().ok()
    })
}

impl Hierarchy {
    /// The hierarchy whose cgroups perf_event counts, found as perf finds it: a mounted
    /// cgroup v1 file system whose options name perf_event, else cgroup2 (mounts of a
    /// whole hierarchy first). A v1 hierarchy that holds perf_event but is mounted
    /// nowhere (as a container runtime can leave it) has no paths to name its cgroups
    /// by: cgroups are then those of cgroup2, as with perf 6.12's --bpf-counters.
    /// `perf_event_hierarchy` (from /proc/cgroups) only explains a failure.
    pub fn find(perf_event_hierarchy: Option<u32>, mounts: &[Mount]) -> Result<Hierarchy> {
        let v1 = |m: &Mount| m.fstype == "cgroup" && m.options.iter().any(|o| o == "perf_event");
        let v2 = |m: &Mount| m.fstype == "cgroup2";
        let whole_first = |is: &dyn Fn(&Mount) -> bool| {
            let mut found = mounts.iter().filter(|m| is(m));
            let first = found.clone().next();
            found.find(|m| m.root == Path::new("/")).or(first)
        };
        if let Some(m) = whole_first(&v1) {
            return Ok(Hierarchy {
                mount: m.point.clone(),
                v1: true,
            });
        }
        if let Some(m) = whole_first(&v2) {
            return Ok(Hierarchy {
                mount: m.point.clone(),
                v1: false,
            });
        }
        match perf_event_hierarchy {
            Some(h) if h != 0 => bail!(
                "no cgroup2 file system is mounted, and the perf_event cgroup controller is on cgroup v1 hierarchy {h}, which is mounted nowhere: mount one (mount -t cgroup2 none DIR, or mount -t cgroup -o perf_event none DIR)"
            ),
            _ => bail!(
                "no cgroup2 file system is mounted (searched /proc/self/mountinfo): mount one (mount -t cgroup2 none DIR)"
            ),
        }
    }

    /// A user's error about cgroup `name`.
    pub fn refuse(&self, name: &str, what: &str) -> anyhow::Error {
        UsageError(format!(
            "cgroup '{name}' {what} (searched {})",
            self.mount.display()
        ))
        .into()
    }
}

/// The cgroups under a hierarchy's mount, as the file system shows them.
pub trait Tree {
    fn hierarchy(&self) -> &Hierarchy;
    /// The cgroup called `name`, which must lead, after `..` and symlinks, to a
    /// directory on the cgroup file system at the mount.
    fn resolve(&self, name: &str) -> Result<Cgroup>;
    /// Every cgroup, root first, then the tree in order, named by its path.
    fn all(&self) -> Result<Vec<Cgroup>>;
}

/// Expands the items of --for-each-cgroup, as perf does: an empty item is the root;
/// when any item holds a regex metacharacter, every item is a pattern matching whole
/// names, and the matches come in the order of the tree; otherwise each item is a name
/// that must exist. A name given twice is counted once. Two names of one cgroup are two
/// rows.
pub(crate) fn expand(tree: &dyn Tree, items: &[String]) -> Result<Vec<Cgroup>> {
    if items.iter().any(|i| is_pattern(i)) {
        return matching(tree, items);
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for item in items {
        let name = if item.is_empty() { "/" } else { item.as_str() };
        if seen.insert(name) {
            out.push(tree.resolve(name)?);
        }
    }
    Ok(out)
}

/// The cgroups whose names match any of the patterns (an empty one: the root).
fn matching(tree: &dyn Tree, patterns: &[String]) -> Result<Vec<Cgroup>> {
    let out = Selection::patterns(patterns)?.select(tree)?;
    if out.is_empty() {
        return Err(tree
            .hierarchy()
            .refuse(&patterns.join(","), "matches no cgroup"));
    }
    Ok(out)
}

/// Which cgroups are counted, as a rule that can be applied again when the tree
/// changes: every cgroup, or those whose names match patterns.
#[derive(Clone, Debug)]
pub enum Selection {
    All,
    /// Every container's own cgroup (not the sub-cgroups a runtime makes inside one):
    /// --for-each-container.
    Containers,
    Matching {
        regexes: Vec<Regex>,
        /// An empty pattern: the root too.
        with_root: bool,
    },
}

impl Selection {
    /// --for-each-cgroup's items when they are patterns (see [`expand`]): whole names.
    pub(crate) fn patterns(patterns: &[String]) -> Result<Selection> {
        let mut regexes = Vec::new();
        for p in patterns.iter().filter(|p| !p.is_empty()) {
            let re = Regex::new(&format!("^(?:{p})$"))
                .map_err(|_| UsageError(format!("invalid cgroup pattern '{p}'")))?;
            regexes.push(re);
        }
        let with_root = patterns.iter().any(|p| p.is_empty());
        Ok(Selection::Matching { regexes, with_root })
    }

    /// The rule of --for-each-cgroup's items, if they are patterns.
    pub(crate) fn of_items(items: &[String]) -> Result<Option<Selection>> {
        match items.iter().any(|i| is_pattern(i)) {
            true => Selection::patterns(items).map(Some),
            false => Ok(None),
        }
    }

    /// The cgroups selected in the tree as it is now, in the order of the tree.
    pub fn select(&self, tree: &dyn Tree) -> Result<Vec<Cgroup>> {
        let all = tree.all()?;
        let (regexes, with_root) = match self {
            Selection::All => return Ok(all),
            Selection::Containers => {
                return Ok(all.into_iter().filter(is_container_cgroup).collect())
            }
            Selection::Matching { regexes, with_root } => (regexes, with_root),
        };
        let matches = |cg: &Cgroup| {
            regexes
                .iter()
                .any(|re| re.is_match(&cg.name) || re.is_match(&format!("/{}", cg.name)))
        };
        Ok(all
            .into_iter()
            .enumerate()
            .filter(|(i, cg)| (*i == 0 && *with_root) || matches(cg))
            .map(|(_, cg)| cg)
            .collect())
    }
}

/// Whether `cg` is a container's own cgroup, as its runtime made it.
pub(crate) fn is_container_cgroup(cg: &Cgroup) -> bool {
    let path = cg.path.to_string_lossy();
    crate::container::recognize(&path).is_some_and(|c| c.cgroup.trim_start_matches('/') == path)
}

/// The deepest chain of monitored cgroups: how many of `cgroups` a cgroup's time is
/// charged to at most (itself and its monitored ancestors), and the cgroup where that is.
pub(crate) fn deepest_chain(cgroups: &[Cgroup]) -> Option<(usize, &Cgroup)> {
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
pub(crate) fn split_list(s: &str) -> Vec<String> {
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

/// perf treats a name with any regex metacharacter as a pattern.
fn is_pattern(s: &str) -> bool {
    s.contains(['{', '}', '[', ']', '(', ')', '|', '*', '+', '?', '^', '$'])
}

/// A cgroup's name as bperf shows it (serve's label, top's row): its path relative to
/// the mount, `/` for the root; bytes that are not UTF-8 carried as
/// output::people::text_of_bytes carries them, for each output to write as `\xNN`.
pub(crate) fn path_name(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    match path.as_os_str().is_empty() {
        true => "/".into(),
        false => crate::output::people::text_of_bytes(path.as_os_str().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_slash() {
        assert_eq!(path_name(Path::new("")), "/");
        assert_eq!(path_name(Path::new("system.slice/x")), "system.slice/x");
    }

    fn mount(point: &str, fstype: &str, options: &[&str]) -> Mount {
        Mount {
            point: point.into(),
            root: "/".into(),
            fstype: fstype.into(),
            source: fstype.into(),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }

    fn hybrid() -> Vec<Mount> {
        vec![
            mount("/sys/fs/cgroup", "tmpfs", &["rw"]),
            mount("/sys/fs/cgroup/cpu", "cgroup", &["rw", "cpu"]),
            mount("/sys/fs/cgroup/unified", "cgroup2", &["rw"]),
        ]
    }

    #[test]
    fn cgroup2_when_perf_event_on_hierarchy_zero() {
        for hierarchy in [Some(0), None] {
            let h = Hierarchy::find(hierarchy, &hybrid()).unwrap();
            assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/unified"));
            assert!(!h.v1);
        }
    }

    #[test]
    fn v1_when_perf_event_is_on_a_mounted_v1_hierarchy() {
        let mut mounts = hybrid();
        mounts.push(mount(
            "/sys/fs/cgroup/perf event",
            "cgroup",
            &["rw", "perf_event"],
        ));
        let h = Hierarchy::find(Some(9), &mounts).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/perf event"));
        assert!(h.v1);
    }

    /// perf_event on a v1 hierarchy mounted nowhere: the cgroup2 tree, as perf.
    #[test]
    fn cgroup2_when_the_v1_hierarchy_is_mounted_nowhere() {
        let h = Hierarchy::find(Some(9), &hybrid()).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/unified"));
        assert!(!h.v1);
        let e = Hierarchy::find(Some(9), &[mount("/", "ext4", &["rw"])]).unwrap_err();
        assert!(e.to_string().contains("hierarchy 9"), "{e}");
    }

    #[test]
    fn no_cgroup2_is_an_error() {
        let e = Hierarchy::find(None, &[mount("/", "ext4", &["rw"])]).unwrap_err();
        assert!(e.to_string().contains("cgroup2"));
    }

    /// A bind mount of part of a hierarchy comes after a mount of all of it.
    #[test]
    fn a_whole_hierarchy_before_a_part_of_it() {
        let mut part = mount("/container/cg", "cgroup2", &["rw"]);
        part.root = "/docker/abc".into();
        let mounts = [part.clone(), mount("/sys/fs/cgroup", "cgroup2", &["rw"])];
        let h = Hierarchy::find(Some(0), &mounts).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup"));
        let h = Hierarchy::find(Some(0), &[part]).unwrap();
        assert_eq!(h.mount, PathBuf::from("/container/cg"));
    }

    #[test]
    fn mountinfo_lines_are_read_with_their_escapes() {
        let text = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/perf\\040event rw,relatime - cgroup cgroup rw,perf_event
garbage
41 31 0:38 /a\\134b /mnt/x\\011y rw - cgroup2 cgroup2 rw,nsdelegate
42 31 0:39 / /mnt/bad\\9 rw - cgroup2 none
";
        let m = Mount::parse_mountinfo(text);
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[0].fstype, "tmpfs");
        assert_eq!(m[0].source, "tmpfs");
        assert_eq!(m[3].source, "none");
        assert_eq!(m[1].point, PathBuf::from("/sys/fs/cgroup/perf event"));
        assert_eq!(m[1].options, ["rw", "perf_event"]);
        assert_eq!(m[2].point, PathBuf::from("/mnt/x\ty"));
        assert_eq!(m[2].root, PathBuf::from("/a\\b"));
        assert_eq!(m[3].point, PathBuf::from("/mnt/bad\\9"));
        assert_eq!(m[3].options, [""]);
    }

    #[test]
    fn perf_event_hierarchy_from_proc_cgroups() {
        let text = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
                    cpu\t1\t1\t1\nperf_event\t10\t2\t1\n";
        assert_eq!(perf_event_hierarchy(text), Some(10));
        assert_eq!(perf_event_hierarchy("perf_event\t0\t1\t1\n"), Some(0));
        assert_eq!(perf_event_hierarchy("cpu\t1\t1\t1\n"), None);
        assert_eq!(perf_event_hierarchy("perf_event x\n"), None);
        assert_eq!(perf_event_hierarchy(""), None);
    }

    /// A tree of names, ids counting from 1 in order.
    struct NameTree(Hierarchy, Vec<&'static str>);

    impl Tree for NameTree {
        fn hierarchy(&self) -> &Hierarchy {
            &self.0
        }
        fn resolve(&self, name: &str) -> Result<Cgroup> {
            let rel = name.trim_start_matches('/');
            let i = self.1.iter().position(|n| *n == rel);
            let i = i.ok_or_else(|| self.0.refuse(name, "does not exist"))?;
            Ok(Cgroup {
                name: name.into(),
                id: i as u64 + 1,
                path: rel.into(),
            })
        }
        fn all(&self) -> Result<Vec<Cgroup>> {
            let mut all = vec![self.resolve("/")?];
            all.extend(self.1[1..].iter().map(|n| self.resolve(n).unwrap()));
            Ok(all)
        }
    }

    fn names(items: &[&str]) -> Result<Vec<String>> {
        let tree = NameTree(
            Hierarchy {
                mount: "/mnt".into(),
                v1: false,
            },
            vec![
                "",
                "db",
                "system.slice",
                "system.slice/x.service",
                "web",
                "web/a",
            ],
        );
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        Ok(expand(&tree, &items)?.into_iter().map(|c| c.name).collect())
    }

    #[test]
    fn names_patterns_and_duplicates() {
        assert_eq!(names(&["web", "db"]).unwrap(), ["web", "db"]);
        // As perf: a name given twice is one row; two names of one cgroup are two.
        assert_eq!(
            names(&["web", "/web", "db", "web"]).unwrap(),
            ["web", "/web", "db"]
        );
        assert_eq!(names(&["web.*"]).unwrap(), ["web", "web/a"]);
        assert_eq!(names(&["web", "d.*"]).unwrap(), ["db", "web"]);
        assert_eq!(
            names(&["system.slice/.*"]).unwrap(),
            ["system.slice/x.service"]
        );
        assert_eq!(names(&["/"]).unwrap(), ["/"]);
        assert_eq!(names(&[""]).unwrap(), ["/"]);
        assert_eq!(names(&["", "", "/"]).unwrap(), ["/"]);
        assert_eq!(names(&["", "d.*"]).unwrap(), ["/", "db"]);
        let e = names(&["nope"]).unwrap_err().to_string();
        assert!(e.contains("'nope'") && e.contains("/mnt"), "{e}");
        assert!(names(&["zz.*"]).is_err());
        assert!(names(&["(("]).is_err());
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
}
