//! bperf.data read back one slice at a time: version 3's chunks and the blocks of
//! versions 2 and 3 here, version 1's and 2's own ways in older.rs, the chunks' framing
//! and what could not be read in chunks.rs.

use std::io::{self, Read};

use anyhow::{bail, Context, Result};
use serde_json::Value as Json;

use super::io::{read_at, read_block, read_some, read_varint, u32_at};
use super::json::{parse_began, parse_end, parse_header, readings_from};
use super::raw_slice::slice_bytes;
use super::{compact, End, Header, Slice};
use super::{CGROUP_BEGAN, CGROUP_ENDED, COMPACT_SLICE, END_V2, MAGIC, MAX_BEGAN_BLOCK};
use super::{MAX_BLOCK, V1, V2, VERSION, ZSTD, ZSTD_CHUNK_BYTES, ZSTD_WINDOW_LOG_MAX};
use crate::reading::Reading;

mod chunks;
mod older;

pub use chunks::Dropped;

/// Where a recording's blocks come from: the file, the zstd stream in it, or (version
/// 3) the chunk being read.
enum Source<R: Read> {
    Plain(R),
    Zstd(zstd::stream::read::Decoder<'static, io::BufReader<R>>),
    Chunk(io::Cursor<Vec<u8>>),
    /// While the input changes hands.
    Taken,
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(buf),
            Source::Zstd(z) => z.read(buf),
            Source::Chunk(c) => c.read(buf),
            Source::Taken => Ok(0),
        }
    }
}

/// What one block of version 2 or 3 was.
enum Block {
    Slice,
    Cgroup,
    End,
    /// None: the input (or the chunk) ends.
    None,
}

/// A bperf.data file read one slice at a time: the memory it takes does not grow with
/// the number of slices, and no length in the file makes it allocate more than the
/// bytes that are really there (or, compressed, than its header's dimensions allow).
/// Past the header, it reads every slice it can and keeps what it could not in
/// `dropped`.
pub struct Reader<R: Read> {
    input: Source<R>,
    /// Version 3: the file's chunks, and the next one's number.
    chunks: Option<chunks::ChunkFile<R>>,
    next_chunk: u64,
    /// Where the chunk being read starts in the file.
    chunk_at: u64,
    version: u32,
    /// The offset of the next byte (past the header, of the decompressed stream; in
    /// version 3, of the chunk).
    at: u64,
    /// The length of the input, when it is a file (a pipe's is not known, nor a
    /// compressed stream's); in version 3, the chunk's.
    size: Option<u64>,
    header: Header,
    /// The recorded CPUs, sorted: a slice comes from one of them.
    cpus: Vec<u32>,
    /// The block being read; a slice's bytes.
    body: Vec<u8>,
    slice: Slice,
    decoder: compact::Decoder,
    end: Option<End>,
    /// Cgroup blocks (kinds 4 and 5) read so far.
    cgroup_blocks: u32,
    /// The counters' totals of the cgroups removed while recording, by slot.
    ended_totals: Vec<(usize, Vec<Vec<Reading>>)>,
    dropped: Dropped,
}

