//! bperf.data files made without recording (no privilege needed): src/record/bperf_data/'s
//! own writer given slices shaped as the BPF program sends them.

use std::io::{self, Write};

use bperf::reading::Reading;
use bperf::record::bperf_data::{self, End, Header, RecordedCgroup};

/// The events every synthetic recording has.
pub const EVENTS: [&str; 2] = ["task-clock", "context-switches"];
/// The CPUs it was "recorded" on.
pub const CPUS: [u32; 2] = [0, 1];
/// Its cgroups as (name, path below the mount): the root, a parent and child, another.
pub const CGROUPS: [(&str, &str); 4] = [
    ("/", ""),
    ("web", "web"),
    ("web/api", "web/api"),
    ("db", "db"),
];

fn header() -> Header {
    Header {
        events: EVENTS.map(String::from).into(),
        supported: vec![true; EVENTS.len()],
        cgroups: CGROUPS
            .iter()
            .enumerate()
            .map(|(slot, (name, path))| RecordedCgroup {
                slot,
                id: 100 + slot as u64,
                name: name.to_string(),
                path: path.to_string(),
                container: None,
                ..RecordedCgroup::default()
            })
            .collect(),
        cpus: CPUS.into(),
        clock: "sched_clock".into(),
        command: vec!["workload".into(), "pingpong".into()],
        started: 1.7e9,
        target: "'system wide'".into(),
        tasks: false,
    }
}

/// Slice `i` as the BPF program sends it (struct bperf_slice, padded as raw samples are):
/// on CPU i % 2, in slot i / 4 % 4 (two slices in a row on each CPU), 1-20 µs long,
/// every seventh one cut by a read.
pub fn raw_slice(i: u64) -> Vec<u8> {
    let cpu = (i % 2) as u32;
    let slot = slot_of(i) as u32;
    let length = length_of(i);
    let start = 1_000_000 + (i / 2) * 20_000;
    let mut b = Vec::with_capacity(bperf_data::SLICE_HEAD + EVENTS.len() * 24 + 4);
    for v in [start, length, 100 + u64::from(slot)] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let pid = 1000 + (i % 5) as u32;
    for v in [cpu, slot, pid, pid + (i % 3) as u32] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let mut comm = [0u8; 16];
    let name = format!("task{}", i % 5);
    comm[..name.len()].copy_from_slice(name.as_bytes());
    b.extend_from_slice(&comm);
    b.extend_from_slice(&(EVENTS.len() as u32).to_le_bytes());
    b.extend_from_slice(&u32::from(i % 7 == 0).to_le_bytes());
    for d in deltas(i) {
        for v in [d.counter, d.enabled, d.running] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b.extend_from_slice(&[0; 4]);
    b
}

/// The length of slice `i`, ns.
pub fn length_of(i: u64) -> u64 {
    1_000 + (i * 7919) % 19_000
}

/// The slot of slice `i`.
pub fn slot_of(i: u64) -> usize {
    (i / 4 % 4) as usize
}

/// What each event counted in slice `i`: its length as task-clock, and a context switch
/// unless it was cut.
fn deltas(i: u64) -> [Reading; 2] {
    let length = length_of(i);
    let reading = |counter| Reading {
        counter,
        enabled: length,
        running: length,
    };
    [reading(length), reading(u64::from(i % 7 != 0))]
}

/// Writes a whole recording of `slices` slices to `out`; the totals in its end block are
/// what the slices add up to per CPU.
pub fn write(out: &mut impl Write, slices: u64) -> io::Result<()> {
    write_compressed(out, slices, None)
}

/// As `write`, compressed by zstd at `zstd` if given (bperf record -z).
pub fn write_compressed(out: &mut impl Write, slices: u64, zstd: Option<i32>) -> io::Result<()> {
    let h = header();
    let mut writer = bperf_data::Writer::new(out, &h, zstd)?;
    let mut totals = vec![vec![vec![Reading::default(); CPUS.len()]; EVENTS.len()]; CGROUPS.len()];
    for i in 0..slices {
        assert!(
            writer.write_slice(&raw_slice(i))?,
            "slice {i} is not one of the recording's"
        );
        let (cpu, slot) = ((i % 2) as usize, slot_of(i));
        // Charged to its own slot and the recorded ancestors: the root, and web for web/api.
        let mut charged = vec![0, slot];
        if slot == 2 {
            charged.push(1);
        }
        charged.sort_unstable();
        charged.dedup();
        for c in charged {
            for (e, d) in deltas(i).iter().enumerate() {
                totals[c][e][cpu].add(d);
            }
        }
    }
    let end = End {
        duration_ns: slices * 20_000,
        lost: vec![0; CPUS.len()],
        ring_lost: vec![0; CPUS.len()],
        totals,
        sent: Vec::new(),
    };
    writer.finish(&end).map(drop)
}

/// A recording of no slices whose header names `n` events (`e0`, `e1`, ...), each
/// supported, with its end block's totals (zero) for each of them.
pub fn with_events(n: usize) -> Vec<u8> {
    let mut h = header();
    h.events = (0..n).map(|e| format!("e{e}")).collect();
    h.supported = vec![true; n];
    let writer = bperf_data::Writer::new(Vec::new(), &h, None).unwrap();
    let end = End {
        duration_ns: 1_000_000,
        lost: vec![0; CPUS.len()],
        ring_lost: vec![0; CPUS.len()],
        totals: vec![vec![vec![Reading::default(); CPUS.len()]; n]; CGROUPS.len()],
        sent: Vec::new(),
    };
    writer.finish(&end).unwrap()
}

/// A whole recording of `slices` slices, in memory.
pub fn bytes(slices: u64) -> Vec<u8> {
    compressed_bytes(slices, None)
}

/// A whole recording of `slices` slices, in memory, compressed by zstd at `zstd`.
pub fn compressed_bytes(slices: u64, zstd: Option<i32>) -> Vec<u8> {
    let mut out = Vec::new();
    write_compressed(&mut out, slices, zstd).expect("writing to memory");
    out
}

/// A recording of `slices` slices where a cgroup goes and comes while recording: db
/// (BPF slot 3) is removed halfway and made again, and its later slices are the new
/// db's (kind 5 and kind 4 blocks, bperf record's live cgroups).
pub fn live_bytes(slices: u64) -> Vec<u8> {
    let zeros = vec![vec![Reading::default(); CPUS.len()]; EVENTS.len()];
    let mut writer = bperf_data::Writer::new(Vec::new(), &header(), None).unwrap();
    for i in 0..slices {
        if i == slices / 2 {
            writer.ended(103, &zeros).unwrap();
            let again = RecordedCgroup {
                id: 200,
                name: "db".into(),
                path: "db".into(),
                ..RecordedCgroup::default()
            };
            writer.began(3, &again).unwrap();
        }
        assert!(writer.write_slice(&raw_slice(i)).unwrap());
    }
    let end = End {
        duration_ns: slices * 20_000,
        lost: vec![0; CPUS.len()],
        ring_lost: vec![0; CPUS.len()],
        totals: writer.file_totals(|_| zeros.clone()),
        sent: Vec::new(),
    };
    writer.finish(&end).unwrap()
}
