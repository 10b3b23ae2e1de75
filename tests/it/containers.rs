//! Containers by name against a real Docker daemon (Debian's docker.io): the cgroups its
//! containers get are recognised as theirs (every hierarchy's path in /proc/PID/cgroup,
//! and a walk of the cgroup2 tree), and the Engine API client names them as
//! `docker inspect` does. The test starts dockerd when none answers, imports a busybox
//! image from a local tarball (no registry), runs two named containers, and removes
//! every container and image it made, and the daemon it started, however it ends.
//!
//! Root only. Skipped when docker.io is not installed, unless BPERF_REQUIRE_DOCKER=1.

use crate::common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bperf::container::names::Names;
use bperf::container::{recognize, Runtime};
use bperf::sys::engine_api::EngineSocket;
use common::docker::{docker, docker_ok, Daemon, DOCKERD};
use common::{v1, wait_for, TempDir};

/// busybox-static's binary: a static busybox runs in an image with nothing else in it.
const BUSYBOX: &str = "/bin/busybox";

/// Whether the test can run; a skip says why, and is a failure under
/// BPERF_REQUIRE_DOCKER=1.
fn docker_available() -> bool {
    common::docker::tools_available(&[
        (DOCKERD, "docker.io"),
        ("/usr/bin/docker", "docker.io"),
        (BUSYBOX, "busybox-static"),
    ])
}

/// What the test made, undone when it ends (passing or panicking): containers, then the
/// image, then the daemon if the test started it, then the temporary files.
struct Made {
    containers: Vec<String>,
    image: Option<String>,
    daemon: Option<Daemon>,
    dir: TempDir,
}

impl Drop for Made {
    fn drop(&mut self) {
        for c in &self.containers {
            docker(&["rm", "-f", c]);
        }
        if let Some(image) = &self.image {
            docker(&["rmi", "-f", image]);
        }
        // The daemon, if the test started it, stops when `daemon` drops, after this.
    }
}

impl Made {
    fn new() -> Made {
        Made {
            containers: Vec::new(),
            image: None,
            daemon: None,
            dir: TempDir::new("containers"),
        }
    }

    /// Starts dockerd unless one answers.
    fn ensure_daemon(&mut self) {
        self.daemon = Some(Daemon::ensure());
    }

    /// An image holding only a static busybox, imported from a tarball made here.
    fn import_busybox(&mut self) -> String {
        let root = self.dir.join("rootfs");
        fs::create_dir_all(root.join("bin")).unwrap();
        fs::copy(BUSYBOX, root.join("bin/busybox")).unwrap();
        let tar = self.dir.join("rootfs.tar");
        let st = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success(), "tar of the busybox root failed");
        let image = format!("bperf-test-busybox:{}", std::process::id());
        self.image = Some(image.clone());
        docker_ok(&["import", tar.to_str().unwrap(), &image]);
        image
    }

    /// Runs container `name` from `image` with `labels`, spinning; its full id.
    fn run(&mut self, name: &str, image: &str, labels: &[&str]) -> String {
        let labels: Vec<String> = labels.iter().map(|l| format!("--label={l}")).collect();
        let opts: Vec<&str> = labels.iter().map(String::as_str).collect();
        self.run_with(name, image, &opts)
    }

    /// Runs container `name` from `image`, spinning, with further `docker run` options;
    /// its full id.
    fn run_with(&mut self, name: &str, image: &str, opts: &[&str]) -> String {
        self.run_script(name, image, opts, "while :; do :; done")
    }

    /// Runs container `name` from `image` with `docker run` options `opts`, its command
    /// busybox's `sh -c SCRIPT`; its full id.
    fn run_script(&mut self, name: &str, image: &str, opts: &[&str], script: &str) -> String {
        self.containers.push(name.to_string());
        let mut args = vec!["run", "-d", "--name", name];
        args.extend(opts);
        args.extend([image, "/bin/busybox", "sh", "-c", script]);
        docker_ok(&args)
    }
}

/// What each Docker test starts from, root and docker.io given (None, said, without):
/// the counting lock, a daemon that answers and the busybox image.
fn docker_session() -> Option<(common::Serial, Made, String)> {
    if !docker_available() {
        return None;
    }
    let serial = common::serial();
    let mut made = Made::new();
    made.ensure_daemon();
    let image = made.import_busybox();
    Some((serial, made, image))
}

/// What `docker inspect` says about a container: the oracle.
struct Inspected {
    id: String,
    name: String,
    image: String,
    pid: u32,
}

