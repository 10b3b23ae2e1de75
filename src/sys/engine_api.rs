//! Docker's Engine API over its unix socket (and Podman's Docker-compatible socket): one
//! bounded `GET` at a time, HTTP/1.1 spoken by ureq-proto (request, response head,
//! chunked or sized body), the bytes moved here with a deadline and a size limit.
//! What the answers mean is container::names, plain Rust.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ureq_proto::client::{Call, RecvBodyResult, RecvResponseResult, SendRequestResult};
use ureq_proto::http;

use crate::container::names::{self, ContainerInfo, SourceError};

/// Where Docker listens by default.
pub(crate) const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// Where root Podman listens by default.
pub(crate) const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

/// The longest answer taken (a host with thousands of containers lists a few MiB).
pub(crate) const BODY_LIMIT: usize = 16 << 20;

/// How long one request may take, connecting included.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(1);

/// The longest response head taken: status line and headers.
const HEAD_LIMIT: usize = 64 << 10;

/// A runtime's API socket, as a source of container names.
pub struct EngineSocket {
    pub path: PathBuf,
    pub timeout: Duration,
    pub body_limit: usize,
}

impl EngineSocket {
    pub fn new(path: impl Into<PathBuf>) -> EngineSocket {
        EngineSocket {
            path: path.into(),
            timeout: TIMEOUT,
            body_limit: BODY_LIMIT,
        }
    }

    /// The default sources, in the order their answers are taken (a later one's entry
    /// for an id replaces an earlier one's): the kubelet's log links, Docker's socket
    /// (DOCKER_HOST's, see [`docker_socket`]), Podman's.
    pub fn defaults() -> Vec<Box<dyn names::Source>> {
        let host = std::env::var_os("DOCKER_HOST");
        vec![
            Box::new(crate::sys::kubelet::LogLinks::new()),
            Box::new(EngineSocket::new(docker_socket(
                host.as_ref().and_then(|h| h.to_str()),
            ))),
            Box::new(EngineSocket::new(PODMAN_SOCKET)),
        ]
    }
}

/// The socket Docker is asked on: the one DOCKER_HOST names when it is a unix socket
/// (`unix:///run/user/1000/docker.sock`, as Docker's CLI takes it, for rootless Docker),
/// else Docker's default. A host of another scheme (tcp://, ssh://) is not asked.
pub(crate) fn docker_socket(docker_host: Option<&str>) -> PathBuf {
    let named = docker_host
        .and_then(|h| h.strip_prefix("unix://"))
        .filter(|p| !p.is_empty());
    PathBuf::from(named.unwrap_or(DOCKER_SOCKET))
}

impl names::Source for EngineSocket {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn list(&self) -> Result<Vec<ContainerInfo>, SourceError> {
        let body = get(
            &self.path,
            "/containers/json?all=1",
            self.timeout,
            self.body_limit,
        )?;
        names::parse_list(&body).map_err(SourceError::Failed)
    }
}

/// The body of `GET target` on the socket at `path`, within `timeout` and `limit` bytes.
/// A socket that is missing or that nothing listens on is [`SourceError::Absent`].
pub fn get(
    path: &Path,
    target: &str,
    timeout: Duration,
    limit: usize,
) -> Result<Vec<u8>, SourceError> {
    let deadline = Instant::now() + timeout;
    let stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => SourceError::Absent,
        _ => SourceError::Failed(e.to_string()),
    })?;
    let mut conn = Deadlined { stream, deadline };
    exchange(&mut conn, target, limit).map_err(SourceError::Failed)
}

/// A socket whose every read and write must end by `deadline`.
struct Deadlined {
    stream: UnixStream,
    deadline: Instant,
}

impl Deadlined {
    fn remaining(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match left.is_zero() {
            true => Err(std::io::ErrorKind::TimedOut.into()),
            false => Ok(left),
        }
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.remaining()?))?;
        self.stream.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.remaining()?))?;
        self.stream.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// One `GET target` over `conn`: the body of a 2xx answer, or one line saying what went
