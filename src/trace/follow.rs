//! Trace events gathered into packets. The kernel reports a marked packet rule by rule, in
//! every table it passes, under one id; a packet of the tracer's own starts with the
//! tracer's marking rule and ends where the tracer's last chains see it (delivered here, or
//! leaving by an interface other than loopback) or where a rule drops it. A packet that
//! ends otherwise (queued, stolen, unroutable) is let go, incomplete, after [`LINGER`] of
//! silence. The kernel derives the id from the packet, its flow hash and the interface it
//! came in on, which forwarding may compute anew and loopback changes: an event of an
//! unknown id continues an open packet when it comes back in through loopback with the
//! headers the packet left with, or when its headers carry the packet's client (source
//! address and port, protocol; masquerading comes later) and it is not a new marking.

use crate::netlink::attr::address;
use crate::netlink::trace::{TraceEvent, TraceKind, Verdict};
use std::collections::HashMap;
use std::net::SocketAddr;
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
    /// Its number among the packets followed, in the order they were marked.
    seq: u64,
    /// When its last event was read.
    last: Instant,
    /// It left by loopback, so it comes back in.
    looped: bool,
    /// Its client and protocol, as its first event's headers say.
    client: Option<(SocketAddr, u8)>,
    /// Its headers as the tracer's postrouting chain saw them (after every NAT).
    left_as: Option<Header>,
    /// It ended where it was delivered or left, or was dropped (not let go after a silence).
    pub complete: bool,
    /// The kernel dropped trace events while it was followed: some of its may be missing.
    pub lost: bool,
}

/// Source, destination and protocol number, as a packet's headers carry them.
pub type Header = (SocketAddr, SocketAddr, u8);

/// The headers an event carries (in the first event of each base chain): source,
/// destination, protocol.
pub fn headers(e: &TraceEvent) -> Option<Header> {
    let (n, t) = (&e.network_header, &e.transport_header);
    let (proto, src, dst) = match n.first()? >> 4 {
        4 => (*n.get(9)?, address(n.get(12..16)?)?, address(n.get(16..20)?)?),
        6 => (*n.get(6)?, address(n.get(8..24)?)?, address(n.get(24..40)?)?),
        _ => return None,
    };
    let port = |at: usize| t.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
    Some((SocketAddr::new(src, port(0)?), SocketAddr::new(dst, port(2)?), proto))
}

/// Gathers the events of the packets that `table` (the tracer's) marked.
#[derive(Debug)]
pub struct Follower {
    table: String,
    open: HashMap<u32, Packet>,
    /// A new id an open packet goes on under → its first id.
    aliases: HashMap<u32, u32>,
    /// Packets marked so far.
    marked: u64,
}

impl Follower {
    /// A follower of the packets marked by the tracer's table `table`.
    pub fn new(table: &str) -> Follower {
        Follower { table: table.to_string(), open: HashMap::new(), aliases: HashMap::new(), marked: 0 }
    }

    /// Takes `events` read at `now`; returns the packets they ended, in the order they ended.
    pub fn feed(&mut self, events: Vec<TraceEvent>, now: Instant) -> Vec<Packet> {
        let mut ended = Vec::new();
        for e in events {
            let ours = e.table == self.table;
            let Some(id) = self.id_of(&e) else {
                // Another tracer's packet, or the rest of one already ended.
                if ours && new_mark(&e) {
                    let client = headers(&e).map(|(src, _, proto)| (src, proto));
                    let p = Packet {
                        events: vec![e.clone()],
                        seq: self.marked,
                        last: now,
                        looped: false,
                        client,
                        left_as: None,
                        complete: false,
                        lost: false,
                    };
                    self.marked += 1;
                    self.open.insert(e.id, p);
                }
                continue;
            };
            let Some(p) = self.open.get_mut(&id) else { continue };
            p.last = now;
            // Only a chain's first event names the interfaces and carries the headers.
            if ours && e.chain == "postrouting" && e.oif.is_some() {
                p.looped = e.oif == Some(LOOPBACK);
                p.left_as = headers(&e);
            }
            let last = ours && ends_here(&e, p.looped) || dropped(&e);
            p.events.push(e);
            if last && let Some(mut p) = self.open.remove(&id) {
                self.aliases.retain(|_, to| *to != id);
                p.complete = true;
                ended.push(p);
            }
        }
        ended
    }

