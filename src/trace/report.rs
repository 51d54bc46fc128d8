//! One traced packet read in the proxy's words: where it came from and was going, the rules
//! it passed (by the proxy's own text), what the kernel did (DNAT to an endpoint, masquerade,
//! reject, drop, or nothing), which service port it was for and why, and whether `explain`,
//! asked the same question of the same objects, allows exactly that.

use super::context::Context;
use super::follow::{Packet, headers};
use super::why;
use crate::explain::{Fate, Query};
use crate::model::{Family, Protocol};
use crate::netlink::trace::{TraceEvent, TraceKind, Verdict};
use crate::render::{TABLE_NAME, chain, owner_of_chain};
use std::net::{IpAddr, SocketAddr};

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
    /// `tcp`, `udp` or `sctp`.
    pub protocol: &'static str,
    /// Sent by this node itself (rather than arriving on `interface`).
    pub from_node: bool,
    /// The interface it came in on, when it did.
    pub interface: Option<String>,
    /// The service (`namespace/name`) whose rules took it.
    pub service: Option<String>,
    /// The service port's name (empty for an unnamed port).
    pub port: Option<String>,
    /// The endpoint it was sent to.
    pub endpoint: Option<SocketAddr>,
    /// Whether its source was masqueraded.
    pub masquerade: bool,
    /// `dnat`, `reject`, `drop` or `accept`.
    pub verdict: &'static str,
    /// Why, in the proxy's words.
    pub why: Vec<String>,
    /// The rules it passed, outside the tracer's own.
    pub hops: Vec<Hop>,
    /// `agrees`, or how `explain` differs, or why it could not be asked.
    pub explain: String,
}

/// Whether `e` drops the packet.
fn drops(e: &TraceEvent) -> bool {
    matches!(e.kind, TraceKind::Policy(Verdict::Drop)) || e.verdict == Some(Verdict::Drop)
}

/// Reads `packet`, marked by the tracer's table `ours`, against `ctx`; `None` for one whose
/// headers were not reported.
pub fn connection(packet: &Packet, ours: &str, ctx: &mut Context) -> Option<Connection> {
    let first = packet.events.first()?;
    let (source, destination, proto) = headers(first)?;
    let family = if source.is_ipv4() { Family::V4 } else { Family::V6 };
    // The tracer's last chains see the packet after every NAT: its headers as it goes on.
    let seen_last = packet
        .events
        .iter()
        .rev()
        .find(|e| e.table == ours && (e.chain == "input" || e.chain == "postrouting") && !e.network_header.is_empty())
        .and_then(headers);
    let dropped = packet.events.iter().find(|e| drops(e));
    // A chain's end without a verdict of its own (a return to the caller) says nothing more.
    // Tracers' tables (this one's, and any other running) are not on the packet's way.
    let said = |e: &&TraceEvent| {
        !e.table.starts_with(super::table::TABLE_PREFIX)
            && (e.handle.is_some() || matches!(e.kind, TraceKind::Policy(_)))
    };
    let hops: Vec<Hop> = packet.events.iter().filter(said).map(|e| hop(e, family, ctx)).collect();
    let proxy = |e: &&TraceEvent| e.table == TABLE_NAME;
    // The masquerade statement ends its rule with accept.
    let masquerade = packet
        .events
        .iter()
        .filter(proxy)
        .any(|e| e.chain == chain::MASQUERADING && e.kind == TraceKind::Rule && e.verdict == Some(Verdict::Accept));
    let rejected = dropped.is_some_and(|d| {
        d.table == TABLE_NAME && d.handle.and_then(|h| ctx.rule(family, h)).is_some_and(|r| r.text.contains("reject"))
    });
    let endpoint = seen_last.map(|(_, dst, _)| dst).filter(|dst| *dst != destination && dropped.is_none());
    let verdict = match (dropped, endpoint) {
        (Some(_), _) if rejected => "reject",
        (Some(_), _) => "drop",
        (None, Some(_)) => "dnat",
        (None, None) => "accept",
    };
    let from_node = first.chain == "output";
    let interface = first.iif.and_then(|i| crate::netlink::link::name_of(i).ok().flatten());
    let mut c = Connection {
        source,
        destination,
        protocol: protocol_name(proto),
        from_node,
        interface,
        service: None,
        port: None,
        endpoint,
        masquerade: masquerade && dropped.is_none(),
        verdict,
        why: Vec::new(),
        hops,
        explain: String::new(),
    };
    let service = packet.events.iter().filter(proxy).find_map(|e| owner_of_chain(&e.chain).map(|s| s.to_string()));
    let frontend = ctx
        .owner(family, Some(destination.ip()), proto, destination.port())
        .or_else(|| ctx.owner(family, None, proto, destination.port()).filter(|_| local(ctx, destination.ip())))
        .map(str::to_string);
    if let Some(owner) = service.or(frontend) {
        let (name, port) = owner.split_once(':').unwrap_or((&owner, ""));
        (c.service, c.port) = (Some(name.to_string()), Some(port.to_string()));
    }
    why::fill(&mut c, dropped.map(|d| (d.table.as_str(), d.chain.as_str())), ctx);
    Some(c)
}

/// Whether `ip` is one of this node's addresses (where node ports are served).
fn local(ctx: &Context, ip: IpAddr) -> bool {
    ctx.model.host_addresses().contains(&ip) || ip.is_loopback()
}

/// An event as a hop: the proxy's rules by their text, others' by their handle.
fn hop(e: &TraceEvent, family: Family, ctx: &mut Context) -> Hop {
    let rule = match (&e.kind, e.handle) {
        (TraceKind::Policy(v), _) => format!("policy {}", verdict_word(v)),
        (TraceKind::Return, _) => "end of chain".to_string(),
        (TraceKind::Rule, Some(h)) if e.table == TABLE_NAME => {
            ctx.rule(family, h).map_or_else(|| format!("rule handle {h}"), |r| r.text.clone())
        }
        (TraceKind::Rule, Some(h)) => format!("rule handle {h}"),
        (TraceKind::Rule, None) => "a rule".to_string(),
    };
    let verdict = match (&e.kind, &e.verdict) {
        (TraceKind::Policy(v), _) | (_, Some(v)) => verdict_word(v),
        _ => "continue".to_string(),
    };
    Hop { table: e.table.clone(), chain: e.chain.clone(), rule, verdict }
}

/// A verdict as nftables writes it.
fn verdict_word(v: &Verdict) -> String {
    match v {
        Verdict::Continue => "continue".into(),
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
        Verdict::Return => "return".into(),
        Verdict::Other(code) => format!("verdict {code}"),
    }
}

/// A protocol number's name.
fn protocol_name(proto: u8) -> &'static str {
    Protocol::ALL.into_iter().find(|p| crate::nft::element::proto_byte(*p) == proto).map_or("other", Protocol::as_str)
}

/// What `explain` is asked of this connection: the same addresses, ports and interface.
pub fn query(c: &Connection) -> Option<Query> {
    let protocol = Protocol::ALL.into_iter().find(|p| p.as_str() == c.protocol)?;
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
