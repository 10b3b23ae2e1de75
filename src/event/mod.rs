//! Event strings -> perf_event_attr identity fields, the way perf stat reads them.
//!
//! Pure: no syscalls. What PMUs and tracepoints the machine has comes through
//! [`Sources`].
//!
//! The language: a comma-separated list of events and groups `{a,b,...}`. An event is
//! a hardware, software or cache name (`cycles`, `cs`, `L1-dcache-load-misses`), a raw
//! event `rNNNN`, a PMU event `pmu/term=value,alias,.../`, a bare sysfs alias (`tsc`),
//! or a tracepoint `sys:name`; each may carry modifiers (`:u`, `:k`, `:pp`, ...), and a
//! group's modifiers apply to every member.
//!
//! On a hybrid machine (several core PMUs) an event may stand for one per core PMU; see
//! [`hybrid`].

mod catalog;
pub mod hybrid;
mod pmu;
mod regroup;
mod symbols;

use std::path::Path;

use anyhow::{anyhow, bail, Result};

use hybrid::Origin;

pub use catalog::{entries, matches, Category, Entry};
pub use hybrid::Hybrid;
pub use pmu::{name_order as pmu_name_order, Pmu};
pub use symbols::{
    cache_event_names, HARDWARE, SOFTWARE, TYPE_HARDWARE, TYPE_HW_CACHE, TYPE_RAW, TYPE_SOFTWARE,
    TYPE_TRACEPOINT,
};

/// The fields of `perf_event_attr` that an event string decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    pub exclude_hv: bool,
    pub exclude_idle: bool,
    pub exclude_host: bool,
    pub exclude_guest: bool,
    pub precise_ip: u8,
    pub pinned: bool,
    pub exclusive: bool,
}

/// One event as the user asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The name perf stat prints for it: the string as typed, e.g. `cs`, `task-clock:u`,
    /// `msr/tsc/`, or the value of a `name=` term.
    pub name: String,
    pub attr: Attr,
    /// Index (into the parsed list) of this event's group leader; `None` when not in a group.
    pub leader: Option<usize>,
    /// The `b` modifier: count it with BPF counters (perf's `-e cycles:b`).
    pub bpf: bool,
    /// --filter: the tracepoint filter the kernel applies before counting.
    pub filter: Option<String>,
    /// On a hybrid machine: the core PMU that counts it, on its own CPUs only.
    pub hybrid: Option<Hybrid>,
    /// Where its name comes from, which decides how perf prints it.
    pub naming: Naming,
    /// One of perf's tool events, which perf counts itself (the kernel is given a
    /// dummy event for it, which counts nothing).
    pub tool: Option<Tool>,
}

/// Events counted by the tool rather than by the kernel's counters: perf's tool events
/// (times perf measures itself), and bperf's own (what its run-queue program counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// The time elapsed, in ns.
    Duration,
    /// User time, in ns: of the command or the processes counted, or of the CPUs.
    User,
    /// System time, likewise.
    System,
    /// bperf's own: the time a cgroup's tasks waited runnable for a CPU, in ns.
    RunqWait,
    /// bperf's own: the times a cgroup's tasks were switched out while runnable.
    Preemptions,
}

impl Tool {
    /// perf's tool events, in the order perf lists them.
    pub const ALL: [Tool; 3] = [Tool::Duration, Tool::User, Tool::System];
    /// bperf's own events, written as events of a PMU named `bperf`, which no kernel
    /// has: perf refuses them, and no event perf counts is taken for one of them.
    pub(crate) const BPERFS: [Tool; 2] = [Tool::RunqWait, Tool::Preemptions];

    pub fn name(self) -> &'static str {
        match self {
            Tool::Duration => "duration_time",
            Tool::User => "user_time",
            Tool::System => "system_time",
            Tool::RunqWait => "bperf/runq-wait/",
            Tool::Preemptions => "bperf/preemptions/",
        }
    }

    /// perf's tool event of that name.
    pub(crate) fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// bperf's own event written `event`.
    pub(crate) fn bperfs(event: &str) -> Option<Tool> {
        Tool::BPERFS.into_iter().find(|t| t.name() == event)
    }

    /// Whether it is one of perf's tool events (not bperf's own).
    pub(crate) fn is_perfs(self) -> bool {
        Tool::ALL.contains(&self)
    }
}

