//! Where `bperf record` and `bperf stat record` write their recording, by perf's rules
//! for its data files: what is at the path decides. And `WholeFile`, where `bperf report
//! --timeline` writes: a file that is there whole or not at all.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The name that stands for standard output.
pub(crate) const STDOUT: &str = "-";

/// The name an earlier recording at `path` is kept under.
pub(crate) fn kept_name(path: &Path) -> PathBuf {
    let mut old = path.as_os_str().to_owned();
    old.push(".old");
    PathBuf::from(old)
}

/// Opens `path` for a recording, as perf opens its data files, by what the path leads
/// to (through symbolic links):
/// - `-` is standard output;
/// - a regular file with something in it is an earlier recording: what is at the path
///   (the file, or the link to it) is kept as `path`.old (replacing one there) and a new
///   file is made; the file a link leads to is never written;
/// - anything else (a device, a FIFO, a socket, an empty file) is written into as it
///   is, as a shell's redirection would;
/// - nothing there: a new file.
///
/// New files are readable by their owner only, as perf's. Call it only when the
/// recording is about to be written: a run that fails before must leave an earlier
/// recording where it was.
#[cfg(test)]
pub fn create(path: &Path) -> Result<File> {
    let mut never = || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        false
    };
    Ok(create_or_give_up(path, &mut never)?.expect("never gives up"))
}

/// `create`, where a FIFO nobody reads yet is waited for, `give_up` asked between two
/// looks (it waits a moment itself): None when it said to give up. A blocking open
/// would wait for a reader through every signal.
pub(crate) fn create_or_give_up(
    path: &Path,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<Option<File>> {
    if path.as_os_str() == STDOUT {
        return create_file(path).map(Some);
    }
    let found = refuse_planted(path)?;
    let file = match &found {
        Some(m) if m.file_type().is_fifo() => open_fifo(path, give_up)?,
        _ => Some(create_file(path)?),
    };
    if let (Some(m), Some(f)) = (&found, &file) {
        same_as_checked(path, m, f)?;
    }
    Ok(file)
}

/// Refuses what another user may have planted at `path` for this process to write
/// into: an entry of someone else's in a sticky world-writable directory (as the
/// kernel's fs.protected_regular and protected_fifos refuse it to O_CREAT), and a FIFO,
/// socket or device that is not the caller's to give: a FIFO or socket of another user,
/// or any of them reached through another user's link. A file descriptor this process
/// was given (/dev/stdout, /proc/self/fd/N) is the caller's. What the path leads to,
/// when something is there.
fn refuse_planted(path: &Path) -> Result<Option<Metadata>> {
    let me = rustix::process::geteuid().as_raw();
    let Ok(mut entry) = fs::symlink_metadata(path) else {
        return Ok(None);
    };
    let mut at = path.to_path_buf();
    let mut foreign_link = None;
    let mut given_fd = false;
    // The links at the path, one after the other (bounded as the kernel bounds them).
    for _ in 0..40 {
        refuse_foreign_in_sticky(&at, &entry, me)?;
        if !entry.file_type().is_symlink() {
            break;
        }
        given_fd |= is_own_fd(&at);
        if entry.uid() != me && entry.uid() != 0 {
            foreign_link.get_or_insert(entry.uid());
        }
        let Ok(next) = fs::read_link(&at) else { break };
        at = at.parent().unwrap_or(Path::new("/")).join(next);
        match fs::symlink_metadata(&at) {
            Ok(m) => entry = m,
            // A /proc link to a pipe or socket names no path.
            Err(_) => break,
        }
    }
    let Ok(target) = fs::metadata(path) else {
        return Ok(None);
    };
    let ft = target.file_type();
    let channel = ft.is_fifo() || ft.is_socket();
    let special = channel || ft.is_char_device() || ft.is_block_device();
    if !special || given_fd {
        return Ok(Some(target));
    }
    let what = if channel {
        "a FIFO or socket"
    } else {
        "a device"
    };
    if let Some(uid) = foreign_link {
        anyhow::bail!(
            "{} leads to {what} through a link of uid {uid}: not written (name the file itself)",
            path.display()
        );
    }
    if channel && target.uid() != me && target.uid() != 0 {
        anyhow::bail!(
            "{} is {what} of uid {}, not yours: not written (make the FIFO yourself)",
            path.display(),
            target.uid()
        );
    }
    Ok(Some(target))
}

/// Refuses `entry`, at `at`, when it is in a sticky world-writable directory and owned
/// by neither the caller (`me`) nor the directory's owner: another user put it there.
fn refuse_foreign_in_sticky(at: &Path, entry: &Metadata, me: u32) -> Result<()> {
    let parent = match at.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(dir) = fs::metadata(parent) else {
        return Ok(());
    };
    let sticky_world_writable = dir.mode() & 0o1002 == 0o1002;
    if sticky_world_writable && entry.uid() != me && entry.uid() != dir.uid() {
        anyhow::bail!(
            "{} belongs to uid {}, in the sticky directory {} (as fs.protected_regular refuses it): not written, name a path of your own",
            at.display(),
            entry.uid(),
            parent.display()
        );
    }
    Ok(())
}

/// Whether `link` is one of this process's file descriptors (/proc/self/fd/N and the
/// like): a file the caller gave it.
fn is_own_fd(link: &Path) -> bool {
    let me = std::process::id().to_string();
    let Some(dir) = link.parent() else {
        return false;
    };
    let own = ["/proc/self/fd", "/proc/thread-self/fd", "/dev/fd"];
    own.iter().any(|d| dir == Path::new(d)) || dir == Path::new("/proc").join(me).join("fd")
}

/// Refuses `file`, opened at `path`, unless it is the file `checked` was (nothing was
/// swapped in between the look and the open), or a new file where an earlier recording
/// was kept.
fn same_as_checked(path: &Path, checked: &Metadata, file: &File) -> Result<()> {
    let Ok(opened) = file.metadata() else {
        return Ok(());
    };
    let same = opened.dev() == checked.dev() && opened.ino() == checked.ino();
    // An earlier recording was renamed away and a new file made in its place.
    let replaced = checked.is_file() && checked.len() > 0 && opened.is_file();
    if same || replaced {
        return Ok(());
    }
    anyhow::bail!(
        "{} changed while it was opened: not written",
        path.display()
    )
}

/// The FIFO at `path` opened for writing once a reader has it open, or None when
/// `give_up` says so first. Writes to it block, as to any FIFO.
fn open_fifo(path: &Path, give_up: &mut dyn FnMut() -> bool) -> Result<Option<File>> {
    let cannot = || format!("cannot write to {}", path.display());
    loop {
        let opened = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path);
        match opened {
            Ok(f) => {
                rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::empty()).with_context(cannot)?;
                return Ok(Some(f));
            }
            // No reader yet.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if give_up() {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e).with_context(cannot),
        }
    }
}

