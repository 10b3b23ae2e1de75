//! `perf stat record` files: counts written as perf.data with perf's stat records
//! (THREAD_MAP, CPU_MAP, STAT_CONFIG, STAT, STAT_ROUND), or in perf's pipe format, so
//! that `perf stat report` reads them; and such files, perf's as well as bperf's, read
//! back. (bperf record's own file, bperf.data, is src/record/bperf_data/.) No crate writes the format; the reader is here too, because it must hold up
//! against damaged and hostile files (see read.rs).

mod read;
mod write;

pub use read::{RoundKind, StatReader};
pub use write::round_bytes;

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
pub(crate) type CpuPlace = (i32, i32, i32);

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
pub(crate) const AGGR_NONE: u64 = 0;
pub(crate) const AGGR_GLOBAL: u64 = 1;
pub(crate) const AGGR_SOCKET: u64 = 2;
pub(crate) const AGGR_DIE: u64 = 3;
pub(crate) const AGGR_CORE: u64 = 6;
pub(crate) const AGGR_NODE: u64 = 9;

/// perf's record types (tools/lib/perf/include/perf/event.h).
const THREAD_MAP: u32 = 73;
const CPU_MAP: u32 = 74;
const STAT_CONFIG: u32 = 75;
const STAT: u32 = 76;
const STAT_ROUND: u32 = 77;
const EVENT_UPDATE: u32 = 78;
/// The records that carry a pipe's attributes and feature sections.
const HEADER_ATTR: u32 = 64;
const HEADER_FEATURE: u32 = 80;

/// Feature bits of the header (tools/perf/util/header.h).
const FEAT_NRCPUS: usize = 7;
const FEAT_CMDLINE: usize = 11;
const FEAT_EVENT_DESC: usize = 12;
const FEAT_CPU_TOPOLOGY: usize = 13;
const FEAT_NUMA_TOPOLOGY: usize = 14;
const FEAT_STAT: usize = 19;

const MAGIC: &[u8; 8] = b"PERFILE2";
/// The header's size: a file's, or a pipe's (the magic and this size only).
const HEADER_SIZE: usize = 104;
const PIPE_HEADER_SIZE: u64 = 16;
const SECTION_SIZE: usize = 16;
const STAT_ROUND_INTERVAL: u64 = 0;
const STAT_ROUND_FINAL: u64 = 1;
const CPU_MAP_CPUS: u16 = 0;
const CPU_MAP_MASK: u16 = 1;
const CPU_MAP_RANGE: u16 = 2;
const UPDATE_UNIT: u64 = 0;
const UPDATE_SCALE: u64 = 1;
const UPDATE_NAME: u64 = 2;
/// The size of an EVENT_UPDATE before its payload, as perf counts it (header, kind, id
/// and the largest payload's fixed part).
const EVENT_UPDATE_FIXED: usize = 40;
/// Where perf_event_attr's sample_period and sample_type are.
const ATTR_SAMPLE_PERIOD: usize = 16;
const ATTR_SAMPLE_TYPE: usize = 24;
const CONFIG_AGGR_MODE: u64 = 0;
const CONFIG_INTERVAL: u64 = 1;
const CONFIG_SCALE: u64 = 2;
const CONFIG_AGGR_LEVEL: u64 = 3;
/// Strings in feature sections are padded to this.
const NAME_ALIGN: usize = 64;

impl StatFile {
    /// Reads a whole stat file, perf's or bperf's, file or pipe: what `StatReader`
    /// reads, with every round kept.
    pub fn read<R: std::io::Read + std::io::Seek>(input: R) -> anyhow::Result<StatFile> {
        let mut reader = StatReader::open(input)?;
        let (mut rounds, mut last) = (Vec::new(), None);
        while let Some((kind, round)) = reader.next_round()? {
            match kind {
                RoundKind::Interval => rounds.push(round),
                RoundKind::Final => last = Some(round),
            }
        }
        let mut file = reader.file;
        file.rounds = rounds;
        if let Some(last) = last {
            (file.counts, file.elapsed_ns) = (last.counts, last.time_ns);
        }
        Ok(file)
    }
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

    fn read_err(bytes: Vec<u8>) -> String {
        format!(
            "{:#}",
            StatFile::read(std::io::Cursor::new(bytes)).unwrap_err()
        )
    }

    #[test]
    fn a_file_of_samples_is_refused() {
        let mut file = sample();
        file.events[1].attr[ATTR_SAMPLE_PERIOD] = 1;
        let err = read_err(file.to_bytes());
        assert!(
            err.starts_with("a file of samples (perf record's)"),
            "{err}"
        );
    }

    #[test]
    fn lengths_past_the_file_are_refused_with_their_offset() {
        let good = sample().to_bytes();
        // The data section's size (header offset 48) and the attributes' (32).
        for (at, what) in [(48, "0x28"), (32, "0x18")] {
            let mut bytes = good.clone();
            bytes[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
            let err = read_err(bytes);
            assert!(
                err.starts_with(&format!("damaged at offset {what}: ")),
                "{err}"
            );
        }
        // A record that says it is shorter than its header.
        let mut bytes = good.clone();
        let data_at = le_u64(&good, 40).unwrap() as usize;
        bytes[data_at + 6..data_at + 8].copy_from_slice(&4u16.to_le_bytes());
        let err = read_err(bytes);
        assert!(
            err.contains(&format!(
                "offset {data_at:#x}: a record of type 78 and 4 bytes"
            )),
            "{err}"
        );
        // Cut short: the sections no longer fit.
        let err = read_err(good[..good.len() - 1].to_vec());
        assert!(err.starts_with("damaged at offset"), "{err}");
    }

    #[test]
    fn a_pipe_reads_back() {
        let file = StatFile {
            interval_ms: 0,
            rounds: Vec::new(),
            ..sample()
        };
        let bytes = file.to_pipe_bytes();
        assert_eq!(&bytes[..16], b"PERFILE2\x10\0\0\0\0\0\0\0");
        let back = StatFile::read(std::io::Cursor::new(bytes.clone())).unwrap();
        // A pipe has no command line, and names its events in records.
        assert!(back.cmdline.is_empty());
        let names: Vec<_> = back.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["task-clock", "context-switches"]);
        assert_eq!(
            (back.counts, back.elapsed_ns),
            (file.counts, file.elapsed_ns)
        );
        assert_eq!(back.cpus, file.cpus);
        // A pipe that ends inside a record is refused where that record starts.
        let err = read_err(bytes[..bytes.len() - 3].to_vec());
        assert!(
            err.contains("the data ends inside a record of 24 bytes"),
            "{err}"
        );
    }
}
