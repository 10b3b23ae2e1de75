//! The kubelet's files that name a node's containers without asking the container
//! runtime: its log links in /var/log/containers (parsed by container::names).

use std::path::PathBuf;

use crate::container::names::{self, ContainerInfo, SourceError};

/// Where the kubelet links each container's log.
pub(crate) const LOG_LINKS: &str = "/var/log/containers";

/// The most entries read from the directory (a node runs a few hundred containers).
const MAX_ENTRIES: usize = 1 << 16;

/// The kubelet's log links, as a source of container names.
pub(crate) struct LogLinks {
    pub dir: PathBuf,
}

impl LogLinks {
    pub fn new() -> LogLinks {
        LogLinks {
            dir: PathBuf::from(LOG_LINKS),
        }
    }
}

impl Default for LogLinks {
    fn default() -> Self {
        LogLinks::new()
    }
}

impl names::Source for LogLinks {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    /// The containers whose links are there; a missing directory is no kubelet here.
    fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SourceError::Absent,
            _ => SourceError::Failed(e.to_string()),
        })?;
        Ok(entries
            .take(MAX_ENTRIES)
            .filter_map(|e| e.ok())
            .filter_map(|e| names::parse_log_link(e.file_name().to_str()?))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::names::Source;

    #[test]
    fn reads_the_links_of_a_directory_and_a_missing_one_is_absent() {
        let dir = std::env::temp_dir().join(format!("bperf-kubelet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let id = "a".repeat(64);
        std::fs::write(dir.join(format!("web-0_shop_nginx-{id}.log")), "").unwrap();
        std::fs::write(dir.join("unrelated.txt"), "").unwrap();
        let found = LogLinks { dir: dir.clone() }.list();
        let _ = std::fs::remove_dir_all(&dir);
        let found = found.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pod_name.as_deref(), Some("web-0"));
        let gone = LogLinks { dir }.list();
        assert_eq!(gone, Err(SourceError::Absent));
    }
}
