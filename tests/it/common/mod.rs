//! Shared pieces of bperf's root integration tests: privilege gate, serialisation,
//! throwaway cgroups, the workload binary and the kernel's own accounting.

pub mod damage;
pub mod docker;
pub mod http;
pub mod parity;
pub mod perfetto;
pub mod recording;
pub mod v1;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// The lock every counting job on the machine shares (bench/run takes it too).
const COUNT_LOCK: &str = "/tmp/bperf-count.lock";

/// Held while a test counts: nothing else in this process, nor any other counting job
/// that takes the shared lock, runs meanwhile. Dropped, it unmounts the tracefs that
/// perf, bperf or the test mounted meanwhile (perf and bperf mount it where a tracepoint
/// is looked up and nothing has, and leave it): a test leaves the machine as it found it.
pub struct Serial {
    _tracefs: TracefsMounts,
    _local: MutexGuard<'static, ()>,
    _file: Option<fs::File>,
}

/// The tracefs mounts (and debugfs, which mounts tracefs below itself when looked in) that
/// were there when this was made; dropped, it unmounts those made since.
pub struct TracefsMounts(Vec<PathBuf>);

impl TracefsMounts {
    pub fn now() -> TracefsMounts {
        TracefsMounts(tracefs_mounts())
    }
}

impl Drop for TracefsMounts {
    fn drop(&mut self) {
        // The deepest first: tracefs below a debugfs mount goes before it.
        let mut made: Vec<PathBuf> = tracefs_mounts()
            .into_iter()
            .filter(|m| !self.0.contains(m))
            .collect();
        made.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for m in made {
            let _ = Command::new("umount").arg(&m).status();
        }
    }
}

/// The tracefs mounts when this test binary started, for its exit to unmount the others:
/// tests that hold no Serial (`bperf list`, perf's own runs) can make perf or bperf mount
/// tracefs too.
static TRACEFS_AT_START: std::sync::OnceLock<TracefsMounts> = std::sync::OnceLock::new();

extern "C" fn unmount_tracefs_made_since_start() {
    if let Some(at_start) = TRACEFS_AT_START.get() {
        drop(TracefsMounts(at_start.0.clone()));
    }
}

extern "C" fn keep_tracefs_as_found() {
    if TRACEFS_AT_START.set(TracefsMounts::now()).is_ok() {
        // SAFETY: atexit(3) with a function that takes and returns nothing; it runs once,
        // at exit, after the tests.
        unsafe { libc::atexit(unmount_tracefs_made_since_start) };
    }
}

/// Run when a test binary starts, before its tests: see TRACEFS_AT_START.
#[used]
#[link_section = ".init_array"]
static KEEP_TRACEFS_AS_FOUND: extern "C" fn() = keep_tracefs_as_found;

/// Where tracefs and debugfs are mounted in this mount namespace.
fn tracefs_mounts() -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    bperf::cgroup::Mount::parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.fstype == "tracefs" || m.fstype == "debugfs")
        .map(|m| m.point)
        .collect()
}

/// Mounts tracefs at /sys/kernel/tracing where no tracefs is mounted (a fresh machine), as
/// perf does: libbpf attaches `tracepoint/` programs through it. The Serial held unmounts
/// it at the test's end.
pub fn ensure_tracefs() {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounted = bperf::cgroup::Mount::parse_mountinfo(&text)
        .iter()
        .any(|m| m.fstype == "tracefs");
    if !mounted {
        let st = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
        assert!(
            st.is_ok_and(|s| s.success()),
            "cannot mount tracefs at /sys/kernel/tracing"
        );
    }
}

