//! The `http` thread's event loop: every listener and connection on one mio poll. Each
//! connection gets one answer and is closed; one that has not sent a whole request head
//! within [`REQUEST_TIMEOUT`], or sends more than 8 KiB of it, is dropped.
//! At [`MAX_CONNECTIONS`] the oldest connection still silent makes room for a new one, so
//! clients that hold connections open cannot keep a checker out. A debug view's request
//! waits, without holding up the loop, for the sync thread's answer ([`Desk`]).

use super::conn::{Conn, read_request, write_out};
use super::desk::{Desk, WRITE_WAIT};
use super::{Head, REBIND, Reply, Route, TEXT, bind, encode};
use crate::debug::View;
use crate::health::services::{ServiceHealth, Wanted, answer};
use crate::health::{self, Health};
use crate::metrics::{self, Metrics};
use crate::model::Family;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

/// The token of the waker the sync thread's handle rings.
pub const WAKER: Token = Token(0);

/// How long a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once.
const MAX_CONNECTIONS: usize = 1024;

/// A listener: where, and what it serves.
type Key = (SocketAddr, Route);

/// What a token stands for.
enum Slot {
    Listener(Key),
    Conn(Conn),
}

/// The event loop's state.
pub struct Loop {
    poll: Poll,
    health: Arc<Health>,
    metrics: Option<Arc<Metrics>>,
    /// Listeners that are always wanted (health, metrics).
    fixed: Vec<Key>,
    table: BTreeMap<u16, ServiceHealth>,
    wanted: BTreeSet<Key>,
    listeners: BTreeMap<Key, (Token, TcpListener)>,
    slots: HashMap<Token, Slot>,
    conns: usize,
    next: usize,
    /// Listeners that could not be bound, retried every [`REBIND`], and when next.
    failing: BTreeSet<Key>,
    retry_at: Option<Instant>,
    desk: Desk,
}

impl Loop {
    /// A loop on `poll` serving `fixed` listeners, answering from `health` and `metrics`,
    /// and the debug views through `desk`.
    pub fn new(poll: Poll, fixed: Vec<Key>, health: Arc<Health>, metrics: Option<Arc<Metrics>>, desk: Desk) -> Loop {
        Loop {
            poll,
            health,
            metrics,
            wanted: fixed.iter().copied().collect(),
            fixed,
            table: BTreeMap::new(),
            listeners: BTreeMap::new(),
            slots: HashMap::new(),
            conns: 0,
            next: 1,
            failing: BTreeSet::new(),
            retry_at: None,
            desk,
        }
    }

