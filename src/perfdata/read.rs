//! Reading stat files, perf's and bperf's, as perf.data or in perf's pipe format, from
//! input that may be damaged or hostile. Every length and count read from the input is
//! checked against what the file holds (or, for a pipe, against a cap) before anything
//! is allocated from it, nothing panics, and a bad file is refused with the offset where
//! it goes wrong. Counts are read a round at a time, so that a pipe of intervals is
//! printed as it comes, in bounded memory.

use std::io::{self, Read, Seek, SeekFrom};

use anyhow::{bail, Context, Result};

use super::*;

/// A file header without the feature bitmap (perf before 2.6.37); perf still reads one.
const OLD_HEADER_SIZE: u64 = 72;
/// perf_event_header: type, misc, size of the whole record (at most 64 KiB).
const RECORD_HEADER: usize = 8;
/// The sizes of STAT and STAT_ROUND records (header, id, cpu and thread, three counts;
/// header, type, time).
const STAT_SIZE: u64 = 48;
const STAT_ROUND_SIZE: u64 = 24;
/// The smallest perf_event_attr (PERF_ATTR_SIZE_VER0).
const ATTR_SIZE_VER0: usize = 64;
/// perf_event_attr's flags word, and in it the bit of a frequency instead of a period.
const ATTR_FLAGS: usize = 40;
const ATTR_FREQ: u64 = 1 << 10;

// Bounds on what a file may ask to be held: far above what perf stat records (hundreds
// of events on hundreds of CPUs), far below what would exhaust memory. A file beyond
// them is refused.
/// The largest perf_event_attr taken (the kernel's is 136 bytes today).
const MAX_ATTR_SIZE: usize = 4096;
/// The largest header section read into memory (the attributes, a feature).
const MAX_SECTION: u64 = 16 << 20;
/// The most events, and event ids over all events.
const MAX_EVENTS: usize = 1 << 16;
const MAX_IDS: usize = 1 << 20;
/// The longest event name, and the most arguments of a command line.
const MAX_NAME: usize = 4096;
const MAX_ARGS: usize = 1 << 17;
/// The most counts in one round.
const MAX_ROUND_COUNTS: usize = 1 << 20;
/// CPU numbers are below this, and NUMA nodes are fewer: the largest NR_CPUS and
/// MAX_NUMNODES the kernel builds with.
const MAX_CPUS: usize = 8192;
const MAX_NODES: u32 = 1024;
/// The most rows (events times CPUs) a report of the file prints.
const MAX_ROWS: usize = 1 << 20;

/// The refusal of a file: what is wrong at which offset.
fn damaged<T>(offset: u64, what: impl std::fmt::Display) -> Result<T> {
    bail!("damaged at offset {offset:#x}: {what}")
}

/// Which round a `StatReader::next_round` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundKind {
    /// One interval's counts (-I).
    Interval,
    /// The counts of the whole run; its time is the time elapsed.
    Final,
}

/// A stat file being read: what it says about its counts first, then its rounds.
pub struct StatReader<R> {
    records: Records<R>,
    /// The file's events, CPUs, modes, command line and topology; its rounds and counts
    /// are not kept here but handed out by `next_round`.
    pub file: StatFile,
    /// Counts read since the last round.
    counts: Vec<StatCount>,
    ids: usize,
    rounds: u64,
}

