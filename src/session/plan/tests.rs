//! Plans resolved from fixtures: a sysfs tree for the events, a cgroup tree and
//! processes made up here, four CPUs online. No kernel is asked anything.

use std::io;
use std::path::PathBuf;

use anyhow::Result;

use super::*;
use crate::cgroup::Hierarchy;
use crate::InvalidError;

/// A machine of four CPUs, the Intel sysfs fixture, cgroups by path (ids from 1 in
/// order, "" the root) and processes of (pid, its threads).
struct Fixture {
    sysfs: Sysfs,
    cgroups: Vec<&'static str>,
    processes: Vec<(libc::pid_t, Vec<libc::pid_t>)>,
}

/// The cgroup tree of a fixture.
struct FakeTree {
    hierarchy: Hierarchy,
    paths: Vec<&'static str>,
}

impl Tree for FakeTree {
    fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }
    fn resolve(&self, name: &str) -> Result<Cgroup> {
        let rel = name.trim_start_matches('/');
        let i = self.paths.iter().position(|p| *p == rel);
        let i = i.ok_or_else(|| self.hierarchy.refuse(name, "does not exist"))?;
        Ok(Cgroup {
            name: name.into(),
            id: i as u64 + 1,
            path: PathBuf::from(rel),
        })
    }
    fn all(&self) -> Result<Vec<Cgroup>> {
        let mut all = vec![self.resolve("/")?];
        for p in &self.paths[1..] {
            all.push(self.resolve(p)?);
        }
        Ok(all)
    }
}