impl<R: Read> Reader<R> {
    /// Reads the magic number, version and header of `input`, `size` bytes long if known.
    pub fn new(mut input: R, size: Option<u64>) -> Result<Reader<R>> {
        let mut at = 0u64;
        let mut magic = [0u8; 8];
        let mut head = [0u8; 8];
        if read_some(&mut input, &mut magic, &mut at, "the magic number")? == 0 {
            bail!("the file is empty");
        }
        if &magic != MAGIC {
            bail!(
                "not a bperf record file (it does not start with {:?})",
                "BPERFREC"
            );
        }
        read_at(&mut input, &mut head, &mut at, "the header")?;
        let version = u32_at(&head, 0);
        if !(V1..=VERSION).contains(&version) {
            bail!(
                "a version {version} bperf record file: this bperf reads versions {V1} to {VERSION}"
            );
        }
        let header_at = at;
        let text = read_block(&mut input, u32_at(&head, 4), &mut at, size, "the header")?;
        if version >= 3 {
            let mut crc = [0u8; 4];
            read_at(&mut input, &mut crc, &mut at, "the header's checksum")?;
            if crc32fast::hash(&text) != u32::from_le_bytes(crc) {
                bail!("the header at byte {header_at} is damaged: its checksum does not match");
            }
        }
        let header =
            parse_header(&text).with_context(|| format!("the header at byte {header_at}"))?;
        let mut cpus = header.cpus.clone();
        cpus.sort_unstable();
        let mut reader = Reader {
            input: Source::Plain(input),
            chunks: None,
            next_chunk: 0,
            chunk_at: at,
            version,
            at,
            size,
            cpus,
            body: vec![0; slice_bytes(header.events.len())],
            slice: Slice::default(),
            decoder: compact::Decoder::new(&header.cpus, header.nr_slots(), header.events.len()),
            header,
            end: None,
            cgroup_blocks: 0,
            ended_totals: Vec::new(),
            dropped: Dropped::default(),
        };
        if version != V1 {
            reader
                .open_blocks(&text)
                .with_context(|| format!("the header at byte {header_at}"))?;
        }
        Ok(reader)
    }

    /// Reads what follows the header through the compression it names, if any: one
    /// stream (version 2) or a frame a chunk (version 3).
    fn open_blocks(&mut self, header: &[u8]) -> Result<()> {
        let v: Json = serde_json::from_slice(header).context("the header is not JSON")?;
        let zstd = match &v["compression"] {
            Json::Null => false,
            Json::String(z) if z == ZSTD => true,
            other => bail!("it is compressed with {other}, which this bperf does not read"),
        };
        if !zstd && self.version == V2 {
            return Ok(());
        }
        let Source::Plain(input) = std::mem::replace(&mut self.input, Source::Taken) else {
            unreachable!("open_blocks runs once, on the plain input")
        };
        match self.version {
            V2 => {
                let mut z = zstd::stream::read::Decoder::new(input)?;
                z.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
                self.input = Source::Zstd(z);
                self.size = None;
            }
            _ => {
                let file = chunks::ChunkFile::new(input, self.at, self.size, zstd)?;
                self.chunks = Some(file);
                self.input = Source::Chunk(io::Cursor::default());
            }
        }
        Ok(())
    }

    /// The header, with the cgroups that appeared in the slices read so far (after the
    /// last slice: every cgroup of the recording, with when each came and went).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What could not be read (after the last slice: of the whole file).
    pub fn dropped(&self) -> &Dropped {
        &self.dropped
    }

    /// The next slice; None once the end block is read (see `end`), or where reading
    /// stopped short of it (see `dropped`).
    pub fn next_slice(&mut self) -> Result<Option<&Slice>> {
        if self.end.is_some() || self.dropped.stopped.is_some() {
            return Ok(None);
        }
        let start = self.at;
        let got = match self.version {
            V1 => self.next_v1(),
            V2 => self.next_v2(),
            _ => Ok(self.next_v3()),
        };
        match got {
            Ok(true) => {
                self.dropped.slices += 1;
                Ok(Some(&self.slice))
            }
            Ok(false) => Ok(None),
            Err(e) => {
                let left = self.size.map(|size| size.saturating_sub(start));
                self.dropped.stop(start, left, format!("{e:#}"));
                Ok(None)
            }
        }
    }

    /// Version 3: the next slice of a chunk whose check passed (true), or false at the
    /// end block or where reading stops.
    fn next_v3(&mut self) -> bool {
        loop {
            match self.next_block() {
                Ok(Block::Slice) => return true,
                Ok(Block::Cgroup) => {}
                Ok(Block::End) => {
                    self.after_end();
                    return false;
                }
                Ok(Block::None) => {
                    if !self.next_chunk() {
                        return false;
                    }
                }
                Err(e) => self.skip_rest_of_chunk(e),
            }
        }
    }

