//! Containers by name against a real Docker daemon (Debian's docker.io): the cgroups its
//! containers get are recognised as theirs (every hierarchy's path in /proc/PID/cgroup,
//! and a walk of the cgroup2 tree), and the Engine API client names them as
//! `docker inspect` does. The test starts dockerd when none answers, imports a busybox
//! image from a local tarball (no registry), runs two named containers, and removes
//! every container and image it made, and the daemon it started, however it ends.
//!
//! Root only. Skipped when docker.io is not installed, unless BPERF_REQUIRE_DOCKER=1.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bperf::container::names::Names;
use bperf::container::{recognize, Runtime};
use bperf::sys::engine_api::EngineSocket;
use common::{require_root, wait_for, TempDir};

const DOCKERD: &str = "/usr/sbin/dockerd";
/// busybox-static's binary: a static busybox runs in an image with nothing else in it.
const BUSYBOX: &str = "/bin/busybox";

/// Whether the test can run; a skip says why, and is a failure under
/// BPERF_REQUIRE_DOCKER=1.
fn docker_available() -> bool {
    let missing = [
        (DOCKERD, "docker.io"),
        ("/usr/bin/docker", "docker.io"),
        (BUSYBOX, "busybox-static"),
    ]
    .into_iter()
    .find(|(p, _)| !Path::new(p).exists());
    let Some((path, package)) = missing else {
        return true;
    };
    assert!(
        std::env::var("BPERF_REQUIRE_DOCKER").as_deref() != Ok("1"),
        "BPERF_REQUIRE_DOCKER=1 but {path} is missing (install {package}: scripts/setup --test)"
    );
    eprintln!("skipped: {path} is missing (install {package}: scripts/setup --test)");
    false
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run docker")
}

/// `docker ARGS`'s standard output, trimmed; panics saying docker's error otherwise.
fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        common::stderr(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn daemon_answers() -> bool {
    docker(&["version", "--format", "{{.Server.Version}}"])
        .status
        .success()
}

/// What the test made, undone when it ends (passing or panicking): containers, then the
/// image, then the daemon if the test started it, then the temporary files.
struct Made {
    containers: Vec<String>,
    image: Option<String>,
    daemon: Option<Child>,
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
        if let Some(mut d) = self.daemon.take() {
            // SAFETY: kill(2) on the daemon this test started and has not reaped.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
            wait_for(20, || d.try_wait().ok().flatten().is_some());
            let _ = d.kill();
            let _ = d.wait();
        }
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

    /// Starts dockerd (cgroupfs driver: there is no systemd here) unless one answers.
    fn ensure_daemon(&mut self) {
        if daemon_answers() {
            return;
        }
        let log = fs::File::create(self.dir.join("dockerd.log")).unwrap();
        let child = Command::new(DOCKERD)
            .args(["--exec-opt", "native.cgroupdriver=cgroupfs"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !daemon_answers() {
            assert!(
                Instant::now() < deadline,
                "dockerd did not answer within 60 s: {}",
                fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
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
        self.containers.push(name.to_string());
        let mut args = vec!["run", "-d", "--name", name];
        for l in labels {
            args.extend(["--label", l]);
        }
        args.extend([image, "/bin/busybox", "sh", "-c", "while :; do :; done"]);
        docker_ok(&args)
    }
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
    require_root();
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
    // controllers), is recognised as that container's own.
    for c in &oracle {
        let text = fs::read_to_string(format!("/proc/{}/cgroup", c.pid)).unwrap();
        for line in text.lines() {
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