impl Machine for Fixture {
    fn sources(&self) -> &dyn Sources {
        &self.sysfs
    }
    fn online_cpus(&self) -> Result<Vec<u32>> {
        Ok(vec![0, 1, 2, 3])
    }
    fn cgroups(&self) -> Result<Box<dyn Tree>> {
        Ok(Box::new(FakeTree {
            hierarchy: Hierarchy {
                mount: "/sys/fs/cgroup".into(),
                v1: false,
            },
            paths: self.cgroups.clone(),
        }))
    }
    fn threads_of(&self, pid: libc::pid_t) -> io::Result<Vec<Thread>> {
        let (_, tids) = self
            .processes
            .iter()
            .find(|(p, _)| *p == pid)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(tids.iter().map(|&t| (t, format!("comm{t}"))).collect())
    }
    fn thread(&self, tid: libc::pid_t) -> io::Result<Thread> {
        let all = self.all_threads();
        all.into_iter()
            .find(|(t, _)| *t == tid)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
    fn all_threads(&self) -> Vec<Thread> {
        let tids = self.processes.iter().flat_map(|(_, tids)| tids);
        tids.map(|&t| (t, format!("comm{t}"))).collect()
    }
    fn topology(&self, cpus: &[u32]) -> Vec<CpuTopology> {
        let cpu = |c: u32| CpuTopology {
            socket: (c / 2) as i64,
            die: 0,
            cluster: 0,
            core: c as i64,
            node: 0,
            caches: Vec::new(),
        };
        cpus.iter().map(|&c| cpu(c)).collect()
    }
}

fn fixture() -> Fixture {
    Fixture {
        sysfs: crate::test_fixtures::sysfs_at(format!(
            "{}/tests/fixtures/sysfs/intel/devices",
            env!("CARGO_MANIFEST_DIR")
        )),
        cgroups: vec!["", "db", "web", "web/a", "web/a/b", "web/a/b/c"],
        processes: vec![(10, vec![10, 11]), (20, vec![20])],
    }
}

/// A request for task-clock and context-switches, as `f` changes it.
fn request(f: impl FnOnce(&mut Request)) -> Request {
    let mut req = Request::default();
    req.events.lists = vec!["task-clock,context-switches".into()];
    req.targets.cgroups.max = 1024;
    f(&mut req);
    req
}

fn plan(req: &Request) -> Result<Plan> {
    let machine = fixture();
    let events = PlanEvents::parse(req, &machine)?;
    Plan::resolve(req, events, &machine)
}

/// Why `req` has no plan.
fn refused(req: &Request) -> anyhow::Error {
    match plan(req) {
        Ok(_) => panic!("a plan for {req:?}"),
        Err(e) => e,
    }
}

/// The rows as (event, slot, cgroup column).
fn rows(p: &Plan) -> Vec<(usize, usize, Option<&str>)> {
    p.series
        .iter()
        .map(|s| (s.event, s.slot, s.cgroup.as_deref()))
        .collect()
}

fn slots(p: &Plan) -> Vec<(u64, &str)> {
    p.cgroups.iter().map(|c| (c.id, c.name.as_str())).collect()
}

#[test]
fn all_cpus_counts_every_online_cpu_system_wide() {
    let p = plan(&request(|r| r.targets.all_cpus = true)).unwrap();
    assert_eq!(p.cpus, [0, 1, 2, 3]);
    assert_eq!(p.target, "'system wide'");
    assert!(!p.task_mode && p.cgroups.is_empty() && p.live.is_none());
    assert_eq!(rows(&p), [(0, 0, None), (1, 0, None)]);
    assert_eq!(p.nr_targets(), 4);
}

#[test]
fn cpu_list_names_the_cpus_as_written_and_must_be_online() {
    let p = plan(&request(|r| r.targets.cpus = Some("3,1".into()))).unwrap();
    assert_eq!(p.cpus, [1, 3]);
    assert_eq!(p.target, "'CPU(s) 3,1'");
    // With -a too, perf says system wide.
    let p = plan(&request(|r| {
        r.targets.cpus = Some("1".into());
        r.targets.all_cpus = true;
    }))
    .unwrap();
    assert_eq!(p.target, "'system wide'");
    let e = refused(&request(|r| r.targets.cpus = Some("1,5".into())));
    assert!(e.downcast_ref::<UsageError>().is_some(), "{e}");
    assert!(e.to_string().contains("CPU 5 is not online"), "{e}");
}

#[test]
fn perf_72s_cpu_list_counts_the_online_cpus_and_refuses_none() {
    let as_72 = |cpus: &str| {
        request(|r| {
            r.targets.cpus = Some(cpus.into());
            r.events.perf_version = Some(PerfVersion::V7_2);
        })
    };
    let p = plan(&as_72("1,5")).unwrap();
    assert_eq!(p.cpus, [1]);
    assert_eq!(p.target, "'CPU(s) 1,5'");
    assert_eq!(
        p.warnings,
        [
            "WARNING: A requested CPU in '1,5' is not supported by PMU 'software' (CPUs 0-3) for event 'task-clock'",
            "WARNING: A requested CPU in '1,5' is not supported by PMU 'software' (CPUs 0-3) for event 'context-switches'",
        ]
    );
    let e = refused(&as_72("5,6"));
    let nothing = e.downcast_ref::<NoSupportedEvents>().expect("none counted");
    assert_eq!(nothing.warnings.len(), 2, "{:?}", nothing.warnings);
    // perf 6.12's refusal says nothing else.
    assert!(plan(&request(|r| r.targets.cpus = Some("1,5".into()))).is_err());
}

#[test]
fn for_each_cgroup_gives_every_event_a_row_in_each_and_one_slot_per_cgroup() {
    let p = plan(&request(|r| {
        r.targets.all_cpus = true;
        r.targets.cgroups.for_each = vec!["web,db".into(), "/web".into()];
    }))
    .unwrap();
    // /web is web: a row of its own, counted in web's slot.
    assert_eq!(slots(&p), [(3, "web"), (2, "db")]);
    let want = [
        (0, 0, Some("web")),
        (1, 0, Some("web")),
        (0, 1, Some("db")),
        (1, 1, Some("db")),
        (0, 0, Some("/web")),
        (1, 0, Some("/web")),
    ];
    assert_eq!(rows(&p), want);
    assert!(p.cgroup_rows);
    // Names, not patterns: the cgroups are fixed.
    assert!(p.live.is_none());
    let e = refused(&request(|r| {
        r.targets.all_cpus = true;
        r.targets.cgroups.for_each = vec!["nope".into()];
    }));
    assert!(e.downcast_ref::<InvalidError>().is_some(), "{e}");
}

#[test]
fn patterns_and_all_cgroups_follow_the_tree_unless_the_rows_are_fixed() {
    let p = plan(&request(|r| {
        r.targets.all_cpus = true;
        r.targets.cgroups.for_each = vec!["web/a.*".into()];
    }))
    .unwrap();
    assert_eq!(slots(&p), [(4, "web/a"), (5, "web/a/b"), (6, "web/a/b/c")]);
    assert_eq!(p.live.as_ref().map(|l| l.capacity), Some(1024));
    // --max-cgroups: the first cgroups of the tree are counted.
    let p = plan(&request(|r| {
        r.targets.all_cpus = true;
        r.targets.cgroups.all = true;
        r.targets.cgroups.max = 2;
    }))
    .unwrap();
    assert_eq!(slots(&p), [(1, "/"), (2, "db")]);
    assert!(p.series.iter().all(|s| s.slot < 2));
    // stat record and -r: the rows stay as they start, every cgroup counted.
    let p = plan(&request(|r| {
        r.targets.all_cpus = true;
        r.targets.cgroups.all = true;
        r.targets.cgroups.max = 2;
        r.fixed_rows = true;
    }))
    .unwrap();
    assert!(p.live.is_none());
    assert_eq!(p.cgroups.len(), 6);
}

#[test]
fn cgroup_per_event_counts_each_event_in_its_own_cgroup() {
    let p = plan(&request(|r| {
        r.events.lists = vec!["task-clock,context-switches,page-faults".into()];
        r.targets.cpus = Some("0-1".into());
        r.targets.cgroups.per_event = vec!["web".into(), "".into(), "web".into()];
    }))
    .unwrap();
    // An empty name counts system-wide: the root's count, with an empty column.
    assert_eq!(slots(&p), [(3, "web"), (1, "/")]);
    let want = [(0, 0, Some("web")), (1, 1, Some("")), (2, 0, Some("web"))];
    assert_eq!(rows(&p), want);
    assert!(!p.cgroup_rows);
}

#[test]
fn more_nested_monitored_cgroups_than_bpf_charges_are_refused() {
    // The root and a chain of cgroups inside each other, every one counted.
    let chain = |depth: usize| -> Result<Plan> {
        let mut m = fixture();
        m.cgroups = vec![""];
        for d in 1..=depth {
            m.cgroups
                .push(Box::leak(vec!["d"; d].join("/").into_boxed_str()));
        }
        let req = request(|r| {
            r.targets.all_cpus = true;
            r.targets.cgroups.all = true;
        });
        let events = PlanEvents::parse(&req, &m)?;
        Plan::resolve(&req, events, &m)
    };
    assert!(chain(MAX_CHARGED_LEVELS - 1).is_ok());
    let e = chain(MAX_CHARGED_LEVELS).err().expect("too deep");
    assert!(e.downcast_ref::<UsageError>().is_some(), "{e}");
    assert!(e.to_string().contains("nested monitored cgroups"), "{e}");
}

#[test]
fn pids_count_every_thread_of_each_process_until_they_end() {
    let p = plan(&request(|r| r.targets.pids = Some("20,10".into()))).unwrap();
    let tids: Vec<libc::pid_t> = p.threads.iter().map(|(t, _)| *t).collect();
    assert_eq!(tids, [10, 11, 20]);
    assert_eq!(p.watched, [20, 10]);
    assert_eq!(p.target, "process id '20,10'");
    assert!(!p.task_mode);
    assert_eq!(p.nr_targets(), 3);
    // -t: the threads named, alone.
    let p = plan(&request(|r| r.targets.tids = Some("11".into()))).unwrap();
    assert_eq!(p.threads, [(11, "comm11".to_string())]);
    assert_eq!(p.target, "thread id '11'");
    let e = refused(&request(|r| r.targets.pids = Some("10,99".into())));
    assert!(matches!(e.downcast_ref(), Some(NoProcess(99))), "{e}");
    let e = refused(&request(|r| r.targets.pids = Some("x".into())));
    assert!(e.downcast_ref::<UsageError>().is_some(), "{e}");
}

#[test]
fn a_command_alone_is_counted_as_a_task_and_nothing_at_all_is_refused() {
    let p = plan(&request(|r| {
        r.targets.command = vec!["sleep".into(), "1".into()]
    }))
    .unwrap();
    assert!(p.task_mode);
    assert_eq!(p.target, "'sleep 1'");
    let e = refused(&request(|_| {}));
    assert!(e.to_string().starts_with("nothing to count"), "{e}");
    // --per-thread alone: every thread of the system, idle ones hidden.
    let p = plan(&request(|r| r.targets.per_thread = true)).unwrap();
    assert_eq!(p.threads.len(), 3);
    assert!(p.hide_idle_threads && p.watched.is_empty());
}

#[test]
fn per_socket_groups_the_cpus_by_the_machines_topology() {
    let p = plan(&request(|r| {
        r.targets.all_cpus = true;
        r.aggr = Some(aggr::Mode::Socket);
    }))
    .unwrap();
    let (mode, groups) = p.aggr.as_ref().unwrap();
    assert_eq!(*mode, aggr::Mode::Socket);
    let cpus: Vec<&[usize]> = groups.iter().map(|g| g.cpus.as_slice()).collect();
    assert_eq!(cpus, [&[0, 1][..], &[2, 3][..]]);
}

#[test]
fn for_each_container_counts_containers_own_cgroups_and_follows_the_tree() {
    const ID: &str = "3474383178be0b726b155b1403d9f7126d73bd6261846e3bbefd6f83bb431645";
    let container: &'static str = Box::leak(format!("docker/{ID}").into_boxed_str());
    let inside: &'static str = Box::leak(format!("docker/{ID}/init").into_boxed_str());
    let machine = Fixture {
        cgroups: vec!["", "docker", container, inside, "system.slice"],
        ..fixture()
    };
    let req = request(|r| {
        r.targets.all_cpus = true;
        r.targets.cgroups.containers = true;
    });
    let p = Plan::resolve(&req, PlanEvents::parse(&req, &machine).unwrap(), &machine).unwrap();
    // The container's own cgroup only: not its parent, nor what its runtime made inside.
    assert_eq!(slots(&p), [(3, container)]);
    let columns: Vec<_> = p.series.iter().map(|s| s.container.as_deref()).collect();
    assert_eq!(columns, [Some("3474383178be"); 2]);
    assert!(p.cgroup_rows && p.containers);
    assert!(matches!(
        p.live.as_ref().map(|l| &l.selection),
        Some(Selection::Containers)
    ));
    // No container yet: no rows, nothing refused; they come as containers start.
    let p = plan(&req).unwrap();
    assert!(p.cgroups.is_empty() && p.series.is_empty());
    assert!(p.live.is_some());
}

/// perf 7.2's words, byte for byte, for the plans it gives up.
#[test]
fn plans_given_up_say_perfs_words() {
    assert_eq!(
        NoProcess(4242).to_string(),
        "Problems finding threads of monitor: no process 4242"
    );
    let none = |refused: Option<&str>, why| {
        NoSupportedEvents {
            refused: refused.map(str::to_string),
            why,
            warnings: Vec::new(),
        }
        .to_string()
    };
    assert_eq!(none(None, Refusal::Invalid), "No supported events found.");
    assert_eq!(
        none(Some("cycles"), Refusal::NotSupported),
        "No supported events found. The cycles event is not supported."
    );
    assert_eq!(
        none(Some("msr/tsc/"), Refusal::InvalidPerThread),
        "No supported events found. Invalid event (msr/tsc/) in per-thread mode, enable system wide with '-a'."
    );
    assert_eq!(
        none(Some("cycles"), Refusal::Invalid),
        "No supported events found. The sys_perf_event_open() syscall failed for event (cycles): Invalid argument \"dmesg | grep -i perf\" may provide additional information."
    );
}
