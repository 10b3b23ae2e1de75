//! Named metrics (-M): perf's metrics that need no vendor tables, the events each one
//! needs, and how its value is worked out from their counts.

/// The clock a metric divides by: cpu-clock when counting CPUs, task-clock otherwise.
pub(crate) const CLOCK: &str = "clock";

/// How a metric's value comes from its events' counts (in the order of `operands`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Formula {
    /// first / second
    Ratio,
    /// first × factor / clock (ns)
    PerClock(f64),
    /// clock (ns) / time elapsed (ns)
    Utilization,
    /// max(first, second) / third
    LargerOverThird,
}

/// One named metric.
#[derive(Debug, PartialEq)]
pub struct Def {
    pub name: &'static str,
    pub group: &'static str,
    pub description: &'static str,
    operands: &'static [&'static str],
    formula: Formula,
    /// How the value is scaled and the unit printed before the name; without one the
    /// value is printed with two decimals and the name alone.
    scale: Option<(f64, &'static str)>,
    /// perf's MetricThreshold: where the value (before scaling) is bad.
    threshold: Option<Threshold>,
}

/// perf's MetricThreshold of a common metric: the metric's own value compared with a
/// constant, bad where the comparison holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Threshold {
    Below(f64),
    Above(f64),
}

const fn def(
    name: &'static str,
    group: &'static str,
    description: &'static str,
    operands: &'static [&'static str],
    formula: Formula,
    scale: Option<(f64, &'static str)>,
) -> Def {
    Def {
        name,
        group,
        description,
        operands,
        formula,
        scale,
        threshold: None,
    }
}

impl Def {
    const fn bad(self, threshold: Threshold) -> Def {
        Def {
            threshold: Some(threshold),
            ..self
        }
    }
}

const fn rate(
    name: &'static str,
    group: &'static str,
    desc: &'static str,
    ops: &'static [&'static str],
) -> Def {
    def(name, group, desc, ops, Formula::Ratio, Some((100.0, "%"))).bad(Threshold::Above(0.05))
}

/// perf's common metrics, by name, group, events and unit.
pub const ALL: &[Def] = &[
    def(
        "CPUs_utilized",
        "Default",
        "Average CPU utilization",
        &[CLOCK],
        Formula::Utilization,
        Some((1.0, "CPUs")),
    ),
    def(
        "cs_per_second",
        "Default",
        "Context switches per CPU second",
        &["context-switches", CLOCK],
        Formula::PerClock(1e9),
        Some((1.0, "cs/sec")),
    ),
    def(
        "migrations_per_second",
        "Default",
        "Process migrations to a new CPU per CPU second",
        &["cpu-migrations", CLOCK],
        Formula::PerClock(1e9),
        Some((1.0, "migrations/sec")),
    ),
    def(
        "page_faults_per_second",
        "Default",
        "Page faults per CPU second",
        &["page-faults", CLOCK],
        Formula::PerClock(1e9),
        Some((1.0, "faults/sec")),
    ),
    def(
        "insn_per_cycle",
        "Default",
        "Instructions Per Cycle",
        &["instructions", "cpu-cycles"],
        Formula::Ratio,
        Some((1.0, "instructions")),
    )
    .bad(Threshold::Below(1.0)),
    def(
        "stalled_cycles_per_instruction",
        "Default",
        "Max front or backend stalls per instruction",
        &[
            "stalled-cycles-frontend",
            "stalled-cycles-backend",
            "instructions",
        ],
        Formula::LargerOverThird,
        None,
    ),
    def(
        "frontend_cycles_idle",
        "Default",
        "Frontend stalls per cycle",
        &["stalled-cycles-frontend", "cpu-cycles"],
        Formula::Ratio,
        None,
    )
    .bad(Threshold::Above(0.1)),
    def(
        "backend_cycles_idle",
        "Default",
        "Backend stalls per cycle",
        &["stalled-cycles-backend", "cpu-cycles"],
        Formula::Ratio,
        None,
    )
    .bad(Threshold::Above(0.2)),
    def(
        "cycles_frequency",
        "Default",
        "Cycles per CPU second",
        &["cpu-cycles", CLOCK],
        Formula::PerClock(1.0),
        Some((1.0, "GHz")),
    ),
    def(
        "branch_frequency",
        "Default",
        "Branches per CPU second",
        &["branches", CLOCK],
        Formula::PerClock(1.0),
        Some((1000.0, "M/sec")),
    ),
    rate(
        "branch_miss_rate",
        "Default",
        "Branch miss rate",
        &["branch-misses", "branches"],
    ),
    rate(
        "l1d_miss_rate",
        "Default2",
        "L1D miss rate",
        &["L1-dcache-load-misses", "L1-dcache-loads"],
    ),
    rate(
        "llc_miss_rate",
        "Default2",
        "LLC miss rate",
        &["LLC-load-misses", "LLC-loads"],
    ),
    rate(
        "l1i_miss_rate",
        "Default3",
        "L1I miss rate",
        &["L1-icache-load-misses", "L1-icache-loads"],
    ),
    rate(
        "dtlb_miss_rate",
        "Default3",
        "dTLB miss rate",
        &["dTLB-load-misses", "dTLB-loads"],
    ),
    rate(
        "itlb_miss_rate",
        "Default3",
        "iTLB miss rate",
        &["iTLB-load-misses", "iTLB-loads"],
    ),
    rate(
        "l1_prefetch_miss_rate",
        "Default4",
        "L1 prefetch miss rate",
        &["L1-dcache-prefetch-misses", "L1-dcache-prefetches"],
    ),
];

