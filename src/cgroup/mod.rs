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

pub mod live;

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
    pub fstype: String,
    /// The file system's own options (`perf_event` on a v1 hierarchy that holds it).
    pub options: Vec<String>,
}

impl Hierarchy {
    /// The hierarchy that holds perf_event: cgroup2 when perf_event has hierarchy 0 (or
    /// is missing from /proc/cgroups), else the v1 mount whose options name it.
    pub fn find(perf_event_hierarchy: Option<u32>, mounts: &[Mount]) -> Result<Hierarchy> {
        let v1 = perf_event_hierarchy.is_some_and(|h| h != 0);
        let found = mounts.iter().find(|m| match v1 {
            true => m.fstype == "cgroup" && m.options.iter().any(|o| o == "perf_event"),
            false => m.fstype == "cgroup2",
        });
        match found {
            Some(m) => Ok(Hierarchy {
                mount: m.point.clone(),
                v1,
            }),
            None if v1 => bail!(
                "the perf_event cgroup controller is on a cgroup v1 hierarchy that is not mounted"
            ),
            None => bail!("no cgroup2 file system is mounted (searched /proc/self/mountinfo)"),
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
pub fn expand(tree: &dyn Tree, items: &[String]) -> Result<Vec<Cgroup>> {
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
    Matching {
        regexes: Vec<Regex>,
        /// An empty pattern: the root too.
        with_root: bool,
    },
}

impl Selection {
    /// --for-each-cgroup's items when they are patterns (see [`expand`]): whole names.
    pub fn patterns(patterns: &[String]) -> Result<Selection> {
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
    pub fn of_items(items: &[String]) -> Result<Option<Selection>> {
        match items.iter().any(|i| is_pattern(i)) {
            true => Selection::patterns(items).map(Some),
            false => Ok(None),
        }
    }

    /// The cgroups selected in the tree as it is now, in the order of the tree.
    pub fn select(&self, tree: &dyn Tree) -> Result<Vec<Cgroup>> {
        let all = tree.all()?;
        let Selection::Matching { regexes, with_root } = self else {
            return Ok(all);
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

/// perf treats a name with any regex metacharacter as a pattern.
fn is_pattern(s: &str) -> bool {
    s.contains(['{', '}', '[', ']', '(', ')', '|', '*', '+', '?', '^', '$'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(point: &str, fstype: &str, options: &[&str]) -> Mount {
        Mount {
            point: point.into(),
            fstype: fstype.into(),
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
    fn v1_when_perf_event_has_a_hierarchy() {
        let mut mounts = hybrid();
        assert!(Hierarchy::find(Some(9), &mounts).is_err());
        mounts.push(mount(
            "/sys/fs/cgroup/perf event",
            "cgroup",
            &["rw", "perf_event"],
        ));
        let h = Hierarchy::find(Some(9), &mounts).unwrap();
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/perf event"));
        assert!(h.v1);
    }

    #[test]
    fn no_cgroup2_is_an_error() {
        let e = Hierarchy::find(None, &[mount("/", "ext4", &["rw"])]).unwrap_err();
        assert!(e.to_string().contains("cgroup2"));
    }

    /// A tree of names, ids counting from 1 in order.
    struct Fake(Hierarchy, Vec<&'static str>);

    impl Tree for Fake {
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
        let tree = Fake(
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
