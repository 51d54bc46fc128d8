//! The proxy's HTTP endpoints, all served by one thread, `http`, from one mio event loop
//! (`event_loop.rs`): every listener and connection. A thread per listener or per connection
//! would let a node with many Local Services, or a client opening connections, cost threads
//! without bound; the answers are small and decided from memory, so one loop serves them all.
//! What is served is handed in ([`Handler`], `crate::serve` for the proxy): this module knows
//! no health, metrics or debug view. An answer made elsewhere (a debug view, by the sync
//! thread) is waited for without holding up the loop (`desk.rs`). This file holds the
//! framing: the request head parsed by httparse, an answer that closes, and binding.

mod accept;
mod budget;
mod conn;
mod desk;
mod event_loop;
mod handler;
#[cfg(test)]
pub(crate) mod test_client;

pub use budget::raise_open_files_limit;
pub use handler::{Answer, Handler, Responder};

use mio::{Poll, Waker};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

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
    /// More of the body after `body`, in pieces: a large answer (a whole ruleset) is made,
    /// handed over and written piece by piece, never joined (or copied) into one buffer.
    pub more: Vec<Vec<u8>>,
}

impl Reply {
    /// A reply with no extra headers.
    pub fn new(code: u16, content_type: &'static str, body: impl Into<String>) -> Reply {
        Reply { code, content_type, headers: Vec::new(), body: body.into(), more: Vec::new() }
    }

    /// A reply whose body is `body` followed by `more`.
    pub fn pieces(code: u16, content_type: &'static str, body: impl Into<String>, more: Vec<Vec<u8>>) -> Reply {
        Reply { more, ..Reply::new(code, content_type, body) }
    }

    /// Go's 404 for a path nobody serves.
    pub fn not_found() -> Reply {
        Reply::new(404, TEXT, "404 page not found\n")
    }
}

/// A request as the [`Handler`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The path, without the query.
    pub path: &'a str,
    /// What follows `?`, if anything.
    pub query: Option<&'a str>,
    /// The `Accept` header (several joined by `,`), if sent: the z-pages negotiate by it.
    pub accept: Option<&'a str>,
}

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// `/healthz` and `/livez` (`--healthz-bind-address`).
    Health,
    /// `/metrics`, `/healthz`, `/proxyMode` (`--metrics-bind-address`).
    Metrics,
    /// A Service's health-check node port (the listener's port says which). Its wildcard
    /// address keeps to its family (`[::]` takes no IPv4) unless `dual_stack`, for a
    /// dual-stack Service served on every address.
    HealthCheck {
        /// Whether `[::]` takes IPv4 too.
        dual_stack: bool,
    },
}

impl Route {
    /// Whether this is a Service's health-check node port.
    fn is_health_check(self) -> bool {
        matches!(self, Route::HealthCheck { .. })
    }

    fn what(self) -> &'static str {
        match self {
            Route::Health => "/healthz and /livez",
            Route::Metrics => "metrics",
            Route::HealthCheck { .. } => "the health-check node port",
        }
    }
}

/// The owner's handle on the `http` thread, sending it news of type `N`.
pub struct Server<N> {
    wanted: Sender<N>,
    waker: Arc<Waker>,
}

impl<N: Send + 'static> Server<N> {
    /// Starts the `http` thread serving `fixed` listeners at once and, as `handler` names
    /// them on news, the others; `handler` answers every request. It ends, closing every
    /// listener, when this is dropped.
    pub fn start<H: Handler<News = N>>(fixed: Vec<(SocketAddr, Route)>, handler: H) -> std::io::Result<Server<N>> {
        let (tx, rx) = channel();
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), event_loop::WAKER)?);
        let desk = desk::Desk::new(waker.clone());
        let mut l = event_loop::Loop::new(poll, fixed, handler, desk);
        std::thread::Builder::new().name("http".into()).spawn(move || l.run(&rx))?;
        Ok(Server { wanted: tx, waker })
    }

    /// Hands `news` to the handler (the loop takes the newest when it wakes).
    pub fn want(&self, news: N) {
        let _ = self.wanted.send(news);
        let _ = self.waker.wake();
    }
}

