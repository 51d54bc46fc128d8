//! The proxy's small HTTP servers (health, metrics, health-check node ports), on tiny_http: an
//! answer is a [`Reply`] built from the request's path, and every server thread stops on a flag.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a long-lived server waits for a request before it looks at the stop flag again.
const POLL: Duration = Duration::from_millis(500);

/// How long to wait before trying again to bind an address in use.
pub const REBIND: Duration = Duration::from_secs(5);

/// JSON, as upstream's health answers are typed.
pub const JSON: &str = "application/json";

/// Plain text, as Go's `http.Error` and upstream's `/proxyMode` answer.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// One answer: status, content type, extra headers and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub code: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Headers besides `Content-Type` and `X-Content-Type-Options: nosniff` (always sent).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: String,
}

impl Reply {
    /// A reply with no extra headers.
    pub fn new(code: u16, content_type: &'static str, body: impl Into<String>) -> Reply {
        Reply { code, content_type, headers: Vec::new(), body: body.into() }
    }

    /// Go's 404 for a path nobody serves.
    pub fn not_found() -> Reply {
        Reply::new(404, TEXT, "404 page not found\n")
    }
}

/// The path of a request, without its query.
pub fn path_of(request: &tiny_http::Request) -> &str {
    request.url().split('?').next().unwrap_or_default()
}

/// Sends `reply` to `request`; a client gone away is no error worth more than a debug line.
pub fn respond(request: tiny_http::Request, reply: Reply) {
    let mut response = tiny_http::Response::from_string(reply.body).with_status_code(reply.code);
    let fixed = [("Content-Type", reply.content_type), ("X-Content-Type-Options", "nosniff")];
    let extra = reply.headers.iter().map(|(n, v)| (*n, v.as_str()));
    for (name, value) in fixed.into_iter().chain(extra) {
        if let Ok(h) = tiny_http::Header::from_bytes(name, value) {
            response.add_header(h);
        }
    }
    if let Err(e) = request.respond(response) {
        log::debug!("answering an HTTP request: {e}");
    }
}

/// Serves `answer` on `addr` on a thread named `name` until `stop` is set. An address that
/// cannot be bound yet (in use) is tried again every [`REBIND`], logged once.
pub fn serve(
    name: &str,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    answer: impl Fn(&str) -> Reply + Send + 'static,
) -> std::io::Result<()> {
    let what = name.to_string();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let mut logged = false;
        while !stop.load(Ordering::SeqCst) {
            match tiny_http::Server::http(addr) {
                Ok(server) => {
                    log::info!("serving {what} on {addr}");
                    while !stop.load(Ordering::SeqCst) {
                        match server.recv_timeout(POLL) {
                            Ok(Some(request)) => {
                                let reply = answer(path_of(&request));
                                respond(request, reply);
                            }
                            Ok(None) => {}
                            Err(e) => log::warn!("{what} server: {e}"),
                        }
                    }
                    return;
                }
                Err(e) if !logged => {
                    log::error!("cannot serve {what} on {addr}: {e}; trying again every {REBIND:?}");
                    logged = true;
                }
                Err(_) => {}
            }
            std::thread::sleep(REBIND);
        }
    })?;
    Ok(())
}
