//! The HTTP endpoint: /metrics, answered by the counting thread.
//!
//! One thread of its own runs the listener: hyper over a single-threaded tokio runtime,
//! each connection a task of it, so that a client that is slow to send or to read holds
//! only its own connection. What a client can take is bounded: the number of
//! connections (from the file descriptors the process may open), the size of a request
//! head (431 past it), the time a request head may take to arrive (which also ends a
//! kept-alive connection left idle), and the time a connection may live. Running out of
//! file descriptors stops nothing: the listener waits and accepts again. The body is
//! gzip-compressed here when the scraper accepts it, as Prometheus does, so that the
//! counting thread never waits for compression.

use std::convert::Infallible;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::{ExpositionFormat, Scrape, Wake};
use crate::UsageError;

/// How long a scrape waits for the counting thread before it is answered 503.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request head may take to arrive, counted from the connection's accept or
/// from the end of its last response (a kept-alive connection's idle wait).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may live, whatever it does: one that reads its responses
/// slowly, or never, is closed then.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The largest request head (request line and headers); a larger one is answered 431.
const MAX_HEAD: usize = 16 * 1024;
/// The most connections served at once, whatever the descriptor limit.
const MAX_CONNECTIONS: u64 = 256;
/// How long the listener waits to accept again after running out of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The listening server; stops listening, and closes its connections, when dropped.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Listens on `addr` and passes every scrape of /metrics to the counting thread.
pub fn serve(addr: &str, tx: mpsc::Sender<Wake>) -> Result<Server> {
    let bad = || {
        UsageError(format!(
            "--listen {addr}: not an address and port (ADDR:PORT)"
        ))
    };
    let first = addr
        .to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)?;
    let cannot = |e: std::io::Error| anyhow!("cannot listen on {addr}: {e}");
    let listener = std::net::TcpListener::bind(first).map_err(cannot)?;
    listener.set_nonblocking(true).map_err(cannot)?;
    let bound = listener.local_addr().map_err(cannot)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the HTTP server")?;
    let (stop, stopped) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("bperf-http".into())
        .spawn(move || runtime.block_on(accept(listener, tx, stopped)))
        .context("starting the HTTP server")?;
    Ok(Server {
        addr: bound,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// The most connections served at once: a quarter of the descriptors the process may
/// open (the counter holds its events' and maps'), at most MAX_CONNECTIONS.
fn max_connections() -> usize {
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let soft = nofile.current.unwrap_or(MAX_CONNECTIONS * 4);
    (soft / 4).clamp(4, MAX_CONNECTIONS) as usize
}

/// Accepts connections until `stopped`, each served by a task of its own while it
/// holds one of the connection slots.
async fn accept(
    listener: std::net::TcpListener,
    tx: mpsc::Sender<Wake>,
    mut stopped: oneshot::Receiver<()>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        eprintln!("bperf: the HTTP listener could not be started");
        return;
    };
    let slots = Arc::new(Semaphore::new(max_connections()));
    let mut said_out_of_fds = false;
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = &mut stopped => return,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stopped => return,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, tx.clone(), slot));
            }
            Err(e) if out_of_resources(&e) => {
                if !said_out_of_fds {
                    eprintln!("bperf: cannot accept connections: {e}; still listening, accepting again as descriptors free up");
                    said_out_of_fds = true;
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
            // The client gave up before it was accepted (ECONNABORTED and the like).
            Err(_) => {}
        }
    }
}

/// Whether an accept failed for want of descriptors or memory, which only time mends.
fn out_of_resources(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Serves one connection for at most CONNECTION_LIFETIME; its slot is free when it ends.
async fn connection(stream: TcpStream, tx: mpsc::Sender<Wake>, _slot: OwnedSemaphorePermit) {
    let service = hyper::service::service_fn(move |req| answer(req, tx.clone()));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .max_header_size(MAX_HEAD)
        .serve_connection(TokioIo::new(stream), service);
    // An error is the client's (a bad request, answered by hyper, or a reset): nothing
    // to say here.
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, served).await;
}

type Answer = Response<Full<Bytes>>;

/// A plain-text response with `status`.
fn text(status: StatusCode, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=UTF-8"),
    );
    r
}

