//! `kube-nftproxy explain`: where the first packet of a connection goes through the rules this
//! node would apply, and why. The answer comes from the ruleset a sync sends, compiled as it
//! is sent (`nft::compile`) and run on a model of the kernel's machine (`vm`) through the
//! hooks the packet passes (prerouting or output, then input or postrouting); the model of
//! the cluster says why (which service port, which endpoints were left out and for what).
//!
//! What it takes as given: a new connection (conntrack state new), a client not yet in any
//! affinity set, routing by the node's own addresses only (an address of the node is local,
//! anything else leaves it), and that a packet from an address comes in on the interface the
//! host routes that address through (`Query::arrives_on`, which the command reads from the
//! host's routes; without it, a pod of this node is taken to send on a pod interface).

mod packet;
mod show;
mod table;
mod vm;
mod why;

use crate::config::Config;
use crate::model::{Family, Model, Protocol};
use crate::netlink::abi::{NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT, NF_INET_POST_ROUTING, NF_INET_PRE_ROUTING};
use crate::nft::compile::CompileError;
use crate::nft::element;
use crate::render::{self, Detector, RenderError};
use packet::Packet;
pub use show::{json, text};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use table::Table;
use vm::{Run, Step, Verdict};
pub use why::{Reason, UnusedEndpoint};

/// What went wrong in answering.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The question itself.
    #[error("{0}")]
    Query(String),
    /// Rendering the ruleset failed.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// Compiling it failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The rules hold something the machine cannot run.
    #[error("following the packet through the rules: {0}")]
    Machine(String),
}

/// The question: a connection's source, destination and protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Where it comes from: this node (`None`) or an address.
    pub from: Option<IpAddr>,
    /// The client's port, when given (`--from IP:PORT`): schedulers that hash it (`sh-port`,
    /// `mh-port`) pick by it; else [`CLIENT_PORT`].
    pub from_port: Option<u16>,
    /// Where it goes.
    pub to: SocketAddr,
    /// Its protocol.
    pub protocol: Protocol,
    /// The interface a packet from `from` comes in on, when known (the route to it).
    pub arrives_on: Option<String>,
    /// The source address this node's own connection to `to` takes, when known (the route's
    /// choice); else the node's address of the family.
    pub node_source: Option<IpAddr>,
}

impl Query {
    /// Reads `--from` (`node`, an address, or an address and port), `--to` (`IP:PORT`) and
    /// `--protocol`.
    pub fn parse(from: &str, to: &str, protocol: &str) -> Result<Query, ExplainError> {
        let bad = |what: String| ExplainError::Query(what);
        let (from, from_port) = match from {
            "node" => (None, None),
            ip => match (ip.parse::<IpAddr>(), ip.parse::<SocketAddr>()) {
                (Ok(ip), _) => (Some(ip), None),
                (_, Ok(sa)) => (Some(sa.ip()), Some(sa.port())),
                _ => return Err(bad(format!("--from {ip:?}: not `node`, an IP address or IP:PORT"))),
            },
        };
        let mut to: SocketAddr = to.parse().map_err(|_| bad(format!("--to {to:?}: not IP:PORT ([IPv6]:PORT)")))?;
        // An IPv4-mapped address is IPv4 on the wire.
        to.set_ip(to.ip().to_canonical());
        let from = from.map(|f: IpAddr| f.to_canonical());
        if from.is_some_and(|f| f.is_loopback() || f.is_unspecified()) {
            return Err(bad("--from: a loopback or unspecified source does not leave the host; use `node`".into()));
        }
        // The kernel drops such a packet before it is routed (a martian source), after the
        // prerouting rules for IPv4 and before them for IPv6: no connection ever starts there.
        let broadcast = |f: &IpAddr| matches!(f, IpAddr::V4(v4) if v4.is_broadcast());
        if from.is_some_and(|f| f.is_multicast() || broadcast(&f)) {
            return Err(bad("--from: a multicast or broadcast source never starts a connection".into()));
        }
        let protocol =
            Protocol::parse(Some(&protocol.to_ascii_uppercase())).map_err(|e| bad(format!("--protocol: {e}")))?;
        if from.is_some_and(|f: IpAddr| f.is_ipv4() != to.is_ipv4()) {
            return Err(bad("--from and --to are of different address families".into()));
        }
        Ok(Query { from, from_port, to, protocol, arrives_on: None, node_source: None })
    }
}

