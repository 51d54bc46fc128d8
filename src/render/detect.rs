//! Local-traffic detection (kube-proxy's `--detect-local-mode`): how the rules tell packets
//! from this node's pods apart, per family, and the node IPs the rules compare against.
//!
//! Pod traffic to a ClusterIP keeps its source while other traffic is masqueraded, and pod
//! traffic to an external IP of an `externalTrafficPolicy: Local` Service may use any
//! endpoint, as upstream's nftables mode does. The match itself is written by the templates
//! (`elements.nft`'s `if_local` and `if_not_local`).

use crate::config::{Config, DetectLocal};
use crate::model::{Family, NodeInfo};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest interface name Linux allows (`IFNAMSIZ` less its terminating zero).
const MAX_INTERFACE_NAME: usize = 15;

/// What marks a packet as coming from this node's pods, in one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detector {
    /// Nothing does: no off-cluster masquerade of ClusterIP traffic, no pod short-circuit.
    None,
    /// Its source is within one of these CIDRs (`ClusterCIDR`, `NodeCIDR`).
    Cidrs(Vec<IpNet>),
    /// It arrived on this interface (`BridgeInterface`).
    Interface(String),
    /// It arrived on an interface whose name starts with this (`InterfaceNamePrefix`).
    InterfacePrefix(String),
}

impl Detector {
    /// The detector of `family` under `cfg`, and a warning when the mode cannot detect
    /// anything yet. The interface modes match on the input interface, which locally
    /// generated packets have none of: the node's own traffic is never taken for a pod's.
    pub fn of(cfg: &Config, node: Option<&NodeInfo>, family: Family) -> (Detector, Option<String>) {
        let cidrs = |list: Vec<IpNet>| if list.is_empty() { Detector::None } else { Detector::Cidrs(list) };
        match &cfg.detect_local {
            DetectLocal::ClusterCidr => {
                (cidrs(cfg.cluster_cidrs.iter().filter(|c| Family::of(&c.addr()) == family).copied().collect()), None)
            }
            DetectLocal::NodeCidr => {
                let all = node.map(|n| n.pod_cidrs.as_slice()).unwrap_or_default();
                // One warning per table set, not per family: a single-stack node has no pod
                // CIDR of the other family, which is no fault.
                let warning = (all.is_empty() && family == Family::V4).then(|| {
                    format!(
                        "--detect-local-mode=NodeCIDR: Node {:?} has no spec.podCIDRs yet: traffic from its pods \
                         cannot be told apart (no ClusterIP masquerade of other traffic, no pod short-circuit)",
                        cfg.node_name
                    )
                });
                (cidrs(node.map(|n| n.pod_cidrs_of(family)).unwrap_or_default()), warning)
            }
            DetectLocal::BridgeInterface(name) => (Detector::Interface(name.clone()), None),
            // A prefix as long as an interface name (15 bytes) matches that name alone, and
            // nft refuses the 16 bytes it would take with the wildcard.
            DetectLocal::InterfaceNamePrefix(prefix) if prefix.len() >= MAX_INTERFACE_NAME => {
                (Detector::Interface(prefix.clone()), None)
            }
            DetectLocal::InterfaceNamePrefix(prefix) => (Detector::InterfacePrefix(prefix.clone()), None),
        }
    }

    /// Whether anything is detected (the templates write no rule otherwise).
    pub fn present(&self) -> bool {
        !matches!(self, Detector::None)
    }
}

/// This node's IP of `family` as upstream's proxier of that family holds it: `--bind-address`
/// when it is of that family, else the Node's first address of the family (InternalIP
/// before ExternalIP), else loopback. Upstream uses it for `primary` NodePort addresses (not
/// when loopback) and the `loadBalancerSourceRanges` allowance.
pub fn node_ip(cfg: &Config, node: Option<&NodeInfo>, family: Family) -> IpAddr {
    let bound = cfg.bind_address.filter(|ip| Family::of(ip) == family);
    bound.or_else(|| node.and_then(|n| n.primary_ip(family))).unwrap_or(match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Family::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn detector(args: &[&str]) -> Detector {
        let argv = ["kube-nftproxy", "--hostname-override=n"].iter().chain(args);
        let cfg = Config::from_flags(&crate::config::Flags::parse_from(argv)).expect("config");
        Detector::of(&cfg, None, Family::V4).0
    }

    #[test]
    fn a_prefix_as_long_as_an_interface_name_matches_that_name() {
        let mode = "--detect-local-mode=InterfaceNamePrefix";
        assert_eq!(detector(&[mode, "--pod-interface-name-prefix=veth"]), Detector::InterfacePrefix("veth".into()));
        let longest = "abcdefghijklmno";
        let flag = format!("--pod-interface-name-prefix={longest}");
        assert_eq!(detector(&[mode, &flag]), Detector::Interface(longest.into()));
    }
}
