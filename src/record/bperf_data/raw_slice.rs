//! A slice as the BPF program sends it (struct bperf_slice, src/bpf/bperf.h), which
//! version 1 kept as it came: decoded through the skeleton's generated struct.

use anyhow::{bail, Result};

use super::{Slice, READING, SLICE_CUT, SLICE_HEAD};
use crate::bpf::sent::{bperf_reading, bperf_slice};
use crate::reading::Reading;

/// The bytes of a slice block of `nr_events` events.
pub(crate) fn slice_bytes(nr_events: usize) -> usize {
    SLICE_HEAD + nr_events * READING
}

/// A slice block's bytes into `s`, whose buffers are reused.
pub(super) fn parse_slice_into(s: &mut Slice, b: &[u8], nr_events: usize) -> Result<()> {
    if b.len() < SLICE_HEAD {
        bail!("a slice of {} bytes (at least {SLICE_HEAD})", b.len());
    }
    let head = slice_head(&b[..SLICE_HEAD]);
    let n = u32::from_le(head.nr_events) as usize;
    if n != nr_events || b.len() != slice_bytes(n) {
        bail!(
            "a slice of {n} events in {} bytes, for {nr_events} events",
            b.len()
        );
    }
    let comm = head.comm.map(|c| c as u8);
    let comm_len = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    s.comm = [0; 16];
    s.comm[..comm_len].copy_from_slice(&comm[..comm_len]);
    s.deltas.clear();
    s.deltas
        .extend(b[SLICE_HEAD..].chunks_exact(READING).map(delta));
    s.start = u64::from_le(head.start);
    s.length = u64::from_le(head.length);
    s.cgid = u64::from_le(head.cgid);
    s.cpu = u32::from_le(head.cpu);
    s.slot = u32::from_le(head.slot);
    s.pid = u32::from_le(head.pid);
    s.tid = u32::from_le(head.tid);
    s.cut = u32::from_le(head.flags) & SLICE_CUT != 0;
    Ok(())
}

/// A slice's first SLICE_HEAD bytes as struct bperf_slice (its deltas left zero: a
/// slice holds only as many as it counted, and they are decoded one by one).
fn slice_head(b: &[u8]) -> bperf_slice {
    let mut head = bperf_slice::default();
    // SAFETY: bperf_slice is plain old data (see bpf::sent).
    let bytes = unsafe { plain::as_mut_bytes(&mut head) };
    bytes[..b.len()].copy_from_slice(b);
    head
}

/// One delta's bytes (struct bperf_reading) as a Reading.
fn delta(b: &[u8]) -> Reading {
    let mut r = bperf_reading::default();
    plain::copy_from_bytes(&mut r, b).expect("a delta's bytes");
    Reading {
        counter: u64::from_le(r.counter),
        enabled: u64::from_le(r.enabled),
        running: u64::from_le(r.running),
    }
}

/// A slice as the BPF program sent it (`raw`, perhaps padded) into `s`: its bytes
/// without the padding, or None if it is not a slice of `nr_events` events.
pub(crate) fn sent_slice<'a>(raw: &'a [u8], nr_events: usize, s: &mut Slice) -> Option<&'a [u8]> {
    let bytes = raw.get(..slice_bytes(nr_events))?;
    parse_slice_into(s, bytes, nr_events).ok()?;
    Some(bytes)
}
