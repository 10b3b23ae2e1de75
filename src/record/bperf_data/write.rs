//! bperf.data written: the header, then chunks of blocks, then the end (version 3).

use std::io::{self, Write};

use serde_json::json;

use super::io::{write_block, write_block_of};
use super::json::{cgroup_json, end_json, header_json, readings_json};
use super::raw_slice::parse_slice_into;
use super::{compact, End, Header, RecordedCgroup, Slice};
use super::{CGROUP_BEGAN, CGROUP_ENDED, CHUNK, CHUNK_BYTES, COMPACT_SLICE, END_V2};
use super::{MAGIC, NR_EVENTS_AT, READING, SLICE_HEAD, VERSION, ZSTD, ZSTD_CHUNK_BYTES};
use crate::reading::Reading;

/// A recording being written (version 3): the header, then chunks of blocks, each
/// checked on its own: each slice as the BPF program sends it and each cgroup that
/// comes or goes, then the end.
pub struct Writer<W: Write> {
    pub(super) out: W,
    /// -z: the level each chunk is compressed at, as one zstd frame with its content
    /// checksum.
    zstd: Option<i32>,
    encoder: compact::Encoder,
    nr_events: usize,
    /// The slice being written, and its block's bytes.
    slice: Slice,
    block: Vec<u8>,
    /// By the BPF program's slot: the slot the file gives what it counts now, and the
    /// cgroup's id (0 for tasks); None while it counts nothing.
    slots: Vec<Option<(u32, u64)>>,
    /// How many slots the file has given.
    named: u32,
    /// The chunk being filled: its preface (`preface` bytes), then its blocks.
    chunk: Vec<u8>,
    preface: usize,
    /// Chunks, cgroup blocks and slices written before the chunk being filled, and
    /// since.
    chunks: u64,
    cgroup_blocks: u64,
    slices: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the magic, version and header to `out` (and flushes them); each chunk
    /// goes through zstd at `zstd_level` when one is given (1 to 19: their windows are
    /// at most what a reader accepts, ZSTD_WINDOW_LOG_MAX).
    pub fn new(mut out: W, h: &Header, zstd_level: Option<i32>) -> io::Result<Writer<W>> {
        let mut header = header_json(h);
        if zstd_level.is_some() {
            header["compression"] = ZSTD.into();
        }
        let text = header.to_string();
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(text.len() as u32).to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        out.write_all(&crc32fast::hash(text.as_bytes()).to_le_bytes())?;
        out.flush()?;
        // The header's slots are the BPF program's at the start.
        let mut slots = vec![None; h.nr_slots()];
        match h.tasks {
            true => slots[0] = Some((0, 0)),
            false => h
                .cgroups
                .iter()
                .for_each(|c| slots[c.slot] = Some((c.slot as u32, c.id))),
        }
        let mut w = Writer {
            out,
            zstd: zstd_level,
            encoder: compact::Encoder::new(&h.cpus),
            nr_events: h.events.len(),
            slice: Slice::default(),
            block: Vec::with_capacity(compact::max_bytes(h.events.len()) + 11),
            named: slots.len() as u32,
            slots,
            chunk: Vec::new(),
            preface: 0,
            chunks: 0,
            cgroup_blocks: 0,
            slices: 0,
        };
        w.start_chunk();
        Ok(w)
    }

    /// Begins the next chunk: its preface, and the slices' encoding from scratch.
    fn start_chunk(&mut self) {
        self.chunk.clear();
        for v in [self.chunks, self.cgroup_blocks, self.slices] {
            compact::put(&mut self.chunk, v);
        }
        self.preface = self.chunk.len();
        self.encoder.reset();
    }

    /// Writes the chunk being filled, if it holds a block, and begins the next.
    fn write_chunk(&mut self) -> io::Result<()> {
        if self.chunk.len() == self.preface {
            return Ok(());
        }
        match self.zstd {
            None => {
                let crc = crc32fast::hash(&self.chunk).to_le_bytes();
                write_block_of(&mut self.out, CHUNK, &[&crc, &self.chunk])?;
            }
            Some(level) => {
                // A stream's frame, its size not given: zstd then compresses with the
                // parameters of a stream of unknown length, as version 2's one stream
                // is; compressed with the chunk's length (zstd::bulk), a synthetic
                // slice takes 9.0 bytes instead of 6.1 (tests/it/bperf_data.rs).
                let mut z = zstd::stream::write::Encoder::new(Vec::new(), level)?;
                z.include_checksum(true)?;
                z.write_all(&self.chunk)?;
                write_block_of(&mut self.out, CHUNK, &[&z.finish()?])?;
            }
        }
        self.chunks += 1;
        self.start_chunk();
        Ok(())
    }

