//! Workloads for bperf's integration tests (built by `cargo test`; not part of bperf).
//!
//!   workload spin MS [PROCS [SLEEP_MS]]   sleep SLEEP_MS, write 0 to PROCS (move self), spin MS
//!   workload pingpong ROUNDS [CHILD_PROCS] bounce a byte ROUNDS times with a child process,
//!                                          which first moves itself to CHILD_PROCS
//!   workload echo                          the child side of pingpong
//!   workload faults PAGES [PROCS]          move to PROCS, touch PAGES fresh pages
//!
//! Each process prints `pid=P cs=N faults=M` (its own getrusage) to stderr just before it exits.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn move_self(procs: &str) {
    std::fs::write(procs, "0").unwrap_or_else(|e| panic!("cannot join {procs}: {e}"));
}

fn report() {
    // SAFETY: getrusage fills a plain struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    eprintln!(
        "pid={} cs={} faults={}",
        std::process::id(),
        ru.ru_nvcsw + ru.ru_nivcsw,
        ru.ru_minflt + ru.ru_majflt
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    match arg(0) {
        Some("spin") => {
            let ms: u64 = arg(1).expect("MS").parse().unwrap();
            if let Some(sleep) = arg(3) {
                std::thread::sleep(Duration::from_millis(sleep.parse().unwrap()));
            }
            if let Some(procs) = arg(2) {
                move_self(procs);
            }
            let end = Instant::now() + Duration::from_millis(ms);
            let mut x = 0u64;
            while Instant::now() < end {
                for i in 0..10_000u64 {
                    x = x.wrapping_mul(31).wrapping_add(i);
                }
                std::hint::black_box(x);
            }
        }
        Some("pingpong") => {
            let rounds: u64 = arg(1).expect("ROUNDS").parse().unwrap();
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.arg("echo").stdin(Stdio::piped()).stdout(Stdio::piped());
            if let Some(p) = arg(2) {
                cmd.arg(p);
            }
            let mut child = cmd.spawn().expect("spawn echo child");
            let mut to = child.stdin.take().unwrap();
            let mut from = child.stdout.take().unwrap();
            let mut b = [0u8; 1];
            // One round first, so the child has moved before counting rounds.
            for _ in 0..rounds {
                to.write_all(&b).unwrap();
                from.read_exact(&mut b).unwrap();
            }
            drop(to);
            child.wait().unwrap();
        }
        Some("echo") => {
            if let Some(p) = arg(1) {
                move_self(p);
            }
            let (mut i, mut o) = (std::io::stdin().lock(), std::io::stdout().lock());
            let mut b = [0u8; 1];
            while i.read_exact(&mut b).is_ok() {
                if o.write_all(&b).and_then(|_| o.flush()).is_err() {
                    break;
                }
            }
        }
        Some("faults") => {
            let pages: usize = arg(1).expect("PAGES").parse().unwrap();
            if let Some(p) = arg(2) {
                move_self(p);
            }
            let mut v = vec![0u8; pages * 4096];
            for p in 0..pages {
                v[p * 4096] = 1;
            }
            std::hint::black_box(&v);
        }
        _ => {
            eprintln!("usage: workload spin|pingpong|echo|faults ...");
            std::process::exit(2);
        }
    }
    report();
}
