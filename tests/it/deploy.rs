//! What deploy/ ships, checked without a cluster: the Prometheus rules pass `promtool
//! check rules` and their unit tests (`promtool test rules` on deploy/prometheus's
//! *test*.yml files); the Kubernetes manifests parse as YAML (python3's yaml module; no
//! kubectl here can check them without an API server) into the objects and fields the
//! DaemonSet needs (and no more: a fixed non-root uid, BPF and PERFMON only, a confined
//! seccomp profile, no directory of the host's /run, a NetworkPolicy that lets in only a
//! scraper on the metrics port and nothing out), and the scrape job keeps the counted
//! containers' labels. As root: the image's way of giving that uid its capabilities
//! (bperf with cap_bpf,cap_perfmon=p file capabilities, as the Dockerfile sets them)
//! counts a cgroup as cpu.stat charges it, run as the DaemonSet's uid with nothing else
//! in its bounding set.

use crate::common::{
    clock_tolerance, parse_csv, run_ok, serial, stderr, unaccounted_ns, unaccounted_since,
    workload, TempDir, TestCgroup, PERF_VERSION_ENV,
};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// Prometheus's promtool, which scripts/setup --test unpacks into target/tools.
fn promtool() -> PathBuf {
    let unpacked = Path::new(MANIFEST).join("target/tools/usr/bin/promtool");
    if unpacked.exists() {
        return unpacked;
    }
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("promtool"))
            .find(|f| f.exists())
    });
    on_path.unwrap_or_else(|| {
        panic!("promtool not found: run `make test` (scripts/setup --test unpacks it)")
    })
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}: {text}");
    text
}

fn prometheus_dir() -> PathBuf {
    Path::new(MANIFEST).join("deploy/prometheus")
}

#[test]
fn the_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = prometheus_dir();
    let out = run(Command::new(promtool())
        .args(["check", "rules"])
        .arg(dir.join("bperf-rules.yml")));
    assert!(out.contains("SUCCESS"), "{out}");
    let tests: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.contains("test") && name.ends_with(".yml")
        })
        .collect();
    assert!(!tests.is_empty(), "no *test*.yml in {}", dir.display());
    for t in tests {
        let out = run(Command::new(promtool())
            .current_dir(&dir)
            .args(["test", "rules"])
            .arg(&t));
        assert!(out.contains("SUCCESS"), "{out}");
    }
}

/// Loads every YAML document of the manifests and checks what the DaemonSet needs; prints
/// one line per problem, and `ok KIND...` when there is none.
const CHECK_MANIFESTS: &str = r#"
import glob, sys, yaml
docs = []
for path in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    with open(path) as f:
        docs += [d for d in yaml.safe_load_all(f) if d]
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)
kinds = {d["kind"]: d for d in docs}
for kind in ("DaemonSet", "Service", "ServiceMonitor"):
    need(kind in kinds, "no " + kind)
ds, svc, sm = kinds.get("DaemonSet", {}), kinds.get("Service", {}), kinds.get("ServiceMonitor", {})
need(ds.get("apiVersion") == "apps/v1", "DaemonSet apiVersion")
pod = ds.get("spec", {}).get("template", {})
spec = pod.get("spec", {})
labels = pod.get("metadata", {}).get("labels", {})
need(ds.get("spec", {}).get("selector", {}).get("matchLabels", {}).items() <= labels.items(), "DaemonSet selector does not match its pods")
need(spec.get("hostPID") is True, "hostPID")
c = spec.get("containers", [{}])[0]
need(c.get("args", [])[:1] == ["serve"], "not bperf serve")
sc = c.get("securityContext", {})
caps = sc.get("capabilities", {})
need(not sc.get("privileged"), "privileged")
need(caps.get("drop") == ["ALL"] and set(caps.get("add", [])) == {"BPF", "PERFMON"}, "capabilities beyond BPF and PERFMON")
pod_sc = spec.get("securityContext", {})
run_as = lambda k: sc.get(k, pod_sc.get(k))
need(run_as("runAsNonRoot") is True and isinstance(run_as("runAsUser"), int) and run_as("runAsUser") > 0, "not a fixed non-root uid")
need(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True, "privilege escalation or a writable root")
seccomp = sc.get("seccompProfile", spec.get("securityContext", {}).get("seccompProfile", {}))
need(seccomp.get("type") in ("RuntimeDefault", "Localhost"), "seccomp not confined")
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
for p in ("/sys/fs/cgroup", "/sys/kernel/btf", "/sys/fs/bpf", "/var/log/containers"):
    need(p in mounts, "no mount at " + p)
