//! Names of per-service chains and sets: readable `namespace/name/protocol/port` with a role prefix.
//!
//! Upstream puts a hash in front of the same base; here the base alone is unique (it is the
//! `ServicePortName`) and at most about 210 bytes, under nftables' 256-byte limit, so the
//! name stays greppable by namespace.

use super::builder::{LbKey, Pick};
use super::maps::Scope;
use crate::model::{Protocol, ServicePortName};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The name of the proxy's table in each family.
pub const TABLE_NAME: &str = "kube-nftproxy";

/// The chains every table declares, by name: the templates write them from here, and so does
/// the Rust that needs one (a refresh telling ours from someone else's, the reject verdict,
/// the guard's watch, explain's reasons).
pub mod chain {
    /// New connections to LoadBalancer IPs with source ranges, before DNAT.
    pub const FIREWALL_CHECK: &str = "firewall-check";
    /// Where NAT sends every packet to a service address or node port.
    pub const SERVICES: &str = "services";
    /// Marked packets masqueraded on their way out.
    pub const MASQUERADING: &str = "masquerading";
    /// Services without endpoints: dropped or rejected.
    pub const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
    /// Node ports without endpoints: dropped or rejected.
    pub const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
    /// Ports of ClusterIPs no Service serves: rejected.
    pub const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
    /// The verdict of a service with no endpoints that rejects.
    pub const REJECT: &str = "reject-chain";
    /// Base chain: filter, prerouting, before DNAT.
    pub const FILTER_PREROUTING_PRE_DNAT: &str = "filter-prerouting-pre-dnat";
    /// Base chain: filter, output, before DNAT.
    pub const FILTER_OUTPUT_PRE_DNAT: &str = "filter-output-pre-dnat";
    /// Base chain: filter, input.
    pub const FILTER_INPUT: &str = "filter-input";
    /// Base chain: filter, prerouting.
    pub const FILTER_PREROUTING: &str = "filter-prerouting";
    /// Base chain: filter, output.
    pub const FILTER_OUTPUT: &str = "filter-output";
    /// Base chain: NAT, prerouting.
    pub const NAT_PREROUTING: &str = "nat-prerouting";
    /// Base chain: NAT, output.
    pub const NAT_OUTPUT: &str = "nat-output";
    /// Base chain: NAT, postrouting.
    pub const NAT_POSTROUTING: &str = "nat-postrouting";
    /// Where a ClusterIP frontend without a `service-ips` element is led by its endpoint
    /// count (`render::dispatch`). Every table has it, but its rules follow the counts in use,
    /// so it is written with the per-service chains, not with these.
    pub const DISPATCH: &str = "dispatch";

    /// Every one of them (a test checks the templates declare exactly these).
    pub const ALL: [&str; 15] = [
        FIREWALL_CHECK,
        SERVICES,
        MASQUERADING,
        SERVICE_ENDPOINTS_CHECK,
        NODEPORT_ENDPOINTS_CHECK,
        CLUSTER_IPS_CHECK,
        REJECT,
        FILTER_PREROUTING_PRE_DNAT,
        FILTER_OUTPUT_PRE_DNAT,
        FILTER_INPUT,
        FILTER_PREROUTING,
        FILTER_OUTPUT,
        NAT_PREROUTING,
        NAT_OUTPUT,
        NAT_POSTROUTING,
    ];
}

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

/// The prefix of the chain ClusterIP traffic enters ([`service_chain`]).
const SERVICE_PREFIX: &str = "service-";
/// The prefix of the chain external and LoadBalancer IP traffic enters ([`external_chain`]).
const EXTERNAL_PREFIX: &str = "external-";
/// The prefix of the chain NodePort traffic enters ([`nodeport_chain`]).
const NODEPORT_PREFIX: &str = "nodeport-";

/// The chain ClusterIP traffic enters.
pub fn service_chain(base: &str) -> String {
    format!("{SERVICE_PREFIX}{base}")
}

/// The chain external IP and LoadBalancer IP traffic enters.
pub fn external_chain(base: &str) -> String {
    format!("{EXTERNAL_PREFIX}{base}")
}

/// The chain NodePort traffic enters.
pub fn nodeport_chain(base: &str) -> String {
    format!("{NODEPORT_PREFIX}{base}")
}

/// A session-affinity service's balancing chain for one scope.
pub fn balance_chain(scope: Scope, base: &str) -> String {
    format!("{}-{base}", scope.as_str())
}

