//! The file's JSON: its header, the cgroup blocks (kinds 4 and 5) and the end block,
//! written and read back; a header read is checked before any slice is read against it.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value as Json};

use super::{End, Header, RecordedCgroup, SYSTEM_WIDE};
use crate::reading::Reading;

pub(super) fn cgroup_json(c: &RecordedCgroup) -> Json {
    let mut j = json!({"slot": c.slot, "id": c.id, "name": c.name, "path": c.path});
    if let Some(name) = &c.container {
        j["container"] = json!(name);
    }
    j
}

pub(super) fn header_json(h: &Header) -> Json {
    let cgroups: Vec<Json> = h.cgroups.iter().map(cgroup_json).collect();
    let mut j = json!({
        "events": h.events,
        "supported": h.supported,
        "cgroups": cgroups,
        "cpus": h.cpus,
        "clock": h.clock,
        "command": h.command,
        "started": h.started,
        "byte_order": "little",
    });
    if h.target != SYSTEM_WIDE {
        j["target"] = json!(h.target);
    }
    if h.tasks {
        j["tasks"] = json!(true);
    }
    j
}

/// One slot's readings [event][CPU] as JSON.
pub(super) fn readings_json(events: &[Vec<Reading>]) -> Json {
    json!(events
        .iter()
        .map(|cpus| cpus
            .iter()
            .map(|r| json!([r.counter, r.enabled, r.running]))
            .collect::<Vec<_>>())
        .collect::<Vec<_>>())
}

/// The end block's JSON.
pub(super) fn end_json(end: &End) -> String {
    let totals: Vec<Json> = end.totals.iter().map(|e| readings_json(e)).collect();
    json!({
        "duration_ns": end.duration_ns,
        "lost": end.lost,
        "ring_lost": end.ring_lost,
        "sent": end.sent,
        "totals": totals,
    })
    .to_string()
}

pub(super) fn parse_header(text: &[u8]) -> Result<Header> {
    let v: Json = serde_json::from_slice(text).context("the header is not JSON")?;
    let strings = |key: &str| -> Result<Vec<String>> {
        v[key]
            .as_array()
            .with_context(|| format!("the header has no {key}"))?
            .iter()
            .map(|s| s.as_str().map(String::from).context("not a string"))
            .collect()
    };
    let cgroups = v["cgroups"]
        .as_array()
        .context("the header has no cgroups")?
        .iter()
        .map(|c| {
            Ok(RecordedCgroup {
                slot: c["slot"].as_u64().context("a cgroup without its slot")? as usize,
                id: c["id"].as_u64().context("a cgroup without its id")?,
                name: c["name"].as_str().unwrap_or_default().to_string(),
                path: c["path"].as_str().unwrap_or_default().to_string(),
                container: c["container"].as_str().map(String::from),
                began: 0,
                ended: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let cpus = v["cpus"]
        .as_array()
        .context("the header has no cpus")?
        .iter()
        .map(|c| {
            c.as_u64()
                .and_then(|c| u32::try_from(c).ok())
                .context("a CPU that is not a number")
        })
        .collect::<Result<Vec<_>>>()?;
    let events = strings("events")?;
    let supported = match v["supported"].as_array() {
        Some(a) => a.iter().map(|b| b.as_bool().unwrap_or(true)).collect(),
        None => vec![true; events.len()],
    };
    let header = Header {
        events,
        supported,
        cgroups,
        cpus,
        clock: v["clock"].as_str().unwrap_or("sched_clock").to_string(),
        command: strings("command").unwrap_or_default(),
        started: v["started"].as_f64().unwrap_or(0.0),
        target: v["target"].as_str().unwrap_or(SYSTEM_WIDE).to_string(),
        tasks: v["tasks"].as_bool().unwrap_or(false),
    };
    check_header(&header)?;
    Ok(header)
}

/// What every reader of the slices relies on: a slot per cgroup, numbered from 0, no
/// cgroup twice, no CPU twice, whether each event was supported.
fn check_header(h: &Header) -> Result<()> {
    if h.supported.len() != h.events.len() {
        bail!(
            "the header says whether {} events were supported, for {} events",
            h.supported.len(),
            h.events.len()
        );
    }
    if h.tasks && !h.cgroups.is_empty() {
        bail!("the header records tasks and cgroups");
    }
    let mut slots = vec![false; h.cgroups.len()];
    let mut ids = HashSet::new();
    let mut paths = HashSet::new();
    for c in &h.cgroups {
        match slots.get_mut(c.slot) {
            Some(seen) if !*seen => *seen = true,
            _ => bail!(
                "the header gives cgroup '{}' slot {} of {} cgroups",
                c.name,
                c.slot,
                h.cgroups.len()
            ),
        }
        if !ids.insert(c.id) || !paths.insert(Path::new(&c.path)) {
            bail!("the header records cgroup '{}' twice", c.name);
        }
    }
    let mut cpus = HashSet::new();
    if let Some(cpu) = h.cpus.iter().find(|&&c| !cpus.insert(c)) {
        bail!("the header records CPU {cpu} twice");
    }
    Ok(())
}

pub(super) fn parse_end(text: &[u8]) -> Result<End> {
    let v: Json = serde_json::from_slice(text).context("the end block is not JSON")?;
    let numbers = |key: &str| -> Vec<u64> {
        v[key]
            .as_array()
            .map(|a| a.iter().filter_map(Json::as_u64).collect())
            .unwrap_or_default()
    };
    let totals = list(&v["totals"]).iter().map(readings_from).collect();
    Ok(End {
        duration_ns: v["duration_ns"].as_u64().unwrap_or(0),
        lost: numbers("lost"),
        ring_lost: numbers("ring_lost"),
        totals,
        sent: numbers("sent"),
    })
}

fn list(j: &Json) -> &[Json] {
    j.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// One slot's readings [event][CPU] from JSON (what is not a reading reads as zero).
pub(super) fn readings_from(events: &Json) -> Vec<Vec<Reading>> {
    let reading = |r: &Json| Reading {
        counter: r[0].as_u64().unwrap_or(0),
        enabled: r[1].as_u64().unwrap_or(0),
        running: r[2].as_u64().unwrap_or(0),
    };
    list(events)
        .iter()
        .map(|cpus| list(cpus).iter().map(reading).collect())
        .collect()
}

/// A kind 4 block: the cgroup that appeared, which must take slot `next`.
pub(super) fn parse_began(text: &[u8], next: usize, block: u32) -> Result<RecordedCgroup> {
    let c: Json = serde_json::from_slice(text).context("not JSON")?;
    let slot = c["slot"].as_u64().context("a cgroup without its slot")?;
    if slot != next as u64 {
        bail!("a cgroup in slot {slot}, where the next is {next}");
    }
    Ok(RecordedCgroup {
        slot: next,
        id: c["id"].as_u64().context("a cgroup without its id")?,
        name: c["name"].as_str().unwrap_or_default().to_string(),
        path: c["path"].as_str().unwrap_or_default().to_string(),
        container: c["container"].as_str().map(String::from),
        began: block,
        ended: None,
    })
}
