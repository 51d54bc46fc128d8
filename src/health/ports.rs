//! The one thread that serves every health-check node port: a mio event loop over all the
//! listeners and their connections. A thread (or a tiny_http server, six threads) per port
//! would cost thousands of threads on a node with many Local Services; the answers are a few
//! hundred bytes decided from a table, so one loop serves them all. Each connection gets one
//! answer (any method and path; only the request line is read) and is closed; one that has not sent a whole request head within
//! [`REQUEST_TIMEOUT`], or sends more than [`MAX_REQUEST`] bytes of it, is dropped.

use super::Health;
use super::services::{ServiceHealth, Wanted, answer};
use crate::http::{self, Reply};
use crate::metrics::Metrics;
use crate::model::Family;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

/// The token of the waker the sync thread's handle rings.
pub const WAKER: Token = Token(0);

/// How long a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest request head read.
const MAX_REQUEST: usize = 8192;

/// Connections waiting to be accepted, per listener.
const BACKLOG: i32 = 128;

/// Connections open at once; more are closed as they are accepted.
const MAX_CONNECTIONS: usize = 1024;

/// One client connection.
struct Conn {
    stream: TcpStream,
    port: u16,
    /// The family the checker connected over (an IPv4 client of a `[::]` listener: IPv4).
    family: Family,
    since: Instant,
    read: Vec<u8>,
    /// The answer, once the request is in, and how much of it is written.
    out: Option<(Vec<u8>, usize)>,
}

/// What a token stands for.
enum Slot {
    Listener(SocketAddr),
    Conn(Conn),
}

/// The event loop's state.
pub struct Loop {
    poll: Poll,
    health: Arc<Health>,
    metrics: Option<Arc<Metrics>>,
    table: BTreeMap<u16, ServiceHealth>,
    wanted: BTreeSet<SocketAddr>,
    listeners: BTreeMap<SocketAddr, (Token, TcpListener)>,
    slots: HashMap<Token, Slot>,
    conns: usize,
    next: usize,
    /// Sockets that could not be bound, retried every [`http::REBIND`], and when next.
    failing: BTreeSet<SocketAddr>,
    retry_at: Option<Instant>,
}

impl Loop {
    /// A loop on `poll`, answering from `health`.
    pub fn new(poll: Poll, health: Arc<Health>, metrics: Option<Arc<Metrics>>) -> Loop {
        Loop {
            poll,
            health,
            metrics,
            table: BTreeMap::new(),
            wanted: BTreeSet::new(),
            listeners: BTreeMap::new(),
            slots: HashMap::new(),
            conns: 0,
            next: 1,
            failing: BTreeSet::new(),
            retry_at: None,
        }
    }

