//! What deploy/ ships, checked without a cluster: the Prometheus rules pass `promtool
//! check rules` and their unit tests (`promtool test rules` on deploy/prometheus's
//! *test*.yml files); the Kubernetes manifests parse as YAML (python3's yaml module; no
//! kubectl here can check them without an API server) into the objects and fields the
//! DaemonSet needs, and the scrape job keeps the counted containers' labels.

use std::path::{Path, PathBuf};
use std::process::Command;

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
caps = set(sc.get("capabilities", {}).get("add", []))
need(sc.get("privileged") or {"BPF", "PERFMON", "SYS_RESOURCE", "DAC_READ_SEARCH"} <= caps, "capabilities")
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
for p in ("/sys/fs/cgroup", "/sys/kernel/btf", "/sys/fs/bpf", "/run", "/var/log/containers"):
    need(p in mounts, "no mount at " + p)
need(all(m.get("readOnly") for m in mounts.values()), "a mount is writable")
volumes = {v["name"]: v for v in spec.get("volumes", [])}
need(all(m["name"] in volumes and "hostPath" in volumes[m["name"]] for m in mounts.values()), "a mount without its hostPath volume")
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
    assert_eq!(out.trim(), "ok DaemonSet Service ServiceMonitor");
}