/// What follows a balancing chain's prefix for `scope` ([`balance_chain`]), if `chain` has it.
fn balance_base(scope: Scope, chain: &str) -> Option<&str> {
    chain.strip_prefix(scope.as_str())?.strip_prefix('-')
}

/// Whether `chain` picks an endpoint: a shared `lb-` chain (`lb_chain`, `rr_chain`) or a
/// balancing chain of either scope ([`balance_chain`]).
pub fn picks_endpoints(chain: &str) -> bool {
    chain.starts_with("lb-") || [Scope::Cluster, Scope::Local].into_iter().any(|s| balance_base(s, chain).is_some())
}

/// Whether `chain` picks among this node's endpoints only.
pub fn picks_local_endpoints(chain: &str) -> bool {
    chain.starts_with("lb-local-") || balance_base(Scope::Local, chain).is_some()
}

/// Whether `chain` is a service port's ClusterIP chain ([`service_chain`]).
pub fn is_service_chain(chain: &str) -> bool {
    chain.starts_with(SERVICE_PREFIX)
}

/// The service port a per-service-port chain belongs to, the inverse of [`service_chain`],
/// [`external_chain`], [`nodeport_chain`] and [`balance_chain`] over [`base`]: an unnamed
/// port (written as its number, where a port name holds a letter) comes back with an empty
/// name. `None` for a shared or fixed chain.
pub fn owner_of_chain(chain: &str) -> Option<ServicePortName> {
    let base = [SERVICE_PREFIX, EXTERNAL_PREFIX, NODEPORT_PREFIX]
        .into_iter()
        .find_map(|p| chain.strip_prefix(p))
        .or_else(|| [Scope::Cluster, Scope::Local].into_iter().find_map(|s| balance_base(s, chain)))?;
    let parts: Vec<&str> = base.split('/').collect();
    let [ns, name, proto, port] = parts.as_slice() else { return None };
    let protocol = Protocol::ALL.into_iter().find(|p| p.as_str() == *proto)?;
    if ns.is_empty() || name.is_empty() || port.is_empty() {
        return None;
    }
    let port = if port.bytes().all(|b| b.is_ascii_digit()) { String::new() } else { port.to_string() };
    Some(ServicePortName { namespace: ns.to_string(), name: name.to_string(), port, protocol })
}

/// Whether a chain or set named `name` is one this proxy makes: a fixed chain, a service
/// port's chain, a shared or round-robin `lb-` chain, an affinity set, or the copy of a map
/// a rehash reads from meanwhile. A full sync that
/// finds such an object it no longer declares (a scheduler's chains after the Service left
/// it) deletes it as its own leftover, not as something another process added. (An
/// earlier version's endpoint maps are sets of ours too: [`super::unparted_endpoint_map`].)
pub fn named_ours(name: &str) -> bool {
    chain::ALL.contains(&name)
        || owner_of_chain(name).is_some()
        || name.starts_with("lb-")
        || is_dispatch_chain(name)
        || name.strip_prefix("affinity-").and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n < AFFINITY_SHARDS)
        || super::copied_map(name).is_some()
}

/// How many sets session-affinity entries are spread over: few, because every named set
/// makes each later reference to a set in a transaction walk past it, and more than one,
/// because the kernel caps a set that rules fill at 65,535 entries.
pub const AFFINITY_SHARDS: u32 = 64;