    /// Serves until the sending side of `rx` is gone.
    pub fn run(&mut self, rx: &Receiver<Wanted>) {
        let mut events = Events::with_capacity(256);
        loop {
            let timeout = self.next_deadline().map(|at| at.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != ErrorKind::Interrupted
            {
                log::error!("health-check node ports: {e}; no longer served");
                return;
            }
            let mut news = false;
            for event in &events {
                match event.token() {
                    WAKER => news = true,
                    token => self.ready(token),
                }
            }
            if news && !self.take_news(rx) {
                return;
            }
            self.expire();
            self.reconcile();
        }
    }

    /// Takes the newest wanted state; false when the sync thread is gone.
    fn take_news(&mut self, rx: &Receiver<Wanted>) -> bool {
        let mut newest = None;
        loop {
            match rx.try_recv() {
                Ok(w) => newest = Some(w),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        if let Some(w) = newest {
            self.wanted = w.sockets();
            self.table = w.ports;
        }
        true
    }

    /// When the loop must wake without events: a retry, or the oldest request timing out.
    fn next_deadline(&self) -> Option<Instant> {
        let retry = self.retry_at.filter(|_| !self.failing.is_empty());
        let oldest = self.slots.values().filter_map(|s| if let Slot::Conn(c) = s { Some(c.since) } else { None }).min();
        [retry, oldest.map(|t| t + REQUEST_TIMEOUT)].into_iter().flatten().min()
    }

    fn token(&mut self) -> Token {
        self.next = self.next.checked_add(1).unwrap_or(1);
        Token(self.next)
    }

    /// Opens and closes listeners to match what is wanted.
    fn reconcile(&mut self) {
        let gone: Vec<SocketAddr> = self.listeners.keys().filter(|a| !self.wanted.contains(a)).copied().collect();
        for addr in gone {
            if let Some((token, mut l)) = self.listeners.remove(&addr) {
                let _ = self.poll.registry().deregister(&mut l);
                self.slots.remove(&token);
                log::info!("closed the health-check node port {addr}");
            }
        }
        self.failing.retain(|a| self.wanted.contains(a));
        // New sockets are tried at once; those that failed, when their retry is due.
        let due = self.retry_at.is_none_or(|at| Instant::now() >= at);
        let missing: Vec<SocketAddr> = self
            .wanted
            .iter()
            .filter(|a| !self.listeners.contains_key(a) && (due || !self.failing.contains(a)))
            .copied()
            .collect();
        for addr in missing {
            match self.listen(addr) {
                Ok(()) => {
                    self.failing.remove(&addr);
                    log::info!("serving the health-check node port {addr}");
                }
                Err(e) if self.failing.insert(addr) => {
                    log::error!(
                        "cannot serve the health-check node port {addr}: {e}; trying again every {:?}",
                        http::REBIND
                    );
                }
                Err(_) => {}
            }
        }
        if due || self.retry_at.is_none() {
            self.retry_at = (!self.failing.is_empty()).then(|| Instant::now() + http::REBIND);
        }
        if let Some(m) = &self.metrics {
            let ports: BTreeSet<u16> = self.listeners.keys().map(SocketAddr::port).collect();
            m.health_check_node_ports.set(i64::try_from(ports.len()).unwrap_or(i64::MAX));
        }
    }

    fn listen(&mut self, addr: SocketAddr) -> std::io::Result<()> {
        let std = bind(addr)?;
        std.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(std);
        let token = self.token();
        self.poll.registry().register(&mut listener, token, Interest::READABLE)?;
        self.slots.insert(token, Slot::Listener(addr));
        self.listeners.insert(addr, (token, listener));
        Ok(())
    }

    /// Handles readiness of `token`.
    fn ready(&mut self, token: Token) {
        match self.slots.get(&token) {
            Some(Slot::Listener(addr)) => self.accept(*addr),
            Some(Slot::Conn(_)) => self.serve(token),
            None => {}
        }
    }

    fn accept(&mut self, addr: SocketAddr) {
        loop {
            let Some((_, listener)) = self.listeners.get(&addr) else { return };
            match listener.accept() {
                Ok((mut stream, _)) => {
                    if self.conns >= MAX_CONNECTIONS {
                        continue;
                    }
                    let local = stream.local_addr().map_or(addr.ip(), |a| a.ip().to_canonical());
                    let (port, family, since) = (addr.port(), Family::of(&local), Instant::now());
                    let token = self.token();
                    if self.poll.registry().register(&mut stream, token, Interest::READABLE).is_ok() {
                        let c = Conn { stream, port, family, since, read: Vec::new(), out: None };
                        self.slots.insert(token, Slot::Conn(c));
                        self.conns += 1;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("accepting on {addr}: {e}");
                    return;
                }
            }
        }
    }

    /// Reads the request and writes the answer as far as the socket allows; closes the
    /// connection when done or broken.
    fn serve(&mut self, token: Token) {
        let healthy = self.health.report(SystemTime::now()).healthy;
        let Some(Slot::Conn(c)) = self.slots.get_mut(&token) else { return };
        let done = match step(c, &self.table, healthy) {
            // The answer is small: it almost always goes out at once.
            Ok(Step::Answered) => match step(c, &self.table, healthy) {
                Ok(Step::Wait) => self.poll.registry().reregister(&mut c.stream, token, Interest::WRITABLE).is_err(),
                _ => true,
            },
            Ok(Step::Wait) => false,
            Ok(Step::Done) | Err(_) => true,
        };
        if done {
            self.close(token);
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(Slot::Conn(mut c)) = self.slots.remove(&token) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.conns -= 1;
        }
    }

    /// Drops connections whose request has not come within the timeout.
    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<Token> = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Conn(c) if now.duration_since(c.since) >= REQUEST_TIMEOUT))
            .map(|(t, _)| *t)
            .collect();
        for token in late {
            self.close(token);
        }
    }
}

enum Step {
    /// More of the request is to come, or the answer is not all written.
    Wait,
    /// The answer is ready; wait until it can be written.
    Answered,
    /// All written (or nothing more to do): close.
    Done,
}

/// Advances one connection as far as its socket allows.
fn step(c: &mut Conn, table: &BTreeMap<u16, ServiceHealth>, healthy: bool) -> std::io::Result<Step> {
    if let Some((out, written)) = &mut c.out {
        while *written < out.len() {
            match c.stream.write(&out[*written..]) {
                Ok(0) => return Ok(Step::Done),
                Ok(n) => *written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Step::Wait),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(Step::Done);
    }
    let mut buf = [0u8; 2048];
    let mut ended = false;
    loop {
        match c.stream.read(&mut buf) {
            // The client may close its side right after its request: answer what came.
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => c.read.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if c.read.len() > MAX_REQUEST {
            return Ok(Step::Done);
        }
    }
    let reply = match request(&c.read) {
        Head::Partial if ended => return Ok(Step::Done),
        Head::Partial => return Ok(Step::Wait),
        Head::Bad => encode(&Reply::new(400, http::TEXT, "400 Bad Request"), true),
        Head::Request { head } => encode(&answer(table.get(&c.port), c.family, healthy), !head),
    };
    c.out = Some((reply, 0));
    Ok(Step::Answered)
}

/// What the bytes read so far hold.
enum Head {
    /// Not a whole request head yet.
    Partial,
    /// A request head that is not HTTP.
    Bad,
    /// A request; `head` for the HEAD method, whose answer has no body.
    Request { head: bool },
}

/// Finds a request head in `read`. Only its request line matters: every path and header
/// gets the same answer.
fn request(read: &[u8]) -> Head {
    let Some(end) =
        read.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| read.windows(2).position(|w| w == b"\n\n"))
    else {
        return Head::Partial;
    };
    let line = read[..end].split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.trim_end_matches('\r').split(' ');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some(method), Some(target), Some(version), None)
            if !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase())
                && !target.is_empty()
                && version.starts_with("HTTP/1.") =>
        {
            Head::Request { head: method == "HEAD" }
        }
        _ => Head::Bad,
    }
}