    /// The kernel dropped events: every packet followed now may miss some.
    pub fn lost(&mut self) {
        self.open.values_mut().for_each(|p| p.lost = true);
    }

    /// The first id of the open packet `e` belongs to, if any: its own, one it was given
    /// before, that of a packet coming back in through loopback as it left, or that of the
    /// packet whose client its headers carry (unless `e` marks a new connection).
    fn id_of(&mut self, e: &TraceEvent) -> Option<u32> {
        if self.open.contains_key(&e.id) {
            return Some(e.id);
        }
        if let Some(id) = self.aliases.get(&e.id) {
            return Some(*id);
        }
        let h = headers(e)?;
        let back = self.open.iter().find(|(_, p)| e.iif == Some(LOOPBACK) && p.looped && p.left_as == Some(h));
        let found = match back {
            Some((id, _)) => *id,
            None if e.table == self.table && new_mark(e) => return None,
            // Two open flows of one client (a UDP socket sending to two places): the older,
            // whose packet went first.
            None => *self.open.iter().filter(|(_, p)| p.client == Some((h.0, h.2))).min_by_key(|(_, p)| p.seq)?.0,
        };
        self.aliases.insert(e.id, found);
        Some(found)
    }

    /// The packets silent for [`LINGER`] by `now`, ended.
    pub fn expire(&mut self, now: Instant) -> Vec<Packet> {
        let quiet: Vec<u32> = self.open.iter().filter(|(_, p)| now - p.last >= LINGER).map(|(id, _)| *id).collect();
        self.aliases.retain(|_, to| !quiet.contains(to));
        let mut out: Vec<Packet> = quiet.into_iter().filter_map(|id| self.open.remove(&id)).collect();
        out.sort_by_key(|p| p.seq);
        out
    }

    /// How many packets are being followed.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.open.len()
    }
}

/// Whether `e` is the tracer's marking rule taking a packet (its chains that mark).
fn new_mark(e: &TraceEvent) -> bool {
    e.kind == TraceKind::Rule && e.handle.is_some() && (e.chain == "prerouting" || e.chain == "output")
}

/// Whether the tracer's last chains saw the packet for the last time (their policy is their
/// last event): delivered here, or leaving by an interface other than loopback (which
/// brings it back in).
fn ends_here(e: &TraceEvent, looped: bool) -> bool {
    matches!(e.kind, TraceKind::Policy(_)) && (e.chain == "input" || (e.chain == "postrouting" && !looped))
}