/// The software event a tool event is opened as: one that counts nothing.
pub(crate) const DUMMY: u64 = 9;

/// Where an event's name comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Naming {
    /// Typed in -e: perf prints it as typed, with its PMU added per CPU (-A).
    #[default]
    Typed,
    /// A `name=` term: printed as given, always.
    Given,
    /// Added by perf itself (its default events, -d): named from the attr, modifiers
    /// included (`task-clock:uhH` with --all-user), never with its PMU.
    Builtin,
}

impl Event {
    /// The name perf gives an event it had to open for user space only: `u` added as a
    /// modifier (`task-clock:u`, `cs:ku` stays as typed plus `u`, `msr/tsc/u`).
    pub(crate) fn user_only_name(&self) -> String {
        let written = self.hybrid.as_ref().and_then(|h| h.written.as_ref());
        let name = written.unwrap_or(&self.name);
        let user = match name.contains(['/', ':']) {
            true => format!("{name}u"),
            false => format!("{name}:u"),
        };
        // perf adds a hybrid event's PMU to the name after it was renamed.
        match (&self.hybrid, written) {
            (Some(h), Some(_)) => hybrid::name(&h.pmu, &user),
            _ => user,
        }
    }

    /// Whether it is counted on `cpu`: everywhere, but a hybrid event only on the CPUs
    /// of its core PMU.
    pub(crate) fn counts_on(&self, cpu: u32) -> bool {
        self.hybrid.as_ref().is_none_or(|h| h.counts_on(cpu))
    }

    /// Whether it is counted on any of `cpus` (a hybrid event may be on none).
    pub(crate) fn counts_on_any(&self, cpus: &[u32]) -> bool {
        cpus.iter().any(|&c| self.counts_on(c))
    }

    /// A lone event of the given type and config, without modifiers.
    pub fn plain(name: &str, type_: u32, config: u64) -> Event {
        Event {
            name: name.into(),
            attr: Attr {
                type_,
                config,
                ..Attr::default()
            },
            leader: None,
            bpf: false,
            filter: None,
            hybrid: None,
            naming: Naming::Typed,
            tool: None,
        }
    }

    /// The name perf gives an event it added itself: its base name and the modifiers its
    /// attr says, as perf spells them (`:uhH` for user space only).
    pub(crate) fn builtin_name(base: &str, attr: &Attr) -> String {
        let mut mods = String::new();
        // Which of kernel, user and hypervisor it counts, once it leaves any out.
        let limited = attr.exclude_kernel || attr.exclude_user || attr.exclude_hv;
        if limited {
            for (excluded, c) in [
                (attr.exclude_kernel, 'k'),
                (attr.exclude_user, 'u'),
                (attr.exclude_hv, 'h'),
            ] {
                if !excluded {
                    mods.push(c);
                }
            }
        }
        let precise = attr.precise_ip.min(3) as usize;
        mods.push_str(&"ppp"[..precise]);
        // Host and guest, when they differ from what the other modifiers imply.
        let guest_by_default = limited || precise > 0;
        if attr.exclude_host || attr.exclude_guest == guest_by_default {
            if !attr.exclude_host {
                mods.push('H');
            }
            if !attr.exclude_guest {
                mods.push('G');
            }
        }
        match mods.is_empty() {
            true => base.to_string(),
            false => format!("{base}:{mods}"),
        }
    }
}

