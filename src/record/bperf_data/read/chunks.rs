//! Version 3's chunks as they are read: each read whole and checked (the CRC-32 before
//! its blocks, or its zstd frame's content checksum) before any of its blocks is; and
//! what a reader could not read, said in one line.

use std::io::Read;

use anyhow::{bail, Result};

use super::super::io::{read_block, read_some, read_varint};
use super::super::CHUNK;

/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The bit of a zstd frame's header descriptor that says it ends with a checksum, and
/// its unused and reserved bits, which zstd writes as 0 and a decoder ignores: one
/// flipped there is damage that would otherwise read as good.
const ZSTD_CHECKSUM_FLAG: u8 = 1 << 2;
const ZSTD_IDLE_BITS: u8 = 3 << 3;

/// A chunk as read from the file.
pub(crate) enum Chunk {
    /// Checked: its bytes (the preface, then blocks).
    Good { at: u64, body: Vec<u8> },
    /// Its check failed: its `bytes` are skipped.
    Damaged { at: u64, bytes: u64, why: String },
    /// The file ends at byte `at`, where a chunk would start.
    End { at: u64 },
    /// Reading cannot go on from byte `at`: what follows cannot be framed, or is cut
    /// short.
    Stop { at: u64, why: String },
}

/// The chunks of a version 3 file, read one at a time.
pub(crate) struct ChunkFile<R: Read> {
    input: R,
    /// The offset of the next byte of the file; the file's length, when known.
    at: u64,
    pub size: Option<u64>,
    /// -z: each chunk is one zstd frame.
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl<R: Read> ChunkFile<R> {
    /// The chunks of `input` from byte `at` on (`size` bytes long, if known), each a
    /// zstd frame if `zstd`.
    pub fn new(input: R, at: u64, size: Option<u64>, zstd: bool) -> Result<ChunkFile<R>> {
        let zstd = match zstd {
            true => Some(zstd::bulk::Decompressor::new()?),
            false => None,
        };
        Ok(ChunkFile {
            input,
            at,
            size,
            zstd,
        })
    }

    /// The next chunk, whose body may take at most `limit` bytes.
    pub fn next(&mut self, limit: u64) -> Chunk {
        let at = self.at;
        match self.read(limit) {
            Ok(Some(Ok(body))) => Chunk::Good { at, body },
            Ok(Some(Err(why))) => Chunk::Damaged {
                at,
                bytes: self.at - at,
                why,
            },
            Ok(None) => Chunk::End { at },
            Err(e) => Chunk::Stop {
                at,
                why: format!("{e:#}"),
            },
        }
    }

    /// Whether anything follows (after the end block, nothing should).
    pub(crate) fn has_more(&mut self) -> bool {
        let mut byte = [0u8];
        let mut at = self.at;
        !matches!(
            read_some(&mut self.input, &mut byte, &mut at, "the end"),
            Ok(0)
        )
    }

    /// Where the next byte is.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// Some(the checked body, or why its check failed); None at the end of the file;
    /// Err when the chunk cannot be framed or read whole.
    fn read(&mut self, limit: u64) -> Result<Option<Result<Vec<u8>, String>>> {
        let at = self.at;
        let mut kind = [0u8];
        if read_some(&mut self.input, &mut kind, &mut self.at, "a block")? == 0 {
            return Ok(None);
        }
        if kind[0] != CHUNK {
            bail!("damaged: unknown block kind {} at byte {at}", kind[0]);
        }
        let len = match read_varint(&mut self.input, &mut self.at) {
            Err(_) if self.size.is_some_and(|size| self.at >= size) => {
                bail!("the file ends inside the block at byte {at} (the recording did not finish)")
            }
            len => len?,
        };
        let most = match self.zstd {
            Some(_) => zstd::zstd_safe::compress_bound(limit as usize) as u64,
            None => limit + 4,
        };
        if len > most {
            bail!("damaged: the block at byte {at} claims {len} bytes (at most {most})");
        }
        if let Some(left) = self.size.map(|s| s.saturating_sub(self.at)) {
            if len > left {
                bail!("the file ends inside the block at byte {at} (the recording did not finish)");
            }
        }
        let (input, size) = (&mut self.input, self.size);
        let payload = read_block(input, len as u32, &mut self.at, size, "a chunk")?;
        Ok(Some(self.check(payload, limit)))
    }

    /// The body of a chunk whose bytes are `payload`, if its check passes.
    fn check(&mut self, mut payload: Vec<u8>, limit: u64) -> Result<Vec<u8>, String> {
        let Some(z) = &mut self.zstd else {
            if payload.len() < 4 {
                return Err("too short for its checksum".into());
            }
            let crc = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes"));
            if crc32fast::hash(&payload[4..]) != crc {
                return Err("its checksum does not match".into());
            }
            payload.drain(..4);
            return Ok(payload);
        };
        // One frame, that says it ends with its checksum: zstd checks it as it decodes.
        let one_frame = payload.len() > 4
            && payload[..4] == ZSTD_MAGIC
            && payload[4] & (ZSTD_CHECKSUM_FLAG | ZSTD_IDLE_BITS) == ZSTD_CHECKSUM_FLAG
            && zstd::zstd_safe::find_frame_compressed_size(&payload) == Ok(payload.len());
        if !one_frame {
            return Err("not one zstd frame with its checksum".into());
        }
        z.decompress(&payload, limit as usize)
            .map_err(|e| format!("its zstd frame: {e}"))
    }
}

/// What a reader did not read of a recording.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dropped {
    /// Slices read.
    pub slices: u64,
    /// Chunks skipped as damaged, their bytes, and the slices in them (as many as the
    /// chunks after them say).
    pub damaged: u64,
    pub damaged_bytes: u64,
    pub damaged_slices: u64,
    /// Where the first damage was, and what it was.
    pub first_damage: Option<(u64, String)>,
    /// Where reading stopped short of the end block, the bytes from there on (None:
    /// not known, as in a pipe or a compressed stream), and why.
    pub stopped: Option<(u64, Option<u64>, String)>,
}

impl Dropped {
    /// A damaged chunk of `bytes` at byte `at` was skipped.
    pub fn damaged(&mut self, at: u64, bytes: u64, why: String) {
        self.damaged += 1;
        self.damaged_bytes += bytes;
        self.first_damage.get_or_insert((at, why));
    }

    /// Reading stopped at byte `at`, `left` bytes before the end of the input.
    pub fn stop(&mut self, at: u64, left: Option<u64>, why: String) {
        self.stopped.get_or_insert((at, left, why));
    }

    /// One line saying what was not read; None when everything was.
    pub fn said(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some((at, why)) = &self.first_damage {
            let slices = match self.damaged_slices {
                0 => String::new(),
                n => format!(", {n} slices"),
            };
            parts.push(format!(
                "damaged: {} skipped ({} bytes{slices}; the first at byte {at}: {why})",
                plural(self.damaged, "block"),
                self.damaged_bytes,
            ));
        }
        if let Some((at, left, why)) = &self.stopped {
            let dropped = match left {
                Some(0) => String::new(),
                Some(n) => format!(": the {n} bytes from byte {at} on are dropped"),
                None => format!(": what follows byte {at} is dropped"),
            };
            parts.push(format!("{why}{dropped}"));
        }
        if parts.is_empty() {
            return None;
        }
        Some(format!(
            "{}; {} read",
            parts.join("; "),
            plural(self.slices, "slice")
        ))
    }
}

/// `n` things, in the plural but for one.
fn plural(n: u64, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        _ => format!("{n} {thing}s"),
    }
}
