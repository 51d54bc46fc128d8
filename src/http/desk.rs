//! The `http` thread's side of the answers made elsewhere, on another thread: it hands the maker a [`Responder`] and takes the answer back when the
//! maker rings the loop's waker. One such answer at a time is made or written: each can be a
//! whole ruleset, and many at once from clients that read slowly would hold one copy each.

use super::Reply;
use super::handler::Responder;
use mio::{Token, Waker};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

/// How long a client waits for its answer before it is told to try again: long enough for a
/// maker that answers between other work taking seconds (the proxy's sync thread, between
/// syncs).
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// How long writing such an answer out may take (a whole ruleset, to a client far away).
pub const WRITE_WAIT: Duration = Duration::from_secs(60);

/// Another later answer is being made or written: this one is not asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// Answers being made elsewhere, and the connection waiting for one.
pub struct Desk {
    waker: Arc<Waker>,
    tx: Sender<(u64, Reply)>,
    rx: Receiver<(u64, Reply)>,
    last_id: u64,
    /// How long a client waits for its answer ([`ANSWER_WAIT`]).
    wait: Duration,
    /// The connection an answer is being made or written for.
    busy: Option<Token>,
    /// While its answer is being made: the ask's id, and whether the request was HEAD.
    waiting: Option<(u64, bool)>,
}

impl Desk {
    /// A desk whose answers are announced by `waker`.
    pub fn new(waker: Arc<Waker>) -> Desk {
        let (tx, rx) = channel();
        Desk { waker, tx, rx, last_id: 0, wait: ANSWER_WAIT, busy: None, waiting: None }
    }

    /// The same desk, with clients waiting `wait` for their answer (tests wait less).
    #[cfg(test)]
    pub fn waiting_at_most(self, wait: Duration) -> Desk {
        Desk { wait, ..self }
    }

    /// How long a client waits for its answer before it is told to try again.
    pub fn answer_wait(&self) -> Duration {
        self.wait
    }

    /// Has `make` make the answer for connection `token` (`head`: a HEAD request); `Busy`,
    /// `make` dropped uncalled, when another is under way (the handler words the reply).
    pub fn ask(&mut self, token: Token, make: Box<dyn FnOnce(Responder)>, head: bool) -> Result<(), Busy> {
        if self.busy.is_some() {
            return Err(Busy);
        }
        self.last_id += 1;
        self.busy = Some(token);
        self.waiting = Some((self.last_id, head));
        make(Responder::new(self.last_id, self.tx.clone(), self.waker.clone()));
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

    /// Whether connection `token` waits for its answer to be made.
    pub fn waits(&self, token: Token) -> bool {
        self.busy == Some(token) && self.waiting.is_some()
    }

    /// Gives up waiting for `token`'s answer: whether the request was HEAD, if it waited
    /// (the handler words the reply sent instead).
    pub fn give_up(&mut self, token: Token) -> Option<bool> {
        let (_, head) = self.waiting.filter(|_| self.busy == Some(token))?;
        self.waiting = None;
        Some(head)
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
    use super::super::event_loop::{Loop, WAKER};
    use super::super::handler::{Answer, Handler};
    use super::super::{Request, Route, TEXT};
    use super::*;
    use crate::http::test_client::{read, send};
    use crate::model::Family;
    use mio::Poll;
    use std::collections::BTreeSet;
    use std::io::Write;
    use std::net::SocketAddr;
    use std::sync::mpsc::Receiver;
    use std::time::Instant;

    /// An answer made later, its [`Responder`] sent to `made` for the test to answer.
    fn later(made: &Sender<Responder>) -> Box<dyn FnOnce(Responder)> {
        let made = made.clone();
        Box::new(move |r| made.send(r).expect("the test keeps the receiver"))
    }

    #[test]
    fn one_answer_at_a_time_and_a_late_answer_is_dropped() {
        let poll = Poll::new().expect("poll");
        let mut d = Desk::new(Arc::new(Waker::new(poll.registry(), Token(0)).expect("waker")));
        let (made, asked) = channel();
        let (a, b) = (Token(7), Token(8));
        assert!(d.ask(a, later(&made), false).is_ok());
        assert_eq!(d.ask(b, later(&made), false), Err(Busy), "one at a time");
        assert!(d.waits(a) && !d.waits(b));
        let first: Vec<Responder> = asked.try_iter().collect();
        assert_eq!(first.len(), 1, "the refused one is never asked");
        // Given up on: the answer that comes after is not the connection's any more.
        assert_eq!(d.give_up(a), Some(false));
        first.into_iter().for_each(|r| r.answer(Reply::new(200, TEXT, "late")));
        assert!(d.answered().is_none());
        assert!(d.ask(b, later(&made), true).is_err(), "still busy writing the 503 to the first");
        d.closed(a);
        assert!(d.ask(b, later(&made), true).is_ok());
        asked.try_iter().for_each(|r| r.answer(Reply::new(200, TEXT, "made")));
        let (token, reply, head) = d.answered().expect("the answer");
        assert_eq!((token, reply.body.as_str(), head), (b, "made", true));
        assert!(!d.waits(b), "answered: being written now");
    }

    /// A handler answering paths under `/later` later, through the test, and the rest now.
    struct Fake {
        made: Sender<Responder>,
    }

    impl Handler for Fake {
        type News = ();

        fn news(&mut self, _: ()) -> BTreeSet<(SocketAddr, Route)> {
            BTreeSet::new()
        }

        fn answer(&self, _: Route, _: u16, _: Family, req: &Request<'_>) -> Answer {
            if req.path.starts_with("/later") {
                Answer::Later(later(&self.made))
            } else {
                Answer::Now(Reply::new(200, TEXT, "now\n"))
            }
        }

        fn busy(&self) -> String {
            "busy making another\n".into()
        }

        fn late(&self, waited: Duration) -> String {
            format!("not made within {waited:?}\n")
        }
    }

    /// An `http` loop serving [`Fake`] on a free port of 127.0.0.1, waiting `wait` for its
    /// later answers, whose responders come out of the receiver; it ends when the returned
    /// sender is dropped and the waker rung.
    fn serve(wait: Duration) -> (SocketAddr, Receiver<Responder>, Sender<()>, Arc<Waker>) {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let poll = Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).expect("waker"));
        let desk = Desk::new(waker.clone()).waiting_at_most(wait);
        let (made, asked) = channel();
        let mut l = Loop::new(poll, vec![(addr, Route::Metrics)], Fake { made }, desk);
        let (tx, rx) = channel();
        std::thread::spawn(move || l.run(&rx));
        (addr, asked, tx, waker)
    }