    /// Writes a full chunk before a block is added to it.
    fn make_room(&mut self) -> io::Result<()> {
        let most = match self.zstd {
            None => CHUNK_BYTES,
            Some(_) => ZSTD_CHUNK_BYTES,
        };
        match self.chunk.len() >= most {
            true => self.write_chunk(),
            false => Ok(()),
        }
    }

    /// Writes what is held (a chunk of the blocks since the last) and flushes the
    /// output: a recording cut short after this keeps every block before it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_chunk()?;
        self.out.flush()
    }

    /// From now on, BPF slot `slot` counts cgroup `c` (whose own `slot` is ignored): the
    /// file names it (a kind 4 block) in the next slot of its own. Every slice written
    /// after this that the BPF program sent for `slot` is `c`'s.
    pub fn began(&mut self, slot: usize, c: &RecordedCgroup) -> io::Result<()> {
        let number = self.named;
        let named = RecordedCgroup {
            slot: number as usize,
            ..c.clone()
        };
        self.make_room()?;
        let text = cgroup_json(&named).to_string();
        write_block(&mut self.chunk, CGROUP_BEGAN, text.as_bytes())?;
        self.cgroup_blocks += 1;
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, None);
        }
        self.slots[slot] = Some((number, c.id));
        self.named += 1;
        Ok(())
    }

    /// Cgroup `id` was removed, its last slice written: the file says so (a kind 5
    /// block) with the counters' `totals` for it ([event][CPU]). Nothing if it was not
    /// being recorded.
    pub fn ended(&mut self, id: u64, totals: &[Vec<Reading>]) -> io::Result<()> {
        let Some(place) = self
            .slots
            .iter_mut()
            .find(|s| matches!(s, Some((_, i)) if *i == id))
        else {
            return Ok(());
        };
        let (number, _) = place.take().expect("found");
        let text = json!({"slot": number, "totals": readings_json(totals)}).to_string();
        self.make_room()?;
        write_block(&mut self.chunk, CGROUP_ENDED, text.as_bytes())?;
        self.cgroup_blocks += 1;
        Ok(())
    }

    /// The end block's totals ([file slot][event][CPU]) from `of_slot`, the counters'
    /// totals of a BPF slot: those of the cgroups still recorded, empty for the removed.
    pub fn file_totals(
        &self,
        of_slot: impl Fn(usize) -> Vec<Vec<Reading>>,
    ) -> Vec<Vec<Vec<Reading>>> {
        let mut out = vec![Vec::new(); self.named as usize];
        for (slot, place) in self.slots.iter().enumerate() {
            if let Some((number, _)) = place {
                out[*number as usize] = of_slot(slot);
            }
        }
        out
    }

    /// Writes one slice as the BPF program sent it (`raw`, perhaps padded); false if it
    /// is not one of this recording's (too short, other events, another CPU).
    pub fn write_slice(&mut self, raw: &[u8]) -> io::Result<bool> {
        let Some(n) = raw.get(NR_EVENTS_AT..NR_EVENTS_AT + 4) else {
            return Ok(false);
        };
        let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
        let Some(bytes) = raw.get(..SLICE_HEAD + n.min(self.nr_events) * READING) else {
            return Ok(false);
        };
        if parse_slice_into(&mut self.slice, bytes, self.nr_events).is_err() {
            return Ok(false);
        }
        match self.slots.get(self.slice.slot as usize) {
            Some(Some((number, _))) => self.slice.slot = *number,
            _ => return Ok(false),
        }
        // The encoding starts again in a new chunk: room first.
        self.make_room()?;
        let mut body = std::mem::take(&mut self.block);
        body.clear();
        let ours = self.encoder.encode(&self.slice, &mut body);
        if ours {
            write_block(&mut self.chunk, COMPACT_SLICE, &body)?;
            self.slices += 1;
        }
        self.block = body;
        Ok(ours)
    }

    /// Writes the end block, in the last chunk; the writer it was given.
    pub fn finish(mut self, end: &End) -> io::Result<W> {
        self.make_room()?;
        write_block(&mut self.chunk, END_V2, end_json(end).as_bytes())?;
        self.write_chunk()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::io::u32_at;
    use super::*;
    use crate::record::bperf_data::fixtures::*;

    /// `blocks` in one version 3 chunk after the header, its preface saying nothing came
    /// before it: a file whose blocks pass their checks whatever they say.
    fn file_of_blocks(good: &[u8], blocks: &[u8]) -> Vec<u8> {
        let mut out = good[..16 + u32_at(good, 12) as usize + 4].to_vec();
        let mut chunk = vec![0, 0, 0];
        chunk.extend_from_slice(blocks);
        let crc = crc32fast::hash(&chunk).to_le_bytes();
        write_block_of(&mut out, CHUNK, &[&crc, &chunk]).unwrap();
        out
    }

    /// A slice of `raw_slice`'s with the BPF program's slot `slot`.
    fn raw_in_slot(start: u64, slot: u32) -> Vec<u8> {
        let mut r = raw_slice(start, &[1000, 1]);
        r[28..32].copy_from_slice(&slot.to_le_bytes());
        r
    }

    /// Cgroups that come and go while recording: each takes the next slot of the file,
    /// whatever BPF slot counts it; a removed one's totals come back in the end block;
    /// a cgroup made again under a removed one's path is another, and the cgroups made
    /// under it are charged to it alone.
    #[test]
    fn cgroups_that_come_and_go_read_back_in_slots_of_their_own() {
        let r = |c| Reading {
            counter: c,
            enabled: c,
            running: c,
        };
        let cg = |id, path: &str| RecordedCgroup {
            id,
            name: path.into(),
            path: path.into(),
            ..RecordedCgroup::default()
        };
        let mut w = Writer::new(Vec::new(), &header(), None).unwrap();
        assert!(w.write_slice(&raw_in_slot(10, 0)).unwrap());
        w.began(3, &cg(77, "new")).unwrap();
        assert!(w.write_slice(&raw_in_slot(20, 3)).unwrap());
        w.ended(42, &[vec![r(5); 2], vec![r(6); 2]]).unwrap();
        assert!(
            !w.write_slice(&raw_in_slot(30, 0)).unwrap(),
            "slot 0 counts nothing"
        );
        w.began(0, &cg(88, "web")).unwrap();
        w.began(5, &cg(99, "web/x")).unwrap();
        assert!(w.write_slice(&raw_in_slot(40, 0)).unwrap());
        assert!(w.write_slice(&raw_in_slot(50, 5)).unwrap());
        let totals = w.file_totals(|slot| vec![vec![r(slot as u64); 2]; 2]);
        assert_eq!(totals.len(), 4);
        assert!(totals[0].is_empty());
        let end = End { totals, ..end() };
        let bytes = w.finish(&end).unwrap();
        let (h, slices, end) = read_all(&mut &bytes[..]).unwrap();
        let slots: Vec<u32> = slices.iter().map(|s| s.slot).collect();
        assert_eq!(slots, [0, 1, 2, 3]);
        let names: Vec<(&str, usize, u32, Option<u32>)> = h
            .cgroups
            .iter()
            .map(|c| (c.name.as_str(), c.slot, c.began, c.ended))
            .collect();
        assert_eq!(
            names,
            [
                ("web", 0, 0, Some(2)),
                ("new", 1, 1, None),
                ("web", 2, 3, None),
                ("web/x", 3, 4, None)
            ]
        );
        assert_eq!(
            end.totals[0][1][0].counter, 6,
            "the removed cgroup's totals"
        );
        assert_eq!(end.totals[1][0][0].counter, 3, "BPF slot 3's");
        assert_eq!(end.totals[2][0][0].counter, 0, "BPF slot 0's");
        let charged = crate::record::analysis::charged_slots(&h.cgroups);
        assert_eq!(charged[3], [2, 3], "web/x under the web made again only");

        // A cgroup block that names a slot out of turn, or ends one never recorded, is
        // damage, said.
        let mut blocks = Vec::new();
        let text = br#"{"slot":7,"id":1,"name":"x","path":"x"}"#;
        write_block(&mut blocks, CGROUP_BEGAN, text).unwrap();
        let err = read_all(&mut &file_of_blocks(&bytes, &blocks)[..]).unwrap_err();
        assert!(
            format!("{err:#}").contains("slot 7, where the next is 1"),
            "{err:#}"
        );
        let mut blocks = Vec::new();
        write_block(&mut blocks, CGROUP_ENDED, br#"{"slot":4,"totals":[]}"#).unwrap();
        let err = read_all(&mut &file_of_blocks(&bytes, &blocks)[..]).unwrap_err();
        assert!(format!("{err:#}").contains("no cgroup recorded"), "{err:#}");
    }

    /// A recording of tasks: slot 0 is theirs, and the header says what they were.
    #[test]
    fn a_recording_of_tasks_has_one_slot() {
        let h = Header {
            cgroups: Vec::new(),
            target: "process id '7'".into(),
            tasks: true,
            ..header()
        };
        let mut w = Writer::new(Vec::new(), &h, None).unwrap();
        assert!(w.write_slice(&raw_in_slot(10, 0)).unwrap());
        assert!(!w.write_slice(&raw_in_slot(20, 1)).unwrap());
        let end = End {
            totals: w.file_totals(|_| vec![vec![Reading::default(); 2]; 2]),
            ..end()
        };
        let bytes = w.finish(&end).unwrap();
        let (back, slices, end) = read_all(&mut &bytes[..]).unwrap();
        assert_eq!(back, h);
        assert_eq!((slices.len(), end.totals.len()), (1, 1));
    }
}