/// A 32-bit FNV-1a hash: stable across restarts and builds, as the entries it keys outlive
/// the process.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u32 {
    bytes.into_iter().fold(0x811c_9dc5, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// The id of a service port's session-affinity group in its entries' keys. Both scopes
/// share it, as upstream's cluster and local chains share each endpoint's set: a client sent
/// to an endpoint through one is known to the other.
pub fn affinity_id(base: &str) -> u32 {
    fnv1a(base.bytes())
}

/// An endpoint's number in the entries of affinity group `id`: the group and the endpoint's
/// address and port hashed, so it is the same after a restart, and an entry of an endpoint
/// that went leads nowhere.
pub fn endpoint_index(id: u32, ip: IpAddr, port: u16) -> u32 {
    let addr = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    fnv1a(id.to_be_bytes().into_iter().chain(addr).chain(port.to_be_bytes()))
}

/// The set holding the entries of affinity group `id`.
pub fn affinity_map(id: u32) -> String {
    format!("affinity-{}", id % AFFINITY_SHARDS)
}

/// How many `turns-*` maps round-robin ports are spread over: the kernel walks every rule
/// already reading a map when another rule starts reading it, which with one map took a
/// table of 30,000 ports 11 s; spread over 64, a 64th of that.
pub const TURN_SHARDS: u8 = 64;

/// The `turns-*` map a round-robin port's rule reads.
pub fn turn_shard(base: &str) -> u8 {
    (fnv1a(base.bytes()) % u32::from(TURN_SHARDS)) as u8
}

/// The shared chain that picks one of `n` endpoint slots from an endpoint map: at random
/// (`lb-cluster-tcp-3`), by the client's hash (`lb-cluster-tcp-hash-101`), or always slot `n`
/// (`lb-cluster-tcp-slot-2`, where a round-robin turn leads).
pub(super) fn lb_chain(key: &LbKey) -> String {
    let kind = if key.nodeport { "-nodeport" } else { "" };
    let pick = match key.pick {
        Pick::Random => "",
        // Not shared (`rr_chain` names a port's own), named apart all the same.
        Pick::Turn(_) => "turn-",
        Pick::Slot => "slot-",
        Pick::Hash { port: false } => "hash-",
        Pick::Hash { port: true } => "hash-port-",
    };
    format!("lb-{}{kind}-{}-{pick}{}", key.scope.as_str(), key.proto, key.n)
}

/// A step of the dispatch by endpoint count: frontends of `scope` and `proto` with `lo` to
/// `hi` endpoints (`dispatch-cluster-tcp-2-7`).
pub(super) fn dispatch_chain(scope: Scope, proto: Protocol, lo: usize, hi: usize) -> String {
    format!("{}-{}-{proto}-{lo}-{hi}", chain::DISPATCH, scope.as_str())
}

/// Whether `name` is the dispatch's entry chain or one of its steps ([`dispatch_chain`]).
pub fn is_dispatch_chain(name: &str) -> bool {
    name == chain::DISPATCH || name.strip_prefix(chain::DISPATCH).is_some_and(|rest| rest.starts_with('-'))
}

/// The least endpoint count the dispatch's entry chain `entry` (its rules' text) leads each
/// endpoint map's frontends to, by map name: the `lo` of the search its rule goes to
/// ([`dispatch_chain`]), or the count of the one `lb-*` chain. A frontend with fewer
/// endpoints than that in the map would be led to slots it does not hold.
pub fn dispatch_floors(entry: &str) -> BTreeMap<String, usize> {
    let floor = |to: &str| -> Option<usize> {
        let mut parts = to.rsplit('-');
        let last = parts.next()?.parse().ok()?;
        if is_dispatch_chain(to) { parts.next()?.parse().ok() } else { Some(last) }
    };
    let mut out = BTreeMap::new();
    for line in entry.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let map = words.iter().find_map(|w| w.strip_prefix('@'));
        if let (Some(map), Some(n)) = (map, words.last().and_then(|to| floor(to))) {
            out.insert(map.to_string(), n);
        }
    }
    out
}

/// Where a scope's, frontend kind's and protocol's round-robin turns start in the `turns`
/// map: each has a range of 65,536 (more slots than a service has endpoints).
pub fn turn_base(scope: Scope, nodeport: bool, proto: Protocol) -> u32 {
    let proto = Protocol::ALL.iter().position(|p| *p == proto).unwrap_or(0) as u32;
    ((scope as u32 * 2 + u32::from(nodeport)) * 3 + proto) << 16
}

