//! Trace events gathered into packets. The kernel reports a marked packet rule by rule, in
//! every table it passes, under one id; a packet of the tracer's own starts with the
//! tracer's marking rule and ends where the tracer's last chains see it (delivered here, or
//! leaving by an interface other than loopback) or where a rule drops it. A packet that
//! ends otherwise (queued, stolen, unroutable) is let go after [`LINGER`] of silence. The
//! kernel derives the id from the packet's flow hash, which forwarding may compute anew: an
//! event of an unknown id whose headers carry an open packet's client (source address and
//! port, protocol; masquerading comes later) continues that packet under its new id.

use crate::netlink::trace::{TraceEvent, TraceKind, Verdict};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How long a packet's events may pause before it is taken as ended.
pub const LINGER: Duration = Duration::from_millis(200);

/// The loopback interface's index, in every network namespace.
const LOOPBACK: u32 = 1;

/// One traced packet: its events, in the order the kernel sent them.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Its events.
    pub events: Vec<TraceEvent>,
    /// When its first event was read.
    pub started: Instant,
    /// When its last event was read.
    last: Instant,
    /// It left by loopback, so it comes back in.
    looped: bool,
    /// Its client and protocol, as its first event's headers say.
    client: Option<(SocketAddr, u8)>,
}

/// The headers an event carries (in the first event of each base chain): source,
/// destination, protocol.
pub fn headers(e: &TraceEvent) -> Option<(SocketAddr, SocketAddr, u8)> {
    let (n, t) = (&e.network_header, &e.transport_header);
    let (proto, src, dst) = match n.first()? >> 4 {
        4 => (*n.get(9)?, address(n.get(12..16)?)?, address(n.get(16..20)?)?),
        6 => (*n.get(6)?, address(n.get(8..24)?)?, address(n.get(24..40)?)?),
        _ => return None,
    };
    let port = |at: usize| t.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
    Some((SocketAddr::new(src, port(0)?), SocketAddr::new(dst, port(2)?), proto))
}

