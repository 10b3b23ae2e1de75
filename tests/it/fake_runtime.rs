//! Container names from a fake runtime: a unix socket that speaks Docker's Engine API
//! (`GET /containers/json`), given to bperf through DOCKER_HOST, and container cgroups
//! the test makes (a 64-hex-digit id below a test cgroup is a container to bperf, of a
//! runtime its path does not name). The fake gives names no real runtime would refuse
//! to pass on (control characters, separators, quotes), answers late, or never.
//!
//! Root only (bperf counts). Nothing of Docker's is needed.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{serial, TempDir, TestCgroup};

/// How the fake runtime answers.
#[derive(Clone)]
enum Mode {
    /// Takes the connection and never answers.
    Silent,
    /// Answers this list of containers (JSON) after this long.
    List(String, Duration),
}

/// A fake Engine API socket, serving from a thread of its own until dropped.
struct FakeRuntime {
    _dir: TempDir,
    path: std::path::PathBuf,
    mode: Arc<Mutex<Mode>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeRuntime {
    fn new(mode: Mode) -> FakeRuntime {
        let dir = TempDir::new("fake-runtime");
        let path = dir.join("docker.sock");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let mode = Arc::new(Mutex::new(mode));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (mode.clone(), stop.clone());
        let thread = std::thread::spawn(move || serve(listener, &m, &s));
        FakeRuntime {
            _dir: dir,
            path,
            mode,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// DOCKER_HOST for bperf, naming this socket.
    fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts connections until `stop`: each answered on a thread of its own, as `mode`
/// says when it comes. Silent connections are held open until `stop`.
fn serve(listener: UnixListener, mode: &Mutex<Mode>, stop: &Arc<AtomicBool>) {
    let mut held = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok((conn, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        conn.set_nonblocking(false).unwrap();
        match mode.lock().unwrap().clone() {
            Mode::Silent => held.push(conn),
            Mode::List(body, delay) => {
                std::thread::spawn(move || answer(conn, &body, delay));
            }
        }
    }
}

/// Reads the request's head, waits `delay`, and answers `body` as dockerd does.
fn answer(mut conn: UnixStream, body: &str, delay: Duration) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && conn.read_exact(&mut byte).is_ok() {
        head.push(byte[0]);
    }
    std::thread::sleep(delay);
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// A container id made of `digit`.
fn fake_id(digit: char) -> String {
    std::iter::repeat_n(digit, 64).collect()
}

/// `GET /containers/json`'s answer for containers (id, name, image, labels).
fn listing(containers: &[(&str, &str, &str, serde_json::Value)]) -> String {
    let entries: Vec<serde_json::Value> = containers
        .iter()
        .map(|(id, name, image, labels)| {
            serde_json::json!({
                "Id": id,
                "Names": [format!("/{name}")],
                "Image": image,
                "State": "running",
                "Labels": labels,
            })
        })
        .collect();
    serde_json::Value::Array(entries).to_string()
}

/// A bperf child killed and reaped however the test ends.
struct Bperf(Child);

impl Drop for Bperf {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The characters of `text` that would reach a terminal as control characters: C0
/// (but the line ends), DEL and C1.
fn controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| c != '\n' && c.is_control())
        .collect()
}

/// A container name with a newline, a comma, a quote, ESC (a terminal's clear-screen
/// sequence), NUL, a backslash followed by what reads as an escape, DEL and C1's CSI.
const ODD: &str = "we\nb,x\"y\u{1b}[2Jz\0w\\x1b\u{7f}\u{9b}";

/// ODD as the table shows it: control characters and the backslash escaped.
const ODD_TABLE: &str = r#"we\nb,x"y\x1b[2Jz\x00w\\x1b\x7f\x9b"#;

/// ODD as a CSV field with `,` between fields: the separator and the quote escaped too.
const ODD_CSV: &str = r#"we\nb\x2cx\x22y\x1b[2Jz\x00w\\x1b\x7f\x9b"#;

/// bperf stat's output (stderr) over the fake runtime's containers, with `args`.
fn stat_with(runtime: &FakeRuntime, args: &[&str]) -> String {
    let out = common::bperf()
        .env("DOCKER_HOST", runtime.docker_host())
        .args(["stat", "-a", "-e", "task-clock", "--for-each-container"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).expect("bperf wrote UTF-8");
    assert!(out.status.success(), "{err}");
    err
}

/// The lines of `text` about cgroup `name`.
fn lines_about<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    text.lines().filter(|l| l.contains(name)).collect()
}

/// A runtime's names are written escaped, in every format of stat's: no control
/// character reaches the output, every CSV line has as many fields as the others, and
/// the JSON holds the names exactly (JSON's own escapes, which a JSON reader undoes).
#[test]
#[ignore = "needs root (make test runs it)"]
fn names_with_control_characters_and_separators_are_escaped_in_every_format() {
    let _g = serial();
    let parent = TestCgroup::new("odd");
    let (a, b) = (fake_id('a'), fake_id('b'));
    let (cg_a, cg_b) = (parent.child(&a), parent.child(&b));
    let kube = serde_json::json!({
        "io.kubernetes.pod.name": "p\u{1b}od,",
        "io.kubernetes.pod.namespace": "n\ns",
        "io.kubernetes.container.name": "c\0\"",
    });
    let list = listing(&[
        (&a, ODD, "img", serde_json::json!({})),
        (&b, "unused", "img", kube),
    ]);
    let runtime = FakeRuntime::new(Mode::List(list, Duration::ZERO));

    let table = stat_with(&runtime, &["--", "sleep", "0.3"]);
    assert_eq!(controls(&table), Vec::<char>::new(), "{table:?}");
    let row = lines_about(&table, &cg_a.name);
    assert_eq!(row.len(), 1, "{table}");
    assert!(row[0].contains(ODD_TABLE), "{table}");
    let row = lines_about(&table, &cg_b.name);
    assert!(row[0].contains(r"n\ns/p\x1bod,/c\x00"), "{table}");

    let csv = stat_with(&runtime, &["-x", ",", "-I", "200", "--interval-count", "2"]);
    assert_eq!(controls(&csv), Vec::<char>::new(), "{csv:?}");
    let fields: Vec<usize> = csv.lines().map(|l| l.split(',').count()).collect();
    assert!(fields.iter().all(|&n| n == fields[0]), "{fields:?}\n{csv}");
    let rows = lines_about(&csv, &cg_a.name);
    assert_eq!(rows.len(), 2, "{csv}");
    for row in rows {
        let field: Vec<&str> = row.split(',').collect();
        let at = field.iter().position(|f| f.ends_with(&a)).unwrap();
        assert_eq!(field[at + 1], ODD_CSV, "{row}");
    }
    let rows = lines_about(&csv, &cg_b.name);
    assert!(rows[0].contains(r",n\ns/p\x1bod\x2c/c\x00\x22,"), "{csv}");

    let json = stat_with(&runtime, &["-j", "-I", "200", "--interval-count", "2"]);
    assert_eq!(controls(&json), Vec::<char>::new(), "{json:?}");
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let container_of = |cg: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r["cgroup"].as_str().is_some_and(|c| c.ends_with(cg)))
            .map(|r| r["container"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(container_of(&a), [ODD, ODD], "{json}");
    assert_eq!(container_of(&b), ["n\ns/p\u{1b}od,/c\0\""; 2], "{json}");
}

/// GET /metrics from 127.0.0.1:`port`: the body, and how long the answer took.
fn timed_scrape(port: u16) -> (String, Duration) {
    let start = Instant::now();
    let (_, body) = common::http::get(port, "/metrics", "text/plain").expect("a scrape");
    (body, start.elapsed())
}

/// Scrapes every 50 ms for `secs`: the slowest answer and the last body.
fn scrape_for(port: u16, secs: f64) -> (Duration, String) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut slowest = Duration::ZERO;
    let mut last = String::new();
    while Instant::now() < end {
        let (body, took) = timed_scrape(port);
        slowest = slowest.max(took);
        last = body;
        std::thread::sleep(Duration::from_millis(50));
    }
    (slowest, last)
}

/// A runtime that takes the connection and never answers delays no scrape: scrapes
/// answer at once with the container's short id; once the runtime answers (late, but
/// within bperf's timeout), the scrapes after it carry the name, and none waited.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_hung_runtime_delays_no_scrape() {
    let _g = serial();
    let parent = TestCgroup::new("hung-serve");
    let id = fake_id('c');
    let cg = parent.child(&id);
    let runtime = FakeRuntime::new(Mode::Silent);
    let port = common::http::free_port();
    let mut serve = Bperf(
        common::bperf()
            .env("DOCKER_HOST", runtime.docker_host())
            .args(["serve", "-e", "task-clock", "--for-each-container"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_for_some(20, || common::http::get(port, "/metrics", "*/*"))
        .expect("bperf serve never answered");
    let series = format!("cgroup=\"{}\",container=\"{}\"", cg.name, &id[..12]);
    let (slowest, last) = scrape_for(port, 3.0);
    assert!(last.contains(&series), "{last}");
    assert!(
        slowest < Duration::from_millis(100),
        "a scrape took {slowest:?} while the runtime hung"
    );
    // Answering now, 0.6 s after each request (bperf gives a runtime 1 s).
    let list = listing(&[(&id, "slowpoke", "img", serde_json::json!({}))]);
    runtime.set(Mode::List(list, Duration::from_millis(600)));
    let named = format!("cgroup=\"{}\",container=\"slowpoke\"", cg.name);
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(5) {
        let (body, took) = timed_scrape(port);
        slowest = slowest.max(took);
        if body.contains(&named) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (more, last) = scrape_for(port, 0.5);
    assert!(last.contains(&named), "never named: {last}");
    assert!(
        slowest.max(more) < Duration::from_millis(100),
        "a scrape took {:?} while the runtime was slow",
        slowest.max(more)
    );
    assert!(serve.0.try_wait().unwrap().is_none(), "bperf serve ended");
}

/// stat -I over a runtime that never answers: every interval line comes on time (its
/// timestamp within the period's slack of where -I puts it), the container named by its
/// short id; once the runtime answers (late), later intervals carry its name.
#[test]
#[ignore = "needs root (make test runs it)"]
fn a_hung_runtime_delays_no_interval() {
    use std::io::BufRead;
    let _g = serial();
    let parent = TestCgroup::new("hung-stat");
    let id = fake_id('d');
    let cg = parent.child(&id);
    let runtime = FakeRuntime::new(Mode::Silent);
    const PERIOD: f64 = 0.2;
    let mut stat = Bperf(
        common::bperf()
            .env("DOCKER_HOST", runtime.docker_host())
            .args([
                "stat",
                "-a",
                "-e",
                "task-clock",
                "--for-each-container",
                "-x,",
            ])
            .args(["-I", "200", "--interval-count", "25"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let err = std::io::BufReader::new(stat.0.stderr.take().unwrap());
    let list = listing(&[(&id, "slowpoke", "img", serde_json::json!({}))]);
    // (timestamp, container) of the fake container's line in each interval.
    let mut seen: Vec<(f64, String)> = Vec::new();
    for line in err.lines().map_while(Result::ok) {
        let fields: Vec<&str> = line.split(',').collect();
        let Some(at) = fields.iter().position(|f| *f == cg.name) else {
            continue;
        };
        seen.push((fields[0].parse().unwrap(), fields[at + 1].to_string()));
        // Two seconds hung, then the runtime answers 0.6 s after each request.
        if seen.len() == 10 {
            runtime.set(Mode::List(list.clone(), Duration::from_millis(600)));
        }
    }
    assert!(stat.0.wait().unwrap().success());
    assert_eq!(seen.len(), 25, "{seen:?}");
    for (k, (ts, _)) in seen.iter().enumerate() {
        let due = (k + 1) as f64 * PERIOD;
        assert!(
            *ts < due + PERIOD / 2.0,
            "interval {} at {ts} s, due at {due} s: {seen:?}",
            k + 1
        );
    }
    assert!(seen[..10].iter().all(|(_, c)| *c == id[..12]), "{seen:?}");
    assert_eq!(seen.last().unwrap().1, "slowpoke", "{seen:?}");
}
