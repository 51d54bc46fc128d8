//! What this node holds of each Service that has a Local traffic policy: the health-check node
//! port with its count of ready local endpoints, and which ports have no local endpoint (the
//! `no_local_endpoints` metric). Kept per Service and updated only for the Services a sync
//! touched; the totals walk only the Services with a Local policy, never the whole cluster.

use super::node_ports::ServiceHealth;
use crate::model::{Family, Model, ObjectKey};
use crate::topology::categorize_endpoints;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Per family, how many ports of one Service have no local endpoint: `[internal, external]`.
type NoLocal = [[u32; 2]; 2];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Local {
    /// The health-check node port and its answer.
    health_check: Option<(u16, ServiceHealth)>,
    no_local: NoLocal,
}

/// Two Services claiming one health-check node port: the port, the Service that has it and
/// the one that does not.
type Conflict = (u16, ObjectKey, ObjectKey);

/// The node-local facts of every Service with a Local policy.
#[derive(Debug, Default)]
pub struct LocalView {
    services: BTreeMap<ObjectKey, Local>,
    /// The conflicts logged, so that each is logged once while it lasts.
    conflicts: BTreeSet<Conflict>,
}

impl LocalView {
    /// Brings the Services in `touched` up to `model` as seen from node `node` (every Service
    /// when `all`); returns whether the health-check ports or their answers changed.
    pub fn update<'k>(
        &mut self,
        model: &Model,
        node: &str,
        all: bool,
        touched: impl Iterator<Item = &'k ObjectKey>,
    ) -> bool {
        let gone: Vec<ObjectKey> = match all {
            true => self.services.keys().filter(|k| !model.services.contains_key(*k)).cloned().collect(),
            false => Vec::new(),
        };
        model.refresh_services(all, &gone, touched, |key| self.refresh(model, node, key))
    }

    /// Brings one Service up to `model`; whether its health-check port or answer changed.
    fn refresh(&mut self, model: &Model, node: &str, key: &ObjectKey) -> bool {
        let now = local_of(model, key, node);
        let health_check = now.health_check.clone();
        let before =
            if now == Local::default() { self.services.remove(key) } else { self.services.insert(key.clone(), now) };
        before.and_then(|b| b.health_check) != health_check
    }

    /// The health-check node ports to serve. Of Services claiming one port the first (by
    /// namespace and name) has it; each other claim is logged once while it lasts, as
    /// upstream logs the port it cannot serve for a Service.
    pub fn health_check_ports(&mut self) -> BTreeMap<u16, ServiceHealth> {
        let mut out: BTreeMap<u16, (&ObjectKey, ServiceHealth)> = BTreeMap::new();
        let mut conflicts = BTreeSet::new();
        for (key, (port, s)) in self.services.iter().filter_map(|(k, l)| Some((k, l.health_check.as_ref()?))) {
            let Some((first, _)) = out.get(port) else {
                out.insert(*port, (key, s.clone()));
                continue;
            };
            let conflict = (*port, (*first).clone(), key.clone());
            if !self.conflicts.contains(&conflict) {
                let ((has_ns, has), (lacks_ns, lacks)) = (&conflict.1, &conflict.2);
                log::warn!(
                    "health-check node port {port} of Service {lacks_ns}/{lacks} is already claimed by \
                     Service {has_ns}/{has}; it answers for {has_ns}/{has} alone"
                );
            }
            conflicts.insert(conflict);
        }
        self.conflicts = conflicts;
        out.into_iter().map(|(port, (_, s))| (port, s)).collect()
    }

    /// Ports without a local endpoint, per family and policy (`internal`, `external`).
    pub fn no_local_endpoints(&self) -> [(Family, &'static str, u32); 4] {
        let mut sum: NoLocal = [[0; 2]; 2];
        for l in self.services.values() {
            for (f, row) in l.no_local.iter().enumerate() {
                for (p, n) in row.iter().enumerate() {
                    sum[f][p] += n;
                }
            }
        }
        [
            (Family::V4, "internal", sum[0][0]),
            (Family::V4, "external", sum[0][1]),
            (Family::V6, "internal", sum[1][0]),
            (Family::V6, "external", sum[1][1]),
        ]
    }
}

/// One Service's node-local facts (nothing for a Service without a Local policy, or gone).
fn local_of(model: &Model, key: &ObjectKey, node: &str) -> Local {
    let mut l = Local::default();
    let Some(ports) = model.services.get(key) else { return l };
    // Most Services have neither a Local policy nor a health check: nothing to look at.
    if !ports.iter().any(|p| p.health_check_node_port.is_some() || p.uses_local_endpoints()) {
        return l;
    }
    let zone = model.node.as_ref().and_then(|n| n.zone.as_deref());
    let health_check = ports.iter().find_map(|p| p.health_check_node_port);
    // Per family, as upstream's proxier of each family counts only its own endpoints.
    let mut ready_here: [BTreeSet<IpAddr>; 2] = Default::default();
    for sp in ports {
        for (i, family) in Family::ALL.into_iter().enumerate() {
            if !sp.cluster_ips.iter().any(|ip| Family::of(ip) == family) {
                continue;
            }
            let endpoints = model.endpoints(&sp.name, family);
            if health_check.is_some() {
                let here = endpoints.iter().filter(|e| e.ready && e.node_name.as_deref() == Some(node));
                ready_here[i].extend(here.map(|e| e.ip));
            }
            if !sp.uses_local_endpoints() {
                continue;
            }
            // As upstream: a port without any usable endpoint is rejected, not counted.
            let cat = categorize_endpoints(&endpoints, sp, node, zone);
            if cat.has_any && cat.local.is_empty() {
                l.no_local[i][0] += u32::from(sp.internal_policy_local);
                l.no_local[i][1] += u32::from(sp.externally_accessible() && sp.external_policy_local);
            }
        }
    }
    let families = Family::ALL.map(|f| ports.iter().any(|sp| sp.cluster_ips.iter().any(|ip| Family::of(ip) == f)));
    l.health_check = health_check.map(|port| {
        let local_endpoints = ready_here.map(|ips| ips.len());
        (port, ServiceHealth { namespace: key.0.clone(), name: key.1.clone(), local_endpoints, families })
    });
    l
}
