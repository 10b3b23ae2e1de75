//! The perf_event_open(2) boundary: attrs, open, read, enable, and perf's `-vv` dump.
//! The ABI (struct perf_event_attr, its bits, the ioctls) is perf-event-open-sys's.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use perf_event_open_sys::bindings::{
    perf_event_attr, PERF_ATTR_SIZE_VER8, PERF_FLAG_FD_CLOEXEC, PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_SAMPLE_IDENTIFIER,
};
use perf_event_open_sys::{ioctls, perf_event_open};

use crate::event::Attr;
use crate::reading::Reading;

/// Where a counter counts: every task on one CPU, or one task and its future children
/// on any CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Cpu(u32),
    /// A command bperf started, counted from its exec.
    Task(libc::pid_t),
    /// A thread that runs already (-p, -t), counted from now.
    Thread(libc::pid_t),
}

/// An event's place in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Single,
    Leader,
    Member,
}

/// A counting (non-sampling) attr for `a`, reporting enabled and running times, as
/// `target` and `role` need it: a task is counted from its next exec, with its
/// children; a group leader on a CPU starts disabled, so that its members join before it
/// is scheduled, and [`enable`] starts it once they have.
pub fn counting_attr(a: &Attr, target: Scope, role: Role) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: a.type_,
        // The size perf 6.12 passes: the kernel reads no further, and -vv dumps match.
        size: PERF_ATTR_SIZE_VER8,
        config: a.config,
        read_format: (PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING) as u64,
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = a.config1;
    attr.__bindgen_anon_4.config2 = a.config2;
    attr.set_pinned(a.pinned.into());
    attr.set_exclusive(a.exclusive.into());
    attr.set_exclude_user(a.exclude_user.into());
    attr.set_exclude_kernel(a.exclude_kernel.into());
    attr.set_exclude_hv(a.exclude_hv.into());
    attr.set_exclude_idle(a.exclude_idle.into());
    attr.set_exclude_host(a.exclude_host.into());
    attr.set_exclude_guest(a.exclude_guest.into());
    attr.set_precise_ip(u64::from(a.precise_ip & 3));
    match target {
        Scope::Task(_) => {
            attr.set_inherit(1);
            if role != Role::Member {
                attr.set_disabled(1);
                attr.set_enable_on_exec(1);
            }
        }
        Scope::Thread(_) => {
            attr.set_inherit(1);
            if role == Role::Leader {
                attr.set_disabled(1);
            }
        }
        Scope::Cpu(_) if role == Role::Leader => attr.set_disabled(1),
        Scope::Cpu(_) => {}
    }
    attr
}

/// The bytes of `attr` the kernel reads (its size field says how many).
pub(crate) fn attr_bytes(attr: &perf_event_attr) -> &[u8] {
    let n = (attr.size as usize).min(std::mem::size_of::<perf_event_attr>());
    // SAFETY: perf_event_attr is plain old data; n is within it.
    unsafe { std::slice::from_raw_parts((attr as *const perf_event_attr).cast::<u8>(), n) }
}

/// The attr perf stat record writes for `a` counted on `target`: the counting attr
/// with the sample identifier set, as the attr's first `size` bytes.
pub(crate) fn recorded_attr(a: &Attr, target: Scope) -> Vec<u8> {
    let mut attr = counting_attr(a, target, Role::Single);
    attr.sample_type = PERF_SAMPLE_IDENTIFIER as u64;
    let size = (attr.size as usize).min(std::mem::size_of::<perf_event_attr>());
    // SAFETY: perf_event_attr is plain data; `size` bytes of it are in bounds.
    let bytes =
        unsafe { std::slice::from_raw_parts((&attr as *const perf_event_attr).cast::<u8>(), size) };
    bytes.to_vec()
}