impl Query {
    /// The query as this host sees it: the source its route to `to` gives a connection of
    /// the node's own (a UDP connect sends nothing), and the interface it routes `from`
    /// through, where that source's packets come in. What cannot be read stays unknown.
    pub fn seen_from_this_host(mut self) -> Query {
        let any = if self.to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
        self.node_source = std::net::UdpSocket::bind(any)
            .and_then(|s| s.connect(self.to).and_then(|()| s.local_addr()))
            .map(|a| a.ip())
            .ok();
        if let Some(ip) = self.from {
            self.arrives_on = crate::host::route_device(ip).unwrap_or_else(|e| {
                log::warn!("reading the routes: {e}; taking the interface a packet from {ip} comes in on as unknown");
                None
            });
        }
        self
    }
}

/// The client's port when the question does not give one.
pub const CLIENT_PORT: u16 = 40000;

/// Where the connection comes from, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// This node itself.
    Node,
    /// A pod on this node.
    LocalPod,
    /// A pod on another node.
    RemotePod,
    /// Outside the cluster.
    Outside,
}

/// One way the connection can end, with its chance.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// What happens.
    pub fate: Fate,
    /// The chance, 0 to 1.
    pub chance: f64,
    /// The chains and rules it went through, and the elements that sent it on.
    pub path: Vec<PathStep>,
}

/// What happens to the connection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    /// Sent to an endpoint (DNAT), its source masqueraded or kept.
    Endpoint {
        /// The endpoint.
        to: SocketAddr,
        /// The endpoint's node, when its slice says.
        node: Option<String>,
        /// Whether the source is masqueraded to the node's address.
        masquerade: bool,
    },
    /// Left alone by the proxy (delivered as addressed), masqueraded or not.
    Unchanged {
        /// Whether the source is masqueraded.
        masquerade: bool,
    },
    /// Dropped silently.
    Dropped,
    /// Rejected: the sender gets a TCP reset or an ICMP unreachable.
    Rejected,
}

/// One step of a path as shown: a rule of a chain, or an element of a service port.
pub type PathStep = Step;

/// The answer.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The question.
    pub query: Query,
    /// The source address the packet carries (this node's, for `node`).
    pub source: IpAddr,
    /// What the source is.
    pub kind: SourceKind,
    /// The service port whose rules took the packet, as upstream names it, and which of its
    /// frontends it hit.
    pub service: Option<(String, &'static str)>,
    /// The ways it can end, most likely first.
    pub outcomes: Vec<Outcome>,
    /// Why.
    pub reasons: Vec<Reason>,
    /// The service port's endpoints that take none of this traffic, and why.
    pub unused: Vec<UnusedEndpoint>,
}

/// Answers `query` for the rules a full sync of `model` under `cfg` would apply.
pub fn explain(model: &Model, cfg: &Config, query: &Query) -> Result<Explanation, ExplainError> {
    Prepared::new(model, cfg)?.explain(model, cfg, query)
}

/// The rules a full sync of one model would apply, rendered and compiled once for many
/// questions (`trace` asks one per connection it sees).
#[derive(Debug, Clone)]
pub struct Prepared {
    tables: Vec<Table>,
    detectors: BTreeMap<Family, Detector>,
    nodes: BTreeMap<Family, BTreeMap<IpAddr, String>>,
}

impl Prepared {
    /// Renders and compiles the rules of `model` under `cfg`.
    pub fn new(model: &Model, cfg: &Config) -> Result<Prepared, ExplainError> {
        Prepared::of(model, cfg, &render::render(model, cfg)?)
    }

    /// As [`Prepared::new`], with `ruleset` the render of `model` under `cfg`, already made.
    pub fn of(model: &Model, cfg: &Config, ruleset: &render::Ruleset) -> Result<Prepared, ExplainError> {
        let tables = table::tables(ruleset, &cfg.node_name)?;
        let detectors = ruleset.tables.iter().map(|t| (t.family, t.fixed.local.clone())).collect();
        let nodes = Family::ALL.into_iter().map(|f| (f, why::endpoint_nodes(model, f))).collect();
        Ok(Prepared { tables, detectors, nodes })
    }

