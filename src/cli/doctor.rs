//! `bperf doctor`'s options.

use clap::Args;

pub(super) const DOCTOR_ABOUT: &str = "\
Check what works on this machine and why not, one line per check with its fix: the \
kernel and its BTF; each BPF feature bperf uses (bpf_loop, the counters' read path, \
fentry/fexit trampolines, ring buffers, task storage); the PMUs and whether hardware \
counters count (none in a virtual machine without a virtual PMU) and the NMI watchdog \
that holds one; kernel.perf_event_paranoid and this process's capabilities; the cgroup \
layout (v2, v1 or hybrid), which hierarchy holds the perf_event controller, and a v1 \
hierarchy that holds it but is mounted nowhere; the BPF file system and tracefs; the \
container runtimes whose sockets answer.

Each line is the status (ok, warn, fail, or unknown where the kernel would not be asked \
without privileges), the check's name, what was found, and [fix: ...] where something \
can be done. The last line says whether bperf can count per cgroup here.

Exit status: 0 when bperf can count per cgroup here, 1 when it cannot.";

pub(super) const DOCTOR_EXAMPLES: &[&str] = &[
    "# What works here, and what to do about the rest",
    "bperf doctor",
    "# In a script: stop unless bperf can count per cgroup; list what is not ok",
    "bperf doctor -j > doctor.json || exit 1",
    "grep -v '\"status\":\"ok\"' doctor.json",
];

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// One JSON object per check, a line each: check, status (ok, warn, fail,
    /// unknown), detail, fix (null when none), needed (counting per cgroup needs it).
    #[arg(short = 'j', long = "json")]
    pub json: bool,
}