/// What the machine says about its events: its PMUs and tracepoints. sys::sysfs reads
/// the running system's, and fixtures the same way for tests.
pub trait Sources {
    /// Where PMUs are described, for messages.
    fn pmu_root(&self) -> &Path;
    fn pmu(&self, name: &str) -> Option<Pmu>;
    /// Every PMU that describes itself readably, sorted by name.
    fn pmus(&self) -> Vec<Pmu>;
    fn tracepoint_id(&self, sys: &str, name: &str) -> Option<u64>;
    /// Every tracepoint as (system, name, id).
    fn tracepoints(&self) -> Vec<(String, String, u64)>;
    /// The core PMUs (see [`Pmu::core`]) in perf's order ([`pmu_name_order`]). A machine
    /// with several is hybrid: cpu_core and cpu_atom on Intel, one armv8 PMU per kind of
    /// core on arm64 big.LITTLE.
    fn core_pmus(&self) -> Vec<Pmu> {
        let mut v: Vec<Pmu> = self.pmus().into_iter().filter(|p| p.core).collect();
        v.sort_by(|a, b| pmu_name_order(&a.name, &b.name));
        v
    }
    /// Whether the kernel counts a hardware or cache event on the one core PMU whose type
    /// is in the config's upper 32 bits (PERF_PMU_TYPE_SHIFT): Intel's hybrid PMUs since
    /// Linux 5.13, arm64's since 6.6. Asked only on a hybrid machine.
    fn extended_type(&self) -> bool;
}

/// perf stat's default events when no -e is given.
pub(crate) const DEFAULT_EVENTS: &str =
    "task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions,branches,branch-misses";

/// What bperf record counts when told nothing: time and switches, the two every slice
/// has.
pub(crate) const RECORD_DEFAULT_EVENTS: &str = "task-clock,context-switches";

/// The events bperf top shows without -e.
pub(crate) const TOP_DEFAULT_EVENTS: &str =
    "task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions";

/// bperf's own events, which top's --runq adds.
pub(crate) const RUNQ_EVENTS: &str = "bperf/runq-wait/,bperf/preemptions/";

/// The name of the PMU that counts an event of perf type `type_`, as perf names it:
/// software, tracepoint, the core PMU (`cpu`, where the machine has one) for hardware,
/// cache and raw events, and the sysfs PMU of that type for the rest.
pub(crate) fn pmu_name(type_: u32, sources: &dyn Sources) -> Option<String> {
    match type_ {
        TYPE_SOFTWARE => Some("software".into()),
        TYPE_TRACEPOINT => Some("tracepoint".into()),
        TYPE_HARDWARE | TYPE_HW_CACHE | TYPE_RAW => sources.pmu("cpu").map(|p| p.name),
        _ => sources
            .pmus()
            .into_iter()
            .find(|p| p.type_ == type_)
            .map(|p| p.name),
    }
}

impl Event {
    /// The name perf 6.12 prints for the event with -A, where it adds the PMU's name
    /// unless the name starts with it: `cs [software]`, `tsc [msr]`; a `pmu/.../` name
    /// gets the PMU's own spelling before its first slash.
    pub(crate) fn name_with_pmu(&self, pmu: Option<&str>) -> String {
        let Some(pmu) = pmu.filter(|_| self.naming == Naming::Typed && self.tool.is_none()) else {
            return self.name.clone();
        };
        if self.name.starts_with(pmu) {
            return self.name.clone();
        }
        match self.name.find('/') {
            Some(i) => format!("{pmu}{}", &self.name[i..]),
            None => format!("{} [{pmu}]", self.name),
        }
    }
}

impl Event {
    /// The name perf 7.2 prints for the event with -A: a PMU's alias written as the
    /// PMU's event (`tsc` -> `msr/tsc/`), a tool event as the tool PMU's
    /// (`tool/duration_time/`); software, hardware, cache, raw events and tracepoints,
    /// and names with their PMU already, as written.
    pub(crate) fn name_with_pmu_72(&self, pmu: Option<&str>) -> String {
        if let Some(tool) = self.tool.filter(|t| t.is_perfs()) {
            return format!("tool/{}/", tool.name());
        }
        let own_pmu = !matches!(
            self.attr.type_,
            TYPE_SOFTWARE | TYPE_HARDWARE | TYPE_HW_CACHE | TYPE_RAW | TYPE_TRACEPOINT
        );
        match pmu {
            Some(pmu) if own_pmu && self.naming == Naming::Typed && !self.name.contains('/') => {
                format!("{pmu}/{}/", self.name)
            }
            _ => self.name.clone(),
        }
    }
}

