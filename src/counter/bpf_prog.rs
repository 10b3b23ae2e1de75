//! Counting inside BPF programs (bperf stat -b): one counting perf event per event per
//! CPU, read by an fentry/fexit pair on each target program where the kernel loads them
//! (BPF trampolines), and each program's run count and run time from the kernel's BPF
//! statistics, enabled for the run.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use anyhow::{Context, Result};
use libbpf_rs::OpenObject;

use crate::bpf::bpf_prog::{LoadError, Profiler, MAX_EVENTS};
use crate::event::Event;
use crate::reading::Reading;
use crate::sys::bpf_prog::{self, Prog, RunStats, StatsEnabled};
use crate::sys::perf_event::{self, Role, Scope};

/// Why the events of a program are not counted, when the kernel refuses trampolines.
pub(crate) const NO_TRAMPOLINES: &str =
    "counting events inside a BPF program needs BPF trampolines (fentry/fexit), which this kernel refuses";

/// What one program counted since the counter opened.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProgCounts {
    pub id: u32,
    /// Its function's name (whole), or the kernel's name for it without BTF.
    pub name: String,
    /// Each event's count over the program's runs (summed over CPUs); None where the
    /// event is not counted inside this program.
    pub events: Vec<Option<Reading>>,
    pub runs: RunStats,
}

/// One target program and what counts inside it.
struct ProfiledProg<'obj> {
    // Dropped first: the pair is detached before its perf events close.
    profiler: Option<Profiler<'obj>>,
    prog: Prog,
    baseline: RunStats,
}

/// The counter: the programs, the perf events their profilers read, BPF stats enabled.
pub(crate) struct ProgCounter<'obj> {
    progs: Vec<ProfiledProg<'obj>>,
    /// Which events opened (on every CPU asked for).
    opened: Vec<bool>,
    _fds: Vec<OwnedFd>,
    _stats: StatsEnabled,
    /// Why some program's events are not counted (one line each), for the user.
    pub notes: Vec<String>,
}

impl<'obj> ProgCounter<'obj> {
    /// Opens `events` on `cpus` and starts counting inside `progs`; `storage` holds one
    /// BPF object per program.
    pub fn open(
        progs: Vec<Prog>,
        events: &[Event],
        cpus: &[u32],
        verbose: u8,
        storage: &'obj mut [MaybeUninit<OpenObject>],
    ) -> Result<Self> {
        assert!(storage.len() >= progs.len());
        // libbpf's diagnostics with -vv only; -v adds libbpf's error to the note.
        if verbose < 2 {
            libbpf_rs::set_print(None);
        }
        let stats = bpf_prog::enable_stats().context("enabling BPF run statistics")?;
        let (fds, opened) = open_events(events, cpus);
        let event_fds: Vec<(usize, u32, BorrowedFd)> =
            fds.iter().map(|(e, c, fd)| (*e, *c, fd.as_fd())).collect();
        let mut notes = Vec::new();
        let mut counted = Vec::new();
        let countable = opened.iter().any(|&o| o) && events.len() <= MAX_EVENTS;
        if events.len() > MAX_EVENTS {
            notes.push(format!(
                "at most {MAX_EVENTS} events can be counted inside a BPF program"
            ));
        }
        for (prog, storage) in progs.into_iter().zip(storage.iter_mut()) {
            let profiler = match (&prog.func, countable) {
                (_, false) => None,
                (None, true) => {
                    notes.push(format!(
                        "BPF program {} has no BTF: events inside it cannot be counted",
                        prog.id
                    ));
                    None
                }
                (Some(func), true) => {
                    let loaded =
                        Profiler::load(prog.fd.as_fd(), func, events.len(), &event_fds, storage);
                    match loaded {
                        Ok(p) => Some(p),
                        Err(LoadError::Refused(e)) => {
                            let note = match verbose > 0 {
                                true => format!("{NO_TRAMPOLINES} ({e})"),
                                false => NO_TRAMPOLINES.to_string(),
                            };
                            if !notes.contains(&note) {
                                notes.push(note);
                            }
                            None
                        }
                        Err(LoadError::Other(e)) => {
                            return Err(e.context(format!("BPF program {}", prog.id)))
                        }
                    }
                }
            };
            let baseline = bpf_prog::run_stats(prog.fd.as_fd())
                .with_context(|| format!("reading BPF program {}'s statistics", prog.id))?;
            counted.push(ProfiledProg {
                profiler,
                prog,
                baseline,
            });
        }
        Ok(ProgCounter {
            progs: counted,
            opened,
            _fds: fds.into_iter().map(|(_, _, fd)| fd).collect(),
            _stats: stats,
            notes,
        })
    }

    /// What each program counted since the counter opened.
    pub fn read(&self) -> Result<Vec<ProgCounts>> {
        self.progs
            .iter()
            .map(|c| {
                let events = match &c.profiler {
                    Some(p) => p
                        .read()?
                        .into_iter()
                        .zip(&self.opened)
                        .map(|(r, &opened)| opened.then_some(r))
                        .collect(),
                    None => vec![None; self.opened.len()],
                };
                let now = bpf_prog::run_stats(c.prog.fd.as_fd())
                    .with_context(|| format!("reading BPF program {}'s statistics", c.prog.id))?;
                Ok(ProgCounts {
                    id: c.prog.id,
                    name: c.prog.func.clone().unwrap_or_else(|| c.prog.name.clone()),
                    events,
                    runs: now.since(&c.baseline),
                })
            })
            .collect()
    }
}

type EventFds = Vec<(usize, u32, OwnedFd)>;

/// One counting event per event per CPU, enabled. An event that any CPU refuses is not
/// counted at all (its fds are closed).
fn open_events(events: &[Event], cpus: &[u32]) -> (EventFds, Vec<bool>) {
    let mut fds = Vec::new();
    let mut opened = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        let attr = |cpu| perf_event::counting_attr(&ev.attr, Scope::Cpu(cpu), Role::Single);
        let one: std::io::Result<Vec<_>> = match ev.tool {
            // perf's tool events are perf's own times, not counters a program can read.
            Some(_) => Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
            None => cpus
                .iter()
                .map(|&cpu| {
                    perf_event::open_with_fallback(attr(cpu), Scope::Cpu(cpu), None, None)
                        .map(|fd| (i, cpu, fd))
                })
                .collect(),
        };
        opened.push(one.is_ok());
        fds.extend(one.unwrap_or_default());
    }
    (fds, opened)
}