/// A name -M does not know, reported in perf's words.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("Cannot find metric or group `{0}'")]
pub struct UnknownMetric(pub String);

/// The metrics of -M's comma-separated list of metric and group names (perf matches
/// both without regard to case), each once, in the order asked for.
pub(crate) fn parse_list(list: &str) -> Result<Vec<&'static Def>, UnknownMetric> {
    let mut out: Vec<&'static Def> = Vec::new();
    // An empty name is one perf cannot find either (`-M ''`, `-M a,,b`).
    for name in list.split(',').map(str::trim) {
        let found: Vec<&Def> = ALL
            .iter()
            .filter(|d| d.name.eq_ignore_ascii_case(name) || d.group.eq_ignore_ascii_case(name))
            .collect();
        if found.is_empty() {
            return Err(UnknownMetric(name.to_string()));
        }
        for d in found {
            if !out.iter().any(|o| std::ptr::eq(*o, d)) {
                out.push(d);
            }
        }
    }
    Ok(out)
}

impl Def {
    /// The events the metric needs, by perf's names, with the clock as counted.
    pub fn events(&self, clock: &'static str) -> impl Iterator<Item = &'static str> + '_ {
        self.operands
            .iter()
            .map(move |&op| if op == CLOCK { clock } else { op })
    }

    /// The value from the counts of `events()` in order and the time elapsed, scaled;
    /// `None` where perf's expression has no value (a count missing or a zero divisor).
    pub fn value(&self, counts: &[f64], elapsed_ns: f64) -> Option<f64> {
        let over = |a: f64, b: f64| (b != 0.0).then(|| a / b);
        let v = match (self.formula, counts) {
            (Formula::Ratio, [a, b]) => over(*a, *b),
            (Formula::PerClock(factor), [a, clock]) => over(a * factor, *clock),
            (Formula::Utilization, [clock]) => over(*clock, elapsed_ns),
            (Formula::LargerOverThird, [a, b, c]) => over(a.max(*b), *c),
            _ => None,
        }?;
        Some(v * self.scale.map_or(1.0, |(s, _)| s))
    }

    /// The metric's unit as perf prints it: `CPUs  CPUs_utilized`, or the name alone.
    pub fn unit(&self) -> String {
        match self.scale {
            Some((_, unit)) => format!("{unit}  {}", self.name),
            None => self.name.to_string(),
        }
    }

    /// perf's ScaleUnit text: `100%`, `1CPUs`.
    pub(crate) fn scale_unit(&self) -> Option<String> {
        self.scale.map(|(s, unit)| format!("{s}{unit}"))
    }

    /// Where perf's threshold puts a value (`value()`'s, scaled): `bad` or `good`;
    /// None without a threshold or a value.
    pub(crate) fn classify(&self, value: f64) -> Option<&'static str> {
        let raw = value / self.scale.map_or(1.0, |(s, _)| s);
        let bad = match self.threshold? {
            _ if raw.is_nan() => return None,
            Threshold::Below(t) => raw < t,
            Threshold::Above(t) => raw > t,
        };
        Some(if bad { "bad" } else { "good" })
    }

    /// Whether perf prints the value with one decimal (a scaled metric) or two.
    pub(crate) fn one_decimal(&self) -> bool {
        self.scale.is_some()
    }
}

