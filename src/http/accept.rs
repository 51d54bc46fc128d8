//! Accepting connections on the `http` thread's listeners, however few descriptors are
//! left. mio's readiness is edge-triggered: a listener not accepted from until it would
//! block gets no new edge, and once its backlog is full no connection completes to make
//! one, so `/healthz` would stay silent after a flood for good. Instead a refused accept is
//! logged and retried on a timer; a connection still silent makes room, taken from the
//! kind of listener that holds the most, so a crowd on one cannot starve the others; and a
//! descriptor held in reserve takes connections off a full backlog when nothing can.

use super::conn::Conn;
use super::event_loop::{Key, Loop, REQUEST_TIMEOUT, Slot};
use super::handler::Handler;
use crate::model::Family;
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

/// How soon a listener that could not be accepted from is tried again.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How often refused accepts are logged at most.
const REFUSAL_REPORT: Duration = Duration::from_secs(10);

/// The most connections taken off a backlog and closed at one go with the reserve (a
/// listen backlog's length); the rest wait for the next try.
const SHED_AT_ONCE: usize = 128;

/// The connections one kind of listener holds, and its oldest silent one (since when).
type Share = (usize, Option<(Instant, Token)>);

/// Accepts refused, logged at most every [`REFUSAL_REPORT`].
#[derive(Debug, Default)]
pub(super) struct Refusals {
    last: Option<Instant>,
    unlogged: u64,
}

impl Refusals {
    /// Notes that accepting on `key` failed with `e`, and logs it unless logged lately.
    fn note(&mut self, key: Key, e: &std::io::Error) {
        self.unlogged += 1;
        let now = Instant::now();
        if self.last.is_some_and(|at| now < at + REFUSAL_REPORT) {
            return;
        }
        log::warn!(
            "cannot accept a connection to {} on {}: {e} ({} refused since the last report); \
             making room and retrying",
            key.1.what(),
            key.0,
            self.unlogged
        );
        self.last = Some(now);
        self.unlogged = 0;
    }
}

/// One descriptor held back (`/dev/null`), let go only to take a connection off a listener's
/// backlog when the process has no other descriptor, and taken again at once.
#[derive(Debug)]
pub(super) struct Reserve(Option<File>);

impl Reserve {
    /// Takes the reserve descriptor (none where `/dev/null` cannot be opened).
    pub(super) fn new() -> Reserve {
        let mut r = Reserve(None);
        r.retake();
        r
    }

    /// Lets the descriptor go; false if it was not held.
    fn release(&mut self) -> bool {
        self.0.take().is_some()
    }

    /// Takes it again (it stays let go if another thread took the descriptor meanwhile, or
    /// none was free at start: then it is taken at the next try).
    fn retake(&mut self) {
        if self.0.is_none() {
            self.0 = File::open("/dev/null").ok();
        }
    }
}

/// Whether `e` says the process or system has no descriptor (or buffer) left for a socket.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

impl<H: Handler> Loop<H> {
    /// Accepts on `key` until its backlog is empty; when that cannot be done (descriptors
    /// out, nothing to make room), the listener is tried again after [`ACCEPT_RETRY`].
    pub(super) fn accept(&mut self, key: Key) {
        // Room is made only of connections that had a chance to send their request: one
        // just taken off the backlog would be closed for the next.
        let pass = Instant::now();
        let mut shed = 0;
        loop {
            let Some((_, listener)) = self.listeners.get(&key) else { return };
            match listener.accept() {
                Ok((stream, _)) => self.take(key, stream, pass),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.backlogged.remove(&key);
                    return;
                }
                Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::ConnectionAborted) => {}
                Err(e) => {
                    self.refusals.note(key, &e);
                    if out_of_descriptors(&e) && self.evict_silent(pass) {
                        continue;
                    }
                    if out_of_descriptors(&e) && shed < SHED_AT_ONCE && self.shed(key) {
                        shed += 1;
                        continue;
                    }
                    self.backlogged.insert(key);
                    self.accept_at.get_or_insert_with(|| Instant::now() + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    /// Tries again the listeners that could not be accepted from, when it is time.
    pub(super) fn retry_accepts(&mut self) {
        if self.accept_at.is_none_or(|at| Instant::now() < at) {
            return;
        }
        self.accept_at = None;
        // A reserve lost to another thread's descriptor is taken again once one is free.
        self.reserve.retake();
        let keys: Vec<Key> = self.backlogged.iter().copied().collect();
        for key in keys {
            self.accept(key);
        }
    }

    /// Takes `stream`, accepted on `key`, as a connection, making room at the cap the
    /// budget allows of a connection from before `pass`; without room (every connection
    /// busy answering, or just taken) it is closed.
    fn take(&mut self, key: Key, mut stream: TcpStream, pass: Instant) {
        let cap = self.budget.connections(self.listeners.len());
        if self.conns >= cap && !self.evict_silent(pass) {
            return;
        }
        let local = stream.local_addr().map_or(key.0.ip(), |a| a.ip().to_canonical());
        let token = self.token();
        if self.poll.registry().register(&mut stream, token, Interest::READABLE).is_ok() {
            let (route, port, family, since) = (key.1, key.0.port(), Family::of(&local), Instant::now());
            let deadline = since + REQUEST_TIMEOUT;
            let (read, out, linger, draining) = (Vec::new(), None, false, false);
            let c = Conn { stream, route, port, family, since, deadline, read, out, linger, draining };
            self.slots.insert(token, Slot::Conn(c));
            self.conns += 1;
        }
    }

    /// Closes the oldest connection, taken before `before`, that has sent no whole request,
    /// of the kind of listener (health, metrics, health-check ports) holding the most
    /// connections: a crowd makes room out of its own share. False if there is none.
    fn evict_silent(&mut self, before: Instant) -> bool {
        let mut kinds: BTreeMap<&'static str, Share> = BTreeMap::new();
        for (token, slot) in &self.slots {
            let Slot::Conn(c) = slot else { continue };
            let (held, oldest) = kinds.entry(c.route.what()).or_default();
            *held += 1;
            let silent = c.out.is_none() && !self.desk.waits(*token) && c.since < before;
            if silent && oldest.is_none_or(|(since, _)| c.since < since) {
                *oldest = Some((c.since, *token));
            }
        }
        let victim =
            kinds.into_values().filter_map(|(held, oldest)| Some((held, oldest?))).max_by_key(|(held, _)| *held);
        victim.map(|(_, (_, token))| self.close(token)).is_some()
    }

    /// Takes one connection off `key`'s backlog and closes it, the reserve descriptor let go
    /// for it; false without a reserve or a connection waiting.
    fn shed(&mut self, key: Key) -> bool {
        if !self.reserve.release() {
            return false;
        }
        let shed = self.listeners.get(&key).is_some_and(|(_, l)| l.accept().is_ok());
        self.reserve.retake();
        shed
    }
}