    #[test]
    fn a_client_waiting_for_a_later_answer_holds_up_no_one_and_gets_one_whole_answer() {
        let (addr, asked, _stop, _waker) = serve(ANSWER_WAIT);
        let mut first = send(addr, "/later/a");
        let responder = asked.recv_timeout(Duration::from_secs(5)).expect("asked of the handler");
        // More from the waiting client must not be taken for another request.
        write!(first, "GET /later/b HTTP/1.1\r\nHost: x\r\n\r\n").expect("more");
        let busy = read(send(addr, "/later/b"));
        assert!(busy.starts_with("HTTP/1.1 503 ") && busy.ends_with("busy making another\n"), "{busy}");
        let now = read(send(addr, "/now"));
        assert!(now.starts_with("HTTP/1.1 200 ") && now.ends_with("now\n"), "others are served meanwhile: {now}");
        std::thread::sleep(Duration::from_millis(50));
        assert!(asked.try_recv().is_err(), "asked once");
        responder.answer(Reply::pieces(200, TEXT, "# made\n", vec![b"the ruleset\n".to_vec()]));
        let answer = read(first);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("Content-Length: 19\r\nConnection: close\r\n\r\n# made\nthe ruleset\n"), "{answer}");
    }

    #[test]
    fn a_later_answer_not_made_in_time_is_a_503_and_frees_the_desk() {
        let (addr, asked, _stop, _waker) = serve(Duration::from_millis(200));
        let start = Instant::now();
        let late = read(send(addr, "/later/a"));
        assert!(late.starts_with("HTTP/1.1 503 ") && late.ends_with("not made within 200ms\n"), "{late}");
        assert!(start.elapsed() < Duration::from_secs(3), "waited {:?}", start.elapsed());
        // The answer that comes after goes nowhere; the next client is asked for anew.
        asked.try_iter().for_each(|r| r.answer(Reply::new(200, TEXT, "too late")));
        let next = send(addr, "/later/b");
        asked.recv_timeout(Duration::from_secs(5)).expect("asked anew").answer(Reply::new(200, TEXT, "in time"));
        let answer = read(next);
        assert!(answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("in time"), "{answer}");
    }
}