/// Sets a tracepoint event's filter (--filter).
pub(crate) fn set_filter(fd: &OwnedFd, filter: &str) -> io::Result<()> {
    let c = std::ffi::CString::new(filter).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: SET_FILTER reads a NUL-terminated string that outlives the call.
    if unsafe { ioctls::SET_FILTER(fd.as_raw_fd(), c.as_ptr() as *mut _) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Starts a group that was opened disabled (members follow their leader).
pub fn enable(leader: &OwnedFd) -> io::Result<()> {
    // SAFETY: a plain ioctl on an fd we own.
    if unsafe { ioctls::ENABLE(leader.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Can this kernel count `attr`? Opens it for the calling thread on any CPU and closes
/// it again; a PMU that rejects the guest/host bits is asked again without them.
pub fn probe(attr: &Attr) -> bool {
    // The flags of a CPU's counter: no inherit, enabled.
    let mut raw = counting_attr(attr, Scope::Cpu(0), Role::Single);
    if open_with_fallback(raw, Scope::Task(0), None, None).is_ok() {
        return true;
    }
    // Under perf_event_paranoid 2 a user may count only user space: an event that opens
    // without the kernel's part is supported for that user too (perf asks again alike).
    raw.set_exclude_kernel(1);
    open_with_fallback(raw, Scope::Task(0), None, None).is_ok()
}

/// What the child of [`user_counts_itself`] exits with.
const COUNTED: i32 = 0;
const REFUSED: i32 = 1;
const NOT_ASKED: i32 = 2;

/// May a process without privileges count itself here? perf_event_paranoid 3 refuses it
/// on kernels with Debian's or Android's patch; mainline treats 3 like 2. A child drops
/// to nobody (when root) and every capability, then opens task-clock for itself, user
/// space only.
pub(crate) fn user_counts_itself() -> Result<bool, String> {
    let mut attr = perf_event_attr {
        type_: perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE,
        size: PERF_ATTR_SIZE_VER8,
        config: u64::from(perf_event_open_sys::bindings::PERF_COUNT_SW_TASK_CLOCK),
        ..Default::default()
    };
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // SAFETY: the child makes raw system calls only (no allocation, no locks) and
    // leaves with _exit.
    match unsafe { libc::fork() } {
        -1 => Err(format!("cannot fork: {}", io::Error::last_os_error())),
        // SAFETY: in the child, which makes raw system calls only, then leaves.
        0 => unsafe { libc::_exit(count_itself_unprivileged(&mut attr)) },
        pid => {
            let mut status = 0;
            // SAFETY: waits for the child just forked.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
                if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    return Err(format!("waiting: {}", io::Error::last_os_error()));
                }
            }
            match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
                Some(COUNTED) => Ok(true),
                Some(REFUSED) => Ok(false),
                _ => Err("the probe could not drop its privileges or open task-clock".into()),
            }
        }
    }
}

/// capset(2)'s header and data (linux/capability.h), version 3: two data structs.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// In the forked child: drops privileges, then opens `attr` for itself.
///
/// # Safety
/// Only raw system calls, as a child of a forked process may make.
unsafe fn count_itself_unprivileged(attr: &mut perf_event_attr) -> i32 {
    const NOBODY: libc::c_long = 65534;
    if libc::geteuid() == 0 {
        let groups = libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>());
        let gid = libc::syscall(libc::SYS_setresgid, NOBODY, NOBODY, NOBODY);
        let uid = libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY);
        if groups != 0 || gid != 0 || uid != 0 {
            return NOT_ASKED;
        }
    }
    // No capability left (a non-root process may hold some from its file).
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
        return NOT_ASKED;
    }
    let flags = PERF_FLAG_FD_CLOEXEC as libc::c_ulong;
    match perf_event_open(attr, 0, -1, -1, flags) {
        fd if fd >= 0 => COUNTED,
        _ => match *libc::__errno_location() {
            libc::EACCES | libc::EPERM => REFUSED,
            _ => NOT_ASKED,
        },
    }
}

