//! bperf report --timeline F.perfetto-trace (or .pftrace): the slices in Perfetto's own
//! protobuf trace format (ui.perfetto.dev, trace_processor), written as they are read.
//!
//! The trace is one packet sequence:
//! - tracks: a root named after the recording, under it one track per CPU, then one
//!   track per cgroup holding its counter tracks: each event's rate (task-clock and
//!   cpu-clock as CPUs, other events per second) and IPC where cycles and instructions
//!   were recorded;
//! - a slice per record on its CPU's track (a begin and an end event), named after its
//!   cgroup, with the comm, pid, tid, cgroup id, counts and metrics as arguments; names
//!   are interned (InternedData), the comms too, with the sequence's incremental state
//!   cleared whenever the table of comms grows past MAX_INTERNED_COMMS;
//! - the counters' values, one per bin of time where it changed, after the slices.
//!
//! Memory holds the interned names, and the counters' bins: at most MAX_CELLS values,
//! whatever the number of slices. Times are the recording's own clock (ns).

use std::io::{self, Write};

use prost::Message;
use rustc_hash::FxHashMap;

use super::analysis::{charged_of, track_names};
use super::bperf_data::{comm_text, Header, Slice};
use super::timeline::Span;

/// The types of Perfetto's trace format (proto/perfetto_trace.proto), made by build.rs.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
}

use proto::debug_annotation::{NameField as ArgName, Value as ArgValue};
use proto::trace_packet::{Data, OptionalTrustedPacketSequenceId, SequenceFlags};
use proto::track_descriptor::{ChildTracksOrdering, SiblingMergeBehavior, StaticOrDynamicName};
use proto::track_event::{CounterValueField, NameField, Type};
use proto::{
    CounterDescriptor, DebugAnnotation, DebugAnnotationName, EventName, InternedData,
    InternedString, TracePacket, TrackDescriptor, TrackEvent,
};

/// The one packet sequence the trace is written on.
const SEQUENCE: u32 = 1;
/// The field number of Trace.packet: each packet is written as this field.
const TRACE_PACKET_TAG: u8 = (1 << 3) | 2;
/// The track everything is under.
const ROOT_TRACK: u64 = 1;
/// CPU tracks are FIRST_CPU_TRACK + the CPU's position in the header.
const FIRST_CPU_TRACK: u64 = 2;
/// Cgroup tracks are this + slot; counter tracks FIRST_COUNTER_TRACK + a running index.
const FIRST_CGROUP_TRACK: u64 = 1 << 32;
const FIRST_COUNTER_TRACK: u64 = 2 << 32;
/// Past this many interned comms the sequence starts its tables again.
const MAX_INTERNED_COMMS: usize = 1 << 14;
/// The most counter values kept in memory (bins x cgroups x events), and bins.
const MAX_CELLS: usize = 1 << 22;
const MAX_BINS: u64 = 10_000;
/// The shortest bin, ns.
const MIN_BIN: u64 = 10_000;

/// A metric of a cgroup drawn as a counter track.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TrackMetric {
    /// Event i per second.
    Rate(usize),
    /// Event i (a clock, ns) per ns: the CPUs kept busy.
    Cpus(usize),
    /// instructions (i) / cycles (j).
    Ipc(usize, usize),
}

impl TrackMetric {
    fn label(&self, events: &[String]) -> String {
        match *self {
            TrackMetric::Rate(i) => format!("{} /s", events[i]),
            TrackMetric::Cpus(i) => format!("{} (CPUs)", events[i]),
            TrackMetric::Ipc(..) => "IPC".into(),
        }
    }

    /// Its value in a bin of `width` ns that counted `counts`.
    fn value(&self, counts: &[f64], width: u64) -> f64 {
        match *self {
            TrackMetric::Rate(i) => counts[i] * 1e9 / width as f64,
            TrackMetric::Cpus(i) => counts[i] / width as f64,
            TrackMetric::Ipc(ins, cyc) if counts[cyc] > 0.0 => counts[ins] / counts[cyc],
            TrackMetric::Ipc(..) => 0.0,
        }
    }
}

/// The position of the event named `name` (any modifiers after ':').
fn find(events: &[String], name: &str) -> Option<usize> {
    events
        .iter()
        .position(|e| e.split(':').next() == Some(name))
}