/// What -d, -dd and -ddd add to the events, each level to the one before (perf's).
pub(crate) const DETAILED_EVENTS: [&str; 3] = [
    "L1-dcache-loads,L1-dcache-load-misses,LLC-loads,LLC-load-misses",
    "L1-icache-loads,L1-icache-load-misses,dTLB-loads,dTLB-load-misses,iTLB-loads,iTLB-load-misses",
    "L1-dcache-prefetches,L1-dcache-prefetch-misses",
];

/// The event a name read back from a recording stands for, keeping that name (perf's
/// name with -A may carry its PMU: `cpu-clock [software]`); one it cannot parse is a
/// plain event of no known type.
pub fn recorded(name: &str, sysfs: &dyn Sources) -> Event {
    let plain = name.split(" [").next().unwrap_or(name);
    let parsed = parse_events(plain, sysfs).ok();
    let mut e = parsed
        .and_then(|p| p.into_iter().next())
        .unwrap_or_else(|| Event::plain(name, u32::MAX, 0));
    e.name = name.to_string();
    e
}

/// Parses an -e list, its groups regrouped as perf regroups them (a group cannot span
/// PMUs). Errors are one line and name the part that is wrong.
pub(crate) fn parse_events(list: &str, sysfs: &dyn Sources) -> Result<Vec<Event>> {
    parse(list, sysfs).map(|p| p.events)
}

/// Several -e lists, parsed each on its own, as one list: each list's group leaders
/// moved past the events of the lists before it (as parsing the lists joined by commas
/// gives them: no group spans two lists).
pub fn joined(lists: &[Vec<Event>]) -> Vec<Event> {
    let mut all: Vec<Event> = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    for list in lists {
        let before = all.len();
        all.extend(list.iter().map(|e| Event {
            leader: e.leader.map(|l| l + before),
            ..e.clone()
        }));
    }
    all
}

/// An -e list, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub events: Vec<Event>,
    /// A group was split between PMUs, or its members reordered by PMU (perf then warns
    /// that events were regrouped).
    pub regrouped: bool,
}

/// Parses an -e list, saying whether a group had to be regrouped by PMU.
pub fn parse(list: &str, sysfs: &dyn Sources) -> Result<Parsed> {
    let mut events = vec![];
    for item in split_list(list)? {
        match item {
            Item::Event(s) => {
                let (variants, state) = parse_event(s, sysfs)?;
                if state.weak {
                    bail!("event syntax error: '{s}': Weak modifier is for use with groups");
                }
                for v in variants {
                    events.push(v.event(None, state.bpf));
                }
            }
            Item::Group(members, mods) => {
                let leader = events.len();
                let mut group = vec![];
                for s in members {
                    let (variants, state) = parse_event(s, sysfs)?;
                    for v in variants {
                        let first = group.is_empty();
                        let attr = match mods {
                            // perf prints a member's own name, without the group's modifiers.
                            Some(m) => state
                                .apply(m)
                                .map_err(|e| anyhow!("bad modifier ':{m}' on group: {e}"))?
                                .attr(v.attr, first),
                            None => v.attr,
                        };
                        let bpf = state.bpf || mods.is_some_and(|m| m.contains('b'));
                        group.push(Expansion { attr, ..v }.event(Some(leader), bpf));
                    }
                }
                events.extend(group);
            }
        }
    }
    let regrouped = regroup::regroup(&mut events, sysfs);
    Ok(Parsed { events, regrouped })
}

/// One event a written event stands for (one of several on a hybrid machine).
#[derive(Clone, Debug)]
struct Expansion {
    name: String,
    attr: Attr,
    hybrid: Option<Hybrid>,
    naming: Naming,
    tool: Option<Tool>,
}

impl Expansion {
    fn event(self, leader: Option<usize>, bpf: bool) -> Event {
        Event {
            name: self.name,
            attr: self.attr,
            leader,
            bpf,
            filter: None,
            hybrid: self.hybrid,
            naming: self.naming,
            tool: self.tool,
        }
    }
}

enum Item<'a> {
    Event(&'a str),
    /// Members and the group's modifiers.
    Group(Vec<&'a str>, Option<&'a str>),
}

