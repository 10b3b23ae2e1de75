"""What the benchmark scripts (bench/run, bench/record, bench/serve, bench/sharing) share:
messages and small statistics, the counting lock, child processes that end with the
run, the run's cgroups and the session that removes them, and the tools they build,
find and copy.

Each script imports it as `common`: Python puts a script's own directory (bench/, links
resolved) first on the module path, so the import works from any working directory.
"""

import ctypes
import fcntl
import struct
import hashlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The lock every counting job on this machine takes (the tests too: tests/it/common).
LOCK_PATH = "/tmp/bperf-count.lock"
# The running script, as messages name it: bench/run, bench/record, ...
PROG = "bench/" + os.path.basename(sys.argv[0])


class Interrupted(Exception):
    pass


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- small helpers

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def quartiles(xs):
    xs = sorted(x for x in xs if x is not None)
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def kv(text):
    """The `name=number` lines of a helper's output (bench/pingpong.c, bench/rusage.c)."""
    out = {}
    for line in text.splitlines():
        k, eq, v = line.partition("=")
        if eq:
            try:
                out[k.strip()] = float(v)
            except ValueError:
                pass
    return out


def sh(cmd, **kw):
    """A command's standard output, stripped; "" if it cannot be run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, **kw).stdout.strip()
    except OSError:
        return ""


def rss_kb(pids):
    """The resident memory of the processes `pids`, summed (those gone count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


class CountLock:
    """flock(2) on the lock all counting work on this machine shares: nothing else counts
    while it is held. `waited` sums the time spent waiting for it."""

    waited = 0.0

    def __enter__(self):
        self.fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o666)
        t = time.monotonic()
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        CountLock.waited += time.monotonic() - t
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        return False


# ---------------------------------------------------------------- processes

class Procs:
    """Every child runs in its own process group so that cleanup can end it and what it
    started (perf's and bperf's workload), whatever signal reached us."""

    live = {}

    @classmethod
    def start(cls, cmd, stdout, stderr):
        p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        cls.live[p.pid] = p
        return p

    @classmethod
    def wait(cls, p, timeout):
        """Blocking wait4 (no polling while something is measured); a timer ends the
        group if it overruns. Returns (returncode, rusage, timed_out)."""
        hit = []

        def overrun():
            hit.append(1)
            cls.killpg(p.pid)

        timer = threading.Timer(timeout, overrun)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        cls.live.pop(p.pid, None)
        return p.returncode, ru, bool(hit)

    @classmethod
    def run(cls, cmd, tmp, tag, timeout=180, meanwhile=None):
        """Runs cmd to its end, its stdout and stderr in files in tmp (named by tag).
        Returns a dict: rc, wall (seconds), ru (rusage), stdout, stderr, timed_out, and
        meanwhile: what meanwhile(p) returned, called once cmd has started."""
        paths = [os.path.join(tmp, tag + ".out"), os.path.join(tmp, tag + ".err")]
        with open(paths[0], "w") as out, open(paths[1], "w") as err:
            t0 = time.monotonic()
            p = cls.start(cmd, out, err)
            seen = meanwhile(p) if meanwhile else None
            rc, ru, timed_out = cls.wait(p, timeout)
            wall = time.monotonic() - t0
        texts = []
        for path in paths:
            with open(path) as f:
                texts.append(f.read())
            os.unlink(path)
        return {"rc": rc, "wall": wall, "ru": ru, "stdout": texts[0], "stderr": texts[1],
                "timed_out": timed_out, "meanwhile": seen}

    @staticmethod
    def killpg(pid):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return
            time.sleep(0.5)

    @classmethod
    def kill_all(cls):
        for pid, p in list(cls.live.items()):
            cls.killpg(pid)
            try:
                p.wait(timeout=5)
            except Exception:
                pass
            cls.live.pop(pid, None)


# ---------------------------------------------------------------- cgroups

