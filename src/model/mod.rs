//! The proxy's view of the cluster: service ports, endpoints, this node and the service ranges, converted from API objects at the edge.

mod change;
mod cidrs;
mod endpoints;
mod node;
mod scheduler;
mod services;

pub use change::{ObjectChange, ObjectId, ObjectKind};
pub use cidrs::service_cidrs_from_api;
pub use endpoints::{Endpoint, EndpointSliceInfo, SliceEndpoint, SlicePort, TRIGGER_TIME_ANNOTATION};
pub use node::NodeInfo;
pub use scheduler::{SCHEDULER_ANNOTATION, SCHEDULER_FLAGS_ANNOTATION, Scheduler, Unserved};
pub use services::{
    DEFAULT_AFFINITY_TIMEOUT, HEADLESS_LABEL, ObjectError, SERVICE_PROXY_NAME_LABEL, ServicePort, is_dns_label,
};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// An IP family; each family has its own nftables table, as upstream keeps them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4 (`table ip`).
    V4,
    /// IPv6 (`table ip6`).
    V6,
}

impl Family {
    /// Both families, in the order tables are written.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// Upstream's name of the family (`v1.IPFamily`): the metrics' `ip_family` label, the
    /// health answers' `status` keys, and what logs call it.
    pub fn label(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// The family an address belongs to.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

/// Parses an IP address as upstream reads the API server's (Go's `ParseIPSloppy`): IPv4 with
/// leading zeros (`010.001.002.003`, which older API servers accepted and still hold) is read
/// as decimal, 10.1.2.3.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    let octets: Vec<u8> = s
        .split('.')
        .map(|o| o.parse::<u8>().ok().filter(|_| o.bytes().all(|b| b.is_ascii_digit())))
        .collect::<Option<_>>()?;
    let octets: [u8; 4] = octets.try_into().ok()?;
    Some(IpAddr::from(octets))
}

/// Parses a CIDR as upstream reads the API server's (Go's `ParseCIDRSloppy`): the address as
/// [`parse_ip`] reads it, and the network it names (host bits cleared).
pub fn parse_cidr(s: &str) -> Option<ipnet::IpNet> {
    let (ip, len) = s.trim().split_once('/')?;
    let len: u8 = len.parse().ok().filter(|_| len.bytes().all(|b| b.is_ascii_digit()))?;
    ipnet::IpNet::new(parse_ip(ip)?, len).ok().map(|n| n.trunc())
}

/// A service port's transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// All protocols a Service may use.
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    /// Parses the Kubernetes spelling; a missing protocol means TCP, as the API defaults it.
    pub fn parse(s: Option<&str>) -> Result<Protocol, String> {
        match s.unwrap_or("TCP") {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            other => Err(format!("unknown protocol {other:?}")),
        }
    }

    /// The lower-case name nftables uses (`tcp`, `udp`, `sctp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies one port of one Service, as upstream's `ServicePortName` does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The port's name; empty for a single unnamed port.
    pub port: String,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    /// Upstream's spelling: `namespace/name:port`, or `namespace/name` for an unnamed port.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// Namespace and name of an API object.
pub type ObjectKey = (String, String);

/// What changed in a model since its changes were last taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Services whose ports or endpoints changed (added and removed ones too).
    pub services: BTreeSet<ObjectKey>,
    /// Something all services depend on changed: this node or the host's addresses.
    pub global: bool,
    /// A ServiceCIDR object changed (the ranges of either family may have).
    pub service_cidrs: bool,
    /// When the changed EndpointSlices' changes were triggered (their
    /// `endpoints.kubernetes.io/last-change-trigger-time`), by family: the start of the
    /// network programming latency a sync ends.
    pub trigger_times: Vec<(Family, std::time::SystemTime)>,
}

impl Changes {
    /// Adds `earlier` changes to these.
    pub fn absorb(&mut self, earlier: Changes) {
        self.services.extend(earlier.services);
        self.global |= earlier.global;
        self.service_cidrs |= earlier.service_cidrs;
        self.trigger_times.extend(earlier.trigger_times);
    }
}

