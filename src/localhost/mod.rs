//! Localhost NodePorts (upstream's KEP-6032, gate `KubeProxyNFTablesLocalhostNodePorts`):
//! with `nodePortAddresses` naming loopback (`localhost`), each TCP NodePort is also served on
//! `127.0.0.1` and `::1` by a userspace proxy, as upstream's nftables mode serves them. The
//! kernel cannot: DNAT of a packet from `127.0.0.1` to a pod needs `route_localnet`, which lets
//! the node's neighbours reach its localhost services (CVE-2020-8558), and IPv6 has no such
//! switch at all (docs/design.md, "Localhost NodePorts").
//!
//! The sync thread keeps a [`LocalhostView`] of what each Service asks for and hands the whole
//! [`Wanted`] set to the [`proxy`] thread when it changes; that thread alone owns the
//! listeners and picks endpoints.

pub mod conn;
pub mod proxy;
pub mod workers;

use crate::config::Config;
use crate::model::{Family, Model, ObjectKey, Protocol};
use crate::topology::categorize_endpoints;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// What one localhost NodePort serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The service port, as upstream names it (`namespace/name:port`), for logs.
    pub service: String,
    /// The endpoints a connection may go to: the port's external-traffic endpoints (this
    /// node's alone under `externalTrafficPolicy: Local`), as for the NodePort's other
    /// addresses.
    pub endpoints: Vec<SocketAddr>,
    /// ClientIP affinity's timeout: every local client is the one loopback client, so a
    /// picked endpoint stays until no new connection came for this long.
    pub affinity: Option<Duration>,
}

/// A localhost NodePort: its family and port.
pub type Port = (Family, u16);

/// The localhost NodePorts to serve: per family and port, what each serves.
pub type Wanted = BTreeMap<Port, Spec>;

/// The families that serve localhost NodePorts under `cfg`: where the gate is on and
/// `nodePortAddresses` names loopback of the family.
pub fn families(cfg: &Config) -> Vec<Family> {
    let serves = |f: &Family| cfg.localhost_nodeports && cfg.nodeport_addresses.names_loopback(*f);
    Family::ALL.into_iter().filter(serves).collect()
}

/// What each Service asks of localhost NodePorts, kept per Service and brought up to date
/// only for the Services a sync touched.
#[derive(Debug, Default)]
pub struct LocalhostView {
    families: Vec<Family>,
    services: BTreeMap<ObjectKey, Vec<(Port, Spec)>>,
}

impl LocalhostView {
    /// A view serving `families` (from [`families`]).
    pub fn new(families: Vec<Family>) -> LocalhostView {
        LocalhostView { families, services: BTreeMap::new() }
    }

    /// Brings the Services in `touched` (every Service when `all`) up to `model` as seen from
    /// node `node`; whether what is wanted changed.
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

    fn refresh(&mut self, model: &Model, node: &str, key: &ObjectKey) -> bool {
        let now = self.specs(model, node, key);
        let before = match now.is_empty() {
            true => self.services.remove(key),
            false => self.services.insert(key.clone(), now.clone()),
        };
        before.unwrap_or_default() != now
    }

    /// One Service's localhost NodePorts: each TCP NodePort of a family served here that has
    /// an endpoint it may use (upstream opens no listener without one, so the connection is
    /// refused).
    fn specs(&self, model: &Model, node: &str, key: &ObjectKey) -> Vec<(Port, Spec)> {
        let Some(ports) = model.services.get(key) else { return Vec::new() };
        let zone = model.node.as_ref().and_then(|n| n.zone.as_deref());
        let mut out = Vec::new();
        for sp in ports.iter().filter(|sp| sp.name.protocol == Protocol::Tcp) {
            let Some(node_port) = sp.node_port else { continue };
            for &family in &self.families {
                if !sp.cluster_ips.iter().any(|ip| Family::of(ip) == family) {
                    continue;
                }
                let endpoints = model.endpoints(&sp.name, family);
                let cat = categorize_endpoints(&endpoints, sp, node, zone);
                let usable = if sp.external_policy_local { &cat.local } else { &cat.cluster };
                if usable.is_empty() {
                    continue;
                }
                let endpoints = usable.iter().map(|e| SocketAddr::new(e.ip, e.port)).collect();
                let affinity = sp.affinity_timeout.map(|s| Duration::from_secs(u64::from(s)));
                out.push(((family, node_port), Spec { service: sp.name.to_string(), endpoints, affinity }));
            }
        }
        out
    }

    /// Everything wanted now. Of Services sharing a NodePort (a conflict the API server
    /// refuses) the first by namespace and name has it.
    pub fn wanted(&self) -> Wanted {
        let mut out = Wanted::new();
        for (key, spec) in self.services.values().flatten() {
            out.entry(*key).or_insert_with(|| spec.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests;
