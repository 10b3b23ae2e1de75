//! The containers among a session's cgroups and their names: a container's cgroup is
//! recognised from its path when the cgroup is added to the session, and named by a
//! thread of its own that asks the runtimes (container::names' cache), so that a
//! runtime that is slow or never answers delays no read, scrape or interval: a
//! container is named by its short id until its runtime has answered. A runtime that is
//! missing says nothing; one that fails says so once, on one line, and its containers
//! keep their ids.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::container::labels::Labels;
use crate::container::names::{ContainerInfo, Names, Source};
use crate::container::{self, Container};
use crate::Notes;

/// How often the runtimes are asked again for a container they did not list.
const RETRY: Duration = Duration::from_millis(250);

/// How long after its cgroup came a container is asked for: one the runtimes do not
/// list by then (a runtime without a socket here) keeps its id.
const GIVE_UP: Duration = Duration::from_secs(10);

/// The most look-ups waiting for the look-up thread, and the most answers waiting to be
/// taken: memory stays bounded whatever the runtimes do. A container that finds the
/// queue full is asked for at a later call.
const QUEUE: usize = 64;

/// One container cgroup: what its path says, and its labels as last looked up.
struct KnownContainer {
    container: Container,
    labels: Labels,
    /// A runtime named it (else its labels hold the short id only).
    named: bool,
    /// When its cgroup was added.
    added: Instant,
    /// When the look-up thread last answered that it does not know it.
    unknown_since: Option<Instant>,
}

/// What the look-up thread found for one container id.
struct Answer {
    id: String,
    info: Option<ContainerInfo>,
    /// A runtime's failure, said the first time it fails that way.
    warnings: Vec<String>,
}

/// The labels of a session's container cgroups, by cgroup id.
pub struct ContainerNames {
    by_cgroup: HashMap<u64, KnownContainer>,
    /// Container ids to the look-up thread; its answers back.
    lookups: SyncSender<String>,
    answers: Receiver<Answer>,
    /// Ids asked for and not answered yet.
    pending: HashSet<String>,
    /// What there is to say that no answer carried (no look-up thread), said once.
    unsaid: Notes,
}

impl ContainerNames {
    /// Names from the default sources: the kubelet's log links, Docker's and Podman's
    /// sockets.
    pub fn system() -> ContainerNames {
        ContainerNames::new(crate::sys::engine_api::EngineSocket::defaults())
    }

    /// Names from `sources`, asked by a thread of their own.
    pub fn new(sources: Vec<Box<dyn Source>>) -> ContainerNames {
        let (lookups, answers, unsaid) = spawn_lookups(sources);
        ContainerNames {
            by_cgroup: HashMap::new(),
            lookups,
            answers,
            pending: HashSet::new(),
            unsaid,
        }
    }

