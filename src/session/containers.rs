//! The containers among a session's cgroups and their names: a container's cgroup is
//! recognised from its path and named through container::names' cache when the cgroup
//! is added to the session, never while counts are read. A runtime that is missing says
//! nothing; one that fails says so once, on one line, and its containers keep their ids.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::container::labels::Labels;
use crate::container::names::{Names, Source};
use crate::container::{self, Container};
use crate::Notes;

/// How often the runtimes are asked again for a container they did not list.
const RETRY: Duration = Duration::from_millis(250);

/// How long after its cgroup came a container is asked for: one the runtimes do not
/// list by then (a runtime without a socket here) keeps its id.
const GIVE_UP: Duration = Duration::from_secs(10);

/// One container cgroup: what its path says, and its labels as last looked up.
struct Entry {
    container: Container,
    labels: Labels,
    /// A runtime named it (else its labels hold the short id only).
    named: bool,
    /// When its cgroup was added.
    added: Instant,
}

/// The labels of a session's container cgroups, by cgroup id.
pub struct ContainerNames {
    names: Names,
    by_cgroup: HashMap<u64, Entry>,
}

impl ContainerNames {
    /// Names from the default sources: the kubelet's log links, Docker's and Podman's
    /// sockets.
    pub fn system() -> ContainerNames {
        ContainerNames::new(crate::sys::engine_api::EngineSocket::defaults())
    }

    pub fn new(sources: Vec<Box<dyn Source>>) -> ContainerNames {
        ContainerNames {
            names: Names::new(sources, RETRY),
            by_cgroup: HashMap::new(),
        }
    }

