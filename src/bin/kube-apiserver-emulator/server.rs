//! Listeners and connections: binding (optionally inside a network namespace), the accept loop,
//! one thread per connection, authentication, and the request/response loop.

use crate::api::{App, Listener, Reply, route};
use crate::conn::Conn;
use crate::http::{HttpError, Response, read_request, write_response};
use crate::tls::Tokens;
use crate::watch::{self, End};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use rustls::{ServerConfig, ServerConnection};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// An idle keep-alive connection is closed after this long.
const IDLE: Duration = Duration::from_secs(600);
/// A client that stops reading a response for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// How a listener treats its connections.
#[derive(Clone)]
pub enum Mode {
    /// The API listener with TLS and authentication.
    Tls {
        /// Server configuration.
        config: Arc<ServerConfig>,
        /// Accepted bearer tokens.
        tokens: Arc<Tokens>,
    },
    /// The API listener over plain HTTP without authentication (`--plain`).
    Plain,
    /// The control listener.
    Control,
}

/// Binds `addr`, inside network namespace `/run/netns/{netns}` if given. The socket belongs to
/// the namespace it was created in, so only the binding thread has to enter it.
pub fn bind(addr: SocketAddr, netns: Option<&str>) -> io::Result<TcpListener> {
    let Some(name) = netns else {
        return TcpListener::bind(addr);
    };
    let path = format!("/run/netns/{name}");
    let joined = std::thread::Builder::new().name(format!("bind-{name}")).spawn(move || {
        let ns = std::fs::File::open(&path)?;
        move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))?;
        TcpListener::bind(addr)
    })?;
    joined.join().map_err(|_| io::Error::other("the binding thread panicked"))?
}

/// Starts the accept thread of `listener`.
pub fn serve(listener: TcpListener, app: Arc<App>, mode: Mode) -> io::Result<()> {
    let tag = if matches!(mode, Mode::Control) { "control" } else { "api" };
    std::thread::Builder::new().name(format!("accept-{tag}")).spawn(move || {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        for stream in listener.incoming() {
            let tcp = match stream {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("accept on {tag}: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let (app, mode) = (app.clone(), mode.clone());
            let name = format!("conn-{tag}-{}", SEQ.fetch_add(1, Ordering::Relaxed));
            if let Err(e) = std::thread::Builder::new().name(name).spawn(move || connection(&app, tcp, &mode)) {
                log::warn!("spawning a connection thread: {e}");
            }
        }
    })?;
    Ok(())
}

fn connection(app: &App, tcp: TcpStream, mode: &Mode) {
    let peer = tcp.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_read_timeout(Some(IDLE));
    let _ = tcp.set_write_timeout(Some(WRITE_TIMEOUT));
    let tls = match mode {
        Mode::Tls { config, .. } => match ServerConnection::new(config.clone()) {
            Ok(c) => Some(c),
            Err(e) => return log::warn!("TLS session for {peer}: {e}"),
        },
        _ => None,
    };
    // What the API listener sends is counted (the benchmark's bytes per first state).
    let sent = (!matches!(mode, Mode::Control)).then(|| app.stats.sent.clone());
    let mut conn = match Conn::new(tcp, tls, sent) {
        Ok(c) => c,
        Err(e) => return log::warn!("connection from {peer}: {e}"),
    };
    if let Err(e) = requests(app, &mut conn, mode) {
        log::debug!("connection from {peer} ended: {e}");
    }
}

/// Serves requests until the peer leaves or a response requires closing.
fn requests(app: &App, conn: &mut Conn, mode: &Mode) -> io::Result<()> {
    let listener = if matches!(mode, Mode::Control) { Listener::Control } else { Listener::Api };
    let mut buf = Vec::new();
    loop {
        let req = match read_request(&mut conn.io, &mut buf) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(HttpError::Io(e)) => return Err(e),
            Err(HttpError::Bad(m)) => {
                return write_response(&mut conn.io, &Response::status(400, "BadRequest", m), true);
            }
        };
        log::debug!("{listener:?} {} {} {:?}", req.method, req.path, req.query);
        let close = req.wants_close();
        let reply = if authenticated(conn, &req, mode) {
            route(app, &req, listener)
        } else {
            Reply::Done(Response::status(401, "Unauthorized", "Unauthorized"))
        };
        match reply {
            Reply::Done(resp) => {
                if listener == Listener::Api {
                    app.stats.status(resp.status);
                    app.stats.media(resp.content_type);
                }
                write_response(&mut conn.io, &resp, close)?;
                if close {
                    return Ok(());
                }
            }
            Reply::Watch(w) => {
                if listener == Listener::Api {
                    app.stats.status(200);
                    app.stats.media(if w.proto { crate::proto::STREAM } else { "application/json" });
                }
                if watch::serve(&app.store, conn, &w, app.bookmark_interval)? == End::Close || close {
                    return Ok(());
                }
            }
        }
    }
}

fn authenticated(conn: &Conn, req: &crate::http::Request, mode: &Mode) -> bool {
    let Mode::Tls { tokens, .. } = mode else {
        return true;
    };
    if conn.has_client_cert() {
        return true;
    }
    let bearer = req.header("authorization").and_then(|h| h.strip_prefix("Bearer ")).map(str::trim);
    bearer.is_some_and(|t| tokens.accepts(t))
}
