//! Containers' names from their runtime: what Docker's Engine API (and Podman's
//! Docker-compatible one) says about each container, what the kubelet's log links say
//! about a pod's containers, and a cache of it keyed by the full id that cgroup paths
//! give ([`super::recognize`]).
//!
//! The cache asks its sources only when asked to ([`Names::refresh`], or
//! [`Names::lookup`] of an id it does not know, at most once per `min_interval`):
//! session::containers does that from a thread of its own, never in the counting path. A source that fails leaves the
//! names it gave before, and says why once (one line), not at every refresh.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What a runtime says about one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The full id, 64 hex digits.
    pub id: String,
    /// The name `docker ps` shows, without the API's leading `/`.
    pub name: String,
    /// The image as the container was created from it (a name or an id).
    pub image: String,
    /// `running`, `exited`, `created`, ... as the runtime says.
    pub state: String,
    /// Docker Compose's project and service (`com.docker.compose.*` labels).
    pub compose_project: Option<String>,
    pub compose_service: Option<String>,
    /// The Kubernetes pod, namespace and container name (`io.kubernetes.*` labels, which
    /// dockershim and cri-dockerd put on the containers they make).
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    pub kube_container: Option<String>,
}

/// Why a source gave no list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceError {
    /// No runtime there (no socket, nothing listening): nothing to say.
    Absent,
    /// The runtime is there but the list could not be had: one line saying why.
    Failed(String),
}

/// A runtime to ask for its containers (from a thread of its own: session::containers).
pub trait Source: Send {
    /// Where it is asked, for warnings (`/var/run/docker.sock`).
    fn describe(&self) -> String;
    fn list(&self) -> Result<Vec<ContainerInfo>, SourceError>;
}

/// The labels the Engine API carries that name a container beyond its own name.
const COMPOSE_PROJECT: &str = "com.docker.compose.project";
const COMPOSE_SERVICE: &str = "com.docker.compose.service";
const POD_NAME: &str = "io.kubernetes.pod.name";
const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const KUBE_CONTAINER: &str = "io.kubernetes.container.name";

/// The containers in a `GET /containers/json` answer. Entries without an id are left out;
/// a body that is not a JSON array is an error.
pub(crate) fn parse_list(body: &[u8]) -> Result<Vec<ContainerInfo>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let entries = value
        .as_array()
        .ok_or_else(|| "not a list of containers".to_string())?;
    Ok(entries.iter().filter_map(parse_entry).collect())
}