impl<N> Drop for Server<N> {
    fn drop(&mut self) {
        // The channel closes with this; the loop notices once woken.
        let (closed, _) = channel();
        self.wanted = closed;
        let _ = self.waker.wake();
    }
}

/// What the bytes read so far hold.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// Not a whole request head yet.
    Partial,
    /// A request head that is not HTTP.
    Bad,
    /// A request head longer than is read (Go answers 431).
    TooLarge,
    /// A request for `path` with `query` (after `?`, if any) and the `Accept` header, if
    /// any; `head` for the HEAD method, whose answer has no body.
    Request { head: bool, path: String, query: Option<String>, accept: Option<String> },
}

/// The most header lines a request may carry (a request head is at most 8 KiB anyway).
const MAX_HEADERS: usize = 128;

/// Parses a request head in `read` (httparse). Only the method, target and `Accept` matter:
/// no other header changes an answer.
fn request(read: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(read) {
        Ok(httparse::Status::Complete(_)) => {
            let target = origin_form(req.path.unwrap_or("/"));
            let (path, query) = match target.split_once('?') {
                Some(("", query)) => ("/", Some(query.to_string())),
                Some((path, query)) => (path, Some(query.to_string())),
                None if target.is_empty() => ("/", None),
                None => (target, None),
            };
            let accept: Vec<&str> = req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("accept"))
                .filter_map(|h| std::str::from_utf8(h.value).ok())
                .collect();
            let accept = (!accept.is_empty()).then(|| accept.join(","));
            Head::Request { head: req.method == Some("HEAD"), path: path.to_string(), query, accept }
        }
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::Bad,
    }
}

/// The path and query of a request target. An absolute-form target (`http://host/healthz`,
/// as a client talking to a proxy sends it) is served by its path, as Go's server serves it.
fn origin_form(target: &str) -> &str {
    if target.starts_with('/') {
        return target;
    }
    let Some((scheme, rest)) = target.split_once("://") else { return target };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return target;
    }
    rest.find(['/', '?']).map_or("", |at| &rest[at..])
}

/// An HTTP/1.1 response that closes the connection, in the pieces to write in order: the
/// head, then the body unless not `with_body` (an answer to HEAD says how long the body
/// would be and leaves it out). The body's pieces are moved, not copied.
fn encode(r: Reply, with_body: bool) -> VecDeque<Vec<u8>> {
    let reason = match r.code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        406 => "Not Acceptable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nX-Content-Type-Options: nosniff\r\n",
        r.code, r.content_type
    );
    for (name, value) in &r.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let length = r.body.len() + r.more.iter().map(Vec::len).sum::<usize>();
    head.push_str(&format!("Content-Length: {length}\r\nConnection: close\r\n\r\n"));
    let mut out = VecDeque::from([head.into_bytes()]);
    if with_body {
        out.push_back(r.body.into_bytes());
        out.extend(r.more);
    }
    out
}

/// Binds `addr` for `route` once and lets it go: whether [`Server::start`] would get it now
/// rather than retry it every [`REBIND`], for an owner to whom an address in use is an error.
/// The error names what the address was to serve.
pub fn check_free(addr: SocketAddr, route: Route) -> std::io::Result<()> {
    match bind_for(addr, route) {
        Ok(_) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), format!("{} at {addr}: {e}", route.what()))),
    }
}

/// Connections waiting to be accepted, per listener.
const BACKLOG: i32 = 128;

/// Binds and listens on `addr` for `route`: a health-check port's address as it is (its
/// wildcard keeping to its family) unless dual-stack, else as [`bind`].
fn bind_for(addr: SocketAddr, route: Route) -> std::io::Result<std::net::TcpListener> {
    match route {
        Route::HealthCheck { dual_stack: false } => listen_on(addr, false),
        _ => bind(addr),
    }
}

/// Binds and listens on `addr`. A wildcard, `0.0.0.0` or `[::]`, takes both families whatever
/// `net.ipv6.bindv6only` says, as Go's `net.Listen("tcp", …)` does for either (upstream's
/// default health address answers over IPv6 too); a host without IPv6 gets `0.0.0.0` instead.
fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    if !addr.ip().is_unspecified() {
        return listen_on(addr, false);
    }
    match listen_on(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), addr.port()), true) {
        // A port taken is taken for IPv4 too: only a missing IPv6 is worth the retry.
        Err(e) if e.kind() != ErrorKind::AddrInUse => {
            listen_on(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port()), false)
        }
        other => other,
    }
}

