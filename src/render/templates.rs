//! The template bindings: one struct per file in `nft-templates/`, holding only the data its rules need.

use super::Detector;
use super::key::Key;
use super::maps::MapName;
use super::names::chain;
use super::ruleset::{Entry, Table, Value};
use askama::Template;
use std::collections::BTreeMap;

/// Family words the templates need: `ip`/`ip6`, the address type, the loopback range.
#[derive(Debug, Clone, Copy)]
pub struct FamilyWords {
    /// `ip` or `ip6` (table family and payload protocol).
    pub fam: &'static str,
    /// `ipv4_addr` or `ipv6_addr`.
    pub addr_type: &'static str,
    /// `127.0.0.0/8` or `::1`.
    pub loopback: &'static str,
}

/// `service.nft`: the chain ClusterIP traffic enters under `--masquerade-all`.
#[derive(Template)]
#[template(path = "service.nft")]
pub struct ServiceChain<'a> {
    /// The masquerade mark, in hex.
    pub mark: &'a str,
    /// The chain that picks an endpoint.
    pub pick: &'a str,
}

/// `external.nft`: the chain external IP, LoadBalancer IP and NodePort traffic enters.
#[derive(Template)]
#[template(path = "external.nft")]
pub struct ExternalChain<'a> {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// The masquerade mark, in hex.
    pub mark: &'a str,
    /// `externalTrafficPolicy: Local`.
    pub local_policy: bool,
    /// How this node's pods' traffic is told apart, for short-circuiting it.
    pub local: &'a Detector,
    /// Endpoint pick over cluster endpoints.
    pub cluster_pick: &'a str,
    /// Endpoint pick over local endpoints, if there are any.
    pub local_pick: Option<&'a str>,
}

/// `element.nft`: one element as `nft` writes it, for the `--dry-run --diff` report.
#[derive(Template)]
#[template(path = "element.nft")]
pub struct ElementText<'a> {
    /// Its key.
    pub k: &'a Key,
    /// Its value.
    pub v: &'a Value,
}

/// One endpoint of a session-affinity pick.
#[derive(Debug, Clone)]
pub struct AffinityEndpoint {
    /// Its address.
    pub ip: std::net::IpAddr,
    /// Its port.
    pub port: u16,
    /// Its number in entries' keys (`names::endpoint_index`).
    pub index: u32,
}

/// `balance.nft`: a session-affinity service's endpoint pick for one scope.
#[derive(Template)]
#[template(path = "balance.nft")]
pub struct BalanceChain<'a> {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// IPv6 addresses need brackets before a port.
    pub v6: bool,
    /// Protocol name.
    pub proto: &'static str,
    /// The map holding the group's entries.
    pub map: &'a str,
    /// `timeoutSeconds`.
    pub timeout: u32,
    /// The endpoints, in slot order.
    pub endpoints: &'a [AffinityEndpoint],
}

/// `lb.nft`: the chain that DNATs to slot `numgen mod n` (the client's `jhash mod n`, or
/// slot `n`) of a frontend in the endpoint maps, one step per map part, or a round-robin
/// port's turn.
#[derive(Template)]
#[template(path = "lb.nft")]
pub struct LbChain {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// Protocol name.
    pub proto: &'static str,
    /// Slot count.
    pub n: usize,
    /// `random` (a `numgen`), `hash` (the client's `jhash`), `slot` (slot `n` always), or
    /// `turn` (a round-robin port's `numgen inc`, through the `turns` map).
    pub how: &'static str,
    /// Whether the client's port is hashed with its address.
    pub port: bool,
    /// The hash's seed.
    pub seed: String,
    /// Where a turn's range starts in the `turns` map.
    pub offset: u32,
    /// Keyed by node port rather than by destination IP and port.
    pub nodeport: bool,
    /// The `turns` map, for a turn.
    pub map: String,
    /// The steps over the endpoint maps' parts, in slot order.
    pub steps: Vec<LbStep>,
}