def cgroup_mount():
    """The cgroup2 mount, from /proc/self/mountinfo."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            if parts[sep + 1] == "cgroup2":
                return parts[4]
    sys.exit(f"{PROG}: no cgroup2 mount")


class Cgroups:
    """The run's cgroups under `mount`, one for each of `keys` (numbers or letters),
    named bperf-bench-PID-KEY."""

    def __init__(self, mount, keys):
        self.mount = mount
        self.names = {k: f"bperf-bench-{os.getpid()}-{k}" for k in keys}
        self.made = []

    def remove_stale(self):
        """Cgroups of benchmark runs that no longer exist (killed with SIGKILL)."""
        for name in os.listdir(self.mount):
            m = re.fullmatch(r"bperf-bench-(\d+)-\w+", name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                self.remove_one(os.path.join(self.mount, name))

    def create(self):
        for name in self.names.values():
            path = os.path.join(self.mount, name)
            os.mkdir(path)
            self.made.append(path)

    def path(self, k):
        return os.path.join(self.mount, self.names[k])

    def procs(self, k):
        return os.path.join(self.path(k), "cgroup.procs")

    def usage_us(self, k):
        with open(os.path.join(self.path(k), "cpu.stat")) as f:
            for line in f:
                name, v = line.split()
                if name == "usage_usec":
                    return int(v)
        return None

    @staticmethod
    def remove_one(path):
        for _ in range(50):
            try:
                os.rmdir(path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                try:  # still has tasks: end them (cgroup.kill, Linux 5.14+)
                    with open(os.path.join(path, "cgroup.kill"), "w") as f:
                        f.write("1")
                except OSError:
                    pass
                time.sleep(0.1)
        log(f"{PROG}: could not remove {path}")
        return False

    def remove_all(self):
        ok = all([self.remove_one(p) for p in reversed(self.made)])
        self.made = []
        return ok


class Session:
    """One run's cgroups `cg` (created by the caller) and temporary directory `tmp`, and
    their cleanup on every way out: signals become Interrupted, and on leaving, every
    child's process group is ended, every cgroup and the directory removed. `clean` says
    whether the cgroups went."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, cg):
        self.cg = cg
        self.clean = True

    def __enter__(self):
        for sig in self.SIGNALS:
            signal.signal(sig, on_signal)
        self.tmp = tempfile.mkdtemp(prefix="bperf-" + PROG.replace("/", "-") + "-")
        return self

    def __exit__(self, *exc):
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # let cleanup finish
        Procs.kill_all()
        self.clean = self.cg.remove_all()
        shutil.rmtree(self.tmp, ignore_errors=True)
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        return False


# ---------------------------------------------------------------- tools

def build_helper(name):
    """bench/NAME.c -> bench/.build/NAME (cc -O2)."""
    src = os.path.join(HERE, name + ".c")
    out_dir = os.path.join(HERE, ".build")
    exe = os.path.join(out_dir, name)
    os.makedirs(out_dir, exist_ok=True)
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O2", "-Wall", "-o", exe, src], check=True)
    return exe


def find_bperf(build=False):
    """$BPERF, else target/release/bperf; with `build`, built first (cargo build
    --release) if it is missing."""
    bperf = os.environ.get("BPERF", os.path.join(ROOT, "target/release/bperf"))
    if build and not os.access(bperf, os.X_OK) and "BPERF" not in os.environ:
        log(f"{PROG}: no target/release/bperf: cargo build --release")
        subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True)
    if not os.access(bperf, os.X_OK):
        sys.exit(f"{PROG}: {bperf} not found: build it first (cargo build --release)")
    return bperf


def snapshot(src, tmp):
    """A copy of bperf in tmp, to measure one binary for the whole run even if the tree
    is rebuilt meanwhile: (its path, the sha256 of its bytes)."""
    with open(src, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    dst = os.path.join(tmp, "bperf")
    shutil.copy2(src, dst)
    return dst, digest


# ---------------------------------------------------------------- bpf(2)

NR_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "loongarch64": 280}
BPF_PROG_LOAD, BPF_RAW_TRACEPOINT_OPEN, BPF_ENABLE_STATS = 5, 17, 32


def bpf_syscall(cmd, attr):
    """bpf(2) with the attribute buffer `attr`; returns the fd it gives."""
    nr = NR_BPF.get(os.uname().machine)
    if nr is None:
        raise OSError(f"bpf(2) syscall number for {os.uname().machine} unknown")
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(nr, cmd, attr, len(attr))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return fd


class EmptyProgram:
    """`r0 = 0; exit` as a raw tracepoint program on sched_switch, while in the `with`:
    what the hook alone costs any tool that counts from it."""

    BPF_PROG_TYPE_RAW_TRACEPOINT = 17

    def __enter__(self):
        insns = struct.pack("<BBhi", 0xB7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)
        ibuf = ctypes.create_string_buffer(insns, len(insns))
        lic = ctypes.create_string_buffer(b"GPL")
        attr = ctypes.create_string_buffer(128)
        # prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
        # kern_version, prog_flags, prog_name
        struct.pack_into("<IIQQIIQII16s", attr, 0, self.BPF_PROG_TYPE_RAW_TRACEPOINT, 2,
                         ctypes.addressof(ibuf), ctypes.addressof(lic), 0, 0, 0, 0, 0,
                         b"bench_empty")
        self.fds = [bpf_syscall(BPF_PROG_LOAD, attr)]
        name = ctypes.create_string_buffer(b"sched_switch")
        attr = ctypes.create_string_buffer(128)
        struct.pack_into("<QI", attr, 0, ctypes.addressof(name), self.fds[0])
        try:
            self.fds.append(bpf_syscall(BPF_RAW_TRACEPOINT_OPEN, attr))
        except OSError:
            os.close(self.fds[0])
            raise
        return self

    def __exit__(self, *exc):
        for fd in self.fds:  # closing both detaches and frees it
            os.close(fd)
        return False
