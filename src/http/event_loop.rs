//! The `http` thread's event loop: every listener and connection on one mio poll. Each
//! connection gets one answer and is closed; one that has not sent a whole request head
//! within [`REQUEST_TIMEOUT`] is dropped, one that sends more than 8 KiB of it answered 431.
//! Listeners and connections share the descriptors the open-files limit allows ([`Budget`]);
//! at the connection cap the oldest connection still silent makes room for a new one, so
//! clients that hold connections open cannot keep a checker out (`accept.rs`). A request
//! answered later waits, without holding up the loop, for its answer ([`Desk`]).

use super::accept::{Refusals, Reserve};
use super::budget::Budget;
use super::conn::{Conn, drain, read_request, write_out};
use super::desk::{Desk, WRITE_WAIT};
use super::handler::{Answer, Handler, Responder};
use super::{Head, REBIND, Reply, Request, Route, TEXT, bind_for, encode};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// The token of the waker the owner's handle (and a [`Responder`]) rings.
pub const WAKER: Token = Token(0);

/// How long a client may take to send its request head.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener: where, and what it serves.
pub(super) type Key = (SocketAddr, Route);

/// What a token stands for.
pub(super) enum Slot {
    Listener(Key),
    Conn(Conn),
}

/// The event loop's state.
pub struct Loop<H: Handler> {
    pub(super) poll: Poll,
    /// What answers the requests and names the listeners wanted.
    handler: H,
    /// Listeners that are always wanted (health, metrics).
    fixed: Vec<Key>,
    wanted: BTreeSet<Key>,
    pub(super) listeners: BTreeMap<Key, (Token, TcpListener)>,
    pub(super) slots: HashMap<Token, Slot>,
    pub(super) conns: usize,
    next: usize,
    /// Listeners that could not be bound, retried every [`REBIND`], and when next.
    failing: BTreeSet<Key>,
    retry_at: Option<Instant>,
    pub(super) desk: Desk,
    /// How many listeners and connections the open-files limit allows.
    pub(super) budget: Budget,
    /// Listeners that could not be accepted from, tried again at `accept_at`.
    pub(super) backlogged: BTreeSet<Key>,
    pub(super) accept_at: Option<Instant>,
    pub(super) refusals: Refusals,
    pub(super) reserve: Reserve,
}

impl<H: Handler> Loop<H> {
    /// A loop on `poll` serving `fixed` listeners, answering with `handler`, and its later
    /// answers through `desk`.
    pub fn new(poll: Poll, fixed: Vec<Key>, handler: H, desk: Desk) -> Loop<H> {
        Loop {
            poll,
            handler,
            wanted: fixed.iter().copied().collect(),
            fixed,
            listeners: BTreeMap::new(),
            slots: HashMap::new(),
            conns: 0,
            next: 1,
            failing: BTreeSet::new(),
            retry_at: None,
            desk,
            budget: Budget::current(),
            backlogged: BTreeSet::new(),
            accept_at: None,
            refusals: Refusals::default(),
            reserve: Reserve::new(),
        }
    }