    /// Serves until the sending side of `rx` is gone.
    pub fn run(&mut self, rx: &Receiver<Wanted>) {
        let mut events = Events::with_capacity(256);
        self.reconcile();
        loop {
            let timeout = self.next_deadline().map(|at| at.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != ErrorKind::Interrupted
            {
                log::error!("HTTP endpoints: {e}; no longer served");
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
            while let Some((token, reply, head)) = self.desk.answered() {
                self.deliver(token, reply, head, WRITE_WAIT);
            }
            self.expire();
            if news || self.retry_at.is_some_and(|at| Instant::now() >= at) {
                self.reconcile();
            }
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
            let checks = w.sockets().into_iter().map(|a| (a, Route::HealthCheck));
            self.wanted = self.fixed.iter().copied().chain(checks).collect();
            self.table = w.ports;
        }
        true
    }

    /// When the loop must wake without events: a retry, or a connection's deadline.
    fn next_deadline(&self) -> Option<Instant> {
        let first =
            self.slots.values().filter_map(|s| if let Slot::Conn(c) = s { Some(c.deadline) } else { None }).min();
        [self.retry_at, first].into_iter().flatten().min()
    }

    fn token(&mut self) -> Token {
        self.next = self.next.checked_add(1).unwrap_or(1);
        Token(self.next)
    }

    /// Opens and closes listeners to match what is wanted; what cannot be bound (in use) is
    /// logged once and tried again every [`REBIND`].
    fn reconcile(&mut self) {
        let gone: Vec<Key> = self.listeners.keys().filter(|k| !self.wanted.contains(k)).copied().collect();
        for key in gone {
            if let Some((token, mut l)) = self.listeners.remove(&key) {
                let _ = self.poll.registry().deregister(&mut l);
                self.slots.remove(&token);
                log::info!("closed {} {}", key.1.what(), key.0);
            }
        }
        self.failing.retain(|k| self.wanted.contains(k));
        let missing: Vec<Key> = self.wanted.iter().filter(|k| !self.listeners.contains_key(k)).copied().collect();
        for key in missing {
            match self.listen(key) {
                Ok(()) => {
                    self.failing.remove(&key);
                    log::info!("serving {} on {}", key.1.what(), key.0);
                }
                Err(e) if self.failing.insert(key) => {
                    log::error!("cannot serve {} on {}: {e}; trying again every {REBIND:?}", key.1.what(), key.0);
                }
                Err(_) => {}
            }
        }
        self.retry_at = (!self.failing.is_empty()).then(|| Instant::now() + REBIND);
        if let Some(m) = &self.metrics {
            let ports: BTreeSet<u16> =
                self.listeners.keys().filter(|k| k.1 == Route::HealthCheck).map(|k| k.0.port()).collect();
            m.health_check_node_ports.set(i64::try_from(ports.len()).unwrap_or(i64::MAX));
        }
    }

    fn listen(&mut self, key: Key) -> std::io::Result<()> {
        let std = bind(key.0)?;
        std.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(std);
        let token = self.token();
        self.poll.registry().register(&mut listener, token, Interest::READABLE)?;
        self.slots.insert(token, Slot::Listener(key));
        self.listeners.insert(key, (token, listener));
        Ok(())
    }

    /// Handles readiness of `token`.
    fn ready(&mut self, token: Token) {
        match self.slots.get(&token) {
            Some(Slot::Listener(key)) => self.accept(*key),
            Some(Slot::Conn(_)) => self.serve(token),
            None => {}
        }
    }

    fn accept(&mut self, key: Key) {
        loop {
            let Some((_, listener)) = self.listeners.get(&key) else { return };
            match listener.accept() {
                Ok((mut stream, _)) => {
                    if self.conns >= MAX_CONNECTIONS && !self.evict_silent() {
                        continue;
                    }
                    let local = stream.local_addr().map_or(key.0.ip(), |a| a.ip().to_canonical());
                    let token = self.token();
                    if self.poll.registry().register(&mut stream, token, Interest::READABLE).is_ok() {
                        let (route, port, family, since) = (key.1, key.0.port(), Family::of(&local), Instant::now());
                        let deadline = since + REQUEST_TIMEOUT;
                        let c = Conn { stream, route, port, family, since, deadline, read: Vec::new(), out: None };
                        self.slots.insert(token, Slot::Conn(c));
                        self.conns += 1;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("accepting on {}: {e}", key.0);
                    return;
                }
            }
        }
    }

    /// Closes the oldest connection that has sent no whole request; false if there is none.
    fn evict_silent(&mut self) -> bool {
        let oldest = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Conn(c) if c.out.is_none() && !self.desk.waits(*t) => Some((c.since, *t)),
                _ => None,
            })
            .min();
        oldest.map(|(_, token)| self.close(token)).is_some()
    }

    /// Reads the request and writes the answer as far as the socket allows; closes the
    /// connection when done or broken. While its debug view is being made, whatever else
    /// the client sends is read, so that closing does not reset the connection, and left:
    /// its request is in, and the answer will close it.
    fn serve(&mut self, token: Token) {
        let Some(Slot::Conn(c)) = self.slots.get_mut(&token) else { return };
        if self.desk.waits(token) {
            if read_request(c).is_err() {
                self.close(token);
            }
            return;
        }
        let done = if c.out.is_some() {
            !matches!(write_out(c), Ok(false))
        } else {
            match read_request(c) {
                Ok(Head::Partial) => false,
                Ok(Head::Bad) => {
                    c.out = Some((encode(Reply::new(400, TEXT, "400 Bad Request"), true), 0));
                    self.respond(token)
                }
                Ok(Head::Request { head, path, query }) => {
                    let (route, port, family) = (c.route, c.port, c.family);
                    match self.debug_view(token, route, &path, query.as_deref(), head) {
                        Some(Ok(())) => false,
                        Some(Err(reply)) => self.out(token, reply, head),
                        None => {
                            let reply = self.answer(route, port, family, &path);
                            self.out(token, reply, head)
                        }
                    }
                }
                Err(_) => true,
            }
        };
        if done {
            self.close(token);
        }
    }

    /// Asks the sync thread for the debug view `path` names, if it names one and the
    /// listener serves metrics: `Ok` when asked (the connection waits), else the reply to
    /// send at once (a bad query, or another view under way).
    fn debug_view(
        &mut self,
        token: Token,
        route: Route,
        path: &str,
        query: Option<&str>,
        head: bool,
    ) -> Option<Result<(), Reply>> {
        if route != Route::Metrics || self.metrics.is_none() {
            return None;
        }
        let asked = match View::of(path, query)? {
            Ok(view) => self.desk.ask(token, view, head),
            Err(why) => Err(Reply::new(400, TEXT, format!("{why}\n"))),
        };
        if asked.is_ok()
            && let Some(Slot::Conn(c)) = self.slots.get_mut(&token)
        {
            c.deadline = Instant::now() + self.desk.answer_wait();
        }
        Some(asked)
    }

    /// Sets `reply` as the connection's answer and writes what the socket takes; true when
    /// the connection is done with.
    fn out(&mut self, token: Token, reply: Reply, head: bool) -> bool {
        if let Some(Slot::Conn(c)) = self.slots.get_mut(&token) {
            c.out = Some((encode(reply, !head), 0));
        }
        self.respond(token)
    }

    /// Answers a connection that waited for a debug view, allowing `write` to write it.
    fn deliver(&mut self, token: Token, reply: Reply, head: bool, write: Duration) {
        if let Some(Slot::Conn(c)) = self.slots.get_mut(&token) {
            c.deadline = Instant::now() + write;
        }
        if self.out(token, reply, head) {
            self.close(token);
        }
    }

    /// Writes the answer just set; true when the connection is done with.
    fn respond(&mut self, token: Token) -> bool {
        let Some(Slot::Conn(c)) = self.slots.get_mut(&token) else { return true };
        match write_out(c) {
            // The rest goes when the socket takes it.
            Ok(false) => self.poll.registry().reregister(&mut c.stream, token, Interest::WRITABLE).is_err(),
            _ => true,
        }
    }

    /// The answer of `route` for `path`.
    fn answer(&self, route: Route, port: u16, family: Family, path: &str) -> Reply {
        let now = SystemTime::now();
        match (route, &self.metrics) {
            (Route::HealthCheck, _) => answer(self.table.get(&port), family, self.health.report(now).healthy),
            (Route::Health, m) => {
                let reply = health::reply(&self.health, path, now);
                if let Some(m) = m {
                    m.count_health(path, reply.code);
                }
                reply
            }
            (Route::Metrics, Some(m)) => metrics::answer(m, path),
            (Route::Metrics, None) => Reply::not_found(),
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(Slot::Conn(mut c)) = self.slots.remove(&token) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.conns -= 1;
            self.desk.closed(token);
        }
    }

    /// Drops connections past their deadline: those whose request or answer has not gone
    /// through in time. One that waited too long for a debug view is told to try again.
    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<Token> = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Conn(c) if now >= c.deadline))
            .map(|(t, _)| *t)
            .collect();
        for token in late {
            match self.desk.give_up(token) {
                Some((reply, head)) => self.deliver(token, reply, head, REQUEST_TIMEOUT),
                None => self.close(token),
            }
        }
    }
}