/// Splits the list at commas that are not inside `pmu/.../` terms, and gathers groups.
fn split_list(list: &str) -> Result<Vec<Item<'_>>> {
    let mut items = vec![];
    let bytes = list.as_bytes();
    let (mut i, mut start) = (0, 0);
    let mut in_terms = false;
    let mut group: Option<(Vec<&str>, usize)> = None;
    let piece = |a: usize, b: usize| -> Result<&str> {
        let s = list[a..b].trim();
        if s.is_empty() {
            bail!("empty event in '{list}'");
        }
        Ok(s)
    };
    while i <= bytes.len() {
        let c = bytes.get(i).copied();
        match c {
            Some(b'/') => in_terms = !in_terms,
            _ if in_terms && c.is_some() => {}
            Some(b'{') => {
                if group.is_some() {
                    bail!("groups cannot nest: '{list}'");
                }
                if !list[start..i].trim().is_empty() {
                    bail!("unexpected '{{' after '{}'", list[start..i].trim());
                }
                group = Some((vec![], i));
                start = i + 1;
            }
            Some(b'}') => {
                let Some((mut members, open)) = group.take() else {
                    bail!("'}}' without '{{' in '{list}'");
                };
                members.push(piece(start, i)?);
                // Group modifiers run to the next top-level comma.
                let end = list[i..].find(',').map_or(list.len(), |n| i + n);
                let mods = list[i + 1..end].trim();
                let mods =
                    match mods {
                        "" => None,
                        m => Some(m.strip_prefix(':').filter(|m| !m.is_empty()).ok_or_else(
                            || anyhow!("unexpected '{m}' after group '{}'", &list[open..=i]),
                        )?),
                    };
                items.push(Item::Group(members, mods));
                i = end;
                start = end + 1;
                if end == list.len() {
                    break;
                }
            }
            Some(b',') | None => {
                match &mut group {
                    Some((members, _)) if c.is_some() => members.push(piece(start, i)?),
                    Some(_) => bail!("group without '}}' in '{list}'"),
                    None => items.push(Item::Event(piece(start, i)?)),
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if in_terms {
        bail!("missing '/' in '{list}'");
    }
    Ok(items)
}

/// The modifier state perf keeps per event while reading `:ukhGHpD...`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mods {
    eu: bool,
    ek: bool,
    eh: bool,
    e_host: bool,
    e_guest: bool,
    /// Set once G or H was given: later u or p no longer imply excluding the guest.
    gh_given: bool,
    precise: u8,
    pinned: bool,
    exclusive: bool,
    idle: bool,
    /// b: count with BPF counters; not part of the attr.
    bpf: bool,
    /// W: a weak group (counting ignores it, but perf refuses it outside a group).
    weak: bool,
}

const MODIFIER_CHARS: &str = "ukhGHpPDeIWSb";

impl Mods {
    /// An event written without modifiers counts everything but guest mode.
    fn unmodified() -> Mods {
        Mods {
            e_guest: true,
            ..Mods::default()
        }
    }

    /// Applies a modifier string. The first of u, k, h excludes the other two, and
    /// later ones include theirs again; likewise for G and H. u and p also exclude the
    /// guest, unless G or H said otherwise.
    fn apply(mut self, s: &str) -> Result<Mods> {
        let mut exclude = self.eu || self.ek || self.eh;
        for c in s.chars() {
            match c {
                'u' | 'k' | 'h' => {
                    if !exclude {
                        exclude = true;
                        (self.eu, self.ek, self.eh) = (true, true, true);
                    }
                    match c {
                        'u' => {
                            self.eu = false;
                            if !self.gh_given {
                                self.e_guest = true;
                            }
                        }
                        'k' => self.ek = false,
                        _ => self.eh = false,
                    }
                }
                'G' | 'H' => {
                    if !self.gh_given {
                        self.gh_given = true;
                        (self.e_guest, self.e_host) = (true, true);
                    }
                    match c {
                        'G' => self.e_guest = false,
                        _ => self.e_host = false,
                    }
                }
                'p' => {
                    self.precise += 1;
                    if !self.gh_given {
                        self.e_guest = true;
                    }
                }
                'D' => self.pinned = true,
                'e' => self.exclusive = true,
                'I' => self.idle = true,
                // P asks for the highest precision the PMU offers; counting ignores it,
                // as does S (sample read).
                'P' | 'S' => {}
                'W' => self.weak = true,
                'b' => self.bpf = true,
                _ => bail!("unknown modifier '{c}' (modifiers are {MODIFIER_CHARS})"),
            }
        }
        if self.precise > 3 {
            bail!("precise level {} is more than 3 (ppp)", self.precise);
        }
        Ok(self)
    }

    fn attr(self, base: Attr, leader_or_single: bool) -> Attr {
        Attr {
            exclude_user: self.eu,
            exclude_kernel: self.ek,
            exclude_hv: self.eh,
            exclude_idle: self.idle,
            exclude_host: self.e_host,
            exclude_guest: self.e_guest,
            precise_ip: self.precise,
            // Only a group's leader can be pinned or exclusive.
            pinned: self.pinned && leader_or_single,
            exclusive: self.exclusive && leader_or_single,
            ..base
        }
    }
}

/// Parses one event: what it stands for (its printed name and attr, one per core PMU
/// on a hybrid machine), and its modifier state (which group modifiers build on).
fn parse_event(s: &str, sysfs: &dyn Sources) -> Result<(Vec<Expansion>, Mods)> {
    let (body, mods, named, origin) = resolve(s, sysfs)?;
    // b alone changes how the event is counted, not what: the attr is an unmodified one.
    let state = match mods {
        None => Mods::unmodified(),
        Some(m) if !m.is_empty() && m.chars().all(|c| c == 'b') => Mods {
            bpf: true,
            ..Mods::unmodified()
        },
        Some(m) => Mods::default()
            .apply(m)
            .map_err(|e| anyhow!("bad modifier in event '{s}': {e}"))?,
    };
    let written = Expansion {
        name: named.clone().unwrap_or_else(|| s.to_string()),
        attr: body,
        hybrid: None,
        naming: match named {
            Some(_) => Naming::Given,
            None => Naming::Typed,
        },
        tool: Tool::from_name(s.split(':').next().unwrap_or(s)).or(Tool::bperfs(s)),
    };
    let variants = hybrid::per_core_pmu(written, named.is_some(), &origin, sysfs)
        .map_err(|e| anyhow!("event '{s}': {e}"))?
        .into_iter()
        .map(|v| Expansion {
            attr: state.attr(v.attr, true),
            ..v
        })
        .collect();
    Ok((variants, state))
}

/// What `resolve` makes of an event: its identity (type and config words), its
/// modifiers, a `name=` term, and what named it.
type Resolved<'a> = (Attr, Option<&'a str>, Option<String>, Origin);

/// An event written `pmu/terms/` (its first `/` at `open`): bperf's own, or one of a
/// PMU of the machine's.
fn resolve_pmu_event<'a>(s: &'a str, open: usize, sysfs: &dyn Sources) -> Result<Resolved<'a>> {
    if Tool::bperfs(s).is_some() {
        let dummy = Attr {
            type_: TYPE_SOFTWARE,
            config: DUMMY,
            ..Attr::default()
        };
        return Ok((dummy, None, None, Origin::Other));
    }
    if s.starts_with("bperf/") {
        let names: Vec<&str> = Tool::BPERFS.iter().map(|t| t.name()).collect();
        bail!(
            "event '{s}': bperf's own events are {}, without terms or modifiers",
            names.join(" and ")
        );
    }
    let close = s
        .rfind('/')
        .filter(|&c| c > open)
        .ok_or_else(|| anyhow!("missing '/' in event '{s}'"))?;
    // As perf: the modifiers follow the closing slash directly (`msr/tsc/u`).
    let mods = &s[close + 1..];
    if let Some(after_colon) = mods.strip_prefix(':') {
        bail!(
            "event syntax error: '{s}': unrecognized input after '/' (modifiers follow it directly: '{}{after_colon}')",
            &s[..=close]
        );
    }
    let mods = (!mods.is_empty()).then_some(mods);
    let pmu_name = &s[..open];
    let pmu = sysfs.pmu(pmu_name).ok_or_else(|| {
        anyhow!(
            "unknown PMU '{pmu_name}' in event '{s}' (none under {})",
            sysfs.pmu_root().display()
        )
    })?;
    let (attr, name) = pmu
        .encode(&s[open + 1..close])
        .map_err(|e| anyhow!("event '{s}': {e}"))?;
    Ok((attr, mods, name, Origin::Pmu(pmu)))
}