/// The value of the request's header `name`, if it has one that is text.
fn header_value(req: &Request<Incoming>, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn answer(req: Request<Incoming>, tx: mpsc::Sender<Wake>) -> Result<Answer, Infallible> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    Ok(match req.uri().path() {
        "/metrics" => scrape(&req, &tx).await,
        "/" => text(StatusCode::OK, "bperf: the metrics are at /metrics\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        ),
    })
}

/// The metrics, from the counting thread, in the format and encoding the scraper asks.
async fn scrape(req: &Request<Incoming>, tx: &mpsc::Sender<Wake>) -> Answer {
    let format = ExpositionFormat::from_accept(header_value(req, header::ACCEPT));
    let encoding = Encoding::accepted(header_value(req, header::ACCEPT_ENCODING));
    let (reply, answer) = oneshot::channel();
    let text_of = match tx.send(Wake::Request(Scrape(format, reply))) {
        Ok(()) => tokio::time::timeout(SCRAPE_TIMEOUT, answer).await.ok(),
        Err(_) => None,
    };
    match text_of.and_then(|answered| answered.ok()) {
        Some(Ok(t)) => {
            let mut r = encoding.response(t);
            let headers = r.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            r
        }
        Some(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("bperf: {e}\n")),
        None => text(StatusCode::SERVICE_UNAVAILABLE, "bperf is not counting\n"),
    }
}

/// How a response body is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
}

impl Encoding {
    /// The encoding an Accept-Encoding header prefers (RFC 9110 12.5.3): gzip when it
    /// accepts gzip (by name, as x-gzip or through `*`) at least as much as identity;
    /// identity otherwise, and when there is no header.
    fn accepted(accept_encoding: Option<&str>) -> Encoding {
        let Some(header) = accept_encoding else {
            return Encoding::Identity;
        };
        let mut gzip = None;
        let mut identity = None;
        let mut any = None;
        for item in header.split(',') {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
                .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok());
            let Some(q) = q else {
                continue;
            };
            match coding.as_str() {
                "gzip" | "x-gzip" => gzip = Some(q),
                "identity" => identity = Some(q),
                "*" => any = Some(q),
                _ => {}
            }
        }
        let gzip = gzip.or(any).unwrap_or(0.0);
        // Identity is acceptable unless refused by name or through `*`.
        let identity = identity.or(any.filter(|&q| q == 0.0)).unwrap_or(1.0);
        match gzip > 0.0 && gzip >= identity {
            true => Encoding::Gzip,
            false => Encoding::Identity,
        }
    }

    /// A response with `text` as its body, in this encoding.
    fn response(self, text: String) -> Answer {
        match self {
            Encoding::Identity => Response::new(Full::new(text.into())),
            Encoding::Gzip => {
                let mut r = Response::new(Full::new(gzip(text.as_bytes()).into()));
                r.headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                r
            }
        }
    }
}

/// `data` compressed as a gzip member, at the fastest level: exposition text gets most
/// of its reduction there in about a third of the default level's time.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 8),
        flate2::Compression::fast(),
    );
    enc.write_all(data).expect("compressing to memory");
    enc.finish().expect("compressing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn accept_encoding_picks_gzip_or_identity() {
        let pick = |h: &str| Encoding::accepted(Some(h));
        assert_eq!(Encoding::accepted(None), Encoding::Identity);
        // What Prometheus sends.
        assert_eq!(pick("gzip"), Encoding::Gzip);
        assert_eq!(pick("deflate, gzip;q=1.0, *;q=0.5"), Encoding::Gzip);
        assert_eq!(pick("GZIP"), Encoding::Gzip);
        assert_eq!(pick("x-gzip"), Encoding::Gzip);
        assert_eq!(pick("*"), Encoding::Gzip);
        assert_eq!(pick(""), Encoding::Identity);
        assert_eq!(pick("identity"), Encoding::Identity);
        assert_eq!(pick("br, deflate"), Encoding::Identity);
        assert_eq!(pick("gzip;q=0"), Encoding::Identity);
        assert_eq!(pick("gzip; q=0.000"), Encoding::Identity);
        assert_eq!(pick("*;q=0, identity"), Encoding::Identity);
        assert_eq!(pick("gzip;q=0.5, identity;q=0.8"), Encoding::Identity);
        assert_eq!(pick("gzip;q=0.5, identity;q=0"), Encoding::Gzip);
        assert_eq!(pick("gzip;q=0.5, *;q=0"), Encoding::Gzip);
        assert_eq!(pick("gzip;q=nonsense"), Encoding::Identity);
    }

    #[test]
    fn gzip_decodes_to_the_text() {
        let text = "bperf_count_total{event=\"task-clock\",cgroup=\"/\"} 1\n".repeat(1000);
        let z = gzip(text.as_bytes());
        assert!(
            z.len() < text.len() / 10,
            "{} bytes of {}",
            z.len(),
            text.len()
        );
        let mut back = String::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, text);
    }
}
