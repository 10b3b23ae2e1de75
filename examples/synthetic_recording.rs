//! Writes a bperf.data recording of N slices without recording anything, through the
//! file module's own writer (the slices of tests/it/common/recording.rs): for
//! bench/record-scale, which times report on files of millions of slices.
//!
//!     synthetic_recording N FILE [ZSTD_LEVEL]

// The example uses the slice writer only, not the tests' readers.
#[allow(dead_code)]
#[path = "../tests/it/common/recording.rs"]
mod recording;

use std::io::{BufWriter, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(path)) = (args.get(1).and_then(|n| n.parse().ok()), args.get(2)) else {
        eprintln!("usage: synthetic_recording N FILE [ZSTD_LEVEL]");
        return ExitCode::from(2);
    };
    let zstd = args.get(3).and_then(|l| l.parse().ok());
    let written = std::fs::File::create(path).and_then(|f| {
        let mut out = BufWriter::new(f);
        recording::write_compressed(&mut out, n, zstd)?;
        out.flush()
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synthetic_recording: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}
