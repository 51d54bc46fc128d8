//! `kube-nftproxy trace`: what the kernel did with real packets. A small table of the
//! tracer's own (`table`) marks the new connections its flags select for nf_tables' packet
//! trace; the kernel reports each rule they pass over netlink (`netlink::trace`); the
//! events are gathered per packet (`follow`) and read in the proxy's words against its rules
//! as the kernel holds them and the objects they were made from (`context`, `report`,
//! `why`), then printed (`show`). The proxy's own tables are only read, never touched.

mod context;
mod follow;
mod report;
mod reporter;
mod show;
pub mod table;
mod why;

pub use context::Objects;
pub use report::{Connection, Hop};
pub use table::Selector;

use crate::config::Config;
use crate::netlink::Socket;
use crate::netlink::trace::Traces;
use follow::Follower;
use reporter::Reporter;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The trace socket's receive buffer: what a burst may queue before events are lost.
const TRACE_BUFFER: usize = 4 << 20;

/// How long one read of the trace socket waits, which bounds how late a stop is seen.
const POLL: Duration = Duration::from_millis(20);

/// How long the end waits for the kernel's side to be read, to report what ended.
const LAST_WAIT: Duration = Duration::from_secs(2);

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
    /// What ended before the tracer stops is reported; its table goes when this returns.
    pub fn follow(
        self,
        opts: &Options,
        objects: Objects,
        cfg: Config,
        stop: &AtomicBool,
        out: &mut dyn Write,
    ) -> Result<u64, TraceError> {
        let mut loader = context::load(objects, cfg)?;
        let mut follower = Follower::new(self.table());
        let mut reporter = Reporter::new(self.table(), opts.json, out);
        let (started, mut buf) = (Instant::now(), Vec::new());
        while !stop.load(Ordering::SeqCst)
            && opts.timeout.is_none_or(|t| started.elapsed() < t)
            && opts.count.is_none_or(|n| reporter.count < n)
        {
            let now = Instant::now();
            match self.socket.traces(&mut buf, POLL)? {
                Traces::Events(events) => reporter.queue(follower.feed(events, now), now),
                Traces::Overrun => {
                    follower.lost();
                    log::warn!("the kernel dropped trace events (a burst filled the buffer): some reports are partial");
                }
            }
            reporter.queue(follower.expire(now), now);
            loader.poll(Duration::ZERO);
            reporter.report(&mut loader, opts.count, false)?;
        }
        // What ended is reported, with what is known by now.
        loader.poll(LAST_WAIT);
        reporter.report(&mut loader, opts.count, true)?;
        Ok(reporter.count)
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