/// Opens one counter; like perf, a PMU that rejects the guest/host exclusion bits
/// (EINVAL: msr, most uncore PMUs) is asked again without them. With `trace`, every
/// attempt is printed in perf's `-vv` layout.
pub fn open_with_fallback(
    mut attr: perf_event_attr,
    target: Scope,
    group: Option<&OwnedFd>,
    trace: Option<&dyn Fn(&str)>,
) -> io::Result<OwnedFd> {
    loop {
        let result = open(&mut attr, target, group);
        if let Some(say) = trace {
            let group_fd = group.map_or(-1, |g| g.as_raw_fd());
            say(&format!(
                "{}{}",
                describe(&attr),
                describe_open(target, group_fd, &result)
            ));
        }
        let guest_host = attr.exclude_guest() | attr.exclude_host() != 0;
        match result {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && guest_host => {
                if let Some(say) = trace {
                    say("switching off exclude_guest, exclude_host");
                }
                attr.set_exclude_guest(0);
                attr.set_exclude_host(0);
            }
            r => return r,
        }
    }
}

/// Opens a counting event. `group` is the leader's fd for a group member.
pub fn open(
    attr: &mut perf_event_attr,
    target: Scope,
    group: Option<&OwnedFd>,
) -> io::Result<OwnedFd> {
    let (pid, cpu) = match target {
        Scope::Cpu(c) => (-1, c as libc::c_int),
        Scope::Task(p) | Scope::Thread(p) => (p, -1),
    };
    let group_fd = group.map_or(-1, |g| g.as_raw_fd());
    let flags = PERF_FLAG_FD_CLOEXEC as libc::c_ulong;
    // SAFETY: attr is a live, initialised perf_event_attr of the size it says.
    let fd = unsafe { perf_event_open(attr, pid, cpu, group_fd, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this fd and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads a counter opened with [`counting_attr`]. An event in error state (a pinned event
/// that could not get a counter) reads as end-of-file: it never ran, which perf prints as
/// `<not counted>`, so it reads here as a zero reading with no time enabled or running.
pub fn read(fd: &OwnedFd) -> io::Result<Reading> {
    let mut buf = [0u8; 24];
    let n = rustix::io::read(fd, &mut buf)?;
    if n == 0 {
        return Ok(Reading::default());
    }
    if n != buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short read from perf event",
        ));
    }
    let mut r = Reading::default();
    plain::copy_from_bytes(&mut r, &buf).expect("24 bytes hold a Reading");
    Ok(r)
}

/// Does this error mean "this machine cannot count that event" (perf's `<not supported>`)?
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::ENODEV)
            | Some(libc::EINVAL)
            | Some(libc::ENXIO)
    )
}

/// Does this error mean "you are not allowed to"?
pub(crate) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

const SEPARATOR: &str = "------------------------------------------------------------";

