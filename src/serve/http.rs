//! The HTTP endpoint: /metrics, answered by the counting thread, from a thread of its
//! own (tiny_http).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, Result};
use tiny_http::{Header, Method, Request, Response};

use super::{Format, Wake};
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

fn answer(req: Request, tx: &mpsc::Sender<Wake>) {
    if !matches!(req.method(), Method::Get | Method::Head) {
        let _ = req.respond(Response::from_string("only GET\n").with_status_code(405));
        return;
    }
    let path = req.url().split('?').next().unwrap_or("");
    let response = match path {
        "/metrics" => {
            let accept = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str());
            let format = Format::from_accept(accept);
            let (reply, answer) = mpsc::channel();
            let text = tx
                .send(Wake::Scrape(format, reply))
                .ok()
                .and_then(|()| answer.recv_timeout(SCRAPE_TIMEOUT).ok());
            match text {
                Some(t) => Response::from_string(t)
                    .with_header(header("Content-Type", format.content_type())),
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
