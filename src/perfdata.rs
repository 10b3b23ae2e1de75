//! `perf stat record` files: counts written as perf.data with perf's stat records
//! (THREAD_MAP, CPU_MAP, STAT_CONFIG, STAT, STAT_ROUND), so that `perf stat report`
//! reads them, and read back, perf's as well as bperf's. Reading goes through the
//! linux-perf-data crate; no crate writes the format, so writing is here.

use std::io::{Read, Seek};

use anyhow::{bail, Context, Result};
use linux_perf_data::{Feature, PerfFileReader, PerfFileRecord};

/// A recorded event: its name, its perf_event_attr as the kernel takes it, and the ids
/// its counts are recorded under (perf: one per CPU and thread; bperf: one).
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedEvent {
    pub name: String,
    pub attr: Vec<u8>,
    pub ids: Vec<u64>,
}

/// One count: an event's id, the CPU it was counted on (-1: all of them, or the task),
/// and its value with enabled and running times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatCount {
    pub id: u64,
    pub cpu: i32,
    pub thread: u32,
    pub val: u64,
    pub ena: u64,
    pub run: u64,
}

/// One interval's counts (-I), and when it ended (ns since counting started).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Round {
    pub time_ns: u64,
    pub counts: Vec<StatCount>,
}

/// A CPU's (socket, die, core).
pub type CpuPlace = (i32, i32, i32);

/// A NUMA node as perf's NUMA_TOPOLOGY feature tells it: its number, memory (kB, total
/// and free) and CPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    pub node: u32,
    pub mem_total_kb: u64,
    pub mem_free_kb: u64,
    pub cpus: Vec<u32>,
}

/// Where each CPU is, as perf's CPU_TOPOLOGY feature tells it: perf stat report needs
/// it to print counts per CPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// How many CPUs online.
    pub online: u32,
    /// Each CPU's (socket, die, core), CPU 0 first, up to the highest present.
    pub cpus: Vec<CpuPlace>,
    /// The NUMA nodes (perf stat report needs them for --per-node).
    pub nodes: Vec<Node>,
}

/// What a stat file holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatFile {
    /// The command line that recorded it, the program first.
    pub cmdline: Vec<String>,
    pub events: Vec<RecordedEvent>,
    /// The CPUs counted; `[-1]` for counts of a task or of all CPUs together.
    pub cpus: Vec<i32>,
    /// perf's aggregation mode: 0 per CPU (-A), 1 global.
    pub aggr_mode: u64,
    /// -I's interval (ms), 0 without.
    pub interval_ms: u64,
    /// With -I: each interval's counts.
    pub rounds: Vec<Round>,
    /// The counts of the whole run (the final round's).
    pub counts: Vec<StatCount>,
    /// The time elapsed (ns), from the final round.
    pub elapsed_ns: u64,
    /// Written for counts per CPU.
    pub topology: Option<Topology>,
}

/// perf's aggregation modes (enum aggr_mode in tools/perf/util/stat.h).
pub const AGGR_NONE: u64 = 0;
pub const AGGR_GLOBAL: u64 = 1;
pub const AGGR_SOCKET: u64 = 2;
pub const AGGR_DIE: u64 = 3;
pub const AGGR_CORE: u64 = 6;
pub const AGGR_NODE: u64 = 9;

/// perf's record types (tools/lib/perf/include/perf/event.h).
const THREAD_MAP: u32 = 73;
const CPU_MAP: u32 = 74;
const STAT_CONFIG: u32 = 75;
const STAT: u32 = 76;
const STAT_ROUND: u32 = 77;
const EVENT_UPDATE: u32 = 78;

/// Feature bits of the header (tools/perf/util/header.h).
const FEAT_NRCPUS: usize = 7;
const FEAT_CMDLINE: usize = 11;
const FEAT_EVENT_DESC: usize = 12;
const FEAT_CPU_TOPOLOGY: usize = 13;
const FEAT_NUMA_TOPOLOGY: usize = 14;
const FEAT_STAT: usize = 19;

