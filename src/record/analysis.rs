//! What bperf report works out from a recording: per-cgroup totals, breakdowns and
//! distributions. Plain data in, plain data out.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Result};

use super::file::{RecordedCgroup, Recording, Slice};
use crate::reading::Reading;

/// For each slot, the slots a slice of it is charged to: itself and its recorded
/// ancestors, as the BPF program charges them.
pub fn charged_slots(cgroups: &[RecordedCgroup]) -> Vec<Vec<usize>> {
    let nr = cgroups.iter().map(|c| c.slot + 1).max().unwrap_or(0);
    let mut out = vec![Vec::new(); nr];
    for c in cgroups {
        let path = Path::new(&c.path);
        out[c.slot] = cgroups
            .iter()
            .filter(|a| path.starts_with(&a.path) || a.path.is_empty())
            .map(|a| a.slot)
            .collect();
        out[c.slot].sort_unstable();
        out[c.slot].dedup();
    }
    out
}

/// The totals [slot][event] the slices add up to.
pub fn slice_totals(rec: &Recording) -> Vec<Vec<Reading>> {
    let charged = charged_slots(&rec.header.cgroups);
    let nr_events = rec.header.events.len();
    let mut totals = vec![vec![Reading::default(); nr_events]; charged.len()];
    for s in &rec.slices {
        for &slot in charged.get(s.slot as usize).into_iter().flatten() {
            for (t, d) in totals[slot].iter_mut().zip(&s.deltas) {
                t.add(d);
            }
        }
    }
    totals
}

/// The counters' totals [slot][event], summed over CPUs.
pub fn counter_totals(rec: &Recording) -> Vec<Vec<Reading>> {
    rec.end
        .totals
        .iter()
        .map(|events| {
            events
                .iter()
                .map(|cpus| {
                    let mut sum = Reading::default();
                    cpus.iter().for_each(|r| sum.add(r));
                    sum
                })
                .collect()
        })
        .collect()
}

/// What a breakdown groups slices by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Cgroup,
    Cpu,
    Pid,
    Tid,
    Comm,
}

impl Key {
    pub fn name(self) -> &'static str {
        match self {
            Key::Cgroup => "cgroup",
            Key::Cpu => "cpu",
            Key::Pid => "pid",
            Key::Tid => "tid",
            Key::Comm => "comm",
        }
    }
}

/// --sort's keys: a comma-separated list of cgroup, cpu, pid, tid and comm.
pub fn parse_keys(s: &str) -> Result<Vec<Key>> {
    let all = [Key::Cgroup, Key::Cpu, Key::Pid, Key::Tid, Key::Comm];
    let mut keys = Vec::new();
    for word in s.split(',').map(str::trim) {
        let Some(&k) = all.iter().find(|k| k.name() == word) else {
            bail!("unknown sort key '{word}' (the keys: cgroup, cpu, pid, tid, comm)");
        };
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    Ok(keys)
}

/// The names of the recorded cgroups by slot.
pub fn slot_names(rec: &Recording) -> Vec<String> {
    let mut names = vec![String::new(); charged_slots(&rec.header.cgroups).len()];
    for c in &rec.header.cgroups {
        names[c.slot] = c.name.clone();
    }
    names
}

fn key_value(k: Key, s: &Slice, names: &[String]) -> String {
    match k {
        Key::Cgroup => names.get(s.slot as usize).cloned().unwrap_or_default(),
        Key::Cpu => s.cpu.to_string(),
        Key::Pid => s.pid.to_string(),
        Key::Tid => s.tid.to_string(),
        Key::Comm => s.comm.clone(),
    }
}

/// One row of a breakdown: its key values, and the slices that have them.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub key: Vec<String>,
    pub slices: u64,
    /// Time the slices lasted, ns.
    pub time: u64,
    /// What each event counted in them.
    pub counts: Vec<u64>,
}