/// Counting tests measure each other's workloads on a two-core machine: one at a time,
/// and not beside the benchmark.
pub fn serial() -> Serial {
    let local = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(COUNT_LOCK)
        .ok();
    if let Some(f) = &file {
        use std::os::fd::AsRawFd;
        // SAFETY: flock(2) on a file we hold open; released when it is closed.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    }
    Serial {
        _tracefs: TracefsMounts::now(),
        _local: local,
        _file: file,
    }
}

/// The rule for tests that need root (load BPF, count, mount, become another user): each
/// is marked `#[ignore = "needs root (make test runs it)"]`, and no other test is
/// ignored. A run without root (plain `cargo test`) lists them as ignored, not passed;
/// make test, CI and the guests run as root with --include-ignored. This binary asked
/// to run the ignored tests (--ignored or --include-ignored) without root stops here,
/// before any test, saying why: they cannot run.
extern "C" fn require_root_for_ignored() {
    use std::io::Read;
    let mut cmdline = Vec::new();
    if let Ok(f) = fs::File::open("/proc/self/cmdline") {
        let _ = f.take(1 << 20).read_to_end(&mut cmdline);
    }
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let has = |flag: &str| args.contains(&flag.as_bytes());
    let runs_ignored = (has("--ignored") || has("--include-ignored")) && !has("--list");
    if runs_ignored && !bperf::sys::is_root() {
        eprintln!(
            "the ignored tests need root (CAP_BPF and CAP_PERFMON): run them as root, \
             as make test does"
        );
        std::process::exit(101);
    }
}

/// Run when the test binary starts, before its tests: see require_root_for_ignored.
#[used]
#[link_section = ".init_array"]
static REQUIRE_ROOT_FOR_IGNORED: extern "C" fn() = require_root_for_ignored;

/// A finished command's stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A finished command's stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The file at `path` under tests/fixtures.
pub fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// bperf stat -a -x, -I 200 with `args`, its lines on stderr, started and counting: its
/// first line came within `first_within`, and is returned. The rest come on the receiver.
pub fn start_stat(
    args: &[&str],
    first_within: Duration,
) -> (Child, std::sync::mpsc::Receiver<String>, String) {
    start_stat_with(bperf(), args, first_within)
}

/// start_stat() with bperf on CPU `cpu` only: away from the CPU a test measures, so
/// that bperf's own threads take none of its time.
pub fn start_stat_on_cpu(
    cpu: usize,
    args: &[&str],
    first_within: Duration,
) -> (Child, std::sync::mpsc::Receiver<String>, String) {
    let mut cmd = bperf();
    on_cpu(&mut cmd, cpu);
    start_stat_with(cmd, args, first_within)
}

/// Makes `cmd` run on CPU `cpu` only.
pub fn on_cpu(cmd: &mut Command, cpu: usize) {
    // SAFETY: the closure runs in the forked child before exec; it only calls pin_to,
    // which allocates nothing.
    unsafe { cmd.pre_exec(move || pin_to(cpu)) };
}

/// Moves the calling thread to CPU `cpu` only.
pub fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a cpu_set_t built on the stack, handed to sched_setaffinity(2).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        match libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

fn start_stat_with(
    mut cmd: Command,
    args: &[&str],
    first_within: Duration,
) -> (Child, std::sync::mpsc::Receiver<String>, String) {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .args(["stat", "-a", "-x,", "-I", "200"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = rx
        .recv_timeout(first_within)
        .expect("bperf printed nothing");
    (child, rx, first)
}

/// The value of `event` in the first CSV line of bperf's output (beside the workload's
/// reports) that counts it, for `cgroup` where one is given.
pub fn csv_value(err: &str, event: &str, cgroup: Option<&str>) -> f64 {
    let line = err
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f.get(2) == Some(&event) && cgroup.is_none_or(|c| f.get(3) == Some(&c))
        })
        .unwrap_or_else(|| panic!("no {event} for {cgroup:?} in {err}"));
    line.split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{line}"))
}

/// bperf, printing perf 6.12's output: the tests written against perf 6.12's shapes
/// (most of them) run it so; those of perf 7.2's set PERF_VERSION_ENV themselves.
pub fn bperf() -> Command {
    let mut c = Command::new(BPERF_EXE);
    c.env(PERF_VERSION_ENV, "6.12");
    c
}

/// The bperf executable cargo built for the tests.
pub const BPERF_EXE: &str = env!("CARGO_BIN_EXE_bperf");

/// The environment variable that chooses bperf stat's perf version.
pub const PERF_VERSION_ENV: &str = "BPERF_PERF_VERSION";

/// The test workload (examples/workload.rs), built by cargo test beside the test binary.
pub fn workload() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let w = dir.join("examples/workload");
    assert!(
        w.exists(),
        "{} missing: run through cargo test",
        w.display()
    );
    w
}

