//! The `http` thread's side of the debug views: it asks the sync thread for one through the
//! inbox and takes the answer back when the sync thread rings the loop's waker. One view at
//! a time is made or written: each can be a whole ruleset, and many at once from clients
//! that read slowly would hold one copy each.

use super::{Reply, TEXT};
use crate::debug::{Ask, View};
use crate::inbox::Inbox;
use mio::{Token, Waker};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

/// How long a client waits for the sync thread's answer before it is told to try again:
/// the sync thread answers between syncs, and a full sync of a large cluster takes seconds.
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// How long writing a debug view out may take (a whole ruleset, to a client far away).
pub const WRITE_WAIT: Duration = Duration::from_secs(60);

/// Debug views asked of the sync thread, and the connection waiting for one.
pub struct Desk {
    inbox: Arc<Inbox>,
    waker: Arc<Waker>,
    tx: Sender<(u64, Reply)>,
    rx: Receiver<(u64, Reply)>,
    last_id: u64,
    /// How long a client waits for its view ([`ANSWER_WAIT`]).
    wait: Duration,
    /// The connection a view is being made or written for.
    busy: Option<Token>,
    /// While its view is being made: the ask's id, and whether the request was HEAD.
    waiting: Option<(u64, bool)>,
}

impl Desk {
    /// A desk asking through `inbox`, its answers announced by `waker`.
    pub fn new(inbox: Arc<Inbox>, waker: Arc<Waker>) -> Desk {
        let (tx, rx) = channel();
        Desk { inbox, waker, tx, rx, last_id: 0, wait: ANSWER_WAIT, busy: None, waiting: None }
    }

    /// The same desk, with clients waiting `wait` for their view (tests wait less).
    #[cfg(test)]
    pub fn waiting_at_most(self, wait: Duration) -> Desk {
        Desk { wait, ..self }
    }

    /// How long a client waits for its view before it is told to try again.
    pub fn answer_wait(&self) -> Duration {
        self.wait
    }

    /// Asks for `view` for connection `token` (`head`: a HEAD request); the reply to send
    /// at once instead when another view is under way.
    pub fn ask(&mut self, token: Token, view: View, head: bool) -> Result<(), Reply> {
        if self.busy.is_some() {
            let busy = "another debug view is being made or sent; try again in a moment\n";
            return Err(Reply::new(503, TEXT, busy));
        }
        self.last_id += 1;
        self.busy = Some(token);
        self.waiting = Some((self.last_id, head));
        self.inbox.ask(Ask::new(view, self.last_id, self.tx.clone(), self.waker.clone()));
        Ok(())
    }

    /// The waiting connection's answer, if it has come, and whether the request was HEAD.
    /// Answers to asks given up on are dropped here.
    pub fn answered(&mut self) -> Option<(Token, Reply, bool)> {
        while let Ok((id, reply)) = self.rx.try_recv() {
            if let (Some(token), Some((asked, head))) = (self.busy, self.waiting)
                && asked == id
            {
                self.waiting = None;
                return Some((token, reply, head));
            }
        }
        None
    }

    /// Whether connection `token` waits for its view to be made.
    pub fn waits(&self, token: Token) -> bool {
        self.busy == Some(token) && self.waiting.is_some()
    }

    /// Gives up waiting for `token`'s view: the reply to send instead, and whether the
    /// request was HEAD.
    pub fn give_up(&mut self, token: Token) -> Option<(Reply, bool)> {
        let (_, head) = self.waiting.filter(|_| self.busy == Some(token))?;
        self.waiting = None;
        let late = format!(
            "the sync thread did not answer within {:?} (a long sync may be under way); try again\n",
            self.wait
        );
        Some((Reply::new(503, TEXT, late), head))
    }

