//! The cgroups of a plan: --for-each-cgroup, --all-cgroups and -G read into cgroups,
//! their slots and the rows that print them.

use anyhow::Result;

use super::{usage, CgroupTargets, LivePlan, Machine, Request, Series, MAX_CHARGED_LEVELS};
use crate::cgroup::{self, Cgroup, Hierarchy, Selection, Tree};
use crate::session::slots::FixedSlots;
use crate::InvalidError;

/// The monitored cgroups, one BPF slot each, and the rows that print them.
#[derive(Default)]
pub(super) struct CgroupRows {
    pub slots: FixedSlots,
    pub rows: Vec<Series>,
    pub v1: bool,
    /// The rule the cgroups were picked by, when it can be applied again.
    pub selection: Option<Selection>,
}

impl CgroupRows {
    /// --for-each-cgroup and --all-cgroups: every event in every cgroup.
    fn for_each(h: &Hierarchy, cgroups: Vec<Cgroup>, nr_events: usize) -> CgroupRows {
        let mut out = CgroupRows {
            v1: h.v1,
            ..CgroupRows::default()
        };
        for cg in &cgroups {
            let slot = out.slots.slot_of(cg);
            for event in 0..nr_events {
                out.rows.push(Series {
                    event,
                    slot,
                    cgroup: Some(cg.name.clone()),
                    container: None,
                });
            }
        }
        out
    }

    /// -G, as stat's rules::as_perf_reads hands its names out: the i-th event counts in
    /// the i-th cgroup; an empty name, or none (events -d and -M add), counts it
    /// system-wide, which is the root cgroup's count. Every row has the cgroup column,
    /// empty for those, as in perf.
    fn per_event(tree: &dyn Tree, names: &[String], nr_events: usize) -> Result<CgroupRows> {
        let mut out = CgroupRows {
            v1: tree.hierarchy().v1,
            ..CgroupRows::default()
        };
        let root = tree.resolve("/")?;
        for event in 0..nr_events {
            let name = names.get(event).map_or("", String::as_str);
            let cg = match name.is_empty() {
                true => root.clone(),
                false => tree.resolve(name).map_err(|e| usage(e.to_string()))?,
            };
            let slot = out.slots.slot_of(&cg);
            out.rows.push(Series {
                event,
                slot,
                cgroup: Some(name.to_string()),
                container: None,
            });
        }
        Ok(out)
    }

    /// Refuses a set of cgroups where one cgroup's time would go to more monitored
    /// cgroups than the BPF side can charge: a count would be silently short.
    fn check_depth(&self) -> Result<()> {
        match cgroup::deepest_chain(self.slots.cgroups()) {
            Some((levels, cg)) if levels > MAX_CHARGED_LEVELS => Err(usage(format!(
                "cgroup '{}' is inside {} other monitored cgroups: bperf charges at most {MAX_CHARGED_LEVELS} nested monitored cgroups",
                cg.name,
                levels - 1
            ))),
            _ => Ok(()),
        }
    }
}

/// The cgroups and rows from --for-each-cgroup, --all-cgroups and -G.
pub(super) fn parse(
    c: &CgroupTargets,
    nr_events: usize,
    machine: &dyn Machine,
) -> Result<CgroupRows> {
    let for_each = !c.for_each.is_empty();
    if !(for_each || c.all || c.containers || !c.per_event.is_empty()) {
        let rows = (0..nr_events)
            .map(|event| Series {
                event,
                slot: 0,
                cgroup: None,
                container: None,
            })
            .collect();
        return Ok(CgroupRows {
            rows,
            ..CgroupRows::default()
        });
    }
    let tree = machine.cgroups()?;
    let tree = tree.as_ref();
    let h = tree.hierarchy();
    let split =
        |v: &[String]| -> Vec<String> { v.iter().flat_map(|s| cgroup::split_list(s)).collect() };
    let out = if c.all {
        CgroupRows {
            selection: Some(Selection::All),
            ..CgroupRows::for_each(h, tree.all()?, nr_events)
        }
    } else if c.containers {
        // No container yet is no error: they are counted as they start.
        let mut rows = CgroupRows::for_each(h, Selection::Containers.select(tree)?, nr_events);
        let cgroups = rows.slots.cgroups().to_vec();
        for row in &mut rows.rows {
            row.container = cgroups.get(row.slot).and_then(container_column);
        }
        CgroupRows {
            selection: Some(Selection::Containers),
            ..rows
        }
    } else if for_each {
        let items = split(&c.for_each);
        // As perf: a cgroup that is not there is refused once the events are known.
        let expanded = cgroup::expand(tree, &items).map_err(|e| InvalidError(format!("{e:#}")))?;
        CgroupRows {
            selection: Selection::of_items(&items)?,
            ..CgroupRows::for_each(h, expanded, nr_events)
        }
    } else {
        CgroupRows::per_event(tree, &split(&c.per_event), nr_events)?
    };
    out.check_depth()?;
    Ok(out)
}

/// A container cgroup's column before its runtime names it: the short id.
pub(crate) fn container_column(cg: &Cgroup) -> Option<String> {
    let c = crate::container::recognize(&cg.path.to_string_lossy())?;
    Some(crate::container::labels::Labels::of(&c, None).display())
}

/// Live cgroups, where the cgroups were picked by a rule and the session follows the
/// tree: not for shared counters, whose cgroups are fixed at joining, nor where the
/// rows must stay as they start (`stat record`, -r). The first `capacity` cgroups are
/// counted.
pub(super) fn live_plan(req: &Request, shared: bool, cg: &mut CgroupRows) -> Option<LivePlan> {
    let selection = cg.selection.take().filter(|_| !shared && !req.fixed_rows)?;
    let capacity = req.targets.cgroups.max.max(1) as usize;
    if cg.slots.cgroups().len() > capacity {
        cg.slots.truncate(capacity);
        cg.rows.retain(|r| r.slot < capacity);
    }
    Some(LivePlan {
        selection,
        capacity,
    })
}
