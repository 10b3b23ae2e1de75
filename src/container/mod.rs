//! Containers from cgroup paths: which runtime made a cgroup, the container's id, and the
//! Kubernetes pod (UID and QoS class) it belongs to, read from the path alone.
//!
//! Paths are cgroup paths as /proc/PID/cgroup or a walk of the tree gives them: relative
//! to the hierarchy's mount, with or without the leading `/`, on cgroup2 or on a v1
//! controller's hierarchy (v1 paths are relative to that controller's mount, and the
//! runtimes lay out every hierarchy alike). Names from the runtime itself (the
//! container's name, image, labels) are in [`names`]; the path alone always gives the id.
//!
//! Where each layout comes from:
//! - Docker, cgroupfs driver: `/docker/<64 hex>` under the daemon's cgroup parent,
//!   `/docker` by default; systemd driver: `system.slice/docker-<id>.scope` (dockerd's
//!   `--cgroup-parent` documentation: "/docker for fs cgroup driver and system.slice for
//!   systemd cgroup driver"; cAdvisor's container/docker factory matches
//!   `-([a-z0-9]{64})\.scope$` for systemd).
//! - Podman: `machine.slice/libpod-<id>.scope` with systemd (rootless: under
//!   `user@UID.service/user.slice/`, with a `container` sub-cgroup on cgroup2), and
//!   `/libpod_parent/libpod-<id>` with cgroupfs (libpod's CgroupfsDefaultCgroupParent and
//!   its CGroupPath, `filepath.Join(parent, "libpod-"+id)`); conmon, the container's
//!   monitor, sits in `libpod-conmon-<id>.scope` or in a `conmon` sub-cgroup.
//! - containerd's CRI plugin: `cri-containerd-<id>.scope` with systemd; with cgroupfs the
//!   bare id under the pod's cgroup, or under `/k8s.io` (its Kubernetes namespace) outside
//!   a pod.
//! - CRI-O: `crio-<id>.scope` (systemd) or `crio-<id>` (cgroupfs); its monitor in
//!   `crio-conmon-<id>[.scope]`, not a container (cAdvisor's container/crio factory skips
//!   `crio-conmon`).
//! - Kubernetes (the kubelet's cgroup manager, pkg/kubelet/cm): pods under `kubepods`,
//!   Burstable and BestEffort pods in `burstable`/`besteffort` below it, Guaranteed pods
//!   directly in it, each pod in `pod<UID>`. The systemd driver names each level as a
//!   slice whose name spells its whole ancestry with `-` between levels and `_` for the
//!   UID's own dashes: `kubepods.slice/kubepods-burstable.slice/
//!   kubepods-burstable-pod<UID with _>.slice` (ConvertCgroupNameToSystemd; its inverse,
//!   revertName, takes the part after the last `-` and turns `_` back into `-`).

pub mod labels;
pub mod names;

/// The container runtime a cgroup's name says made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Docker,
    Podman,
    Containerd,
    CriO,
    /// A Kubernetes container runtime the path does not name: a bare id in a pod's cgroup
    /// (cgroupfs driver), as containerd's CRI plugin and dockershim both make it.
    Cri,
    /// A bare 64-hex id under a parent no runtime uses by default (a runtime started with
    /// its own cgroup parent).
    Unknown,
}

impl Runtime {
    /// The runtime's name, as labels and columns show it.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Cri => "cri",
            Runtime::Unknown => "unknown",
        }
    }
}

/// A Kubernetes pod's quality-of-service class, from the kubelet's cgroup layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    /// The class as Kubernetes spells it (`status.qosClass`).
    pub fn name(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }
}

/// A Kubernetes pod, from its cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pod {
    /// The pod's UID with dashes, as the API server gives it.
    pub uid: String,
    pub qos: Qos,
}

/// A container recognised from a cgroup path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Container {
    pub runtime: Runtime,
    /// The full id: 64 lowercase hex digits.
    pub id: String,
    /// The pod the container runs in, when the path is under the kubelet's `kubepods`.
    pub pod: Option<Pod>,
    /// The container's own cgroup: the given path up to the part that names the
    /// container, without a trailing `/`. A path below it (a sub-cgroup the runtime made
    /// inside the container) is recognised as the same container; compare with the given
    /// path to tell the container's cgroup from its children.
    pub cgroup: String,
}