/// Each event's counter, and IPC when both cycles and instructions are recorded.
fn metrics(events: &[String]) -> Vec<TrackMetric> {
    let mut out: Vec<TrackMetric> = (0..events.len())
        .map(|i| match events[i].split(':').next() {
            Some("task-clock" | "cpu-clock") => TrackMetric::Cpus(i),
            _ => TrackMetric::Rate(i),
        })
        .collect();
    if let (Some(i), Some(c)) = (find(events, "instructions"), find(events, "cycles")) {
        out.push(TrackMetric::Ipc(i, c));
    }
    out
}

/// What each cgroup counted in each bin of time, its slices' counts spread over the
/// bins they overlap. Only the cgroups that had slices have rows.
struct Bins {
    t0: u64,
    width: u64,
    nr_bins: usize,
    nr_events: usize,
    /// Each slot's row (None: nothing was charged to it).
    row_of: Vec<Option<usize>>,
    charged: Vec<Vec<usize>>,
    /// [row][bin][event]
    counts: Vec<f64>,
}

impl Bins {
    /// Bins over `span` for the slots in `charged` that `seen` says were charged.
    fn new(span: Span, charged: Vec<Vec<usize>>, seen: &[bool], nr_events: usize) -> Bins {
        let mut row_of = vec![None; charged.len()];
        let mut rows = 0;
        for (slot, row) in row_of.iter_mut().enumerate() {
            if seen.get(slot) == Some(&true) {
                *row = Some(rows);
                rows += 1;
            }
        }
        let most = (MAX_CELLS / (rows * nr_events).max(1)).clamp(1, MAX_BINS as usize) as u64;
        let width = bin_width(span.length(), most);
        let nr_bins = span.length().div_ceil(width).max(1) as usize;
        Bins {
            t0: span.t0(),
            width,
            nr_bins,
            nr_events,
            row_of,
            charged,
            counts: vec![0.0; rows * nr_bins * nr_events],
        }
    }

    fn add(&mut self, s: &Slice) {
        let from = s.start.saturating_sub(self.t0);
        let to = from.saturating_add(s.length);
        let last_bin = self.nr_bins - 1;
        let first = ((from / self.width) as usize).min(last_bin);
        let last = ((to.saturating_sub(1) / self.width) as usize).clamp(first, last_bin);
        let length = s.length.max(1) as f64;
        for &slot in self.charged.get(s.slot as usize).into_iter().flatten() {
            let Some(row) = self.row_of.get(slot).copied().flatten() else {
                continue;
            };
            for bin in first..=last {
                // The share of the slice in this bin (all of it when it has no length).
                let share = match s.length {
                    0 => 1.0,
                    _ => {
                        let b0 = (bin as u64).saturating_mul(self.width);
                        let b1 = b0.saturating_add(self.width);
                        (to.min(b1).saturating_sub(from.max(b0))) as f64 / length
                    }
                };
                let at = (row * self.nr_bins + bin) * self.nr_events;
                for (e, d) in s.deltas.iter().enumerate().take(self.nr_events) {
                    self.counts[at + e] += d.scaled().unwrap_or(0.0) * share;
                }
            }
        }
    }

    /// When `bin` starts.
    fn start_of(&self, bin: usize) -> u64 {
        self.t0
            .saturating_add((bin as u64).saturating_mul(self.width))
    }

    /// The counts of `row` in `bin`, by event.
    fn at(&self, row: usize, bin: usize) -> &[f64] {
        let at = (row * self.nr_bins + bin) * self.nr_events;
        &self.counts[at..at + self.nr_events]
    }
}

/// The bin width for `span` ns in at most `most` bins: 1, 2 or 5 times a power of ten
/// ns, at least MIN_BIN.
fn bin_width(span: u64, most: u64) -> u64 {
    let mut decade = MIN_BIN;
    loop {
        for times in [1, 2, 5] {
            // Ends: a width that saturates holds any span in one bin.
            let width = decade.saturating_mul(times);
            if span.div_ceil(width) <= most {
                return width;
            }
        }
        decade = decade.saturating_mul(10);
    }
}

