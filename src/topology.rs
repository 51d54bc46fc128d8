//! Endpoint selection: which endpoints a service port's cluster-wide and node-local traffic may
//! use, and why the others are passed over.
//!
//! The rules are upstream kube-proxy's (`CategorizeEndpoints`):
//! - **Cluster** endpoints (needed unless the service is internal-Local only): ready endpoints
//!   that topology allows; if there are none, serving endpoints that are terminating (topology
//!   ignored).
//! - **Local** endpoints (needed for internal- or external-Local policy): this node's ready
//!   endpoints; if there are none, this node's serving and terminating endpoints.
//! - **Topology** is all-or-nothing and looks at ready endpoints only: if every one has
//!   `forNodes` hints and one names this node, keep the endpoints hinted for this node; else,
//!   if every one has `forZones` hints and one names this node's zone, keep the endpoints
//!   hinted for this zone; otherwise keep all.
//! - `has_any` says whether any usable endpoint exists anywhere, which decides between
//!   rejecting traffic (none at all) and dropping it (none that this policy may use).
//!
//! [`categorize_endpoints`] (what rendering uses) and [`endpoint_uses`] (what the debug view
//! and `explain` report) both ask one [`Selection`] about each endpoint, so the reasons given
//! for an endpoint cannot disagree with the rules written for it.

use crate::model::{Endpoint, ServicePort};
use std::fmt;

/// The outcome of endpoint selection for one service port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized<'a> {
    /// Endpoints for Cluster traffic policy (empty when the port does not use them).
    pub cluster: Vec<&'a Endpoint>,
    /// This node's endpoints for Local traffic policy (empty when the port does not use them).
    pub local: Vec<&'a Endpoint>,
    /// Whether any ready or serving-terminating endpoint exists anywhere.
    pub has_any: bool,
}

impl<'a> Categorized<'a> {
    /// Every endpoint some traffic may reach: the union of cluster and local, sorted.
    pub fn all_reachable(&self) -> Vec<&'a Endpoint> {
        let mut all: Vec<&'a Endpoint> = self.cluster.iter().chain(self.local.iter()).copied().collect();
        all.sort_by_key(|e| (e.ip, e.port));
        all.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
        all
    }
}

/// Which kind of topology hint passed an endpoint over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hints {
    /// `forNodes`: every ready endpoint has node hints and some name this node.
    Node,
    /// `forZones`: every ready endpoint has zone hints and some name this node's zone.
    Zone,
}

/// Why one scope's traffic does not go to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unused {
    /// Neither ready nor serving while terminating.
    NotReady,
    /// Serving while terminating, but the scope has ready endpoints, which come first.
    Terminating,
    /// Ready, but topology keeps this node's traffic on endpoints hinted for it, and this
    /// one's hints name other nodes or zones.
    Topology(Hints),
    /// Not on this node, and the scope takes this node's endpoints only (Local policy).
    OtherNode,
}

impl Unused {
    /// A stable machine name (`not-ready`, `terminating`, `topology`, `other-node`), as the
    /// debug view's JSON carries it.
    pub fn name(self) -> &'static str {
        match self {
            Unused::NotReady => "not-ready",
            Unused::Terminating => "terminating",
            Unused::Topology(_) => "topology",
            Unused::OtherNode => "other-node",
        }
    }
}

impl fmt::Display for Unused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unused::NotReady => "not ready, and not serving while terminating",
            Unused::Terminating => "terminating: used only when no ready endpoint is left",
            Unused::Topology(Hints::Node) => "topology: hinted for other nodes, and some endpoint for this one",
            Unused::Topology(Hints::Zone) => "topology: hinted for other zones, and some endpoint for this node's",
            Unused::OtherNode => "not on this node, and the traffic policy is Local",
        })
    }
}

/// What one scope (Cluster or Local policy) of a service port does with an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Choice {
    /// The port has no traffic of this scope.
    NotNeeded,
    /// The scope's traffic may go to the endpoint.
    Chosen,
    /// It may not, for this reason.
    Passed(Unused),
}

impl Choice {
    /// Whether the scope's traffic may go to the endpoint.
    pub fn chosen(self) -> bool {
        self == Choice::Chosen
    }

    /// A stable machine name: `chosen`, `not-needed`, or the reason's ([`Unused::name`]).
    pub fn name(self) -> &'static str {
        match self {
            Choice::NotNeeded => "not-needed",
            Choice::Chosen => "chosen",
            Choice::Passed(why) => why.name(),
        }
    }

    /// Why the scope passed the endpoint over, if it did.
    pub fn passed(self) -> Option<Unused> {
        match self {
            Choice::Passed(why) => Some(why),
            _ => None,
        }
    }
}

/// How one endpoint of a service port is used from this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointUse<'a> {
    /// The endpoint.
    pub endpoint: &'a Endpoint,
    /// What Cluster-policy traffic does with it.
    pub cluster: Choice,
    /// What Local-policy traffic does with it.
    pub local: Choice,
}

impl EndpointUse<'_> {
    /// Why it takes no traffic at all: `None` when some scope uses it. Where both scopes
    /// pass it over, the Cluster scope's reason, the wider one, is given.
    pub fn unused(&self) -> Option<Unused> {
        if self.cluster.chosen() || self.local.chosen() {
            return None;
        }
        self.cluster.passed().or(self.local.passed())
    }
}