impl Container {
    /// The 12-digit id `docker ps` and `crictl ps` print.
    pub fn short_id(&self) -> &str {
        // The id is ASCII hex, 64 long: the slice is on a character boundary.
        &self.id[..SHORT_ID]
    }
}

const ID_LEN: usize = 64;
const SHORT_ID: usize = 12;

/// How a runtime names a container's cgroup: `<prefix><64 hex><suffix>`.
struct Rule {
    prefix: &'static str,
    suffix: &'static str,
    runtime: Runtime,
}

/// One path component's container rules, most specific first. A bare id (no prefix, no
/// suffix) takes its runtime from the component above it (`BARE_ID_PARENTS`).
const RULES: &[Rule] = &[
    // systemd driver scopes (Docker, Podman, containerd's CRI, CRI-O)
    Rule {
        prefix: "docker-",
        suffix: ".scope",
        runtime: Runtime::Docker,
    },
    Rule {
        prefix: "libpod-",
        suffix: ".scope",
        runtime: Runtime::Podman,
    },
    Rule {
        prefix: "cri-containerd-",
        suffix: ".scope",
        runtime: Runtime::Containerd,
    },
    Rule {
        prefix: "crio-",
        suffix: ".scope",
        runtime: Runtime::CriO,
    },
    // cgroupfs driver directories
    Rule {
        prefix: "libpod-",
        suffix: "",
        runtime: Runtime::Podman,
    },
    Rule {
        prefix: "crio-",
        suffix: "",
        runtime: Runtime::CriO,
    },
];

/// The runtime of a bare-id component, by the component above it (cgroupfs drivers'
/// default parents).
const BARE_ID_PARENTS: &[(&str, Runtime)] = &[
    ("docker", Runtime::Docker),
    ("libpod_parent", Runtime::Podman),
    ("k8s.io", Runtime::Containerd),
];

/// Sub-cgroups a runtime makes inside a container's cgroup for its own monitor rather
/// than for the container's processes.
const MONITOR_CHILDREN: &[&str] = &["conmon"];

/// Whether `s` is a full container id: 64 lowercase hex digits.
pub(crate) fn is_full_id(s: &str) -> bool {
    s.len() == ID_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The container id one component names under `rule`, if it does.
fn id_by_rule<'a>(component: &'a str, rule: &Rule) -> Option<&'a str> {
    let id = component
        .strip_prefix(rule.prefix)?
        .strip_suffix(rule.suffix)?;
    is_full_id(id).then_some(id)
}

/// The runtime and id a component names, given the component above it ("" at the top)
/// and whether it lies in a Kubernetes pod's cgroup.
fn component_container<'a>(
    component: &'a str,
    parent: &str,
    in_pod: bool,
) -> Option<(Runtime, &'a str)> {
    if let Some((rule, id)) = RULES
        .iter()
        .find_map(|r| id_by_rule(component, r).map(|id| (r, id)))
    {
        return Some((rule.runtime, id));
    }
    if !is_full_id(component) {
        return None;
    }
    let runtime = BARE_ID_PARENTS
        .iter()
        .find(|(p, _)| *p == parent)
        .map(|(_, r)| *r)
        .unwrap_or(if in_pod {
            Runtime::Cri
        } else {
            Runtime::Unknown
        });
    Some((runtime, component))
}

/// A component as the kubelet's cgroupfs driver would name it: a systemd slice name
/// (`kubepods-burstable-pod1234_5678.slice`) becomes its last level with the UID's
/// dashes back (`pod1234-5678`); other names are kept.
fn kubelet_name(component: &str) -> std::borrow::Cow<'_, str> {
    match component.strip_suffix(".slice") {
        Some(slice) => {
            let last = slice.rsplit('-').next().unwrap_or(slice);
            std::borrow::Cow::Owned(last.replace('_', "-"))
        }
        None => std::borrow::Cow::Borrowed(component),
    }
}