fn inspect(name: &str) -> Inspected {
    let out = docker_ok(&[
        "inspect",
        "--format",
        "{{.Id}}\t{{.Name}}\t{{.Config.Image}}\t{{.State.Pid}}",
        name,
    ]);
    let f: Vec<&str> = out.split('\t').collect();
    assert_eq!(f.len(), 4, "docker inspect said {out:?}");
    Inspected {
        id: f[0].to_string(),
        name: f[1].trim_start_matches('/').to_string(),
        image: f[2].to_string(),
        pid: f[3].parse().expect("a pid"),
    }
}

/// Every cgroup path under `dir` (relative to `mount`, with a leading `/`), to a bounded
/// depth.
fn cgroup_dirs(mount: &Path, dir: &Path, depth: u32, out: &mut Vec<String>) {
    if depth == 0 {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let p = e.path();
            let rel = p
                .strip_prefix(mount)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push(format!("/{rel}"));
            cgroup_dirs(mount, &p, depth - 1, out);
        }
    }
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn docker_containers_are_recognised_from_their_cgroups_and_named_as_docker_inspect_says() {
    if !docker_available() {
        return;
    }
    // Spinning containers would disturb other tests' counts: one at a time.
    let _serial = common::serial();
    let mut made = Made::new();
    made.ensure_daemon();
    let image = made.import_busybox();
    let tag = std::process::id();
    let web = format!("bperf-test-{tag}-web");
    let job = format!("bperf-test-{tag}-job");
    made.run(
        &web,
        &image,
        &[
            "com.docker.compose.project=shop",
            "com.docker.compose.service=web",
        ],
    );
    made.run(
        &job,
        &image,
        &[
            "io.kubernetes.pod.name=batch-0",
            "io.kubernetes.pod.namespace=jobs",
            "io.kubernetes.container.name=worker",
        ],
    );
    let oracle = [inspect(&web), inspect(&job)];

    // Each container's cgroup, in every hierarchy its task is in (cgroup2 and the v1
    // controllers), is recognised as that container's own. A v1 hierarchy the runtime
    // does not manage (one mounted nowhere, or where runc does not look) leaves the
    // task in its root, which is no container's.
    for c in &oracle {
        let text = fs::read_to_string(format!("/proc/{}/cgroup", c.pid)).unwrap();
        for line in text.lines().filter(|l| !l.ends_with(":/")) {
            let path = line.splitn(3, ':').nth(2).unwrap();
            let found = recognize(path).unwrap_or_else(|| panic!("{line}: not recognised"));
            assert_eq!(found.id, c.id, "{line}");
            assert_eq!(found.short_id(), &c.id[..12]);
            assert_eq!(found.runtime, Runtime::Docker, "{line}");
            assert_eq!(found.cgroup, path, "{line}: not the container's own cgroup");
            assert_eq!(found.pod, None);
        }
    }

    // A walk of the cgroup2 tree finds each running container once, as its own cgroup,
    // and nothing `docker ps` does not list.
    let mount = bperf::sys::cgroupfs::discover().unwrap().mount;
    let cgroup2 = if mount.join("cgroup.controllers").exists() {
        mount
    } else {
        PathBuf::from("/sys/fs/cgroup/unified")
    };
    let mut dirs = Vec::new();
    cgroup_dirs(&cgroup2, &cgroup2, 6, &mut dirs);
    let walked: Vec<String> = dirs
        .iter()
        .filter_map(|d| recognize(d).filter(|c| &c.cgroup == d).map(|c| c.id))
        .collect();
    let walked_set: BTreeSet<String> = walked.iter().cloned().collect();
    assert_eq!(
        walked.len(),
        walked_set.len(),
        "a container twice: {walked:?}"
    );
    let running: BTreeSet<String> = docker_ok(&["ps", "-q", "--no-trunc"])
        .lines()
        .map(str::to_string)
        .collect();
    for c in &oracle {
        assert!(
            walked_set.contains(&c.id),
            "{} not found in {}",
            c.name,
            cgroup2.display()
        );
    }
    assert!(
        walked_set.is_subset(&running),
        "recognised {walked_set:?}, docker ps lists {running:?}"
    );

    // The Engine API client names them as docker inspect does, with their labels.
    let mut names = Names::new(EngineSocket::defaults(), Duration::ZERO);
    let now = Instant::now();
    for c in &oracle {
        let (info, warnings) = names.lookup(&c.id, now);
        assert!(warnings.is_empty(), "{warnings:?}");
        let info = info.unwrap_or_else(|| panic!("{} not listed by the API", c.name));
        assert_eq!(info.name, c.name);
        assert_eq!(info.image, c.image);
        assert_eq!(info.state, "running");
    }
    let web_info = names.get(&oracle[0].id).unwrap();
    assert_eq!(web_info.compose_project.as_deref(), Some("shop"));
    assert_eq!(web_info.compose_service.as_deref(), Some("web"));
    assert_eq!(web_info.pod_name, None);
    let job_info = names.get(&oracle[1].id).unwrap();
    assert_eq!(job_info.pod_name.as_deref(), Some("batch-0"));
    assert_eq!(job_info.pod_namespace.as_deref(), Some("jobs"));
    assert_eq!(job_info.kube_container.as_deref(), Some("worker"));

    // Containers come and go: one removed is gone at the next refresh, one started since
    // is found by looking it up.
    docker_ok(&["rm", "-f", &job]);
    let late = format!("bperf-test-{tag}-late");
    made.run(&late, &image, &[]);
    let late_oracle = inspect(&late);
    assert!(names.refresh(Instant::now()).is_empty());
    assert!(
        names.get(&oracle[1].id).is_none(),
        "removed container still named"
    );
    assert_eq!(names.get(&late_oracle.id).unwrap().name, late);
    assert_eq!(names.get(&oracle[0].id).unwrap().name, web);
}

