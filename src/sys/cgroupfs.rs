//! The cgroup file system: where the perf_event hierarchy is mounted, and what is under it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use crate::cgroup::{perf_event_hierarchy, Cgroup, Hierarchy, Tree};
use crate::Notes;

/// The hierarchy whose cgroups perf_event counts on this machine (see
/// [`Hierarchy::find`]), from /proc/self/mountinfo and /proc/cgroups.
pub fn discover() -> Result<Hierarchy> {
    let mounts = super::mounts().context("cannot read /proc/self/mountinfo")?;
    // Only explains a failure; missing on kernels built without cgroup v1.
    let cgroups = fs::read_to_string("/proc/cgroups").unwrap_or_default();
    Hierarchy::find(perf_event_hierarchy(&cgroups), &mounts)
}

/// A cgroup hierarchy's directories.
pub(crate) struct Cgroupfs {
    hierarchy: Hierarchy,
    /// The mount without symlinks, and the device of its file system.
    real_mount: PathBuf,
    dev: u64,
}

impl Cgroupfs {
    pub fn new(hierarchy: Hierarchy) -> Result<Cgroupfs> {
        let mount = &hierarchy.mount;
        let real_mount = fs::canonicalize(mount)
            .with_context(|| format!("cannot resolve {}", mount.display()))?;
        let dev = fs::metadata(&real_mount)
            .with_context(|| format!("cannot read {}", mount.display()))?
            .dev();
        Ok(Cgroupfs {
            hierarchy,
            real_mount,
            dev,
        })
    }

    /// What `rel` leads to from the mount, after `..` and symlinks, and its metadata. A
    /// path of plain names is taken as it is, one lstat: the cgroup file system has no
    /// symlinks (a symlink there is no cgroup), and a file system mounted inside it shows
    /// in the device check. Other paths are resolved.
    fn lookup(&self, rel: &Path) -> std::io::Result<(PathBuf, fs::Metadata)> {
        let joined = self.real_mount.join(rel);
        if rel.components().all(|c| matches!(c, Component::Normal(_))) {
            let md = fs::symlink_metadata(&joined)?;
            return Ok((joined, md));
        }
        let real = fs::canonicalize(joined)?;
        let md = fs::metadata(&real)?;
        Ok((real, md))
    }
}

impl Tree for Cgroupfs {
    fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    fn resolve(&self, name: &str) -> Result<Cgroup> {
        let h = &self.hierarchy;
        let rel = Path::new(name.trim_start_matches('/'));
        let (real, md) = self
            .lookup(rel)
            .map_err(|_| h.refuse(name, "does not exist"))?;
        let path = match real.strip_prefix(&self.real_mount) {
            Ok(p) if md.dev() == self.dev && md.is_dir() => p.to_path_buf(),
            _ => return Err(h.refuse(name, "is not a cgroup")),
        };
        Ok(Cgroup {
            name: name.to_string(),
            id: md.ino(),
            path,
        })
    }

    fn all(&self) -> Result<Vec<Cgroup>> {
        let mount = &self.hierarchy.mount;
        let root =
            fs::metadata(mount).with_context(|| format!("cannot read {}", mount.display()))?;
        let mut out = vec![Cgroup {
            name: "/".into(),
            id: root.ino(),
            path: PathBuf::new(),
        }];
        walk(mount, Path::new(""), &mut out)
            .with_context(|| format!("cannot list cgroups under {}", mount.display()))?;
        Ok(out)
    }
}

/// Adds the cgroups below `dir` (at `rel` from the mount) to `out`, depth first, in
/// name order; ids come from the directory entries. A name that is not UTF-8 is named
/// as cgroup::path_name names it (its bytes written `\xNN`), and opened as it is.
fn walk(dir: &Path, rel: &Path, out: &mut Vec<Cgroup>) -> std::io::Result<()> {
    let mut subdirs: Vec<(std::ffi::OsString, u64)> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| (e.file_name(), e.ino()))
        .collect();
    subdirs.sort();
    for (d, id) in subdirs {
        let path = rel.join(&d);
        out.push(Cgroup {
            name: crate::cgroup::path_name(&path),
            id,
            path: path.clone(),
        });
        // A cgroup removed while we walk is simply not there any more.
        let _ = walk(&dir.join(&d), &path, out);
    }
    Ok(())
}