/// A listener on `addr`; an IPv6 one takes IPv4-mapped peers only when `dual_stack`.
fn listen_on(addr: SocketAddr, dual_stack: bool) -> std::io::Result<std::net::TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, bind, listen, socket_with, sockopt};
    let family = if addr.is_ipv6() { AddressFamily::INET6 } else { AddressFamily::INET };
    // Close-on-exec: an `nft` child that hangs must not keep the port after the daemon ends.
    let fd = socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if addr.is_ipv6() {
        sockopt::set_ipv6_v6only(&fd, !dual_stack)?;
    }
    bind(&fd, &addr)?;
    listen(&fd, BACKLOG)?;
    Ok(std::net::TcpListener::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_request_line_is_read() {
        let get = b"GET /livez?x=1 HTTP/1.1\r\nHost: a\r\n\r\n";
        let livez = Head::Request { head: false, path: "/livez".into(), query: Some("x=1".into()), accept: None };
        assert_eq!(request(get), livez);
        let root = Head::Request { head: true, path: "/".into(), query: None, accept: None };
        assert_eq!(request(b"HEAD / HTTP/1.0\r\n\r\n"), root);
        assert_eq!(request(b"GET / HTTP/1.1\r\nHost: a\r\n"), Head::Partial);
        assert_eq!(request(b"\x01\x02 not http\r\n\r\n"), Head::Bad);
        // As Go's server: an absolute-form target is served by its path.
        let healthz = |query: Option<&str>| Head::Request {
            head: false,
            path: "/healthz".into(),
            query: query.map(Into::into),
            accept: None,
        };
        assert_eq!(request(b"GET http://node:10256/healthz HTTP/1.1\r\n\r\n"), healthz(None));
        assert_eq!(request(b"GET HTTP://node/healthz?a=b HTTP/1.1\r\n\r\n"), healthz(Some("a=b")));
        assert_eq!(request(b"GET /healthz?next=http://x/ HTTP/1.1\r\n\r\n"), healthz(Some("next=http://x/")));
        let root = |query: Option<&str>| Head::Request {
            head: false,
            path: "/".into(),
            query: query.map(Into::into),
            accept: None,
        };
        assert_eq!(request(b"GET http://node HTTP/1.1\r\n\r\n"), root(None));
        assert_eq!(request(b"GET http://node?x HTTP/1.1\r\n\r\n"), root(Some("x")));
        let two = b"GET /statusz HTTP/1.1\r\nACCEPT: text/plain\r\nHost: a\r\naccept: */*;q=0.1\r\n\r\n";
        let Head::Request { accept, .. } = request(two) else { panic!("a request") };
        assert_eq!(accept.as_deref(), Some("text/plain,*/*;q=0.1"), "every Accept header, any case");
        let head = encode(Reply::new(503, JSON, "{}"), false);
        assert_eq!(head.len(), 1, "no body");
        assert!(String::from_utf8_lossy(&head[0]).ends_with("Content-Length: 2\r\nConnection: close\r\n\r\n"));
    }

    #[test]
    fn a_body_in_pieces_is_counted_whole_and_written_in_order() {
        let more = vec![b"second ".to_vec(), b"third".to_vec()];
        let out: Vec<u8> = encode(Reply::pieces(200, TEXT, "first ", more), true).into_iter().flatten().collect();
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("Content-Length: 18\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nfirst second third"), "{text}");
    }

    #[test]
    fn an_ipv4_wildcard_listens_as_gos_and_an_address_stays_its_own() {
        use std::net::TcpStream;
        let any = bind("0.0.0.0:0".parse().expect("address")).expect("bind 0.0.0.0");
        let local = any.local_addr().expect("local address");
        // [::] where the host has IPv6, 0.0.0.0 where not: IPv4 is answered either way.
        assert!(local.ip().is_unspecified(), "{local}");
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, local.port())).is_ok(), "{local}");
        let one = bind("127.0.0.1:0".parse().expect("address")).expect("bind 127.0.0.1");
        assert_eq!(one.local_addr().map(|a| a.ip()).ok(), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
}