/// The slices grouped by `keys` (each slice once, under its innermost cgroup), the
/// group that counted most of the first event first.
pub fn breakdown(rec: &Recording, keys: &[Key]) -> Vec<Group> {
    let names = slot_names(rec);
    let nr_events = rec.header.events.len();
    let mut groups: HashMap<Vec<String>, Group> = HashMap::new();
    for s in &rec.slices {
        let key: Vec<String> = keys.iter().map(|&k| key_value(k, s, &names)).collect();
        let g = groups.entry(key.clone()).or_insert_with(|| Group {
            key,
            slices: 0,
            time: 0,
            counts: vec![0; nr_events],
        });
        // A cut slice goes on in the next one: together they are one.
        g.slices += u64::from(!s.cut);
        g.time += s.length;
        for (c, d) in g.counts.iter_mut().zip(&s.deltas) {
            *c += d.counter;
        }
    }
    let mut out: Vec<Group> = groups.into_values().collect();
    out.sort_by(|a, b| {
        let first = |g: &Group| g.counts.first().copied().unwrap_or(g.time);
        first(b).cmp(&first(a)).then_with(|| a.key.cmp(&b.key))
    });
    out
}

/// A distribution's summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// The summary of `values`; None when there are none.
pub fn spread(mut values: Vec<f64>) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some(Spread {
        n: values.len(),
        mean: values.iter().sum::<f64>() / values.len() as f64,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        max: values[values.len() - 1],
    })
}

/// What a distribution is of, per slice.
#[derive(Clone, Debug, PartialEq)]
pub enum Measure {
    /// The slice's length, µs.
    Length,
    /// What event i counted in it.
    Count(usize),
    /// instructions / cycles (events i and j).
    Ipc(usize, usize),
    /// task-clock (event i) over the slice's length: the CPUs it kept busy.
    Cpus(usize),
}

impl Measure {
    pub fn label(&self, events: &[String]) -> String {
        match self {
            Measure::Length => "slice-us".into(),
            Measure::Count(i) => events[*i].clone(),
            Measure::Ipc(..) => "IPC".into(),
            Measure::Cpus(_) => "CPUs".into(),
        }
    }

    fn of(&self, s: &Slice) -> Option<f64> {
        match *self {
            Measure::Length => Some(s.length as f64 / 1e3),
            Measure::Count(i) => s.deltas.get(i).map(|d| d.counter as f64),
            Measure::Ipc(ins, cyc) => {
                let (i, c) = (s.deltas.get(ins)?.counter, s.deltas.get(cyc)?.counter);
                (c > 0).then(|| i as f64 / c as f64)
            }
            Measure::Cpus(i) => {
                let t = s.deltas.get(i)?.counter;
                (s.length > 0).then(|| t as f64 / s.length as f64)
            }
        }
    }
}

/// What --hist shows: slice length, each event's count, CPUs with task-clock, and IPC
/// when both cycles and instructions were recorded.
pub fn measures(events: &[String]) -> Vec<Measure> {
    let find = |name: &str| {
        events
            .iter()
            .position(|e| e.split(':').next() == Some(name))
    };
    let mut out = vec![Measure::Length];
    out.extend((0..events.len()).map(Measure::Count));
    if let Some(i) = find("task-clock") {
        out.push(Measure::Cpus(i));
    }
    if let (Some(i), Some(c)) = (find("instructions"), find("cycles")) {
        out.push(Measure::Ipc(i, c));
    }
    out
}

