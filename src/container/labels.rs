//! What a container's rows are called: the column stat shows and the labels serve puts
//! on every series of the container's cgroup, from the path (always) and the runtime's
//! names (when one answered).

use super::names::ContainerInfo;
use super::Container;

/// One container's labels, those that apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    /// The Kubernetes container name, else the runtime's name, else the short id.
    pub container: String,
    /// The full id.
    pub container_id: String,
    pub image: Option<String>,
    pub pod: Option<String>,
    pub namespace: Option<String>,
}

impl Labels {
    pub fn of(c: &Container, info: Option<&ContainerInfo>) -> Labels {
        let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let kube = info.and_then(|i| i.kube_container.clone());
        let name = info.and_then(|i| nonempty(&i.name));
        Labels {
            container: kube.or(name).unwrap_or_else(|| c.short_id().to_string()),
            container_id: c.id.clone(),
            image: info.and_then(|i| nonempty(&i.image)),
            pod: info.and_then(|i| i.pod_name.clone()),
            namespace: info.and_then(|i| i.pod_namespace.clone()),
        }
    }

    /// As Prometheus label pairs (snake_case names, as cAdvisor and the kubelet name
    /// theirs), leaving out those that do not apply.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("container", self.container.clone()),
            ("container_id", self.container_id.clone()),
        ];
        let optional = [
            ("image", &self.image),
            ("pod", &self.pod),
            ("namespace", &self.namespace),
        ];
        out.extend(
            optional
                .into_iter()
                .filter_map(|(k, v)| v.clone().map(|v| (k, v))),
        );
        out
    }

    /// The name a table row shows: `namespace/pod/container` for a Kubernetes
    /// container, else the container's name.
    pub fn display(&self) -> String {
        match (&self.namespace, &self.pod) {
            (Some(ns), Some(pod)) => format!("{ns}/{pod}/{}", self.container),
            _ => self.container.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::recognize;

    const ID: &str = "3474383178be0b726b155b1403d9f7126d73bd6261846e3bbefd6f83bb431645";

    #[test]
    fn a_named_docker_container() {
        let c = recognize(&format!("/docker/{ID}")).unwrap();
        let info = ContainerInfo {
            id: ID.into(),
            name: "web".into(),
            image: "nginx:1.25".into(),
            ..Default::default()
        };
        let l = Labels::of(&c, Some(&info));
        assert_eq!(l.display(), "web");
        assert_eq!(
            l.pairs(),
            vec![
                ("container", "web".to_string()),
                ("container_id", ID.to_string()),
                ("image", "nginx:1.25".to_string()),
            ]
        );
    }

    #[test]
    fn a_kubernetes_container_is_shown_with_its_namespace_and_pod() {
        let c = recognize(&format!(
            "/kubepods/besteffort/pod0b7f6c9e-8d7a-4a55-9c2e-3f4b5a6c7d8e/{ID}"
        ))
        .unwrap();
        let info = super::super::names::parse_log_link(&format!("web-0_shop_nginx-{ID}.log"));
        let l = Labels::of(&c, info.as_ref());
        assert_eq!(l.display(), "shop/web-0/nginx");
        let keys: Vec<&str> = l.pairs().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["container", "container_id", "pod", "namespace"]);
    }

    #[test]
    fn without_a_runtime_the_short_id_names_it() {
        let c = recognize(&format!("/system.slice/docker-{ID}.scope")).unwrap();
        let l = Labels::of(&c, None);
        assert_eq!(l.display(), "3474383178be");
        assert_eq!(l.pairs().len(), 2);
    }
}
