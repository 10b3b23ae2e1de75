//! bperf serve's listener against clients that try to take it: idle connections that send
//! half a request, a client that never reads what it asked for, a request head of many
//! megabytes. serve runs as the .deb runs it at most (`ulimit -n 1024`), and must go on
//! answering everyone else. Needs root (serve loads its programs).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::http::{free_port, get};
use common::*;

/// bperf serve counting task-clock for every cgroup, its descriptors limited to
/// `nofile`, listening on a free port once it answers; killed when dropped.
struct Serve {
    child: Child,
    port: u16,
}

impl Serve {
    fn start(nofile: u64) -> Serve {
        let port = free_port();
        let mut cmd = bperf();
        cmd.args(["serve", "-e", "task-clock", "--all-cgroups"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::piped());
        let limit = libc::rlimit {
            rlim_cur: nofile,
            rlim_max: nofile,
        };
        // SAFETY: setrlimit(2) only, between fork and exec.
        unsafe {
            cmd.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        let serve = Serve {
            child: cmd.spawn().unwrap(),
            port,
        };
        wait_for_some(20, || serve.scrape()).expect("bperf serve never answered");
        serve
    }

    /// One scrape of /metrics, if answered 200 within 10 s.
    fn scrape(&self) -> Option<String> {
        get(self.port, "/metrics", "*/*")
            .filter(|(head, _)| {
                head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")
            })
            .map(|(_, body)| body)
    }

    fn connect(&self) -> TcpStream {
        TcpStream::connect(("127.0.0.1", self.port)).unwrap()
    }

    /// Stops serve with SIGTERM: it must exit 0. Its stderr.
    fn stop(mut self) -> String {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        assert_eq!(
            status.code(),
            Some(0),
            "bperf serve ended with {status}: {err}"
        );
        assert_eq!(bperf_programs(), Vec::<String>::new());
        err
    }

    /// The most memory serve has used (VmHWM), in KiB.
    fn peak_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Five hundred connections that send half a request and wait: serve, limited to 1,024
/// descriptors, goes on listening, answers a scrape once it has timed them out, and still
/// answers after more of them have come and gone.
#[test]
#[ignore = "needs root (make test runs it)"]
fn half_requests_do_not_stop_the_listener() {
    let _g = serial();
    let serve = Serve::start(1024);
    for _round in 0..2 {
        let idle: Vec<TcpStream> = (0..500)
            .filter_map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", serve.port)).ok()?;
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
                    .ok()?;
                Some(s)
            })
            .collect();
        assert!(idle.len() >= 400, "only {} connections made", idle.len());
        // Scraped while they wait: answered once serve has timed out the ones ahead.
        let answered = wait_for_some(40, || serve.scrape());
        assert!(
            answered.is_some(),
            "no scrape answered beside 500 half requests"
        );
        drop(idle);
    }
    assert!(serve.scrape().is_some(), "serve stopped answering");
    stop_having_said_out_of_descriptors_at_most_once(serve);
}

/// Stops serve, which must have said at most once that it ran out of descriptors.
fn stop_having_said_out_of_descriptors_at_most_once(serve: Serve) {
    let err = serve.stop();
    assert!(
        err.matches("cannot accept").count() <= 1,
        "said more than once:\n{err}"
    );
}

/// With fewer descriptors than connections asked for, serve runs out of them, says so
/// once, and accepts again when the clients have gone.
#[test]
#[ignore = "needs root (make test runs it)"]
fn running_out_of_descriptors_is_said_once_and_mended() {
    let _g = serial();
    let serve = Serve::start(64);
    // Fewer than the listen backlog, so that every connect returns at once.
    let idle: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", serve.port)).ok())
        .collect();
    assert!(!idle.is_empty());
    drop(idle);
    let answered = wait_for_some(40, || serve.scrape());
    assert!(answered.is_some(), "serve no longer answers");
    stop_having_said_out_of_descriptors_at_most_once(serve);
}

/// A client that asks for five thousand responses at once and reads none of them, through a small
/// receive buffer, holds only its own connection: another scrape is answered meanwhile,
/// long before that client's connection times out.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_client_that_never_reads_blocks_no_one() {
    let _g = serial();
    let serve = Serve::start(1024);
    let one = serve.scrape().unwrap().len();
    let mut stuck = socket_with_small_receive_buffer(serve.port);
    let asked = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: identity\r\n\r\n";
    stuck.write_all(asked.repeat(5000).as_bytes()).unwrap();
    // What the kernel can hold for it: its receive buffer and serve's send buffer, far
    // less than five thousand responses of `one` bytes, so that serve's writes to it wait.
    assert!(
        one * 5000 > 2 << 20,
        "responses of {one} bytes fit in the buffers"
    );
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut other = serve.connect();
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    other
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let read = other.read_to_string(&mut answer);
    assert!(
        read.is_ok() && answer.starts_with("HTTP/1.0 200"),
        "another scrape waited {:?} behind a client that reads nothing: {read:?}",
        started.elapsed()
    );
    drop(stuck);
    serve.stop();
}

/// A TCP connection to loopback `port` whose receive buffer is the smallest the kernel
/// allows, made before connecting so that the window it offers is small.
fn socket_with_small_receive_buffer(port: u16) -> TcpStream {
    use std::os::fd::{FromRawFd, RawFd};
    // SAFETY: a new socket; ownership passes to the TcpStream below.
    let fd: RawFd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0);
    // SAFETY: the TcpStream owns fd from here, and closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    let size: libc::c_int = 1024;
    // SAFETY: setsockopt(2) with a c_int option of its size.
    let set = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &size as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: connect(2) with a sockaddr_in of its size.
    let connected = unsafe {
        libc::connect(
            fd,
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(connected, 0, "{}", std::io::Error::last_os_error());
    stream
}

/// A request head of 64 MiB is refused with 431 once past 16 KiB, and serve's memory does
/// not grow with it.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_huge_request_head_is_refused_with_431() {
    let _g = serial();
    let serve = Serve::start(1024);
    let before = serve.peak_kib();
    let mut s = serve.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Long: ")
        .unwrap();
    let chunk = vec![b'a'; 1 << 20];
    // serve answers and closes before it has all: the writes then fail, as they should.
    for _ in 0..64 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let head = String::from_utf8_lossy(&answer);
    assert!(head.starts_with("HTTP/1.1 431"), "answered: {head:.200}");
    let grew = serve.peak_kib().saturating_sub(before);
    assert!(grew < 8 << 10, "serve's peak memory grew by {grew} KiB");
    assert!(serve.scrape().is_some(), "serve stopped answering");
    serve.stop();
}