    /// A block of a checked chunk did not read (a file made so, or damage the check
    /// missed): the rest of the chunk is skipped, said as damage.
    fn skip_rest_of_chunk(&mut self, e: anyhow::Error) {
        let left = match &mut self.input {
            Source::Chunk(c) => {
                let left = c.get_ref().len() as u64 - c.position().min(c.get_ref().len() as u64);
                c.get_mut().clear();
                c.set_position(0);
                left
            }
            _ => 0,
        };
        let why = format!("{e:#} (in the block)");
        self.dropped.damaged(self.chunk_at, left, why);
    }

    /// The next chunk whose check passes, ready to read (true); false where reading
    /// stops: the end of the file, or what cannot be read on from.
    fn next_chunk(&mut self) -> bool {
        let limit = self.chunk_limit();
        loop {
            let Some(file) = &mut self.chunks else {
                return false;
            };
            let (at, body) = match file.next(limit) {
                chunks::Chunk::Good { at, body } => (at, body),
                chunks::Chunk::Damaged { at, bytes, why } => {
                    self.dropped.damaged(at, bytes, why);
                    self.next_chunk += 1;
                    continue;
                }
                chunks::Chunk::End { at } => {
                    let why = format!("the recording did not finish (no end block after byte {at}): what it had not yet written is dropped");
                    self.dropped.stop(at, Some(0), why);
                    return false;
                }
                chunks::Chunk::Stop { at, why } => {
                    let left = file.size.map(|size| size.saturating_sub(at));
                    self.dropped.stop(at, left, why);
                    return false;
                }
            };
            match self.begin_chunk(at, body) {
                Ok(true) => return true,
                Ok(false) => {}
                Err(why) => {
                    let left = self.chunks.as_ref().and_then(|f| f.size).map(|s| s - at);
                    self.dropped.stop(at, left, why);
                    return false;
                }
            }
        }
    }

    /// Reads the chunk `body` at byte `at` from its preface on (true); false when it is
    /// skipped as damaged; Err when reading cannot go on past it.
    fn begin_chunk(&mut self, at: u64, body: Vec<u8>) -> std::result::Result<bool, String> {
        let Ok(([number, cgroup_blocks, slices], preface)) = compact::varints::<3>(&body) else {
            self.dropped
                .damaged(at, body.len() as u64, "its preface does not read".into());
            return Ok(false);
        };
        let before = self.dropped.slices + self.dropped.damaged_slices;
        if number < self.next_chunk || slices < before {
            let why = format!("block {number} (of {} slices before) comes again", slices);
            self.dropped.damaged(at, body.len() as u64, why);
            return Ok(false);
        }
        if cgroup_blocks != u64::from(self.cgroup_blocks) {
            return Err(format!(
                "damaged: a cgroup block was in what was skipped before the block at byte {at}, so the slices after it cannot be placed"
            ));
        }
        self.dropped.damaged_slices += slices - before;
        self.next_chunk = number + 1;
        self.chunk_at = at;
        (self.at, self.size) = (preface as u64, Some(body.len() as u64));
        let mut cursor = io::Cursor::new(body);
        cursor.set_position(preface as u64);
        self.input = Source::Chunk(cursor);
        self.decoder.reset();
        Ok(true)
    }

    /// Version 3, after the end block: nothing may follow it.
    fn after_end(&mut self) {
        let Source::Chunk(c) = &self.input else {
            return;
        };
        let left = (c.get_ref().len() as u64).saturating_sub(c.position());
        if left > 0 {
            let why = "bytes after the end block".to_string();
            self.dropped.damaged(self.chunk_at, left, why);
        }
        if let Some(file) = &mut self.chunks {
            let at = file.at();
            if file.has_more() {
                let bytes = file.size.map_or(1, |size| size.saturating_sub(at));
                self.dropped
                    .damaged(at, bytes, "data after the end block".into());
            }
        }
    }

    /// The most bytes a chunk's body may take: a full chunk and the largest block.
    fn chunk_limit(&self) -> u64 {
        let slice = compact::max_bytes(self.header.events.len()) as u64;
        let block = self
            .max_end_block()
            .max(self.max_ended_block())
            .max(MAX_BEGAN_BLOCK)
            .max(slice);
        (ZSTD_CHUNK_BYTES as u64 + block + 64).min(u64::from(MAX_BLOCK))
    }