/// Everything the proxy knows about the cluster at one moment.
///
/// The sync thread owns it; sources send it changes, and it notes which Services they touched
/// so only those are rendered again.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Service ports by owning Service.
    pub services: BTreeMap<ObjectKey, Vec<ServicePort>>,
    /// EndpointSlices by the Service they belong to, then by slice name.
    /// (A sorted `Vec` per Service: most have one slice, and a map per Service would cost
    /// a whole tree node each.)
    slices: BTreeMap<ObjectKey, Vec<EndpointSliceInfo>>,
    /// Which Service each slice (namespace, slice name) was filed under, for deletes.
    slice_owner: BTreeMap<ObjectKey, String>,
    /// How many endpoints the slices hold: kept as they come and go, since every sync's log
    /// line says it and counting them walked every slice (at 30k Services, a tenth of what
    /// the daemon spent under a steady stream of changes).
    endpoints: usize,
    /// This node, once its Node object has been seen.
    pub node: Option<NodeInfo>,
    /// ServiceCIDR objects' CIDRs by object name (they are cluster-scoped).
    service_cidrs: BTreeMap<String, Vec<ipnet::IpNet>>,
    /// Addresses on the host's interfaces, matched against `--nodeport-addresses` CIDRs.
    host_addresses: Vec<IpAddr>,
    /// Changes since they were last taken.
    changes: Changes,
    /// Node names endpoints run on, each stored once (a cluster has few nodes and many endpoints).
    node_names: BTreeSet<Arc<str>>,
    /// Services' `externalIPs` are dropped as they are filed (feature gate
    /// AllowServiceExternalIPs off: upstream's service info then has none).
    without_external_ips: bool,
}

impl Model {
    /// Whether Services' `externalIPs` are served (the AllowServiceExternalIPs gate; on unless
    /// set off). Off drops them from every Service filed, already or later, as upstream's
    /// service info reports none: no rules, and they no longer make a Service externally
    /// reachable.
    pub fn set_external_ips(&mut self, serve: bool) {
        self.without_external_ips = !serve;
        if serve {
            return;
        }
        for (key, ports) in &mut self.services {
            if ports.iter().any(|p| !p.external_ips.is_empty()) {
                ports.iter_mut().for_each(|p| p.external_ips.clear());
                self.changes.services.insert(key.clone());
            }
        }
    }

    /// Addresses on the host's interfaces.
    pub fn host_addresses(&self) -> &[IpAddr] {
        &self.host_addresses
    }

    /// Records the host's interface addresses; a change affects every NodePort.
    pub fn set_host_addresses(&mut self, addrs: Vec<IpAddr>) {
        if addrs != self.host_addresses {
            self.host_addresses = addrs;
            self.changes.global = true;
        }
    }

    /// The changes since the last call, which are forgotten.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Makes the model equal to `snapshot` of the cluster (the host's addresses stay) by
    /// filing, object by object, what differs: the one way in that every source's changes take.
    pub fn replace(&mut self, snapshot: Model) {
        let mut changes = Vec::new();
        let services: BTreeSet<&ObjectKey> = self.services.keys().chain(snapshot.services.keys()).collect();
        changes
            .extend(services.into_iter().map(|k| ObjectChange::Service(k.clone(), snapshot.services.get(k).cloned())));
        let slices: BTreeSet<&ObjectKey> = self.slice_owner.keys().chain(snapshot.slice_owner.keys()).collect();
        changes.extend(slices.into_iter().map(|k| ObjectChange::Slice(k.clone(), snapshot.slice(k).cloned())));
        changes.push(ObjectChange::Node(snapshot.node.clone()));
        let cidrs: BTreeSet<&String> = self.service_cidrs.keys().chain(snapshot.service_cidrs.keys()).collect();
        changes.extend(
            cidrs.into_iter().map(|n| ObjectChange::ServiceCidr(n.clone(), snapshot.service_cidrs.get(n).cloned())),
        );
        for change in changes {
            self.file(change);
        }
    }

    /// The EndpointSlice filed under its own namespace and name.
    pub fn slice(&self, key: &ObjectKey) -> Option<&EndpointSliceInfo> {
        let service = self.slice_owner.get(key)?;
        let by_name = self.slices.get(&(key.0.clone(), service.clone()))?;
        by_name.iter().find(|s| s.name == key.1)
    }

    /// Adds or replaces an EndpointSlice.
    pub fn upsert_slice(&mut self, mut slice: EndpointSliceInfo) {
        for ep in &mut slice.endpoints {
            if let Some(name) = &mut ep.node_name {
                match self.node_names.get(name) {
                    Some(shared) => *name = shared.clone(),
                    None => {
                        self.node_names.insert(name.clone());
                    }
                }
            }
        }
        let key = (slice.namespace.clone(), slice.name.clone());
        self.delete_slice(&key);
        self.changes.services.insert((slice.namespace.clone(), slice.service.clone()));
        self.slice_owner.insert(key, slice.service.clone());
        let by_name = self.slices.entry((slice.namespace.clone(), slice.service.clone())).or_default();
        let at = by_name.partition_point(|s| s.name < slice.name);
        self.endpoints += slice.endpoints.len();
        by_name.insert(at, slice);
        // Most Services have one slice: a vector's first growth would leave room for four.
        by_name.shrink_to_fit();
    }