/// The attr in perf's `-vv` layout: one `name value` line per non-zero field, so the two
/// tools' dumps can be diffed.
pub(crate) fn describe(a: &perf_event_attr) -> String {
    let mut out = format!("{SEPARATOR}\nperf_event_attr:\n");
    let mut line = |name: &str, value: String| {
        out.push_str(&format!("  {name:<32} {value}\n"));
    };
    if a.type_ != 0 {
        line("type", a.type_.to_string());
    }
    line("size", a.size.to_string());
    if a.config != 0 {
        line("config", format!("{:#x}", a.config));
    }
    if a.read_format != 0 {
        let names = [
            (PERF_FORMAT_TOTAL_TIME_ENABLED, "TOTAL_TIME_ENABLED"),
            (PERF_FORMAT_TOTAL_TIME_RUNNING, "TOTAL_TIME_RUNNING"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(bit, _)| a.read_format & u64::from(*bit) != 0)
            .map(|(_, n)| *n)
            .collect();
        line("read_format", set.join("|"));
    }
    // perf's order, precise_ip between enable_on_exec and exclude_host.
    let bits = [
        ("disabled", a.disabled()),
        ("inherit", a.inherit()),
        ("pinned", a.pinned()),
        ("exclusive", a.exclusive()),
        ("exclude_user", a.exclude_user()),
        ("exclude_kernel", a.exclude_kernel()),
        ("exclude_hv", a.exclude_hv()),
        ("exclude_idle", a.exclude_idle()),
        ("enable_on_exec", a.enable_on_exec()),
        ("precise_ip", a.precise_ip()),
        ("exclude_host", a.exclude_host()),
        ("exclude_guest", a.exclude_guest()),
    ];
    for (name, value) in bits.into_iter().filter(|(_, v)| *v != 0) {
        line(name, value.to_string());
    }
    // SAFETY: plain integers in unions every variant of which is a u64.
    let (config1, config2) = unsafe { (a.__bindgen_anon_3.config1, a.__bindgen_anon_4.config2) };
    if config1 != 0 {
        line("{ bp_addr, config1 }", format!("{config1:#x}"));
    }
    if config2 != 0 {
        line("{ bp_len, config2 }", format!("{config2:#x}"));
    }
    out.push_str(SEPARATOR);
    out.push('\n');
    out
}

/// perf's `-vv` line for one perf_event_open call.
pub(crate) fn describe_open(target: Scope, group: i32, result: &io::Result<OwnedFd>) -> String {
    let (pid, cpu) = match target {
        Scope::Cpu(c) => (-1, c as i64),
        Scope::Task(p) | Scope::Thread(p) => (p, -1),
    };
    let head = format!(
        "sys_perf_event_open: pid {pid}  cpu {cpu}  group_fd {group}  flags {PERF_FLAG_FD_CLOEXEC:#x}"
    );
    match result {
        Ok(fd) => format!("{head} = {}", fd.as_raw_fd()),
        Err(e) => format!(
            "{head}\nsys_perf_event_open failed, error -{}",
            e.raw_os_error().unwrap_or(0)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_dump_matches_perf_layout() {
        let attr = counting_attr(
            &Attr {
                type_: 1,
                config: 1,
                exclude_guest: true,
                ..Attr::default()
            },
            Scope::Task(42),
            Role::Single,
        );
        let want = "\
------------------------------------------------------------
perf_event_attr:
  type                             1
  size                             136
  config                           0x1
  read_format                      TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING
  disabled                         1
  inherit                          1
  enable_on_exec                   1
  exclude_guest                    1
------------------------------------------------------------
";
        assert_eq!(describe(&attr), want);
    }

    #[test]
    fn attr_dump_shows_precise_ip_and_exclusions() {
        let attr = counting_attr(
            &Attr {
                type_: 0,
                config: 0,
                exclude_kernel: true,
                exclude_hv: true,
                precise_ip: 3,
                config1: 0x3,
                ..Attr::default()
            },
            Scope::Cpu(0),
            Role::Single,
        );
        let d = describe(&attr);
        assert!(!d.contains("  type "), "{d}");
        assert!(
            d.contains("  { bp_addr, config1 }             0x3\n"),
            "{d}"
        );
        let order: Vec<&str> = d
            .lines()
            .filter_map(|l| l.strip_prefix("  "))
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "size",
                "read_format",
                "exclude_kernel",
                "exclude_hv",
                "precise_ip",
                "{"
            ]
        );
    }

    #[test]
    fn counting_attr_bits() {
        let a = Attr {
            exclude_user: true,
            exclude_host: true,
            precise_ip: 2,
            ..Attr::default()
        };
        let cpu = counting_attr(&a, Scope::Cpu(0), Role::Single);
        assert_eq!(
            (cpu.exclude_user(), cpu.exclude_host(), cpu.precise_ip()),
            (1, 1, 2)
        );
        assert_eq!(cpu.size, 136);
        assert_eq!(
            (cpu.disabled(), cpu.inherit()),
            (0, 0),
            "per-CPU counters start enabled, not inherited"
        );
        let leader = counting_attr(&a, Scope::Cpu(0), Role::Leader);
        assert_eq!(leader.disabled(), 1);
        let member = counting_attr(&a, Scope::Task(1), Role::Member);
        assert_eq!((member.inherit(), member.disabled()), (1, 0));
        let task = counting_attr(&a, Scope::Task(1), Role::Single);
        assert_eq!((task.disabled(), task.enable_on_exec()), (1, 1));
    }
}