/// The event's identity (type and config words), its modifiers, a `name=` term, and
/// what named it.
fn resolve<'a>(s: &'a str, sysfs: &dyn Sources) -> Result<Resolved<'a>> {
    let with = |type_, config| Attr {
        type_,
        config,
        ..Attr::default()
    };
    // pmu/terms/ with modifiers right after it (`u`).
    if let Some(open) = s.find('/') {
        return resolve_pmu_event(s, open, sysfs);
    }
    let (head, mods) = match s.split_once(':') {
        Some((h, m)) => (h, Some(m)),
        None => (s, None),
    };
    if let Some(c) = symbols::lookup(HARDWARE, head) {
        return Ok((with(TYPE_HARDWARE, c), mods, None, Origin::Legacy));
    }
    if let Some(c) = symbols::lookup(SOFTWARE, head) {
        return Ok((with(TYPE_SOFTWARE, c), mods, None, Origin::Other));
    }
    if Tool::from_name(head).is_some() {
        return Ok((with(TYPE_SOFTWARE, DUMMY), mods, None, Origin::Other));
    }
    if let Some(c) = symbols::cache_config(head) {
        return Ok((with(TYPE_HW_CACHE, c), mods, None, Origin::Legacy));
    }
    if let Some(hex) = head.strip_prefix('r') {
        if !hex.is_empty() && hex.len() <= 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let raw = with(TYPE_RAW, u64::from_str_radix(hex, 16)?);
            return Ok((raw, mods, None, Origin::Other));
        }
    }
    // A bare name: an alias one of the sysfs PMUs defines.
    if !head.is_empty()
        && head
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        for pmu in sysfs.pmus() {
            if let Some(terms) = pmu.alias(head) {
                let (attr, name) = pmu.encode(terms).map_err(|e| anyhow!("event '{s}': {e}"))?;
                return Ok((attr, mods, name, Origin::Alias(pmu, head.to_string())));
            }
        }
    }
    // sys:name[:modifiers] -- a tracepoint.
    if let Some((sys, rest)) = s.split_once(':') {
        let (tp, mods) = match rest.split_once(':') {
            Some((t, m)) => (t, Some(m)),
            None => (rest, None),
        };
        if let Some(id) = sysfs.tracepoint_id(sys, tp) {
            return Ok((with(TYPE_TRACEPOINT, id), mods, None, Origin::Other));
        }
    }
    Err(unknown_event(if head.is_empty() { s } else { head }, sysfs))
}