/// An address from its 4 or 16 bytes.
pub fn address(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(b).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Gathers the events of the packets that `table` (the tracer's) marked.
#[derive(Debug)]
pub struct Follower {
    table: String,
    open: HashMap<u32, Packet>,
    /// A new id an open packet goes on under → its first id.
    aliases: HashMap<u32, u32>,
}

impl Follower {
    /// A follower of the packets marked by the tracer's table `table`.
    pub fn new(table: &str) -> Follower {
        Follower { table: table.to_string(), open: HashMap::new(), aliases: HashMap::new() }
    }

    /// Takes `events` read at `now`; returns the packets they ended, in the order they ended.
    pub fn feed(&mut self, events: Vec<TraceEvent>, now: Instant) -> Vec<Packet> {
        let mut ended = Vec::new();
        for e in events {
            let ours = e.table == self.table;
            let Some(id) = self.id_of(&e) else {
                // Another tracer's packet, or the rest of one already ended.
                if ours && e.kind == TraceKind::Rule && marks(&e.chain) {
                    let client = headers(&e).map(|(src, _, proto)| (src, proto));
                    let p = Packet { events: vec![e.clone()], started: now, last: now, looped: false, client };
                    self.open.insert(e.id, p);
                }
                continue;
            };
            let Some(p) = self.open.get_mut(&id) else { continue };
            p.last = now;
            // Only a chain's first event names the interfaces.
            if ours && e.chain == "postrouting" && e.oif.is_some() {
                p.looped = e.oif == Some(LOOPBACK);
            }
            let last = ours && ends_here(&e, p.looped) || dropped(&e);
            p.events.push(e);
            if last && let Some(p) = self.open.remove(&id) {
                self.aliases.retain(|_, to| *to != id);
                ended.push(p);
            }
        }
        ended
    }

    /// The first id of the open packet `e` belongs to, if any: its own, one it was given
    /// before, or that of the open packet whose client its headers carry.
    fn id_of(&mut self, e: &TraceEvent) -> Option<u32> {
        if self.open.contains_key(&e.id) {
            return Some(e.id);
        }
        if let Some(id) = self.aliases.get(&e.id) {
            return Some(*id);
        }
        let (src, _, proto) = headers(e)?;
        let (id, _) = self.open.iter().find(|(_, p)| p.client == Some((src, proto)))?;
        self.aliases.insert(e.id, *id);
        Some(*id)
    }

    /// The packets silent for [`LINGER`] by `now`, ended.
    pub fn expire(&mut self, now: Instant) -> Vec<Packet> {
        let quiet: Vec<u32> = self.open.iter().filter(|(_, p)| now - p.last >= LINGER).map(|(id, _)| *id).collect();
        self.aliases.retain(|_, to| !quiet.contains(to));
        let mut out: Vec<Packet> = quiet.into_iter().filter_map(|id| self.open.remove(&id)).collect();
        out.sort_by_key(|p| p.started);
        out
    }

    /// How many packets are being followed.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.open.len()
    }
}

/// Whether the tracer's chain `chain` is one that marks (the others only see).
fn marks(chain: &str) -> bool {
    chain == "prerouting" || chain == "output"
}

/// Whether the tracer's last chains saw the packet for the last time (their policy is their
/// last event): delivered here, or leaving by an interface other than loopback (which
/// brings it back in).
fn ends_here(e: &TraceEvent, looped: bool) -> bool {
    matches!(e.kind, TraceKind::Policy(_)) && (e.chain == "input" || (e.chain == "postrouting" && !looped))
}

/// Whether the event drops the packet.
fn dropped(e: &TraceEvent) -> bool {
    matches!(e.kind, TraceKind::Policy(Verdict::Drop)) || e.verdict == Some(Verdict::Drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: u32, table: &str, chain: &str, kind: TraceKind, verdict: Option<Verdict>) -> TraceEvent {
        TraceEvent {
            id,
            family: 2,
            table: table.into(),
            chain: chain.into(),
            handle: None,
            kind,
            verdict,
            network_header: vec![],
            transport_header: vec![],
            iif: None,
            oif: Some(2),
            mark: None,
        }
    }

    #[test]
    fn a_packet_runs_from_the_marking_rule_to_the_last_chain_or_a_drop() {
        let mut f = Follower::new("t");
        let now = Instant::now();
        let accept = TraceKind::Policy(Verdict::Accept);
        let ended = f.feed(
            vec![
                event(1, "other", "x", TraceKind::Rule, Some(Verdict::Continue)),
                event(1, "t", "prerouting", TraceKind::Rule, Some(Verdict::Continue)),
                event(2, "t", "prerouting", TraceKind::Rule, Some(Verdict::Continue)),
                event(1, "kube-nftproxy", "nat-prerouting", TraceKind::Rule, Some(Verdict::Jump("services".into()))),
                event(2, "kube-nftproxy", "reject-chain", TraceKind::Rule, Some(Verdict::Drop)),
                event(1, "t", "postrouting", TraceKind::Rule, Some(Verdict::Continue)),
                event(1, "t", "postrouting", accept.clone(), None),
                event(3, "kube-nftproxy", "nat-prerouting", TraceKind::Rule, Some(Verdict::Continue)),
            ],
            now,
        );
        let chains: Vec<Vec<&str>> =
            ended.iter().map(|p| p.events.iter().map(|e| e.chain.as_str()).collect()).collect();
        assert_eq!(
            chains,
            [vec!["prerouting", "reject-chain"], vec!["prerouting", "nat-prerouting", "postrouting", "postrouting"]]
        );
        assert_eq!(f.open(), 0, "an unmarked packet is not followed");
        // Only the first event of a chain names the interface.
        let mut looped = event(4, "t", "postrouting", TraceKind::Rule, Some(Verdict::Continue));
        looped.oif = Some(LOOPBACK);
        let mut end = event(4, "t", "postrouting", accept.clone(), None);
        end.oif = None;
        f.feed(vec![event(4, "t", "output", TraceKind::Rule, Some(Verdict::Continue)), looped, end], now);
        assert_eq!(f.open(), 1, "through loopback it comes back in");
        let back = f.feed(
            vec![event(4, "t", "prerouting", TraceKind::Rule, None), event(4, "t", "input", accept.clone(), None)],
            now,
        );
        assert_eq!(back.len(), 1, "and ends where it is delivered");
        // Forwarding may give the packet another id: its client tells it.
        let with_headers = |id, table: &str, chain: &str, kind| {
            let mut e = event(id, table, chain, kind, Some(Verdict::Continue));
            e.network_header =
                [&[0x45, 0, 0, 60, 0, 0, 0, 0, 64, 6, 0, 0][..], &[10, 0, 0, 1], &[10, 96, 0, 5]].concat();
            e.transport_header = [0x9c, 0x40, 0, 80].to_vec();
            e
        };
        f.feed(vec![with_headers(6, "t", "prerouting", TraceKind::Rule)], now);
        let moved = f.feed(
            vec![
                with_headers(7, "kube-nftproxy", "nat-postrouting", TraceKind::Rule),
                event(7, "t", "postrouting", accept.clone(), None),
            ],
            now,
        );
        assert_eq!(moved.len(), 1, "the packet went on under its new id");
        assert_eq!(moved[0].events.len(), 3);
        assert_eq!(headers(&moved[0].events[0]).map(|h| h.0.port()), Some(40000));
        f.feed(vec![event(5, "t", "output", TraceKind::Rule, Some(Verdict::Continue))], now);
        assert!(f.expire(now).is_empty());
        assert_eq!(f.expire(now + LINGER).len(), 1, "let go after a silence");
    }
}