impl<R: Read + Seek> StatReader<R> {
    /// Opens a stat file, perf.data or a pipe's output (told apart by their headers),
    /// and reads what it says before its counts. A pipe's output needs no seeking; a
    /// perf.data file does (its feature sections follow its records).
    pub fn open(mut input: R) -> Result<StatReader<R>> {
        let mut head = [0u8; 16];
        let got = read_full(&mut input, &mut head).context("reading the header")?;
        if got < head.len() {
            return damaged(got as u64, "too short for a perf.data header");
        }
        if &head[..8] != MAGIC {
            match &head[..8] {
                b"2ELIFREP" => bail!("a big-endian perf.data file; bperf reads little-endian ones"),
                _ => bail!("not a perf.data file (no PERFILE2 magic at offset 0)"),
            }
        }
        let mut reader = match le_u64(&head, 8).unwrap_or(0) {
            PIPE_HEADER_SIZE => StatReader::new(Records {
                input,
                at: PIPE_HEADER_SIZE,
                end: None,
                held: None,
                body: Vec::new(),
            }),
            size if size == HEADER_SIZE as u64 || size == OLD_HEADER_SIZE => {
                let len = match input.seek(SeekFrom::End(0)) {
                    Ok(len) => len,
                    Err(_) => bail!("a perf.data file cannot be read from a pipe: its header is at its end; give the file with -i"),
                };
                open_file(input, size, len)?
            }
            size => return damaged(8, format!("header size {size} is neither a file's ({HEADER_SIZE}) nor a pipe's ({PIPE_HEADER_SIZE})")),
        };
        reader.read_metadata()?;
        Ok(reader)
    }
}

impl<R: Read> StatReader<R> {
    fn new(records: Records<R>) -> StatReader<R> {
        StatReader {
            records,
            file: StatFile::default(),
            counts: Vec::new(),
            ids: 0,
            rounds: 0,
        }
    }

    /// Reads the records before the first count: attributes and names (in a pipe),
    /// the CPU map and the stat config.
    fn read_metadata(&mut self) -> Result<()> {
        while let Some((kind, at)) = self.records.next()? {
            if matches!(kind, STAT | STAT_ROUND) {
                self.records.hold(kind, at);
                break;
            }
            self.take_metadata(kind, at)?;
        }
        if self.file.events.is_empty() {
            return damaged(self.records.at, "no events in the file");
        }
        let rows = self
            .file
            .events
            .len()
            .saturating_mul(self.file.cpus.len().max(1));
        if rows > MAX_ROWS {
            let (events, cpus) = (self.file.events.len(), self.file.cpus.len());
            return damaged(
                self.records.at,
                format!(
                    "{events} events on {cpus} CPUs: more than the {MAX_ROWS} rows bperf prints"
                ),
            );
        }
        Ok(())
    }

    /// The next round of counts: one interval's, or the whole run's; `None` at the end.
    pub fn next_round(&mut self) -> Result<Option<(RoundKind, Round)>> {
        while let Some((kind, at)) = self.records.next()? {
            match kind {
                STAT => {
                    if self.counts.len() >= MAX_ROUND_COUNTS {
                        return damaged(
                            at,
                            format!("more than {MAX_ROUND_COUNTS} counts in one round"),
                        );
                    }
                    let Some(count) = stat_count(&self.records.body) else {
                        return damaged(at, "a short STAT record");
                    };
                    self.counts.push(count);
                }
                STAT_ROUND => {
                    let body = &self.records.body;
                    let (Some(round), Some(time_ns)) = (le_u64(body, 0), le_u64(body, 8)) else {
                        return damaged(at, "a short STAT_ROUND record");
                    };
                    self.rounds += 1;
                    let kind = match round {
                        STAT_ROUND_FINAL => RoundKind::Final,
                        _ => RoundKind::Interval,
                    };
                    let counts = std::mem::take(&mut self.counts);
                    return Ok(Some((kind, Round { time_ns, counts })));
                }
                _ => self.take_metadata(kind, at)?,
            }
        }
        if self.rounds == 0 {
            bail!("no counts in the file (stat record was stopped before it wrote them?)");
        }
        Ok(None)
    }