fn unknown_event(name: &str, sysfs: &dyn Sources) -> anyhow::Error {
    let near = similar_names(name, sysfs);
    match near.is_empty() {
        true => anyhow!("unknown event '{name}' (see 'bperf list')"),
        false => anyhow!(
            "unknown event '{name}' (did you mean {}?)",
            near.join(" or ")
        ),
    }
}

/// Up to three known event names a typo of `name` could be: within a third of the
/// name's length in edits (two at least), and sharing some of it. A name with no letter
/// or digit resembles nothing.
fn similar_names(name: &str, sysfs: &dyn Sources) -> Vec<String> {
    if !name.chars().any(|c| c.is_ascii_alphanumeric()) {
        return Vec::new();
    }
    let mut known: Vec<String> = HARDWARE
        .iter()
        .chain(SOFTWARE)
        .flat_map(|(_, n)| n.iter().map(|s| s.to_string()))
        .chain(cache_event_names().into_iter().map(|(n, _)| n))
        .collect();
    for p in sysfs.pmus() {
        for (a, _) in &p.aliases {
            known.push(format!("{}/{a}/", p.name));
        }
    }
    let len = name.chars().count();
    let mut scored: Vec<(usize, String)> = known
        .into_iter()
        .map(|k| (strsim::levenshtein(name, &k), k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2) && *d < len)
        .collect();
    scored.sort();
    scored.dedup();
    scored
        .into_iter()
        .take(3)
        .map(|(_, k)| format!("'{k}'"))
        .collect()
}

#[cfg(test)]
mod tests;