/// A metric being counted: which of the session's events are its operands, in order,
/// and on whose line it is shown (the first operand's for -M).
#[derive(Clone, Debug, PartialEq)]
pub struct Use {
    pub def: &'static Def,
    pub events: Vec<usize>,
    pub shown_on: usize,
}

/// The metric groups perf 7.2 counts by default: Default, and with -d, -dd and -ddd,
/// Default2 to Default4 too.
pub(crate) fn default_groups(detailed: u8) -> Vec<&'static Def> {
    let groups = ["Default", "Default2", "Default3", "Default4"];
    let wanted = &groups[..(detailed as usize + 1).min(groups.len())];
    ALL.iter().filter(|d| wanted.contains(&d.group)).collect()
}

/// The event each metric is shown on, as perf 7.2 picks it: of the metric's operands,
/// the one the fewest of `uses` count (the first of those in `order`, the events' rank
/// in the output).
pub(crate) fn pick_shown_on(uses: &mut [Use], order: &[usize]) {
    let count = |e: usize, uses: &[Use]| uses.iter().filter(|u| u.events.contains(&e)).count();
    for i in 0..uses.len() {
        let chosen = uses[i]
            .events
            .iter()
            .copied()
            .min_by_key(|&e| (count(e, uses), order.get(e).copied().unwrap_or(usize::MAX)));
        if let Some(e) = chosen {
            uses[i].shown_on = e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_groups() {
        let l = parse_list("insn_per_cycle,Default2").unwrap();
        let names: Vec<_> = l.iter().map(|d| d.name).collect();
        assert_eq!(names, ["insn_per_cycle", "l1d_miss_rate", "llc_miss_rate"]);
        assert_eq!(parse_list("cpus_utilized,CPUs_utilized").unwrap().len(), 1);
        let e = parse_list("nope").unwrap_err();
        assert_eq!(e.to_string(), "Cannot find metric or group `nope'");
        assert_eq!(
            parse_list("insn_per_cycle,,").unwrap_err(),
            UnknownMetric(String::new())
        );
    }

    #[test]
    fn values_and_units() {
        let d = parse_list("CPUs_utilized").unwrap()[0];
        assert_eq!(d.events("cpu-clock").collect::<Vec<_>>(), ["cpu-clock"]);
        assert_eq!(d.value(&[2e9], 1e9), Some(2.0));
        assert_eq!(d.unit(), "CPUs  CPUs_utilized");
        let d = parse_list("branch_miss_rate").unwrap()[0];
        assert_eq!(d.value(&[5.0, 100.0], 1.0), Some(5.0));
        assert_eq!(d.value(&[5.0, 0.0], 1.0), None);
        let d = parse_list("branch_frequency").unwrap()[0];
        // 2 branches per ns: 2,000 M/sec.
        assert_eq!(d.value(&[2e9, 1e9], 1.0), Some(2000.0));
        let d = parse_list("stalled_cycles_per_instruction").unwrap()[0];
        assert_eq!(d.value(&[3.0, 5.0, 10.0], 1.0), Some(0.5));
        assert_eq!(d.unit(), "stalled_cycles_per_instruction");
        assert!(!d.one_decimal());
    }

    /// perf's MetricThresholds: branch_miss_rate > 0.05 (of the ratio, before its 100%
    /// scale), insn_per_cycle < 1; none where the value is missing or there is none.
    #[test]
    fn thresholds_classify_the_unscaled_value() {
        let d = parse_list("branch_miss_rate").unwrap()[0];
        assert_eq!(d.classify(4.9), Some("good"));
        assert_eq!(d.classify(5.1), Some("bad"));
        assert_eq!(d.classify(f64::NAN), None);
        let d = parse_list("insn_per_cycle").unwrap()[0];
        assert_eq!(d.classify(0.5), Some("bad"));
        assert_eq!(d.classify(1.5), Some("good"));
        assert_eq!(parse_list("cs_per_second").unwrap()[0].classify(9.0), None);
    }
}
