//! `bperf top`: a live view of every cgroup's counters.

pub mod model;