    /// Serves until the sending side of `rx` is gone.
    pub fn run(&mut self, rx: &Receiver<H::News>) {
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
            self.retry_accepts();
            if news || self.retry_at.is_some_and(|at| Instant::now() >= at) {
                self.reconcile();
            }
        }
    }

    /// Hands the newest news to the handler and takes the listeners it wants; false when the
    /// owner's handle is gone.
    fn take_news(&mut self, rx: &Receiver<H::News>) -> bool {
        let mut newest = None;
        loop {
            match rx.try_recv() {
                Ok(w) => newest = Some(w),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        if let Some(news) = newest {
            let more = self.handler.news(news);
            self.wanted = self.fixed.iter().copied().chain(more).collect();
        }
        true
    }

    /// When the loop must wake without events: a retry, or a connection's deadline.
    fn next_deadline(&self) -> Option<Instant> {
        let first =
            self.slots.values().filter_map(|s| if let Slot::Conn(c) = s { Some(c.deadline) } else { None }).min();
        [self.retry_at, self.accept_at, first].into_iter().flatten().min()
    }

    pub(super) fn token(&mut self) -> Token {
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
                self.backlogged.remove(&key);
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
        let ports: BTreeSet<u16> =
            self.listeners.keys().filter(|k| k.1.is_health_check()).map(|k| k.0.port()).collect();
        self.handler.listening(ports.len());
    }

    /// Listens on `key`; a health-check port only within its share of the descriptors, so
    /// that `/healthz` and every listener keep some for connections however many Services
    /// have one.
    fn listen(&mut self, key: Key) -> std::io::Result<()> {
        if key.1.is_health_check() {
            let share = self.budget.listeners();
            if self.listeners.keys().filter(|k| k.1.is_health_check()).count() >= share {
                let limit = self.budget.limit();
                let why = format!("health-check ports may hold {share} descriptors of the open files limit {limit}");
                return Err(std::io::Error::other(why));
            }
        }
        let std = bind_for(key.0, key.1)?;
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

    /// Reads the request and writes the answer as far as the socket allows; closes the
    /// connection when done or broken. While its later answer is being made, whatever else
    /// the client sends is read, so that closing does not reset the connection, and left:
    /// its request is in, and the answer will close it.
    fn serve(&mut self, token: Token) {
        let Some(Slot::Conn(c)) = self.slots.get_mut(&token) else { return };
        if c.draining {
            if drain(c) {
                self.close(token);
            }
            return;
        }
        if self.desk.waits(token) {
            if read_request(c).is_err() {
                self.close(token);
            }
            return;
        }
        let done = if c.out.is_some() {
            self.respond(token)
        } else {
            match read_request(c) {
                Ok(Head::Partial) => false,
                // As Go's server answers them, and without resetting the answer away.
                Ok(bad @ (Head::Bad | Head::TooLarge)) => {
                    let status =
                        if bad == Head::Bad { "400 Bad Request" } else { "431 Request Header Fields Too Large" };
                    let code = if bad == Head::Bad { 400 } else { 431 };
                    c.out = Some((encode(Reply::new(code, TEXT, status), true), 0));
                    c.linger = true;
                    self.respond(token)
                }
                Ok(Head::Request { head, path, query, accept }) => {
                    let (route, port, family) = (c.route, c.port, c.family);
                    let req = Request { path: &path, query: query.as_deref(), accept: accept.as_deref() };
                    match self.handler.answer(route, port, family, &req) {
                        Answer::Now(reply) => self.out(token, reply, head),
                        Answer::Later(make) => match self.later(token, make, head) {
                            Ok(()) => false,
                            Err(reply) => self.out(token, reply, head),
                        },
                    }
                }
                Err(_) => true,
            }
        };
        if done {
            self.close(token);
        }
    }

    /// Has `make` make connection `token`'s answer: `Ok` when asked (the connection waits),
    /// else the reply to send at once (another later answer under way).
    fn later(&mut self, token: Token, make: Box<dyn FnOnce(Responder)>, head: bool) -> Result<(), Reply> {
        if self.desk.ask(token, make, head).is_err() {
            return Err(Reply::new(503, TEXT, self.handler.busy()));
        }
        if let Some(Slot::Conn(c)) = self.slots.get_mut(&token) {
            c.deadline = Instant::now() + self.desk.answer_wait();
        }
        Ok(())
    }

    /// Sets `reply` as the connection's answer and writes what the socket takes; true when
    /// the connection is done with.
    fn out(&mut self, token: Token, reply: Reply, head: bool) -> bool {
        if let Some(Slot::Conn(c)) = self.slots.get_mut(&token) {
            c.out = Some((encode(reply, !head), 0));
        }
        self.respond(token)
    }

    /// Answers a connection that waited for its later answer, allowing `write` to write it.
    fn deliver(&mut self, token: Token, reply: Reply, head: bool, write: Duration) {
        if let Some(Slot::Conn(c)) = self.slots.get_mut(&token) {
            c.deadline = Instant::now() + write;
        }
        if self.out(token, reply, head) {
            self.close(token);
        }
    }

    /// Writes the answer set as far as the socket takes it; true when the connection is
    /// done with. One answered before its request was read whole lingers.
    fn respond(&mut self, token: Token) -> bool {
        let Some(Slot::Conn(c)) = self.slots.get_mut(&token) else { return true };
        match write_out(c) {
            // The rest goes when the socket takes it.
            Ok(false) => self.poll.registry().reregister(&mut c.stream, token, Interest::WRITABLE).is_err(),
            Ok(true) if c.linger => {
                drain(c) || self.poll.registry().reregister(&mut c.stream, token, Interest::READABLE).is_err()
            }
            _ => true,
        }
    }

    pub(super) fn close(&mut self, token: Token) {
        if let Some(Slot::Conn(mut c)) = self.slots.remove(&token) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.conns -= 1;
            self.desk.closed(token);
        }
    }

    /// Drops connections past their deadline: those whose request or answer has not gone
    /// through in time. One that waited too long for a later answer is told to try again.
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
                Some(head) => {
                    let reply = Reply::new(503, TEXT, self.handler.late(self.desk.answer_wait()));
                    self.deliver(token, reply, head, REQUEST_TIMEOUT);
                }
                None => self.close(token),
            }
        }
    }
}