/// The mount of the cgroup hierarchy bperf counts (cgroup2 on the machines the tests
/// run on), found as bperf finds it.
pub fn cgroup2_mount() -> PathBuf {
    let h = bperf::sys::cgroupfs::discover().expect("a cgroup hierarchy");
    assert!(!h.v1, "the tests need perf_event on cgroup2");
    h.mount
}

/// A cgroup made for one test, under the cgroup2 mount; removed (with anything still in
/// it killed) when dropped, whatever way the test ends.
pub struct TestCgroup {
    pub path: PathBuf,
    /// Name relative to the mount, as bperf takes it.
    pub name: String,
}

impl TestCgroup {
    pub fn new(tag: &str) -> TestCgroup {
        let name = format!("bperf-test-{}-{tag}", std::process::id());
        let path = cgroup2_mount().join(&name);
        let _ = fs::create_dir(&path);
        assert!(path.is_dir(), "cannot create {}", path.display());
        TestCgroup { path, name }
    }

    pub fn child(&self, tag: &str) -> TestCgroup {
        let path = self.path.join(tag);
        fs::create_dir(&path).unwrap();
        TestCgroup {
            path,
            name: format!("{}/{tag}", self.name),
        }
    }

    /// A child named by the bytes `tag`, which need not be UTF-8; its `name` is as bperf
    /// prints it in a table or CSV, each byte outside printable ASCII (and the
    /// backslash) as `\xNN`. Removed, as every TestCgroup, with its parent too.
    pub fn child_bytes(&self, tag: &[u8]) -> TestCgroup {
        use std::os::unix::ffi::OsStrExt;
        let path = self.path.join(std::ffi::OsStr::from_bytes(tag));
        fs::create_dir(&path).unwrap();
        let shown: String = tag
            .iter()
            .map(|&b| match b {
                b' '..=b'~' if b != b'\\' => char::from(b).to_string(),
                _ => format!("\\x{b:02x}"),
            })
            .collect();
        TestCgroup {
            path,
            name: format!("{}/{shown}", self.name),
        }
    }

    pub fn procs(&self) -> String {
        self.path.join("cgroup.procs").display().to_string()
    }

    /// usage_usec from cpu.stat, in ns (the file exists without the cpu controller).
    pub fn usage_ns(&self) -> u64 {
        usage_ns_of(&self.path)
    }
}

/// usage_usec from the cpu.stat of the cgroup at `path`, in ns.
pub fn usage_ns_of(path: &Path) -> u64 {
    try_usage_ns_of(path).unwrap_or_else(|| panic!("no usage_usec in {}", path.display()))
}

/// usage_usec from the cpu.stat of the cgroup at `path`, in ns, if it is there.
pub fn try_usage_ns_of(path: &Path) -> Option<u64> {
    let s = fs::read_to_string(path.join("cpu.stat")).ok()?;
    let usec = s.lines().find_map(|l| l.strip_prefix("usage_usec "))?;
    Some(usec.trim().parse::<u64>().ok()? * 1000)
}

/// A task-clock counter the kernel keeps for thread `tid`: the clock bperf and perf
/// count (the scheduler's own run time, schedstat, leaves out what the hypervisor took
/// from the CPU, and lags by up to a tick while the thread runs).
pub struct TaskClock(std::os::fd::OwnedFd);