/// The cgroup2 directory of a container's task (`0::/docker/<id>` in /proc/PID/cgroup),
/// relative to the mount.
fn cgroup2_of(pid: u32) -> String {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("0::/"))
        .expect("a cgroup2 line")
        .to_string()
}

/// usage_usec of cpu.stat in `text` (one `grep usage_usec FILE...` line per file, in
/// order), in ns.
fn usages_ns(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            l.rsplit("usage_usec ")
                .next()
                .filter(|_| l.contains("usage_usec "))
        })
        .map(|v| v.trim().parse::<f64>().unwrap() * 1e3)
        .collect()
}

/// One -j line's fields: counter-value, cgroup, container.
fn json_rows(err: &str) -> Vec<serde_json::Value> {
    err.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The value of `key` in a -j row, as text.
fn field<'v>(row: &'v serde_json::Value, key: &str) -> &'v str {
    row[key].as_str().unwrap_or("")
}

/// What a container limited to 0.1 CPU (`--cpus 0.1`) may run unseen by a window that
/// starts or ends at another moment than bperf's read: one burst, its quota of each
/// 100 ms period.
const LIMITED_BURST_NS: f64 = 10e6;

/// A busy container and one limited to a tenth of a CPU, named `bperf-test-PID-{kind}busy`
/// and `...-{kind}slow`: what `docker inspect` says of each, and their cgroups (below
/// the cgroup2 mount), busy first.
fn busy_and_limited(made: &mut Made, image: &str, kind: &str) -> ([Inspected; 2], Vec<String>) {
    let tag = std::process::id();
    let busy = format!("bperf-test-{tag}-{kind}busy");
    let slow = format!("bperf-test-{tag}-{kind}slow");
    made.run_with(&busy, image, &[]);
    made.run_with(&slow, image, &["--cpus", "0.1"]);
    let oracle = [inspect(&busy), inspect(&slow)];
    let cgroups = oracle.iter().map(|c| cgroup2_of(c.pid)).collect();
    (oracle, cgroups)
}

