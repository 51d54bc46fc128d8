//! One traced packet read in the proxy's words: where it came from and was going, the rules
//! it passed (by the proxy's own text), what the kernel did (DNAT to an endpoint, masquerade,
//! reject, drop, or nothing), and which service port it was for. `why` adds why, and
//! whether `explain`, asked the same question of the same objects, allows exactly that.

use super::context::Context;
use super::follow::{Packet, dropped, headers};
use super::why;
use crate::explain::{Fate, Query};
use crate::model::Family;
use crate::netlink::trace::{TraceEvent, TraceKind, Verdict};
use crate::nft::element::proto_of;
use crate::render::{TABLE_NAME, chain, owner_of_chain};
use std::net::SocketAddr;

/// A rule or chain end the packet passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The table (the proxy's, or another's).
    pub table: String,
    /// The chain.
    pub chain: String,
    /// The rule's text (the proxy's own words for its rules), or the chain's policy.
    pub rule: String,
    /// Its verdict, in nftables' words.
    pub verdict: String,
}

/// A traced connection, as reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// The client.
    pub source: SocketAddr,
    /// Where it was addressed.
    pub destination: SocketAddr,
    /// `tcp`, `udp`, `sctp`, or `other` (an IPv6 extension header hides the protocol).
    pub protocol: &'static str,
    /// Sent by this node itself (rather than arriving on `interface`).
    pub from_node: bool,
    /// The interface it came in on, when it did.
    pub interface: Option<String>,
    /// The service (`namespace/name`) whose rules or map elements took it.
    pub service: Option<String>,
    /// The service port's name (empty for an unnamed port).
    pub port: Option<String>,
    /// The endpoint it was sent to.
    pub endpoint: Option<SocketAddr>,
    /// Whether its source was masqueraded.
    pub masquerade: bool,
    /// `dnat`, `reject`, `drop` or `accept`.
    pub verdict: &'static str,
    /// Whether its trace is whole: it ended where it was delivered, left, or was dropped,
    /// and no event of it was lost.
    pub whole: bool,
    /// Why, in the proxy's words.
    pub why: Vec<String>,
    /// The rules it passed, outside the tracers' tables.
    pub hops: Vec<Hop>,
    /// `agrees`, or how `explain` differs, or why it was not compared.
    pub explain: String,
}

/// Reads `packet`, marked by the tracer's table `ours`, against `ctx`; `None` for one whose
/// headers were not reported.
pub fn connection(packet: &Packet, ours: &str, ctx: &mut Context) -> Option<Connection> {
    let first = packet.events.first()?;
    let (source, destination, proto) = headers(first)?;
    let family = if source.is_ipv4() { Family::V4 } else { Family::V6 };
    // Tracers' tables (this one's, and any other running) are not on the packet's way; a
    // chain's end without a verdict of its own (a return to the caller) says nothing more.
    let said = |e: &&TraceEvent| {
        !e.table.starts_with(super::table::TABLE_PREFIX)
            && (e.handle.is_some() || matches!(e.kind, TraceKind::Policy(_)))
    };
    let hops: Vec<Hop> = packet.events.iter().filter(said).map(|e| hop(e, family, ctx)).collect();
    let drop = packet.events.iter().find(|e| dropped(e));
    let (verdict, endpoint, masquerade) = fate(packet, ours, destination, drop, &hops);
    let mut c = Connection {
        source,
        destination,
        protocol: proto_of(proto).map_or("other", |p| p.as_str()),
        from_node: first.chain == "output",
        interface: first.iif.and_then(|i| crate::netlink::link::name_of(i).ok().flatten()),
        service: None,
        port: None,
        endpoint,
        masquerade,
        verdict,
        whole: packet.complete && !packet.lost,
        why: Vec::new(),
        hops,
        explain: String::new(),
    };
    if let Some(owner) = service_port(packet, family, proto, destination, ctx) {
        c.name_service(&owner);
    }
    why::fill(&mut c, drop.map(|d| (d.table.as_str(), d.chain.as_str())), ctx);
    Some(c)
}

impl Connection {
    /// Names the service port `owner` (`namespace/name:port`) as this connection's.
    pub(super) fn name_service(&mut self, owner: &str) {
        let (name, port) = owner.split_once(':').unwrap_or((owner, ""));
        (self.service, self.port) = (Some(name.to_string()), Some(port.to_string()));
    }
}

