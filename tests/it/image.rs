//! The container image from the repository's Dockerfile, built offline (no network in
//! the build; its base, debian:bookworm-slim, made by scripts/debian-root when Docker has
//! none), run as deploy/kubernetes/daemonset.yaml runs it: the DaemonSet's two
//! capabilities (CAP_SYS_ADMIN where Docker knows neither), Docker's default seccomp
//! profile, the host's PID namespace, a read-only root and read-only mounts of the
//! cgroup tree, BTF, bpffs and the runtime's one socket; its bperf has CAP_BPF and
//! CAP_PERFMON as permitted file capabilities, for the DaemonSet's non-root uid. Its
//! `bperf serve --all-cgroups` counts a cgroup of the host as the kernel charges it
//! (cpu.stat, within 2%) and names a Docker container's cgroup with its name.
//!
//! Root only. Skipped when docker.io or debootstrap is missing, unless
//! BPERF_REQUIRE_DOCKER=1.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::docker::{docker, docker_ok, tools_available, Daemon, DOCKERD};
use common::http::get;
use common::{
    run_ok, serial, unaccounted_ns, unaccounted_since, wait_for_some, workload, TempDir, TestCgroup,
};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");
const BASE: &str = "debian:bookworm-slim";

/// What the test made in Docker, removed when it ends: containers, its image, and the
/// base image if the test imported it.
struct Made {
    containers: Vec<String>,
    images: Vec<String>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for c in &self.containers {
            docker(&["rm", "-f", c]);
        }
        for i in &self.images {
            docker(&["rmi", "-f", i]);
        }
    }
}

/// The base image, imported from the cached debootstrap root when Docker lacks it or it
/// lacks setcap (a base made before the image needed it).
fn ensure_base(made: &mut Made) {
    let sh = [
        "run",
        "--rm",
        "--network=none",
        "--entrypoint",
        "/bin/sh",
        BASE,
        "-c",
    ];
    if docker(&[&sh[..], &["command -v setcap"]].concat())
        .status
        .success()
    {
        return;
    }
    made.images.push(BASE.to_string());
    run_ok(Command::new(Path::new(MANIFEST).join("scripts/debian-root")).arg("--image"));
}

/// Builds the Dockerfile with no network, from a context holding what it copies: the
/// test's binary as target/release/bperf and the man pages.
fn build_image(made: &mut Made) -> String {
    let ctx = TempDir::new("image");
    fs::create_dir_all(ctx.join("target/release")).unwrap();
    fs::copy(common::BPERF_EXE, ctx.join("target/release/bperf")).unwrap();
    fs::create_dir(ctx.join("man")).unwrap();
    for page in fs::read_dir(Path::new(MANIFEST).join("man")).unwrap() {
        let page = page.unwrap().path();
        fs::copy(&page, ctx.join("man").join(page.file_name().unwrap())).unwrap();
    }
    let image = format!("bperf-test-image:{}", std::process::id());
    made.images.push(image.clone());
    run_ok(
        Command::new("docker")
            .env("DOCKER_BUILDKIT", "0")
            .args(["build", "-q", "--network=none", "-t", &image, "-f"])
            .arg(Path::new(MANIFEST).join("Dockerfile"))
            .arg(ctx.path()),
    );
    image
}

/// The DaemonSet's capabilities for loading BPF and counting CPUs.
const BPF_CAPS: [&str; 2] = ["--cap-add=BPF", "--cap-add=PERFMON"];

/// What Docker before 23 (Debian 12's docker.io 20.10) takes instead: it knows neither
/// CAP_BPF nor CAP_PERFMON, which CAP_SYS_ADMIN includes.
const OLD_DOCKER_CAPS: [&str; 1] = ["--cap-add=SYS_ADMIN"];

/// `docker run` options of the DaemonSet (deploy/kubernetes/daemonset.yaml), with
/// `bpf_caps` for its BPF and PERFMON.
fn daemonset_options(bpf_caps: &[&str]) -> Vec<String> {
    let mut opts: Vec<String> = [
        "--pid=host",
        "--read-only",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--volume=/sys/fs/cgroup:/sys/fs/cgroup:ro",
        "--volume=/sys/kernel/btf:/sys/kernel/btf:ro",
        "--volume=/sys/fs/bpf:/sys/fs/bpf:ro",
        "--volume=/var/run/docker.sock:/var/run/docker.sock:ro",
    ]
    .map(String::from)
    .to_vec();
    opts.extend(
        bpf_caps
            .iter()
            .filter(|c| in_bounding_set(c))
            .map(|c| c.to_string()),
    );
    // The kubelet's log links, where the host has them (Docker would make the directory).
    for dir in ["/var/log/containers", "/var/log/pods"] {
        if Path::new(dir).is_dir() {
            opts.push(format!("--volume={dir}:{dir}:ro"));
        }
    }
    opts
}

/// Whether this process may grant the capability of `--cap-add=NAME` (runc cannot give
/// a container one outside its own bounding set: this VM has no CAP_SYS_RESOURCE); said
/// when not.
fn in_bounding_set(cap_add: &str) -> bool {
    let bit = match cap_add.trim_start_matches("--cap-add=") {
        "SYS_ADMIN" => 21,
        "PERFMON" => 38,
        "BPF" => 39,
        other => panic!("no bit for {other}"),
    };
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap();
    let has = bounding & (1 << bit) != 0;
    if !has {
        eprintln!("this machine's bounding set lacks {cap_add}: left out");
    }
    has
}

