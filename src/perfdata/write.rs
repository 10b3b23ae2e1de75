//! Writing stat files as perf writes them: perf.data (a header, the attributes and
//! their ids, the records, then the feature sections) or perf's pipe format (a short
//! header, then records only: the attributes and event names travel as records).

use super::*;

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
    /// The file's bytes, as perf.data.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
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
        self.event_updates(&mut b, false);
        self.maps_and_config(&mut b);
        self.rounds(&mut b);
        b.0
    }

    /// The bytes of perf's pipe format (`perf stat record -o -`): what `pipe_header`
    /// writes, then the rounds. A pipe has no feature sections: perf stat report then
    /// prints its counts "for 'pipe'".
    #[cfg(test)]
    pub(crate) fn to_pipe_bytes(&self) -> Vec<u8> {
        let mut b = Buf(self.pipe_header());
        self.rounds(&mut b);
        b.0
    }

    /// The start of perf's pipe format: the pipe header, each event's attribute and
    /// ids, the events' units, scales and names, the thread map, CPU map and stat
    /// config; the rounds may follow as they are counted (`round_bytes`).
    pub fn pipe_header(&self) -> Vec<u8> {
        let mut b = Buf::default();
        b.0.extend_from_slice(MAGIC);
        b.u64(PIPE_HEADER_SIZE);
        for e in &self.events {
            let mut r = Buf::default();
            r.0.extend_from_slice(&e.attr);
            // As perf in pipe mode: no sample type, which perf script would otherwise
            // check against samples a stat stream does not have.
            if let Some(sample_type) = r.0.get_mut(ATTR_SAMPLE_TYPE..ATTR_SAMPLE_TYPE + 8) {
                sample_type.fill(0);
            }
            e.ids.iter().for_each(|id| r.u64(*id));
            b.record(HEADER_ATTR, &r);
        }
        self.event_updates(&mut b, true);
        self.maps_and_config(&mut b);
        b.0
    }

    /// EVENT_UPDATE records: the unit and scale of the events perf shows in another
    /// unit than it counts, and with `names` (pipe mode) every event's name.
    fn event_updates(&self, b: &mut Buf, names: bool) {
        for e in &self.events {
            let Some(&id) = e.ids.first() else {
                continue;
            };
            if let Some((unit, scale)) = clock_unit(&e.name) {
                event_update(b, UPDATE_UNIT, id, &[unit.as_bytes(), &[0]].concat());
                event_update(b, UPDATE_SCALE, id, &scale.to_le_bytes());
            }
            if names {
                event_update(b, UPDATE_NAME, id, &[e.name.as_bytes(), &[0]].concat());
            }
        }
    }

    /// THREAD_MAP, CPU_MAP and STAT_CONFIG: whose counts, on which CPUs, and how.
    fn maps_and_config(&self, b: &mut Buf) {
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
    }

    /// Each interval's counts, or those of the whole run.
    fn rounds(&self, b: &mut Buf) {
        for round in &self.rounds {
            stat_round(b, &round.counts, STAT_ROUND_INTERVAL, round.time_ns);
        }
        // As perf: with intervals, no final round (perf stat report would print it as
        // one more interval).
        if self.interval_ms == 0 {
            stat_round(b, &self.counts, STAT_ROUND_FINAL, self.elapsed_ns);
        }
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
}

impl Topology {
    /// NUMA_TOPOLOGY: each node's number, memory and CPUs.
    fn numa_section(&self) -> Vec<u8> {
        let mut b = Buf::default();
        b.u32(self.nodes.len() as u32);
        for n in &self.nodes {
            b.u32(n.node);
            b.u64(n.mem_total_kb);
            b.u64(n.mem_free_kb);
            b.string(&crate::cpus::format_list(&n.cpus));
        }
        b.0
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
                b.string(&crate::cpus::format_list(&cpus));
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

/// One round's records: its counts, then the STAT_ROUND that ends it.
pub fn round_bytes(round: &Round, kind: RoundKind) -> Vec<u8> {
    let mut b = Buf::default();
    let kind = match kind {
        RoundKind::Interval => STAT_ROUND_INTERVAL,
        RoundKind::Final => STAT_ROUND_FINAL,
    };
    stat_round(&mut b, &round.counts, kind, round.time_ns);
    b.0
}

/// An EVENT_UPDATE record as perf sizes one: its fixed part is that of the largest
/// kind (a CPU map's header), and the whole is padded to 8 bytes.
fn event_update(b: &mut Buf, kind: u64, id: u64, payload: &[u8]) {
    let mut r = Buf::default();
    r.u64(kind);
    r.u64(id);
    r.0.extend_from_slice(payload);
    r.0.resize(
        (EVENT_UPDATE_FIXED + payload.len()).next_multiple_of(8) - 8,
        0,
    );
    b.record(EVENT_UPDATE, &r);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            crate::cpus::format_list(&[0, 1, 2, 3, 8, 10, 11]),
            "0-3,8,10-11"
        );
        assert_eq!(crate::cpus::format_list(&[5]), "5");
    }

    #[test]
    fn strings_are_padded_as_perf_pads_them() {
        let mut b = Buf::default();
        b.string("stat");
        assert_eq!(b.0.len(), 4 + 64);
        assert_eq!(&b.0[..4], &64u32.to_le_bytes());
    }
}
