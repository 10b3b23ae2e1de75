//! The HTTP endpoint: /metrics, answered by the counting thread, from a thread of its
//! own (tiny_http). The body is gzip-compressed here when the scraper accepts it, as
//! Prometheus does, so that the counting thread never waits for compression.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, Result};
use tiny_http::{Header, Method, Request, Response};

use super::{Format, Scrape, Wake};
use crate::UsageError;

/// How long a scrape waits for the counting thread before it is answered 503.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The listening server; stops listening when dropped.
pub struct Server {
    pub addr: SocketAddr,
    server: Arc<tiny_http::Server>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.server.unblock();
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
    let server =
        tiny_http::Server::http(first).map_err(|e| anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow!("cannot listen on {addr}: not an IP address"))?;
    let server = Arc::new(server);
    let incoming = server.clone();
    std::thread::spawn(move || {
        for req in incoming.incoming_requests() {
            answer(req, &tx);
        }
    });
    Ok(Server {
        addr: bound,
        server,
    })
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name, value).expect("a valid header")
}

/// The value of the request's header `name`, if it has one.
fn header_value<'r>(req: &'r Request, name: &'static str) -> Option<&'r str> {
    req.headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
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
    fn response(self, text: String) -> Response<std::io::Cursor<Vec<u8>>> {
        match self {
            Encoding::Identity => Response::from_string(text),
            Encoding::Gzip => Response::from_data(gzip(text.as_bytes()))
                .with_header(header("Content-Encoding", "gzip")),
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

fn answer(req: Request, tx: &mpsc::Sender<Wake>) {
    if !matches!(req.method(), Method::Get | Method::Head) {
        let _ = req.respond(Response::from_string("only GET\n").with_status_code(405));
        return;
    }
    let path = req.url().split('?').next().unwrap_or("");
    let response = match path {
        "/metrics" => {
            let format = Format::from_accept(header_value(&req, "Accept"));
            let (reply, answer) = mpsc::channel();
            let text = tx
                .send(Wake::Request(Scrape(format, reply)))
                .ok()
                .and_then(|()| answer.recv_timeout(SCRAPE_TIMEOUT).ok());
            let encoding = Encoding::accepted(header_value(&req, "Accept-Encoding"));
            match text {
                Some(Ok(t)) => encoding
                    .response(t)
                    .with_header(header("Content-Type", format.content_type()))
                    .with_header(header("Vary", "Accept-Encoding")),
                Some(Err(e)) => {
                    Response::from_string(format!("bperf: {e}\n")).with_status_code(500)
                }
                None => Response::from_string("bperf is not counting\n").with_status_code(503),
            }
        }
        "/" => Response::from_string("bperf: the metrics are at /metrics\n"),
        _ => {
            Response::from_string("not found: the metrics are at /metrics\n").with_status_code(404)
        }
    };
    let _ = req.respond(response);
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
