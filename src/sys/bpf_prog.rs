//! BPF programs already loaded, as bperf stat -b names them: found by id, name, tag or
//! pinned path (bpftool's words), with their run statistics (BPF_ENABLE_STATS). The
//! parsing of the names is plain Rust; the lookups go through libbpf-rs's query API.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::btf::BtfType;
use libbpf_rs::libbpf_sys;
use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions, ProgramInfo};
use libbpf_rs::{Btf, Program};

/// One way of naming programs, as bpftool's PROG: `ID` or `id ID`, `name NAME`,
/// `tag TAG`, `pinned PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    Id(u32),
    /// Every program of this name: the kernel's (15 characters at most) or its
    /// function's, from its BTF.
    Name(String),
    /// Every program with this tag (the hash of its instructions).
    Tag([u8; 8]),
    Pinned(PathBuf),
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spec::Id(id) => write!(f, "id {id}"),
            Spec::Name(n) => write!(f, "name {n}"),
            Spec::Tag(t) => write!(f, "tag {}", tag_hex(t)),
            Spec::Pinned(p) => write!(f, "pinned {}", p.display()),
        }
    }
}

fn tag_hex(tag: &[u8; 8]) -> String {
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses -b's list: comma-separated `ID`, `id ID`, `name NAME`, `tag TAG` (16 hex
/// digits), `pinned PATH`. The error is one line naming the item.
pub(crate) fn parse_specs(list: &str) -> Result<Vec<Spec>, String> {
    list.split(',')
        .map(|item| parse_spec(item.trim()))
        .collect()
}

fn parse_spec(item: &str) -> Result<Spec, String> {
    let id = |s: &str| match s.parse::<u32>() {
        Ok(id) if id > 0 => Ok(Spec::Id(id)),
        _ => Err(format!("'{s}' is not a BPF program id")),
    };
    let (kind, arg) = match item.split_once(char::is_whitespace) {
        Some((k, a)) => (k, a.trim()),
        None if item.is_empty() => return Err("an empty BPF program in the list".into()),
        None => return id(item),
    };
    if arg.is_empty() {
        return Err(format!("'{item}' names no BPF program"));
    }
    match kind {
        "id" => id(arg),
        "name" => Ok(Spec::Name(arg.to_string())),
        "tag" => parse_tag(arg).map(Spec::Tag),
        "pinned" => Ok(Spec::Pinned(PathBuf::from(arg))),
        _ => Err(format!(
            "'{item}': a BPF program is ID, id ID, name NAME, tag TAG or pinned PATH"
        )),
    }
}

fn parse_tag(s: &str) -> Result<[u8; 8], String> {
    let bad = || format!("'{s}' is not a BPF program tag (16 hex digits)");
    if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut tag = [0u8; 8];
    for (i, b) in tag.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(tag)
}

/// A loaded program found for -b, held open so that it cannot go away while counted.
#[derive(Debug)]
pub struct Prog {
    pub id: u32,
    /// The kernel's name for it (at most 15 characters).
    pub name: String,
    /// Its function's name from its BTF, which fentry/fexit attach to; None without BTF.
    pub func: Option<String>,
    pub fd: OwnedFd,
}

/// The programs `specs` name, each once, in the order named. An id, path, name or tag
/// that finds none is an error naming it.
pub fn find(specs: &[Spec]) -> Result<Vec<Prog>> {
    let mut progs: Vec<Prog> = Vec::new();
    for spec in specs {
        let ids = ids_of(spec)?;
        if ids.is_empty() {
            bail!("no BPF program has {spec}");
        }
        for id in ids {
            if progs.iter().all(|p| p.id != id) {
                progs.push(open(id)?);
            }
        }
    }
    Ok(progs)
}

/// Every loaded program, with its function info (for its function's name).
fn all_programs() -> impl Iterator<Item = ProgramInfo> {
    ProgInfoIter::with_query_opts(ProgInfoQueryOptions::default().include_func_info(true))
}

fn ids_of(spec: &Spec) -> Result<Vec<u32>> {
    Ok(match spec {
        Spec::Id(id) => vec![*id],
        Spec::Pinned(path) => vec![pinned_id(path)?],
        Spec::Name(name) => all_programs()
            .filter(|p| {
                p.name.to_str() == Some(name.as_str())
                    || function_name(p).as_deref() == Some(name.as_str())
            })
            .map(|p| p.id)
            .collect(),
        Spec::Tag(tag) => all_programs()
            .filter(|p| p.tag.0 == *tag)
            .map(|p| p.id)
            .collect(),
    })
}

/// The id of the program pinned at `path`; an error if nothing is pinned there, or
/// something other than a program.
fn pinned_id(path: &Path) -> Result<u32> {
    let fd = Program::fd_from_pinned_path(path)
        .map_err(|e| anyhow!("no BPF program is pinned at {}: {e}", path.display()))?;
    let kind = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
    if kind != Path::new("anon_inode:bpf-prog") {
        bail!("{} is pinned, but is not a BPF program", path.display());
    }
    Program::id_from_fd(fd.as_fd()).with_context(|| format!("{}", path.display()))
}

/// Opens program `id` and finds its names.
fn open(id: u32) -> Result<Prog> {
    let fd = Program::fd_from_id(id).map_err(|e| match e.kind() {
        libbpf_rs::ErrorKind::NotFound => anyhow!("no BPF program has id {id}"),
        _ => anyhow!("cannot open BPF program {id}: {e}"),
    })?;
    let info = all_programs().find(|p| p.id == id);
    Ok(Prog {
        id,
        name: info
            .as_ref()
            .map(|p| p.name.to_string_lossy().into_owned())
            .unwrap_or_default(),
        func: info.as_ref().and_then(function_name),
        fd,
    })
}

/// The name of a program's main function in its BTF, as fentry/fexit need it.
fn function_name(p: &ProgramInfo) -> Option<String> {
    let first = p.func_info.first()?;
    if p.btf_id == 0 {
        return None;
    }
    let btf = Btf::from_prog_id(p.id).ok()?;
    let ty: BtfType = btf.type_by_id(first.type_id.into())?;
    Some(ty.name()?.to_string_lossy().into_owned())
}

/// What the kernel counted of a program's runs since it was loaded, while BPF stats
/// were enabled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RunStats {
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

impl RunStats {
    pub fn since(&self, earlier: &RunStats) -> RunStats {
        RunStats {
            run_cnt: self.run_cnt.wrapping_sub(earlier.run_cnt),
            run_time_ns: self.run_time_ns.wrapping_sub(earlier.run_time_ns),
        }
    }
}

/// The run count and run time of the program behind `fd`.
pub(crate) fn run_stats(fd: BorrowedFd) -> io::Result<RunStats> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a bpf_prog_info of the size given; with its array pointers all
    // zero, the kernel writes only the struct itself.
    let ret = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret));
    }
    Ok(RunStats {
        run_cnt: info.run_cnt,
        run_time_ns: info.run_time_ns,
    })
}