/// What the sequence has interned since its state was last cleared.
#[derive(Default)]
struct Interned {
    next: u64,
    /// Event names: each cgroup's slot (0: not interned).
    slots: Vec<u64>,
    /// Argument names, in the order of `Args` (empty: not interned).
    args: Vec<u64>,
    comms: FxHashMap<[u8; 16], u64>,
    /// Whether the next packet starts the sequence's state again.
    cleared: bool,
}

impl Interned {
    fn reset(&mut self, nr_slots: usize) {
        *self = Interned {
            next: 1,
            slots: vec![0; nr_slots],
            cleared: true,
            ..Interned::default()
        };
    }

    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }
}

/// The arguments of a slice, by position in the interned argument names.
struct Args {
    names: Vec<String>,
    /// The positions of IPC and CPUs among them, when the events allow them.
    ipc: Option<(usize, usize)>,
    cpus: Option<usize>,
}

/// Argument positions before the events' own.
const ARG_COMM: usize = 0;
const ARG_PID: usize = 1;
const ARG_TID: usize = 2;
const ARG_CGROUP_ID: usize = 3;
const ARG_CUT: usize = 4;
const ARG_EVENTS: usize = 5;

impl Args {
    fn new(events: &[String]) -> Args {
        let mut names: Vec<String> = ["comm", "pid", "tid", "cgroup_id", "cut"]
            .map(String::from)
            .into();
        names.extend(events.iter().cloned());
        names.push("IPC".into());
        names.push("CPUs".into());
        Args {
            names,
            ipc: find(events, "instructions").zip(find(events, "cycles")),
            cpus: find(events, "task-clock"),
        }
    }

    fn ipc_arg(&self) -> usize {
        self.names.len() - 2
    }

    fn cpus_arg(&self) -> usize {
        self.names.len() - 1
    }
}

fn arg(name_iid: u64, value: ArgValue) -> DebugAnnotation {
    DebugAnnotation {
        name_field: Some(ArgName::NameIid(name_iid)),
        value: Some(value),
    }
}

/// The Perfetto trace of a recording, written as its slices come.
pub(crate) struct PerfettoTrace<W: Write> {
    out: W,
    /// A packet's bytes.
    buf: Vec<u8>,
    names: Vec<String>,
    events: Vec<String>,
    args: Args,
    metrics: Vec<TrackMetric>,
    interned: Interned,
    bins: Bins,
    /// Each CPU's track, and where its last slice ended: a slice never begins before
    /// the one before it on its CPU ended (Perfetto would nest it).
    cpus: FxHashMap<u32, (u64, u64)>,
    /// Each counter track by (row, metric).
    counter_tracks: Vec<u64>,
}

impl<W: Write> PerfettoTrace<W> {
    /// Writes the tracks; `span`: where the slices lie, `seen`: the slots they were of.
    pub fn begin(out: W, h: &Header, span: Span, seen: &[bool]) -> io::Result<PerfettoTrace<W>> {
        let charged = charged_of(h);
        let mut charged_seen = vec![false; charged.len()];
        for (slot, _) in seen.iter().enumerate().filter(|(_, &s)| s) {
            for &c in charged.get(slot).into_iter().flatten() {
                charged_seen[c] = true;
            }
        }
        let names = track_names(h);
        let mut interned = Interned::default();
        interned.reset(names.len());
        let mut trace = PerfettoTrace {
            out,
            buf: Vec::with_capacity(4096),
            args: Args::new(&h.events),
            metrics: metrics(&h.events),
            bins: Bins::new(span, charged, &charged_seen, h.events.len()),
            events: h.events.clone(),
            names,
            interned,
            cpus: h
                .cpus
                .iter()
                .enumerate()
                .map(|(i, &c)| (c, (FIRST_CPU_TRACK + i as u64, 0)))
                .collect(),
            counter_tracks: Vec::new(),
        };
        trace.write_tracks(h, &charged_seen)?;
        Ok(trace)
    }

