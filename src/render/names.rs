//! Names of per-service chains and sets: readable `namespace/name/protocol/port` with a role prefix.
//!
//! Upstream puts a hash in front of the same base; here the base alone is unique (it is the
//! `ServicePortName`) and at most about 210 bytes, under nftables' 256-byte limit, so the
//! name stays greppable by namespace.

use super::ruleset::Scope;
use crate::model::{Protocol, ServicePortName};

/// nftables' longest comment in bytes (`NFTNL_UDATA_COMMENT_MAXLEN`); `nft` refuses longer ones.
pub const COMMENT_MAX: usize = 128;

/// An element's comment: its owner's `ServicePortName`, cut to nftables' limit (legal names
/// reach 191 bytes: a 63-byte namespace, name and port name).
pub fn comment(owner: &str) -> &str {
    let mut end = owner.len().min(COMMENT_MAX);
    while !owner.is_char_boundary(end) {
        end -= 1;
    }
    &owner[..end]
}

/// `namespace/name/protocol/port`, with the port number standing in for an unnamed port.
pub fn base(spn: &ServicePortName, port: u16) -> String {
    if spn.port.is_empty() {
        format!("{}/{}/{}/{port}", spn.namespace, spn.name, spn.protocol)
    } else {
        format!("{}/{}/{}/{}", spn.namespace, spn.name, spn.protocol, spn.port)
    }
}

/// The chain ClusterIP traffic enters.
pub fn service_chain(base: &str) -> String {
    format!("service-{base}")
}

/// The chain external IP and LoadBalancer IP traffic enters.
pub fn external_chain(base: &str) -> String {
    format!("external-{base}")
}

/// The chain NodePort traffic enters.
pub fn nodeport_chain(base: &str) -> String {
    format!("nodeport-{base}")
}

/// A session-affinity service's balancing chain for one scope.
pub fn balance_chain(scope: Scope, base: &str) -> String {
    format!("{}-{base}", scope.as_str())
}

/// A session-affinity map of one scope: the clients of the endpoints listening on `port`.
pub fn affinity_map(scope: Scope, base: &str, port: u16) -> String {
    format!("affinity-{}-{base}__{port}", scope.as_str())
}

/// The shared chain that picks one of `n` endpoints from an endpoint map.
pub fn lb_chain(scope: Scope, nodeport: bool, proto: Protocol, n: usize) -> String {
    let kind = if nodeport { "-nodeport" } else { "" };
    format!("lb-{}{kind}-{proto}-{n}", scope.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spn(port: &str) -> ServicePortName {
        ServicePortName { namespace: "ns1".into(), name: "svc1".into(), port: port.into(), protocol: Protocol::Udp }
    }

    #[test]
    fn names_show_namespace_name_protocol_and_port() {
        assert_eq!(service_chain(&base(&spn("dns"), 53)), "service-ns1/svc1/udp/dns");
        assert_eq!(external_chain(&base(&spn(""), 53)), "external-ns1/svc1/udp/53");
        assert_eq!(nodeport_chain(&base(&spn("dns"), 53)), "nodeport-ns1/svc1/udp/dns");
        assert_eq!(balance_chain(Scope::Local, "a/b/tcp/p"), "local-a/b/tcp/p");
        assert_eq!(lb_chain(Scope::Cluster, true, Protocol::Sctp, 3), "lb-cluster-nodeport-sctp-3");
        assert_eq!(lb_chain(Scope::Local, false, Protocol::Tcp, 1), "lb-local-tcp-1");
    }

    #[test]
    fn affinity_maps_are_named_by_scope_service_port_and_target_port() {
        assert_eq!(affinity_map(Scope::Cluster, "a/b/tcp/p", 8080), "affinity-cluster-a/b/tcp/p__8080");
    }

    #[test]
    fn longest_names_fit_nftables_limit() {
        let long = "a".repeat(63);
        let spn =
            ServicePortName { namespace: long.clone(), name: long, port: "p".repeat(63), protocol: Protocol::Sctp };
        assert!(affinity_map(Scope::Cluster, &base(&spn, 1), 65535).len() < 256);
        assert_eq!(comment(&spn.to_string()).len(), COMMENT_MAX);
        assert_eq!(comment("ns/svc:http"), "ns/svc:http");
    }
}
