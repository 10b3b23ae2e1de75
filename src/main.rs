//! The bperf command: parses the command line, runs the subcommand, and turns its result
//! into one line on stderr and perf's exit status. Everything else is in the library.

use std::io::{self, Write};
use std::process::ExitCode;

use bperf::output::people::escape_controls;
use bperf::session::plan::{NoProcess, NoSupportedEvents};
use bperf::{cli, list, metrics, stat, ErrnoError, InvalidError, InvalidWithUsage, UsageError};
use clap::Parser;

const EXIT_USAGE: u8 = 129;
const EXIT_FAILURE: u8 = 255;
/// What perf 6.12 exits with for an argument it cannot use beyond parsing (-EINVAL);
/// stat exits with its perf version's status.
const EXIT_INVALID: u8 = 234;
/// A closed output pipe: what a process killed by SIGPIPE reports, as perf does.
const EXIT_BROKEN_PIPE: u8 = 141;

fn main() -> ExitCode {
    bperf::sys::use_permitted_capabilities();
    let mut args: Vec<_> = std::env::args_os().collect();
    // The keeper of the shared counters, started by their first session.
    if args.len() == 3 && args[1] == bperf::bpf::shared::KEEPER_ARG {
        let kept = bperf::bpf::shared::keep(std::path::Path::new(&args[2]));
        return exit(kept.map(|()| 0), EXIT_INVALID);
    }
    let mode = cli::take_stat_mode(&mut args);
    if mode == cli::StatMode::Report {
        return match cli::StatReportArgs::try_parse_from(&args[1..]) {
            Ok(a) => exit(stat::report(&a), EXIT_INVALID),
            Err(e) => clap_exit(e),
        };
    }
    let cli = match cli::parse(&args) {
        Ok(c) => c,
        Err(e) => return clap_exit(e),
    };
    // stat refuses what perf refuses with its perf version's status; the others as 6.12.
    let invalid = match &cli.cmd {
        cli::Command::Stat(args) => args.version().map_or(EXIT_INVALID, |v| v.invalid_status()),
        _ => EXIT_INVALID,
    };
    let result = match &cli.cmd {
        cli::Command::Stat(args) => stat::run(args, mode == cli::StatMode::Record),
        cli::Command::List(args) => list::run(args),
        cli::Command::Serve(args) => bperf::serve::run(args),
        cli::Command::Record(args) => bperf::record::run(args),
        cli::Command::Report(args) => bperf::record::report(args),
        cli::Command::Top(args) => bperf::top::run(args),
        cli::Command::Doctor(args) => bperf::doctor::run(args),
        cli::Command::Completions { shell } => {
            cli::completions(*shell, &mut io::stdout());
            Ok(0)
        }
    };
    exit(result, invalid)
}

/// clap's verdict: help and version printed, or one line of error and perf's 129.
fn clap_exit(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        // --help, --version
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(io::stderr(), "bperf: {}", clap_one_line(&e));
    ExitCode::from(EXIT_USAGE)
}

/// The exit status of a subcommand's result, an error printed on one line; `invalid`:
/// the status of a combination of options refused.
fn exit(result: anyhow::Result<i32>, invalid: u8) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) if is_broken_pipe(&e) => ExitCode::from(EXIT_BROKEN_PIPE),
        Err(e) => {
            if let Some(nothing) = e.downcast_ref::<NoSupportedEvents>() {
                for w in &nothing.warnings {
                    let _ = writeln!(io::stderr(), "{w}");
                }
            }
            let _ = writeln!(io::stderr(), "bperf: {}", one_line(&e));
            if let Some(with) = e.downcast_ref::<InvalidWithUsage>() {
                let _ = write!(io::stderr(), "{}", with.usage);
            }
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else if e.downcast_ref::<NoSupportedEvents>().is_some() {
                ExitCode::from(1)
            } else if let Some(ErrnoError { errno, .. }) = e.downcast_ref() {
                ExitCode::from(errno.wrapping_neg() as u8)
            } else if e.downcast_ref::<metrics::UnknownMetric>().is_some()
                || e.downcast_ref::<InvalidError>().is_some()
                || e.downcast_ref::<InvalidWithUsage>().is_some()
                || e.downcast_ref::<NoProcess>().is_some()
            {
                ExitCode::from(invalid)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|e| e.kind() == io::ErrorKind::BrokenPipe)
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
    escape_controls(&s)
}

/// clap's message without its usage and tips: "unexpected argument '--x' found (see
/// 'bperf --help')".
fn clap_one_line(e: &clap::Error) -> String {
    let text = e.render().ansi().to_string();
    // The message is the first paragraph; usage and tips follow a blank line.
    let first = text.split("\n\n").next().unwrap_or_default().trim_end();
    let msg = first.strip_prefix("error: ").unwrap_or(first);
    // clap lists missing arguments on indented lines of their own.
    let msg = msg.replace(":\n  ", ": ").replace("\n  ", ", ");
    escape_controls(&format!("{msg} (see 'bperf --help')"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            escape_controls("a\u{1b}[2Jb\tc\u{7f}🔥"),
            "a\\x1b[2Jb\\tc\\x7f🔥"
        );
        let e = anyhow::anyhow!("unknown event 'x\ny'");
        assert_eq!(one_line(&e), "unknown event 'x\\ny'");
    }
}
