//! What this machine offers, for `bperf list`: every named event with its attr.

use super::{symbols, Attr, Sources};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    // In the order perf lists them.
    Hardware,
    Software,
    /// perf's tool events (duration_time, ...), which perf times itself.
    Tool,
    Cache,
    Pmu,
    Tracepoint,
}

impl Category {
    pub fn label(self) -> &'static str {
        match self {
            Category::Hardware => "Hardware event",
            Category::Software => "Software event",
            Category::Tool => "Tool event",
            Category::Cache => "Hardware cache event",
            Category::Pmu => "Kernel PMU event",
            Category::Tracepoint => "Tracepoint event",
        }
    }
}

/// One listed event: the name to type, its other spellings, and what it encodes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub aliases: Vec<String>,
    pub kind: Category,
    pub attr: Attr,
}

fn entry(kind: Category, names: &[&str], attr: Attr) -> Entry {
    Entry {
        name: names[0].to_string(),
        aliases: names[1..].iter().map(|s| s.to_string()).collect(),
        kind,
        attr,
    }
}

/// Every event perf would list here, in perf's order: hardware, software, cache,
/// then each PMU's sysfs events, then tracepoints.
pub fn entries(sysfs: &dyn Sources, tracepoints: bool) -> Vec<Entry> {
    let attr = |type_, config| Attr {
        type_,
        config,
        exclude_guest: true,
        ..Attr::default()
    };
    let mut out = vec![];
    for (c, names) in symbols::HARDWARE {
        out.push(entry(
            Category::Hardware,
            names,
            attr(symbols::TYPE_HARDWARE, *c),
        ));
    }
    for (c, names) in symbols::SOFTWARE {
        out.push(entry(
            Category::Software,
            names,
            attr(symbols::TYPE_SOFTWARE, *c),
        ));
    }
    for tool in super::Tool::ALL {
        out.push(entry(
            Category::Tool,
            &[tool.name()],
            attr(symbols::TYPE_SOFTWARE, super::DUMMY),
        ));
    }
    for (name, c) in symbols::cache_event_names() {
        out.push(entry(
            Category::Cache,
            &[&name],
            attr(symbols::TYPE_HW_CACHE, c),
        ));
    }
    for pmu in sysfs.pmus() {
        for (alias, terms) in &pmu.aliases {
            let Ok((a, _)) = pmu.encode(terms) else {
                continue;
            };
            let name = format!("{}/{alias}/", pmu.name);
            out.push(entry(
                Category::Pmu,
                &[&name],
                Attr {
                    exclude_guest: true,
                    ..a
                },
            ));
        }
    }
    if tracepoints {
        let mut tps = vec![];
        for (s, e, id) in sysfs.tracepoints() {
            tps.push(entry(
                Category::Tracepoint,
                &[&format!("{s}:{e}")],
                attr(symbols::TYPE_TRACEPOINT, id),
            ));
        }
        tps.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(tps);
    }
    out
}

/// Does `name` match a `perf list` filter: a glob with `*` and `?`, or else a substring?
pub fn matches(filter: &str, name: &str) -> bool {
    if !filter.contains(['*', '?']) {
        return name.contains(filter);
    }
    fn glob(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
            (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    glob(filter.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_catalog_lists_every_kind() {
        let root = format!(
            "{}/tests/fixtures/sysfs/intel/devices",
            env!("CARGO_MANIFEST_DIR")
        );
        let all = entries(&crate::test_fixtures::sysfs_at(root), true);
        let has = |n: &str, k: Category| all.iter().any(|e| e.name == n && e.kind == k);
        assert!(has("cpu-cycles", Category::Hardware));
        assert!(has("context-switches", Category::Software));
        assert!(has("L1-dcache-load-misses", Category::Cache));
        assert!(has("msr/tsc/", Category::Pmu));
        assert!(has("cpu/mem-loads/", Category::Pmu));
        assert!(has("sched:sched_switch", Category::Tracepoint));
        assert!(!all
            .iter()
            .any(|e| e.name.contains(".unit") || e.name.contains(".scale")));
        let cs = all.iter().find(|e| e.name == "context-switches").unwrap();
        assert_eq!(cs.aliases, ["cs"]);
    }

    #[test]
    fn filters() {
        assert!(matches("tsc", "msr/tsc/"));
        assert!(matches("L1*misses", "L1-dcache-load-misses"));
        assert!(!matches("L1*misses", "L1-dcache-loads"));
        assert!(matches("cpu-?lock", "cpu-clock"));
    }
}
