//! perf stat's aggregation modes (--per-socket, --per-die, --per-cluster, --per-cache,
//! --per-core, --per-node): which CPUs are counted together, and how perf names the
//! group. Pure: the topology comes from sys::topology.

use std::collections::BTreeMap;

/// Where one CPU sits, as sysfs describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuTopology {
    pub socket: i64,
    pub die: i64,
    pub cluster: i64,
    pub core: i64,
    pub node: i64,
    /// The CPU's caches as (level, id), the unified and data ones.
    pub caches: Vec<(u32, i64)>,
}

/// An aggregation mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Socket,
    Die,
    Cluster,
    /// --per-cache: the level (the highest the CPUs have without one).
    Cache(Option<u32>),
    Core,
    Node,
}

impl Mode {
    /// The key perf's JSON gives the group's name under.
    pub(crate) fn json_key(self) -> &'static str {
        match self {
            Mode::Socket => "socket",
            Mode::Die => "die",
            Mode::Cluster => "cluster",
            Mode::Cache(_) => "cache",
            Mode::Core => "core",
            Mode::Node => "node",
        }
    }

    /// The width of the group's name in perf's table.
    pub fn width(self) -> usize {
        match self {
            Mode::Socket | Mode::Node => 6,
            Mode::Die => 12,
            Mode::Cluster => 20,
            Mode::Cache(_) => 22,
            Mode::Core => 18,
        }
    }
}

/// One group of CPUs counted together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// perf's name for it: `S0`, `S0-D1`, `S0-D0-CLS2`, `S0-D0-L3-ID8`, `S1-D0-C3`, `N1`.
    pub name: String,
    /// Positions of its CPUs in the counted CPU list.
    pub cpus: Vec<usize>,
}

/// The groups of `topology` (one entry per counted CPU, in the counted order) for
/// `mode`, ordered as perf orders them: by socket, die, then the rest.
pub fn groups(mode: Mode, topology: &[CpuTopology]) -> Vec<Group> {
    let level = match mode {
        Mode::Cache(Some(level)) => level,
        _ => topology
            .iter()
            .flat_map(|t| t.caches.iter().map(|(l, _)| *l))
            .max()
            .unwrap_or(0),
    };
    let mut by_key: BTreeMap<(i64, i64, i64), Group> = BTreeMap::new();
    for (pos, t) in topology.iter().enumerate() {
        let cache = t
            .caches
            .iter()
            .find(|(l, _)| *l == level)
            .map_or(-1, |c| c.1);
        let (key, name) = match mode {
            Mode::Socket => ((t.socket, 0, 0), format!("S{}", t.socket)),
            Mode::Die => ((t.socket, t.die, 0), format!("S{}-D{}", t.socket, t.die)),
            Mode::Cluster => (
                (t.socket, t.die, t.cluster),
                format!("S{}-D{}-CLS{}", t.socket, t.die, t.cluster),
            ),
            Mode::Cache(_) => (
                (t.socket, t.die, cache),
                format!("S{}-D{}-L{level}-ID{cache}", t.socket, t.die),
            ),
            Mode::Core => (
                (t.socket, t.die, t.core),
                format!("S{}-D{}-C{}", t.socket, t.die, t.core),
            ),
            Mode::Node => ((t.node, 0, 0), format!("N{}", t.node)),
        };
        by_key
            .entry(key)
            .or_insert_with(|| Group {
                name,
                cpus: Vec::new(),
            })
            .cpus
            .push(pos);
    }
    by_key.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sockets of two dies, each die two cores of two SMT threads, one L3 per die
    /// and one L2 per core; NUMA node per socket. 16 CPUs, numbered as Linux does on such
    /// machines: the first threads of every core, then their siblings.
    fn two_sockets() -> Vec<CpuTopology> {
        (0..16)
            .map(|cpu| {
                let core_index = cpu % 8; // 8 cores, the second threads from CPU 8 on
                let socket = core_index / 4;
                let die = (core_index / 2) % 2;
                let core = core_index % 2;
                CpuTopology {
                    socket,
                    die,
                    cluster: 65535,
                    core,
                    node: socket,
                    caches: vec![(1, core_index), (2, core_index), (3, core_index / 2)],
                }
            })
            .collect()
    }

    fn names(mode: Mode) -> Vec<(String, usize)> {
        groups(mode, &two_sockets())
            .into_iter()
            .map(|g| (g.name, g.cpus.len()))
            .collect()
    }

    #[test]
    fn groups_as_perf_names_them() {
        let n = |v: &[(&str, usize)]| -> Vec<(String, usize)> {
            v.iter().map(|(s, c)| (s.to_string(), *c)).collect()
        };
        assert_eq!(names(Mode::Socket), n(&[("S0", 8), ("S1", 8)]));
        assert_eq!(names(Mode::Node), n(&[("N0", 8), ("N1", 8)]));
        assert_eq!(
            names(Mode::Die),
            n(&[("S0-D0", 4), ("S0-D1", 4), ("S1-D0", 4), ("S1-D1", 4)])
        );
        let cores = names(Mode::Core);
        assert_eq!(cores.len(), 8);
        assert_eq!(cores[0], ("S0-D0-C0".to_string(), 2));
        assert_eq!(cores[7], ("S1-D1-C1".to_string(), 2));
        assert_eq!(names(Mode::Cluster)[0], ("S0-D0-CLS65535".to_string(), 4));
        assert_eq!(names(Mode::Cache(None))[3], ("S1-D1-L3-ID3".to_string(), 4));
        assert_eq!(names(Mode::Cache(Some(2))).len(), 8);
    }

    #[test]
    fn groups_hold_cpu_positions() {
        let g = groups(Mode::Core, &two_sockets());
        assert_eq!(g[0].cpus, vec![0, 8]);
        assert_eq!(g[1].cpus, vec![1, 9]);
    }
}
