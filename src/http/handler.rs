//! What the `http` thread serves, handed in by whoever starts it: a [`Handler`] answers each
//! request, at once or later ([`Answer`]), and names the listeners wanted besides the fixed
//! ones as news comes. A later answer is made elsewhere (the proxy's debug views, by the sync
//! thread) and handed back through a [`Responder`], while the loop serves its other clients.

use super::{Reply, Request, Route};
use crate::model::Family;
use mio::Waker;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

/// Everything the loop serves; moved to and owned by the `http` thread.
pub trait Handler: Send + 'static {
    /// What the owner sends while the loop runs (the proxy: the health-check ports wanted).
    type News: Send + 'static;

    /// Takes the newest news (older news not yet taken is dropped); returns the listeners
    /// wanted besides the fixed ones, which the loop opens and closes to match.
    fn news(&mut self, news: Self::News) -> BTreeSet<(SocketAddr, Route)>;

    /// The answer to `req`, made on a listener of `route` at port `port` and reached over
    /// `family`.
    fn answer(&self, route: Route, port: u16, family: Family, req: &Request<'_>) -> Answer;

    /// Told after each change of listeners how many distinct health-check ports are listened
    /// on (the proxy counts them in a gauge).
    fn listening(&self, _health_check_ports: usize) {}

    /// The body of the 503 a client gets while another later answer is made or written: the
    /// handler knows what its later answers are and who makes them.
    fn busy(&self) -> String;

    /// The body of the 503 a client gets when its later answer has not come within `waited`.
    fn late(&self, waited: Duration) -> String;
}

/// A [`Handler`]'s answer to one request.
pub enum Answer {
    /// This reply, now.
    Now(Reply),
    /// A reply made elsewhere: called with the [`Responder`] to hand it back through, unless
    /// another later answer is being made or written (one at a time: each can be a whole
    /// ruleset); the client is then told to try again and this is dropped uncalled.
    Later(Box<dyn FnOnce(Responder)>),
}

/// Hands one later answer back to the `http` thread, once: the id the loop knows it by, the
/// channel to the loop, and the waker that makes it look.
#[derive(Debug)]
pub struct Responder {
    id: u64,
    to: Sender<(u64, Reply)>,
    waker: Arc<Waker>,
}

impl Responder {
    /// A responder for answer `id`, sent through `to` with a ring of `waker`.
    pub(super) fn new(id: u64, to: Sender<(u64, Reply)>, waker: Arc<Waker>) -> Responder {
        Responder { id, to, waker }
    }

    /// Hands the answer over. The loop may have given up (timed out, or the `http` thread
    /// ended): the answer is then dropped, which is all that is left to do with it.
    pub fn answer(self, reply: Reply) {
        if self.to.send((self.id, reply)).is_ok() {
            let _ = self.waker.wake();
        }
    }
}
