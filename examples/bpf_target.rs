//! The target programs of bperf stat -b's tests (tests/bpf/prog_target.bpf.c), for
//! machines without cargo's test binaries (the arm64 guest, tests/vm/arm64-cases.sh):
//!
//!   bpf_target load         loads and attaches both, prints `SHORT_ID LONG_ID`, and
//!                           keeps them until killed;
//!   bpf_target trigger N    calls sched_get_priority_min with their magic argument N
//!                           times: each runs N times, looping 100 and 1100 times.

use std::io::Write;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::Program;

mod target {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types)]
    include!(concat!(env!("OUT_DIR"), "/prog_target.skel.rs"));
}

/// `magic` in prog_target.bpf.c.
const MAGIC: libc::c_int = -4242;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["load"] => load(),
        ["trigger", n] => {
            let n: u64 = n.parse().context("trigger N")?;
            for _ in 0..n {
                // SAFETY: a system call with a plain integer argument; it fails (EINVAL).
                unsafe { libc::sched_get_priority_min(MAGIC) };
            }
            Ok(())
        }
        _ => bail!("usage: bpf_target load | trigger N"),
    }
}

fn load() -> Result<()> {
    let mut storage = MaybeUninit::uninit();
    let skel = target::ProgTargetSkelBuilder::default()
        .open(&mut storage)?
        .load()
        .context("loading the target programs")?;
    let _links = [
        skel.progs.bperf_target_short.attach()?,
        skel.progs.bperf_target_long.attach()?,
    ];
    let id = |p: &Program| Program::id_from_fd(p.as_fd());
    let mut out = std::io::stdout();
    writeln!(
        out,
        "{} {}",
        id(&skel.progs.bperf_target_short)?,
        id(&skel.progs.bperf_target_long)?
    )?;
    out.flush()?;
    loop {
        std::thread::park();
    }
}
