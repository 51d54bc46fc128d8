//! The named sets and maps of a table, and the scope (cluster or node-local) their names carry.

use super::key::Key;
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
    /// `{scope}-endpoints-{proto}-{part}`: frontend IP . port . slot → endpoint, for the
    /// slots of one [`part`].
    Endpoints(Scope, Protocol, u8),
    /// `{scope}-nodeport-endpoints-{proto}-{part}`: node port . slot → endpoint, for the
    /// slots of one [`part`].
    NodeportEndpoints(Scope, Protocol, u8),
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
            for proto in Protocol::ALL {
                all.extend((0..PARTS).map(|part| MapName::Endpoints(scope, proto, part)));
                all.extend((0..PARTS).map(|part| MapName::NodeportEndpoints(scope, proto, part)));
            }
        }
        all.extend((0..super::names::TURN_SHARDS).map(MapName::Turns));
        all
    }
}

/// How many maps one scope's, protocol's and frontend kind's endpoint slots are spread over:
/// slot `k` is in part `k` up to the last part, which holds every slot from there on. The
/// kernel dumps a map 32 KB a message, each message walking the map from its start, so a
/// restart's read of one map costs the square of its size: at 30k Services of five
/// endpoints, the parts (30k, 30k, 30k and 60k slots) are read in under half the time the
/// one map of 150k took (docs/performance.md).
pub const PARTS: u8 = 4;

/// The part of the endpoint maps that holds `slot`.
pub fn part(slot: usize) -> u8 {
    u8::try_from(slot).map_or(PARTS - 1, |s| s.min(PARTS - 1))
}

impl MapName {
    /// The endpoint map holding `slot` of a frontend of `scope` and `proto`: an IP frontend's,
    /// or a node port's.
    pub fn endpoints(scope: Scope, proto: Protocol, nodeport: bool, slot: usize) -> MapName {
        if nodeport {
            MapName::NodeportEndpoints(scope, proto, part(slot))
        } else {
            MapName::Endpoints(scope, proto, part(slot))
        }
    }

    /// For an endpoint map, its part that holds `key`'s slot; any other map is itself.
    pub fn holding(self, key: &Key) -> MapName {
        match (self, key) {
            (MapName::Endpoints(s, p, _), Key::IpSlot(_, _, slot)) => MapName::Endpoints(s, p, part(*slot as usize)),
            (MapName::NodeportEndpoints(s, p, _), Key::PortSlot(_, slot)) => {
                MapName::NodeportEndpoints(s, p, part(*slot as usize))
            }
            _ => self,
        }
    }

