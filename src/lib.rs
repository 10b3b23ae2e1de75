//! bperf: perf-stat-style counting per cgroup, with the counting done in BPF.
//!
//! Data flows one way: options (cli) -> events, cgroups, CPUs (event, cgroup, cpus)
//! -> counter (the kernel side: sys, bpf) -> counts -> output. Only `sys` and the BPF
//! loader in `bpf` touch the kernel; everything else is plain Rust on their data.

pub mod aggr;
pub mod bpf;
pub mod cgroup;
pub mod cli;
pub mod container;
pub mod counter;
pub mod cpus;
pub mod data_file;
pub mod doctor;
pub mod event;
pub mod list;
pub mod metrics;
pub mod output;
pub mod perfdata;
pub mod reading;
pub mod record;
pub mod serve;
pub mod session;
pub mod slots;
pub mod stat;
pub mod sys;
pub mod top;

/// Bad input from the user: perf exits 129 for these, as for a usage error.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A combination of options perf reads but then refuses: it exits with -EINVAL (234).
#[derive(Debug)]
pub struct InvalidError(pub String);

impl std::fmt::Display for InvalidError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidError {}

/// Fixtures for the library's unit tests.
#[cfg(test)]
mod test_fixtures {
    /// The sysfs fixture tree at `root`, read as the running system's would be.
    pub fn sysfs_at(root: impl Into<std::path::PathBuf>) -> crate::sys::sysfs::Sysfs {
        crate::sys::sysfs::Sysfs::at(root)
    }
}