/// The distribution of `m` over each cgroup's slices (its innermost cgroup), by slot.
pub fn distributions(rec: &Recording, m: &Measure) -> Vec<(String, Spread)> {
    let names = slot_names(rec);
    let mut per_slot: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    // A slice cut by a read is one with the next: lengths are whole slices.
    let mut open: HashMap<u32, (u32, f64)> = HashMap::new();
    // Ratios of pieces do not add up.
    let joinable = !matches!(m, Measure::Ipc(..) | Measure::Cpus(_));
    for s in &rec.slices {
        let Some(v) = m.of(s) else { continue };
        let Some(values) = per_slot.get_mut(s.slot as usize) else {
            continue;
        };
        let carried = match open.remove(&s.cpu) {
            Some((slot, v0)) if slot == s.slot => v0,
            _ => 0.0,
        };
        if s.cut && joinable {
            open.insert(s.cpu, (s.slot, carried + v));
        } else {
            values.push(carried + v);
        }
    }
    names
        .into_iter()
        .zip(per_slot)
        .filter_map(|(name, values)| spread(values).map(|s| (name, s)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::file::{End, Header};

    fn cg(slot: usize, path: &str) -> RecordedCgroup {
        RecordedCgroup {
            slot,
            id: 100 + slot as u64,
            name: path.to_string(),
            path: path.to_string(),
        }
    }

    fn slice(slot: u32, cpu: u32, comm: &str, length: u64, count: u64) -> Slice {
        Slice {
            start: 0,
            length,
            cgid: 1,
            cpu,
            slot,
            pid: 10 + slot,
            tid: 10 + slot,
            comm: comm.into(),
            cut: false,
            deltas: vec![Reading {
                counter: count,
                enabled: length,
                running: length,
            }],
        }
    }

    fn recording(slices: Vec<Slice>) -> Recording {
        Recording {
            header: Header {
                events: vec!["task-clock".into()],
                supported: vec![true],
                cgroups: vec![cg(0, "a"), cg(1, "a/b"), cg(2, "ab")],
                cpus: vec![0, 1],
                clock: "sched_clock".into(),
                command: vec![],
                started: 0.0,
            },
            slices,
            end: End::default(),
        }
    }

    #[test]
    fn a_slice_counts_in_its_recorded_ancestors() {
        let charged = charged_slots(&recording(vec![]).header.cgroups);
        assert_eq!(charged, vec![vec![0], vec![0, 1], vec![2]]);
        let rec = recording(vec![slice(1, 0, "x", 10, 10), slice(2, 1, "y", 5, 5)]);
        let t = slice_totals(&rec);
        assert_eq!(
            (t[0][0].counter, t[1][0].counter, t[2][0].counter),
            (10, 10, 5)
        );
    }

    #[test]
    fn breakdowns_group_and_sort() {
        let rec = recording(vec![
            slice(0, 0, "x", 10, 10),
            slice(0, 1, "x", 30, 30),
            slice(2, 1, "y", 25, 25),
        ]);
        let by_comm = breakdown(&rec, &[Key::Comm]);
        assert_eq!(by_comm[0].key, vec!["x"]);
        assert_eq!((by_comm[0].slices, by_comm[0].counts[0]), (2, 40));
        let by_cpu = breakdown(&rec, &parse_keys("cpu,cgroup").unwrap());
        assert_eq!(by_cpu[0].key, vec!["1", "a"]);
        assert_eq!(by_cpu[1].key, vec!["1", "ab"]);
        assert!(parse_keys("cpu,nope").is_err());
    }

    #[test]
    fn distributions_join_cut_slices() {
        let mut first = slice(0, 0, "x", 4000, 4000);
        first.cut = true;
        let rec = recording(vec![
            first,
            slice(0, 0, "x", 6000, 6000),
            slice(0, 0, "x", 1000, 1000),
        ]);
        let d = distributions(&rec, &Measure::Length);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].1.n, 2);
        assert_eq!(d[0].1.max, 10.0);
        let cpus = distributions(&rec, &Measure::Cpus(0));
        assert_eq!((cpus[0].1.n, cpus[0].1.max), (3, 1.0));
        let names: Vec<String> = ["task-clock", "cycles", "instructions"]
            .map(String::from)
            .into();
        let labels: Vec<String> = measures(&names).iter().map(|m| m.label(&names)).collect();
        assert_eq!(
            labels,
            [
                "slice-us",
                "task-clock",
                "cycles",
                "instructions",
                "CPUs",
                "IPC"
            ]
        );
        let s = spread(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.p50, s.max, s.mean), (2.0, 3.0, 2.0));
    }
}