/// Watches the cgroup tree under `mount` for cgroups created, removed or renamed, from
/// a thread of its own, and calls `changed` after each batch of such changes until it
/// returns false, with what there is to say (watches the kernel refused). Every
/// directory is watched (inotify), new ones as they appear. What there is to say about
/// the tree as it is now is returned.
pub fn watch(mount: &Path, changed: impl Fn(Notes) -> bool + Send + 'static) -> Result<Notes> {
    use rustix::fs::inotify::{self, CreateFlags};
    let fd = inotify::init(CreateFlags::CLOEXEC).context("cannot watch the cgroup tree")?;
    let mut watches = Watches {
        fd,
        root: mount.to_path_buf(),
        dirs: WatchedDirs::default(),
        warned: false,
        notes: Notes::default(),
    };
    watches.add_tree(mount);
    let now = std::mem::take(&mut watches.notes);
    std::thread::spawn(move || watches.run(changed));
    Ok(now)
}

/// The directories watched, by watch descriptor and by path, kept in step.
#[derive(Debug, Default)]
struct WatchedDirs {
    by_wd: HashMap<i32, PathBuf>,
    by_path: HashMap<PathBuf, i32>,
}

impl WatchedDirs {
    /// `wd` watches `dir`. Watching a directory again gives its watch again, under the
    /// directory's path now (it may have been renamed).
    fn insert(&mut self, wd: i32, dir: &Path) {
        if let Some(old) = self.by_wd.insert(wd, dir.to_path_buf()) {
            self.by_path.remove(&old);
        }
        if let Some(old) = self.by_path.insert(dir.to_path_buf(), wd) {
            if old != wd {
                self.by_wd.remove(&old);
            }
        }
    }

    fn path(&self, wd: i32) -> Option<&Path> {
        self.by_wd.get(&wd).map(PathBuf::as_path)
    }

    /// Forgets watch `wd` (the kernel dropped it).
    fn forget(&mut self, wd: i32) {
        if let Some(path) = self.by_wd.remove(&wd) {
            if self.by_path.get(&path) == Some(&wd) {
                self.by_path.remove(&path);
            }
        }
    }

    /// Forgets the watch of `name`, removed from the directory `parent` watches, and
    /// gives it, for the caller to remove from the kernel.
    fn take_child(&mut self, parent: i32, name: &OsStr) -> Option<i32> {
        let path = self.by_wd.get(&parent)?.join(name);
        let wd = self.by_path.remove(&path)?;
        self.by_wd.remove(&wd);
        Some(wd)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_wd.len()
    }
}

/// The inotify watches on a cgroup tree.
struct Watches {
    fd: std::os::fd::OwnedFd,
    root: PathBuf,
    dirs: WatchedDirs,
    /// Said once that the kernel's limit on watches was reached.
    warned: bool,
    /// What to say with the next change.
    notes: Notes,
}