    fn write_tracks(&mut self, h: &Header, seen: &[bool]) -> io::Result<()> {
        let root = TrackDescriptor {
            uuid: Some(ROOT_TRACK),
            static_or_dynamic_name: Some(StaticOrDynamicName::Name(format!(
                "bperf record {}",
                h.command.join(" ")
            ))),
            description: Some(format!(
                "bperf record: a slice per CPU each time it stopped running a task of a recorded cgroup; times on the {} clock",
                h.clock
            )),
            child_ordering: Some(ChildTracksOrdering::Explicit as i32),
            ..TrackDescriptor::default()
        };
        self.write_track(root)?;
        for (i, cpu) in h.cpus.iter().enumerate() {
            let track = child_track(
                ROOT_TRACK,
                FIRST_CPU_TRACK + i as u64,
                format!("CPU {cpu}"),
                i,
            );
            self.write_track(track)?;
        }
        let mut next_counter = FIRST_COUNTER_TRACK;
        let slots = (0..self.names.len()).filter(|&s| seen[s]);
        // The cgroups' tracks after the CPUs'.
        for (rank, slot) in (h.cpus.len()..).zip(slots) {
            let group = FIRST_CGROUP_TRACK + slot as u64;
            let name = self.names[slot].clone();
            self.write_track(child_track(ROOT_TRACK, group, name.clone(), rank))?;
            for (m, metric) in self.metrics.clone().iter().enumerate() {
                let mut track = child_track(
                    group,
                    next_counter,
                    format!("{name} {}", metric.label(&self.events)),
                    m,
                );
                track.counter = Some(CounterDescriptor {
                    unit_name: Some(match metric {
                        TrackMetric::Rate(_) => "/s".into(),
                        TrackMetric::Cpus(_) => "CPUs".into(),
                        TrackMetric::Ipc(..) => "IPC".into(),
                    }),
                    ..CounterDescriptor::default()
                });
                self.write_track(track)?;
                self.counter_tracks.push(next_counter);
                next_counter += 1;
            }
        }
        Ok(())
    }

    fn write_track(&mut self, track: TrackDescriptor) -> io::Result<()> {
        self.write_packet(TracePacket {
            data: Some(Data::TrackDescriptor(track)),
            ..sequence_packet()
        })
    }

    fn write_packet(&mut self, packet: TracePacket) -> io::Result<()> {
        self.buf.clear();
        self.buf.push(TRACE_PACKET_TAG);
        packet
            .encode_length_delimited(&mut self.buf)
            .expect("a Vec grows to hold any packet");
        self.out.write_all(&self.buf)
    }

    /// The interned data a slice of `s`'s cgroup and comm needs that the sequence does
    /// not have yet; the iids of its name and comm.
    fn intern(&mut self, s: &Slice) -> (Option<InternedData>, u64, u64) {
        if self.interned.comms.len() >= MAX_INTERNED_COMMS {
            self.interned.reset(self.names.len());
        }
        let mut new = InternedData::default();
        if self.interned.args.is_empty() {
            for name in &self.args.names {
                let iid = self.interned.id();
                self.interned.args.push(iid);
                new.debug_annotation_names.push(DebugAnnotationName {
                    iid: Some(iid),
                    name: Some(name.clone()),
                });
            }
        }
        let slot = s.slot as usize;
        let name = match self.interned.slots.get(slot) {
            Some(&0) => {
                let iid = self.interned.id();
                self.interned.slots[slot] = iid;
                new.event_names.push(EventName {
                    iid: Some(iid),
                    name: Some(self.names[slot].clone()),
                });
                iid
            }
            Some(&iid) => iid,
            None => 0,
        };
        let comm = match self.interned.comms.get(&s.comm) {
            Some(&iid) => iid,
            None => {
                let iid = self.interned.id();
                self.interned.comms.insert(s.comm, iid);
                new.debug_annotation_string_values.push(InternedString {
                    iid: Some(iid),
                    str: Some(comm_text(&s.comm).into_owned().into_bytes()),
                });
                iid
            }
        };
        let nothing_new = new == InternedData::default();
        ((!nothing_new).then_some(new), name, comm)
    }

    /// The sequence flags of the next packet that uses interned data.
    fn flags(&mut self) -> u32 {
        let mut flags = SequenceFlags::SeqNeedsIncrementalState as u32;
        if std::mem::take(&mut self.interned.cleared) {
            flags |= SequenceFlags::SeqIncrementalStateCleared as u32;
        }
        flags
    }