impl TaskClock {
    /// Counts thread `tid` from now.
    pub fn of(tid: u32) -> TaskClock {
        use bperf::sys::perf_event::{self, Role, Scope};
        let task_clock = bperf::event::Attr {
            type_: bperf::event::TYPE_SOFTWARE,
            config: 1, // PERF_COUNT_SW_TASK_CLOCK
            ..Default::default()
        };
        let attr = perf_event::counting_attr(&task_clock, Scope::Cpu(0), Role::Single);
        let fd = perf_event::open_with_fallback(attr, Scope::Thread(tid as i32), None, None)
            .unwrap_or_else(|e| panic!("task-clock of thread {tid}: {e}"));
        TaskClock(fd)
    }

    /// What it counted so far, ns.
    pub fn ns(&self) -> f64 {
        bperf::sys::perf_event::read(&self.0).unwrap().counter as f64
    }
}

fn remove(path: &Path) {
    if let Ok(rd) = fs::read_dir(path) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove(&e.path());
            }
        }
    }
    for _ in 0..100 {
        if let Ok(procs) = fs::read_to_string(path.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: plain kill(2).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if fs::remove_dir(path).is_ok() || !path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("warning: could not remove {}", path.display());
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

/// A temporary file path, removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(tag: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("bperf-test-{}-{tag}", std::process::id())))
    }
    pub fn read(&self) -> String {
        fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// The one temporary directory of the tests: made empty, and removed with everything in
/// it when dropped, whatever way the test ends.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// bperf-test-PID-TAG in the temporary directory.
    pub fn new(tag: &str) -> TempDir {
        TempDir::at(format!("bperf-test-{}-{tag}", std::process::id()))
    }

    /// NAME-PID in the temporary directory: for a test whose output shows the path and
    /// is compared with one recorded under that name (tests/it/shapes.rs's script).
    pub fn named(name: &str) -> TempDir {
        TempDir::at(format!("{name}-{}", std::process::id()))
    }

    fn at(name: String) -> TempDir {
        let dir = std::env::temp_dir().join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names in it, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Polls `f` every 50 ms until it gives something, for up to `secs` seconds.
pub fn wait_for_some<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `done` every 50 ms until it holds, for up to `secs` seconds: whether it did.
pub fn wait_for(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    wait_for_some(secs, || done().then_some(())).is_some()
}

/// Runs a script that boots an emulated machine (tests/vm): its output, or None where the
/// machine cannot run here (the script exits 77, saying why), which fails the test
/// instead when BPERF_REQUIRE_VM is set (CI).
pub fn run_vm(cmd: &mut Command) -> Option<Output> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if out.status.code() != Some(77) {
        return Some(out);
    }
    assert!(
        std::env::var_os("BPERF_REQUIRE_VM").is_none(),
        "BPERF_REQUIRE_VM is set but the emulated machine cannot run: {}",
        stderr(&out)
    );
    eprintln!("skipped: {}", stderr(&out).trim());
    None
}

/// Writes `lines` (`GUEST\tMODULE\tSECONDS`) as target/test-times/NAME.tsv, which
/// scripts/test-times reads: how long an emulated machine took, and its parts.
pub fn write_test_times(name: &str, lines: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-times");
    let written =
        fs::create_dir_all(&dir).and_then(|()| fs::write(dir.join(format!("{name}.tsv")), lines));
    if let Err(e) = written {
        eprintln!("cannot write the times of {name}: {e}");
    }
}

/// Runs a command and returns its output, failing the test with everything it printed.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One CSV line of bperf's -x output (`value,unit,event,cgroup,run,pct,metric,unit`).
#[derive(Debug, Clone)]
pub struct CsvLine {
    pub time: Option<f64>,
    pub value: Option<f64>,
    pub raw_value: String,
    pub event: String,
    pub cgroup: String,
    /// The counter's running time in ns (the field after the cgroup).
    pub run_time: Option<f64>,
}

/// Parses -x, output with --for-each-cgroup (cgroup column present); `interval` when -I.
pub fn parse_csv(text: &str, interval: bool) -> Vec<CsvLine> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            let time = if interval {
                Some(f.remove(0).trim().parse::<f64>().unwrap())
            } else {
                None
            };
            CsvLine {
                time,
                value: f[0].parse::<f64>().ok(),
                raw_value: f[0].to_string(),
                event: f[2].to_string(),
                cgroup: f.get(3).unwrap_or(&"").to_string(),
                run_time: f.get(4).and_then(|v| v.parse::<f64>().ok()),
            }
        })
        .collect()
}