    /// Answers `query`; `model` and `cfg` must be those the rules were prepared from.
    pub fn explain(&self, model: &Model, cfg: &Config, query: &Query) -> Result<Explanation, ExplainError> {
        let family = if query.to.is_ipv4() { Family::V4 } else { Family::V6 };
        let table = self.tables.iter().find(|t| t.family == family).ok_or_else(|| {
            ExplainError::Query(format!("no {family:?} table: no --cluster-cidr or Service of that family"))
        })?;
        let empty = BTreeMap::new();
        let nodes = self.nodes.get(&family).unwrap_or(&empty);
        let (kind, packet) = first_packet(model, cfg, query, self.detectors.get(&family), nodes);
        let source = packet.saddr;
        let paths = follow(table, packet, kind == SourceKind::Node).map_err(ExplainError::Machine)?;
        let outcomes = outcomes(nodes, paths);
        let mut e = Explanation {
            query: query.clone(),
            source,
            kind,
            service: None,
            outcomes,
            reasons: vec![],
            unused: vec![],
        };
        why::fill(&mut e, model, cfg);
        Ok(e)
    }
}

/// The connection's first packet, and what its source is.
fn first_packet(
    model: &Model,
    cfg: &Config,
    query: &Query,
    detector: Option<&Detector>,
    nodes: &BTreeMap<IpAddr, String>,
) -> (SourceKind, Packet) {
    let family = if query.to.is_ipv4() { Family::V4 } else { Family::V6 };
    let local: Vec<IpAddr> = model.host_addresses().to_vec();
    let kind = match query.from {
        None => SourceKind::Node,
        Some(ip) if local.contains(&ip) => SourceKind::Node,
        Some(ip) => pod_kind(model, cfg, nodes, ip, detector, query.arrives_on.as_deref()),
    };
    let saddr = query.from.or(query.node_source).unwrap_or_else(|| render::node_ip(cfg, model.node.as_ref(), family));
    let iif = match (kind, detector, &query.arrives_on) {
        (SourceKind::Node, ..) => None,
        (_, _, Some(dev)) => Some(dev.clone()),
        (SourceKind::LocalPod, Some(Detector::Interface(name)), None) => Some(name.clone()),
        (SourceKind::LocalPod, Some(Detector::InterfacePrefix(p)), None) => {
            Some(format!("{p}0").chars().take(15).collect())
        }
        // A name no interface has: no interface match holds for it.
        _ => Some(String::new()),
    };
    let packet = Packet {
        saddr,
        daddr: query.to.ip(),
        proto: element::proto_byte(query.protocol),
        sport: query.from_port.unwrap_or(CLIENT_PORT),
        dport: query.to.port(),
        iif,
        mark: 0,
        ct_status: 0,
        local: Arc::new(local),
        dnat: false,
        masquerade: false,
        remembered: Vec::new(),
    };
    (kind, packet)
}

/// Whether `ip` is a pod of this node, of another node, or neither: an endpoint the slices
/// place, else this node's pod CIDRs, else the cluster's.
fn pod_kind(
    model: &Model,
    cfg: &Config,
    nodes: &BTreeMap<IpAddr, String>,
    ip: IpAddr,
    detector: Option<&Detector>,
    arrives_on: Option<&str>,
) -> SourceKind {
    let node = model.node.as_ref();
    if let Some(on) = nodes.get(&ip) {
        return if *on == cfg.node_name { SourceKind::LocalPod } else { SourceKind::RemotePod };
    }
    let pod_interface = match (detector, arrives_on) {
        (Some(Detector::Interface(name)), Some(dev)) => dev == name,
        (Some(Detector::InterfacePrefix(p)), Some(dev)) => dev.starts_with(p.as_str()),
        _ => false,
    };
    if pod_interface || node.is_some_and(|n| n.pod_cidrs.iter().any(|c| c.contains(&ip))) {
        return SourceKind::LocalPod;
    }
    if cfg.cluster_cidrs.iter().any(|c| c.contains(&ip)) { SourceKind::RemotePod } else { SourceKind::Outside }
}

