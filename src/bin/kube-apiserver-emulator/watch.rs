//! Watch streams: the initial replay (or state, ending a WatchList's with its bookmark), live
//! events filtered with selector transitions, bookmarks, the timeout, and the stream-level
//! faults (drop, stall, expire, malformed, garbage, a WatchList cut before its bookmark).

mod faults;

use crate::conn::Conn;
use crate::history::{Change, Event, Obj};
use crate::http::{LAST_CHUNK, chunk, status_body, write_stream_head};
use crate::proto;
use crate::resources::Resource;
use crate::selectors::Selector;
use crate::store::{Store, parse, stored};
use crate::watchers::{DropMode, Subscription, WatchMsg};
use kube_nftproxy::kube::protobuf;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// Buffered output is flushed once it grows past this, even while more events wait.
const FLUSH_AT: usize = 256 * 1024;
/// How often a stalled stream checks whether its client gave up.
const STALL_POLL: Duration = Duration::from_millis(200);
/// How much of a never-ending line is sent before the connection is cut.
pub const ENDLESS_LIMIT: usize = 256 << 20;

/// A parsed watch request.
pub struct WatchRequest {
    /// Watched resource.
    pub res: &'static Resource,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Filter.
    pub selector: Selector,
    /// Replay after this resourceVersion; `None`: start with the current state.
    pub since: Option<u64>,
    /// Send bookmarks.
    pub bookmarks: bool,
    /// End the stream after this long.
    pub timeout: Duration,
    /// Stream protobuf frames instead of JSON lines.
    pub proto: bool,
    /// A WatchList's: the initial state ends with the bookmark saying so (bookmarks allowed).
    pub initial_events: bool,
    /// A WatchList cut (a fault): the connection breaks after this many initial objects, or
    /// at the end of them if fewer, before the bookmark.
    pub cut_after: Option<usize>,
    /// A trickle (a fault): the stream's body written one byte at a time with this pause.
    pub pace: Option<Duration>,
}

/// Whether the connection can serve another request after the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The stream ended with its terminating chunk.
    KeepAlive,
    /// The connection must be dropped.
    Close,
}

/// Work queued for the stream, in order.
enum Item {
    Msg(WatchMsg),
    Bookmark(u64),
    Finish(u64),
}

struct Stream<'a> {
    store: &'a Store,
    req: &'a WatchRequest,
    conn: &'a mut Conn,
    sub: Subscription,
    out: Vec<u8>,
    pending: VecDeque<Item>,
    held: VecDeque<WatchMsg>,
    stalled: bool,
    last_rv: u64,
}

/// Serves one watch on `conn` until it ends.
pub fn serve(store: &Store, conn: &mut Conn, req: &WatchRequest, interval: Duration) -> io::Result<End> {
    let (sub, initial, start_rv) = {
        let mut g = store.lock();
        let initial = match req.since {
            None => Ok(Initial::State(g.objects.get(req.res.plural).map(|m| m.values().cloned().collect()))),
            Some(rv) => g.history.since(req.res.plural, rv).map(Initial::Replay),
        };
        match initial {
            Ok(i) => (g.watchers.add(req.res.plural), i, g.rv),
            Err(too_old) => {
                drop(g);
                write_stream_head(&mut conn.io, proto::stream_type(req.proto))?;
                let mut out = Vec::new();
                chunk(&mut out, &error_event(&too_old.to_string(), req.proto));
                out.extend_from_slice(LAST_CHUNK);
                conn.io.write_all(&out)?;
                conn.io.flush()?;
                return Ok(End::KeepAlive);
            }
        }
    };
    let mut s = Stream {
        store,
        req,
        conn,
        sub,
        out: Vec::new(),
        pending: VecDeque::new(),
        held: VecDeque::new(),
        stalled: false,
        last_rv: start_rv,
    };
    let result = s.run(initial, interval);
    store.lock().watchers.remove(s.sub.id);
    result
}

enum Initial {
    State(Option<Vec<Obj>>),
    Replay(Vec<std::sync::Arc<Event>>),
}

