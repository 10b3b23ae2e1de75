//! Damaged copies of a good file, for the readers' fuzz tests: a fixed seed makes every
//! run of the suite try the same files, and a failure names the copy that caused it.

use std::path::Path;
use std::process::{Command, Output};

/// A small xorshift generator: the fuzz tests need repeatable, not strong, randomness.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Copy number `index` of `good`, damaged the ways files are: flipped bits, bytes set to
/// extremes (lengths and counts become huge or zero), a truncated tail, a duplicated run.
pub fn damaged_copy(good: &[u8], seed: u64, index: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut bytes = good.to_vec();
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            break;
        }
        let at = rng.below(bytes.len());
        match rng.below(6) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = 0xff,
            2 => bytes[at] = 0,
            3 => {
                let end = (at + 8).min(bytes.len());
                bytes[at..end].fill(0xff);
            }
            4 => bytes.truncate(at),
            _ => {
                let len = rng.below(64).min(bytes.len() - at);
                let run = bytes[at..at + len].to_vec();
                bytes.splice(at..at, run);
            }
        }
    }
    bytes
}

/// The most address space a reader may use on a damaged file (a bound on any one
/// allocation, plus room for the program itself).
pub const ADDRESS_SPACE_LIMIT: u64 = 320 << 20;

/// Runs `cmd` under prlimit's address-space limit and a time limit of `secs` seconds: an
/// allocation sized from a damaged length fails (and aborts) instead of taking the machine.
pub fn run_limited(cmd: &Command, secs: u32) -> Output {
    let mut limited = Command::new("timeout");
    limited
        .arg("-s")
        .arg("KILL")
        .arg(secs.to_string())
        .arg("prlimit")
        .arg(format!("--as={ADDRESS_SPACE_LIMIT}"))
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    limited.output().expect("spawn timeout/prlimit")
}

/// Why a reader's run on a damaged file is wrong, if it is: killed by a signal (an abort
/// on a failed allocation, or the time limit), or a panic. Refusing the file is right.
pub fn misbehaviour(out: &Output, file: &Path) -> Option<String> {
    let err = String::from_utf8_lossy(&out.stderr);
    let bad = match out.status.code() {
        None | Some(134 | 139) => "killed by a signal (an abort on a failed allocation?)",
        Some(124 | 137) => "over the time limit",
        Some(_) if err.contains("panicked") => "panicked",
        Some(_) if err.contains("memory allocation of") => "allocation failed",
        Some(_) => return None,
    };
    Some(format!("{}: {bad}: {}", file.display(), err.trim()))
}
