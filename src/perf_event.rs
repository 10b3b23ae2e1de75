//! The perf_event_open(2) syscall boundary: attr layout, open, read.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::counts::Reading;
use crate::event::Attr;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;

/// `struct perf_event_attr` as of PERF_ATTR_SIZE_VER8 (136 bytes). The one-bit flags of
/// the kernel's bitfield live in `flags`; see the `FLAG_*` constants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RawAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub aux_action: u32,
    pub sig_data: u64,
    pub config3: u64,
}

pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_INHERIT: u64 = 1 << 1;
pub const FLAG_PINNED: u64 = 1 << 2;
pub const FLAG_EXCLUSIVE: u64 = 1 << 3;
pub const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
pub const FLAG_EXCLUDE_USER: u64 = 1 << 4;
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub const FLAG_EXCLUDE_IDLE: u64 = 1 << 7;
pub const PRECISE_IP_SHIFT: u32 = 15;
pub const FLAG_EXCLUDE_HOST: u64 = 1 << 19;
pub const FLAG_EXCLUDE_GUEST: u64 = 1 << 20;

impl RawAttr {
    /// A counting (non-sampling) event reporting enabled and running times.
    pub fn counting(a: &Attr) -> RawAttr {
        let bit = |on: bool, f: u64| if on { f } else { 0 };
        RawAttr {
            type_: a.type_,
            size: std::mem::size_of::<RawAttr>() as u32,
            config: a.config,
            config1: a.config1,
            config2: a.config2,
            read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
            flags: bit(a.pinned, FLAG_PINNED)
                | bit(a.exclusive, FLAG_EXCLUSIVE)
                | bit(a.exclude_user, FLAG_EXCLUDE_USER)
                | bit(a.exclude_kernel, FLAG_EXCLUDE_KERNEL)
                | bit(a.exclude_hv, FLAG_EXCLUDE_HV)
                | bit(a.exclude_idle, FLAG_EXCLUDE_IDLE)
                | bit(a.exclude_host, FLAG_EXCLUDE_HOST)
                | bit(a.exclude_guest, FLAG_EXCLUDE_GUEST)
                | (u64::from(a.precise_ip & 3) << PRECISE_IP_SHIFT),
            ..Default::default()
        }
    }
}

/// Where a counter counts: every task on one CPU, or one task and its future children
/// on any CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Cpu(u32),
    Task(libc::pid_t),
}

impl RawAttr {
    /// The attr for `target`: a task is counted from its next exec, with its children.
    /// A group leader on a CPU starts disabled, so that its members join before it is
    /// scheduled; [`enable`] starts it once they have.
    pub fn for_target(mut self, target: Target, role: Role) -> RawAttr {
        match target {
            Target::Task(_) => {
                self.flags |= FLAG_INHERIT;
                if role != Role::Member {
                    self.flags |= FLAG_DISABLED | FLAG_ENABLE_ON_EXEC;
                }
            }
            Target::Cpu(_) if role == Role::Leader => self.flags |= FLAG_DISABLED,
            Target::Cpu(_) => {}
        }
        self
    }
}

/// An event's place in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Single,
    Leader,
    Member,
}