/// Whether the event drops the packet.
pub fn dropped(e: &TraceEvent) -> bool {
    matches!(e.kind, TraceKind::Policy(Verdict::Drop)) || e.verdict == Some(Verdict::Drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

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
            oif: None,
            mark: None,
        }
    }

    /// The tracer's marking rule taking packet `id` in `chain`.
    fn mark(id: u32, chain: &str) -> TraceEvent {
        TraceEvent { handle: Some(5), ..event(id, "t", chain, TraceKind::Rule, Some(Verdict::Continue)) }
    }

    /// `e` carrying headers from `src` port `sport` to `dst` port 80, TCP.
    fn with_headers(mut e: TraceEvent, src: [u8; 4], sport: u16, dst: [u8; 4]) -> TraceEvent {
        e.network_header = [&[0x45, 0, 0, 60, 0, 0, 0, 0, 64, 6, 0, 0][..], &src, &dst].concat();
        e.transport_header = [&sport.to_be_bytes()[..], &80u16.to_be_bytes()].concat();
        e
    }

    fn chains(ended: &[Packet]) -> Vec<Vec<&str>> {
        ended.iter().map(|p| p.events.iter().map(|e| e.chain.as_str()).collect()).collect()
    }

    const ACCEPT: TraceKind = TraceKind::Policy(Verdict::Accept);

    #[test]
    fn a_packet_runs_from_the_marking_rule_to_the_last_chain_or_a_drop() {
        let mut f = Follower::new("t");
        let now = Instant::now();
        let leaving =
            TraceEvent { oif: Some(2), ..event(1, "t", "postrouting", TraceKind::Rule, Some(Verdict::Continue)) };
        let ended = f.feed(
            vec![
                event(1, "other", "x", TraceKind::Rule, Some(Verdict::Continue)),
                mark(1, "prerouting"),
                mark(2, "prerouting"),
                event(1, "kube-nftproxy", "nat-prerouting", TraceKind::Rule, Some(Verdict::Jump("services".into()))),
                event(2, "kube-nftproxy", "reject-chain", TraceKind::Rule, Some(Verdict::Drop)),
                leaving,
                event(1, "t", "postrouting", ACCEPT, None),
                event(3, "kube-nftproxy", "nat-prerouting", TraceKind::Rule, Some(Verdict::Continue)),
            ],
            now,
        );
        assert_eq!(
            chains(&ended),
            [vec!["prerouting", "reject-chain"], vec!["prerouting", "nat-prerouting", "postrouting", "postrouting"]]
        );
        assert!(ended.iter().all(|p| p.complete && !p.lost));
        assert_eq!(f.open(), 0, "an unmarked packet is not followed");
        f.feed(vec![mark(9, "output")], now);
        f.lost();
        assert!(f.expire(now).is_empty());
        let expired = f.expire(now + LINGER);
        assert_eq!(expired.len(), 1, "let go after a silence");
        assert!(!expired[0].complete && expired[0].lost);
    }

    #[test]
    fn a_packet_keeps_its_story_when_its_id_changes_and_two_flows_of_one_client_stay_apart() {
        let mut f = Follower::new("t");
        let now = Instant::now();
        let (client, service, pod) = ([10, 0, 0, 1], [10, 96, 0, 5], [10, 1, 1, 2]);
        // Forwarded, it goes on under another id: its client tells it.
        let ended = f.feed(
            vec![
                with_headers(mark(6, "prerouting"), client, 40000, service),
                with_headers(mark(8, "prerouting"), client, 40000, [10, 96, 0, 6]),
                with_headers(event(7, "kube-nftproxy", "nat-postrouting", TraceKind::Rule, None), client, 40000, pod),
                event(7, "t", "postrouting", ACCEPT, None),
            ],
            now,
        );
        assert_eq!(chains(&ended), [vec!["prerouting", "nat-postrouting", "postrouting"]]);
        assert_eq!(headers(&ended[0].events[0]).map(|h| h.1.ip()), Some(IpAddr::from(service)));
        assert_eq!(f.open(), 1, "the second flow of the same client is a packet of its own");
        // Out through loopback, masqueraded, and back in under another id.
        let node = [192, 168, 1, 1];
        let left = TraceEvent { oif: Some(LOOPBACK), ..event(4, "t", "postrouting", TraceKind::Rule, None) };
        f.feed(
            vec![mark(4, "output"), with_headers(left, node, 61000, pod), event(4, "t", "postrouting", ACCEPT, None)],
            now,
        );
        assert_eq!(f.open(), 2, "through loopback it comes back in");
        let back = TraceEvent { iif: Some(LOOPBACK), ..mark(5, "prerouting") };
        let ended = f.feed(vec![with_headers(back, node, 61000, pod), event(5, "t", "input", ACCEPT, None)], now);
        assert_eq!(chains(&ended), [vec!["output", "postrouting", "postrouting", "prerouting", "input"]]);
    }

    #[test]
    fn ipv6_headers_are_read() {
        let mut e = event(1, "t", "prerouting", TraceKind::Rule, None);
        let (src, dst): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            ("fd00::1".parse().unwrap(), "fd00::5".parse().unwrap());
        e.network_header = [&[0x60, 0, 0, 0, 0, 20, 17, 64][..], &src.octets(), &dst.octets()].concat();
        e.transport_header = [0x9c, 0x40, 0, 53].to_vec();
        let (s, d, proto) = headers(&e).expect("headers");
        assert_eq!((s.to_string(), d.to_string(), proto), ("[fd00::1]:40000".into(), "[fd00::5]:53".into(), 17));
    }
}