fn create_file(path: &Path) -> Result<File> {
    if path.as_os_str() == STDOUT {
        let out = io::stdout().as_fd().try_clone_to_owned();
        return Ok(File::from(out.context("cannot write to standard output")?));
    }
    let cannot_create = || format!("cannot create {}", path.display());
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() > 0 => {
            let old = kept_name(path);
            std::fs::rename(path, &old)
                .with_context(|| format!("cannot keep {} as {}", path.display(), old.display()))?;
            new_file()
                .create_new(true)
                .open(path)
                .with_context(cannot_create)
        }
        // Emptied only once it is known to be the file looked at (not one swapped in).
        Ok(m) if m.is_file() => {
            let f = new_file().open(path).with_context(cannot_create)?;
            same_as_checked(path, &m, &f)?;
            f.set_len(0).with_context(cannot_create)?;
            Ok(f)
        }
        Ok(_) => OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("cannot write to {}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => new_file()
            .create_new(true)
            .open(path)
            .with_context(cannot_create),
        Err(e) => Err(e).with_context(cannot_create),
    }
}

/// A file written whole or not at all (bperf report --timeline): the file at the path is
/// made in a temporary file beside it, renamed over the path by `finish`, so a write
/// that fails (a full disk) leaves what was there before, or nothing, never a part.
/// Dropped before `finish`, the temporary file is removed.
pub(crate) struct WholeFile {
    file: File,
    /// The temporary file and the path it becomes; None when written in place.
    rename: Option<(PathBuf, PathBuf)>,
}

impl WholeFile {
    /// Opens `path` to be written whole, by what the path leads to (through links):
    /// - `-` is standard output;
    /// - a regular file, or nothing: a temporary file in the same directory, which
    ///   takes a replaced file's permissions and, where it may, its owner; a link at
    ///   `path` is replaced by the file, the file it leads to is never written;
    /// - anything else (a device, a FIFO) is written into as it is, as a shell's
    ///   redirection would: it cannot be replaced.
    pub fn create(path: &Path) -> Result<WholeFile> {
        if path.as_os_str() == STDOUT {
            return Ok(WholeFile {
                file: create_file(path)?,
                rename: None,
            });
        }
        let cannot = || format!("cannot write {}", path.display());
        let replaced = match refuse_planted(path)? {
            Some(m) if m.is_file() => Some(m),
            // A directory is refused here (EISDIR).
            Some(m) => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .with_context(cannot)?;
                same_as_checked(path, &m, &file)?;
                return Ok(WholeFile { file, rename: None });
            }
            None => None,
        };
        let (file, temporary) = create_temporary(path, 0o666).with_context(cannot)?;
        let whole = WholeFile {
            file,
            rename: Some((temporary, path.to_path_buf())),
        };
        if let Some(m) = replaced {
            use std::os::unix::fs::MetadataExt;
            whole
                .file
                .set_permissions(m.permissions())
                .with_context(cannot)?;
            // Only root may give a file away: for anybody else it stays theirs.
            let _ = std::os::unix::fs::fchown(&whole.file, Some(m.uid()), Some(m.gid()));
        }
        Ok(whole)
    }

    /// The file to write.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Puts the file written at its path: on disk, then renamed over what was there.
    pub fn finish(mut self) -> Result<()> {
        let Some((temporary, path)) = self.rename.take() else {
            return Ok(());
        };
        let cannot = || format!("cannot write {}", path.display());
        let done = self
            .file
            .sync_all()
            .and_then(|()| std::fs::rename(&temporary, &path));
        if done.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        done.with_context(cannot)
    }
}

