//! Versions 1 and 2, still read: version 1's blocks of kind u32 and length u32, its
//! slices as the BPF program sent them; version 2's blocks without chunks or checks.

use std::io::Read;

use anyhow::{bail, Context, Result};

use super::super::io::{read_at, read_some, u32_at};
use super::super::raw_slice::parse_slice_into;
use super::super::{END, SLICE};
use super::{Block, Reader};

impl<R: Read> Reader<R> {
    pub(super) fn next_v1(&mut self) -> Result<bool> {
        let start = self.at;
        let mut block = [0u8; 8];
        if read_some(&mut self.input, &mut block, &mut self.at, "a block header")? == 0 {
            bail!("truncated: no end block after byte {start} (the recording did not finish)");
        }
        let (kind, len) = (u32_at(&block, 0), u32_at(&block, 4));
        match kind {
            SLICE if len as usize == self.body.len() => {
                read_at(&mut self.input, &mut self.body, &mut self.at, "a slice")?;
                let nr_events = self.header.events.len();
                parse_slice_into(&mut self.slice, &self.body, nr_events)
                    .with_context(|| format!("bad slice at byte {start}"))?;
                let nr_slots = self.header.nr_slots();
                if self.slice.slot as usize >= nr_slots {
                    bail!(
                        "bad slice at byte {start}: it names cgroup slot {} of {nr_slots}",
                        self.slice.slot
                    );
                }
                if self.cpus.binary_search(&self.slice.cpu).is_err() {
                    bail!(
                        "bad slice at byte {start}: it comes from CPU {}, which was not recorded",
                        self.slice.cpu
                    );
                }
                Ok(true)
            }
            SLICE => bail!(
                "bad slice at byte {start}: {len} bytes, for {} events ({} bytes)",
                self.header.events.len(),
                self.body.len()
            ),
            END => self.read_end(len, start).map(|_| false),
            k => bail!("unknown block kind {k} at byte {start}: the file is damaged"),
        }
    }

    pub(super) fn next_v2(&mut self) -> Result<bool> {
        loop {
            let start = self.at;
            match self.next_block()? {
                Block::Slice => return Ok(true),
                Block::Cgroup => {}
                Block::End => return Ok(false),
                Block::None => bail!(
                    "truncated: no end block after byte {start} (the recording did not finish)"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::{COMPACT_SLICE, END_V2};
    use super::*;
    use crate::record::bperf_data::fixtures::*;

    #[test]
    fn a_recording_reads_back_as_written() {
        let (h, slices, end) = read_all(&mut &file(true)[..]).unwrap();
        assert_eq!(h, header());
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(
            (s.start, s.length, s.cgid, s.cpu, s.slot),
            (5, 1000, 42, 1, 0)
        );
        assert_eq!(
            (s.pid, s.tid, s.comm_str().as_ref(), s.cut),
            (7, 8, "spin", true)
        );
        assert_eq!(s.deltas[0].counter, 1000);
        assert_eq!(s.deltas[1].counter, 1);
        assert_eq!(end.lost_total(), 2);
        assert_eq!(end.totals[0][1][1].running, 5);
    }

    /// A version 1 file cut in its header is refused; cut after it, it reads up to
    /// the cut and says so.
    #[test]
    fn every_cut_short_version_1_file_reads_up_to_the_cut() {
        let whole = file(true);
        let err = read_all(&mut &whole[..0]).unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
        let header_end = 16 + u32_at(&whole, 12) as usize;
        for len in 1..whole.len() {
            let Ok((_, slices, end, dropped)) = read_with_dropped(&whole[..len]) else {
                assert!(len < header_end, "{len}: refused past the header");
                continue;
            };
            assert!(len >= header_end && end.is_none(), "{len}");
            let (at, left, why) = dropped.stopped.expect("stopped");
            assert_eq!(at + left.unwrap(), len as u64);
            assert!(why.starts_with("truncated"), "{len}: {why}");
            assert_eq!(slices.len(), usize::from(at > header_end as u64));
        }
        let err = read_all(&mut &file(false)[..]).unwrap_err().to_string();
        assert!(err.contains("no end block"), "{err}");
    }

    /// Version 2 files (no chunks, no checks) cut short or damaged read up to where
    /// they stop reading, and say it in one line.
    #[test]
    fn damaged_version_2_files_read_up_to_the_damage() {
        let raw = raw_slices(200);
        let v2 = v2_file(&raw, None);
        let (_, slices, end, dropped) = read_with_dropped(&v2[..v2.len() / 2]).unwrap();
        assert!(slices.len() > 50 && slices.len() < 150 && end.is_none());
        assert!(dropped.said().unwrap().contains("truncated"), "{dropped:?}");
        let good = v2_file(&raw_slices(3), None);
        let body = 16 + u32_at(&good, 12) as usize;
        let mut huge_slice = good.clone();
        huge_slice[body + 1] = 0x7f;
        let err = read_all(&mut &huge_slice[..]).unwrap_err().to_string();
        assert!(err.contains("bad slice at byte"), "{err}");
        let mut huge_end = good[..body].to_vec();
        huge_end.extend_from_slice(&[END_V2, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        let err = read_all(&mut &huge_end[..]).unwrap_err().to_string();
        assert!(
            err.contains("claims 4294967295 bytes (at most 4448)"),
            "{err}"
        );
        let mut endless_length = good[..body].to_vec();
        endless_length.extend_from_slice(&[COMPACT_SLICE; 1]);
        endless_length.extend_from_slice(&[0xff; 12]);
        let err = read_all(&mut &endless_length[..]).unwrap_err().to_string();
        assert!(err.contains("more than 64 bits"), "{err}");
        let zstd = v2_file(&raw, Some(3));
        let (_, slices, _, dropped) = read_with_dropped(&zstd[..zstd.len() - 10]).unwrap();
        assert!(
            slices.len() < 200 && dropped.stopped.is_some(),
            "{dropped:?}"
        );
    }
}