/// Value of `event` for `cgroup` in parsed CSV (summing interval lines).
pub fn value(lines: &[CsvLine], event: &str, cgroup: &str) -> f64 {
    let vals: Vec<f64> = lines
        .iter()
        .filter(|l| l.event == event && l.cgroup == cgroup)
        .map(|l| l.value.unwrap_or(0.0))
        .collect();
    assert!(
        !vals.is_empty(),
        "no {event} line for {cgroup} in {lines:?}"
    );
    vals.iter().sum()
}

/// Time the scheduler's accounting (cpu.stat) leaves out but the perf clocks count, over
/// all CPUs so far, in ns: interrupts, softirqs and time the host stole from this VM
/// (/proc/stat, in USER_HZ ticks of 10 ms).
pub fn unaccounted_ns() -> f64 {
    let stat = fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().find(|l| l.starts_with("cpu ")).unwrap();
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    (f[5] + f[6] + f[7]) * 1e7
}

/// Whether the tests run in a machine QEMU emulates instruction by instruction (TCG):
/// tests/vm/run-x86 sets BPERF_EMULATED=1 in its guests. There a system call, a context
/// switch or a process's exit costs tens of times what it costs on a real machine, and
/// the few instructions between two clock readings that a real machine does in
/// nanoseconds take microseconds.
pub fn emulated() -> bool {
    std::env::var_os("BPERF_EMULATED").is_some_and(|v| v == "1")
}

/// How far (%) a time bperf counted may be from the kernel's own accounting of the same
/// tasks: 2%, and TCG_CLOCK_TOLERANCE under emulation.
pub fn clock_tolerance() -> f64 {
    if emulated() {
        TCG_CLOCK_TOLERANCE
    } else {
        2.0
    }
}

/// Under emulation, bperf's clocks and cpu.stat part by more than on a real machine: each
/// places a switch at its own instant (cpu.stat where the scheduler reads its clock,
/// bperf's read helper at the sched_switch tracepoint, after the outgoing task was
/// dequeued and the next one picked), and what lies between takes microseconds there:
/// with every counter read through the read helper, a ping-pong's cgroup over 20,000
/// round trips counts -0.9% to +4.0% of cpu.stat. When the host is busy, the guest's
/// clocks part further while its thread waits for a host CPU: up to 8% over the tasks'
/// own accounts.
pub const TCG_CLOCK_TOLERANCE: f64 = 10.0;

/// How far (%) a cgroup's run-queue wait or preemptions, as bperf counts them, may be
/// from what its tasks report of themselves (schedstat's run_delay, getrusage's
/// involuntary switches): 2%, and 10% under emulation. The tasks report just before
/// they exit, and under TCG their exit takes tens of ms in which they still wait and
/// are preempted; and a wait's ends are timed at the tracepoints, which there come
/// microseconds after the scheduler's own clock readings, on each of tens of thousands
/// of a ping-pong's waits (5.10 guest: ping-pong -7.5%, busy loops +2.5% and +6% of
/// preemptions).
pub fn runq_tolerance() -> f64 {
    if emulated() {
        10.0
    } else {
        2.0
    }
}

/// Whether a time bperf counted for a cgroup (ns) agrees with the kernel's accounting:
/// within clock_tolerance() of its processes' own task-clock `own`, or of its cpu.stat
/// time `kernel` plus what cpu.stat left out meanwhile (`unaccounted`, see
/// unaccounted_ns). Each misses time the other counts. A task's own task-clock stops
/// between its switch out and the next task's switch in, which a cgroup's accounting
/// charges. cpu.stat leaves out interrupt time and the time the host steals from this
/// VM's CPUs, which the perf clocks include.
pub fn agrees_with_kernel(ours: f64, own: f64, kernel: f64, unaccounted: f64) -> bool {
    within(ours, own, clock_tolerance()) || agrees_with_cpu_stat(ours, kernel, unaccounted)
}