impl Drop for WholeFile {
    fn drop(&mut self) {
        if let Some((temporary, _)) = &self.rename {
            let _ = std::fs::remove_file(temporary);
        }
    }
}

/// A new file beside `path`, under a hidden name of this process's own
/// (.NAME.RANDOM.tmp), made with O_EXCL and O_NOFOLLOW: never a file or link someone
/// planted, even in a directory others write. `mode` is given to open (the umask
/// applies). The file and its name.
pub(crate) fn create_temporary(path: &Path, mode: u32) -> io::Result<(File, PathBuf)> {
    let name = path.file_name().unwrap_or(path.as_os_str());
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    // A name taken (by chance, or planted) is tried again under another.
    for _ in 0..16 {
        let mut temporary = std::ffi::OsString::from(".");
        temporary.push(name);
        temporary.push(format!(".{:016x}.tmp", random_u64()));
        let temporary = path.with_file_name(temporary);
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temporary);
        match opened {
            Ok(f) => return Ok((f, temporary)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// 64 random bits: the standard library's per-process random hash keys, with the time
/// and a counter mixed in.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        std::time::UNIX_EPOCH
            .elapsed()
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

fn new_file() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true).mode(0o600);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bperf-data-file-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_earlier_recording_is_kept_and_an_empty_file_reused() {
        let d = dir("regular");
        let path = d.join("x.data");
        std::fs::write(&path, b"first").unwrap();
        create(&path).unwrap().write_all(b"second").unwrap();
        create(&path).unwrap().write_all(b"third").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        assert_eq!(std::fs::read(kept_name(&path)).unwrap(), b"second");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let empty = d.join("empty.data");
        std::fs::write(&empty, b"").unwrap();
        create(&empty).unwrap().write_all(b"new").unwrap();
        assert!(!kept_name(&empty).exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A link to a file with something in it (/etc/passwd, say) is kept as the .old, as
    /// perf keeps it: the file it leads to is never written.
    #[test]
    fn a_link_to_a_file_is_kept_and_its_file_left_alone() {
        let d = dir("link");
        let target = d.join("passwd");
        std::fs::write(&target, b"root:x:0:0").unwrap();
        let link = d.join("x.data");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        create(&link).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"root:x:0:0");
        assert_eq!(std::fs::read(&link).unwrap(), b"new");
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let old = kept_name(&link);
        assert_eq!(std::fs::read_link(&old).unwrap(), target);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn what_is_not_a_regular_file_is_written_into() {
        let d = dir("other");
        // A link to an empty file: written through, the link stays.
        let target = d.join("target");
        std::fs::write(&target, b"").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        create(&link).unwrap().write_all(b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // /dev/null: still the device.
        create(Path::new("/dev/null"))
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let null = std::fs::metadata("/dev/null").unwrap();
        assert!(null.file_type().is_char_device());
        assert!(!Path::new("/dev/null.old").exists());
        // A directory is refused.
        assert!(create(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A whole file replaces what is at the path only at `finish`: dropped before, it
    /// leaves the old file as it was and nothing else; a link is replaced, not the file
    /// it leads to; a replaced file's permissions are kept; a device stays a device.
    #[test]
    fn a_whole_file_is_there_whole_or_not_at_all() {
        let d = dir("whole");
        let path = d.join("t.json");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let whole = WholeFile::create(&path).unwrap();
        whole.file().write_all(b"part").unwrap();
        drop(whole);
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let whole = WholeFile::create(&path).unwrap();
        whole.file().write_all(b"new").unwrap();
        whole.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        // A link: replaced by the file, the file it led to left alone.
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let whole = WholeFile::create(&link).unwrap();
        whole.file().write_all(b"through").unwrap();
        whole.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read(&link).unwrap(), b"through");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        // /dev/null: written into, still the device.
        let null = WholeFile::create(Path::new("/dev/null")).unwrap();
        null.file().write_all(b"x").unwrap();
        null.finish().unwrap();
        let null = std::fs::metadata("/dev/null").unwrap();
        assert!(null.file_type().is_char_device());
        // A directory is refused, naming it.
        let e = WholeFile::create(&d).err().unwrap();
        assert!(format!("{e:#}").contains(&*d.to_string_lossy()), "{e:#}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