    /// Takes in cgroups added to the session: those that are a container's own cgroup
    /// are named (the runtimes are asked when they do not know the container yet).
    /// What there is to say: runtimes that did not answer.
    pub fn add<'c>(&mut self, added: impl IntoIterator<Item = &'c Cgroup>) -> Notes {
        let now = Instant::now();
        for cg in added {
            let path = cg.path.to_string_lossy();
            let Some(c) = container::recognize(&path) else {
                continue;
            };
            if c.cgroup.trim_start_matches('/') != path {
                continue;
            }
            let labels = Labels::of(&c, None);
            self.by_cgroup.insert(
                cg.id,
                Entry {
                    container: c,
                    labels,
                    named: false,
                    added: now,
                },
            );
        }
        self.name_unnamed().1
    }

    /// Asks the runtimes again about containers not named yet, at most every [`RETRY`]
    /// and for [`GIVE_UP`] after their cgroup came: a runtime can make a container's
    /// cgroup before it lists the container. True when one was named, and what there is
    /// to say (runtimes that did not answer). Called between reads, never while counts
    /// are read.
    pub fn name_unnamed(&mut self) -> (bool, Notes) {
        let now = Instant::now();
        let mut named = false;
        let mut notes = Notes::default();
        let waiting = self
            .by_cgroup
            .values_mut()
            .filter(|e| !e.named && now.duration_since(e.added) < GIVE_UP);
        for entry in waiting {
            let (info, warnings) = self.names.lookup(&entry.container.id, now);
            if let Some(info) = info {
                entry.labels = Labels::of(&entry.container, Some(info));
                entry.named = true;
                named = true;
            }
            notes.0.extend(warnings);
        }
        (named, notes)
    }

    /// Forgets every cgroup but `kept` (those still reported).
    pub fn retain(&mut self, kept: &[u64]) {
        self.by_cgroup.retain(|id, _| kept.contains(id));
    }

    /// The labels of cgroup `id`, when it is a container's own cgroup.
    pub fn get(&self, id: u64) -> Option<&Labels> {
        self.by_cgroup.get(&id).map(|e| &e.labels)
    }

    /// The container column of cgroup `id`.
    pub fn column(&self, id: u64) -> Option<String> {
        self.get(id).map(Labels::display)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::names::{ContainerInfo, SourceError};
    use std::cell::Cell;
    use std::path::PathBuf;
    use std::rc::Rc;

    const ID: &str = "3474383178be0b726b155b1403d9f7126d73bd6261846e3bbefd6f83bb431645";

    struct Fake {
        asked: Rc<Cell<usize>>,
        answer: Result<Vec<ContainerInfo>, SourceError>,
    }

    impl Source for Fake {
        fn describe(&self) -> String {
            "fake.sock".into()
        }
        fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
            self.asked.set(self.asked.get() + 1);
            self.answer.clone()
        }
    }

    fn cgroup(path: &str, id: u64) -> Cgroup {
        Cgroup {
            name: path.into(),
            id,
            path: PathBuf::from(path),
        }
    }

    fn names(answer: Result<Vec<ContainerInfo>, SourceError>) -> (ContainerNames, Rc<Cell<usize>>) {
        let asked = Rc::new(Cell::new(0));
        let fake = Fake {
            asked: asked.clone(),
            answer,
        };
        (ContainerNames::new(vec![Box::new(fake)]), asked)
    }

    #[test]
    fn a_container_cgroup_takes_its_runtime_name_and_others_none() {
        let info = ContainerInfo {
            id: ID.into(),
            name: "web".into(),
            image: "busybox".into(),
            ..Default::default()
        };
        let (mut n, asked) = names(Ok(vec![info]));
        let inner = format!("docker/{ID}/init");
        let notes = n.add(&[
            cgroup(&format!("docker/{ID}"), 7),
            cgroup("docker", 8),
            cgroup(&inner, 9),
        ]);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(n.column(7).as_deref(), Some("web"));
        assert_eq!(n.get(7).unwrap().image.as_deref(), Some("busybox"));
        assert_eq!(n.column(8), None);
        assert_eq!(n.column(9), None, "a sub-cgroup inside a container");
        // Named once: adding other cgroups asks no more.
        assert!(n.add(&[cgroup("system.slice", 10)]).is_empty());
        assert_eq!(asked.get(), 1);
    }

    /// A source that lists what the test puts in it.
    struct Listing(Rc<std::cell::RefCell<Vec<ContainerInfo>>>);

    impl Source for Listing {
        fn describe(&self) -> String {
            "listing.sock".into()
        }
        fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
            Ok(self.0.borrow().clone())
        }
    }

    /// A runtime can make a container's cgroup before it lists the container: it is
    /// asked again later, between reads, and the container is named then.
    #[test]
    fn a_container_listed_after_its_cgroup_came_is_named_later() {
        let listed = Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut n = ContainerNames::new(vec![Box::new(Listing(listed.clone()))]);
        assert!(n.add(&[cgroup(&format!("docker/{ID}"), 7)]).is_empty());
        assert_eq!(n.column(7).as_deref(), Some("3474383178be"));
        listed.borrow_mut().push(ContainerInfo {
            id: ID.into(),
            name: "late".into(),
            ..Default::default()
        });
        // Not before RETRY: the runtimes are not asked at every read.
        assert!(!n.name_unnamed().0);
        std::thread::sleep(RETRY);
        assert!(n.name_unnamed().0);
        assert_eq!(n.column(7).as_deref(), Some("late"));
    }

    #[test]
    fn without_a_runtime_the_short_id_names_it() {
        let (mut n, _) = names(Err(SourceError::Absent));
        assert!(n.add(&[cgroup(&format!("docker/{ID}"), 7)]).is_empty());
        assert_eq!(n.column(7).as_deref(), Some("3474383178be"));
        n.retain(&[]);
        assert_eq!(n.column(7), None);
    }

    /// A runtime that fails is said as a note, given back to the command (which knows
    /// where it is seen: top holds the screen), not printed.
    #[test]
    fn a_failing_runtime_is_a_note_given_back() {
        let (mut n, _) = names(Err(SourceError::Failed("refused".into())));
        let notes = n.add(&[cgroup(&format!("docker/{ID}"), 7)]);
        assert!(
            notes.0.len() == 1 && notes.0[0].contains("refused"),
            "{notes:?}"
        );
        assert_eq!(n.column(7).as_deref(), Some("3474383178be"));
    }
}