/// wrong (the status and the API's message for any other).
pub(crate) fn exchange(
    conn: &mut (impl Read + Write),
    target: &str,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let request = http::Request::get(format!("http://localhost{target}"))
        .header("Connection", "close")
        .body(())
        .map_err(|e| e.to_string())?;
    let mut call = Call::new(request).map_err(|e| e.to_string())?.proceed();
    let mut out = vec![0u8; 4096];
    let n = call.write(&mut out).map_err(|e| e.to_string())?;
    conn.write_all(&out[..n]).map_err(io_error)?;
    let call = match call.proceed().map_err(|e| e.to_string())? {
        Some(SendRequestResult::RecvResponse(c)) => c,
        _ => return Err("the request wants a body".into()),
    };
    let mut input = Received::default();
    let (status, call) = read_head(conn, call, &mut input)?;
    let body = match call {
        Some(RecvResponseResult::RecvBody(c)) => read_body(conn, c, &mut input, limit)?,
        _ => Vec::new(),
    };
    if !status.is_success() {
        return Err(format!("{status}{}", api_message(&body)));
    }
    Ok(body)
}

/// Bytes read from the connection and not yet taken by the protocol.
#[derive(Default)]
struct Received {
    buf: Vec<u8>,
    eof: bool,
}

impl Received {
    /// Reads more from `conn` (at most 64 KiB at a time).
    fn fill(&mut self, conn: &mut impl Read) -> Result<(), String> {
        let mut chunk = [0u8; 64 << 10];
        let n = conn.read(&mut chunk).map_err(io_error)?;
        self.eof = n == 0;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    fn take(&mut self, n: usize) {
        self.buf.drain(..n);
    }
}

fn read_head(
    conn: &mut impl Read,
    mut call: Call<ureq_proto::client::state::RecvResponse>,
    input: &mut Received,
) -> Result<(http::StatusCode, Option<RecvResponseResult>), String> {
    loop {
        let (used, response) = call
            .try_response(&input.buf, false)
            .map_err(|e| e.to_string())?;
        input.take(used);
        if let Some(r) = response {
            return Ok((r.status(), call.proceed()));
        }
        if input.eof {
            return Err("the connection closed before the response".into());
        }
        if input.buf.len() > HEAD_LIMIT {
            return Err(format!("response headers over {HEAD_LIMIT} bytes"));
        }
        input.fill(conn)?;
    }
}

fn read_body(
    conn: &mut impl Read,
    mut call: Call<ureq_proto::client::state::RecvBody>,
    input: &mut Received,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut out = vec![0u8; 64 << 10];
    loop {
        let (used, produced) = call.read(&input.buf, &mut out).map_err(|e| e.to_string())?;
        input.take(used);
        if body.len() + produced > limit {
            return Err(format!("answer over {limit} bytes"));
        }
        body.extend_from_slice(&out[..produced]);
        let ended = match call.can_proceed() {
            // A close-delimited body ends only when the connection does.
            true => match call.body_mode() {
                ureq_proto::BodyMode::CloseDelimited => input.eof && input.buf.is_empty(),
                _ => true,
            },
            false => false,
        };
        if ended {
            return match call.proceed() {
                Some(RecvBodyResult::Cleanup(_)) | Some(RecvBodyResult::Redirect(_)) | None => {
                    Ok(body)
                }
            };
        }
        if used == 0 && produced == 0 {
            if input.eof {
                return Err("the connection closed in the middle of the answer".into());
            }
            input.fill(conn)?;
        }
    }
}

/// `: MESSAGE` from the API's error body `{"message": "..."}`, bounded to one short line.
fn api_message(body: &[u8]) -> String {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_string));
    match message {
        Some(m) => format!(
            ": {}",
            m.lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect::<String>()
        ),
        None => String::new(),
    }
}