need(all(m.get("readOnly") for m in mounts.values()), "a mount is writable")
volumes = {v["name"]: v for v in spec.get("volumes", [])}
need(all(m["name"] in volumes and "hostPath" in volumes[m["name"]] for m in mounts.values()), "a mount without its hostPath volume")
# A directory of the host's /run holds every service's sockets: only a socket of its own.
for m in mounts.values():
    host = volumes.get(m["name"], {}).get("hostPath", {})
    path = host.get("path", "").rstrip("/")
    under_run = any(path == r or path.startswith(r + "/") for r in ("/run", "/var/run"))
    need(not under_run or host.get("type") == "Socket", "a directory of /run mounted: " + path)
res = c.get("resources", {})
for k in ("requests", "limits"):
    need({"cpu", "memory"} <= set(res.get(k, {})), "resources." + k)
ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
for probe in ("livenessProbe", "readinessProbe"):
    get = c.get(probe, {}).get("httpGet", {})
    need(get.get("path") == "/metrics" and get.get("port") in ports, probe)
need(svc.get("spec", {}).get("selector", {}).items() <= labels.items(), "Service selector")
svc_ports = [p.get("name") for p in svc.get("spec", {}).get("ports", [])]
need(svc.get("spec", {}).get("ports", [{}])[0].get("targetPort") in ports, "Service targetPort")
np = kinds.get("NetworkPolicy", {})
need(np.get("apiVersion") == "networking.k8s.io/v1", "no NetworkPolicy")
nps = np.get("spec", {})
need(nps.get("podSelector", {}).get("matchLabels", {"": ""}).items() <= labels.items(), "NetworkPolicy selector")
need({"Ingress", "Egress"} <= set(nps.get("policyTypes", [])), "NetworkPolicy policyTypes")
ingress = nps.get("ingress", [])
need(ingress and all(r.get("from") and r.get("ports") and all(p.get("port") in list(ports) + list(ports.values()) for p in r["ports"]) for r in ingress), "NetworkPolicy lets in more than a scraper on the metrics port")
need(not nps.get("egress"), "NetworkPolicy allows egress")
need(sm.get("apiVersion") == "monitoring.coreos.com/v1", "ServiceMonitor apiVersion")
need(sm.get("spec", {}).get("selector", {}).get("matchLabels", {}).items() <= svc.get("metadata", {}).get("labels", {}).items(), "ServiceMonitor selector")
eps = sm.get("spec", {}).get("endpoints", [])
need(eps and all(e.get("port") in svc_ports and e.get("honorLabels") is True for e in eps), "ServiceMonitor endpoints")
with open(sys.argv[2]) as f:
    jobs = yaml.safe_load(f)["scrape_configs"]
need(any(j.get("job_name") == "bperf" and j.get("honor_labels") is True for j in jobs), "scrape job without honor_labels")
print("\n".join(problems) if problems else "ok " + " ".join(sorted(kinds)))
"#;

#[test]
fn the_kubernetes_manifests_parse_into_what_the_daemonset_needs() {
    let out = run(Command::new("python3")
        .args(["-c", CHECK_MANIFESTS])
        .arg(Path::new(MANIFEST).join("deploy/kubernetes"))
        .arg(prometheus_dir().join("scrape-kubernetes.yml")));
    assert_eq!(
        out.trim(),
        "ok DaemonSet NetworkPolicy Service ServiceMonitor"
    );
}

