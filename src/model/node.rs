//! This node: its name, zone label, addresses and pod CIDRs, which decide local endpoints, topology, NodePort addresses and (with `--detect-local-mode=NodeCIDR`) which traffic comes from its pods.

use super::Family;
use super::endpoints::object_key;
use super::services::ObjectError;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use std::net::IpAddr;

/// The well-known zone label that topology hints are matched against.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// What the proxy needs from its own Node object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    /// Node name (matches EndpointSlice `nodeName`).
    pub name: String,
    /// `topology.kubernetes.io/zone`, if labelled.
    pub zone: Option<String>,
    /// InternalIP addresses in listed order, then ExternalIP addresses.
    pub addresses: Vec<IpAddr>,
    /// `spec.podCIDRs` (or the older `spec.podCIDR` alone), in listed order.
    pub pod_cidrs: Vec<IpNet>,
    /// Whether load balancers may send traffic here: not being deleted, and not tainted
    /// for deletion by the cluster autoscaler (`/healthz` says so; the rules do not care).
    pub eligible: bool,
}

/// The taint the cluster autoscaler puts on a node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

impl NodeInfo {
    /// Converts a Node object.
    pub fn from_api(node: &Node) -> Result<NodeInfo, ObjectError> {
        let (_, name) = object_key("Node", &node.metadata)?;
        let zone = node.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).cloned();
        let listed = node.status.iter().flat_map(|s| s.addresses.iter().flatten());
        let mut internal = Vec::new();
        let mut external = Vec::new();
        for a in listed {
            let bucket = match a.type_.as_str() {
                "InternalIP" => &mut internal,
                "ExternalIP" => &mut external,
                _ => continue,
            };
            // As upstream picks node IPs: an address it cannot read is passed over, and the
            // Node keeps its others.
            match super::parse_ip(&a.address) {
                Some(ip) => bucket.push(ip),
                None if a.address.trim().is_empty() => {}
                None => crate::skips::warn_skipped!(
                    "Node {name}: skipping {} {:?}: it is not an IP address",
                    a.type_,
                    a.address
                ),
            }
        }
        internal.extend(external);
        let pod_cidrs = pod_cidrs(node).map_err(|why| ObjectError::new("Node", "", &name, why))?;
        let tainted = node.spec.iter().flat_map(|s| s.taints.iter().flatten()).any(|t| t.key == TO_BE_DELETED_TAINT);
        let eligible = node.metadata.deletion_timestamp.is_none() && !tainted;
        Ok(NodeInfo { name, zone, addresses: internal, pod_cidrs, eligible })
    }

    /// Whether `other` differs from this node only in its eligibility, which the rules do
    /// not depend on.
    pub fn same_for_rules(&self, other: &NodeInfo) -> bool {
        self.name == other.name
            && self.zone == other.zone
            && self.addresses == other.addresses
            && self.pod_cidrs == other.pod_cidrs
    }

    /// The pod CIDRs of one family.
    pub fn pod_cidrs_of(&self, family: Family) -> Vec<IpNet> {
        self.pod_cidrs.iter().filter(|c| Family::of(&c.addr()) == family).copied().collect()
    }

    /// The node's primary IP of a family: its first InternalIP of that family, else its first
    /// ExternalIP, which is what upstream's `primary` NodePort address mode uses.
    pub fn primary_ip(&self, family: Family) -> Option<IpAddr> {
        self.addresses.iter().copied().find(|ip| Family::of(ip) == family)
    }
}

/// The Node's pod CIDRs: `spec.podCIDRs`, or `spec.podCIDR` where only that is set (as the
/// API server fills both, an object written by hand may hold either). Read as upstream reads
/// them, leading zeros in IPv4 included; host bits are cleared.
fn pod_cidrs(node: &Node) -> Result<Vec<IpNet>, String> {
    let spec = node.spec.as_ref();
    let listed: Vec<&String> = match spec.and_then(|s| s.pod_cidrs.as_ref()).filter(|l| !l.is_empty()) {
        Some(list) => list.iter().collect(),
        None => spec.and_then(|s| s.pod_cidr.as_ref()).filter(|c| !c.trim().is_empty()).into_iter().collect(),
    };
    listed
        .into_iter()
        .map(|text| super::parse_cidr(text).ok_or_else(|| format!("pod CIDR {text:?} is not a CIDR")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(spec: serde_json::Value) -> Result<NodeInfo, ObjectError> {
        let node: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "node-a"}, "spec": spec})).expect("a Node");
        NodeInfo::from_api(&node)
    }

    #[test]
    fn pod_cidrs_are_read_as_upstream_reads_them() {
        let cidrs = |spec| node(spec).map(|n| n.pod_cidrs.iter().map(ToString::to_string).collect::<Vec<_>>());
        let both = serde_json::json!({"podCIDR": "10.1.0.0/24", "podCIDRs": ["10.1.0.0/24", "fd00:10:1::/64"]});
        assert_eq!(cidrs(both).unwrap(), ["10.1.0.0/24", "fd00:10:1::/64"]);
        // A Node written before podCIDRs existed, leading zeros, host bits.
        assert_eq!(cidrs(serde_json::json!({"podCIDR": "010.001.000.000/24"})).unwrap(), ["10.1.0.0/24"]);
        assert_eq!(cidrs(serde_json::json!({"podCIDRs": ["10.1.0.7/24"]})).unwrap(), ["10.1.0.0/24"]);
        assert!(cidrs(serde_json::json!({})).unwrap().is_empty());
        for bad in ["10.1.0.0", "10.1.0.0/33", "pods"] {
            assert!(node(serde_json::json!({"podCIDRs": [bad]})).is_err(), "{bad} must be refused");
        }
        let a = node(serde_json::json!({"podCIDRs": ["10.1.0.0/24"]})).unwrap();
        let b = node(serde_json::json!({"podCIDRs": ["10.2.0.0/24"]})).unwrap();
        assert!(!a.same_for_rules(&b), "the rules depend on the pod CIDRs (NodeCIDR)");
    }
}