/// One rule of an `lb-*` chain: the slot it takes, in the part of the endpoint maps that
/// holds it.
#[derive(Debug, Clone)]
pub struct LbStep {
    /// The slot, or on the last step the first of the slots it picks from.
    pub slot: usize,
    /// How many slots are left from this one on.
    pub rest: usize,
    /// The last step: no test before it (every slot before it was passed over).
    pub last: bool,
    /// The endpoint map that holds the slot.
    pub map: String,
}

/// An endpoint map declaration.
#[derive(Debug, Clone)]
pub struct EndpointMapDecl {
    /// Map name.
    pub name: MapName,
    /// Protocol name.
    pub proto: &'static str,
    /// Keyed by node port.
    pub nodeport: bool,
}

/// Everything `table.nft` and `full-sync.nft` need about one family's table.
pub struct TableView<'a> {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// Address type.
    pub addr_type: &'static str,
    /// Loopback range.
    pub loopback: &'static str,
    /// Masquerade mark, in hex.
    pub mark: String,
    /// How this node's pods' traffic is told apart.
    pub local: Detector,
    /// NodePorts on every local address rather than `@nodeport-ips`.
    pub nodeport_all: bool,
    /// Drop traffic to ServiceCIDR addresses no Service holds (not beside kube-proxy).
    pub drop_unallocated: bool,
    /// Endpoint maps to declare.
    pub endpoint_maps: Vec<EndpointMapDecl>,
    /// The `turns-*` maps to declare: all of them when some port takes turns, else none.
    pub turn_maps: Vec<MapName>,
    /// The rendered content.
    pub table: &'a Table,
    /// The elements are left out of the script (the daemon sends them from the ruleset).
    pub without_elements: bool,
    /// What someone else added, deleted by a refresh: the kind as `nft` names it in `delete`,
    /// and the handle.
    pub foreign: Vec<(&'static str, u64)>,
    /// Our maps the kernel holds, deleted by a refresh before it declares them again.
    pub recreate: Vec<String>,
    /// The base chains hold their rules (a staged build declares them empty, and adds their
    /// rules last, alone).
    pub hooks: bool,
}

impl TableView<'_> {
    /// The maps whose elements the script writes.
    pub fn text_elements(&self) -> impl Iterator<Item = (&MapName, &BTreeMap<Key, Entry>)> {
        self.table.elements.iter().filter(|_| !self.without_elements)
    }

    /// The `size` map `map` is declared with, if any.
    pub fn size(&self, map: &MapName) -> Option<u32> {
        self.table.declared_size(*map)
    }
}

/// `full-sync.nft`: the script that creates or replaces both tables.
#[derive(Template)]
#[template(path = "full-sync.nft")]
pub struct FullSync<'a> {
    /// Node name, for the header.
    pub node: &'a str,
    /// Rewrite the rules of tables in place (`flush table`) rather than replace them.
    pub refresh: bool,
    /// One view per family.
    pub tables: Vec<TableView<'a>>,
}

/// `hooks.nft`: the base chains alone, the last stage of a staged build.
#[derive(Template)]
#[template(path = "hooks.nft")]
pub struct Hooks<'a> {
    /// Node name, for the header.
    pub node: &'a str,
    /// One view per family.
    pub tables: Vec<TableView<'a>>,
}

/// One rule of `dispatch.nft`: frontends holding slot `slot` of `map` go on to `to`.
#[derive(Debug, Clone)]
pub struct DispatchRule {
    /// Protocol name.
    pub proto: &'static str,
    /// The slot tested.
    pub slot: usize,
    /// The endpoint map.
    pub map: String,
    /// The chain it leads to.
    pub to: String,
}

/// `dispatch.nft`: a chain of the ClusterIP dispatch by endpoint count.
#[derive(Template)]
#[template(path = "dispatch.nft")]
pub struct DispatchChain {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// Its tests, in order.
    pub rules: Vec<DispatchRule>,
    /// Where a frontend that passes none of them goes.
    pub otherwise: Option<String>,
}