/// Two containers spinning at different rates (one limited to a tenth of a CPU):
/// `--for-each-container` prints one row each, named as `docker inspect` names it, its
/// cgroup the container's own, and counting between what the kernel charged that cgroup
/// (cpu.stat's usage_usec) inside bperf's window (read by the counted command at its
/// start and end) and around it (read before bperf starts and after it ends), within 2%
/// and give or take one of the limited container's bursts.
#[test]
#[ignore = "needs root (make test runs it)"]
fn stat_for_each_container_counts_each_container_as_its_cgroup_is_charged() {
    let Some((_serial, mut made, image)) = docker_session() else {
        return;
    };
    let (oracle, cgroups) = busy_and_limited(&mut made, &image, "");
    let mount = common::cgroup2_mount();
    let stats: Vec<String> = cgroups
        .iter()
        .map(|cg| mount.join(cg).join("cpu.stat").display().to_string())
        .collect();
    let grep = format!("grep usage_usec {}", stats.join(" "));
    let script = format!("{grep}; sleep 2; {grep}");
    let usage_now = || -> Vec<f64> {
        let usage = |cg: &String| common::usage_ns_of(&mount.join(cg)) as f64;
        cgroups.iter().map(usage).collect()
    };
    let before = usage_now();
    let o = common::run_ok(
        common::bperf()
            .args([
                "stat",
                "-a",
                "-j",
                "-e",
                "task-clock",
                "--for-each-container",
            ])
            .args(["--", "sh", "-c", &script]),
    );
    let after = usage_now();
    let err = common::stderr(&o);
    assert!(!err.contains("warning") && !err.contains("cannot"), "{err}");
    let usage = usages_ns(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(usage.len(), 4, "{:?}", String::from_utf8_lossy(&o.stdout));
    let rows = json_rows(&err);
    for (i, c) in oracle.iter().enumerate() {
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| field(r, "container") == c.name)
            .collect();
        assert_eq!(mine.len(), 1, "{}: {err}", c.name);
        assert_eq!(field(mine[0], "cgroup"), cgroups[i]);
        assert!(cgroups[i].ends_with(&c.id), "{}", cgroups[i]);
        let ours: f64 = field(mine[0], "counter-value").parse::<f64>().unwrap() * 1e6;
        // cpu.stat over two windows around bperf's: the command's own reads, inside
        // the time bperf counts, and this test's, before bperf started and after it
        // ended. bperf's count lies between the two, within 2%; the limited container
        // runs in bursts of its quota (10 ms of each 100 ms period), and either edge may
        // cut one.
        let inner = usage[i + 2] - usage[i];
        let outer = after[i] - before[i];
        eprintln!(
            "{}: bperf {ours:.0} ns, cpu.stat {inner:.0} ns inside, {outer:.0} ns around",
            c.name
        );
        let burst = if i == 1 { LIMITED_BURST_NS } else { 0.0 };
        assert!(
            ours >= inner * 0.98 - burst && ours <= outer * 1.02 + burst,
            "{}: counted {ours} ns, cpu.stat {inner} ns inside its window, {outer} ns around it",
            c.name
        );
    }
    // The limited one ran less: the rows are not the same count twice.
    let busy_ns = usage[2] - usage[0];
    let slow_ns = usage[3] - usage[1];
    assert!(slow_ns < busy_ns, "busy {busy_ns}, slow {slow_ns}");
}

/// `bperf top --batch --for-each-container`: a busy container and one limited to a
/// tenth of a CPU, each a line named and imaged as `docker inspect` says, with the
/// run-queue columns top shows by default, ending with its own cgroup, the busy one first; each refresh's CPUs within 5% of what the
/// kernel charged the container's cgroup (cpu.stat's usage_usec) between the arrivals
/// of that refresh and the one before.
#[test]
#[ignore = "needs root (make test runs it)"]
fn top_batch_names_each_container_with_its_cpus_as_its_cgroup_is_charged() {
    use std::io::BufRead;
    let Some((_serial, mut made, image)) = docker_session() else {
        return;
    };
    let (oracle, cgroups) = busy_and_limited(&mut made, &image, "top");
    let mount = common::cgroup2_mount();
    let usage = |cg: &str| -> f64 {
        let text = fs::read_to_string(mount.join(cg).join("cpu.stat")).unwrap();
        usages_ns(&format!("x:{}", text.lines().next().unwrap()))[0]
    };
    let mut top = common::bperf()
        .args(["top", "--batch", "-n", "4", "-d", "0.5", "-e", "task-clock"])
        .arg("--for-each-container")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(top.stdout.take().unwrap());
    // Per page: when its header came, the cgroups' usage and the time cpu.stat leaves
    // out then, its lines' words.
    type Page = (Instant, Vec<f64>, f64, Vec<Vec<String>>);
    let mut pages: Vec<Page> = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        if line.starts_with("bperf top ") {
            let used = cgroups.iter().map(|c| usage(c)).collect();
            pages.push((Instant::now(), used, common::unaccounted_ns(), Vec::new()));
        } else if let Some(page) = pages.last_mut() {
            let words: Vec<String> = line.split_whitespace().map(String::from).collect();
            if !words.is_empty() {
                page.3.push(words);
            }
        }
    }
    assert!(top.wait().unwrap().success());
    assert_eq!(pages.len(), 4);
    for (k, (at, used, unaccounted, lines)) in pages.iter().enumerate() {
        assert_eq!(
            lines[0],
            ["CONTAINER", "IMAGE", "CPUsv", "wait", "preempt/s", "CGROUP"],
            "{lines:?}"
        );
        let rows: Vec<&Vec<String>> = lines[1..]
            .iter()
            .filter(|w| w[0].starts_with(&format!("bperf-test-{}-", std::process::id())))
            .collect();
        let names: Vec<&str> = rows.iter().map(|w| w[0].as_str()).collect();
        let made_names = oracle.each_ref().map(|c| c.name.as_str());
        assert_eq!(names, made_names, "{lines:?}");
        for (i, c) in oracle.iter().enumerate() {
            assert_eq!(rows[i].len(), 6, "{:?}", rows[i]);
            assert_eq!(rows[i][1], c.image);
            assert_eq!(rows[i][5], cgroups[i]);
        }
        if k == 0 {
            continue;
        }
        let (before_at, before_used, before_unaccounted, _) = &pages[k - 1];
        let wall = (*at - *before_at).as_secs_f64();
        let slack = unaccounted - before_unaccounted + 1e7;
        for (i, c) in oracle.iter().enumerate() {
            let cpus: f64 = rows[i][2].parse().unwrap();
            let ours = cpus * wall * 1e9;
            let kernel = used[i] - before_used[i];
            eprintln!(
                "refresh {k}, {}: {cpus} CPUs, cpu.stat {:.4}",
                c.name,
                kernel / wall / 1e9
            );
            // cpu.stat is read when top's page comes, after top read its counters: the
            // limited container's burst (10 ms of each 100 ms) may fall in between.
            let burst = if i == 1 { LIMITED_BURST_NS } else { 0.0 };
            assert!(
                ours >= kernel * 0.95 - burst && ours <= kernel * 1.05 + slack + burst,
                "refresh {k}, {}: {cpus} CPUs over {wall:.3} s, cpu.stat {:.4} CPUs",
                c.name,
                kernel / wall / 1e9
            );
        }
    }
}