    /// One block of version 2 or 3.
    fn next_block(&mut self) -> Result<Block> {
        let start = self.at;
        let mut kind = [0u8];
        if read_some(&mut self.input, &mut kind, &mut self.at, "a block")? == 0 {
            return Ok(Block::None);
        }
        let len = read_varint(&mut self.input, &mut self.at)?;
        match kind[0] {
            CGROUP_BEGAN | CGROUP_ENDED => {
                self.read_cgroup_block(kind[0], len)
                    .with_context(|| format!("bad cgroup block at byte {start}"))?;
                Ok(Block::Cgroup)
            }
            k => self.next_v2_block(k, len, start),
        }
    }

    /// The most bytes of a kind 5 block: a reading of each event on each CPU, and room.
    fn max_ended_block(&self) -> u64 {
        let h = &self.header;
        (h.events.len() as u64)
            .saturating_mul(h.cpus.len() as u64)
            .saturating_mul(3 * 21 + 4)
            .saturating_add(4096)
    }

    /// A kind 4 or 5 block of `len` bytes: a cgroup came (it takes the next slot) or
    /// went (its totals are kept for the end).
    fn read_cgroup_block(&mut self, kind: u8, len: u64) -> Result<()> {
        let most = match kind {
            CGROUP_BEGAN => MAX_BEGAN_BLOCK,
            _ => self.max_ended_block(),
        };
        if len > most {
            bail!("it claims {len} bytes (at most {most})");
        }
        let text = read_block(
            &mut self.input,
            len as u32,
            &mut self.at,
            self.size,
            "a block",
        )?;
        self.cgroup_blocks += 1;
        let block = self.cgroup_blocks;
        if self.header.tasks {
            bail!("a cgroup in a recording of tasks");
        }
        match kind {
            CGROUP_BEGAN => {
                let c = parse_began(&text, self.header.cgroups.len(), block)?;
                self.header.cgroups.push(c);
                self.decoder.set_slots(self.header.nr_slots());
            }
            _ => {
                let v: Json = serde_json::from_slice(&text).context("not JSON")?;
                let slot = v["slot"].as_u64().context("no slot")?;
                let c = usize::try_from(slot)
                    .ok()
                    .and_then(|s| self.header.cgroups.get_mut(s))
                    .filter(|c| c.ended.is_none())
                    .with_context(|| format!("it ends slot {slot}, which is no cgroup recorded"))?;
                c.ended = Some(block);
                self.ended_totals
                    .push((c.slot, readings_from(&v["totals"])));
            }
        }
        Ok(())
    }

    fn next_v2_block(&mut self, kind: u8, len: u64, start: u64) -> Result<Block> {
        match kind {
            COMPACT_SLICE => {
                let most = compact::max_bytes(self.header.events.len());
                if len > most as u64 {
                    bail!("bad slice at byte {start}: {len} bytes (at most {most})");
                }
                self.body.resize(len as usize, 0);
                read_at(&mut self.input, &mut self.body, &mut self.at, "a slice")?;
                self.decoder
                    .decode(&self.body, &mut self.slice)
                    .with_context(|| format!("bad slice at byte {start}"))?;
                Ok(Block::Slice)
            }
            END_V2 => {
                let most = self.max_end_block();
                if len > most {
                    bail!("the end block at byte {start} claims {len} bytes (at most {most}): the file is damaged");
                }
                self.read_end(len as u32, start)?;
                Ok(Block::End)
            }
            k => bail!("unknown block kind {k} at byte {start}: the file is damaged"),
        }
    }

    /// The most bytes the end block of this header's recording can take: a reading
    /// of each event of each cgroup on each CPU, two lost counts a CPU, and room.
    fn max_end_block(&self) -> u64 {
        let h = &self.header;
        let readings = (h.cgroups.len() as u64)
            .saturating_mul(h.events.len() as u64)
            .saturating_mul(h.cpus.len() as u64);
        let bytes = readings
            .saturating_mul(3 * 21 + 4)
            .saturating_add(2 * 21 * h.cpus.len() as u64)
            .saturating_add(4096);
        bytes.min(u64::from(MAX_BLOCK))
    }