    /// Takes in cgroups added to the session: those that are a container's own cgroup
    /// are named by their short id, and their runtime is asked for them. Never waits.
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
            let entry = KnownContainer {
                container: c,
                labels,
                named: false,
                added: now,
                unknown_since: None,
            };
            self.by_cgroup.insert(cg.id, entry);
        }
        self.name_unnamed().1
    }

    /// Takes the runtimes' answers that came, and asks again about containers not named
    /// yet, at most every [`RETRY`] and for [`GIVE_UP`] after their cgroup came: a
    /// runtime can make a container's cgroup before it lists the container. True when
    /// one was named, and what there is to say (runtimes that did not answer). Never
    /// waits for a runtime.
    pub(crate) fn name_unnamed(&mut self) -> (bool, Notes) {
        let mut named = false;
        let mut notes = std::mem::take(&mut self.unsaid);
        while let Ok(answer) = self.answers.try_recv() {
            named |= self.take(answer, &mut notes);
        }
        self.ask();
        (named, notes)
    }

    /// Waits up to `timeout` for the answers to the look-ups under way (where a name
    /// must be had before going on: a recording's header, stat's counts at the end).
    /// True when one was named, and what there is to say.
    pub fn settle(&mut self, timeout: Duration) -> (bool, Notes) {
        let deadline = Instant::now() + timeout;
        let (mut named, mut notes) = self.name_unnamed();
        while !self.pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.answers.recv_timeout(left) {
                Ok(answer) => named |= self.take(answer, &mut notes),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        (named, notes)
    }

    /// Puts an answer in the entries of its container, and its warnings in `notes`. True
    /// when it named one.
    fn take(&mut self, answer: Answer, notes: &mut Notes) -> bool {
        self.pending.remove(&answer.id);
        notes.0.extend(answer.warnings.iter().cloned());
        let now = Instant::now();
        let mut named = false;
        let theirs = self
            .by_cgroup
            .values_mut()
            .filter(|e| !e.named && e.container.id == answer.id);
        for entry in theirs {
            match &answer.info {
                Some(info) => {
                    entry.labels = Labels::of(&entry.container, Some(info));
                    entry.named = true;
                    named = true;
                }
                None => entry.unknown_since = Some(now),
            }
        }
        named
    }

    /// Sends the look-ups that are due: containers not named, not asked for already,
    /// not said unknown in the last [`RETRY`], whose cgroup came less than [`GIVE_UP`]
    /// ago. Stops at a full queue.
    fn ask(&mut self) {
        let now = Instant::now();
        let due = self.by_cgroup.values().filter(|e| {
            !e.named
                && now.duration_since(e.added) < GIVE_UP
                && e.unknown_since
                    .is_none_or(|t| now.duration_since(t) >= RETRY)
        });
        let ids: Vec<String> = due.map(|e| e.container.id.clone()).collect();
        for id in ids {
            if self.pending.contains(&id) {
                continue;
            }
            match self.lookups.try_send(id.clone()) {
                Ok(()) => {
                    self.pending.insert(id);
                }
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => return,
            }
        }
    }

    /// Forgets every cgroup but `kept` (those still reported).
    pub(crate) fn retain(&mut self, kept: &[u64]) {
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

/// The look-up thread: asks `sources` (through the cache, which asks them again for an
/// unknown id at most every [`RETRY`]) about each id sent, and sends back what they said.
/// It ends when the [`ContainerNames`] goes. Without a thread (the system refused one),
/// said once (the notes), containers keep their ids.
fn spawn_lookups(sources: Vec<Box<dyn Source>>) -> (SyncSender<String>, Receiver<Answer>, Notes) {
    let (lookups, asked) = mpsc::sync_channel::<String>(QUEUE);
    let (tell, answers) = mpsc::sync_channel::<Answer>(QUEUE);
    let spawned = std::thread::Builder::new()
        .name("bperf-names".into())
        .spawn(move || {
            let mut names = Names::new(sources, RETRY);
            for id in asked.iter() {
                let (info, warnings) = names.lookup(&id, Instant::now());
                let info = info.cloned();
                if tell.send(Answer { id, info, warnings }).is_err() {
                    return;
                }
            }
        });
    let notes = match spawned {
        Ok(_) => Notes::default(),
        Err(e) => Notes::one(format!("cannot ask container runtimes for names: {e}")),
    };
    (lookups, answers, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::names::SourceError;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    const ID: &str = "3474383178be0b726b155b1403d9f7126d73bd6261846e3bbefd6f83bb431645";

    /// Long enough for any answer from the fakes here: settle returns as soon as they
    /// answered, and these bounds are only there so that a broken build ends.
    const WAIT: Duration = Duration::from_secs(30);

    struct FakeSource {
        asked: Arc<AtomicUsize>,
        answer: Result<Vec<ContainerInfo>, SourceError>,
    }

    impl Source for FakeSource {
        fn describe(&self) -> String {
            "fake.sock".into()
        }
        fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
            self.asked.fetch_add(1, Ordering::SeqCst);
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

    fn names(
        answer: Result<Vec<ContainerInfo>, SourceError>,
    ) -> (ContainerNames, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let fake = FakeSource {
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
        let (named, notes) = n.settle(WAIT);
        assert!(named && notes.is_empty(), "{notes:?}");
        assert_eq!(n.column(7).as_deref(), Some("web"));
        assert_eq!(n.get(7).unwrap().image.as_deref(), Some("busybox"));
        assert_eq!(n.column(8), None);
        assert_eq!(n.column(9), None, "a sub-cgroup inside a container");
        // Named once: adding other cgroups asks no more.
        let _ = n.add(&[cgroup("system.slice", 10)]);
        let _ = n.settle(WAIT);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }

    /// A source that lists what the test puts in it.
    struct Listing(Arc<Mutex<Vec<ContainerInfo>>>);

    impl Source for Listing {
        fn describe(&self) -> String {
            "listing.sock".into()
        }
        fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
            Ok(self.0.lock().unwrap().clone())
        }
    }

    /// A runtime can make a container's cgroup before it lists the container: it is
    /// asked again later, between reads, and the container is named then.
    #[test]
    fn a_container_listed_after_its_cgroup_came_is_named_later() {
        let listed = Arc::new(Mutex::new(Vec::new()));
        let mut n = ContainerNames::new(vec![Box::new(Listing(listed.clone()))]);
        let _ = n.add(&[cgroup(&format!("docker/{ID}"), 7)]);
        assert!(!n.settle(WAIT).0);
        assert_eq!(n.column(7).as_deref(), Some("3474383178be"));
        listed.lock().unwrap().push(ContainerInfo {
            id: ID.into(),
            name: "late".into(),
            ..Default::default()
        });
        // Not before RETRY: the runtimes are not asked at every read.
        assert!(!n.name_unnamed().0);
        assert!(n.pending.is_empty());
        std::thread::sleep(RETRY);
        let _ = n.name_unnamed();
        assert!(n.settle(WAIT).0);
        assert_eq!(n.column(7).as_deref(), Some("late"));
    }

    /// A runtime that does not answer until the test lets it: adding its containers and
    /// taking names return meanwhile (the source sees the test's release only if they
    /// did), at most QUEUE look-ups wait, and every container is named once it answers.
    #[test]
    fn a_hung_runtime_blocks_no_caller_and_its_queue_is_bounded() {
        struct Hung {
            release: Mutex<mpsc::Receiver<()>>,
            released: Arc<AtomicBool>,
            listed: Vec<ContainerInfo>,
        }
        impl Source for Hung {
            fn describe(&self) -> String {
                "hung.sock".into()
            }
            fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
                if !self.released.load(Ordering::SeqCst) {
                    let came = self.release.lock().unwrap().recv_timeout(WAIT).is_ok();
                    self.released.store(came, Ordering::SeqCst);
                }
                Ok(self.listed.clone())
            }
        }
        let ids: Vec<String> = (0..3 * QUEUE).map(|i| format!("{i:064x}")).collect();
        let listed = ids
            .iter()
            .map(|id| ContainerInfo {
                id: id.clone(),
                name: format!("c{}", &id[60..]),
                ..Default::default()
            })
            .collect();
        let (release, wait) = mpsc::channel();
        let released = Arc::new(AtomicBool::new(false));
        let hung = Hung {
            release: Mutex::new(wait),
            released: released.clone(),
            listed,
        };
        let mut n = ContainerNames::new(vec![Box::new(hung)]);
        let cgroups: Vec<Cgroup> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| cgroup(&format!("docker/{id}"), i as u64))
            .collect();
        let _ = n.add(&cgroups);
        assert!(!n.name_unnamed().0);
        assert!(n.pending.len() <= QUEUE + 1, "{}", n.pending.len());
        release.send(()).unwrap();
        for _ in 0..ids.len() {
            let _ = n.settle(WAIT);
            let _ = n.name_unnamed();
        }
        assert!(
            released.load(Ordering::SeqCst),
            "a caller waited for the runtime"
        );
        for (i, id) in ids.iter().enumerate() {
            let want = format!("c{}", &id[60..]);
            assert_eq!(n.column(i as u64), Some(want));
        }
    }

    #[test]
    fn without_a_runtime_the_short_id_names_it() {
        let (mut n, _) = names(Err(SourceError::Absent));
        let _ = n.add(&[cgroup(&format!("docker/{ID}"), 7)]);
        let _ = n.settle(WAIT);
        assert_eq!(n.column(7).as_deref(), Some("3474383178be"));
        n.retain(&[]);
        assert_eq!(n.column(7), None);
    }

    /// A runtime that fails is said as a note, given back to the command (which knows
    /// where to say it: stderr, or top's status line), not printed.
    #[test]
    fn a_failing_runtime_is_a_note_given_back() {
        let (mut n, _) = names(Err(SourceError::Failed("refused".into())));
        let mut notes = n.add(&[cgroup(&format!("docker/{ID}"), 7)]);
        notes = notes.and(n.settle(WAIT).1);
        assert!(
            notes.0.len() == 1 && notes.0[0].contains("refused"),
            "{notes:?}"
        );
        assert_eq!(n.column(7).as_deref(), Some("3474383178be"));
    }
}