    fn slice_args(&self, s: &Slice, comm: u64) -> Vec<DebugAnnotation> {
        let iid = |i: usize| self.interned.args[i];
        let mut args = vec![
            arg(iid(ARG_COMM), ArgValue::StringValueIid(comm)),
            arg(iid(ARG_PID), ArgValue::UintValue(s.pid.into())),
            arg(iid(ARG_TID), ArgValue::UintValue(s.tid.into())),
            arg(iid(ARG_CGROUP_ID), ArgValue::UintValue(s.cgid)),
        ];
        for (i, d) in s.deltas.iter().enumerate().take(self.events.len()) {
            args.push(arg(iid(ARG_EVENTS + i), ArgValue::UintValue(d.counter)));
        }
        let count = |i: usize| s.deltas.get(i).map_or(0.0, |d| d.counter as f64);
        if let Some((ins, cyc)) = self.args.ipc.filter(|&(_, c)| count(c) > 0.0) {
            let ipc = count(ins) / count(cyc);
            args.push(arg(iid(self.args.ipc_arg()), ArgValue::DoubleValue(ipc)));
        }
        if let Some(tc) = self.args.cpus.filter(|_| s.length > 0) {
            let cpus = count(tc) / s.length as f64;
            args.push(arg(iid(self.args.cpus_arg()), ArgValue::DoubleValue(cpus)));
        }
        if s.cut {
            args.push(arg(iid(ARG_CUT), ArgValue::BoolValue(true)));
        }
        args
    }

    /// Writes `s` as a slice on its CPU's track, and adds its counts to the counters.
    pub fn add(&mut self, s: &Slice) -> io::Result<()> {
        let Some(&(track, last_end)) = self.cpus.get(&s.cpu) else {
            return Ok(());
        };
        self.bins.add(s);
        let begin = s.start.max(last_end);
        let end = s.start.saturating_add(s.length).max(begin);
        self.cpus.insert(s.cpu, (track, end));
        let (interned_data, name, comm) = self.intern(s);
        let event = TrackEvent {
            name_field: Some(NameField::NameIid(name)),
            r#type: Some(Type::SliceBegin as i32),
            track_uuid: Some(track),
            debug_annotations: self.slice_args(s, comm),
            ..TrackEvent::default()
        };
        let flags = self.flags();
        self.write_packet(TracePacket {
            timestamp: Some(begin),
            data: Some(Data::TrackEvent(event)),
            interned_data,
            sequence_flags: Some(flags),
            ..sequence_packet()
        })?;
        let event = TrackEvent {
            r#type: Some(Type::SliceEnd as i32),
            track_uuid: Some(track),
            ..TrackEvent::default()
        };
        self.write_packet(TracePacket {
            timestamp: Some(end),
            data: Some(Data::TrackEvent(event)),
            ..sequence_packet()
        })
    }

    /// Writes the counters (a value at each bin where it changed, and 0 after the last
    /// bin); the writer.
    pub fn finish(mut self) -> io::Result<W> {
        let rows = self.bins.row_of.iter().flatten().count();
        let end = self.bins.start_of(self.bins.nr_bins);
        for row in 0..rows {
            for (m, metric) in self.metrics.clone().iter().enumerate() {
                let track = self.counter_tracks[row * self.metrics.len() + m];
                let mut last = None;
                for bin in 0..self.bins.nr_bins {
                    let value = metric.value(self.bins.at(row, bin), self.bins.width);
                    if last != Some(value) {
                        let ts = self.bins.start_of(bin);
                        self.write_counter(track, ts, value)?;
                        last = Some(value);
                    }
                }
                self.write_counter(track, end, 0.0)?;
            }
        }
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_counter(&mut self, track: u64, ts: u64, value: f64) -> io::Result<()> {
        let event = TrackEvent {
            r#type: Some(Type::Counter as i32),
            track_uuid: Some(track),
            counter_value_field: Some(CounterValueField::DoubleCounterValue(value)),
            ..TrackEvent::default()
        };
        self.write_packet(TracePacket {
            timestamp: Some(ts),
            data: Some(Data::TrackEvent(event)),
            ..sequence_packet()
        })
    }
}

/// A packet on the trace's sequence.
fn sequence_packet() -> TracePacket {
    TracePacket {
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(SEQUENCE),
        ),
        ..TracePacket::default()
    }
}