/// The cpu.stat half of agrees_with_kernel.
pub fn agrees_with_cpu_stat(ours: f64, kernel: f64, unaccounted: f64) -> bool {
    let pct = clock_tolerance() / 100.0;
    ours >= kernel * (1.0 - pct) && ours <= kernel * (1.0 + pct) + unaccounted
}

/// How far apart cpu.stat and a perf clock read at the switch tracepoint may place one
/// context switch: the scheduler starts and ends a task's time where it reads its
/// clock, bperf where the tracepoint fires: on this kind of machine (GenuineIntel-6-CF)
/// bperf counts 63 to 80 ns a switch below cpu.stat over 20,000 pipe round trips.
pub const SWITCH_SKEW_NS: f64 = 100.0;

/// agrees_with_cpu_stat for a cgroup whose tasks switched `switches` times: below
/// cpu.stat by up to SWITCH_SKEW_NS a switch as well.
pub fn agrees_with_cpu_stat_over_switches(
    ours: f64,
    kernel: f64,
    unaccounted: f64,
    switches: f64,
) -> bool {
    let pct = clock_tolerance() / 100.0;
    let low = (kernel - switches * SWITCH_SKEW_NS) * (1.0 - pct);
    ours >= low && ours <= kernel * (1.0 + pct) + unaccounted
}

/// What cpu.stat left out since `before` (an unaccounted_ns() reading), plus one 10 ms
/// tick for /proc/stat's rounding: how far above cpu.stat a perf clock may read.
pub fn unaccounted_since(before: f64) -> f64 {
    unaccounted_ns() - before + 1e7
}

/// The number after `name=` in one workload report line.
pub fn report_field(report: &str, name: &str) -> f64 {
    report
        .split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {report}"))
}

/// The workload with `args`, in cgroup `cg` and pinned to `cpu` from before its exec.
pub fn pinned(cg: &TestCgroup, cpu: usize, args: &[&str]) -> Child {
    let procs = cg.procs();
    let mut cmd = Command::new(workload());
    cmd.args(args).stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec; it only calls
    // sched_setaffinity(2) and writes a file, and allocates nothing the parent shares.
    // Pinned before it joins the cgroup, so that nothing of the cgroup runs (or waits)
    // on another CPU.
    unsafe {
        cmd.pre_exec(move || {
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and
            // sched_setaffinity only write inside it.
            let set = {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                set
            };
            // SAFETY: pins this (child) process to the set built above.
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            std::fs::write(&procs, "0")
        })
    };
    cmd.spawn().expect("starting the workload")
}

/// Waits (up to 30 s) until process `pid` is stopped (state T in /proc/PID/stat), as
/// the workload stops itself when told to.
pub fn wait_until_stopped(pid: u32) {
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(") ")?.1.starts_with('T')))
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !stopped() {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} never stopped itself"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Sums the kernel's task-clock (ns) that the workload processes of the given modes
/// report, each since it joined its cgroup.
pub fn own_task_clock_ns(stderr: &str, modes: &[&str]) -> f64 {
    own_sum(stderr, modes, "task_clock_ns")
}

/// Sums the workload reports' `field=` over the processes in `modes`.
pub fn own_sum(stderr: &str, modes: &[&str], field: &str) -> f64 {
    stderr
        .lines()
        .filter(|l| l.starts_with("pid="))
        .filter(|r| modes.iter().any(|m| r.contains(&format!(" mode={m} "))))
        .map(|r| report_field(r, field))
        .sum()
}

/// The most "CPUs utilized" a run that counts within its own time may show: the
/// CPUs, as printed to three decimals; under emulation, where the guest's clocks part,
/// TCG_CLOCK_TOLERANCE more.
pub fn most_cpus_utilized() -> f64 {
    let cpus = bperf::sys::online_cpus().unwrap().len() as f64;
    match emulated() {
        true => cpus * (1.0 + TCG_CLOCK_TOLERANCE / 100.0),
        false => cpus + 0.0005,
    }
}