    /// Connection `token` is closed: whatever was made for it is no longer wanted.
    pub fn closed(&mut self, token: Token) {
        if self.busy == Some(token) {
            self.busy = None;
            self.waiting = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Route;
    use super::super::event_loop::{Loop, WAKER};
    use super::*;
    use crate::health::Health;
    use crate::metrics::Metrics;
    use mio::Poll;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Instant;

    fn desk(inbox: &Arc<Inbox>) -> (Poll, Desk) {
        let poll = Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), Token(0)).expect("waker"));
        (poll, Desk::new(inbox.clone(), waker))
    }

    #[test]
    fn one_view_at_a_time_and_a_late_answer_is_dropped() {
        let inbox = Arc::new(Inbox::default());
        let (_poll, mut d) = desk(&inbox);
        let (a, b) = (Token(7), Token(8));
        assert!(d.ask(a, View::Ruleset, false).is_ok());
        assert_eq!(d.ask(b, View::Ruleset, false).map_err(|r| r.code), Err(503), "one at a time");
        assert!(d.waits(a) && !d.waits(b));
        let asked = inbox.wait(std::time::Instant::now()).asks;
        assert_eq!(asked.len(), 1);
        // Given up on: the answer that comes after is not the connection's any more.
        assert_eq!(d.give_up(a).map(|(r, head)| (r.code, head)), Some((503, false)));
        asked.into_iter().for_each(|ask| ask.answer(Reply::new(200, TEXT, "late")));
        assert!(d.answered().is_none());
        assert!(d.ask(b, View::Ruleset, true).is_err(), "still busy writing the 503 to the first");
        d.closed(a);
        assert!(d.ask(b, View::Ruleset, true).is_ok());
        for ask in inbox.wait(std::time::Instant::now()).asks {
            ask.answer(Reply::new(200, TEXT, "made"));
        }
        let (token, reply, head) = d.answered().expect("the answer");
        assert_eq!((token, reply.body.as_str(), head), (b, "made", true));
        assert!(!d.waits(b), "answered: being written now");
    }

    /// An `http` loop serving metrics on a free port of 127.0.0.1, asking `inbox` for the
    /// views and waiting `wait` for them; it ends when the returned sender is dropped and
    /// the waker rung.
    fn serve(inbox: &Arc<Inbox>, wait: Duration) -> (SocketAddr, Sender<crate::health::services::Wanted>, Arc<Waker>) {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let poll = Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).expect("waker"));
        let desk = Desk::new(inbox.clone(), waker.clone()).waiting_at_most(wait);
        let metrics = Some(Arc::new(Metrics::new().expect("metrics")));
        let health = Arc::new(Health::new(Duration::from_secs(60)));
        let mut l = Loop::new(poll, vec![(addr, Route::Metrics)], health, metrics, desk);
        let (tx, rx) = channel();
        std::thread::spawn(move || l.run(&rx));
        (addr, tx, waker)
    }

    /// A connection to `addr` that has sent `request` for `path`.
    fn send(addr: SocketAddr, path: &str) -> TcpStream {
        let start = Instant::now();
        let mut s = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(e) if start.elapsed() > Duration::from_secs(2) => panic!("connect {addr}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
        s
    }

    fn read(mut s: TcpStream) -> String {
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("read the answer");
        answer
    }

    #[test]
    fn a_client_waiting_for_a_view_holds_up_no_one_and_gets_one_whole_answer() {
        let inbox = Arc::new(Inbox::default());
        let (addr, _stop, _waker) = serve(&inbox, ANSWER_WAIT);
        let mut first = send(addr, "/debug/ruleset");
        let mut asks = inbox.wait(Instant::now() + Duration::from_secs(5)).asks;
        assert_eq!(asks.len(), 1, "asked of the sync thread");
        // More from the waiting client must not be taken for another request.
        write!(first, "GET /debug/services HTTP/1.1\r\nHost: x\r\n\r\n").expect("more");
        let busy = read(send(addr, "/debug/services"));
        assert!(busy.starts_with("HTTP/1.1 503 ") && busy.contains("another debug view"), "{busy}");
        let metrics = read(send(addr, "/metrics"));
        assert!(metrics.starts_with("HTTP/1.1 200 "), "the loop serves others meanwhile: {metrics}");
        std::thread::sleep(Duration::from_millis(50));
        asks.remove(0).answer(Reply::pieces(200, TEXT, "# made\n", vec![b"the ruleset\n".to_vec()]));
        let answer = read(first);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("Content-Length: 19\r\nConnection: close\r\n\r\n# made\nthe ruleset\n"), "{answer}");
    }

    #[test]
    fn a_view_not_made_in_time_is_a_503_and_frees_the_desk() {
        let inbox = Arc::new(Inbox::default());
        let (addr, _stop, _waker) = serve(&inbox, Duration::from_millis(200));
        let start = Instant::now();
        let late = read(send(addr, "/debug/ruleset"));
        assert!(late.starts_with("HTTP/1.1 503 ") && late.contains("did not answer within 200ms"), "{late}");
        assert!(start.elapsed() < Duration::from_secs(3), "waited {:?}", start.elapsed());
        // The answer that comes after goes nowhere; the next client is asked for anew.
        for ask in inbox.wait(Instant::now()).asks {
            ask.answer(Reply::new(200, TEXT, "too late"));
        }
        let next = send(addr, "/debug/services");
        for ask in inbox.wait(Instant::now() + Duration::from_secs(5)).asks {
            assert_eq!(ask.view, View::Services(None));
            ask.answer(Reply::new(200, TEXT, "in time"));
        }
        let answer = read(next);
        assert!(answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("in time"), "{answer}");
    }
}