fn io_error(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "timed out".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that answers with canned bytes, a few at a time, and keeps what was
    /// written to it.
    struct Canned {
        answer: Vec<u8>,
        pos: usize,
        step: usize,
        written: Vec<u8>,
    }

    impl Canned {
        fn new(answer: &[u8], step: usize) -> Canned {
            Canned {
                answer: answer.to_vec(),
                pos: 0,
                step,
                written: Vec::new(),
            }
        }
    }

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.answer.len() - self.pos);
            buf[..n].copy_from_slice(&self.answer[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    const BODY: &str = r#"[{"Id":"ab","Names":["/web"]}]"#;

    fn sized(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn chunked(body: &str) -> Vec<u8> {
        let (a, b) = body.split_at(body.len() / 2);
        format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        )
        .into_bytes()
    }

    #[test]
    fn sends_a_get_with_a_host_and_reads_a_sized_answer() {
        for step in [1, 7, 4096] {
            let mut conn = Canned::new(&sized(BODY), step);
            let body = exchange(&mut conn, "/containers/json?all=1", 1 << 20).unwrap();
            assert_eq!(body, BODY.as_bytes());
            let request = String::from_utf8(conn.written).unwrap();
            assert!(
                request.starts_with("GET /containers/json?all=1 HTTP/1.1\r\n"),
                "{request}"
            );
            assert!(request.to_ascii_lowercase().contains("host: localhost\r\n"));
        }
    }

    #[test]
    fn reads_a_chunked_answer() {
        // dockerd sends a list longer than Go's 4 KiB buffer in chunks
        let long = format!("[{}]", vec![r#"{"Id":"ab"}"#; 1000].join(","));
        for step in [1, 13, 65536] {
            let mut conn = Canned::new(&chunked(&long), step);
            assert_eq!(
                exchange(&mut conn, "/containers/json", 1 << 20).unwrap(),
                long.as_bytes()
            );
        }
    }

    #[test]
    fn refuses_answers_over_the_limit_cut_short_or_not_http() {
        let mut conn = Canned::new(&sized(BODY), 4096);
        assert!(exchange(&mut conn, "/", 10)
            .unwrap_err()
            .contains("over 10 bytes"));
        let cut = sized(BODY);
        let mut conn = Canned::new(&cut[..cut.len() - 3], 4096);
        assert!(exchange(&mut conn, "/", 1 << 20)
            .unwrap_err()
            .contains("closed"));
        let mut conn = Canned::new(b"", 4096);
        assert!(exchange(&mut conn, "/", 1 << 20).is_err());
        let mut conn = Canned::new(b"SSH-2.0-OpenSSH\r\n\r\n", 4096);
        assert!(exchange(&mut conn, "/", 1 << 20).is_err());
        let endless = [
            b"HTTP/1.1 200 OK\r\n".as_slice(),
            &b"X: y\r\n".repeat(100_000),
        ]
        .concat();
        let mut conn = Canned::new(&endless, 65536);
        assert!(exchange(&mut conn, "/", 1 << 20).is_err());
    }

    #[test]
    fn an_error_status_says_the_apis_message() {
        let body = r#"{"message":"client version 1.99 is too new"}"#;
        let answer = String::from_utf8(sized(body))
            .unwrap()
            .replace("200 OK", "400 Bad Request");
        let mut conn = Canned::new(answer.as_bytes(), 4096);
        assert_eq!(
            exchange(&mut conn, "/", 1 << 20).unwrap_err(),
            "400 Bad Request: client version 1.99 is too new"
        );
    }

    #[test]
    fn docker_host_names_the_socket_when_it_is_a_unix_one() {
        let socket = |h| docker_socket(h).display().to_string();
        assert_eq!(socket(None), DOCKER_SOCKET);
        assert_eq!(
            socket(Some("unix:///run/user/1000/docker.sock")),
            "/run/user/1000/docker.sock"
        );
        assert_eq!(socket(Some("tcp://10.0.0.1:2375")), DOCKER_SOCKET);
        assert_eq!(socket(Some("unix://")), DOCKER_SOCKET);
        assert_eq!(socket(Some("")), DOCKER_SOCKET);
    }

    #[test]
    fn a_missing_socket_is_absent_not_a_failure() {
        let r = get(
            Path::new("/nonexistent/bperf-test.sock"),
            "/",
            TIMEOUT,
            BODY_LIMIT,
        );
        assert_eq!(r, Err(SourceError::Absent));
    }

    #[test]
    fn a_silent_server_times_out_within_the_deadline() {
        let dir = std::env::temp_dir().join(format!("bperf-engine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("silent.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let start = Instant::now();
        let r = get(&path, "/", Duration::from_millis(200), BODY_LIMIT);
        let took = start.elapsed();
        drop(listener);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(r, Err(SourceError::Failed("timed out".into())));
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
}
