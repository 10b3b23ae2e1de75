//! Hybrid machines: several core PMUs, each counting its own kind of CPU (Intel's
//! cpu_core and cpu_atom, an arm64 big.LITTLE pair of armv8 PMUs). As perf 6.12 does:
//!
//! - A hardware or cache event by its legacy name (`cycles`, `L1-dcache-loads`) is one
//!   event per core PMU, in perf's PMU order, the PMU's type in the config's upper 32
//!   bits (PERF_PMU_TYPE_SHIFT) where the kernel takes it. A hardware event on a kernel
//!   that does not stays one event for any CPU (the kernel then picks the PMU of the
//!   CPU it opens on); a cache event is still one per core PMU.
//! - An event of a core PMU (`cpu_core/.../`, a bare alias of core PMUs, which each core
//!   PMU that has it counts, a raw event of a core PMU's type) counts on that PMU only.
//! - Each such event opens only on its PMU's CPUs (`cpus` in sysfs) and prints with its
//!   PMU's name added: `cycles` as `cpu_atom/cycles/`, `cycles:u` as
//!   `cpu_atom/cycles:u/` (perf 6.15 and later print `cpu_atom/cycles/u`).
//! - A group whose members are on several core PMUs becomes one group per PMU
//!   (regroup.rs, which regroups every PMU's events as perf does).
//! - Counting CPUs, an event whose PMU covers none of them is left out, and a group
//!   member not counted on its leader's CPUs leaves the group, with perf's warnings.

use anyhow::Result;

use super::{Attr, Event, Expansion, Pmu, Sources, TYPE_HARDWARE, TYPE_HW_CACHE, TYPE_RAW};

/// Where a hybrid machine counts an event: on one of its core PMUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hybrid {
    /// The core PMU (`cpu_core`, `armv8_cortex_a76`).
    pub pmu: String,
    /// The CPUs it covers; None: its sysfs entry says none, any CPU.
    pub cpus: Option<Vec<u32>>,
    /// The event as written, when its printed name is that with the PMU's name added
    /// (`cycles`, printed `cpu_atom/cycles/`).
    pub written: Option<String>,
}

impl Hybrid {
    pub(crate) fn counts_on(&self, cpu: u32) -> bool {
        self.cpus
            .as_ref()
            .is_none_or(|c| c.binary_search(&cpu).is_ok())
    }

    /// Its CPUs among `cpus`.
    pub fn among(&self, cpus: &[u32]) -> Vec<u32> {
        cpus.iter()
            .copied()
            .filter(|&c| self.counts_on(c))
            .collect()
    }
}

/// The name perf prints for an event written `written` that core PMU `pmu` counts:
/// the PMU's name added (`cpu_atom/cycles/`, modifiers inside the slashes), unless the
/// name starts with it.
pub fn name(pmu: &str, written: &str) -> String {
    if written.starts_with(pmu) {
        return written.to_string();
    }
    match written.find('/') {
        Some(i) => format!("{pmu}{}", &written[i..]),
        None => format!("{pmu}/{written}/"),
    }
}

/// What named an event, as far as a hybrid machine cares.
pub(super) enum Origin {
    /// A hardware or cache event by its legacy name (`cycles`, `L1-dcache-loads`).
    Legacy,
    /// An event of this PMU, written `pmu/terms/`.
    Pmu(Pmu),
    /// A bare alias (`cpu_cycles`) of this PMU, the first that has it.
    Alias(Pmu, String),
    /// A raw event, a software event, a tracepoint.
    Other,
}

/// The events `written` stands for (see the module's comment); `named`: its name comes
/// from a `name=` term, which perf prints as it is.
pub(super) fn per_core_pmu(
    written: Expansion,
    named: bool,
    origin: &Origin,
    sources: &dyn Sources,
) -> Result<Vec<Expansion>> {
    let legacy = matches!(written.attr.type_, TYPE_HARDWARE | TYPE_HW_CACHE);
    let cores = sources.core_pmus();
    if cores.len() < 2 {
        return Ok(vec![written]);
    }
    let extended = || sources.extended_type();
    let on = |p: &Pmu, attr: Attr, name: &str| {
        let renamed = !named && !name.starts_with(&p.name);
        Expansion {
            name: match renamed {
                true => self::name(&p.name, name),
                false => name.to_string(),
            },
            attr,
            hybrid: Some(Hybrid {
                pmu: p.name.clone(),
                cpus: p.cpus.clone(),
                written: renamed.then(|| name.to_string()),
            }),
            naming: written.naming,
            tool: None,
        }
    };
    // A legacy event for one core PMU: its type in the config, where the kernel takes it.
    let typed = |p: &Pmu, a: Attr| match legacy && extended() {
        true => Attr {
            config: a.config | u64::from(p.type_) << 32,
            ..a
        },
        false => a,
    };
    let name = written.name.as_str();
    Ok(match origin {
        Origin::Legacy if written.attr.type_ == TYPE_HARDWARE && !extended() => vec![written],
        Origin::Legacy => cores
            .iter()
            .map(|p| on(p, typed(p, written.attr), name))
            .collect(),
        Origin::Pmu(p) if p.core => vec![on(p, typed(p, written.attr), name)],
        Origin::Alias(first, alias) if first.core => {
            let mut out = Vec::new();
            for p in cores.iter().filter(|p| p.alias(alias).is_some()) {
                let (attr, term_name) = p.encode(p.alias(alias).unwrap_or_default())?;
                let v = on(p, attr, term_name.as_deref().unwrap_or(name));
                out.push(v);
            }
            out
        }
        // perf's raw events go to the PMU of type PERF_TYPE_RAW: Intel's cpu_core.
        Origin::Other if written.attr.type_ == TYPE_RAW => {
            match cores.iter().find(|p| p.type_ == TYPE_RAW) {
                Some(p) => vec![on(p, written.attr, name)],
                None => vec![written],
            }
        }
        _ => vec![written],
    })
}

