//! The `localhost-nodeports` thread: one listener on `127.0.0.1` or `::1` per wanted
//! localhost NodePort, all in one poll; each accepted connection gets an endpoint here and a
//! thread of its own to carry its bytes ([`super::conn`]). A port another process holds is
//! tried again every few seconds, and counted each time, never failing the proxy.

use super::conn::{self, Carry};
use super::{Port, Spec, Wanted};
use crate::metrics::Metrics;
use crate::model::Family;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

/// The longest the thread sleeps: how soon it notices a stop and retries ports.
const TICK: Duration = Duration::from_secs(1);
/// How often a port that could not be bound is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// The waker's token; listeners take the others.
const WAKE: Token = Token(usize::MAX);

/// The handle the sync loop keeps: where it hands what is wanted.
pub struct Proxy {
    wanted: Sender<Wanted>,
    waker: Arc<Waker>,
}

impl Proxy {
    /// Starts the thread; it ends, closing every listener and connection, once `stop` is set.
    pub fn start(metrics: Option<Arc<Metrics>>, stop: Arc<AtomicBool>) -> io::Result<Proxy> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let (tx, rx) = mpsc::channel();
        let state = State {
            poll,
            metrics,
            rx,
            stop,
            open: BTreeMap::new(),
            failed: BTreeMap::new(),
            next: 0,
            full: Full::default(),
        };
        state.count();
        std::thread::Builder::new().name("localhost-nodeports".into()).spawn(move || state.run())?;
        Ok(Proxy { wanted: tx, waker })
    }

    /// Serves `wanted` from now on: listeners open and close to match, and an open one's new
    /// endpoints take the next connection.
    pub fn want(&self, wanted: Wanted) {
        if self.wanted.send(wanted).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// One open listener.
struct Listener {
    socket: TcpListener,
    token: Token,
    /// What it serves and its affinity pin, shared with nothing but this thread.
    pick: Pick,
    /// Set when the listener closes: its connections end, as upstream's do.
    closed: Arc<AtomicBool>,
}

/// Endpoint choice for one listener: random, or the pinned one under ClientIP affinity.
pub(super) struct Pick {
    spec: Spec,
    pinned: Option<(SocketAddr, Instant)>,
}

impl Pick {
    /// Picks for `spec`, nothing pinned yet.
    pub(super) fn new(spec: Spec) -> Pick {
        Pick { spec, pinned: None }
    }

    /// The endpoint of a connection accepted at `now`; none without endpoints.
    pub(super) fn next(&mut self, now: Instant) -> Option<SocketAddr> {
        let endpoints = &self.spec.endpoints;
        if let (Some(timeout), Some((ep, used))) = (self.spec.affinity, self.pinned)
            && now.duration_since(used) <= timeout
            && endpoints.contains(&ep)
        {
            self.pinned = Some((ep, now));
            return Some(ep);
        }
        let ep = *endpoints.get(fastrand::usize(..endpoints.len().max(1)))?;
        self.pinned = self.spec.affinity.map(|_| (ep, now));
        Some(ep)
    }

    /// Takes `spec`'s endpoints for the next connection; a changed timeout drops the pin.
    pub(super) fn update(&mut self, spec: &Spec) {
        if self.spec.affinity != spec.affinity {
            self.pinned = None;
        }
        self.spec = spec.clone();
    }
}

struct State {
    poll: Poll,
    metrics: Option<Arc<Metrics>>,
    rx: Receiver<Wanted>,
    stop: Arc<AtomicBool>,
    open: BTreeMap<Port, Listener>,
    /// Ports wanted but not bound: what they serve and when to try again.
    failed: BTreeMap<Port, (Spec, Instant)>,
    next: usize,
    full: Full,
}

impl State {
    fn run(mut self) {
        let mut events = Events::with_capacity(64);
        while !self.stop.load(Ordering::SeqCst) {
            if let Err(e) = self.poll.poll(&mut events, Some(TICK)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::warn!("localhost NodePorts: waiting for connections: {e}");
                    std::thread::sleep(TICK);
                }
                continue;
            }
            if let Some(wanted) = self.rx.try_iter().last() {
                self.reconcile(&wanted);
            }
            let ready: BTreeSet<Token> = events.iter().map(|e| e.token()).filter(|t| *t != WAKE).collect();
            for l in self.open.values_mut().filter(|l| ready.contains(&l.token)) {
                accept_all(l, &mut self.full);
            }
            self.retry_failed();
        }
        for (_, l) in std::mem::take(&mut self.open) {
            l.closed.store(true, Ordering::SeqCst);
        }
        self.count();
    }

    /// Opens, updates and closes listeners to match `wanted`.
    fn reconcile(&mut self, wanted: &Wanted) {
        let gone: Vec<Port> = self.open.keys().filter(|k| !wanted.contains_key(k)).copied().collect();
        for key in gone {
            if let Some(mut l) = self.open.remove(&key) {
                log::debug!("localhost NodePort {} closed ({})", address(key), l.pick.spec.service);
                l.closed.store(true, Ordering::SeqCst);
                let _ = self.poll.registry().deregister(&mut l.socket);
            }
        }
        self.failed.retain(|k, _| wanted.contains_key(k));
        for (key, spec) in wanted {
            if let Some(l) = self.open.get_mut(key) {
                l.pick.update(spec);
            } else if let Some((old, _)) = self.failed.get_mut(key) {
                *old = spec.clone();
            } else {
                self.open_one(*key, spec.clone());
            }
        }
        self.count();
    }

    /// Binds one port; a failure is logged once, counted, and tried again after [`RETRY`].
    fn open_one(&mut self, key: Port, spec: Spec) {
        let token = Token(self.next);
        self.next += 1;
        let bound = std::net::TcpListener::bind(address(key)).and_then(|std| {
            std.set_nonblocking(true)?;
            let mut socket = TcpListener::from_std(std);
            self.poll.registry().register(&mut socket, token, Interest::READABLE)?;
            Ok(socket)
        });
        match bound {
            Ok(socket) => {
                if self.failed.remove(&key).is_some() {
                    log::info!("localhost NodePort {} now served ({})", address(key), spec.service);
                }
                let pick = Pick::new(spec);
                self.open.insert(key, Listener { socket, token, pick, closed: Arc::new(AtomicBool::new(false)) });
            }
            Err(e) => {
                if let Some(m) = &self.metrics {
                    m.localhost_nodeport_failures.with_label_values(&[key.0.label()]).inc();
                }
                if !self.failed.contains_key(&key) {
                    log::warn!(
                        "localhost NodePort {} of {} cannot listen: {e}; trying again every {RETRY:?}",
                        address(key),
                        spec.service
                    );
                }
                self.failed.insert(key, (spec, Instant::now() + RETRY));
            }
        }
    }

    fn retry_failed(&mut self) {
        let now = Instant::now();
        let due: Vec<(Port, Spec)> =
            self.failed.iter().filter(|(_, (_, at))| *at <= now).map(|(k, (s, _))| (*k, s.clone())).collect();
        if !due.is_empty() {
            for (key, spec) in due {
                self.open_one(key, spec);
            }
            self.count();
        }
    }

    /// The listeners gauge, per family.
    fn count(&self) {
        let Some(m) = &self.metrics else { return };
        for f in Family::ALL {
            let n = self.open.keys().filter(|(family, _)| *family == f).count();
            m.localhost_nodeports.with_label_values(&[f.label()]).set(n as i64);
        }
    }
}

