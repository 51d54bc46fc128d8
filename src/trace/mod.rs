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
use follow::Follower;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The trace socket's receive buffer: what a burst may queue before events are lost.
const TRACE_BUFFER: usize = 4 << 20;

/// How long one read of the trace socket waits, which bounds how late a stop is seen.
const POLL: Duration = Duration::from_millis(20);

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
    /// The tracer's table goes when this returns.
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
        let (started, mut reported, mut lost) = (Instant::now(), 0u64, false);
        while !stop.load(Ordering::SeqCst)
            && opts.timeout.is_none_or(|t| started.elapsed() < t)
            && opts.count.is_none_or(|n| reported < n)
        {
            let now = Instant::now();
            let mut ended = match self.socket.traces(POLL)? {
                Traces::Events(events) => follower.feed(events, now),
                Traces::Overrun => {
                    if !std::mem::replace(&mut lost, true) {
                        log::warn!("the kernel dropped trace events (a burst filled the buffer): some go unreported");
                    }
                    Vec::new()
                }
            };
            ended.extend(follower.expire(now));
            for packet in ended.iter().take(opts.count.map_or(usize::MAX, |n| (n - reported) as usize)) {
                let ctx = match &mut ctx {
                    Some(c) => c,
                    None => {
                        ctx.insert(loading.recv().map_err(|_| TraceError::Table("the context thread ended".into()))?)
                    }
                };
                let Some(c) = report::connection(packet, &table, ctx) else { continue };
                let text = if opts.json { format!("{}\n", show::json(&c)) } else { show::text(&c) };
                out.write_all(text.as_bytes())?;
                out.flush()?;
                reported += 1;
            }
        }
        Ok(reported)
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