    fn read_end(&mut self, len: u32, start: u64) -> Result<()> {
        let text = read_block(
            &mut self.input,
            len,
            &mut self.at,
            self.size,
            "the end block",
        )?;
        let mut end = parse_end(&text).with_context(|| format!("the end block at byte {start}"))?;
        // The removed cgroups' totals came in their own blocks.
        if !self.ended_totals.is_empty() && end.totals.len() < self.header.cgroups.len() {
            end.totals.resize(self.header.cgroups.len(), Vec::new());
        }
        for (slot, totals) in self.ended_totals.drain(..) {
            if let Some(t) = end.totals.get_mut(slot) {
                *t = totals;
            }
        }
        if let Source::Zstd(z) = &mut self.input {
            // The stream must end here, whole: its checksum read and checked.
            let mut rest = [0u8; 64];
            let extra = z
                .read(&mut rest)
                .context("the compressed stream after the end block")?;
            if extra > 0 {
                bail!("data after the end block at byte {start}: the file is damaged");
            }
        }
        self.end = Some(end);
        Ok(())
    }

    /// The end block, once `next_slice` has said there are no more slices (None when
    /// reading stopped short of it).
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::bperf_data::fixtures::*;
    use crate::record::bperf_data::json::header_json;

    #[test]
    fn other_files_are_refused() {
        let err = read_all(&mut &b"PERFILE2........"[..])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a bperf record file"), "{err}");
        let mut v4 = file(true);
        v4[8] = 4;
        let err = read_all(&mut &v4[..]).unwrap_err().to_string();
        assert!(err.contains("version 4"), "{err}");
        let mut bad = file(true);
        let first_block = 16 + u32_at(&bad, 12) as usize;
        bad[first_block] = 9;
        let err = read_all(&mut &bad[..]).unwrap_err().to_string();
        assert!(err.contains("unknown block kind 9"), "{err}");
    }

    /// Versions 3 and 2, plain and compressed, read back the slices version 1 keeps as
    /// sent, in a fraction of the bytes: version 3 in chunks of 500 slices (four times
    /// a second at 2,000 slices a second) within a byte a slice of version 2.
    #[test]
    fn versions_2_and_3_read_back_what_version_1_keeps() {
        let raw = raw_slices(2000);
        let v1 = v1_file(&header(), &raw, Some(&end()));
        let (h1, slices1, end1) = read_all(&mut &v1[..]).unwrap();
        let header_bytes = 16 + header_json(&header()).to_string().len();
        for zstd in [None, Some(1), Some(19)] {
            let v2 = v2_file(&raw, zstd);
            let v3 = chunked_file(&raw, zstd, 500, true);
            for (version, file) in [(2, &v2), (3, &v3)] {
                let (h, slices, end) = read_all(&mut &file[..]).unwrap();
                assert_eq!((&h1, &end1), (&h, &end), "version {version} {zstd:?}");
                assert!(
                    slices1 == slices,
                    "version {version} {zstd:?}: the slices differ"
                );
            }
            let per_slice = |f: &[u8]| (f.len() - header_bytes) as f64 / raw.len() as f64;
            let (b2, b3) = (per_slice(&v2), per_slice(&v3));
            assert!(
                b3 <= 12.0 && b3 <= b2 + 1.0,
                "{zstd:?}: {b3} bytes a slice, {b2} in version 2"
            );
        }
        assert_eq!(slices1.iter().filter(|s| s.cut).count(), 286);
    }