/// What the kernel did: the verdict, the endpoint, whether the source was masqueraded. The
/// tracer's last chains see the packet after every NAT: its headers as it goes on.
fn fate(
    packet: &Packet,
    ours: &str,
    destination: SocketAddr,
    drop: Option<&TraceEvent>,
    hops: &[Hop],
) -> (&'static str, Option<SocketAddr>, bool) {
    let last =
        packet.events.iter().rev().find(|e| {
            e.table == ours && (e.chain == "input" || e.chain == "postrouting") && !e.network_header.is_empty()
        });
    let endpoint = last.and_then(headers).map(|(_, dst, _)| dst).filter(|dst| *dst != destination);
    if let Some(d) = drop {
        // The proxy rejects in one chain; a reject elsewhere is named by its rule.
        let proxy_reject = d.table == TABLE_NAME && d.chain == chain::REJECT;
        let reject = proxy_reject || hops.iter().any(|h| h.verdict == "drop" && h.rule.starts_with("reject"));
        return (if reject { "reject" } else { "drop" }, None, false);
    }
    if last.is_none() && !packet.complete && !packet.lost {
        // Neither delivered nor sent on: dropped past the rules (no route, a full queue).
        return ("drop", None, false);
    }
    // The masquerade statement ends its rule with accept.
    let masquerade = packet.events.iter().any(|e| {
        e.table == TABLE_NAME
            && e.chain == chain::MASQUERADING
            && e.kind == TraceKind::Rule
            && e.verdict == Some(Verdict::Accept)
    });
    (if endpoint.is_some() { "dnat" } else { "accept" }, endpoint, masquerade)
}

/// The service port whose rules took the packet: a chain of its own, else the element of a
/// dispatch map its destination (or node port) matched.
fn service_port(packet: &Packet, family: Family, proto: u8, to: SocketAddr, ctx: &mut Context) -> Option<String> {
    let owned = packet.events.iter().filter(|e| e.table == TABLE_NAME).find_map(|e| owner_of_chain(&e.chain));
    if let Some(spn) = owned {
        return Some(spn.to_string());
    }
    if let Some(owner) = ctx.owner(family, Some(to.ip()), proto, to.port()) {
        return Some(owner);
    }
    if ctx.serves_node_ports(to.ip()) { ctx.owner(family, None, proto, to.port()) } else { None }
}

/// An event as a hop: the proxy's rules by their text, others' by their handle.
fn hop(e: &TraceEvent, family: Family, ctx: &mut Context) -> Hop {
    let rule = match (&e.kind, e.handle) {
        (TraceKind::Policy(v), _) => format!("policy {v}"),
        (TraceKind::Return, _) => "end of chain".to_string(),
        (TraceKind::Rule, Some(h)) if e.table == TABLE_NAME => {
            ctx.rule(family, h, &e.chain).map_or_else(|| format!("rule handle {h}"), |r| r.text.clone())
        }
        (TraceKind::Rule, Some(h)) => format!("rule handle {h}"),
        (TraceKind::Rule, None) => "a rule".to_string(),
    };
    let verdict = match (&e.kind, &e.verdict) {
        (TraceKind::Policy(v), _) | (_, Some(v)) => v.to_string(),
        _ => "continue".to_string(),
    };
    Hop { table: e.table.clone(), chain: e.chain.clone(), rule, verdict }
}

/// What `explain` is asked of this connection: the same addresses, ports and interface.
pub fn query(c: &Connection) -> Option<Query> {
    let protocol = crate::model::Protocol::ALL.into_iter().find(|p| p.as_str() == c.protocol)?;
    Some(Query {
        from: (!c.from_node).then_some(c.source.ip()),
        from_port: Some(c.source.port()),
        to: c.destination,
        protocol,
        arrives_on: c.interface.clone(),
        node_source: c.from_node.then_some(c.source.ip()),
    })
}

/// Whether `fate`, one of explain's outcomes, is what the kernel did with `c`.
pub fn fits(fate: &Fate, c: &Connection) -> bool {
    match fate {
        Fate::Endpoint { to, masquerade, .. } => c.endpoint == Some(*to) && c.masquerade == *masquerade,
        Fate::Unchanged { masquerade } => c.verdict == "accept" && c.masquerade == *masquerade,
        Fate::Dropped => c.verdict == "drop",
        Fate::Rejected => c.verdict == "reject",
    }
}