/// A track named `name` under `parent`, `rank`th among its siblings, never merged with
/// them.
fn child_track(parent: u64, uuid: u64, name: String, rank: usize) -> TrackDescriptor {
    TrackDescriptor {
        uuid: Some(uuid),
        parent_uuid: Some(parent),
        static_or_dynamic_name: Some(StaticOrDynamicName::Name(name)),
        sibling_order_rank: Some(rank.try_into().unwrap_or(i32::MAX)),
        sibling_merge_behavior: Some(SiblingMergeBehavior::None as i32),
        child_ordering: Some(ChildTracksOrdering::Explicit as i32),
        ..TrackDescriptor::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reading::Reading;
    use crate::record::bperf_data::{comm, RecordedCgroup};

    fn header(events: &[&str]) -> Header {
        let cg = |slot: usize, name: &str, path: &str| RecordedCgroup {
            slot,
            id: slot as u64 + 10,
            name: name.into(),
            path: path.into(),
            container: None,
            ..RecordedCgroup::default()
        };
        Header {
            events: events.iter().map(|e| e.to_string()).collect(),
            supported: vec![true; events.len()],
            cgroups: vec![
                cg(0, "web", "web"),
                cg(1, "web/api", "web/api"),
                cg(2, "db", "db"),
            ],
            cpus: vec![0, 3],
            clock: "sched_clock".into(),
            command: vec!["x".into()],
            started: 0.0,
            target: "'system wide'".into(),
            tasks: false,
        }
    }

    fn slice(slot: u32, cpu: u32, start: u64, length: u64, name: &str, counts: &[u64]) -> Slice {
        Slice {
            start,
            length,
            cgid: 10 + u64::from(slot),
            cpu,
            slot,
            pid: 7,
            tid: 8,
            comm: comm(name),
            cut: false,
            deltas: counts
                .iter()
                .map(|&c| Reading {
                    counter: c,
                    enabled: length,
                    running: length,
                })
                .collect(),
        }
    }

    /// The trace of `slices`, decoded with the types it was written with.
    fn trace(h: &Header, slices: &[Slice]) -> Vec<TracePacket> {
        let mut span = Span::default();
        let mut seen = vec![false; h.cgroups.len()];
        for s in slices {
            span.add(s);
            seen[s.slot as usize] = true;
        }
        let mut t = PerfettoTrace::begin(Vec::new(), h, span, &seen).unwrap();
        for s in slices {
            t.add(s).unwrap();
        }
        let bytes = t.finish().unwrap();
        proto::Trace::decode(&bytes[..]).unwrap().packet
    }

    fn tracks(packets: &[TracePacket]) -> FxHashMap<u64, TrackDescriptor> {
        packets
            .iter()
            .filter_map(|p| match &p.data {
                Some(Data::TrackDescriptor(t)) => Some((t.uuid.unwrap(), t.clone())),
                _ => None,
            })
            .collect()
    }

    fn name(t: &TrackDescriptor) -> &str {
        match &t.static_or_dynamic_name {
            Some(StaticOrDynamicName::Name(n)) => n,
            None => "",
        }
    }

    fn events(packets: &[TracePacket]) -> Vec<(u64, &TrackEvent)> {
        packets
            .iter()
            .filter_map(|p| match &p.data {
                Some(Data::TrackEvent(e)) => Some((p.timestamp.unwrap(), e)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn slices_are_on_their_cpus_tracks_with_interned_names() {
        let h = header(&["task-clock", "context-switches"]);
        let slices = [
            slice(0, 0, 1_000, 500, "spin", &[500, 0]),
            slice(2, 3, 1_200, 100, "pong", &[100, 1]),
            slice(0, 0, 1_400, 300, "spin", &[300, 1]),
        ];
        let packets = trace(&h, &slices);
        let tracks = tracks(&packets);
        let cpu_tracks: Vec<&str> = tracks
            .values()
            .filter(|t| t.parent_uuid == Some(ROOT_TRACK) && name(t).starts_with("CPU"))
            .map(name)
            .collect();
        assert_eq!(cpu_tracks.len(), 2, "{cpu_tracks:?}");
        let mut interned_names = FxHashMap::default();
        let mut interned_comms = FxHashMap::default();
        let mut first_flags = None;
        for p in &packets {
            if let Some(d) = &p.interned_data {
                first_flags = first_flags.or(p.sequence_flags);
                for n in &d.event_names {
                    interned_names.insert(n.iid.unwrap(), n.name.clone().unwrap());
                }
                for c in &d.debug_annotation_string_values {
                    interned_comms.insert(c.iid.unwrap(), c.str.clone().unwrap());
                }
            }
        }
        assert_eq!(first_flags, Some(3), "the first packet clears the state");
        assert_eq!(interned_comms.len(), 2);
        let begins: Vec<(u64, &TrackEvent)> = events(&packets)
            .into_iter()
            .filter(|(_, e)| e.r#type == Some(Type::SliceBegin as i32))
            .collect();
        assert_eq!(begins.len(), 3);
        let Some(NameField::NameIid(iid)) = begins[1].1.name_field else {
            panic!("not interned")
        };
        assert_eq!(interned_names[&iid], "db");
        assert_eq!(begins[1].1.track_uuid, Some(FIRST_CPU_TRACK + 1));
        // The second slice on CPU 0 began before the first ended: it waits for it.
        assert_eq!(begins[2].0, 1_500);
        assert_eq!(begins[0].1.debug_annotations.len(), 4 + 2 + 1);
    }

    /// The counter tracks: per cgroup that ran (web counts web/api's too), each event's
    /// rate and IPC; their values over time add up to the slices' counts.
    #[test]
    fn counters_add_up_to_the_slices() {
        let h = header(&["cycles", "instructions", "task-clock"]);
        let slices = [
            slice(1, 0, 0, 1_000_000, "a", &[2_000_000, 3_000_000, 1_000_000]),
            slice(
                2,
                3,
                500_000,
                2_000_000,
                "b",
                &[1_000_000, 500_000, 2_000_000],
            ),
        ];
        let packets = trace(&h, &slices);
        let tracks = tracks(&packets);
        let counters: FxHashMap<u64, String> = tracks
            .values()
            .filter(|t| t.counter.is_some())
            .map(|t| (t.uuid.unwrap(), name(t).to_string()))
            .collect();
        let mut names: Vec<&str> = counters.values().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "db IPC",
                "db cycles /s",
                "db instructions /s",
                "db task-clock (CPUs)",
                "web IPC",
                "web cycles /s",
                "web instructions /s",
                "web task-clock (CPUs)",
                "web/api IPC",
                "web/api cycles /s",
                "web/api instructions /s",
                "web/api task-clock (CPUs)",
            ]
        );
        // Each counter holds its value until the next: the integral is the count.
        let mut by_track: FxHashMap<&str, Vec<(u64, f64)>> = FxHashMap::default();
        for (ts, e) in events(&packets) {
            if let Some(CounterValueField::DoubleCounterValue(v)) = e.counter_value_field {
                let name = &counters[&e.track_uuid.unwrap()];
                by_track.entry(name).or_default().push((ts, v));
            }
        }
        let integral = |name: &str| -> f64 {
            let points = &by_track[name];
            points
                .windows(2)
                .map(|w| w[0].1 * (w[1].0 - w[0].0) as f64)
                .sum()
        };
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(near(integral("web cycles /s") / 1e9, 2e6));
        assert!(near(integral("db task-clock (CPUs)"), 2e6));
        assert!(near(integral("web task-clock (CPUs)"), 1e6));
        let ipc = &by_track["db IPC"];
        assert!(ipc.iter().any(|&(_, v)| near(v, 0.5)), "{ipc:?}");
    }

    #[test]
    fn comms_past_the_table_start_the_sequence_again() {
        let h = header(&["task-clock"]);
        let slices: Vec<Slice> = (0..MAX_INTERNED_COMMS as u64 + 10)
            .map(|i| slice(0, 0, i * 10, 5, &format!("c{i}"), &[5]))
            .collect();
        let packets = trace(&h, &slices);
        let cleared = packets
            .iter()
            .filter(|p| p.sequence_flags.is_some_and(|f| f & 1 != 0))
            .count();
        assert_eq!(cleared, 2);
    }

    #[test]
    fn bins_are_round_and_few() {
        assert_eq!(bin_width(1_000_000_000, 10_000), 100_000);
        assert_eq!(bin_width(60_000_000_000, 10_000), 10_000_000);
        assert_eq!(bin_width(1, 10_000), MIN_BIN);
        assert_eq!(bin_width(u64::MAX, 1), u64::MAX);
    }
}
