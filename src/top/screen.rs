//! The full-screen view.

use std::sync::mpsc;
use std::time::Duration;

use anyhow::Result;

use super::{Top, Wake};

/// The terminal's input.
pub enum Input {}

pub fn run(
    _top: &mut Top,
    _tx: mpsc::Sender<Wake>,
    _wakes: &mpsc::Receiver<Wake>,
    _every: Duration,
    _iterations: Option<u64>,
) -> Result<i32> {
    anyhow::bail!("the full-screen view is not built yet: use --batch")
}
