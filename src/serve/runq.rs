//! serve --runq: what each cgroup's tasks waited for a CPU and how often they were
//! preempted, in all and by the cgroup that ran instead (the culprit).

use std::collections::HashMap;

use crate::bpf::runq::{Waits, OTHER};

use super::{Family, FamilyType, Row, Sample, SampleValue};

/// The run-queue families for `rows` (slot, labels), from `waits`.
pub fn families(rows: &[Row], waits: &Waits) -> Vec<Family> {
    let labels_of: HashMap<usize, &[(&'static str, String)]> =
        rows.iter().map(|(slot, l)| (*slot, l.as_slice())).collect();
    let mut wait = Vec::new();
    let mut preemptions = Vec::new();
    let mut behind = Vec::new();
    let mut preempted_by = Vec::new();
    for (slot, labels) in rows {
        let total = waits.total.get(*slot).copied().unwrap_or_default();
        wait.push(seconds(labels.clone(), total.wait_ns));
        preemptions.push(count(labels.clone(), total.preemptions));
        let (shown, rest) = waits.behind(*slot, |c| labels_of.contains_key(&c));
        for (culprit, w) in shown {
            let pair = with_culprit(labels, by_labels(labels_of[&culprit]));
            behind.push(seconds(pair.clone(), w.wait_ns));
            preempted_by.push(count(pair, w.preemptions));
        }
        let other = with_culprit(labels, vec![("by_cgroup", OTHER.to_string())]);
        behind.push(seconds(other.clone(), rest.wait_ns));
        preempted_by.push(count(other, rest.preemptions));
    }
    vec![
        family(
            "bperf_runqueue_wait_seconds",
            "Time the cgroup's tasks waited runnable for a CPU (from wake-up or preemption to running), as schedstat's run_delay.",
            wait,
        ),
        family(
            "bperf_preemptions",
            "Times the cgroup's tasks were switched out while still runnable (involuntary context switches).",
            preemptions,
        ),
        family(
            "bperf_waited_behind_seconds",
            "The cgroup's run-queue wait by the cgroup it waited behind (by_cgroup): split among the cgroups that ran on the CPU meanwhile (its last four runs; before them the preemptor); /other for culprits not exported.",
            behind,
        ),
        family(
            "bperf_preempted_by",
            "The cgroup's preemptions by the cgroup that took the CPU (by_cgroup); /other for culprits not exported.",
            preempted_by,
        ),
    ]
}

fn family(name: &'static str, help: &'static str, samples: Vec<Sample>) -> Family {
    Family {
        name,
        help,
        kind: FamilyType::Counter,
        samples,
    }
}

fn seconds(labels: Vec<(&'static str, String)>, ns: u64) -> Sample {
    Sample {
        labels,
        value: SampleValue::Float(ns as f64 / 1e9),
    }
}

fn count(labels: Vec<(&'static str, String)>, n: u64) -> Sample {
    Sample {
        labels,
        value: SampleValue::Int(n),
    }
}

fn with_culprit(
    labels: &[(&'static str, String)],
    culprit: Vec<(&'static str, String)>,
) -> Vec<(&'static str, String)> {
    labels.iter().cloned().chain(culprit).collect()
}

/// A culprit's labels, each named `by_` and its own name.
fn by_labels(labels: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    labels
        .iter()
        .filter_map(|(k, v)| by_name(k).map(|k| (k, v.clone())))
        .collect()
}

fn by_name(label: &str) -> Option<&'static str> {
    Some(match label {
        "cgroup" => "by_cgroup",
        "container" => "by_container",
        "container_id" => "by_container_id",
        "image" => "by_image",
        "pod" => "by_pod",
        "namespace" => "by_namespace",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bpf::runq::Wait;

    #[test]
    fn each_cgroup_has_its_totals_its_culprits_and_the_rest() {
        let rows: Vec<Row> = vec![
            (0, vec![("cgroup", "a".into())]),
            (2, vec![("cgroup", "b".into()), ("container", "web".into())]),
        ];
        let waits = Waits {
            total: vec![
                Wait::new(3_000_000_000, 7),
                Wait::new(9, 9),
                Wait::new(1_000_000_000, 1),
            ],
            // (0, 1): a culprit not among the rows counts in /other.
            by: BTreeMap::from([
                ((0, 2), Wait::new(2_000_000_000, 5)),
                ((0, 1), Wait::new(5, 1)),
            ]),
        };
        let f = families(&rows, &waits);
        let names: Vec<&str> = f.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "bperf_runqueue_wait_seconds",
                "bperf_preemptions",
                "bperf_waited_behind_seconds",
                "bperf_preempted_by"
            ]
        );
        assert_eq!(f[0].samples[0].value, SampleValue::Float(3.0));
        assert_eq!(f[1].samples[1].value, SampleValue::Int(1));
        let behind = &f[2].samples;
        assert_eq!(
            behind.len(),
            3,
            "a behind b, a behind /other, b behind /other"
        );
        assert_eq!(
            behind[0].labels,
            vec![
                ("cgroup", "a".into()),
                ("by_cgroup", "b".into()),
                ("by_container", "web".into())
            ]
        );
        assert_eq!(behind[0].value, SampleValue::Float(2.0));
        assert_eq!(behind[1].labels[1], ("by_cgroup", OTHER.into()));
        assert_eq!(behind[1].value, SampleValue::Float(1.0));
        assert_eq!(f[3].samples[1].value, SampleValue::Int(2));
        assert_eq!(
            behind[2].value,
            SampleValue::Float(1.0),
            "b: all of it /other"
        );
    }
}
