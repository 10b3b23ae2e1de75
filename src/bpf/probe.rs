//! What the running kernel lets bperf's BPF side use, asked of the kernel itself by
//! loading (and unloading) the smallest program or map that needs each feature: for
//! `bperf doctor`. Each answer is Ok(true or false), or the kernel's error when it would
//! not say (no CAP_BPF: EPERM).

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys::{self, bpf_insn, BPF_FUNC_loop, BPF_FUNC_perf_event_read_value};
use libbpf_rs::{MapType, ProgramType};

/// The answer to one probe: Err is the kernel's refusal to be asked, in words.
pub(crate) type Answer = Result<bool, String>;

/// What the BPF side can use here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpfFeatures {
    /// The bpf_loop helper (Linux 5.17): bperf's programs loop through it.
    pub bpf_loop: Answer,
    /// bpf_perf_event_read_value (4.15): the read helper every counter falls back to.
    pub read_value: Answer,
    /// fentry/fexit programs (BPF trampolines): `bperf stat -b` needs them.
    pub trampolines: Answer,
    /// BPF_MAP_TYPE_RINGBUF (5.8): bperf record sends its slices through one.
    pub ring_buffer: Answer,
    /// BPF_MAP_TYPE_TASK_STORAGE (5.11).
    pub task_storage: Answer,
}

/// Asks the running kernel. libbpf's probes take a refusal to load anything (no
/// CAP_BPF) for a missing feature, so a raw tracepoint program is loaded first: when
/// that is refused, every answer is that refusal.
pub fn probe() -> BpfFeatures {
    if let Err(e) = load_minimal(libbpf_sys::BPF_PROG_TYPE_RAW_TRACEPOINT, None) {
        return BpfFeatures {
            bpf_loop: Err(e.clone()),
            read_value: Err(e.clone()),
            trampolines: Err(e.clone()),
            ring_buffer: Err(e.clone()),
            task_storage: Err(e),
        };
    }
    let helper = |id| answer(ProgramType::RawTracepoint.is_helper_supported(id));
    BpfFeatures {
        bpf_loop: helper(BPF_FUNC_loop),
        read_value: helper(BPF_FUNC_perf_event_read_value),
        trampolines: trampolines(),
        ring_buffer: answer(MapType::RingBuf.is_supported()),
        task_storage: answer(MapType::TaskStorage.is_supported()),
    }
}

fn answer(r: libbpf_rs::Result<bool>) -> Answer {
    r.map_err(|e| e.to_string())
}

/// Kernel functions an fentry program can be loaded for; the first in the kernel's BTF
/// is used (bpf_fentry_test1 exists for this purpose where BPF's test runner is built).
const FENTRY_TARGETS: [&str; 3] = ["bpf_fentry_test1", "do_nanosleep", "do_sys_openat2"];

/// Loads `r0 = 0; exit` as an fentry program on a kernel function and attaches it: the
/// load is where a kernel without trampolines (or one that refuses them) says no.
fn trampolines() -> Answer {
    use libbpf_rs::btf::types::Func;
    let btf = libbpf_rs::btf::Btf::from_vmlinux().map_err(|e| format!("no kernel BTF: {e}"))?;
    let Some(id) = FENTRY_TARGETS
        .iter()
        .find_map(|name| btf.type_by_name::<Func>(name).map(|f| f.type_id()))
    else {
        return Ok(false);
    };
    match load_minimal(libbpf_sys::BPF_PROG_TYPE_TRACING, Some(u32::from(id))) {
        Ok(prog) => attach_fentry(&prog),
        Err(e) => Err(e),
    }
}

/// Loads `r0 = 0; exit` as a program of `prog_type` (an fentry program on the kernel
/// function of BTF id `fentry`, when given); the kernel's refusal in words.
fn load_minimal(
    prog_type: libbpf_sys::bpf_prog_type,
    fentry: Option<u32>,
) -> Result<OwnedFd, String> {
    let insns = [
        bpf_insn {
            code: 0xb7, // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 0
            ..Default::default()
        },
        bpf_insn {
            code: 0x95, // BPF_JMP | BPF_EXIT
            ..Default::default()
        },
    ];
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        ..Default::default()
    };
    if let Some(id) = fentry {
        opts.expected_attach_type = libbpf_sys::BPF_TRACE_FENTRY;
        opts.attach_btf_id = id;
    }
    let name = CString::new("bperf_probe").expect("no NUL");
    let license = CString::new("GPL").expect("no NUL");
    // SAFETY: valid instructions, names and options that outlive the call.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            prog_type,
            name.as_ptr(),
            license.as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(-fd).to_string());
    }
    // SAFETY: a new fd the call returned, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches a loaded fentry program and detaches it again at once.
fn attach_fentry(prog: &OwnedFd) -> Answer {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid program fd; no options.
    let link = unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            0,
            libbpf_sys::BPF_TRACE_FENTRY,
            std::ptr::null(),
        )
    };
    if link < 0 {
        return Err(std::io::Error::from_raw_os_error(-link).to_string());
    }
    // SAFETY: a new fd the call returned; closing it detaches the program.
    drop(unsafe { OwnedFd::from_raw_fd(link) });
    Ok(true)
}