/// Sums `cs=` and `faults=` over the workload's per-process reports.
pub fn rusage_totals(stderr: &str) -> (u64, u64) {
    let mut cs = 0;
    let mut faults = 0;
    for l in stderr.lines().filter(|l| l.starts_with("pid=")) {
        for f in l.split_whitespace() {
            if let Some(v) = f.strip_prefix("cs=") {
                cs += v.parse::<u64>().unwrap();
            }
            if let Some(v) = f.strip_prefix("faults=") {
                faults += v.parse::<u64>().unwrap();
            }
        }
    }
    (cs, faults)
}

/// Names of loaded BPF programs that are bperf's, once the kernel has finished freeing
/// those of processes that just exited (it frees them asynchronously, after an RCU grace
/// period): waits up to two seconds for the list to empty.
pub fn bperf_programs() -> Vec<String> {
    let mut left = loaded_bperf_programs();
    for _ in 0..40 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        left = loaded_bperf_programs();
    }
    left
}

/// Names of loaded BPF programs that are bperf's, right now.
pub fn loaded_bperf_programs() -> Vec<String> {
    libbpf_rs::query::ProgInfoIter::default()
        .map(|p| p.name.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bperf_"))
        .collect()
}

/// The task-clock (ms) and elapsed seconds of a table bperf printed.
pub fn table_clock_and_elapsed(err: &str) -> (f64, f64) {
    let clock = err
        .lines()
        .find(|l| l.contains("msec task-clock"))
        .map(table_count);
    let elapsed = err
        .lines()
        .find(|l| l.contains("seconds time elapsed"))
        .map(table_count);
    (clock.unwrap_or_else(|| panic!("{err}")), elapsed.unwrap())
}

/// The number a table line starts with, without its thousands separators.
pub fn table_count(line: &str) -> f64 {
    line.split_whitespace()
        .next()
        .unwrap()
        .replace(',', "")
        .parse::<f64>()
        .unwrap()
}

pub fn within(actual: f64, expected: f64, pct: f64) -> bool {
    (actual - expected).abs() <= expected.abs() * pct / 100.0
}

/// The peak resident set of `cmd`, in kB (its rusage after it ended), and its output.
// The child is reaped by wait4, which std's Child does not offer.
#[allow(clippy::zombie_processes)]
pub fn peak_rss_kb(cmd: &mut std::process::Command) -> (i64, std::process::ExitStatus, String) {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as i32;
    // SAFETY: plain wait4(2) of our own child, which nothing else waits for.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid);
    let status = std::os::unix::process::ExitStatusExt::from_raw(status);
    (usage.ru_maxrss, status, err)
}

/// `program args` run inside `cg` as the root of a cgroup namespace, with cgroup2
/// mounted afresh over the mount bperf counts on (a private mount namespace): it sees
/// `cg`'s subtree as the whole tree, a host with nothing else on it. The namespaces end
/// with the process; nothing is mounted outside it.
pub fn in_cgroup_namespace(cg: &TestCgroup, program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        r#"echo $$ > "$1" && shift && exec unshare --cgroup --mount --propagation private sh -c 'umount -l "$0" && mount -t cgroup2 cgroup2 "$0" && exec "$@"' "$@""#,
        "sh",
    ])
    .arg(cg.procs())
    .arg(cgroup2_mount())
    .arg(program)
    .args(args);
    cmd
}

/// The uid and gid of `nobody`: the local user of the planted-file tests.
pub const NOBODY: u32 = 65534;

/// Runs `cmd` with `args` as `nobody` (uid and gid 65534, no supplementary groups): a
/// local user planting files for root to write. Its success.
pub fn as_nobody(cmd: &str, args: &[&std::ffi::OsStr]) -> bool {
    let id = NOBODY.to_string();
    Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"])
        .arg(cmd)
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// A sticky directory every user may write (as /tmp is), in the tests' temporary
/// directory, removed with what is in it when dropped.
pub fn sticky_dir(tag: &str) -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new(tag);
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}