/// Whether `s` is a pod UID as the kubelet names pod cgroups: a UUID (8-4-4-4-12 hex), or
/// the 32 hex digits of a static pod's config hash.
fn is_pod_uid(s: &str) -> bool {
    let hex = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit());
    if s.len() == 32 {
        return hex(s);
    }
    let lens: Vec<usize> = s.split('-').map(str::len).collect();
    lens == [8, 4, 4, 4, 12] && s.split('-').all(hex)
}

/// Where the kubelet's layout is as a path is walked down.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KubeLevel {
    Outside,
    /// In `kubepods`: a QoS level or a Guaranteed pod next.
    Kubepods,
    /// In a QoS level: a pod next.
    Qos(Qos),
    /// In a pod (or below it).
    Pod,
}

/// One step of the kubelet's layout: the level after `component` (kubelet-named), and the
/// pod it enters.
fn kube_step(level: KubeLevel, component: &str) -> (KubeLevel, Option<Pod>) {
    let pod = |qos| {
        let uid = component.strip_prefix("pod").filter(|u| is_pod_uid(u))?;
        Some(Pod {
            uid: uid.to_ascii_lowercase(),
            qos,
        })
    };
    match level {
        KubeLevel::Outside if component == "kubepods" => (KubeLevel::Kubepods, None),
        KubeLevel::Kubepods => match component {
            "burstable" => (KubeLevel::Qos(Qos::Burstable), None),
            "besteffort" => (KubeLevel::Qos(Qos::BestEffort), None),
            _ => match pod(Qos::Guaranteed) {
                Some(p) => (KubeLevel::Pod, Some(p)),
                None => (KubeLevel::Outside, None),
            },
        },
        KubeLevel::Qos(q) => match pod(q) {
            Some(p) => (KubeLevel::Pod, Some(p)),
            None => (KubeLevel::Outside, None),
        },
        other => (other, None),
    }
}

/// The pod whose cgroup `path` is, or lies under.
#[cfg(test)]
pub(crate) fn pod_of(path: &str) -> Option<Pod> {
    let mut level = KubeLevel::Outside;
    let mut found = None;
    for component in path.split('/').filter(|c| !c.is_empty()) {
        let (next, pod) = kube_step(level, &kubelet_name(component));
        level = next;
        if pod.is_some() {
            found = pod;
        }
    }
    found
}

