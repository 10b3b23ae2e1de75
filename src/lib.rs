//! bperf: perf-stat-style counting per cgroup, with the counting done in BPF.
//!
//! Data flows one way: options (cli) -> events, cgroups, CPUs (event, cgroup, cpus)
//! -> counter (the kernel side: sys, bpf) -> counts -> output. Only `sys` and the BPF
//! loader in `bpf` touch the kernel; everything else is plain Rust on their data.

pub(crate) mod aggr;
pub mod bpf;
pub mod cgroup;
pub mod cli;
pub mod container;
pub mod counter;
pub mod cpus;
pub(crate) mod data_file;
pub mod doctor;
pub mod event;
pub mod list;
pub mod metrics;
pub mod output;
pub(crate) mod perf_version;
pub mod perfdata;
pub mod reading;
pub mod record;
pub mod serve;
pub mod session;
pub mod stat;
pub mod sys;
pub mod top;

/// What the library has to say to the person running bperf while it works (cgroups
/// left out, a runtime that does not answer, watches the kernel refused), returned
/// rather than printed: each command puts the notes where they are seen, stderr for
/// stat, serve and record, the status line for top while it holds the screen.
#[must_use = "notes are for the person running bperf: say them or show them"]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Notes(pub Vec<String>);

impl Notes {
    pub fn one(note: String) -> Notes {
        Notes(vec![note])
    }

    /// These notes, then `more`.
    pub fn and(mut self, more: Notes) -> Notes {
        self.0.extend(more.0);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Says each note on stderr, as a line of its own.
    pub fn say(self) {
        for note in self.0 {
            eprintln!("bperf: {note}");
        }
    }
}

/// Says a line on stderr: where the commands send the library's -vv trace.
pub(crate) fn to_stderr(line: &str) {
    eprintln!("{line}");
}

/// Bad input from the user: perf exits 129 for these, as for a usage error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A combination of options perf reads but then refuses: it exits with -EINVAL (234).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidError(pub String);

/// An [`InvalidError`] after which perf prints the usage of the options at fault (perf
/// 7.2's `-B` with `-x`): those lines follow bperf's one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InvalidWithUsage {
    pub message: String,
    /// perf's usage lines, from its blank line on.
    pub usage: &'static str,
}

/// A failure perf reports with its -errno as the exit status: perf record's -ENOMEM
/// (244) for a -p process it cannot find.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ErrnoError {
    pub errno: i32,
    pub message: String,
}

/// Fixtures for the library's unit tests.
#[cfg(test)]
mod test_fixtures {
    /// The sysfs fixture tree at `root`, read as the running system's would be.
    pub(crate) fn sysfs_at(root: impl Into<std::path::PathBuf>) -> crate::sys::sysfs::Sysfs {
        crate::sys::sysfs::Sysfs::at(root)
    }

    /// The first line of a unit test that loads BPF or counts, marked `#[ignore = "needs
    /// root (make test runs it)"]`: included without root, it fails saying why.
    pub fn require_root() {
        assert!(
            crate::sys::is_root(),
            "needs root (CAP_BPF and CAP_PERFMON): run it as root, as make test does"
        );
    }

    /// Said by a test that cannot run on this machine for want of `what`, before it
    /// returns: it says it skipped, and fails under BPERF_REQUIRE_PRIV (CI), where the
    /// machine must have everything the tests use.
    pub fn skip(what: &str) {
        assert!(
            std::env::var_os("BPERF_REQUIRE_PRIV").is_none(),
            "BPERF_REQUIRE_PRIV is set but this machine has no {what}"
        );
        eprintln!("skipped: needs {what}");
    }
}