impl Stream<'_> {
    fn run(&mut self, initial: Initial, interval: Duration) -> io::Result<End> {
        write_stream_head(&mut self.conn.io, proto::stream_type(self.req.proto))?;
        match initial {
            Initial::State(objs) => {
                let mut sent = 0;
                for o in objs.unwrap_or_default() {
                    if self.req.cut_after.is_some_and(|n| sent >= n) {
                        break;
                    }
                    if self.selected(&o) {
                        self.send("ADDED", &o)?;
                        sent += 1;
                    }
                    if self.out.len() > FLUSH_AT {
                        self.flush()?;
                    }
                }
                if self.req.cut_after.is_some() {
                    return self.drop_stream(DropMode::Abrupt);
                }
                if self.req.initial_events && self.req.bookmarks {
                    let rv = self.last_rv;
                    self.bookmark(rv, true);
                }
            }
            Initial::Replay(events) => {
                for e in events {
                    self.event(&e)?;
                }
            }
        }
        self.flush()?;
        let deadline = Instant::now() + self.req.timeout;
        let mut next_bookmark = Instant::now() + interval;
        loop {
            if let Some(end) = self.drain()? {
                return Ok(end);
            }
            let now = Instant::now();
            let wake = if self.stalled { now + STALL_POLL } else { deadline.min(next_bookmark) };
            match self.sub.rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(msg) => self.pending.push_back(Item::Msg(msg)),
                Err(RecvTimeoutError::Timeout) if self.stalled => {
                    if !self.conn.peer_alive() {
                        return Ok(End::Close);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let rv = self.catch_up();
                    if Instant::now() >= deadline {
                        self.pending.push_back(Item::Finish(rv));
                    } else if self.req.bookmarks {
                        self.pending.push_back(Item::Bookmark(rv));
                    }
                    next_bookmark = Instant::now() + interval;
                }
                Err(RecvTimeoutError::Disconnected) => return self.expire(),
            }
        }
    }

    /// Moves every message already queued into `pending` under the store lock and returns the
    /// current resourceVersion: once those are sent, a bookmark at it is truthful.
    fn catch_up(&mut self) -> u64 {
        let g = self.store.lock();
        while let Ok(m) = self.sub.rx.try_recv() {
            self.pending.push_back(Item::Msg(m));
        }
        g.rv
    }

    /// Handles everything pending plus whatever else is already queued, then flushes.
    fn drain(&mut self) -> io::Result<Option<End>> {
        loop {
            let item = match self.pending.pop_front() {
                Some(i) => i,
                None => match self.sub.rx.try_recv() {
                    Ok(m) => Item::Msg(m),
                    Err(_) => break,
                },
            };
            if let Some(end) = self.item(item)? {
                return Ok(Some(end));
            }
            if self.out.len() > FLUSH_AT {
                self.flush()?;
            }
        }
        if self.sub.overflowed.load(Ordering::SeqCst) && !self.stalled {
            // The registry cut this watch off; what is queued was sent, now tell the client.
            return self.expire().map(Some);
        }
        self.flush()?;
        Ok(None)
    }

    fn item(&mut self, item: Item) -> io::Result<Option<End>> {
        match item {
            Item::Bookmark(rv) if !self.stalled => self.bookmark(rv, false),
            Item::Finish(rv) => {
                if self.req.bookmarks {
                    self.bookmark(rv, false);
                }
                return self.finish().map(Some);
            }
            Item::Bookmark(_) => {}
            Item::Msg(WatchMsg::Drop(mode)) => return self.drop_stream(mode).map(Some),
            Item::Msg(WatchMsg::Expire) => return self.expire().map(Some),
            Item::Msg(WatchMsg::Stall(on)) => {
                self.stalled = on;
                if !on {
                    let held: Vec<WatchMsg> = self.held.drain(..).collect();
                    self.pending.extend(held.into_iter().map(Item::Msg));
                }
            }
            Item::Msg(m) if self.stalled => {
                if self.held.len() >= crate::watchers::BACKLOG {
                    self.sub.overflowed.store(true, Ordering::SeqCst);
                } else {
                    self.held.push_back(m);
                }
            }
            Item::Msg(WatchMsg::Event(e)) => self.event(&e)?,
            Item::Msg(WatchMsg::Malformed) => self.malformed()?,
            Item::Msg(WatchMsg::Foreign(ns, name)) => self.foreign(&ns, &name)?,
            Item::Msg(WatchMsg::Garbage) if self.req.proto => {
                chunk(&mut self.out, &proto::framed(b"\x0fthis is not protobuf"))
            }
            Item::Msg(WatchMsg::Garbage) => chunk(&mut self.out, b"this is not JSON {\n"),
            Item::Msg(WatchMsg::Endless) => return self.endless().map(Some),
        }
        Ok(None)
    }

    fn selected(&self, o: &Obj) -> bool {
        self.req.namespace.as_ref().is_none_or(|ns| *ns == o.facts.namespace) && self.req.selector.matches(&o.facts)
    }

    /// Sends one write as the filtered watch sees it: an object leaving the selection is
    /// DELETED, one entering it is ADDED.
    fn event(&mut self, e: &Event) -> io::Result<()> {
        self.last_rv = e.rv;
        let before = e.prev.as_ref().is_some_and(|p| self.selected(p));
        let now = e.change != Change::Deleted && self.selected(&e.object);
        match (before, now) {
            (true, false) if e.change == Change::Deleted => self.send("DELETED", &e.object),
            (true, false) => {
                let mut last = e.prev.as_ref().map(|p| parse(&p.body)).unwrap_or_default();
                last["metadata"]["resourceVersion"] = e.rv.to_string().into();
                self.send("DELETED", &stored(self.req.res, e.rv, &last))
            }
            (false, true) => self.send("ADDED", &e.object),
            (true, true) => self.send("MODIFIED", &e.object),
            (false, false) => Ok(()),
        }
    }

    /// Sends one object's event, as a protobuf frame or a JSON line.
    fn send(&mut self, kind: &str, o: &Obj) -> io::Result<()> {
        let res = self.req.res;
        match self.req.proto.then(|| proto::enveloped(res, o)).flatten() {
            Some(object) => {
                chunk(&mut self.out, &protobuf::watch_frame(kind, object));
                Ok(())
            }
            None => self.line(kind, &o.with_kind(res)),
        }
    }

    /// Sends a protobuf event whose object is `raw`, a message of the watched kind.
    fn frame(&mut self, kind: &str, raw: Vec<u8>) {
        let res = self.req.res;
        chunk(&mut self.out, &protobuf::watch_frame(kind, protobuf::seal(&res.api_version(), res.kind, raw)));
    }

    fn line(&mut self, kind: &str, object: &[u8]) -> io::Result<()> {
        let mut ev = Vec::with_capacity(object.len() + 32);
        ev.extend_from_slice(format!(r#"{{"type":"{kind}","object":"#).as_bytes());
        ev.extend_from_slice(object);
        ev.extend_from_slice(b"}\n");
        chunk(&mut self.out, &ev);
        Ok(())
    }

    /// A bookmark at `rv`; `initial_events_end` ends a WatchList's initial events.
    fn bookmark(&mut self, rv: u64, initial_events_end: bool) {
        chunk(&mut self.out, &crate::watchlist::bookmark(self.req.res, rv, initial_events_end, self.req.proto));
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(pace) = self.req.pace {
            for byte in std::mem::take(&mut self.out) {
                self.conn.io.write_all(&[byte])?;
                self.conn.io.flush()?;
                std::thread::sleep(pace);
            }
        }
        if !self.out.is_empty() {
            self.conn.io.write_all(&self.out)?;
            self.out.clear();
        }
        self.conn.io.flush()
    }

    fn finish(&mut self) -> io::Result<End> {
        self.out.extend_from_slice(LAST_CHUNK);
        self.flush()?;
        Ok(End::KeepAlive)
    }

    fn expire(&mut self) -> io::Result<End> {
        let (_, compacted) = self.store.versions();
        let msg = format!("too old resource version: {} ({})", self.last_rv, compacted.max(self.last_rv + 1));
        chunk(&mut self.out, &error_event(&msg, self.req.proto));
        self.finish()
    }
}

/// A watch ERROR event carrying a 410 Expired Status.
fn error_event(message: &str, proto: bool) -> Vec<u8> {
    if proto {
        return protobuf::watch_frame("ERROR", protobuf::status_body(410, "Expired", message));
    }
    format!("{{\"type\":\"ERROR\",\"object\":{}}}\n", status_body(410, "Expired", message)).into_bytes()
}
