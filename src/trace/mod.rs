//! `kube-nftproxy trace`: what the kernel did with real packets. A small table of the
//! tracer's own (`table`) marks the new connections its flags select for nf_tables' packet
//! trace; the kernel reports each rule they pass over netlink (`netlink::trace`); the
//! events are gathered per packet (`follow`) and read in the proxy's words against its rules
//! as the kernel holds them and the objects they were made from (`context`, `report`,
//! `why`), then printed (`show`). The proxy's own tables are only read, never touched.

mod context;
mod follow;
mod report;
mod show;
pub mod table;
mod why;

pub use context::Objects;
pub use report::{Connection, Hop};
pub use table::Selector;

use crate::config::Config;
use crate::netlink::Socket;
use crate::netlink::trace::Traces;
use follow::{Follower, Packet};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The trace socket's receive buffer: what a burst may queue before events are lost.
const TRACE_BUFFER: usize = 4 << 20;

/// How long one read of the trace socket waits, which bounds how late a stop is seen.
const POLL: Duration = Duration::from_millis(20);

/// How long a connection's first packet sent again is not reported again.
const AGAIN_WITHIN: Duration = Duration::from_secs(10);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A flag is wrong.
    #[error("{0}")]
    Flag(String),
    /// The tracer's table could not be put in place.
    #[error("putting the tracer's table in place: {0}")]
    Table(String),
    /// The trace events could not be read.
    #[error("reading packet traces: {0}")]
    Listen(#[from] std::io::Error),
    /// The reports could not be written.
    #[error("writing the report: {0}")]
    Output(std::io::Error),
    /// The thread reading what packets are read against ended before it was done.
    #[error("the thread reading the proxy's rules and the objects ended")]
    Context,
}

/// What to trace, and for how long.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Which packets.
    pub select: Selector,
    /// Stop after this many connections.
    pub count: Option<u64>,
    /// Stop after this long.
    pub timeout: Option<Duration>,
    /// One JSON object per line rather than text.
    pub json: bool,
}

/// The tracer, its table in place and its socket listening.
pub struct Tracer {
    socket: Socket,
    installed: table::Installed,
}

/// Puts the tracer's table for `select` in place in this thread's network namespace, and
/// listens: every connection that matches from now on is reported.
pub fn start(select: &Selector) -> Result<Tracer, TraceError> {
    // Subscribed first: no packet marked from here on goes unreported.
    let socket = Socket::tracer(TRACE_BUFFER)?;
    let installed = table::install(select)?;
    Ok(Tracer { socket, installed })
}

/// Traces as [`Tracer::follow`] does, once a line saying `tracing` is on stderr.
pub fn run(
    opts: &Options,
    objects: Objects,
    cfg: Config,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<u64, TraceError> {
    let tracer = start(&opts.select)?;
    eprintln!("tracing new connections{} (table {}); Ctrl-C stops", described(&opts.select), tracer.table());
    tracer.follow(opts, objects, cfg, stop, out)
}

impl Tracer {
    /// The tracer's table's name.
    pub fn table(&self) -> &str {
        &self.installed.table
    }

    /// Reports each connection to `out` until `stop` is set, `--timeout` passes or `--count`
    /// connections were reported; returns how many were. `objects` (read on a thread of its
    /// own, in this thread's network namespace) are what `explain` answers from, under `cfg`.
    /// Packets that end before they are loaded wait for them; the tracer's table goes when
    /// this returns.
    pub fn follow(
        self,
        opts: &Options,
        objects: Objects,
        cfg: Config,
        stop: &AtomicBool,
        out: &mut dyn Write,
    ) -> Result<u64, TraceError> {
        let loading = context::load(objects, cfg)?;
        let (mut ctx, table) = (None, self.installed.table.clone());
        let mut follower = Follower::new(&table);
        let mut ended: VecDeque<Packet> = VecDeque::new();
        let mut reported = Reported::default();
        let (started, mut buf) = (Instant::now(), Vec::new());
        while !stop.load(Ordering::SeqCst)
            && opts.timeout.is_none_or(|t| started.elapsed() < t)
            && opts.count.is_none_or(|n| reported.count < n)
        {
            let now = Instant::now();
            match self.socket.traces(&mut buf, POLL)? {
                Traces::Events(events) => ended.extend(follower.feed(events, now)),
                Traces::Overrun => {
                    follower.lost();
                    log::warn!("the kernel dropped trace events (a burst filled the buffer): some reports are partial");
                }
            }
            ended.extend(follower.expire(now));
            if ctx.is_none() {
                match loading.try_recv() {
                    Ok(c) => ctx = Some(c),
                    Err(mpsc::TryRecvError::Empty) => continue,
                    Err(mpsc::TryRecvError::Disconnected) => return Err(TraceError::Context),
                }
            }
            let Some(ctx) = ctx.as_mut() else { continue };
            while let Some(packet) = ended.pop_front() {
                if opts.count.is_some_and(|n| reported.count >= n) {
                    break;
                }
                let Some(c) = report::connection(&packet, &table, ctx) else { continue };
                if reported.again(&c, now) {
                    continue;
                }
                let text = if opts.json { format!("{}\n", show::json(&c)) } else { show::text(&c) };
                out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(TraceError::Output)?;
            }
        }
        Ok(reported.count)
    }
}

/// The connections reported, and the most recent of them: a TCP SYN or a UDP datagram sent
/// again before any reply is still a new connection's packet to conntrack, but not a new
/// connection to report.
#[derive(Default)]
struct Reported {
    count: u64,
    recent: HashMap<(SocketAddr, SocketAddr, &'static str), Instant>,
}

impl Reported {
    /// Whether `c` was reported lately; if not, it is counted now.
    fn again(&mut self, c: &Connection, now: Instant) -> bool {
        self.recent.retain(|_, at| now.duration_since(*at) < AGAIN_WITHIN);
        if self.recent.insert((c.source, c.destination, c.protocol), now).is_some() {
            return true;
        }
        self.count += 1;
        false
    }
}

/// The selection in words, for the `tracing` line.
fn described(s: &Selector) -> String {
    let end = |(ip, port): (std::net::IpAddr, Option<u16>)| match port {
        Some(p) => std::net::SocketAddr::new(ip, p).to_string(),
        None => ip.to_string(),
    };
    let mut out = String::new();
    if let Some(f) = s.from {
        out.push_str(&format!(" from {}", end(f)));
    }
    if let Some(t) = s.to {
        out.push_str(&format!(" to {}", end(t)));
    }
    if let Some(p) = s.protocol {
        out.push_str(&format!(" over {p}"));
    }
    out
}