fn parse_entry(entry: &serde_json::Value) -> Option<ContainerInfo> {
    let text = |key: &str| entry.get(key).and_then(|v| v.as_str());
    let id = text("Id")?.to_ascii_lowercase();
    let labels = entry.get("Labels").and_then(|l| l.as_object());
    let label = |key: &str| {
        labels
            .and_then(|l| l.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let names: Vec<&str> = entry
        .get("Names")
        .and_then(|n| n.as_array())
        .map(|a| a.iter().filter_map(|n| n.as_str()).collect())
        .unwrap_or_default();
    Some(ContainerInfo {
        name: own_name(&names).unwrap_or_default(),
        image: text("Image").unwrap_or_default().to_string(),
        state: text("State").unwrap_or_default().to_string(),
        compose_project: label(COMPOSE_PROJECT),
        compose_service: label(COMPOSE_SERVICE),
        pod_name: label(POD_NAME),
        pod_namespace: label(POD_NAMESPACE),
        kube_container: label(KUBE_CONTAINER),
        id,
    })
}

/// A container's Kubernetes names from the kubelet's log link for it in
/// /var/log/containers: `<pod>_<namespace>_<container>-<64 hex id>.log` (kuberuntime's
/// legacyLogSymlink, pod full name `<pod>_<namespace>`; the convention log shippers
/// such as fluent-bit's kubernetes filter read). Neither pod, namespace nor container
/// names may hold `_`. None for any other file name, and for a name the kubelet cut to
/// 255 bytes (its id is then incomplete).
pub(crate) fn parse_log_link(file_name: &str) -> Option<ContainerInfo> {
    let stem = file_name.strip_suffix(".log")?;
    let (names, id) = stem.rsplit_once('-')?;
    if !super::is_full_id(id) {
        return None;
    }
    let mut parts = names.split('_');
    let (pod, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || [pod, namespace, container].iter().any(|p| p.is_empty()) {
        return None;
    }
    Some(ContainerInfo {
        id: id.to_string(),
        name: container.to_string(),
        pod_name: Some(pod.to_string()),
        pod_namespace: Some(namespace.to_string()),
        kube_container: Some(container.to_string()),
        ..Default::default()
    })
}

/// The container's own name among the API's `Names`: `/web` rather than a legacy link's
/// `/app/db` alias; the first name when every one is a link.
fn own_name(names: &[&str]) -> Option<String> {
    let strip = |n: &&str| n.strip_prefix('/').unwrap_or(n).to_string();
    names
        .iter()
        .find(|n| !n.trim_start_matches('/').contains('/'))
        .or(names.first())
        .map(strip)
}

/// The names the runtimes gave, by full id.
pub struct Names {
    sources: Vec<Box<dyn Source>>,
    by_id: HashMap<String, ContainerInfo>,
    /// The last error each source gave (None: its last answer was a list or absence).
    last_error: Vec<Option<String>>,
    refreshed: Option<Instant>,
    min_interval: Duration,
}

impl Names {
    /// A cache over `sources`, asking them again for an unknown id at most once per
    /// `min_interval`.
    pub fn new(sources: Vec<Box<dyn Source>>, min_interval: Duration) -> Names {
        Names {
            last_error: vec![None; sources.len()],
            sources,
            by_id: HashMap::new(),
            refreshed: None,
            min_interval,
        }
    }

    /// Asks every source again. Returns the warnings to print: a source's failure the
    /// first time it fails that way. A failing source keeps the names it gave before; the
    /// containers a source no longer lists are forgotten.
    pub fn refresh(&mut self, now: Instant) -> Vec<String> {
        self.refreshed = Some(now);
        let mut warnings = Vec::new();
        let mut fresh: HashMap<String, ContainerInfo> = HashMap::new();
        let mut failed = false;
        for (source, last) in self.sources.iter().zip(&mut self.last_error) {
            match source.list() {
                Ok(list) => {
                    *last = None;
                    fresh.extend(list.into_iter().map(|c| (c.id.clone(), c)));
                }
                Err(SourceError::Absent) => *last = None,
                Err(SourceError::Failed(why)) => {
                    failed = true;
                    if last.as_deref() != Some(why.as_str()) {
                        warnings.push(format!(
                            "cannot list containers from {}: {why}",
                            source.describe()
                        ));
                    }
                    *last = Some(why);
                }
            }
        }
        if failed {
            // Keep what a failing source said before rather than lose its names.
            for (id, info) in std::mem::take(&mut self.by_id) {
                fresh.entry(id).or_insert(info);
            }
        }
        self.by_id = fresh;
        warnings
    }

    /// What the runtimes said about container `id` when last asked.
    pub fn get(&self, id: &str) -> Option<&ContainerInfo> {
        self.by_id.get(id)
    }

    /// Container `id`, asking the runtimes again first when it is unknown and they were
    /// last asked `min_interval` ago or more (a container started since). Returns the
    /// warnings of that refresh too.
    pub fn lookup(&mut self, id: &str, now: Instant) -> (Option<&ContainerInfo>, Vec<String>) {
        let stale = self
            .refreshed
            .is_none_or(|t| now.saturating_duration_since(t) >= self.min_interval);
        let warnings = match !self.by_id.contains_key(id) && stale {
            true => self.refresh(now),
            false => Vec::new(),
        };
        (self.by_id.get(id), warnings)
    }

    /// Every container the runtimes listed, by id.
    pub fn all(&self) -> impl Iterator<Item = &ContainerInfo> {
        self.by_id.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Recorded from Debian's docker.io 20.10.24 (API 1.41): `GET /containers/json?all=1`
    /// with a created container, a running one with Kubernetes labels, and a running one
    /// with Compose labels.
    const DOCKER_20_10: &[u8] =
        include_bytes!("../../tests/fixtures/containers/docker-20.10-containers.json");

    fn fixture() -> Vec<ContainerInfo> {
        parse_list(DOCKER_20_10).unwrap()
    }

    #[test]
    fn the_recorded_list_gives_names_images_states_and_labels() {
        let list = fixture();
        assert_eq!(list.len(), 3);
        let by_name = |n: &str| list.iter().find(|c| c.name == n).unwrap();
        let spin = by_name("bperf-test-spin");
        assert_eq!(
            spin.id,
            "3474383178be0b726b155b1403d9f7126d73bd6261846e3bbefd6f83bb431645"
        );
        assert_eq!(spin.image, "bperf-test-busybox");
        assert_eq!(spin.state, "running");
        assert_eq!(spin.compose_project.as_deref(), Some("proj"));
        assert_eq!(spin.compose_service.as_deref(), Some("svc"));
        assert_eq!(spin.pod_name, None);
        let k8s = by_name("bperf-test-k8s");
        assert_eq!(k8s.pod_name.as_deref(), Some("web-0"));
        assert_eq!(k8s.pod_namespace.as_deref(), Some("shop"));
        assert_eq!(k8s.kube_container.as_deref(), Some("nginx"));
        assert_eq!(k8s.compose_project, None);
        assert_eq!(by_name("bperf-test-created").state, "created");
    }

    /// Recorded from Debian's podman 4.3 (`podman system service`, its Docker-compatible
    /// API) with one created container.
    const PODMAN_4_3: &[u8] =
        include_bytes!("../../tests/fixtures/containers/podman-4.3-containers.json");

    #[test]
    fn podmans_compatible_list_reads_as_dockers() {
        let list = parse_list(PODMAN_4_3).unwrap();
        assert_eq!(
            list,
            vec![ContainerInfo {
                id: "df5a2f2b53e0bd0e9c9831fecb1befd2e8036db2ef45f6dcfb0b74c15c83ef2f".into(),
                name: "bperf-test-podcreated".into(),
                image: "localhost/bperf-test-podbb:latest".into(),
                state: "created".into(),
                compose_project: Some("pproj".into()),
                ..Default::default()
            }]
        );
    }

    #[test]
    fn a_containers_own_name_is_preferred_to_link_aliases() {
        assert_eq!(own_name(&["/app/db", "/db"]).as_deref(), Some("db"));
        assert_eq!(own_name(&["/app/db"]).as_deref(), Some("app/db"));
        assert_eq!(own_name(&[]), None);
    }

    #[test]
    fn odd_answers_are_errors_or_partial_entries_never_panics() {
        assert!(parse_list(b"").is_err());
        assert!(parse_list(b"{\"message\":\"page not found\"}").is_err());
        assert!(parse_list(&[0xff; 64]).is_err());
        assert_eq!(parse_list(b"[]").unwrap(), vec![]);
        // entries without an id are left out; missing or mistyped fields are empty
        let list = parse_list(
            br#"[{"Names":["/x"]},{"Id":"ABC","Names":[7],"Labels":null,"Image":3},1,null]"#,
        )
        .unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].id, "abc");
        assert_eq!(list[0].name, "");
        assert_eq!(list[0].image, "");
        let deep = "[".repeat(100_000);
        assert!(parse_list(deep.as_bytes()).is_err());
    }

    #[test]
    fn kubelet_log_links_give_pod_namespace_and_container() {
        let id = "6157dff794f1f03070e3de5e02fbadbc0656a732e14801d4123e16e7e96d163b";
        let c = parse_log_link(&format!(
            "coredns-5d78c9869d-x7lq2_kube-system_coredns-{id}.log"
        ))
        .unwrap();
        assert_eq!(c.id, id);
        assert_eq!(c.name, "coredns");
        assert_eq!(c.pod_name.as_deref(), Some("coredns-5d78c9869d-x7lq2"));
        assert_eq!(c.pod_namespace.as_deref(), Some("kube-system"));
        assert_eq!(c.kube_container.as_deref(), Some("coredns"));
        // container names with dashes; pod names with dots
        let c = parse_log_link(&format!("web.v2-0_shop_side-car-{id}.log")).unwrap();
        assert_eq!(
            (c.pod_name.unwrap(), c.name),
            ("web.v2-0".into(), "side-car".into())
        );
        for bad in [
            format!("a_b_c-{id}"),
            format!("a_b-{id}.log"),
            format!("a_b_c_d-{id}.log"),
            format!("__c-{id}.log"),
            format!("a_b_c-{}.log", &id[..60]),
            "a_b_c-.log".to_string(),
            "-.log".to_string(),
            ".log".to_string(),
            String::new(),
            "é_é_é-é.log".to_string(),
        ] {
            assert_eq!(parse_log_link(&bad), None, "{bad}");
        }
    }

    /// A source whose answers the test sets, counting how often it is asked.
    #[derive(Clone)]
    struct Scripted {
        answer: Arc<Mutex<Result<Vec<ContainerInfo>, SourceError>>>,
        asked: Arc<Mutex<u32>>,
    }

    impl Scripted {
        fn new(answer: Result<Vec<ContainerInfo>, SourceError>) -> Scripted {
            Scripted {
                answer: Arc::new(Mutex::new(answer)),
                asked: Arc::new(Mutex::new(0)),
            }
        }
        fn set(&self, answer: Result<Vec<ContainerInfo>, SourceError>) {
            *self.answer.lock().unwrap() = answer;
        }
        fn asked(&self) -> u32 {
            *self.asked.lock().unwrap()
        }
    }

    impl Source for Scripted {
        fn describe(&self) -> String {
            "test.sock".into()
        }
        fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
            *self.asked.lock().unwrap() += 1;
            self.answer.lock().unwrap().clone()
        }
    }

    fn info(id: &str, name: &str) -> ContainerInfo {
        ContainerInfo {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn unknown_ids_ask_again_at_most_once_per_interval() {
        let source = Scripted::new(Ok(vec![info("a", "web")]));
        let mut names = Names::new(vec![Box::new(source.clone())], Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(names.lookup("a", t0).0.unwrap().name, "web");
        assert_eq!(source.asked(), 1);
        // known: not asked again
        names.lookup("a", t0 + Duration::from_secs(5));
        assert_eq!(source.asked(), 1);
        // unknown, too soon: not asked
        assert!(names
            .lookup("b", t0 + Duration::from_millis(500))
            .0
            .is_none());
        assert_eq!(source.asked(), 1);
        // unknown, an interval later: asked, and the new container is found
        source.set(Ok(vec![info("a", "web"), info("b", "db")]));
        assert_eq!(
            names
                .lookup("b", t0 + Duration::from_secs(1))
                .0
                .unwrap()
                .name,
            "db"
        );
        assert_eq!(source.asked(), 2);
        // a container gone from the list is forgotten at the next refresh
        source.set(Ok(vec![info("b", "db")]));
        names.refresh(t0 + Duration::from_secs(2));
        assert!(names.get("a").is_none());
    }

    #[test]
    fn failures_warn_once_keep_old_names_and_absence_is_silent() {
        let source = Scripted::new(Ok(vec![info("a", "web")]));
        let mut names = Names::new(vec![Box::new(source.clone())], Duration::ZERO);
        let t = Instant::now();
        assert!(names.refresh(t).is_empty());
        source.set(Err(SourceError::Failed("timed out".into())));
        assert_eq!(
            names.refresh(t),
            vec!["cannot list containers from test.sock: timed out".to_string()]
        );
        assert!(names.refresh(t).is_empty(), "the same failure warns once");
        assert_eq!(names.get("a").unwrap().name, "web");
        source.set(Err(SourceError::Absent));
        assert!(names.refresh(t).is_empty());
        assert!(
            names.get("a").is_none(),
            "a runtime gone takes its names along"
        );
        source.set(Err(SourceError::Failed("timed out".into())));
        assert_eq!(
            names.refresh(t).len(),
            1,
            "a failure after recovery warns again"
        );
    }
}
