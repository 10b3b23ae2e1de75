//! Blocks in and out: a block's framing as written, and reads bounded by what the
//! input really holds, so that no length in a file makes a reader allocate more.

use std::io::{self, Read, Write};

use anyhow::{bail, Context, Result};

use super::{compact, MAX_BLOCK, MAX_PIPE_BLOCK};

/// A version 2 block: its kind, its length as a varint, its bytes.
pub(super) fn write_block(out: &mut impl Write, kind: u8, bytes: &[u8]) -> io::Result<()> {
    write_block_of(out, kind, &[bytes])
}

/// A block whose bytes are `parts` one after the other.
pub(super) fn write_block_of(out: &mut impl Write, kind: u8, parts: &[&[u8]]) -> io::Result<()> {
    let mut head = Vec::with_capacity(11);
    head.push(kind);
    compact::put(&mut head, parts.iter().map(|p| p.len() as u64).sum());
    out.write_all(&head)?;
    parts.iter().try_for_each(|p| out.write_all(p))
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// A varint block length at `*at` (at most 10 bytes, 64 bits).
/// Reads a byte at a time, so that nothing past the varint leaves the input (a pipe).
pub(super) fn read_varint(input: &mut impl Read, at: &mut u64) -> Result<u64> {
    let mut buf = [0u8; compact::MAX_VARINT];
    for n in 0..buf.len() {
        read_at(input, &mut buf[n..=n], at, "a block's length")?;
        if buf[n] & 0x80 == 0 {
            if let Ok((v, _)) = compact::take_varint(&buf[..=n]) {
                return Ok(v);
            }
            break;
        }
    }
    bail!("a block length of more than 64 bits at byte {at}: the file is damaged")
}

/// Fills `buf` at `*at`, or reads nothing at the end of the input (returns the bytes
/// read); the end of the input inside `buf` is said as truncated.
pub(super) fn read_some(
    input: &mut impl Read,
    buf: &mut [u8],
    at: &mut u64,
    what: &str,
) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(0),
            Ok(0) => bail!(
                "truncated: the file ends inside {what} at byte {}",
                *at + got as u64
            ),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading {what} at byte {at}")),
        }
    }
    *at += got as u64;
    Ok(got)
}

/// Reads exactly `buf.len()` bytes at `*at`; a short file is said as truncated.
pub(super) fn read_at(
    input: &mut impl Read,
    buf: &mut [u8],
    at: &mut u64,
    what: &str,
) -> Result<()> {
    if read_some(input, buf, at, what)? == 0 && !buf.is_empty() {
        bail!("truncated: the file ends before {what} at byte {at}");
    }
    Ok(())
}

/// Reads a block of `len` bytes at `*at`: its buffer grows with the bytes read, so a
/// damaged length cannot make it larger than the input (nor, from a pipe, than
/// MAX_PIPE_BLOCK).
pub(super) fn read_block(
    input: &mut impl Read,
    len: u32,
    at: &mut u64,
    size: Option<u64>,
    what: &str,
) -> Result<Vec<u8>> {
    let most = match size {
        Some(_) => MAX_BLOCK,
        None => MAX_PIPE_BLOCK,
    };
    if len > most {
        bail!("{what} at byte {at} claims {len} bytes (at most {most}): the file is damaged");
    }
    if let Some(left) = size.map(|size| size.saturating_sub(*at)) {
        if u64::from(len) > left {
            bail!("truncated or damaged: {what} at byte {at} claims {len} bytes, {left} are left");
        }
    }
    let mut text = Vec::new();
    let got = input
        .take(u64::from(len))
        .read_to_end(&mut text)
        .with_context(|| format!("reading {what} at byte {at}"))?;
    if got < len as usize {
        bail!(
            "truncated: the file ends inside {what} at byte {}",
            *at + got as u64
        );
    }
    *at += got as u64;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::super::{Reader, END};
    use super::read_varint;
    use crate::record::bperf_data::fixtures::*;

    /// A block length is read to its last byte and no further; one cut short, or past
    /// 64 bits (the 10th byte), says where.
    #[test]
    fn block_lengths_read_no_byte_past_themselves() {
        let mut input = &[0x80, 0x01, 0xaa][..];
        let mut at = 0;
        assert_eq!(read_varint(&mut input, &mut at).unwrap(), 128);
        assert_eq!((at, input), (2, &[0xaa][..]));
        let mut top = vec![0xff; 9];
        top.extend_from_slice(&[0x01, 0xaa]);
        let (mut input, mut at) = (&top[..], 0);
        assert_eq!(read_varint(&mut input, &mut at).unwrap(), u64::MAX);
        assert_eq!((at, input), (10, &[0xaa][..]));
        let err = |bytes: &[u8]| {
            let (mut input, mut at) = (bytes, 0);
            let e = read_varint(&mut input, &mut at).unwrap_err().to_string();
            (e, input.len())
        };
        let past = "a block length of more than 64 bits at byte 10: the file is damaged";
        top[9] = 0x02;
        assert_eq!(err(&top), (past.to_string(), 1));
        assert_eq!(err(&[0x80; 12]), (past.to_string(), 2));
        let cut = "truncated: the file ends before a block's length at byte 3";
        assert_eq!(err(&[0x80; 3]), (cut.to_string(), 0));
    }

    /// A length no larger than a u32 still cannot make the reader allocate what is not
    /// there: from a file, past its end; from a pipe, past its cap or its data.
    #[test]
    fn damaged_lengths_allocate_nothing_that_is_not_there() {
        let mut huge_end = v1_file(&header(), &[], None);
        huge_end.extend_from_slice(&END.to_le_bytes());
        huge_end.extend_from_slice(&u32::MAX.to_le_bytes());
        huge_end.extend_from_slice(b"{}");
        let err = read_all(&mut &huge_end[..]).unwrap_err().to_string();
        assert!(err.contains("claims 4294967295 bytes"), "{err}");
        let from_pipe = |bytes: &[u8]| -> String {
            let mut r = Reader::new(bytes, None).unwrap();
            while r.next_slice().unwrap().is_some() {}
            assert!(r.end().is_none(), "read a damaged recording whole");
            r.dropped().said().expect("said")
        };
        let err = from_pipe(&huge_end);
        assert!(err.contains("at most 268435456"), "{err}");
        let len_at = huge_end.len() - 6;
        huge_end[len_at..len_at + 4].copy_from_slice(&(100u32 << 20).to_le_bytes());
        let err = from_pipe(&huge_end);
        assert!(err.starts_with("truncated"), "{err}");
    }
}