    /// Removes an EndpointSlice by namespace and name; unknown slices are ignored.
    pub fn delete_slice(&mut self, key: &ObjectKey) {
        let Some(service) = self.slice_owner.remove(key) else {
            return;
        };
        let owner = (key.0.clone(), service);
        self.changes.services.insert(owner.clone());
        if let Some(by_name) = self.slices.get_mut(&owner) {
            let gone: usize = by_name.iter().filter(|s| s.name == key.1).map(|s| s.endpoints.len()).sum();
            self.endpoints -= gone;
            by_name.retain(|s| s.name != key.1);
            if by_name.is_empty() {
                self.slices.remove(&owner);
            }
        }
    }

    /// How many endpoints the EndpointSlices hold, over all Services (for the sync's log line).
    pub fn endpoint_count(&self) -> usize {
        self.endpoints
    }

    /// The endpoints of one service port in one family, merged over all its slices.
    ///
    /// Slices are visited in name order and an `ip:port` seen twice is kept once (a copy
    /// that is not terminating first, else the first), so the result does not depend on
    /// arrival order.
    pub fn endpoints(&self, spn: &ServicePortName, family: Family) -> Vec<Endpoint> {
        let mut out: Vec<Endpoint> = Vec::new();
        let owner = (spn.namespace.clone(), spn.name.clone());
        for slice in self.slices.get(&owner).into_iter().flatten() {
            if slice.family == family {
                slice.endpoints_for(spn, &mut out);
            }
        }
        // The same address and port in two slices (endpoints moving between them): the copy
        // that is not terminating wins, as upstream keeps it.
        out.sort_by_key(|e| (e.ip, e.port, e.terminating));
        out.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
        out
    }
}

/// An API object as a source delivers it, before validation.
#[derive(Debug, Clone)]
pub enum ApiObject {
    /// `v1.Service`.
    Service(Box<k8s_openapi::api::core::v1::Service>),
    /// `discovery.k8s.io/v1.EndpointSlice`.
    EndpointSlice(Box<k8s_openapi::api::discovery::v1::EndpointSlice>),
    /// `v1.Node`.
    Node(Box<k8s_openapi::api::core::v1::Node>),
    /// `networking.k8s.io/v1.ServiceCIDR`.
    ServiceCidr(Box<k8s_openapi::api::networking::v1::ServiceCIDR>),
}

impl ApiObject {
    /// Decodes a JSON object of a kind the proxy uses; `Ok(None)` for any other kind.
    pub fn from_json(v: serde_json::Value) -> Result<Option<ApiObject>, serde_json::Error> {
        Ok(Some(match v.get("kind").and_then(serde_json::Value::as_str) {
            Some("Service") => ApiObject::Service(Box::new(serde_json::from_value(v)?)),
            Some("EndpointSlice") => ApiObject::EndpointSlice(Box::new(serde_json::from_value(v)?)),
            Some("Node") => ApiObject::Node(Box::new(serde_json::from_value(v)?)),
            Some("ServiceCIDR") => ApiObject::ServiceCidr(Box::new(serde_json::from_value(v)?)),
            _ => return Ok(None),
        }))
    }
}

impl Model {
    /// Brings a per-Service view up to the model: `refresh` each Service in `touched`, or with
    /// `all` each of `gone` (the view's Services the model no longer has), then every Service.
    /// Whether any refresh said its Service changed.
    pub fn refresh_services<'k>(
        &self,
        all: bool,
        gone: &[ObjectKey],
        touched: impl Iterator<Item = &'k ObjectKey>,
        mut refresh: impl FnMut(&ObjectKey) -> bool,
    ) -> bool {
        let mut changed = false;
        if all {
            // Every Service without copying 30k keys: only the gone ones were collected.
            for key in gone.iter().chain(self.services.keys()) {
                changed |= refresh(key);
            }
        } else {
            for key in touched {
                changed |= refresh(key);
            }
        }
        changed
    }

    /// A model of `objects` for node `node_name`, and the objects refused on the way (each
    /// refused object is left out; the rest are kept).
    pub fn from_objects(objects: &[ApiObject], node_name: &str) -> (Model, Vec<ObjectError>) {
        let mut model = Model::default();
        let refused = objects.iter().filter_map(|obj| model.apply(obj, node_name).err()).collect();
        (model, refused)
    }

    /// Validates an object and files it; a malformed object is returned as an error and
    /// changes nothing. Nodes other than `node_name` are ignored.
    pub fn apply(&mut self, obj: &ApiObject, node_name: &str) -> Result<(), ObjectError> {
        self.apply_for(obj, node_name, None)
    }

    /// As [`Model::apply`] for the proxy named `proxy_name` (`--service-proxy-name`).
    pub fn apply_for(&mut self, obj: &ApiObject, node_name: &str, proxy_name: Option<&str>) -> Result<(), ObjectError> {
        if let Some(change) = ObjectChange::from_api_for(obj, node_name, proxy_name)? {
            self.file(change);
        }
        Ok(())
    }
}