    /// For an endpoint map, its first part (where a frontend's slots start); any other map
    /// is itself.
    pub fn first_part(self) -> MapName {
        match self {
            MapName::Endpoints(s, p, _) => MapName::Endpoints(s, p, 0),
            MapName::NodeportEndpoints(s, p, _) => MapName::NodeportEndpoints(s, p, 0),
            _ => self,
        }
    }

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

/// Whether `name` is an endpoint map of the layout before the parts (one map for all of a
/// scope's, protocol's and frontend kind's slots, as `cluster-endpoints-tcp`): what a
/// restart over an earlier version's tables removes as its own.
pub fn unparted_endpoint_map(name: &str) -> bool {
    MapName::all()
        .into_iter()
        .filter(|m| matches!(m, MapName::Endpoints(_, _, 0) | MapName::NodeportEndpoints(_, _, 0)))
        .any(|m| m.to_string().strip_suffix("-0") == Some(name))
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
    /// of two called for. `None` for small maps, for interval sets, whose backend is not a
    /// hash, and for the `turns-*` maps, which are declared without a size (a round-robin
    /// Service of thousands of endpoints would otherwise have its map counted as sized, and
    /// a later sync would declare that unsized map with a size).
    pub fn size_for(self, elements: usize) -> Option<u32> {
        let never_sized = matches!(self, MapName::FirewallAllow | MapName::ServiceCidrs | MapName::Turns(_));
        if never_sized || elements < SIZED_FROM {
            return None;
        }
        u32::try_from((elements + elements / 2).div_ceil(3).next_power_of_two() * 3).ok()
    }
}

/// How a sized map's comment ends, before the size its hash table was built for: the kernel
/// keeps a map's comment when a partial sync declares it larger (only its limit changes), so
/// the comment tells how far it has grown past its table, across restarts too.
pub const BUILT_FOR: &str = "hash table built for ";

/// How the copy of a map being rehashed is named: the map's name and this. Rules read the
/// copy while the map is declared anew with a larger table (`nft::rehash`); a copy found in
/// the table is a rehash cut short, which the next full sync finishes.
pub const COPY_SUFFIX: &str = "-copy";

/// The name of the copy of map `name` a rehash reads from meanwhile.
pub fn copy_of(name: &str) -> String {
    format!("{name}{COPY_SUFFIX}")
}

/// The map that `name` is the rehash copy of, if it is one of ours.
pub fn copied_map(name: &str) -> Option<MapName> {
    let map = name.strip_suffix(COPY_SUFFIX)?;
    MapName::all().into_iter().find(|m| m.to_string() == map)
}

/// The size a map's comment says its hash table was built for.
pub fn built_for(comment: &str) -> Option<u32> {
    comment.rsplit_once(BUILT_FOR)?.1.parse().ok()
}

/// A sized map's comment: its text, then the size its hash table was built for.
pub fn with_built_for(text: &str, size: impl fmt::Display) -> String {
    match text {
        "" => format!("{BUILT_FOR}{size}"),
        _ => format!("{text}; {BUILT_FOR}{size}"),
    }
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
            MapName::Endpoints(s, p, part) => write!(f, "{}-endpoints-{p}-{part}", s.as_str()),
            MapName::NodeportEndpoints(s, p, part) => write!(f, "{}-nodeport-endpoints-{p}-{part}", s.as_str()),
            MapName::Turns(shard) => write!(f, "turns-{shard}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn each_slot_is_in_its_own_part_up_to_the_last_which_holds_the_rest() {
        let parts: Vec<u8> = [0, 1, 2, 3, 4, 100, usize::MAX].into_iter().map(part).collect();
        assert_eq!(parts, [0, 1, 2, 3, 3, 3, 3]);
        let ip = IpAddr::V4(Ipv4Addr::new(172, 30, 0, 1));
        let map = MapName::endpoints(Scope::Local, Protocol::Udp, false, 0);
        assert_eq!(map.holding(&Key::IpSlot(ip, 53, 5)).to_string(), "local-endpoints-udp-3");
        let nodeport = MapName::endpoints(Scope::Cluster, Protocol::Tcp, true, 1);
        assert_eq!(nodeport.to_string(), "cluster-nodeport-endpoints-tcp-1");
        assert_eq!(nodeport.first_part().to_string(), "cluster-nodeport-endpoints-tcp-0");
        assert_eq!(MapName::ServiceIps.holding(&Key::IpSlot(ip, 80, 2)), MapName::ServiceIps);
    }

    #[test]
    fn only_hash_maps_the_table_declares_with_a_size_are_sized() {
        assert_eq!(MapName::ClusterIps.size_for(SIZED_FROM - 1), None);
        assert_eq!(MapName::ClusterIps.size_for(5_000), Some(12_288), "room for half as many again");
        for bare in [MapName::FirewallAllow, MapName::ServiceCidrs, MapName::Turns(7)] {
            assert_eq!(bare.size_for(100_000), None, "{bare}");
        }
    }

    #[test]
    fn an_earlier_versions_endpoint_maps_are_told_by_name() {
        for earlier in ["cluster-endpoints-tcp", "local-nodeport-endpoints-sctp"] {
            assert!(unparted_endpoint_map(earlier), "{earlier}");
        }
        for other in ["cluster-endpoints-tcp-0", "cluster-endpoints-icmp", "service-ips", "endpoints-tcp"] {
            assert!(!unparted_endpoint_map(other), "{other}");
        }
    }
}
