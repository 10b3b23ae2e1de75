//! serve's textfile (--textfile DIR): DIR/bperf.prom, written whole at every interval
//! for node_exporter's textfile collector.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result};

use crate::data_file::create_temporary;
use crate::UsageError;

/// The textfile's mode: node_exporter reads it as another user.
const MODE: u32 = 0o644;

/// Refuses a textfile directory that is not there or not writable, before counting.
pub(super) fn check_textfile_dir(dir: &Path) -> Result<()> {
    let (_, probe) = create_temporary(&dir.join(".bperf.prom.probe"), MODE)
        .map_err(|e| UsageError(format!("--textfile {}: {e}", dir.display())))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Writes `text` to `path` through a temporary file renamed over it, so that a reader
/// sees the old file or the new one, never a part. The temporary file is new, under a
/// name of its own (data_file::create_temporary: nothing planted in the directory is
/// written through), readable by all (node_exporter runs as another user) whatever the
/// umask; its name does not end in .prom, which node_exporter would read. It is removed
/// when the write fails.
pub(super) fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let cannot = || format!("cannot write {}", path.display());
    let (mut file, tmp) = create_temporary(path, MODE).with_context(cannot)?;
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(MODE))
        .and_then(|()| file.write_all(text.as_bytes()))
        // Named by the path, not the temporary name, which changes at every write: the
        // same failure is said once (WriteFailure).
        .with_context(cannot)
        .and_then(|()| std::fs::rename(&tmp, path).with_context(cannot));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The textfile's failure to be written, if it is failing: a failed write is retried at
/// the next tick, and said once for as long as it fails the same way.
#[derive(Debug, Default)]
pub(super) struct WriteFailure {
    failing: Option<String>,
}

impl WriteFailure {
    /// Takes the outcome of a write of `path`; what to say about it, if anything: a new
    /// error, or that writing works again.
    pub(super) fn note(&mut self, outcome: Result<(), String>, path: &Path) -> Option<String> {
        match (outcome, &self.failing) {
            (Ok(()), None) => None,
            (Ok(()), Some(_)) => {
                self.failing = None;
                Some(format!("{} is written again", path.display()))
            }
            (Err(e), Some(last)) if *last == e => None,
            (Err(e), _) => {
                let say = format!("{e}; serving on, trying again at every interval");
                self.failing = Some(e);
                Some(say)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_textfile_is_said_once_per_error_and_when_it_works_again() {
        let path = Path::new("/d/bperf.prom");
        let full = || Err("cannot write /d/bperf.prom.tmp: No space left".to_string());
        let gone = || Err("cannot write /d/bperf.prom.tmp: No such file".to_string());
        let mut f = WriteFailure::default();
        assert_eq!(f.note(Ok(()), path), None);
        let said = f.note(full(), path).unwrap();
        assert!(said.starts_with("cannot write /d/bperf.prom.tmp: No space left; "));
        assert_eq!(f.note(full(), path), None);
        assert!(f.note(gone(), path).unwrap().contains("No such file"));
        assert_eq!(f.note(gone(), path), None);
        assert_eq!(
            f.note(Ok(()), path).as_deref(),
            Some("/d/bperf.prom is written again")
        );
        assert_eq!(f.note(Ok(()), path), None);
        assert!(f.note(gone(), path).is_some());
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("bperf-wa-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("bperf.prom");
        // The rename fails: a directory is in the way.
        std::fs::create_dir(&path).unwrap();
        let e = write_atomically(&path, "x 1\n").unwrap_err();
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        std::fs::remove_dir(&path).unwrap();
        write_atomically(&path, "x 1\n").unwrap();
        let read = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(format!("{e:#}").contains("bperf.prom"), "{e:#}");
        assert_eq!(left, vec![std::ffi::OsString::from("bperf.prom")]);
        assert_eq!(read, "x 1\n");
    }
}