    /// A recording cut short anywhere past its header (killed, a full disk) reads the
    /// slices of every whole chunk before the cut, no more, and says where it stopped
    /// and the bytes it dropped, not as damage; without its end block, it says so.
    #[test]
    fn a_cut_short_recording_reads_every_whole_chunk() {
        let raw = raw_slices(20);
        for zstd in [None, Some(3)] {
            let whole = chunked_file(&raw, zstd, 5, true);
            let header_end = 16 + u32_at(&whole, 12) as usize + 4;
            let mut read = Vec::new();
            for len in 1..whole.len() {
                let Ok((_, slices, end, dropped)) = read_with_dropped(&whole[..len]) else {
                    assert!(len < header_end, "{zstd:?} {len}: refused past the header");
                    continue;
                };
                assert!(len >= header_end && end.is_none(), "{zstd:?} {len}");
                assert_eq!(slices.len() % 5, 0, "{zstd:?} {len}: part of a chunk read");
                assert_eq!(dropped.damaged, 0, "{zstd:?} {len}: {dropped:?}");
                let (at, left, why) = dropped.stopped.clone().expect("stopped");
                assert_eq!(at + left.unwrap(), len as u64, "{zstd:?} {len}: {why}");
                assert!(why.contains("did not finish"), "{zstd:?} {len}: {why}");
                let line = dropped.said().unwrap();
                let count = format!("; {} slices read", slices.len());
                assert!(line.ends_with(&count), "{line}");
                read.push(slices.len());
            }
            read.dedup();
            assert_eq!(read, [0, 5, 10, 15, 20], "{zstd:?}");
            assert!(
                read_all(&mut &whole[..]).unwrap().1
                    == read_all(&mut &v2_file(&raw, None)[..]).unwrap().1
            );
            let unfinished = chunked_file(&raw, zstd, 5, false);
            let err = read_all(&mut &unfinished[..]).unwrap_err().to_string();
            assert!(
                err.contains("no end block") && err.ends_with("20 slices read"),
                "{err}"
            );
        }
    }

    /// A chunk damaged in its middle is skipped and said, with the slices it held (the
    /// next chunk says how many came before it); the chunks after it are read.
    #[test]
    fn a_damaged_chunk_is_skipped_and_said() {
        let raw = raw_slices(20);
        for zstd in [None, Some(3)] {
            let good = chunked_file(&raw, zstd, 5, true);
            let starts = chunk_starts(&good);
            assert_eq!(
                starts.len(),
                6,
                "{zstd:?}: 4 chunks of slices, the end's, its end"
            );
            let (a, b) = (starts[1], starts[2]);
            let mut bad = good.clone();
            bad[(a + b) / 2] ^= 0x10;
            let (_, slices, end, dropped) = read_with_dropped(&bad).unwrap();
            let all = read_all(&mut &good[..]).unwrap().1;
            assert!(
                slices[..5] == all[..5] && slices[5..] == all[10..],
                "{zstd:?}"
            );
            assert_eq!(end, Some(self::end()), "{zstd:?}: the end is read");
            assert_eq!(
                (
                    dropped.damaged,
                    dropped.damaged_bytes,
                    dropped.damaged_slices
                ),
                (1, (b - a) as u64, 5),
                "{zstd:?}"
            );
            let line = dropped.said().unwrap();
            let said = format!(
                "damaged: 1 block skipped ({} bytes, 5 slices; the first at byte {a}: ",
                b - a
            );
            assert!(
                line.starts_with(&said) && line.ends_with("; 15 slices read"),
                "{line}"
            );
        }
    }

    /// A damaged header is refused in one line: there is nothing to read slices against.
    #[test]
    fn a_damaged_header_is_refused() {
        let good = v3_file(&raw_slices(3), None, true);
        let mut bad = good.clone();
        bad[20] ^= 1;
        let err = read_all(&mut &bad[..]).unwrap_err().to_string();
        assert!(err.contains("checksum does not match"), "{err}");
        let body = 16 + u32_at(&good, 12) as usize;
        let named =
            header_json(&header())
                .to_string()
                .replacen('{', "{\"compression\":\"lz4\",", 1);
        let mut other = good[..12].to_vec();
        other.extend_from_slice(&(named.len() as u32).to_le_bytes());
        other.extend_from_slice(named.as_bytes());
        other.extend_from_slice(&crc32fast::hash(named.as_bytes()).to_le_bytes());
        other.extend_from_slice(&good[body + 4..]);
        let err = format!("{:#}", read_all(&mut &other[..]).unwrap_err());
        assert!(err.contains("compressed with \"lz4\""), "{err}");
    }
}
