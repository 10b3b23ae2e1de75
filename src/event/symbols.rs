//! The events perf knows by name: hardware, software and hardware-cache events.

/// perf_event_attr.type values for the built-in PMUs.
pub const TYPE_HARDWARE: u32 = 0;
pub const TYPE_SOFTWARE: u32 = 1;
pub const TYPE_TRACEPOINT: u32 = 2;
pub const TYPE_HW_CACHE: u32 = 3;
pub const TYPE_RAW: u32 = 4;

/// Symbolic hardware events: (config, names; the first is the canonical one).
pub const HARDWARE: &[(u64, &[&str])] = &[
    (0, &["cpu-cycles", "cycles"]),
    (1, &["instructions"]),
    (2, &["cache-references"]),
    (3, &["cache-misses"]),
    (4, &["branch-instructions", "branches"]),
    (5, &["branch-misses"]),
    (6, &["bus-cycles"]),
    (7, &["stalled-cycles-frontend", "idle-cycles-frontend"]),
    (8, &["stalled-cycles-backend", "idle-cycles-backend"]),
    (9, &["ref-cycles"]),
];

/// Software events, as above.
pub const SOFTWARE: &[(u64, &[&str])] = &[
    (0, &["cpu-clock"]),
    (1, &["task-clock"]),
    (2, &["page-faults", "faults"]),
    (3, &["context-switches", "cs"]),
    (4, &["cpu-migrations", "migrations"]),
    (5, &["minor-faults"]),
    (6, &["major-faults"]),
    (7, &["alignment-faults"]),
    (8, &["emulation-faults"]),
    (9, &["dummy"]),
    (10, &["bpf-output"]),
    (11, &["cgroup-switches"]),
];

/// Cache ids (config bits 0-7) and their spellings.
pub(crate) const CACHES: &[&[&str]] = &[
    &["L1-dcache", "l1-d", "l1d", "L1-data"],
    &["L1-icache", "l1-i", "l1i", "L1-instruction"],
    &["LLC", "L2"],
    &["dTLB", "d-tlb", "Data-TLB"],
    &["iTLB", "i-tlb", "Instruction-TLB"],
    &["branch", "bpu", "btb", "bpc"],
    &["node"],
];

/// Operations (config bits 8-15).
pub(crate) const CACHE_OPS: &[&[&str]] = &[
    &["load", "loads", "read"],
    &["store", "stores", "write"],
    &[
        "prefetch",
        "prefetches",
        "speculative-read",
        "speculative-load",
    ],
];

/// Results (config bits 16-23).
pub(crate) const CACHE_RESULTS: &[&[&str]] =
    &[&["refs", "Reference", "ops", "access"], &["misses", "miss"]];

/// Which operations each cache supports (bit per op), as perf accepts them.
const CACHE_VALID_OPS: [u8; 7] = [0b111, 0b101, 0b111, 0b111, 0b001, 0b001, 0b111];

pub fn lookup(table: &[(u64, &[&str])], name: &str) -> Option<u64> {
    table
        .iter()
        .find(|(_, names)| names.contains(&name))
        .map(|&(c, _)| c)
}

/// A hardware-cache event name (`L1-dcache-load-misses`, `dTLB-stores`, `LLC`, ...) to
/// its config, the way perf reads them: the cache, then up to two words naming the
/// operation (default read) and the result (default access), in either order.
pub(crate) fn cache_config(name: &str) -> Option<u64> {
    // The longest cache spelling that is followed by the end or by '-'.
    let (cache, rest) = CACHES
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (i, *n)))
        .filter(|(_, n)| {
            name.starts_with(n) && matches!(name.as_bytes().get(n.len()), None | Some(b'-'))
        })
        .max_by_key(|(_, n)| n.len())
        .map(|(i, n)| (i, &name[n.len()..]))?;
    let words: Vec<&str> = match rest {
        "" => vec![],
        r if r.len() == 1 => return None,
        r => split_words(&r[1..])?,
    };
    if words.len() > 2 {
        return None;
    }
    let find = |table: &[&[&str]], w: &str| table.iter().position(|names| names.contains(&w));
    let (mut op, mut result) = (None, None);
    for w in words {
        match (find(CACHE_OPS, w), find(CACHE_RESULTS, w)) {
            (Some(o), _) if op.is_none() => {
                if CACHE_VALID_OPS[cache] & (1 << o) == 0 {
                    return None;
                }
                op = Some(o);
            }
            (_, Some(r)) if result.is_none() => result = Some(r),
            // A second operation or result word: perf ignores it.
            (Some(_), _) | (_, Some(_)) => {}
            (None, None) => return None,
        }
    }
    let (op, result) = (op.unwrap_or(0), result.unwrap_or(0));
    Some(cache as u64 | (op as u64) << 8 | (result as u64) << 16)
}

/// Splits `load-misses` into words, keeping multi-word spellings such as
/// `speculative-read` whole.
fn split_words(s: &str) -> Option<Vec<&str>> {
    let mut words = vec![];
    let mut rest = s;
    while !rest.is_empty() {
        let w = CACHE_OPS
            .iter()
            .chain(CACHE_RESULTS)
            .flat_map(|n| n.iter())
            .filter(|n| {
                rest.starts_with(**n) && matches!(rest.as_bytes().get(n.len()), None | Some(b'-'))
            })
            .max_by_key(|n| n.len())?;
        words.push(*w);
        rest = rest[w.len()..]
            .strip_prefix('-')
            .unwrap_or(&rest[w.len()..]);
        if rest.is_empty() && s.ends_with('-') {
            return None;
        }
    }
    Some(words)
}

/// The cache events `bperf list` shows: perf's canonical spellings of each valid
/// cache x op x result combination.
pub fn cache_event_names() -> Vec<(String, u64)> {
    let mut out = vec![];
    for (c, names) in CACHES.iter().enumerate() {
        for (o, ops) in CACHE_OPS.iter().enumerate() {
            if CACHE_VALID_OPS[c] & (1 << o) == 0 {
                continue;
            }
            for (r, results) in CACHE_RESULTS.iter().enumerate() {
                let name = match r {
                    0 => format!("{}-{}", names[0], ops[1]),
                    _ => format!("{}-{}-{}", names[0], ops[0], results[0]),
                };
                out.push((name, c as u64 | (o as u64) << 8 | (r as u64) << 16));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_spellings() {
        assert_eq!(cache_config("L1-dcache-load-misses"), Some(0x10000));
        assert_eq!(cache_config("L1-dcache"), Some(0));
        assert_eq!(cache_config("l1d-loads"), Some(0));
        assert_eq!(cache_config("L1-dcache-misses-load"), Some(0x10000));
        assert_eq!(cache_config("LLC-prefetch-miss"), Some(0x10202));
        assert_eq!(cache_config("branch-loads"), Some(5));
        assert_eq!(cache_config("node-load-misses"), Some(0x10006));
        assert_eq!(cache_config("dTLB-speculative-read-misses"), Some(0x10203));
        assert_eq!(cache_config("iTLB-stores"), None, "iTLB has no store op");
        assert_eq!(
            cache_config("L1-DCACHE-loads"),
            None,
            "spellings are case-sensitive"
        );
        assert_eq!(cache_config("L1-dcache-"), None);
        assert_eq!(cache_config("L1-dcache-load-misses-refs"), None);
        assert_eq!(cache_config("L1-dcachex"), None);
    }

    #[test]
    fn listed_cache_names_parse_to_their_config() {
        let names = cache_event_names();
        assert!(names.len() > 20);
        for (n, c) in names {
            assert_eq!(cache_config(&n), Some(c), "{n}");
        }
    }
}
