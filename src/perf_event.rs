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
            flags: bit(a.exclude_user, FLAG_EXCLUDE_USER)
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

/// Opens a counting event on one CPU for every task (pid = -1), enabled at once.
/// `group` is the leader's fd for a group member.
pub fn open_cpu(attr: &RawAttr, cpu: u32, group: Option<&OwnedFd>) -> io::Result<OwnedFd> {
    let group_fd = group.map_or(-1, |g| g.as_raw_fd());
    // SAFETY: attr points to a live, correctly sized perf_event_attr.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const RawAttr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
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
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) | Some(libc::EINVAL)
            | Some(libc::ENXIO)
    )
}

/// Does this error mean "you are not allowed to"?
pub fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// The online CPUs, from /sys/devices/system/cpu/online.
pub fn online_cpus() -> anyhow::Result<Vec<u32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    crate::cpus::parse_list(s.trim())
}

const _: () = assert!(std::mem::size_of::<RawAttr>() == 136);