/// Every path the packet takes through the hooks it passes: prerouting, or output for one
/// the node sends; then input when it is for this node (after DNAT), else postrouting. One
/// the node sends to itself goes out and back in through loopback: postrouting, prerouting
/// (where its connection, already NATed, meets no NAT chain), input.
fn follow(table: &Table, packet: Packet, from_node: bool) -> Result<Vec<(Verdict, Run)>, String> {
    let first = if from_node { NF_INET_LOCAL_OUT } else { NF_INET_PRE_ROUTING };
    let mut done = Vec::new();
    for (v, r) in hook(table, first, true, vec![Run::new(packet, 1.0, Vec::new())])? {
        if v != Verdict::Accept {
            done.push((v, r));
            continue;
        }
        let local = r.packet.is_local(r.packet.daddr);
        let next: &[(u32, bool)] = match (from_node, local) {
            (true, true) => &[(NF_INET_POST_ROUTING, true), (NF_INET_PRE_ROUTING, false), (NF_INET_LOCAL_IN, true)],
            (true, false) | (false, false) => &[(NF_INET_POST_ROUTING, true)],
            (false, true) => &[(NF_INET_LOCAL_IN, true)],
        };
        let mut runs = vec![(v, r)];
        for (h, nat) in next {
            let (going, stopped): (Vec<_>, Vec<_>) = runs.into_iter().partition(|(v, _)| *v == Verdict::Accept);
            done.extend(stopped);
            runs = hook(table, *h, *nat, going.into_iter().map(|(_, r)| r).collect())?;
        }
        done.extend(runs);
    }
    Ok(done)
}

/// Runs `runs` through the base chains of hook `hooknum` (its NAT chains too when `nat`),
/// by priority; a drop ends a path there.
fn hook(table: &Table, hooknum: u32, nat: bool, runs: Vec<Run>) -> Result<Vec<(Verdict, Run)>, String> {
    let mut chains: Vec<(&String, i32)> = table
        .chains
        .iter()
        .filter_map(|(n, c)| {
            c.hook.as_ref().filter(|h| h.hooknum == hooknum && (nat || h.kind != "nat")).map(|h| (n, h.priority))
        })
        .collect();
    chains.sort_by_key(|(_, priority)| *priority);
    let mut live: Vec<(Verdict, Run)> = runs.into_iter().map(|r| (Verdict::Accept, r)).collect();
    for (chain, _) in chains {
        let mut next = Vec::new();
        for (v, r) in live {
            match v {
                Verdict::Accept => next.extend(vm::run_chain(table, chain, r)?),
                dropped => next.push((dropped, r)),
            }
        }
        live = next;
    }
    Ok(live)
}

/// The paths grouped by what happens, with their chances summed, most likely first.
fn outcomes(nodes: &BTreeMap<IpAddr, String>, paths: Vec<(Verdict, Run)>) -> Vec<Outcome> {
    let mut by_fate: BTreeMap<Fate, Outcome> = BTreeMap::new();
    for (v, r) in paths {
        let fate = match v {
            Verdict::Drop { reject: true } => Fate::Rejected,
            Verdict::Drop { reject: false } => Fate::Dropped,
            Verdict::Accept if r.packet.dnat => Fate::Endpoint {
                to: SocketAddr::new(r.packet.daddr, r.packet.dport),
                node: nodes.get(&r.packet.daddr).cloned(),
                masquerade: r.packet.masquerade,
            },
            Verdict::Accept => Fate::Unchanged { masquerade: r.packet.masquerade },
        };
        by_fate.entry(fate.clone()).and_modify(|o| o.chance += r.chance).or_insert(Outcome {
            fate,
            chance: r.chance,
            path: r.steps,
        });
    }
    let mut out: Vec<Outcome> = by_fate.into_values().collect();
    out.sort_by(|a, b| b.chance.total_cmp(&a.chance).then_with(|| a.fate.cmp(&b.fate)));
    out
}
