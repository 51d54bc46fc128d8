//! The named sets and maps of a table, and the scope (cluster or node-local) their names carry.

use crate::model::Protocol;
use std::fmt;

/// Who uses an endpoint map: traffic balanced over all cluster endpoints or over this node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Cluster traffic policy endpoints.
    Cluster,
    /// Node-local endpoints.
    Local,
}

impl Scope {
    /// Name fragment used in map and chain names.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Cluster => "cluster",
            Scope::Local => "local",
        }
    }
}

/// The named sets and maps a table holds elements in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MapName {
    /// `service-ips`: service IP . proto . port → verdict.
    ServiceIps,
    /// `service-nodeports`: proto . port → verdict.
    ServiceNodeports,
    /// `no-endpoint-services`: service IP . proto . port → drop / reject.
    NoEndpointServices,
    /// `no-endpoint-nodeports`: proto . port → drop / reject.
    NoEndpointNodeports,
    /// `cluster-ips`: every active ClusterIP.
    ClusterIps,
    /// `nodeport-ips`: the node addresses NodePorts are served on.
    NodeportIps,
    /// `firewall-ips`: LB IP . proto . port guarded by source ranges.
    FirewallIps,
    /// `firewall-allow`: LB IP . proto . port . allowed source range.
    FirewallAllow,
    /// `hairpin-connections`: endpoint . endpoint, for pods reaching themselves.
    HairpinConnections,
    /// `service-cidrs`: the ServiceCIDRs' ranges, where an address no Service holds is dropped.
    ServiceCidrs,
    /// `{scope}-endpoints-{proto}`: frontend IP . port . slot → endpoint.
    Endpoints(Scope, Protocol),
    /// `{scope}-nodeport-endpoints-{proto}`: node port . slot → endpoint.
    NodeportEndpoints(Scope, Protocol),
    /// `turns-{shard}`: a round-robin turn → the chain that takes the endpoint slot of that
    /// number, each scope, frontend kind and protocol in a range of turns of its own. Round
    /// robin's rules (one per port) read these small maps, not the endpoint maps, spread
    /// over [`super::names::TURN_SHARDS`] of them: the kernel walks every rule already
    /// reading a map when another rule starts reading it.
    Turns(u8),
}

impl MapName {
    /// Every set and map a table declares.
    pub fn all() -> Vec<MapName> {
        let mut all = vec![
            MapName::ServiceIps,
            MapName::ServiceNodeports,
            MapName::NoEndpointServices,
            MapName::NoEndpointNodeports,
            MapName::ClusterIps,
            MapName::NodeportIps,
            MapName::FirewallIps,
            MapName::FirewallAllow,
            MapName::HairpinConnections,
            MapName::ServiceCidrs,
        ];
        for scope in [Scope::Cluster, Scope::Local] {
            all.extend(Protocol::ALL.map(|proto| MapName::Endpoints(scope, proto)));
            all.extend(Protocol::ALL.map(|proto| MapName::NodeportEndpoints(scope, proto)));
        }
        all.extend((0..super::names::TURN_SHARDS).map(MapName::Turns));
        all
    }
}

impl MapName {
    /// Whether this map's elements stand for one service port's frontend (keyed by it, or by
    /// it and a slot), so that an element names whose frontend it is: the dispatch maps,
    /// `firewall-ips`, and the endpoint maps, whose slot 0 stands for a ClusterIP that the
    /// dispatch by endpoint count finds (it has no `service-ips` element).
    pub fn names_frontend(self) -> bool {
        matches!(
            self,
            MapName::ServiceIps
                | MapName::ServiceNodeports
                | MapName::NoEndpointServices
                | MapName::NoEndpointNodeports
                | MapName::FirewallIps
                | MapName::Endpoints(..)
                | MapName::NodeportEndpoints(..)
        )
    }
}

/// Hash maps with fewer elements than this are declared without a size: the kernel starts
/// their table small and grows it as elements come.
pub const SIZED_FROM: usize = 4096;

impl MapName {
    /// The `size` this map is declared with at a full sync when it holds `elements`: room for
    /// half as many again, three times a power of two. A declared size lets the kernel build
    /// its hash table once, where growing it element by element was a third of a 30k-service
    /// sync; it is also a limit, which a partial sync that would pass it raises in place
    /// (`nft::sizes`). The kernel gives a map of size S a table of
    /// 4S/3 buckets rounded up to a power of two, which it allocates and zeroes under the
    /// nf_tables commit mutex: for three times a power of two that is exact, and at 100k
    /// Services the endpoint map's table takes 8 MB (about 35 ms) instead of the 16 MB a power
    /// of two called for. `None` for small maps and for interval sets, whose backend is not a
    /// hash.
    pub fn size_for(self, elements: usize) -> Option<u32> {
        if matches!(self, MapName::FirewallAllow | MapName::ServiceCidrs) || elements < SIZED_FROM {
            return None;
        }
        u32::try_from((elements + elements / 2).div_ceil(3).next_power_of_two() * 3).ok()
    }
}

/// How a sized map's comment ends, before the size its hash table was built for: the kernel
/// keeps a map's comment when a partial sync declares it larger (only its limit changes), so
/// the comment tells how far it has grown past its table, across restarts too.
pub const BUILT_FOR: &str = "hash table built for ";

/// The size a map's comment says its hash table was built for.
pub fn built_for(comment: &str) -> Option<u32> {
    comment.rsplit_once(BUILT_FOR)?.1.parse().ok()
}

/// A map's comment without the size its hash table was built for.
pub fn without_built_for(comment: &str) -> &str {
    match comment.rsplit_once(BUILT_FOR) {
        Some((text, _)) => text.strip_suffix("; ").unwrap_or(text),
        None => comment,
    }
}

impl fmt::Display for MapName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapName::ServiceIps => f.write_str("service-ips"),
            MapName::ServiceNodeports => f.write_str("service-nodeports"),
            MapName::NoEndpointServices => f.write_str("no-endpoint-services"),
            MapName::NoEndpointNodeports => f.write_str("no-endpoint-nodeports"),
            MapName::ClusterIps => f.write_str("cluster-ips"),
            MapName::NodeportIps => f.write_str("nodeport-ips"),
            MapName::FirewallIps => f.write_str("firewall-ips"),
            MapName::FirewallAllow => f.write_str("firewall-allow"),
            MapName::HairpinConnections => f.write_str("hairpin-connections"),
            MapName::ServiceCidrs => f.write_str("service-cidrs"),
            MapName::Endpoints(s, p) => write!(f, "{}-endpoints-{p}", s.as_str()),
            MapName::NodeportEndpoints(s, p) => write!(f, "{}-nodeport-endpoints-{p}", s.as_str()),
            MapName::Turns(shard) => write!(f, "turns-{shard}"),
        }
    }
}