/// The container whose cgroup `path` is, or lies under; None for any other cgroup
/// (slices, pods, a runtime's monitor, the root). Never fails: any text is a path.
pub fn recognize(path: &str) -> Option<Container> {
    let mut level = KubeLevel::Outside;
    let mut pod = None;
    let mut parent = "";
    let mut found: Option<(Runtime, &str, Option<Pod>, usize)> = None;
    let mut end = 0;
    let mut monitor = false;
    for component in path.split('/') {
        let start = end;
        end = start + component.len() + 1;
        if component.is_empty() {
            continue;
        }
        let (next, entered) = kube_step(level, &kubelet_name(component));
        level = next;
        if entered.is_some() {
            pod = entered;
        }
        if let Some((runtime, id)) = component_container(component, parent, pod.is_some()) {
            found = Some((runtime, id, pod.clone(), start + component.len()));
            monitor = false;
        } else if found.is_some() && MONITOR_CHILDREN.contains(&component) {
            monitor = true;
        }
        parent = component;
    }
    let (runtime, id, pod, cgroup_end) = found.filter(|_| !monitor)?;
    Some(Container {
        runtime,
        id: id.to_string(),
        pod,
        cgroup: path[..cgroup_end].to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6157dff794f1f03070e3de5e02fbadbc0656a732e14801d4123e16e7e96d163b";
    const UID: &str = "0b7f6c9e-8d7a-4a55-9c2e-3f4b5a6c7d8e";
    const UID_: &str = "0b7f6c9e_8d7a_4a55_9c2e_3f4b5a6c7d8e";

    fn container(runtime: Runtime, pod: Option<(&str, Qos)>, cgroup: &str) -> Container {
        Container {
            runtime,
            id: ID.to_string(),
            pod: pod.map(|(uid, qos)| Pod {
                uid: uid.to_string(),
                qos,
            }),
            cgroup: cgroup.to_string(),
        }
    }

    /// A path, the runtime, pod (UID, QoS) and container's own cgroup it gives.
    type Fixture = (String, Runtime, Option<(&'static str, Qos)>, String);

    /// A fixture whose path is the container's own cgroup.
    fn same(path: String, runtime: Runtime, pod: Option<(&'static str, Qos)>) -> Fixture {
        (path.clone(), runtime, pod, path)
    }

    /// Each documented layout.
    fn fixtures() -> Vec<Fixture> {
        let mut all = runtime_fixtures();
        all.extend(kubernetes_fixtures());
        all
    }

    /// Container runtimes on their own: Docker, Podman, containerd.
    fn runtime_fixtures() -> Vec<Fixture> {
        vec![
            // Docker, cgroupfs driver (v2 and the v1 controllers' own paths alike; this
            // machine's dockerd shows `0::/docker/<id>` and `perf_event:/docker/<id>`)
            same(format!("/docker/{ID}"), Runtime::Docker, None),
            same(format!("docker/{ID}"), Runtime::Docker, None),
            // Docker, systemd driver; rootless Docker under the user's manager
            same(
                format!("/system.slice/docker-{ID}.scope"),
                Runtime::Docker,
                None,
            ),
            same(
                format!("/user.slice/user-1000.slice/user@1000.service/docker-{ID}.scope"),
                Runtime::Docker,
                None,
            ),
            // Podman: systemd (root), cgroupfs, rootless cgroup2 with its `container`
            // sub-cgroup
            same(
                format!("/machine.slice/libpod-{ID}.scope"),
                Runtime::Podman,
                None,
            ),
            same(format!("/libpod_parent/libpod-{ID}"), Runtime::Podman, None),
            (
                format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"),
                Runtime::Podman,
                None,
                format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"),
            ),
            // Podman pod (systemd): the pod's slice, then the container's scope
            same(
                format!("/machine.slice/machine-libpod_pod_{}.slice/libpod-{ID}.scope", &ID[..64]),
                Runtime::Podman,
                None,
            ),
            // containerd outside Kubernetes, cgroupfs: its k8s.io namespace
            same(format!("/k8s.io/{ID}"), Runtime::Containerd, None),
            // docker --cgroup-parent=/mine (cgroupfs): the id, the runtime unsaid
            same(format!("/mine/{ID}"), Runtime::Unknown, None),
            // a path from the mount rather than the hierarchy's root
            same(
                format!("/sys/fs/cgroup/perf_event/docker/{ID}"),
                Runtime::Docker,
                None,
            ),
        ]
    }

    /// Kubernetes pods under each runtime and cgroup driver.
    fn kubernetes_fixtures() -> Vec<Fixture> {
        vec![
            // Kubernetes + containerd, systemd driver, each QoS class
            same(
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
                Some((UID, Qos::Burstable)),
            ),
            same(
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
                Some((UID, Qos::BestEffort)),
            ),
            same(
                format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
                Some((UID, Qos::Guaranteed)),
            ),
            // kind and other kubelets with their own cgroup root
            same(
                format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
                Some((UID, Qos::BestEffort)),
            ),
            // Kubernetes + CRI-O, systemd and cgroupfs
            same(
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{ID}.scope"),
                Runtime::CriO,
                Some((UID, Qos::Burstable)),
            ),
            same(
                format!("/kubepods/besteffort/pod{UID}/crio-{ID}"),
                Runtime::CriO,
                Some((UID, Qos::BestEffort)),
            ),
            // Kubernetes, cgroupfs driver: the bare id in the pod's cgroup; Guaranteed
            // pods directly in kubepods
            same(
                format!("/kubepods/burstable/pod{UID}/{ID}"),
                Runtime::Cri,
                Some((UID, Qos::Burstable)),
            ),
            same(
                format!("/kubepods/pod{UID}/{ID}"),
                Runtime::Cri,
                Some((UID, Qos::Guaranteed)),
            ),
            // dockershim, systemd driver
            same(
                format!("/kubepods.slice/kubepods-pod{UID_}.slice/docker-{ID}.scope"),
                Runtime::Docker,
                Some((UID, Qos::Guaranteed)),
            ),
            // a static pod: its UID is the config hash, 32 hex digits
            same(
                format!("/kubepods/burstable/pod6d1d9e7e4a3fb9b4ebf3bdb8ddca4b0c/{ID}"),
                Runtime::Cri,
                Some(("6d1d9e7e4a3fb9b4ebf3bdb8ddca4b0c", Qos::Burstable)),
            ),
        ]
    }

    #[test]
    fn every_documented_layout_gives_its_runtime_id_and_pod() {
        for (path, runtime, pod, cgroup) in fixtures() {
            assert_eq!(
                recognize(&path),
                Some(container(runtime, pod, &cgroup)),
                "{path}"
            );
        }
    }

    #[test]
    fn a_container_below_a_container_is_the_inner_one() {
        let inner = "a".repeat(64);
        let c = recognize(&format!("/docker/{ID}/docker/{inner}")).unwrap();
        assert_eq!(c.id, inner);
        assert_eq!(c.runtime, Runtime::Docker);
    }

    #[test]
    fn short_ids_are_the_first_twelve_digits() {
        let c = recognize(&format!("/docker/{ID}")).unwrap();
        assert_eq!(c.short_id(), "6157dff794f1");
    }

    #[test]
    fn slices_pods_monitors_and_other_cgroups_are_not_containers() {
        for path in [
            "",
            "/",
            "/docker",
            "/system.slice",
            "/system.slice/docker.service",
            "/kubepods.slice",
            "/kubepods.slice/kubepods-burstable.slice",
            &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"),
            &format!("/kubepods/burstable/pod{UID}"),
            // the runtimes' monitors
            &format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{ID}.scope"),
            &format!("/kubepods/pod{UID}/crio-conmon-{ID}"),
            &format!("/machine.slice/libpod-conmon-{ID}.scope"),
            &format!("/libpod_parent/libpod-{ID}/conmon"),
            // ids of the wrong length or case, and systemd mounts
            &format!("/docker/{}", &ID[..63]),
            &format!("/docker/{ID}0"),
            &format!("/docker/{}", ID.to_uppercase()),
            &format!("/system.slice/docker-{ID}.mount"),
            &format!("/system.slice/run-docker-netns-{ID}.mount"),
        ] {
            assert_eq!(recognize(path), None, "{path}");
        }
    }

    #[test]
    fn pods_are_found_in_both_drivers_layouts() {
        let burstable = Some(Pod {
            uid: UID.to_string(),
            qos: Qos::Burstable,
        });
        assert_eq!(
            pod_of(&format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
            )),
            burstable
        );
        assert_eq!(pod_of(&format!("/kubepods/burstable/pod{UID}")), burstable);
        assert_eq!(
            pod_of(&format!("/kubepods/pod{UID}/{ID}")).map(|p| p.qos),
            Some(Qos::Guaranteed)
        );
        assert_eq!(pod_of("/kubepods/burstable"), None);
        assert_eq!(pod_of("/kubepods/podnot-a-uid"), None);
        // kubepods deeper than the top, not at the root of the walk
        assert_eq!(pod_of(&format!("/x/kubepods/pod{UID}")).unwrap().uid, UID);
        // a pod slice outside kubepods is not a pod
        assert_eq!(
            pod_of(&format!("/system.slice/system-pod{UID_}.slice")),
            None
        );
    }

    #[test]
    fn hostile_paths_never_panic() {
        let long_id = format!("/docker/{ID}").repeat(10_000);
        let c = recognize(&long_id).unwrap();
        assert_eq!(c.id, ID);
        assert_eq!(c.cgroup.len(), long_id.len());
        let odd = [
            "/".repeat(100_000),
            "\0/docker/\u{ff}".to_string(),
            format!("/docker/{}é", &ID[..62]),
            "é".repeat(40_000),
            format!("kubepods/pod{UID}/").repeat(1000),
            "kubepods.slice/-.slice/_.slice/.slice/-pod.slice".to_string(),
            format!("docker-{ID}"),
            "docker-.scope/libpod-.scope/crio-".to_string(),
        ];
        for p in &odd {
            let _ = recognize(p);
            let _ = pod_of(p);
        }
        assert_eq!(
            recognize(&format!("docker-{ID}.scope")).unwrap().cgroup,
            format!("docker-{ID}.scope")
        );
    }
}