/// Counting the CPUs `cpus`, the hybrid events as perf counts them: each on its core
/// PMU's CPUs among them, an event whose PMU has none of them counted nowhere (perf
/// leaves it out: it has no line), and a group member not counted on the same CPUs as
/// its leader taken out of the group. `asked`: the CPU list given with -C, when it was.
/// Returns perf's warnings, one line each.
pub(crate) fn fit_to_cpus(events: &mut [Event], cpus: &[u32], asked: Option<&str>) -> Vec<String> {
    let mut warnings = Vec::new();
    if events.iter().all(|e| e.hybrid.is_none()) {
        return warnings;
    }
    if let Some(list) = asked {
        for e in events.iter() {
            let Some(h) = &e.hybrid else { continue };
            if h.among(cpus).len() < cpus.len() {
                warnings.push(format!(
                    "WARNING: A requested CPU in '{list}' is not supported by PMU '{}' (CPUs {}) for event '{}'",
                    h.pmu,
                    h.cpus.as_deref().map_or_else(String::new, crate::cpus::format_list),
                    written_name(e),
                ));
            }
        }
    }
    let counted = |e: &Event| -> Vec<u32> {
        match &e.hybrid {
            Some(h) => h.among(cpus),
            None => cpus.to_vec(),
        }
    };
    break_mismatched_groups(events, &counted, &mut warnings);
    warnings
}

/// Takes each group member not counted on the same CPUs as its leader out of the group,
/// warning once per group, as perf does; a leader left alone is no group.
fn break_mismatched_groups(
    events: &mut [Event],
    counted: &dyn Fn(&Event) -> Vec<u32>,
    warnings: &mut Vec<String>,
) {
    let mut warned = None;
    for i in 0..events.len() {
        let Some(l) = events[i].leader.filter(|&l| l != i) else {
            continue;
        };
        if counted(&events[i]) == counted(&events[l]) {
            continue;
        }
        if warned != Some(l) {
            let members: Vec<&str> = events
                .iter()
                .filter(|e| e.leader == Some(l))
                .map(written_name)
                .collect();
            warnings.push("WARNING: grouped events cpus do not match.".into());
            warnings.push(
                "Events with CPUs not matching the leader will be removed from the group.".into(),
            );
            warnings.push(format!("  anon group {{ {} }}", members.join(", ")));
            warned = Some(l);
        }
        events[i].leader = None;
    }
    for i in 0..events.len() {
        let alone = !events
            .iter()
            .enumerate()
            .any(|(j, e)| j != i && e.leader == Some(i));
        if events[i].leader == Some(i) && alone {
            events[i].leader = None;
        }
    }
}

/// The name perf has for an event before it adds a hybrid event's PMU to it.
fn written_name(e: &Event) -> &str {
    e.hybrid
        .as_ref()
        .and_then(|h| h.written.as_deref())
        .unwrap_or(&e.name)
}

/// The core PMUs a metric is worked out on, given the events each of its operands
/// stands for: on a hybrid machine, one metric per core PMU its operands are counted on
/// (perf's metrics of hardware events are per core PMU); elsewhere one, None.
pub(crate) fn metric_pmus(operands: &[Vec<Event>]) -> Vec<Option<String>> {
    let mut pmus: Vec<Option<String>> = Vec::new();
    for h in operands.iter().flatten().filter_map(|e| e.hybrid.as_ref()) {
        if !pmus.iter().flatten().any(|p| *p == h.pmu) {
            pmus.push(Some(h.pmu.clone()));
        }
    }
    if pmus.is_empty() {
        pmus.push(None);
    }
    pmus
}

/// Of the events one operand stands for (one per core PMU, or one), the one counted on
/// core PMU `pmu`, or else the one counted on any CPU, or else the first.
pub(crate) fn on_pmu<'a>(operand: &'a [Event], pmu: Option<&str>) -> Option<&'a Event> {
    let on = |e: &&Event| e.hybrid.as_ref().map(|h| h.pmu.as_str()) == pmu;
    let anywhere = |e: &&Event| e.hybrid.is_none();
    operand
        .iter()
        .find(on)
        .or_else(|| operand.iter().find(anywhere))
        .or_else(|| operand.first())
}
