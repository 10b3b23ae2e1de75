//! bperf: perf-stat-style counting per cgroup, with the counting done in BPF.
//!
//! Data flows one way: options (cli) -> events, cgroups, CPUs (event, cgroup, cpus)
//! -> counter (the kernel side: perf_event, BPF) -> counts -> report.

mod cgroup;
mod cli;
mod counter;
mod counts;
mod cpus;
mod event;
mod list;
mod perf_event;
mod report;
mod stat;
mod workload;

mod skel {
    #![allow(
        clippy::all,
        unused_imports,
        dead_code,
        non_camel_case_types,
        non_snake_case
    )]
    include!(concat!(env!("OUT_DIR"), "/bperf.skel.rs"));
}

use std::process::ExitCode;

use clap::Parser;

/// Bad input from the user: perf exits 129 for these, as for a usage error.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

const EXIT_USAGE: u8 = 129;
const EXIT_FAILURE: u8 = 255;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match &cli.cmd {
        cli::Command::Stat(args) => stat::run(args),
        cli::Command::List(args) => list::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("bperf: {}", one_line(&e));
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

/// An error and its causes on one line: "outer: inner: root".
fn one_line(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for (i, cause) in e.chain().enumerate() {
        let msg = cause.to_string();
        if i > 0 {
            if s.contains(&msg) {
                continue;
            }
            s.push_str(": ");
        }
        s.push_str(msg.trim());
    }
    s.replace('\n', " ")
}