const HEADER_SIZE: usize = 104;
const SECTION_SIZE: usize = 16;
const STAT_ROUND_INTERVAL: u64 = 0;
const STAT_ROUND_FINAL: u64 = 1;
const CPU_MAP_CPUS: u16 = 0;
const CPU_MAP_MASK: u16 = 1;
const CPU_MAP_RANGE: u16 = 2;
const UPDATE_UNIT: u64 = 0;
const UPDATE_SCALE: u64 = 1;
const CONFIG_AGGR_MODE: u64 = 0;
const CONFIG_INTERVAL: u64 = 1;
const CONFIG_SCALE: u64 = 2;
const CONFIG_AGGR_LEVEL: u64 = 3;
/// Strings in feature sections are padded to this.
const NAME_ALIGN: usize = 64;

/// A little-endian byte buffer.
#[derive(Default)]
struct Buf(Vec<u8>);

impl Buf {
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn pad_to(&mut self, align: usize) {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
    }
    /// perf's feature-section string: its padded length, then it, NUL-padded.
    fn string(&mut self, s: &str) {
        let len = (s.len() + 1).next_multiple_of(NAME_ALIGN);
        self.u32(len as u32);
        let start = self.0.len();
        self.0.extend_from_slice(s.as_bytes());
        self.0.resize(start + len, 0);
    }
    /// A record: perf_event_header (type, misc, size), then the body.
    fn record(&mut self, kind: u32, body: &Buf) {
        self.u32(kind);
        self.u16(0);
        self.u16((8 + body.0.len()) as u16);
        self.0.extend_from_slice(&body.0);
    }
}

impl StatFile {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let ids_at = HEADER_SIZE;
        let nr_ids: usize = self.events.iter().map(|e| e.ids.len()).sum();
        let attrs_at = ids_at + 8 * nr_ids;
        let attr_size = self.events.first().map_or(0, |e| e.attr.len());
        let file_attr_size = attr_size + SECTION_SIZE;
        let data_at = attrs_at + file_attr_size * self.events.len();
        let data = self.data_records();
        let features_at = data_at + data.len();
        // In the order of their bits.
        let mut features = Vec::new();
        if let Some(t) = &self.topology {
            features.push((FEAT_NRCPUS, t.nrcpus_section()));
        }
        features.push((FEAT_CMDLINE, self.cmdline_section()));
        features.push((FEAT_EVENT_DESC, self.event_desc_section()));
        if let Some(t) = &self.topology {
            features.push((FEAT_CPU_TOPOLOGY, t.section()));
            features.push((FEAT_NUMA_TOPOLOGY, t.numa_section()));
        }
        features.push((FEAT_STAT, Vec::new()));

