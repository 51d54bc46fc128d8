//! Endpoint selection: which endpoints a service port's cluster-wide and node-local traffic may use.
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

use crate::model::{Endpoint, ServicePort};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopologyMode {
    None,
    SameNode,
    SameZone,
}

/// Selects the cluster and local endpoints of `sp` as seen from node `node` in `zone`.
pub fn categorize_endpoints<'a>(
    endpoints: &'a [Endpoint],
    sp: &ServicePort,
    node: &str,
    zone: Option<&str>,
) -> Categorized<'a> {
    let mut out = Categorized::default();
    if sp.uses_cluster_endpoints() {
        let mode = topology_mode(endpoints, node, zone);
        out.cluster = pick(endpoints, |e| e.ready && available(e, mode, node, zone));
        if out.cluster.is_empty() {
            out.cluster = pick(endpoints, |e| e.serving && e.terminating);
        }
        out.has_any = !out.cluster.is_empty();
    }
    if !sp.uses_local_endpoints() {
        return out;
    }
    out.has_any |= endpoints.iter().any(|e| e.ready || (e.serving && e.terminating));
    let is_local = |e: &Endpoint| e.node_name.as_deref() == Some(node);
    out.local = pick(endpoints, |e| is_local(e) && e.ready);
    if out.local.is_empty() {
        out.local = pick(endpoints, |e| is_local(e) && e.serving && e.terminating);
    }
    out
}

fn pick(endpoints: &[Endpoint], keep: impl Fn(&Endpoint) -> bool) -> Vec<&Endpoint> {
    endpoints.iter().filter(|e| keep(e)).collect()
}

fn topology_mode(endpoints: &[Endpoint], node: &str, zone: Option<&str>) -> TopologyMode {
    let ready: Vec<&Endpoint> = endpoints.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return TopologyMode::None;
    }
    let all_node_hints = ready.iter().all(|e| !e.node_hints.is_empty());
    if all_node_hints && ready.iter().any(|e| e.node_hints.iter().any(|n| n == node)) {
        return TopologyMode::SameNode;
    }
    let all_zone_hints = ready.iter().all(|e| !e.zone_hints.is_empty());
    let zone_hinted = |z: &str| ready.iter().any(|e| e.zone_hints.iter().any(|h| h == z));
    if all_zone_hints && zone.is_some_and(zone_hinted) {
        return TopologyMode::SameZone;
    }
    TopologyMode::None
}

fn available(e: &Endpoint, mode: TopologyMode, node: &str, zone: Option<&str>) -> bool {
    match mode {
        TopologyMode::None => true,
        TopologyMode::SameNode => e.node_hints.iter().any(|n| n == node),
        TopologyMode::SameZone => zone.is_some_and(|z| e.zone_hints.iter().any(|h| h == z)),
    }
}