    /// Takes in a record that says what the counts are.
    fn take_metadata(&mut self, kind: u32, at: u64) -> Result<()> {
        let body = std::mem::take(&mut self.records.body);
        let taken = match kind {
            HEADER_ATTR => self.take_attr(&body, at),
            HEADER_FEATURE => match le_u64(&body, 0) {
                Some(feature) => self.take_feature(feature, &body[8..], at + 16),
                None => damaged(at, "a short feature record"),
            },
            EVENT_UPDATE => self.take_event_update(&body, at),
            CPU_MAP => cpu_map(&body, at + RECORD_HEADER as u64).map(|cpus| self.file.cpus = cpus),
            STAT_CONFIG => self.take_stat_config(&body, at),
            _ => Ok(()),
        };
        self.records.body = body;
        taken
    }

    /// A pipe's HEADER_ATTR: an event's perf_event_attr, then its ids.
    fn take_attr(&mut self, body: &[u8], at: u64) -> Result<()> {
        let size = match le_u32(body, 4) {
            Some(0) => ATTR_SIZE_VER0,
            Some(size) => size as usize,
            None => return damaged(at, "a short attribute record"),
        };
        if !(ATTR_SIZE_VER0..=MAX_ATTR_SIZE.min(body.len())).contains(&size)
            || (body.len() - size) % 8 != 0
        {
            return damaged(
                at,
                format!("attribute size {size} in a record of {} bytes", body.len()),
            );
        }
        let ids = body[size..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
        self.add_event(&body[..size], ids.collect(), at)
    }

    /// Adds an event, unless the file asks for more than is held or it is sampled.
    fn add_event(&mut self, attr: &[u8], ids: Vec<u64>, at: u64) -> Result<()> {
        refuse_sampled(attr, at)?;
        self.ids += ids.len();
        if self.file.events.len() >= MAX_EVENTS || self.ids > MAX_IDS {
            return damaged(
                at,
                format!("more than {MAX_EVENTS} events or {MAX_IDS} event ids"),
            );
        }
        self.file.events.push(RecordedEvent {
            name: "unknown".to_string(),
            attr: Vec::new(),
            ids,
        });
        Ok(())
    }

    /// An EVENT_UPDATE: in a pipe, the name of the event with that id.
    fn take_event_update(&mut self, body: &[u8], at: u64) -> Result<()> {
        let (Some(kind), Some(id)) = (le_u64(body, 0), le_u64(body, 8)) else {
            return damaged(at, "a short event update");
        };
        if kind != UPDATE_NAME {
            return Ok(());
        }
        let name = c_string(&body[16..]);
        if name.len() > MAX_NAME {
            return damaged(at, format!("an event name of {} bytes", name.len()));
        }
        if let Some(e) = self.file.events.iter_mut().find(|e| e.ids.contains(&id)) {
            e.name = name;
        }
        Ok(())
    }

    fn take_stat_config(&mut self, body: &[u8], at: u64) -> Result<()> {
        let nr = le_u64(body, 0).map_or_else(|| damaged(at, "a short stat config"), Ok)?;
        let terms = body[8..].chunks_exact(16);
        if nr != terms.len() as u64 || body.len() % 8 != 0 {
            return damaged(
                at,
                format!("a stat config of {nr} terms in {} bytes", body.len()),
            );
        }
        for term in terms {
            let (tag, val) = (le_u64(term, 0).unwrap_or(0), le_u64(term, 8).unwrap_or(0));
            match tag {
                CONFIG_AGGR_MODE => self.file.aggr_mode = val,
                CONFIG_INTERVAL => self.file.interval_ms = val,
                _ => {}
            }
        }
        Ok(())
    }

    /// A feature section (in a file's header, or a pipe's HEADER_FEATURE record) that
    /// says something the report uses; `at` is its offset, for errors.
    fn take_feature(&mut self, feature: u64, data: &[u8], at: u64) -> Result<()> {
        let mut b = Bytes::new(data, at);
        match feature as usize {
            FEAT_CMDLINE => {
                let nr = b.u32()?;
                if nr as usize > MAX_ARGS {
                    return damaged(at, format!("a command line of {nr} arguments"));
                }
                self.file.cmdline = (0..nr).map(|_| b.string()).collect::<Result<_>>()?;
            }
            FEAT_EVENT_DESC => self.take_event_desc(&mut b)?,
            FEAT_NRCPUS => {
                let (avail, online) = (b.u32()?, b.u32()?);
                let t = self.file.topology.get_or_insert_with(Topology::default);
                if avail as usize > MAX_CPUS {
                    return damaged(at, format!("{avail} CPUs"));
                }
                t.online = online;
                t.cpus.resize(avail as usize, (-1, -1, -1));
            }
            FEAT_CPU_TOPOLOGY => {
                let t = self.file.topology.get_or_insert_with(Topology::default);
                cpu_topology(&mut b, &mut t.cpus)?;
            }
            FEAT_NUMA_TOPOLOGY => {
                let t = self.file.topology.get_or_insert_with(Topology::default);
                t.nodes = numa_nodes(&mut b)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// EVENT_DESC: each event's attribute, name and ids. They replace the events of
    /// the attribute section, which have no names.
    fn take_event_desc(&mut self, b: &mut Bytes) -> Result<()> {
        let (nr, attr_size) = (b.u32()?, b.u32()? as usize);
        if !(ATTR_SIZE_VER0..=MAX_ATTR_SIZE).contains(&attr_size) {
            return b.damaged(format!("attribute size {attr_size}"));
        }
        self.file.events.clear();
        self.ids = 0;
        for _ in 0..nr {
            let at = b.offset();
            let attr = b.take(attr_size)?;
            let nr_ids = b.u32()? as usize;
            let name = b.string()?;
            if name.len() > MAX_NAME {
                return damaged(at, format!("an event name of {} bytes", name.len()));
            }
            let ids = b.take(nr_ids.saturating_mul(8))?.chunks_exact(8);
            let ids = ids.map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
            self.add_event(attr, ids.collect(), at)?;
            if let Some(e) = self.file.events.last_mut() {
                e.name = name;
            }
        }
        Ok(())
    }
}

/// A perf.data file: its header, attributes and ids, the feature sections the report
/// uses; then a reader at the start of its records.
fn open_file<R: Read + Seek>(mut input: R, header_size: u64, len: u64) -> Result<StatReader<R>> {
    let head = read_at(&mut input, 0, header_size, len)?;
    let attr_size = le_u64(&head, 16).unwrap_or(0);
    let attrs = Section::parse(&head, 24, 0, len)?;
    let data = Section::parse(&head, 40, 0, len)?;
    let mut reader = StatReader::new(Records {
        input,
        at: data.offset,
        end: Some(data.offset + data.size),
        held: None,
        body: Vec::new(),
    });
    reader.take_attrs(&attrs, attr_size, len)?;
    if header_size == HEADER_SIZE as u64 {
        let bitmap: Vec<u64> = (0..4).filter_map(|i| le_u64(&head, 72 + 8 * i)).collect();
        reader.take_features(&bitmap, data.offset + data.size, len)?;
    }
    reader.records.check_framing(&data)?;
    Ok(reader)
}

impl<R: Read + Seek> StatReader<R> {
    /// The attribute section: each event's perf_event_attr and the section of its ids.
    fn take_attrs(&mut self, attrs: &Section, attr_size: u64, len: u64) -> Result<()> {
        let entry = attr_size as usize;
        if attrs.size == 0 {
            return Ok(());
        }
        let sizes = (ATTR_SIZE_VER0 + SECTION_SIZE)..=(MAX_ATTR_SIZE + SECTION_SIZE);
        if !sizes.contains(&entry) || attrs.size % attr_size != 0 {
            return damaged(
                16,
                format!(
                    "attribute size {attr_size} for a section of {} bytes",
                    attrs.size
                ),
            );
        }
        let section = read_at(&mut self.records.input, attrs.offset, attrs.size, len)?;
        for (i, e) in section.chunks_exact(entry).enumerate() {
            let at = attrs.offset + (i * entry) as u64;
            let ids = Section::parse(e, entry - SECTION_SIZE, at, len)?;
            if ids.size % 8 != 0 || ids.size / 8 > MAX_IDS as u64 {
                return damaged(at, format!("an ids section of {} bytes", ids.size));
            }
            let ids = read_at(&mut self.records.input, ids.offset, ids.size, len)?;
            let ids = ids
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
            self.add_event(&e[..entry - SECTION_SIZE], ids.collect(), at)?;
        }
        Ok(())
    }

    /// The feature sections, after the records: one (offset, size) per bit set in the
    /// header's bitmap, in the order of the bits.
    fn take_features(&mut self, bitmap: &[u64], table_at: u64, len: u64) -> Result<()> {
        let nr = bitmap.iter().map(|w| w.count_ones() as u64).sum::<u64>();
        let table = read_at(
            &mut self.records.input,
            table_at,
            nr * SECTION_SIZE as u64,
            len,
        )?;
        let bits = (0..bitmap.len() * 64).filter(|&bit| bitmap[bit / 64] & (1 << (bit % 64)) != 0);
        for (i, bit) in bits.enumerate() {
            let section = Section::parse(&table, i * SECTION_SIZE, table_at, len)?;
            if ![
                FEAT_CMDLINE,
                FEAT_EVENT_DESC,
                FEAT_NRCPUS,
                FEAT_CPU_TOPOLOGY,
                FEAT_NUMA_TOPOLOGY,
            ]
            .contains(&bit)
            {
                continue;
            }
            let data = read_at(&mut self.records.input, section.offset, section.size, len)?;
            self.take_feature(bit as u64, &data, section.offset)?;
        }
        Ok(())
    }
}

/// A section of a file: where it is and how long, as the header tells it; checked to
/// lie within the file.
struct Section {
    offset: u64,
    size: u64,
}

impl Section {
    /// The (offset, size) at `at` of `b` (which is at `base` in the file); it must lie
    /// within the file's `len` bytes.
    fn parse(b: &[u8], at: usize, base: u64, len: u64) -> Result<Section> {
        let (Some(offset), Some(size)) = (le_u64(b, at), le_u64(b, at + 8)) else {
            return damaged(base + at as u64, "a short section header");
        };
        match offset.checked_add(size) {
            Some(end) if end <= len => Ok(Section { offset, size }),
            _ => damaged(
                base + at as u64,
                format!(
                    "a section of {size} bytes at {offset:#x}, past the file's end ({len} bytes)"
                ),
            ),
        }
    }
}

/// `size` bytes at `offset` of a file of `len` bytes; refused past its end or over the
/// largest section taken.
fn read_at<R: Read + Seek>(input: &mut R, offset: u64, size: u64, len: u64) -> Result<Vec<u8>> {
    if offset.checked_add(size).is_none_or(|end| end > len) {
        return damaged(
            offset,
            format!("{size} bytes past the file's end ({len} bytes)"),
        );
    }
    if size > MAX_SECTION {
        return damaged(
            offset,
            format!("a section of {size} bytes (more than {MAX_SECTION})"),
        );
    }
    let mut buf = vec![0; size as usize];
    input.seek(SeekFrom::Start(offset))?;
    input
        .read_exact(&mut buf)
        .with_context(|| format!("reading {size} bytes at offset {offset:#x}"))?;
    Ok(buf)
}

/// Reads until `buf` is full or the input ends; how much was read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The records of a file's data section or of a pipe, one at a time.
struct Records<R> {
    input: R,
    /// The offset of the next record.
    at: u64,
    /// Where the data section ends; a pipe's records end with the input.
    end: Option<u64>,
    /// A record read and put back: its type and offset (its body is still in `body`).
    held: Option<(u32, u64)>,
    /// The body of the last record read.
    body: Vec<u8>,
}

impl<R: Read> Records<R> {
    /// The next record's type and offset, its body in `self.body`; `None` at the end.
    fn next(&mut self) -> Result<Option<(u32, u64)>> {
        if let Some(held) = self.held.take() {
            return Ok(Some(held));
        }
        let at = self.at;
        if self.end == Some(at) {
            return Ok(None);
        }
        let mut header = [0u8; RECORD_HEADER];
        match read_full(&mut self.input, &mut header)
            .with_context(|| format!("reading at offset {at:#x}"))?
        {
            0 if self.end.is_none() => return Ok(None),
            RECORD_HEADER => {}
            _ => return damaged(at, "the data ends inside a record header"),
        }
        let kind = le_u32(&header, 0).unwrap_or(0);
        let size = le_u16(&header, 6).unwrap_or(0) as u64;
        if size < RECORD_HEADER as u64 {
            return damaged(
                at,
                format!("a record of {size} bytes, shorter than its header"),
            );
        }
        if self.end.is_some_and(|end| at + size > end) {
            return damaged(
                at,
                format!("a record of {size} bytes past the end of the data"),
            );
        }
        self.body.resize(size as usize - RECORD_HEADER, 0);
        let got = read_full(&mut self.input, &mut self.body)
            .with_context(|| format!("reading at offset {at:#x}"))?;
        if got < self.body.len() {
            return damaged(at, format!("the data ends inside a record of {size} bytes"));
        }
        self.at = at + size;
        Ok(Some((kind, at)))
    }

    /// Walks a file's records without reading their bodies, so that a file whose
    /// records do not fit together is refused before anything of it is printed; then
    /// goes back to the first.
    fn check_framing(&mut self, data: &Section) -> Result<()>
    where
        R: Seek,
    {
        let end = data.offset + data.size;
        let mut at = data.offset;
        self.input.seek(SeekFrom::Start(at))?;
        while at < end {
            let mut header = [0u8; RECORD_HEADER];
            if end - at < RECORD_HEADER as u64 {
                return damaged(at, "the data ends inside a record header");
            }
            self.input.read_exact(&mut header)?;
            let kind = le_u32(&header, 0).unwrap_or(0);
            let size = le_u16(&header, 6).unwrap_or(0) as u64;
            let least = match kind {
                STAT => STAT_SIZE,
                STAT_ROUND => STAT_ROUND_SIZE,
                _ => RECORD_HEADER as u64,
            };
            if size < least || size > end - at {
                return damaged(at, format!("a record of type {kind} and {size} bytes"));
            }
            self.input
                .seek(SeekFrom::Current((size - RECORD_HEADER as u64) as i64))?;
            at += size;
        }
        self.input.seek(SeekFrom::Start(data.offset))?;
        Ok(())
    }

    /// Puts back the record just read: the next `next` returns it again.
    fn hold(&mut self, kind: u32, at: u64) {
        self.held = Some((kind, at));
    }
}

/// A section's or record's bytes, read in order; errors say at what offset of the file.
struct Bytes<'a> {
    b: &'a [u8],
    at: usize,
    /// The offset of `b` in the file.
    base: u64,
}

impl<'a> Bytes<'a> {
    fn new(b: &'a [u8], base: u64) -> Bytes<'a> {
        Bytes { b, at: 0, base }
    }
    fn offset(&self) -> u64 {
        self.base + self.at as u64
    }
    fn damaged<T>(&self, what: impl std::fmt::Display) -> Result<T> {
        damaged(self.offset(), what)
    }
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.b.get(self.at..self.at.saturating_add(n)) {
            Some(taken) if self.at.checked_add(n).is_some() => {
                self.at += n;
                Ok(taken)
            }
            _ => self.damaged(format!(
                "{n} bytes past the end of a section of {}",
                self.b.len()
            )),
        }
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(self.u32()? as u64 | (self.u32()? as u64) << 32)
    }
    /// perf's string: its length (padding included), then it, NUL-terminated.
    fn string(&mut self) -> Result<String> {
        let len = self.u32()? as usize;
        Ok(c_string(self.take(len)?))
    }
    fn at_end(&self) -> bool {
        self.at >= self.b.len()
    }
}

/// The text before the first NUL.
fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Refuses a sampled event's attribute: the file is `perf record`'s, not a stat file.
fn refuse_sampled(attr: &[u8], at: u64) -> Result<()> {
    let period = le_u64(attr, ATTR_SAMPLE_PERIOD).unwrap_or(0);
    let freq = le_u64(attr, ATTR_FLAGS).unwrap_or(0) & ATTR_FREQ != 0;
    if period != 0 || freq {
        bail!("a file of samples (perf record's), not of counts (perf stat record's): its event at offset {at:#x} is sampled");
    }
    Ok(())
}

/// A STAT record's count; `None` if it is short.
fn stat_count(body: &[u8]) -> Option<StatCount> {
    let cpu_thread = le_u64(body, 8)?;
    Some(StatCount {
        id: le_u64(body, 0)?,
        cpu: cpu_thread as u32 as i32,
        thread: (cpu_thread >> 32) as u32,
        val: le_u64(body, 16)?,
        ena: le_u64(body, 24)?,
        run: le_u64(body, 32)?,
    })
}

/// A CPU number as a file holds it: -1 (any CPU), or one below MAX_CPUS.
fn cpu_number(cpu: i32, at: u64) -> Result<i32> {
    match cpu == -1 || (0..MAX_CPUS as i32).contains(&cpu) {
        true => Ok(cpu),
        false => damaged(
            at,
            format!("CPU {cpu} (CPUs are numbered below {MAX_CPUS})"),
        ),
    }
}

/// The CPUs of a CPU_MAP record's body (at `at` in the file), in any of perf's three
/// encodings: a list, a bit mask (of 32- or 64-bit words) or a range.
pub(super) fn cpu_map(body: &[u8], at: u64) -> Result<Vec<i32>> {
    let u16_at = |i| le_u16(body, i).map_or_else(|| damaged(at, "a short CPU map"), Ok);
    let bit_set = |words_at: usize, word_len: usize, n: usize| -> Result<Vec<i32>> {
        let Some(bytes) = body.get(words_at..words_at + word_len * n) else {
            return damaged(at, "a short CPU mask");
        };
        (0..bytes.len() * 8)
            .filter(|bit| bytes[bit / 8] & (1 << (bit % 8)) != 0)
            .map(|bit| cpu_number(bit.min(i32::MAX as usize) as i32, at))
            .collect()
    };
    match u16_at(0)? {
        CPU_MAP_CPUS => (0..u16_at(2)? as usize)
            .map(|i| cpu_number(u16_at(4 + 2 * i)? as i16 as i32, at))
            .collect(),
        CPU_MAP_MASK => match u16_at(4)? {
            4 => bit_set(6, 4, u16_at(2)? as usize),
            8 => bit_set(12, 8, u16_at(2)? as usize),
            other => damaged(at, format!("a CPU mask of {other}-byte words")),
        },
        CPU_MAP_RANGE => {
            let any = body.get(2).copied().unwrap_or(0) != 0;
            let (start, end) = (
                cpu_number(u16_at(4)? as i32, at)?,
                cpu_number(u16_at(6)? as i32, at)?,
            );
            Ok(any.then_some(-1).into_iter().chain(start..=end).collect())
        }
        other => damaged(at, format!("a CPU map of unknown encoding {other}")),
    }
}

/// CPU_TOPOLOGY: the lists of CPUs sharing a socket, then a core (skipped); each CPU's
/// core and socket; the lists sharing a die (skipped); each CPU's die, when there.
/// `cpus` holds a place per CPU NRCPUS counted.
fn cpu_topology(b: &mut Bytes, cpus: &mut [CpuPlace]) -> Result<()> {
    let skip_strings = |b: &mut Bytes| -> Result<()> {
        for _ in 0..b.u32()? {
            b.string()?;
        }
        Ok(())
    };
    skip_strings(b)?;
    skip_strings(b)?;
    for place in cpus.iter_mut() {
        let (core, socket) = (b.u32()? as i32, b.u32()? as i32);
        *place = (socket, 0, core);
    }
    // Dies came later (perf 5.3): older files end here.
    if b.at_end() {
        return Ok(());
    }
    skip_strings(b)?;
    for place in cpus.iter_mut() {
        place.1 = b.u32()? as i32;
    }
    Ok(())
}

/// NUMA_TOPOLOGY: each node's number, memory and CPUs.
fn numa_nodes(b: &mut Bytes) -> Result<Vec<Node>> {
    let nr = b.u32()?;
    if nr > MAX_NODES {
        return b.damaged(format!("{nr} NUMA nodes"));
    }
    let mut nodes: Vec<Node> = Vec::new();
    for _ in 0..nr {
        let node = b.u32()?;
        let (mem_total_kb, mem_free_kb) = (b.u64()?, b.u64()?);
        let at = b.offset();
        let cpus = node_cpus(&b.string()?, at)?;
        // A CPU is on one node.
        if nodes.iter().map(|n| n.cpus.len()).sum::<usize>() + cpus.len() > MAX_CPUS {
            return damaged(at, format!("more than {MAX_CPUS} CPUs on NUMA nodes"));
        }
        nodes.push(Node {
            node,
            mem_total_kb,
            mem_free_kb,
            cpus,
        });
    }
    Ok(nodes)
}

/// A node's CPU list (`0-3,8`), of CPUs below MAX_CPUS.
fn node_cpus(list: &str, at: u64) -> Result<Vec<u32>> {
    let mut member = vec![false; MAX_CPUS];
    let number = |s: &str| match s.trim().parse::<usize>() {
        Ok(n) if n < MAX_CPUS => Ok(n),
        _ => damaged(at, format!("a CPU list '{list}'")),
    };
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        member
            .iter_mut()
            .take(last + 1)
            .skip(first)
            .for_each(|m| *m = true);
    }
    Ok((0..MAX_CPUS as u32)
        .filter(|&c| member[c as usize])
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_maps_in_perfs_encodings() {
        // As perf 6.12 writes them: a list, a range (0-1), a 64-bit mask (0, 2).
        assert_eq!(cpu_map(&[0, 0, 1, 0, 0xff, 0xff], 0).unwrap(), [-1]);
        assert_eq!(cpu_map(&[2, 0, 0, 0, 0, 0, 1, 0], 0).unwrap(), [0, 1]);
        let mut mask = vec![1, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0];
        mask.extend_from_slice(&5u64.to_le_bytes());
        assert_eq!(cpu_map(&mask, 0).unwrap(), [0, 2]);
    }

    #[test]
    fn cpu_maps_past_the_kernels_cpus_are_refused() {
        // A range to CPU 65535, and a mask with a bit past CPU 8191.
        let err = cpu_map(&[2, 0, 0, 0, 0, 0, 0xff, 0xff], 0x40).unwrap_err();
        assert_eq!(
            err.to_string(),
            "damaged at offset 0x40: CPU 65535 (CPUs are numbered below 8192)"
        );
        let mut mask = vec![1, 0, 200, 0, 8, 0, 0, 0, 0, 0, 0, 0];
        mask.resize(12 + 8 * 200, 0);
        mask[12 + 1024] = 1;
        assert!(cpu_map(&mask, 0).is_err());
    }

    #[test]
    fn node_lists_are_bounded() {
        assert_eq!(node_cpus("0-3,8", 0).unwrap(), [0, 1, 2, 3, 8]);
        assert!(node_cpus("0-4294967295", 0).is_err());
        // Many overlapping ranges take no more than one bit per CPU.
        let many = vec!["0-8191"; 10_000].join(",");
        assert_eq!(node_cpus(&many, 0).unwrap().len(), MAX_CPUS);
    }
}