        let mut b = Buf::default();
        b.0.extend_from_slice(b"PERFILE2");
        b.u64(HEADER_SIZE as u64);
        b.u64(file_attr_size as u64);
        for (offset, size) in [
            (attrs_at, file_attr_size * self.events.len()),
            (data_at, data.len()),
            (0, 0),
        ] {
            b.u64(offset as u64);
            b.u64(size as u64);
        }
        let mut bitmap = [0u64; 4];
        for (bit, _) in &features {
            bitmap[bit / 64] |= 1 << (bit % 64);
        }
        bitmap.iter().for_each(|w| b.u64(*w));
        for e in &self.events {
            e.ids.iter().for_each(|id| b.u64(*id));
        }
        let mut at = ids_at;
        for e in &self.events {
            b.0.extend_from_slice(&e.attr);
            b.u64(at as u64);
            b.u64(8 * e.ids.len() as u64);
            at += 8 * e.ids.len();
        }
        b.0.extend_from_slice(&data);
        // The features' sections, then their contents.
        let mut at = features_at + SECTION_SIZE * features.len();
        for (_, content) in &features {
            b.u64(at as u64);
            b.u64(content.len() as u64);
            at += content.len();
        }
        for (_, content) in &features {
            b.0.extend_from_slice(content);
        }
        b.0
    }

    fn data_records(&self) -> Vec<u8> {
        let mut b = Buf::default();
        for e in &self.events {
            let (Some((unit, scale)), Some(&id)) = (clock_unit(&e.name), e.ids.first()) else {
                continue;
            };
            {
                let mut r = Buf::default();
                r.u64(UPDATE_UNIT);
                r.u64(id);
                r.0.extend_from_slice(unit.as_bytes());
                r.0.resize(16 + 24, 0);
                b.record(EVENT_UPDATE, &r);
                let mut r = Buf::default();
                r.u64(UPDATE_SCALE);
                r.u64(id);
                r.0.extend_from_slice(&scale.to_le_bytes());
                r.0.resize(16 + 24, 0);
                b.record(EVENT_UPDATE, &r);
            }
        }
        let mut r = Buf::default();
        r.u64(1);
        r.u64(u64::MAX); // pid -1: no one thread
        r.0.extend_from_slice(&[0; 16]);
        b.record(THREAD_MAP, &r);
        let mut r = Buf::default();
        r.u16(CPU_MAP_CPUS);
        r.u16(self.cpus.len() as u16);
        self.cpus.iter().for_each(|c| r.u16(*c as u16));
        r.pad_to(8);
        b.record(CPU_MAP, &r);
        let mut r = Buf::default();
        let terms = [
            (CONFIG_AGGR_MODE, self.aggr_mode),
            (CONFIG_INTERVAL, self.interval_ms),
            (CONFIG_SCALE, 1),
            (CONFIG_AGGR_LEVEL, 0),
        ];
        r.u64(terms.len() as u64);
        for (tag, val) in terms {
            r.u64(tag);
            r.u64(val);
        }
        b.record(STAT_CONFIG, &r);
        for round in &self.rounds {
            stat_round(&mut b, &round.counts, STAT_ROUND_INTERVAL, round.time_ns);
        }
        // As perf: with intervals, no final round (perf stat report would print it as
        // one more interval).
        if self.interval_ms == 0 {
            stat_round(&mut b, &self.counts, STAT_ROUND_FINAL, self.elapsed_ns);
        }
        b.0
    }

    fn cmdline_section(&self) -> Vec<u8> {
        let mut b = Buf::default();
        b.u32(self.cmdline.len() as u32);
        self.cmdline.iter().for_each(|s| b.string(s));
        b.0
    }

    fn event_desc_section(&self) -> Vec<u8> {
        let mut b = Buf::default();
        b.u32(self.events.len() as u32);
        b.u32(self.events.first().map_or(0, |e| e.attr.len()) as u32);
        for e in &self.events {
            b.0.extend_from_slice(&e.attr);
            b.u32(e.ids.len() as u32);
            b.string(&e.name);
            e.ids.iter().for_each(|id| b.u64(*id));
        }
        b.0
    }

    /// Reads a stat file, perf's or bperf's.
    pub fn read<R: Read + Seek>(input: R) -> Result<StatFile> {
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(input).context("not a perf.data file")?;
        let nrcpus = perf_file.feature_section_data(Feature::NRCPUS);
        let topology = perf_file.feature_section_data(Feature::CPU_TOPOLOGY);
        let mut file = StatFile {
            cmdline: (perf_file.cmdline().ok().flatten().unwrap_or_default())
                .into_iter()
                .map(str::to_string)
                .collect(),
            topology: nrcpus.zip(topology).and_then(|(n, t)| {
                let mut topology = Topology::parse(n, t)?;
                let numa = perf_file.feature_section_data(Feature::NUMA_TOPOLOGY);
                topology.nodes = numa.map(Topology::parse_numa).unwrap_or_default();
                Some(topology)
            }),
            ..StatFile::default()
        };
        for a in perf_file.event_attributes() {
            file.events.push(RecordedEvent {
                name: a.name().unwrap_or("unknown").to_string(),
                attr: Vec::new(),
                ids: a.event_ids.clone(),
            });
        }
        let mut stat_records = false;
        while let Some(record) = record_iter.next_record(&mut perf_file)? {
            let PerfFileRecord::UserRecord(r) = record else {
                continue;
            };
            let body = r.data.as_slice();
            let kind = linux_perf_data::linux_perf_event_reader::RecordType::from(r.record_type).0;
            stat_records |= file.take_record(kind, &body)?;
        }
        if !stat_records {
            bail!("no stat data in the file (was it written by perf stat record?)");
        }
        Ok(file)
    }

    /// Takes in one record's body; whether it was a stat record.
    fn take_record(&mut self, kind: u32, body: &[u8]) -> Result<bool> {
        let u64_at = |i: usize| le_u64(body, i).context("short stat record");
        match kind {
            STAT => self.counts.push(StatCount {
                id: u64_at(0)?,
                cpu: u64_at(8)? as u32 as i32,
                thread: (u64_at(8)? >> 32) as u32,
                val: u64_at(16)?,
                ena: u64_at(24)?,
                run: u64_at(32)?,
            }),
            // A round ends the counts read since the round before.
            STAT_ROUND => {
                let (kind, time_ns) = (u64_at(0)?, u64_at(8)?);
                let counts = std::mem::take(&mut self.counts);
                match kind {
                    STAT_ROUND_FINAL => {
                        self.elapsed_ns = time_ns;
                        self.counts = counts;
                    }
                    _ => self.rounds.push(Round { time_ns, counts }),
                }
            }
            STAT_CONFIG => {
                for i in 0..u64_at(0)? as usize {
                    let (tag, val) = (u64_at(8 + 16 * i)?, u64_at(16 + 16 * i)?);
                    match tag {
                        CONFIG_AGGR_MODE => self.aggr_mode = val,
                        CONFIG_INTERVAL => self.interval_ms = val,
                        _ => {}
                    }
                }
            }
            CPU_MAP => self.cpus = cpu_map(body)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl Topology {
    /// The topology of a file's NRCPUS and CPU_TOPOLOGY sections; `None` if they do
    /// not hold one.
    fn parse(nrcpus: &[u8], section: &[u8]) -> Option<Topology> {
        let u32_at = le_u32;
        let (avail, online) = (u32_at(nrcpus, 0)? as usize, u32_at(nrcpus, 4)?);
        // Skips a count of strings and the strings; the offset after them.
        let skip_strings = |at: usize| -> Option<usize> {
            let mut at_ = at + 4;
            for _ in 0..u32_at(section, at)? {
                at_ += 4 + u32_at(section, at_)? as usize;
            }
            Some(at_)
        };
        let ids_at = skip_strings(skip_strings(0)?)?;
        let dies_at = skip_strings(ids_at + 8 * avail);
        let cpus = (0..avail)
            .map(|c| {
                let core = u32_at(section, ids_at + 8 * c)? as i32;
                let socket = u32_at(section, ids_at + 8 * c + 4)? as i32;
                let die = dies_at
                    .and_then(|at| u32_at(section, at + 4 * c))
                    .unwrap_or(0) as i32;
                Some((socket, die, core))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Topology {
            online,
            cpus,
            nodes: Vec::new(),
        })
    }

    /// NUMA_TOPOLOGY: each node's number, memory and CPUs.
    fn numa_section(&self) -> Vec<u8> {
        let mut b = Buf::default();
        b.u32(self.nodes.len() as u32);
        for n in &self.nodes {
            b.u32(n.node);
            b.u64(n.mem_total_kb);
            b.u64(n.mem_free_kb);
            b.string(&cpu_list(&n.cpus));
        }
        b.0
    }

    /// The nodes of a NUMA_TOPOLOGY section; none if it holds none.
    fn parse_numa(section: &[u8]) -> Vec<Node> {
        let u32_at = |i| le_u32(section, i);
        let u64_at = |i| le_u64(section, i);
        let mut nodes = Vec::new();
        let mut at = 4;
        for _ in 0..u32_at(0).unwrap_or(0) {
            let (Some(node), Some(total), Some(free), Some(len)) =
                (u32_at(at), u64_at(at + 4), u64_at(at + 12), u32_at(at + 20))
            else {
                break;
            };
            let text = section
                .get(at + 24..at + 24 + len as usize)
                .unwrap_or_default();
            let list = String::from_utf8_lossy(text);
            nodes.push(Node {
                node,
                mem_total_kb: total,
                mem_free_kb: free,
                cpus: crate::cpus::parse_list(list.trim_end_matches('\0')).unwrap_or_default(),
            });
            at += 24 + len as usize;
        }
        nodes
    }

    /// NRCPUS: the CPUs perf calls available (up to the highest present), then online.
    fn nrcpus_section(&self) -> Vec<u8> {
        let mut b = Buf::default();
        b.u32(self.cpus.len() as u32);
        b.u32(self.online);
        b.0
    }

    /// CPU_TOPOLOGY: the lists of CPUs sharing a socket, then a core; each CPU's core
    /// and socket; the lists sharing a die; each CPU's die.
    fn section(&self) -> Vec<u8> {
        let mut b = Buf::default();
        let lists = |b: &mut Buf, key: &dyn Fn(&CpuPlace) -> CpuPlace| {
            let mut seen: Vec<CpuPlace> = Vec::new();
            for ids in &self.cpus {
                if !seen.contains(&key(ids)) {
                    seen.push(key(ids));
                }
            }
            b.u32(seen.len() as u32);
            for k in seen {
                let cpus: Vec<u32> = (0..self.cpus.len() as u32)
                    .filter(|&c| key(&self.cpus[c as usize]) == k)
                    .collect();
                b.string(&cpu_list(&cpus));
            }
        };
        lists(&mut b, &|&(s, _, _)| (s, 0, 0));
        lists(&mut b, &|&ids| ids);
        for &(socket, _, core) in &self.cpus {
            b.u32(core as u32);
            b.u32(socket as u32);
        }
        lists(&mut b, &|&(s, d, _)| (s, d, 0));
        for &(_, die, _) in &self.cpus {
            b.u32(die as u32);
        }
        b.0
    }
}

/// A CPU list as the kernel writes one: `0-3,8,10-11`.
fn cpu_list(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(match i == j {
            true => cpus[i].to_string(),
            false => format!("{}-{}", cpus[i], cpus[j]),
        });
        i = j + 1;
    }
    parts.join(",")
}

/// A round's STAT records, then the STAT_ROUND that ends it.
fn stat_round(b: &mut Buf, counts: &[StatCount], kind: u64, time_ns: u64) {
    for c in counts {
        let mut r = Buf::default();
        r.u64(c.id);
        r.u32(c.cpu as u32);
        r.u32(c.thread);
        r.u64(c.val);
        r.u64(c.ena);
        r.u64(c.run);
        b.record(STAT, &r);
    }
    let mut r = Buf::default();
    r.u64(kind);
    r.u64(time_ns);
    b.record(STAT_ROUND, &r);
}

/// The `N` bytes at `at` of `b`; `None` past its end.
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Little-endian numbers of a file's records and sections; `None` past the end.
fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    bytes_at(b, at).map(u16::from_le_bytes)
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    bytes_at(b, at).map(u32::from_le_bytes)
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    bytes_at(b, at).map(u64::from_le_bytes)
}

/// The CPUs of a CPU_MAP record's body, in any of perf's three encodings.
fn cpu_map(body: &[u8]) -> Result<Vec<i32>> {
    let u16_at = |i| le_u16(body, i).context("short cpu map");
    let bit_set = |words_at: usize, word_len: usize, n: usize| -> Result<Vec<i32>> {
        let bytes = body
            .get(words_at..words_at + word_len * n)
            .context("short cpu mask")?;
        Ok((0..bytes.len() * 8)
            .filter(|bit| bytes[bit / 8] & (1 << (bit % 8)) != 0)
            .map(|bit| bit as i32)
            .collect())
    };
    match u16_at(0)? {
        CPU_MAP_CPUS => (0..u16_at(2)? as usize)
            .map(|i| u16_at(4 + 2 * i).map(|c| c as i16 as i32))
            .collect(),
        CPU_MAP_MASK => match u16_at(4)? {
            4 => bit_set(6, 4, u16_at(2)? as usize),
            _ => bit_set(12, 8, u16_at(2)? as usize),
        },
        CPU_MAP_RANGE => {
            let any = body.get(2).copied().unwrap_or(0) != 0;
            let (start, end) = (u16_at(4)? as i32, u16_at(6)? as i32);
            Ok(any.then_some(-1).into_iter().chain(start..=end).collect())
        }
        other => bail!("unknown cpu map encoding {other}"),
    }
}

/// The unit and scale perf records for an event it shows in another unit than it counts.
fn clock_unit(name: &str) -> Option<(&'static str, f64)> {
    // The name as printed: `cpu-clock:u`, or with -A `cpu-clock [software]`.
    let base = name.split([':', ' ']).next().unwrap_or(name);
    matches!(base, "task-clock" | "cpu-clock").then_some(("msec", 1e-6))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StatFile {
        let attr = |config: u8| {
            let mut a = vec![0u8; 136];
            a[0] = 1; // software
            a[4] = 136;
            a[8] = config;
            a
        };
        StatFile {
            cmdline: vec!["/usr/bin/bperf".into(), "stat".into(), "record".into()],
            events: vec![
                RecordedEvent {
                    name: "task-clock".into(),
                    attr: attr(1),
                    ids: vec![7],
                },
                RecordedEvent {
                    name: "context-switches".into(),
                    attr: attr(3),
                    ids: vec![8, 9],
                },
            ],
            cpus: vec![0, 1],
            aggr_mode: AGGR_NONE,
            interval_ms: 100,
            rounds: vec![Round {
                time_ns: 100_000_000,
                counts: vec![StatCount {
                    id: 8,
                    cpu: 0,
                    thread: 0,
                    val: 1,
                    ena: 10,
                    run: 10,
                }],
            }],
            counts: vec![
                StatCount {
                    id: 7,
                    cpu: 1,
                    thread: 0,
                    val: 1000,
                    ena: 2000,
                    run: 1500,
                },
                StatCount {
                    id: 8,
                    cpu: 0,
                    thread: 0,
                    val: 3,
                    ena: 2000,
                    run: 2000,
                },
            ],
            elapsed_ns: 123_456_789,
            topology: None,
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let file = sample();
        let bytes = file.to_bytes();
        assert_eq!(&bytes[..8], b"PERFILE2");
        let back = StatFile::read(std::io::Cursor::new(bytes)).unwrap();
        assert_eq!(back.cmdline, file.cmdline);
        assert_eq!(back.cpus, file.cpus);
        assert_eq!(back.aggr_mode, file.aggr_mode);
        assert_eq!((back.interval_ms, &back.rounds), (100, &file.rounds));
        let whole = StatFile {
            interval_ms: 0,
            rounds: Vec::new(),
            ..file.clone()
        };
        let back = StatFile::read(std::io::Cursor::new(whole.to_bytes())).unwrap();
        assert_eq!(back.counts, file.counts);
        assert_eq!(back.elapsed_ns, file.elapsed_ns);
        let placed = StatFile {
            topology: Some(Topology {
                online: 4,
                cpus: vec![(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 1, 1)],
                nodes: vec![
                    Node {
                        node: 0,
                        mem_total_kb: 1000,
                        mem_free_kb: 500,
                        cpus: vec![0, 1],
                    },
                    Node {
                        node: 1,
                        mem_total_kb: 2000,
                        mem_free_kb: 100,
                        cpus: vec![2, 3],
                    },
                ],
            }),
            ..whole.clone()
        };
        let back = StatFile::read(std::io::Cursor::new(placed.to_bytes())).unwrap();
        assert_eq!(back.topology, placed.topology);
        let names: Vec<_> = back
            .events
            .iter()
            .map(|e| (e.name.as_str(), e.ids.clone()))
            .collect();
        assert_eq!(
            names,
            [("task-clock", vec![7]), ("context-switches", vec![8, 9])]
        );
    }

    #[test]
    fn cpu_maps_in_perfs_encodings() {
        // As perf 6.12 writes them: a list, a range (0-1), a 64-bit mask (0, 2).
        assert_eq!(cpu_map(&[0, 0, 1, 0, 0xff, 0xff]).unwrap(), [-1]);
        assert_eq!(cpu_map(&[2, 0, 0, 0, 0, 0, 1, 0]).unwrap(), [0, 1]);
        let mut mask = vec![1, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0];
        mask.extend_from_slice(&5u64.to_le_bytes());
        assert_eq!(cpu_map(&mask).unwrap(), [0, 2]);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[5]), "5");
    }

    #[test]
    fn strings_are_padded_as_perf_pads_them() {
        let mut b = Buf::default();
        b.string("stat");
        assert_eq!(b.0.len(), 4 + 64);
        assert_eq!(&b.0[..4], &64u32.to_le_bytes());
    }
}