impl Watches {
    /// Watches `dir` and every directory below it.
    fn add_tree(&mut self, dir: &Path) {
        use rustix::fs::inotify::{self, WatchFlags};
        let flags = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::ONLYDIR;
        match inotify::add_watch(&self.fd, dir, flags) {
            Ok(wd) => self.dirs.insert(wd, dir),
            // Removed already: nothing to watch.
            Err(rustix::io::Errno::NOENT) => return,
            Err(e) if !self.warned => {
                self.warned = true;
                self.notes.0.push(format!(
                    "cannot watch {} for new cgroups: {e} (fs.inotify.max_user_watches?); cgroups created below it are found at the next change elsewhere",
                    dir.display()
                ));
            }
            Err(_) => {}
        }
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(|e| e.ok()) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.add_tree(&e.path());
            }
        }
    }

    /// Reads changes until `changed` says to stop, watching new directories as they come
    /// and unwatching removed ones.
    fn run(mut self, changed: impl Fn(Notes) -> bool) {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let mut buf = [std::mem::MaybeUninit::uninit(); 16384];
        let fd = self.fd.try_clone().expect("duplicating the inotify fd");
        let mut reader = Reader::new(&fd, &mut buf);
        loop {
            let mut new_dirs = Vec::new();
            loop {
                let Ok(ev) = reader.next() else {
                    return;
                };
                let flags = ev.events();
                let name = ev
                    .file_name()
                    .map(|n| OsStr::from_bytes(n.to_bytes()).to_os_string());
                if flags.contains(ReadFlags::IGNORED) {
                    self.dirs.forget(ev.wd());
                }
                let created = flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO);
                if let (true, Some(name), Some(dir)) = (created, &name, self.dirs.path(ev.wd())) {
                    new_dirs.push(dir.join(name));
                }
                if let (true, Some(name)) = (flags.contains(ReadFlags::DELETE), &name) {
                    self.unwatch(ev.wd(), name);
                }
                if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    // Changes were lost: watch whatever is new anywhere.
                    new_dirs.push(self.root.clone());
                }
                if reader.is_buffer_empty() {
                    break;
                }
            }
            for dir in new_dirs {
                self.add_tree(&dir);
            }
            if !changed(std::mem::take(&mut self.notes)) {
                return;
            }
        }
    }

    /// Stops watching `name`, removed from the directory `parent` watches. The cgroup
    /// file system sends no IN_IGNORED for a removed directory: its watch would stay,
    /// and keep the directory's inode, for as long as bperf runs.
    fn unwatch(&mut self, parent: i32, name: &OsStr) {
        if let Some(wd) = self.dirs.take_child(parent, name) {
            // Dropped by the kernel already is fine.
            let _ = rustix::fs::inotify::remove_watch(&self.fd, wd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::expand;
    use crate::UsageError;

    /// A fake mount in a temporary directory, with a sibling directory beside it.
    fn tree(tag: &str) -> (PathBuf, Cgroupfs) {
        let top = std::env::temp_dir().join(format!("bperf-cgtest-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&top);
        let root = top.join("mnt");
        for d in ["web", "web/a", "db", "system.slice/x.service"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::create_dir_all(top.join("outside")).unwrap();
        fs::write(root.join("cgroup.procs"), "").unwrap();
        let h = Cgroupfs::new(Hierarchy {
            mount: root.clone(),
            v1: false,
        })
        .unwrap();
        (top, h)
    }

    fn names(h: &Cgroupfs, items: &[&str]) -> Result<Vec<String>> {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        Ok(expand(h, &items)?.into_iter().map(|c| c.name).collect())
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
            let two = expand(&h, &["web".into(), "db/../web".into()])?;
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
                e.contains("'nope'") && e.contains(&h.hierarchy.mount.display().to_string()),
                "{e}"
            );
            assert!(names(&h, &["zz.*"]).is_err());
            assert!(names(&h, &["(("]).is_err());
            assert_eq!(h.all()?.len(), 6);
            assert_eq!(h.resolve("/")?.id, fs::metadata(&h.hierarchy.mount)?.ino());
            assert_eq!(
                h.resolve("web/a")?.id,
                fs::metadata(h.hierarchy.mount.join("web/a"))?.ino()
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

    /// Churn: every directory made and removed leaves nothing behind, renamed ones keep
    /// their watch under the new name.
    #[test]
    fn removed_directories_are_forgotten() {
        let mut dirs = WatchedDirs::default();
        dirs.insert(1, Path::new("/m"));
        for wd in 2..10_000 {
            let name = format!("c{wd}");
            dirs.insert(wd, &Path::new("/m").join(&name));
            assert_eq!(dirs.take_child(1, OsStr::new(&name)), Some(wd));
        }
        assert_eq!(dirs.len(), 1);
        dirs.insert(7, Path::new("/m/a"));
        dirs.insert(7, Path::new("/m/b"));
        assert_eq!(dirs.take_child(1, OsStr::new("a")), None);
        assert_eq!(dirs.take_child(1, OsStr::new("b")), Some(7));
        dirs.insert(8, Path::new("/m/x"));
        dirs.forget(8);
        assert_eq!(dirs.take_child(1, OsStr::new("x")), None);
        assert_eq!(dirs.len(), 1);
        assert_eq!(
            (dirs.path(1), dirs.by_path.len()),
            (Some(Path::new("/m")), 1)
        );
    }
}