/// Where a localhost NodePort listens.
fn address((family, port): Port) -> SocketAddr {
    match family {
        Family::V4 => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        Family::V6 => SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
    }
}

/// Connections turned away at [`conn::MAX_CONNECTIONS`]: logged once a minute at most.
#[derive(Default)]
struct Full {
    turned_away: u64,
    logged: Option<Instant>,
}

impl Full {
    fn note(&mut self, service: &str) {
        self.turned_away += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            log::warn!(
                "localhost NodePorts: {} connections at once, the most carried; {} turned away since the last \
                 warning (the latest to {service})",
                conn::MAX_CONNECTIONS,
                self.turned_away
            );
            self.turned_away = 0;
            self.logged = Some(Instant::now());
        }
    }
}

/// Takes every waiting connection (the poll says a listener is ready once per arrival).
fn accept_all(l: &mut Listener, full: &mut Full) {
    loop {
        match l.socket.accept() {
            Ok((client, _)) => {
                let Some(endpoint) = l.pick.next(Instant::now()) else { return };
                let carry = Carry { endpoint, service: l.pick.spec.service.clone(), closed: l.closed.clone() };
                if !conn::spawn(std::net::TcpStream::from(client), carry) {
                    full.note(&l.pick.spec.service);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors and the like: the connection waits in the backlog for
                // the next arrival's wake-up, as upstream's accept loop logs and goes on.
                log::debug!("localhost NodePort {}: accepting: {e}", l.pick.spec.service);
                return;
            }
        }
    }
}
