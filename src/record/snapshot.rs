//! Snapshots of the flight recorder: what it holds, written as a whole recording into
//! the snapshot directory while recording goes on, under a name of its own time
//! (bperf-snapshot-YYYYMMDDTHHMMSSZ.data), never over a file there, the oldest removed
//! past the most the directory keeps.

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use super::flight::FlightRecording;

/// How snapshot files are named: PREFIX, the time, SUFFIX.
const PREFIX: &str = "bperf-snapshot-";
const SUFFIX: &str = ".data";

/// Where snapshots go, how many are kept, and the one being written.
pub struct Snapshots {
    dir: PathBuf,
    keep: usize,
    writing: Option<JoinHandle<()>>,
}

impl Snapshots {
    /// Snapshots into `dir`, at most `keep` of them there.
    pub fn new(dir: PathBuf, keep: usize) -> Snapshots {
        Snapshots {
            dir,
            keep: keep.max(1),
            writing: None,
        }
    }

    /// Writes what `kept` holds (a clone: recording goes on meanwhile) in a thread of
    /// its own, unless a snapshot is being written: then says so and takes none.
    pub fn take(&mut self, kept: &FlightRecording) {
        if self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            eprintln!("bperf record: a snapshot is being written: no second one taken");
            return;
        }
        self.finish();
        let (dir, keep, kept) = (self.dir.clone(), self.keep, kept.clone());
        self.writing = Some(std::thread::spawn(move || {
            match write_snapshot(&dir, keep, &kept) {
                Ok((path, bytes, slices)) => eprintln!(
                    "bperf record: snapshot {} written ({:.3} MB, {slices} slices)",
                    path.display(),
                    bytes as f64 / 1e6
                ),
                Err(e) => eprintln!("bperf record: no snapshot: {e:#}"),
            }
        }));
    }

    /// Waits for the snapshot being written, if any.
    pub fn finish(&mut self) {
        if let Some(w) = self.writing.take() {
            let _ = w.join();
        }
    }
}

/// Writes `kept` into a new file of `dir`, then removes the oldest snapshots there past
/// `keep`. The file's path, its bytes and its slices.
pub fn write_snapshot(
    dir: &Path,
    keep: usize,
    kept: &FlightRecording,
) -> Result<(PathBuf, u64, u64)> {
    let name = format!("{PREFIX}{}{SUFFIX}", utc_stamp(SystemTime::now()));
    let wanted = dir.join(&name);
    let cannot = || format!("cannot write a snapshot in {}", dir.display());
    let (file, temporary) =
        crate::data_file::create_temporary(&wanted, 0o600).with_context(cannot)?;
    let written = (|| -> io::Result<(u64, u64)> {
        let (mut out, slices) = kept.write(BufWriter::new(&file))?;
        out.flush()?;
        drop(out);
        file.sync_all()?;
        Ok((file.metadata()?.len(), slices))
    })();
    let placed = written.and_then(|w| place(&temporary, &wanted).map(|p| (p, w)));
    let _ = std::fs::remove_file(&temporary);
    let (path, (bytes, slices)) = placed.with_context(cannot)?;
    prune(dir, keep);
    Ok((path, bytes, slices))
}

/// Gives the written file `temporary` the name `wanted`, or the first of wanted-2,
/// wanted-3, ... not taken: a hard link, which never replaces a file. Its path.
fn place(temporary: &Path, wanted: &Path) -> io::Result<PathBuf> {
    let stem = wanted
        .to_string_lossy()
        .trim_end_matches(SUFFIX)
        .to_string();
    for n in 1..100 {
        let path = match n {
            1 => wanted.to_path_buf(),
            _ => PathBuf::from(format!("{stem}-{n}{SUFFIX}")),
        };
        match std::fs::hard_link(temporary, &path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "every name is taken",
    ))
}

/// Removes the oldest snapshot files of `dir` (by name, which sorts by time) past
/// `keep`; regular files only, never through a link.
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut ours: Vec<((String, u32), OsString)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            Some((
                snapshot_order(&e.file_name().to_string_lossy())?,
                e.file_name(),
            ))
        })
        .collect();
    ours.sort();
    let extra = ours.len().saturating_sub(keep);
    for (_, name) in &ours[..extra] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// Where a snapshot's file name puts it among the others: its time, then the number a
/// taken name got (1 without one). None for a name not a snapshot's.
fn snapshot_order(name: &str) -> Option<(String, u32)> {
    let stamp = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (time, n) = match stamp.split_once('-') {
        Some((t, n)) => (t, n.parse().ok()?),
        None => (stamp, 1),
    };
    let plausible = time.len() >= 16 && time.bytes().all(|b| b.is_ascii_alphanumeric());
    plausible.then(|| (time.to_string(), n))
}

/// Whether `name` is one this module gives a snapshot.
pub fn is_snapshot_name(name: &str) -> bool {
    snapshot_order(name).is_some()
}

/// `t` in UTC as YYYYMMDDTHHMMSSZ.
fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: gmtime_r fills the tm it is given from a valid time_t.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::gmtime_r(&secs, &mut tm);
        tm
    };
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_and_sort_by_time() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_780_000_000);
        assert_eq!(utc_stamp(t), "20260528T202640Z");
        assert!(utc_stamp(UNIX_EPOCH) < utc_stamp(t));
    }

    #[test]
    fn only_snapshot_names_are_ours() {
        assert!(is_snapshot_name("bperf-snapshot-20260528T203320Z.data"));
        assert!(is_snapshot_name("bperf-snapshot-20260528T203320Z-2.data"));
        assert!(!is_snapshot_name("bperf-snapshot-.data"));
        assert!(!is_snapshot_name("bperf.data"));
        assert!(!is_snapshot_name(
            ".bperf-snapshot-20260528T203320Z.data.0123.tmp"
        ));
    }

    /// Past `keep`, the oldest snapshots go (a -2 after its plain name); other files
    /// stay, and a name taken gets the next free one rather than being replaced.
    #[test]
    fn pruning_keeps_the_newest_and_nothing_else_is_touched() {
        let dir = std::env::temp_dir().join(format!("bperf-snap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let names = ["20260101T000000Z", "20260102T000000Z-2", "20260102T000000Z"];
        for n in names {
            std::fs::write(dir.join(format!("{PREFIX}{n}{SUFFIX}")), n).unwrap();
        }
        std::fs::write(dir.join("other.data"), "x").unwrap();
        prune(&dir, 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "bperf-snapshot-20260102T000000Z-2.data",
                "bperf-snapshot-20260102T000000Z.data",
                "other.data"
            ]
        );
        let tmp = dir.join("t");
        std::fs::write(&tmp, "new").unwrap();
        let wanted = dir.join(format!("{PREFIX}{}{SUFFIX}", names[2]));
        let placed = place(&tmp, &wanted).unwrap();
        assert_eq!(placed, dir.join(format!("{PREFIX}{}-3{SUFFIX}", names[2])));
        assert_eq!(std::fs::read_to_string(&wanted).unwrap(), names[2]);
        assert_eq!(std::fs::read_to_string(&placed).unwrap(), "new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