/// Says, for every endpoint of `sp` in one family, how this node (`node`, in `zone`) uses it,
/// by the same rules as [`categorize_endpoints`].
pub fn endpoint_uses<'a>(
    endpoints: &'a [Endpoint],
    sp: &ServicePort,
    node: &str,
    zone: Option<&str>,
) -> Vec<EndpointUse<'a>> {
    let s = Selection::new(endpoints, sp, node, zone);
    endpoints.iter().map(|e| EndpointUse { endpoint: e, cluster: s.cluster(e), local: s.local(e) }).collect()
}

/// Selects the cluster and local endpoints of `sp` as seen from node `node` in `zone`.
pub fn categorize_endpoints<'a>(
    endpoints: &'a [Endpoint],
    sp: &ServicePort,
    node: &str,
    zone: Option<&str>,
) -> Categorized<'a> {
    let s = Selection::new(endpoints, sp, node, zone);
    Categorized {
        cluster: endpoints.iter().filter(|e| s.cluster(e).chosen()).collect(),
        local: endpoints.iter().filter(|e| s.local(e).chosen()).collect(),
        has_any: endpoints.iter().any(usable),
    }
}

/// Ready, or serving while terminating: one that some policy's traffic could be sent to.
fn usable(e: &Endpoint) -> bool {
    e.ready || serving_terminating(e)
}

fn serving_terminating(e: &Endpoint) -> bool {
    e.serving && e.terminating
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopologyMode {
    None,
    SameNode,
    SameZone,
}

/// What selection decides once per port, before it looks at each endpoint.
struct Selection<'a> {
    node: &'a str,
    zone: Option<&'a str>,
    /// The Cluster scope's topology mode; `None` when the port has no Cluster traffic.
    cluster: Option<TopologyMode>,
    /// Whether any endpoint is ready: serving-terminating ones are the Cluster scope's
    /// fallback only without (topology always leaves a ready endpoint in when there is one).
    any_ready: bool,
    /// Whether any of this node's endpoints is ready (the Local scope's fallback likewise);
    /// `None` when the port has no Local traffic.
    local: Option<bool>,
}

impl<'a> Selection<'a> {
    fn new(endpoints: &[Endpoint], sp: &ServicePort, node: &'a str, zone: Option<&'a str>) -> Selection<'a> {
        let cluster = sp.uses_cluster_endpoints().then(|| topology_mode(endpoints, node, zone));
        let local = sp.uses_local_endpoints().then(|| endpoints.iter().any(|e| on_node(e, node) && e.ready));
        Selection { node, zone, cluster, any_ready: endpoints.iter().any(|e| e.ready), local }
    }

    fn cluster(&self, e: &Endpoint) -> Choice {
        let Some(mode) = self.cluster else { return Choice::NotNeeded };
        if e.ready {
            return match available(e, mode, self.node, self.zone) {
                Ok(()) => Choice::Chosen,
                Err(hints) => Choice::Passed(Unused::Topology(hints)),
            };
        }
        fallback(e, self.any_ready)
    }

    fn local(&self, e: &Endpoint) -> Choice {
        let Some(any_local_ready) = self.local else { return Choice::NotNeeded };
        match on_node(e, self.node) {
            false => Choice::Passed(Unused::OtherNode),
            true if e.ready => Choice::Chosen,
            true => fallback(e, any_local_ready),
        }
    }
}

/// A scope's verdict on an endpoint that is not ready: chosen if serving while terminating
/// and the scope has no ready endpoint.
fn fallback(e: &Endpoint, scope_has_ready: bool) -> Choice {
    match serving_terminating(e) {
        false => Choice::Passed(Unused::NotReady),
        true if scope_has_ready => Choice::Passed(Unused::Terminating),
        true => Choice::Chosen,
    }
}

fn on_node(e: &Endpoint, node: &str) -> bool {
    e.node_name.as_deref() == Some(node)
}

fn topology_mode(endpoints: &[Endpoint], node: &str, zone: Option<&str>) -> TopologyMode {
    let ready = || endpoints.iter().filter(|e| e.ready);
    if ready().next().is_none() {
        return TopologyMode::None;
    }
    let all_node_hints = ready().all(|e| !e.node_hints.is_empty());
    if all_node_hints && ready().any(|e| e.node_hints.iter().any(|n| n == node)) {
        return TopologyMode::SameNode;
    }
    let all_zone_hints = ready().all(|e| !e.zone_hints.is_empty());
    let zone_hinted = |z: &str| ready().any(|e| e.zone_hints.iter().any(|h| h == z));
    if all_zone_hints && zone.is_some_and(zone_hinted) {
        return TopologyMode::SameZone;
    }
    TopologyMode::None
}

/// Whether topology lets a ready endpoint take this node's traffic; if not, which hints said no.
fn available(e: &Endpoint, mode: TopologyMode, node: &str, zone: Option<&str>) -> Result<(), Hints> {
    match mode {
        TopologyMode::None => Ok(()),
        TopologyMode::SameNode if e.node_hints.iter().any(|n| n == node) => Ok(()),
        TopologyMode::SameNode => Err(Hints::Node),
        TopologyMode::SameZone if zone.is_some_and(|z| e.zone_hints.iter().any(|h| h == z)) => Ok(()),
        TopologyMode::SameZone => Err(Hints::Zone),
    }
}