/// The DaemonSet's uid (its runAsUser).
fn daemonset_uid() -> u32 {
    let text =
        std::fs::read_to_string(Path::new(MANIFEST).join("deploy/kubernetes/daemonset.yaml"))
            .unwrap();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("runAsUser:")?.trim().parse().ok())
        .expect("a runAsUser in the DaemonSet")
}

/// Counts `cg`'s task-clock with `bin` run as `uid`, with only CAP_BPF and CAP_PERFMON in
/// its bounding set, while a second of spinning runs in it: (bperf's count, cpu.stat's,
/// what cpu.stat left out meanwhile) or bperf's error.
fn count_as(uid: u32, bin: &Path, cg: &TestCgroup) -> Result<(f64, f64, f64), String> {
    let id = format!("{uid}");
    let stat = Command::new("setpriv")
        .args([
            &format!("--reuid={id}"),
            &format!("--regid={id}"),
            "--clear-groups",
        ])
        .args(["--inh-caps=-all", "--bounding-set=-all,+bpf,+perfmon", "--"])
        .arg(bin)
        .args([
            "stat",
            "-a",
            "-x,",
            "-e",
            "task-clock",
            "--for-each-cgroup",
            &cg.name,
        ])
        .args(["--", "sleep", "2"])
        .env(PERF_VERSION_ENV, "6.12")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = cg.usage_ns();
    let unaccounted = unaccounted_ns();
    run_ok(
        Command::new(workload())
            .args(["spin", "1000", &cg.procs()])
            .stderr(Stdio::null()),
    );
    let kernel = (cg.usage_ns() - before) as f64;
    let slack = unaccounted_since(unaccounted);
    let out = stat.wait_with_output().unwrap();
    let text = stderr(&out);
    if !out.status.success() {
        return Err(text);
    }
    let lines = parse_csv(&text, false);
    let ours = lines
        .iter()
        .find(|l| l.event == "task-clock" && l.cgroup == cg.name)
        .and_then(|l| l.value)
        .ok_or_else(|| text.clone())?;
    Ok((ours * 1e6, kernel, slack))
}

#[test]
#[ignore = "needs root (make test runs it)"]
fn permitted_file_capabilities_let_the_daemonset_s_uid_count_a_cgroup() {
    if !Path::new("/usr/sbin/setcap").exists() || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: setcap (libcap2-bin) or setpriv (util-linux) is missing");
        return;
    }
    let uid = daemonset_uid();
    assert!(uid > 0, "runAsUser {uid}");
    let _g = serial();
    // Only root and the uid's group may reach the copy: whoever runs it may count.
    let dir = TempDir::new("file-caps");
    std::os::unix::fs::chown(dir.path(), Some(0), Some(uid)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
    let bin = dir.join("bperf");
    std::fs::copy(crate::common::BPERF_EXE, &bin).unwrap();
    let cg = TestCgroup::new("file-caps");
    // Without file capabilities the uid cannot count: the capabilities are what it needs.
    let refused = count_as(uid, &bin, &cg);
    assert!(
        refused.is_err(),
        "counted without capabilities: {refused:?}"
    );
    run_ok(
        Command::new("setcap")
            .arg("cap_bpf,cap_perfmon=p")
            .arg(&bin),
    );
    let (ours, kernel, slack) =
        count_as(uid, &bin, &cg).unwrap_or_else(|e| panic!("as uid {uid}: {e}"));
    eprintln!("uid {uid}, cap_bpf,cap_perfmon=p: {ours} ns, cpu.stat {kernel} ns");
    assert!(kernel > 1e8, "the spin did not run: {kernel} ns");
    let pct = clock_tolerance() / 100.0;
    assert!(
        ours >= kernel * (1.0 - pct) && ours <= kernel * (1.0 + pct) + slack,
        "as uid {uid}: bperf {ours} ns, cpu.stat {kernel} ns (+ up to {slack} ns it left out)"
    );
}
