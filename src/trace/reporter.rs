//! Ended packets on their way out: each waits for what it is read against (the kernel's
//! side at least; the objects too, for up to [`OBJECTS_WAIT`], so that `explain` can be
//! asked), is read into a [`Connection`], and is written once: a TCP SYN or a UDP datagram
//! sent again before any reply is still a new connection's packet to conntrack, but not a
//! new connection to report.

use super::context::Loader;
use super::follow::Packet;
use super::report::{self, Connection};
use super::{TraceError, show};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long an ended packet waits for the objects before it is reported without `explain`.
const OBJECTS_WAIT: Duration = Duration::from_secs(3);

/// How long a connection's first packet sent again is not reported again: as long as TCP
/// retries a SYN (its sixth retry comes after 127 s).
const AGAIN_WITHIN: Duration = Duration::from_secs(130);

/// The packets to report, and what was.
pub struct Reporter<'a> {
    table: String,
    json: bool,
    out: &'a mut dyn Write,
    pending: VecDeque<(Packet, Instant)>,
    recent: HashMap<(SocketAddr, SocketAddr, &'static str), Instant>,
    /// How many connections were reported.
    pub count: u64,
}

impl<'a> Reporter<'a> {
    /// A reporter of the packets the tracer's table `table` marked, to `out`.
    pub fn new(table: &str, json: bool, out: &'a mut dyn Write) -> Reporter<'a> {
        let (pending, recent) = (VecDeque::new(), HashMap::new());
        Reporter { table: table.to_string(), json, out, pending, recent, count: 0 }
    }

    /// Queues packets that ended at `now`.
    pub fn queue(&mut self, ended: Vec<Packet>, now: Instant) {
        self.pending.extend(ended.into_iter().map(|p| (p, now)));
    }

    /// Reports the queued packets that are ready (all of them when `last`), until `limit`
    /// connections were reported.
    pub fn report(&mut self, loader: &mut Loader, limit: Option<u64>, last: bool) -> Result<(), TraceError> {
        let Some(ctx) = loader.ctx.as_mut() else { return Ok(()) };
        let now = Instant::now();
        while let Some((_, ended)) = self.pending.front() {
            if limit.is_some_and(|n| self.count >= n) || !(last || ctx.loaded || now - *ended >= OBJECTS_WAIT) {
                break;
            }
            let Some((packet, _)) = self.pending.pop_front() else { break };
            let Some(c) = report::connection(&packet, &self.table, ctx) else { continue };
            if self.again(&c, now) {
                continue;
            }
            let text = if self.json { format!("{}\n", show::json(&c)) } else { show::text(&c) };
            self.out.write_all(text.as_bytes()).and_then(|()| self.out.flush()).map_err(TraceError::Output)?;
        }
        Ok(())
    }

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
