//! Recordings made for the tests: files of each version as bperf wrote them, and
//! what a reader makes of them.

use std::io::Write;

use anyhow::{bail, Result};

use super::io::{read_varint, u32_at, write_block};
use super::json::{end_json, header_json};
use super::raw_slice::{parse_slice_into, slice_bytes};
use super::{compact, Dropped, End, Header, Reader, RecordedCgroup, Slice, Writer};
use super::{COMPACT_SLICE, END, END_V2, MAGIC, NR_EVENTS_AT, READING, SLICE, SLICE_HEAD};
use super::{V1, V2, ZSTD};
use crate::reading::Reading;

pub(super) fn header() -> Header {
    Header {
        events: vec!["task-clock".into(), "context-switches".into()],
        supported: vec![true, false],
        cgroups: vec![RecordedCgroup {
            slot: 0,
            id: 42,
            name: "web".into(),
            path: "web".into(),
            container: Some("shop-web-1".into()),
            ..RecordedCgroup::default()
        }],
        cpus: vec![0, 1],
        clock: "sched_clock".into(),
        command: vec!["sleep".into(), "1".into()],
        started: 1.5,
        target: "'system wide'".into(),
        tasks: false,
    }
}

/// A slice as the BPF program sends it, padded as the kernel pads raw samples.
pub(super) fn raw_slice(start: u64, deltas: &[u64]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [start, 1000, 42] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in [1u32, 0, 7, 8] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(b"spin\0\0\0\0\0\0\0\0\0\0\0\0");
    b.extend_from_slice(&(deltas.len() as u32).to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for &d in deltas {
        for v in [d, 1000, 1000] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b.extend_from_slice(&[0, 0, 0, 0]);
    b
}

/// A version 1 file as bperf wrote it: the header, the slices as sent, the end.
pub(super) fn v1_file(h: &Header, raw: &[Vec<u8>], end: Option<&End>) -> Vec<u8> {
    let mut out = Vec::new();
    let text = header_json(h).to_string();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&V1.to_le_bytes());
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    for r in raw {
        let n = u32_at(r, NR_EVENTS_AT) as usize;
        let bytes = &r[..SLICE_HEAD + n * READING];
        out.extend_from_slice(&SLICE.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    if let Some(end) = end {
        let text = end_json(end);
        out.extend_from_slice(&END.to_le_bytes());
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out
}

pub(super) fn end() -> End {
    let r = Reading {
        counter: 3,
        enabled: 4,
        running: 5,
    };
    End {
        duration_ns: 9,
        lost: vec![0, 2],
        ring_lost: vec![0, 1],
        totals: vec![vec![vec![r; 2]; 2]],
        sent: vec![7, 9],
    }
}

pub(super) fn file(end: bool) -> Vec<u8> {
    v1_file(
        &header(),
        &[raw_slice(5, &[1000, 1])],
        end.then(self::end).as_ref(),
    )
}

/// A version 3 file of `raw` slices, compressed at `zstd` if given, in chunks of
/// `per_chunk` slices (flushed after each); without its end block unless `end`.
pub(super) fn chunked_file(
    raw: &[Vec<u8>],
    zstd: Option<i32>,
    per_chunk: usize,
    end: bool,
) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &header(), zstd).unwrap();
    for (i, r) in raw.iter().enumerate() {
        assert!(w.write_slice(r).unwrap());
        if (i + 1) % per_chunk == 0 {
            w.flush().unwrap();
        }
    }
    assert!(!w.write_slice(&[0; 10]).unwrap());
    match end {
        true => w.finish(&self::end()).unwrap(),
        false => {
            w.flush().unwrap();
            w.out
        }
    }
}

/// A version 3 file of `raw` slices in one chunk (and the end's).
pub(super) fn v3_file(raw: &[Vec<u8>], zstd: Option<i32>, end: bool) -> Vec<u8> {
    chunked_file(raw, zstd, usize::MAX, end)
}

/// A version 2 file, without chunks: the header, then every block, through one zstd
/// stream (with its checksum) at `zstd`.
pub(super) fn v2_file(raw: &[Vec<u8>], zstd: Option<i32>) -> Vec<u8> {
    let h = header();
    let mut json = header_json(&h);
    if zstd.is_some() {
        json["compression"] = ZSTD.into();
    }
    let text = json.to_string();
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&V2.to_le_bytes());
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    let mut blocks = Vec::new();
    let mut encoder = compact::Encoder::new(&h.cpus);
    let mut s = Slice::default();
    for r in raw {
        parse_slice_into(&mut s, &r[..slice_bytes(2)], 2).unwrap();
        let mut b = Vec::new();
        assert!(encoder.encode(&s, &mut b));
        write_block(&mut blocks, COMPACT_SLICE, &b).unwrap();
    }
    write_block(&mut blocks, END_V2, end_json(&end()).as_bytes()).unwrap();
    match zstd {
        None => out.extend_from_slice(&blocks),
        Some(level) => {
            let mut z = zstd::stream::write::Encoder::new(out, level).unwrap();
            z.include_checksum(true).unwrap();
            z.write_all(&blocks).unwrap();
            out = z.finish().unwrap();
        }
    }
    out
}

/// A recording read back: its header, slices, end (if read) and what was not read.
pub(super) fn read_with_dropped(
    bytes: &[u8],
) -> Result<(Header, Vec<Slice>, Option<End>, Dropped)> {
    let mut reader = Reader::new(bytes, Some(bytes.len() as u64))?;
    let mut slices = Vec::new();
    while let Some(s) = reader.next_slice()? {
        slices.push(s.clone());
    }
    let (end, dropped) = (reader.end().cloned(), reader.dropped().clone());
    Ok((reader.header().clone(), slices, end, dropped))
}

/// Where each chunk of a plain version 3 file starts, and where the last ends.
pub(super) fn chunk_starts(file: &[u8]) -> Vec<usize> {
    let mut at = 16 + u32_at(file, 12) as usize + 4;
    let mut starts = Vec::new();
    while at < file.len() {
        starts.push(at);
        let mut len_at = at as u64 + 1;
        let len = read_varint(&mut &file[at + 1..], &mut len_at).unwrap();
        at = len_at as usize + len as usize;
    }
    starts.push(at);
    starts
}

/// A whole recording read back: its header, slices and end.
/// Err when it did not read whole: the header refused, or what was dropped.
pub(super) fn read_all(input: &mut &[u8]) -> Result<(Header, Vec<Slice>, End)> {
    let (h, slices, end, dropped) = read_with_dropped(input)?;
    if let Some(line) = dropped.said() {
        bail!("{line}");
    }
    Ok((h, slices, end.expect("an end when nothing was dropped")))
}

/// Slices as the BPF program sends them: two tasks taking turns on CPU 1, every
/// seventh cut, one on CPU 0 with multiplexed times.
pub(super) fn raw_slices(n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut r = raw_slice(1_000_000 + i * 4000, &[3000 + i % 900, 1]);
            let tid = 8 + (i % 2) as u32;
            r[36..40].copy_from_slice(&tid.to_le_bytes());
            r[60..64].copy_from_slice(&u32::from(i % 7 == 0).to_le_bytes());
            if i % 50 == 0 {
                r[24..28].copy_from_slice(&0u32.to_le_bytes());
                r[SLICE_HEAD + 8..SLICE_HEAD + 16].copy_from_slice(&1500u64.to_le_bytes());
            }
            r
        })
        .collect()
}