/// BPF run statistics, enabled while this is held (BPF_ENABLE_STATS): the kernel's
/// kernel.bpf_stats_enabled is left as it was.
pub(crate) struct StatsEnabled(#[allow(dead_code)] OwnedFd);

pub(crate) fn enable_stats() -> io::Result<StatsEnabled> {
    // SAFETY: a plain system call wrapper; it returns a new fd or a negative errno.
    let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: the kernel just gave us this fd and nobody else owns it.
    Ok(StatsEnabled(unsafe {
        <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_parsed_as_bpftool_names_programs() {
        assert_eq!(
            parse_specs("12,34").unwrap(),
            vec![Spec::Id(12), Spec::Id(34)]
        );
        assert_eq!(
            parse_specs("id 7, name my_prog,tag 0123456789abcdef,pinned /sys/fs/bpf/x").unwrap(),
            vec![
                Spec::Id(7),
                Spec::Name("my_prog".into()),
                Spec::Tag([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]),
                Spec::Pinned("/sys/fs/bpf/x".into()),
            ]
        );
    }

    #[test]
    fn bad_specs_are_one_line_errors() {
        for bad in [
            "",
            "0",
            "x",
            "12,",
            "id",
            "id x",
            "tag 12",
            "tag 0123456789abcdeg",
            "name ",
            "prog 3",
            "-1",
            "4294967296",
        ] {
            let e = parse_specs(bad).expect_err(bad);
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn specs_print_as_given() {
        let s = parse_specs("3,tag 0123456789abcdef").unwrap();
        let shown: Vec<String> = s.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["id 3", "tag 0123456789abcdef"]);
    }
}