/// An HTTP/1.1 response that closes the connection, with its body unless not `with_body`
/// (an answer to HEAD says how long the body would be and leaves it out).
fn encode(r: &Reply, with_body: bool) -> Vec<u8> {
    let reason = match r.code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nX-Content-Type-Options: nosniff\r\n",
        r.code, r.content_type
    );
    for (name, value) in &r.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", r.body.len()));
    let mut out = head.into_bytes();
    if with_body {
        out.extend_from_slice(r.body.as_bytes());
    }
    out
}

/// Binds and listens on `addr`. `[::]` takes IPv4 too, whatever `net.ipv6.bindv6only` says
/// (as Go's listeners do); a host without IPv6 gets `0.0.0.0` instead.
fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use rustix::net::{AddressFamily, SocketType, bind, listen, socket, sockopt};
    let any6 = addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    let open = |addr: SocketAddr| -> std::io::Result<std::net::TcpListener> {
        let family = if addr.is_ipv6() { AddressFamily::INET6 } else { AddressFamily::INET };
        let fd = socket(family, SocketType::STREAM, None)?;
        sockopt::set_socket_reuseaddr(&fd, true)?;
        if addr.is_ipv6() {
            sockopt::set_ipv6_v6only(&fd, !any6)?;
        }
        bind(&fd, &addr)?;
        listen(&fd, BACKLOG)?;
        Ok(std::net::TcpListener::from(fd))
    };
    match open(addr) {
        Err(e) if any6 && e.kind() != ErrorKind::AddrInUse => {
            open(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port()))
        }
        other => other,
    }
}