/// A round-robin service port's own chain for one scope and frontend kind: the kernel keeps
/// a turn counter per rule, so ports cannot share one.
pub fn rr_chain(scope: Scope, nodeport: bool, base: &str) -> String {
    let kind = if nodeport { "-nodeport" } else { "" };
    format!("lb-{}{kind}-rr-{base}", scope.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spn(port: &str) -> ServicePortName {
        ServicePortName { namespace: "ns1".into(), name: "svc1".into(), port: port.into(), protocol: Protocol::Udp }
    }

    #[test]
    fn our_names_are_told_from_others() {
        for ours in
            ["services", "service-ns/web/tcp/http", "lb-cluster-tcp-slot-2", "lb-local-rr-ns/web/tcp/80", "affinity-63"]
        {
            assert!(named_ours(ours), "{ours}");
        }
        for theirs in ["stray", "affinity-64", "affinity-x", "service-", "KUBE-SERVICES"] {
            assert!(!named_ours(theirs), "{theirs}");
        }
    }

    #[test]
    fn names_show_namespace_name_protocol_and_port() {
        assert_eq!(service_chain(&base(&spn("dns"), 53)), "service-ns1/svc1/udp/dns");
        assert_eq!(external_chain(&base(&spn(""), 53)), "external-ns1/svc1/udp/53");
        assert_eq!(nodeport_chain(&base(&spn("dns"), 53)), "nodeport-ns1/svc1/udp/dns");
        assert_eq!(balance_chain(Scope::Local, "a/b/tcp/p"), "local-a/b/tcp/p");
        assert!(picks_endpoints("cluster-a/b/tcp/p") && picks_local_endpoints("local-a/b/tcp/p"));
        let lb = |scope, nodeport, proto, n, pick| lb_chain(&LbKey { scope, nodeport, proto, n, pick });
        assert_eq!(lb(Scope::Cluster, true, Protocol::Sctp, 3, Pick::Random), "lb-cluster-nodeport-sctp-3");
        assert_eq!(lb(Scope::Local, false, Protocol::Tcp, 1, Pick::Random), "lb-local-tcp-1");
        assert_eq!(
            lb(Scope::Cluster, false, Protocol::Tcp, 101, Pick::Hash { port: false }),
            "lb-cluster-tcp-hash-101"
        );
        assert_eq!(
            lb(Scope::Local, true, Protocol::Udp, 5, Pick::Hash { port: true }),
            "lb-local-nodeport-udp-hash-port-5"
        );
        assert_eq!(lb(Scope::Cluster, false, Protocol::Tcp, 2, Pick::Slot), "lb-cluster-tcp-slot-2");
        assert_eq!(rr_chain(Scope::Cluster, true, "a/b/tcp/p"), "lb-cluster-nodeport-rr-a/b/tcp/p");
        let bases: std::collections::BTreeSet<u32> = [Scope::Cluster, Scope::Local]
            .into_iter()
            .flat_map(|s| [false, true].into_iter().flat_map(move |n| Protocol::ALL.map(|p| turn_base(s, n, p))))
            .collect();
        assert_eq!(bases.len(), 12, "a range of turns each");
        assert_eq!((bases.first(), bases.last()), (Some(&0), Some(&(11 << 16))));
    }

    #[test]
    fn owner_of_chain_inverts_every_per_port_chain_name() {
        for spn in [spn("dns"), spn("")] {
            let base = base(&spn, 53);
            let chains = [
                service_chain(&base),
                external_chain(&base),
                nodeport_chain(&base),
                balance_chain(Scope::Cluster, &base),
                balance_chain(Scope::Local, &base),
            ];
            for chain in chains {
                assert_eq!(owner_of_chain(&chain).as_ref(), Some(&spn), "{chain}");
            }
        }
        let shared =
            ["lb-cluster-tcp-3", "services", "nodeport-endpoints-check", "service-a/b/icmp/1", "local-a/b/tcp"];
        for chain in shared.into_iter().chain(chain::ALL) {
            assert_eq!(owner_of_chain(chain), None, "{chain}");
        }
    }

    #[test]
    fn affinity_ids_are_stable_hashes_spread_over_the_shards() {
        // FNV-1a's published test value, so the ids cannot drift between builds.
        assert_eq!(fnv1a(*b"a"), 0xe40c_292c);
        assert_ne!(affinity_id("a/b/tcp/p"), affinity_id("a/b/tcp/q"));
        let ip: IpAddr = "10.0.0.1".parse().expect("test address");
        assert_ne!(endpoint_index(1, ip, 80), endpoint_index(1, ip, 81));
        assert_ne!(endpoint_index(1, ip, 80), endpoint_index(2, ip, 80));
        let shards: std::collections::BTreeSet<String> =
            (0..1000).map(|i| affinity_map(affinity_id(&format!("ns/s{i}/tcp/p")))).collect();
        assert_eq!(shards.len(), AFFINITY_SHARDS as usize, "a thousand groups use every shard");
    }

    #[test]
    fn longest_names_fit_nftables_limit() {
        let long = "a".repeat(63);
        let spn =
            ServicePortName { namespace: long.clone(), name: long, port: "p".repeat(63), protocol: Protocol::Sctp };
        assert_eq!(comment(&spn.to_string()).len(), COMMENT_MAX);
        assert_eq!(comment("ns/svc:http"), "ns/svc:http");
    }
}