/// bperf's stderr lines, as they come.
fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// A bperf child killed and reaped however the test ends.
struct Bperf(Child);

impl Drop for Bperf {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With -I, a container started after bperf started gets rows, named, from the next
/// interval on, and a container removed while counting ends its rows while counting
/// goes on for the other one.
#[test]
#[ignore = "needs root (make test runs it)"]
fn stat_for_each_container_follows_containers_started_and_removed_while_counting() {
    let Some((_serial, mut made, image)) = docker_session() else {
        return;
    };
    let early = format!("bperf-test-{}-early", std::process::id());
    let late = format!("bperf-test-{}-late", std::process::id());
    let mut stat = Bperf(
        common::bperf()
            .args(["stat", "-a", "-j", "-e", "task-clock", "-I", "200"])
            .arg("--for-each-container")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = lines_of(&mut stat.0);
    // bperf starts with none of the test's containers (with none at all on a host that
    // runs no other): both come while it counts.
    std::thread::sleep(Duration::from_millis(500));
    made.run_with(&early, &image, &["--cpus", "0.1"]);
    std::thread::sleep(Duration::from_millis(500));
    let id = made.run_with(&late, &image, &[]);
    let is_late = |l: &str| l.contains(&format!("\"container\" : \"{late}\""));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.iter().filter(|l: &&String| is_late(l)).count() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("no rows for {late} within 10 s: {seen:?}"),
        }
    }
    docker_ok(&["rm", "-f", &late]);
    std::thread::sleep(Duration::from_millis(1000));
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(stat.0.id() as i32, libc::SIGINT) };
    let st = stat.0.wait().unwrap();
    assert_eq!(st.code(), Some(130), "bperf ended with {st}");
    seen.extend(rx.iter());
    let text = seen.join("\n");
    assert!(!text.contains("bperf:"), "{text}");
    let rows = json_rows(&text);
    let mine: Vec<_> = rows
        .iter()
        .filter(|r| field(r, "container") == late)
        .collect();
    assert!(
        mine.iter().all(|r| field(r, "cgroup").ends_with(&id)),
        "{text}"
    );
    // Spinning: it counted in its intervals (how much depends on the machine's load;
    // the test above checks the amounts).
    let busy = mine
        .iter()
        .filter(|r| field(r, "counter-value").parse::<f64>().unwrap_or(0.0) > 0.0)
        .count();
    assert!(busy >= 2, "{text}");
    // Its rows end once removed; the early container's go on.
    let time = |r: &&serde_json::Value| r["interval"].as_f64().unwrap();
    let last_mine = mine.iter().map(time).fold(0.0, f64::max);
    let first_mine = mine.iter().map(time).fold(f64::MAX, f64::min);
    let earlies: Vec<_> = rows
        .iter()
        .filter(|r| field(r, "container") == early)
        .collect();
    let first = earlies.iter().map(time).fold(f64::MAX, f64::min);
    let last = earlies.iter().map(time).fold(0.0, f64::max);
    assert!(
        first + 0.3 < first_mine,
        "{late} counted before it started: {text}"
    );
    assert!(
        last_mine + 0.5 < last,
        "{late} still printed at {last_mine} of {last}"
    );
}

