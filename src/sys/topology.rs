//! Where each CPU sits: socket, die, cluster, core, NUMA node and caches, from sysfs
//! (/sys/devices/system/cpu, or a fixture tree in its layout).

use std::fs;
use std::path::{Path, PathBuf};

use crate::aggr::CpuTopology;

/// The topology of each of `cpus`, read under `root` (normally /sys/devices/system/cpu).
/// What sysfs does not say reads as -1 (socket, die, core), 0 (node), or is left out
/// (caches).
pub fn read(root: &Path, cpus: &[u32]) -> Vec<CpuTopology> {
    cpus.iter()
        .map(|&cpu| read_cpu(&root.join(format!("cpu{cpu}"))))
        .collect()
}

/// The running system's sysfs CPU directory.
pub(crate) fn system_root() -> PathBuf {
    PathBuf::from("/sys/devices/system/cpu")
}

/// A NUMA node's memory in kB, total and free, from its meminfo
/// (/sys/devices/system/node/nodeN/meminfo); zeros where it cannot be read.
pub(crate) fn node_memory_kb(node: i64) -> (u64, u64) {
    let text = fs::read_to_string(format!("/sys/devices/system/node/node{node}/meminfo"))
        .unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
            .unwrap_or(0)
    };
    (field("MemTotal:"), field("MemFree:"))
}

fn number(path: &Path) -> Option<i64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_cpu(dir: &Path) -> CpuTopology {
    let topo = |name: &str| number(&dir.join("topology").join(name)).unwrap_or(-1);
    CpuTopology {
        socket: topo("physical_package_id"),
        die: topo("die_id"),
        cluster: topo("cluster_id"),
        core: topo("core_id"),
        node: node_of(dir).unwrap_or(0),
        caches: caches_of(dir),
    }
}

/// The NUMA node the CPU's directory links to (`node1`).
fn node_of(dir: &Path) -> Option<i64> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .find_map(|n| n.strip_prefix("node")?.parse().ok())
}

/// The CPU's data and unified caches as (level, id).
fn caches_of(dir: &Path) -> Vec<(u32, i64)> {
    let Ok(entries) = fs::read_dir(dir.join("cache")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
    {
        let p = e.path();
        let kind = fs::read_to_string(p.join("type")).unwrap_or_default();
        if kind.trim() == "Instruction" {
            continue;
        }
        if let Some(level) = number(&p.join("level")) {
            out.push((level as u32, number(&p.join("id")).unwrap_or(-1)));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggr::{groups, Mode};

    /// A 2-socket machine of 2 dies per socket, 2 cores per die and 2 threads per core,
    /// a NUMA node per socket, an L3 per die (tests/fixtures/sysfs/topology-2s2d-smt).
    fn fixture() -> Vec<CpuTopology> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs/topology-2s2d-smt/cpu");
        read(&root, &(0..16).collect::<Vec<u32>>())
    }

    #[test]
    fn fixture_topology_reads() {
        let t = fixture();
        assert_eq!(
            (t[13].socket, t[13].die, t[13].core, t[13].node),
            (1, 0, 1, 1)
        );
        // Data and unified caches; the instruction cache is left out.
        assert_eq!(t[13].caches, vec![(1, 5), (2, 5), (3, 2)]);
        assert_eq!(t[0].cluster, 65535);
    }

    #[test]
    fn every_mode_groups_the_fixture() {
        let t = fixture();
        let names = |m| {
            groups(m, &t)
                .into_iter()
                .map(|g| (g.name, g.cpus))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Mode::Socket),
            [
                ("S0".to_string(), vec![0, 1, 2, 3, 8, 9, 10, 11]),
                ("S1".to_string(), vec![4, 5, 6, 7, 12, 13, 14, 15])
            ]
        );
        assert_eq!(names(Mode::Node)[1].0, "N1");
        assert_eq!(
            names(Mode::Die)[1],
            ("S0-D1".to_string(), vec![2, 3, 10, 11])
        );
        assert_eq!(names(Mode::Core)[5], ("S1-D0-C1".to_string(), vec![5, 13]));
        assert_eq!(names(Mode::Cache(None))[2].0, "S1-D0-L3-ID2");
        assert_eq!(names(Mode::Cache(Some(2))).len(), 8);
        assert_eq!(names(Mode::Cluster).len(), 4);
    }
}
