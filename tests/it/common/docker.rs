//! Docker for the tests (Debian's docker.io): the `docker` command, a daemon started
//! when none answers and stopped again when the test ends, and the skip (or, under
//! BPERF_REQUIRE_DOCKER=1, the failure) when a tool is missing.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{wait_for, TempDir};

pub const DOCKERD: &str = "/usr/sbin/dockerd";

/// Whether every (path, package) in `tools` is here; a skip says which is missing, and
/// is a failure under BPERF_REQUIRE_DOCKER=1.
pub fn tools_available(tools: &[(&str, &str)]) -> bool {
    let Some((path, package)) = tools.iter().find(|(p, _)| !Path::new(p).exists()) else {
        return true;
    };
    assert!(
        std::env::var("BPERF_REQUIRE_DOCKER").as_deref() != Ok("1"),
        "BPERF_REQUIRE_DOCKER=1 but {path} is missing (install {package}: scripts/setup --test)"
    );
    eprintln!("skipped: {path} is missing (install {package}: scripts/setup --test)");
    false
}

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run docker")
}

/// `docker ARGS`'s standard output, trimmed; panics saying docker's error otherwise.
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        super::stderr(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn daemon_answers() -> bool {
    docker(&["version", "--format", "{{.Server.Version}}"])
        .status
        .success()
}

/// The daemon a test started (None when one answered already), stopped when dropped,
/// with the `docker` parent cgroups it made; stopped by the kernel when the test is
/// killed, its parent cgroups then removed by the next test that starts one.
pub struct Daemon {
    child: Option<Child>,
    _dir: TempDir,
}

impl Daemon {
    /// Starts dockerd (cgroupfs driver: there is no systemd here) unless one answers.
    pub fn ensure() -> Daemon {
        let dir = TempDir::new("dockerd");
        if daemon_answers() {
            return Daemon {
                child: None,
                _dir: dir,
            };
        }
        // What a killed test's daemon left, which nothing else removes.
        remove_docker_parents();
        let log_path = dir.join("dockerd.log");
        let log = fs::File::create(&log_path).unwrap();
        let mut command = Command::new(DOCKERD);
        command
            .args(["--exec-opt", "native.cgroupdriver=cgroupfs"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: prctl(2) only, between fork and exec: the daemon gets SIGTERM (and
        // stops its containers) when the test thread that started it ends, a SIGKILL of
        // the test included, rather than outliving it.
        unsafe {
            command.pre_exec(|| {
                match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            })
        };
        let child = command.spawn().expect("start dockerd");
        let daemon = Daemon {
            child: Some(child),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !daemon_answers() {
            assert!(
                Instant::now() < deadline,
                "dockerd did not answer within 60 s: {}",
                fs::read_to_string(&log_path).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        daemon
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut d) = self.child.take() {
            // SAFETY: kill(2) on the daemon this test started and has not reaped.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
            wait_for(20, || d.try_wait().ok().flatten().is_some());
            let _ = d.kill();
            let _ = d.wait();
            remove_docker_parents();
        }
    }
}

/// The `docker` parent cgroup the daemon made in each hierarchy, now that its
/// containers are gone (rmdir leaves one that still holds anything).
fn remove_docker_parents() {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for dir in mounts.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() > 2 && f[2].starts_with("cgroup")).then(|| Path::new(f[1]).join("docker"))
    }) {
        let _ = fs::remove_dir(dir);
    }
}