/// Starts a group that was opened disabled (members follow their leader).
pub fn enable(leader: &OwnedFd) -> io::Result<()> {
    const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
    // SAFETY: a plain ioctl on an fd we own.
    if unsafe { libc::ioctl(leader.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Mounts tracefs at `at` (normally /sys/kernel/tracing), where tracepoint ids live.
pub fn mount_tracefs(at: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(at.as_os_str().as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Can this kernel count `attr`? Opens it for the calling thread on any CPU and closes
/// it again; a PMU that rejects the guest/host bits is asked again without them.
pub fn probe(attr: &Attr) -> bool {
    open_with_fallback(RawAttr::counting(attr), Target::Task(0), None, false).is_ok()
}

/// Opens one counter; like perf, a PMU that rejects the guest/host exclusion bits
/// (EINVAL: msr, most uncore PMUs) is asked again without them. With `trace`, every
/// attempt is printed in perf's `-vv` layout.
pub fn open_with_fallback(
    mut attr: RawAttr,
    target: Target,
    group: Option<&OwnedFd>,
    trace: bool,
) -> io::Result<OwnedFd> {
    let gh = FLAG_EXCLUDE_GUEST | FLAG_EXCLUDE_HOST;
    loop {
        let result = open(&attr, target, group);
        if trace {
            let group_fd = group.map_or(-1, |g| g.as_raw_fd());
            eprint!("{}", describe(&attr));
            eprintln!("{}", describe_open(target, group_fd, &result));
        }
        match result {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && attr.flags & gh != 0 => {
                if trace {
                    eprintln!("switching off exclude_guest, exclude_host");
                }
                attr.flags &= !gh;
            }
            r => return r,
        }
    }
}

/// Opens a counting event. `group` is the leader's fd for a group member.
pub fn open(attr: &RawAttr, target: Target, group: Option<&OwnedFd>) -> io::Result<OwnedFd> {
    let (pid, cpu) = match target {
        Target::Cpu(c) => (-1, c as libc::c_int),
        Target::Task(p) => (p, -1),
    };
    let group_fd = group.map_or(-1, |g| g.as_raw_fd());
    // SAFETY: attr points to a live, correctly sized perf_event_attr.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const RawAttr,
            pid,
            cpu,
            group_fd,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this fd and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Reads a counter opened with `RawAttr::counting`.
pub fn read(fd: &OwnedFd) -> io::Result<Reading> {
    let mut buf = [0u8; 24];
    // SAFETY: buf is 24 writable bytes.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n != buf.len() as isize {
        return Err(if n < 0 {
            io::Error::last_os_error()
        } else {
            io::Error::new(io::ErrorKind::UnexpectedEof, "short read from perf event")
        });
    }
    let mut r = Reading::default();
    plain::copy_from_bytes(&mut r, &buf).expect("24 bytes hold a Reading");
    Ok(r)
}

/// Does this error mean "this machine cannot count that event" (perf's `<not supported>`)?
pub fn is_unsupported(e: &io::Error) -> bool {
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
pub fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// kernel.perf_event_paranoid; 2, the kernel's default, when it cannot be read.
pub fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The online CPUs, from /sys/devices/system/cpu/online.
pub fn online_cpus() -> anyhow::Result<Vec<u32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    crate::cpus::parse_list(s.trim())
}

const _: () = assert!(std::mem::size_of::<RawAttr>() == 136);

const SEPARATOR: &str = "------------------------------------------------------------";

/// The attr in perf's `-vv` layout: one `name value` line per non-zero field, so the two
/// tools' dumps can be diffed.
pub fn describe(a: &RawAttr) -> String {
    let mut out = format!("{SEPARATOR}\nperf_event_attr:\n");
    let mut line = |name: &str, value: String| {
        out.push_str(&format!("  {name:<32} {value}\n"));
    };
    let num = |v: u64| v.to_string();
    let hex = |v: u64| format!("{v:#x}");
    if a.type_ != 0 {
        line("type", num(a.type_.into()));
    }
    line("size", num(a.size.into()));
    if a.config != 0 {
        line("config", hex(a.config));
    }
    if a.sample_period != 0 {
        line("sample_period", num(a.sample_period));
    }
    if a.read_format != 0 {
        let names = [
            (PERF_FORMAT_TOTAL_TIME_ENABLED, "TOTAL_TIME_ENABLED"),
            (PERF_FORMAT_TOTAL_TIME_RUNNING, "TOTAL_TIME_RUNNING"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(bit, _)| a.read_format & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        line("read_format", set.join("|"));
    }
    let bits: [(u64, &str); 11] = [
        (FLAG_DISABLED, "disabled"),
        (FLAG_INHERIT, "inherit"),
        (FLAG_PINNED, "pinned"),
        (FLAG_EXCLUSIVE, "exclusive"),
        (FLAG_EXCLUDE_USER, "exclude_user"),
        (FLAG_EXCLUDE_KERNEL, "exclude_kernel"),
        (FLAG_EXCLUDE_HV, "exclude_hv"),
        (FLAG_EXCLUDE_IDLE, "exclude_idle"),
        (FLAG_ENABLE_ON_EXEC, "enable_on_exec"),
        (FLAG_EXCLUDE_HOST, "exclude_host"),
        (FLAG_EXCLUDE_GUEST, "exclude_guest"),
    ];
    let precise = (a.flags >> PRECISE_IP_SHIFT) & 3;
    for (bit, name) in bits {
        // perf prints precise_ip between enable_on_exec and exclude_host.
        if bit == FLAG_EXCLUDE_HOST && precise != 0 {
            line("precise_ip", num(precise));
        }
        if a.flags & bit != 0 {
            line(name, "1".into());
        }
    }
    if a.config1 != 0 {
        line("{ bp_addr, config1 }", hex(a.config1));
    }
    if a.config2 != 0 {
        line("{ bp_len, config2 }", hex(a.config2));
    }
    out.push_str(SEPARATOR);
    out.push('\n');
    out
}

/// perf's `-vv` line for one perf_event_open call.
pub fn describe_open(target: Target, group: i32, result: &io::Result<OwnedFd>) -> String {
    let (pid, cpu) = match target {
        Target::Cpu(c) => (-1, c as i64),
        Target::Task(p) => (p, -1),
    };
    let head = format!("sys_perf_event_open: pid {pid}  cpu {cpu}  group_fd {group}  flags {PERF_FLAG_FD_CLOEXEC:#x}");
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
        let attr = RawAttr::counting(&Attr {
            type_: 1,
            config: 1,
            exclude_guest: true,
            ..Attr::default()
        })
        .for_target(Target::Task(42), Role::Single);
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
        let attr = RawAttr::counting(&Attr {
            type_: 0,
            config: 0,
            exclude_kernel: true,
            exclude_hv: true,
            precise_ip: 3,
            config1: 0x3,
            ..Attr::default()
        });
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
        let a = RawAttr::counting(&Attr {
            exclude_user: true,
            exclude_host: true,
            precise_ip: 2,
            ..Attr::default()
        });
        assert_eq!(
            a.flags,
            FLAG_EXCLUDE_USER | FLAG_EXCLUDE_HOST | (2 << PRECISE_IP_SHIFT)
        );
        assert_eq!(a.size, 136);
        let cpu = a.for_target(Target::Cpu(0), Role::Single);
        assert_eq!(
            cpu.flags, a.flags,
            "per-CPU counters start enabled, not inherited"
        );
        let member = a.for_target(Target::Task(1), Role::Member);
        assert_eq!(member.flags, a.flags | FLAG_INHERIT);
    }
}