/// The labels of every `bperf_count_total` series in a text exposition.
fn count_series(text: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    text.lines()
        .filter_map(|l| l.strip_prefix("bperf_count_total{"))
        .map(|l| {
            let inner = &l[..l.rfind('}').unwrap()];
            inner
                .split("\",")
                .filter_map(|kv| kv.split_once("=\""))
                .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
                .collect()
        })
        .collect()
}

/// The labels of the series of container `name`'s cgroup in a scrape, if it has any.
fn labels_of(text: &str, name: &str) -> Option<std::collections::BTreeMap<String, String>> {
    count_series(text)
        .into_iter()
        .find(|l| l.get("container").map(String::as_str) == Some(name))
}

/// bperf serve --for-each-container: a container's series carry `container`,
/// `container_id` and `image` (and, for a Kubernetes container, `pod` and `namespace`
/// rather than the runtime's own name), as `docker inspect` says; a container started
/// while serve runs shows up with its labels, a removed one's series go.
#[test]
#[ignore = "needs root (make test runs it)"]
fn serve_labels_each_containers_series_with_its_names() {
    let Some((_serial, mut made, image)) = docker_session() else {
        return;
    };
    let tag = std::process::id();
    let web = format!("bperf-test-{tag}-web");
    let job = format!("bperf-test-{tag}-job");
    made.run_with(&web, &image, &["--cpus", "0.1"]);
    let port = common::http::free_port();
    let mut serve = Bperf(
        common::bperf()
            .args(["serve", "-e", "task-clock", "--for-each-container"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let scrape = || common::http::get(port, "/metrics", "text/plain").map(|(_, body)| body);
    common::wait_for_some(20, scrape).expect("bperf serve never answered");

    let w = inspect(&web);
    // Named once dockerd answered bperf's look-up, which no scrape waits for.
    let labels = common::wait_for_some(5, || scrape().and_then(|t| labels_of(&t, &w.name)))
        .unwrap_or_else(|| panic!("{web} never named: {}", scrape().unwrap_or_default()));
    assert_eq!(labels["container_id"], w.id);
    assert_eq!(labels["image"], w.image);
    assert_eq!(labels["event"], "task-clock");
    assert!(labels["cgroup"].ends_with(&w.id));
    assert!(!labels.contains_key("pod") && !labels.contains_key("namespace"));

    // Started while serving, with the labels dockershim puts on a pod's containers.
    made.run_with(
        &job,
        &image,
        &[
            "--cpus=0.1",
            "--label=io.kubernetes.pod.name=batch-0",
            "--label=io.kubernetes.pod.namespace=jobs",
            "--label=io.kubernetes.container.name=worker",
        ],
    );
    let j = inspect(&job);
    let labels = common::wait_for_some(5, || scrape().and_then(|t| labels_of(&t, "worker")))
        .unwrap_or_else(|| panic!("{job} never scraped: {}", scrape().unwrap_or_default()));
    assert_eq!(labels["container_id"], j.id);
    assert_eq!(labels["pod"], "batch-0");
    assert_eq!(labels["namespace"], "jobs");
    assert_eq!(labels["image"], j.image);

    // Removed: its final counts are scraped once, then it is gone.
    docker_ok(&["rm", "-f", &job]);
    assert!(
        common::wait_for(5, || scrape()
            .is_some_and(|t| labels_of(&t, "worker").is_none())),
        "{job} still scraped after its removal"
    );
    assert!(labels_of(&scrape().unwrap(), &w.name).is_some());
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(serve.0.id() as i32, libc::SIGTERM) };
    let st = serve.0.wait().unwrap();
    let mut err = String::new();
    use std::io::Read;
    serve
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(st.code(), Some(0), "{err}");
    assert!(!err.contains("cannot list"), "{err}");
}

/// bperf record names the containers' cgroups as their runtime does when recording
/// starts; `report --sort container` breaks the slices down by those names (agreeing
/// with each container's cgroup total in the same report), and the timeline's slices
/// carry them after the cgroup, with no runtime asked at report time.
#[test]
#[ignore = "needs root (make test runs it)"]
fn record_keeps_container_names_for_report_sort_container_and_the_timeline() {
    let Some((_serial, mut made, image)) = docker_session() else {
        return;
    };
    let tag = std::process::id();
    let web = format!("bperf-test-{tag}-rweb");
    let job = format!("bperf-test-{tag}-rjob");
    made.run_with(&web, &image, &["--cpus", "0.2"]);
    made.run_with(&job, &image, &["--cpus", "0.1"]);
    let oracle = [inspect(&web), inspect(&job)];
    let data = made.dir.join("bperf.data");
    let data = data.to_str().unwrap();
    common::run_ok(
        common::bperf()
            .args(["record", "-e", "task-clock", "-o", data])
            .args(["--for-each-container", "--", "sleep", "1"]),
    );
    // The daemon is gone by report time: the names come from the file.
    docker_ok(&["rm", "-f", &web, &job]);
    let report = |args: &[&str]| {
        let o = common::run_ok(common::bperf().args(["report", "-i", data]).args(args));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let by_container = report(&["--sort", "container", "-x,"]);
    let totals = report(&["-x,"]);
    for c in &oracle {
        let row = by_container
            .lines()
            .find(|l| l.split(',').next() == Some(c.name.as_str()))
            .unwrap_or_else(|| panic!("no row for {}: {by_container}", c.name));
        let sorted_ns: f64 = row.rsplit(',').next().unwrap().parse().unwrap();
        let total = totals
            .lines()
            .find(|l| l.contains(&c.id))
            .unwrap_or_else(|| panic!("no total for {}: {totals}", c.name));
        let total_ns = total.split(',').next().unwrap().parse::<f64>().unwrap() * 1e6;
        assert!(sorted_ns > 0.0, "{row}");
        assert!(
            common::within(sorted_ns, total_ns, 0.1),
            "{}: --sort container {sorted_ns}, totals {total_ns}",
            c.name
        );
    }
    let trace = made.dir.join("trace.json");
    report(&["--timeline", trace.to_str().unwrap()]);
    let trace = fs::read_to_string(&trace).unwrap();
    for c in &oracle {
        let track = format!("docker/{} ({})", c.id, c.name);
        assert!(trace.contains(&track), "no slice named {track}");
    }
}

/// usage_usec of the cpu.stat of `cgroup` (below the cgroup2 mount), in ns.
fn usage_of(cgroup: &str) -> f64 {
    let stat = fs::read_to_string(common::cgroup2_mount().join(cgroup).join("cpu.stat")).unwrap();
    usages_ns(&stat)[0]
}

/// A container started while bperf records every container: its slices are in the
/// file from when its cgroup appears, named as `docker inspect` names it, and add up to
/// what the kernel charged its cgroup (cpu.stat, read once it is paused) within 2%, less
/// at most what it ran before it slept its first second (its start, which may come
/// before bperf sees its cgroup).
#[test]
#[ignore = "needs root (make test runs it)"]
fn record_follows_a_container_started_while_recording() {
    let Some((_serial, mut made, image)) = docker_session() else {
        return;
    };
    let data = made.dir.join("late.data");
    let mut record = Bperf(
        common::bperf()
            .args(["record", "-e", "task-clock", "--for-each-container", "-o"])
            .arg(&data)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_for(10, || !common::loaded_bperf_programs().is_empty()),
        "bperf record did not start"
    );
    let late = format!("bperf-test-{}-rlate", std::process::id());
    made.run_script(&late, &image, &[], "sleep 1; while :; do :; done");
    let c = inspect(&late);
    let cgroup = cgroup2_of(c.pid);
    let started = usage_of(&cgroup);
    std::thread::sleep(Duration::from_millis(2500));
    docker_ok(&["pause", &late]);
    let kernel = usage_of(&cgroup);
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(record.0.id() as i32, libc::SIGINT) };
    let st = record.0.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(record.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(130), "bperf record ended with {st}: {err}");
    assert!(
        err.contains("[ bperf record: Captured and wrote") && !err.contains("were lost"),
        "{err}"
    );
    docker_ok(&["rm", "-f", &late]);
    let o = common::run_ok(common::bperf().arg("report").arg("-i").arg(&data).args([
        "--sort",
        "container",
        "-x,",
    ]));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    let row = table
        .lines()
        .find(|l| l.split(',').next() == Some(late.as_str()))
        .unwrap_or_else(|| panic!("no row for {late}: {table}"));
    let ours: f64 = row.rsplit(',').next().unwrap().parse().unwrap();
    eprintln!("{late}: recorded {ours:.0} ns, cpu.stat {kernel:.0} ns, {started:.0} ns of it at its start");
    assert!(
        ours <= kernel * 1.02 && ours >= (kernel - started) * 0.98,
        "{late}: recorded {ours} ns, cpu.stat {kernel} ns ({started} ns of it before it slept)\n{table}"
    );
}

/// perf_event mounted as a cgroup v1 hierarchy where runc looks for it (beside the other
/// v1 controllers in /sys/fs/cgroup's tmpfs), unmounted and removed when dropped, with
/// the `docker` cgroup dockerd leaves in it.
struct PerfEventV1(PathBuf);

impl PerfEventV1 {
    /// None (saying why) where /sys/fs/cgroup is not a hybrid layout of v1 controllers
    /// or perf_event is mounted already.
    fn mount() -> Option<PerfEventV1> {
        // A killed test's hierarchy would look like one mounted by someone else.
        v1::put_back_what_a_killed_test_left();
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
        let hybrid = mounts
            .lines()
            .any(|l| l.starts_with("tmpfs /sys/fs/cgroup "))
            && mounts
                .lines()
                .any(|l| l.contains(" cgroup ") && l.contains("cpuacct"));
        let taken = mounts
            .lines()
            .any(|l| l.split(' ').nth(2) == Some("cgroup") && l.contains("perf_event"));
        if !hybrid || taken {
            eprintln!("skipped: no v1 layout to mount perf_event in (or it is mounted)");
            return None;
        }
        let dir = PathBuf::from("/sys/fs/cgroup/perf_event");
        fs::create_dir(&dir).unwrap();
        if !v1::mount_for_test(&dir) {
            let _ = fs::remove_dir(&dir);
            eprintln!("skipped: perf_event cannot be mounted as v1 here");
            return None;
        }
        Some(PerfEventV1(dir))
    }
}

impl Drop for PerfEventV1 {
    /// A v1 hierarchy unmounted while it has cgroups below its root lives on, mounted
    /// nowhere: every cgroup in it (dockerd's `docker` and what runc has not yet
    /// removed of a container's) goes first.
    fn drop(&mut self) {
        v1::put_back_or_fail(&self.0);
        let _ = fs::remove_dir(&self.0);
    }
}

/// cpuacct.usage of a v1 cgroup at its start and end, in ns: from `cat A; sleep; cat A`.
fn cpuacct_window(text: &str) -> f64 {
    let v: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(v.len(), 2, "{text}");
    v[1] - v[0]
}

/// cgroup v1: with perf_event mounted as its own hierarchy, Docker puts a container in it,
/// and bperf (--for-each-container) and perf 6.12 (-G docker/ID) each count it within 2%
/// of what the kernel's cpuacct charged it over the same window.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_container_in_a_v1_perf_event_hierarchy_is_counted_as_cpuacct_charges_it() {
    if !docker_available() {
        return;
    }
    let _serial = common::serial();
    let Some(_v1) = PerfEventV1::mount() else {
        return;
    };
    let mut made = Made::new();
    made.ensure_daemon();
    let image = made.import_busybox();
    let name = format!("bperf-test-{}-v1", std::process::id());
    made.run_with(&name, &image, &[]);
    let c = inspect(&name);
    let cgroup = format!("docker/{}", c.id);
    assert!(
        Path::new("/sys/fs/cgroup/perf_event")
            .join(&cgroup)
            .is_dir(),
        "dockerd did not put {name} in the v1 perf_event hierarchy"
    );
    let usage = format!("/sys/fs/cgroup/cpuacct/{cgroup}/cpuacct.usage");
    let script = format!("cat {usage}; sleep 1; cat {usage}");
    let count = |tool: &mut Command| {
        let o = common::run_ok(tool.args(["--", "sh", "-c", &script]));
        let kernel = cpuacct_window(&String::from_utf8_lossy(&o.stdout));
        (common::stderr(&o), kernel)
    };
    let (err, kernel) = count(common::bperf().args([
        "stat",
        "-a",
        "-j",
        "-e",
        "task-clock",
        "--for-each-container",
    ]));
    let rows = json_rows(&err);
    let row = rows
        .iter()
        .find(|r| field(r, "container") == c.name)
        .unwrap_or_else(|| panic!("no row for {name}: {err}"));
    assert_eq!(field(row, "cgroup"), cgroup, "{err}");
    let ours = field(row, "counter-value").parse::<f64>().unwrap() * 1e6;
    eprintln!("bperf {ours:.0} ns, cpuacct {kernel:.0} ns");
    assert!(
        common::within(ours, kernel, 2.0),
        "bperf {ours}, cpuacct {kernel}"
    );
    let Some(perf) = common::parity::perf_612() else {
        eprintln!("perf 6.12 not here: bperf checked against cpuacct only");
        return;
    };
    let (err, kernel) =
        count(Command::new(perf).args(["stat", "-a", "-x,", "-e", "task-clock", "-G", &cgroup]));
    let theirs = err
        .lines()
        .find(|l| l.contains(",task-clock,"))
        .and_then(|l| l.split(',').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("perf: {err}"))
        * 1e6;
    eprintln!("perf {theirs:.0} ns, cpuacct {kernel:.0} ns");
    assert!(
        common::within(theirs, kernel, 2.0),
        "perf {theirs}, cpuacct {kernel}"
    );
}