/// Starts `bperf serve --all-cgroups` in container `name` as the DaemonSet runs it, with
/// CAP_SYS_ADMIN instead of CAP_BPF and CAP_PERFMON where Docker knows neither (said).
fn run_serve(name: &str, image: &str) {
    let serve = [
        "serve",
        "--listen",
        "0.0.0.0:9464",
        "--all-cgroups",
        "-e",
        "task-clock",
    ];
    let run = |caps: &[&str]| {
        let opts = daemonset_options(caps);
        let mut args = vec!["run", "-d", "--name", name, "-p", "127.0.0.1::9464"];
        args.extend(opts.iter().map(String::as_str));
        args.push(image);
        args.extend(serve);
        docker(&args)
    };
    let out = run(&BPF_CAPS);
    if out.status.success() {
        return;
    }
    let err = common::stderr(&out);
    assert!(err.contains("unknown capability"), "docker run: {err}");
    eprintln!(
        "this Docker knows no CAP_BPF or CAP_PERFMON: CAP_SYS_ADMIN instead ({})",
        err.trim()
    );
    docker(&["rm", "-f", name]);
    let out = run(&OLD_DOCKER_CAPS);
    assert!(out.status.success(), "docker run: {}", common::stderr(&out));
}

/// The loopback port Docker published the container's 9464 on.
fn published_port(container: &str) -> u16 {
    let out = docker_ok(&["port", container, "9464/tcp"]);
    let first = out.lines().next().unwrap_or_default();
    first
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("docker port: {out}"))
}

/// The value of the series of `metric` whose labels include each of `labels`.
fn value(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
#[ignore = "needs root and Docker (make test runs it)"]
fn the_image_counts_host_cgroups_and_names_containers_as_the_daemonset_runs_it() {
    if !tools_available(&[
        (DOCKERD, "docker.io"),
        ("/usr/bin/docker", "docker.io"),
        ("/usr/sbin/debootstrap", "debootstrap"),
    ]) {
        return;
    }
    let _g = serial();
    let _daemon = Daemon::ensure();
    let mut made = Made {
        containers: Vec::new(),
        images: Vec::new(),
    };
    ensure_base(&mut made);
    let image = build_image(&mut made);
    // The DaemonSet's non-root uid gets its two capabilities from the binary's file
    // capabilities: permitted, not effective (tests/it/deploy.rs runs such a copy).
    let caps = docker_ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "getcap",
        &image,
        "/usr/bin/bperf",
    ]);
    assert_eq!(caps, "/usr/bin/bperf cap_perfmon,cap_bpf=p", "getcap");
    let tag = std::process::id();
    // A Docker container, spinning a fifth of a CPU, to be named.
    let spinner = format!("bperf-test-{tag}-spin");
    made.containers.push(spinner.clone());
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &spinner,
        "--cpus",
        "0.2",
        "--entrypoint",
        "sh",
        &image,
        "-c",
        "while :; do :; done",
    ]);
    let serve = format!("bperf-test-{tag}-serve");
    made.containers.push(serve.clone());
    run_serve(&serve, &image);
    let port = published_port(&serve);
    let scrape = || {
        get(port, "/metrics", "*/*")
            .map(|(_, body)| body)
            .filter(|b| b.contains("bperf_cgroups"))
    };
    let logs = || common::stderr(&docker(&["logs", &serve]));
    wait_for_some(30, scrape)
        .unwrap_or_else(|| panic!("bperf serve in the container never answered: {}", logs()));
    // A host cgroup made now, counted from its creation; spun in once bperf shows it.
    let cg = TestCgroup::new("image");
    let shown = format!("cgroup=\"{}\"", cg.name);
    wait_for_some(10, || scrape().filter(|t| t.contains(&shown)))
        .unwrap_or_else(|| panic!("{} never scraped: {}", cg.name, logs()));
    let unaccounted = unaccounted_ns();
    run_ok(
        Command::new(workload())
            .args(["spin", "1500", &cg.procs()])
            .stderr(Stdio::null()),
    );
    std::thread::sleep(Duration::from_millis(200));
    let kernel = cg.usage_ns() as f64;
    let text = scrape().unwrap_or_else(|| panic!("no scrape: {}", logs()));
    let ours = value(
        &text,
        "bperf_count_total",
        &["event=\"task-clock\"", &shown],
    )
    .unwrap_or_else(|| panic!("no {shown} in {text}"));
    let slack = unaccounted_since(unaccounted);
    eprintln!(
        "{}: bperf in the container {ours} ns, cpu.stat {kernel} ns",
        cg.name
    );
    assert!(
        ours >= kernel * 0.98 && ours <= kernel * 1.02 + slack,
        "{}: bperf in the container {ours} ns, cpu.stat {kernel} ns (+ up to {slack} ns the kernel leaves out)",
        cg.name
    );
    let named = format!("container=\"{spinner}\"");
    let spun = value(
        &text,
        "bperf_count_total",
        &["event=\"task-clock\"", &named],
    );
    assert!(
        spun.is_some_and(|ns| ns > 0.0),
        "no task-clock labelled {named}: {text}"
    );
    docker_ok(&["stop", "-t", "10", &serve]);
    let code = docker_ok(&["inspect", "-f", "{{.State.ExitCode}}", &serve]);
    assert_eq!(code, "0", "bperf serve's exit after SIGTERM: {}", logs());
}
