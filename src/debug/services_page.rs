//! `/debug/services`: every service port as this node serves it, once per family it has a
//! cluster IP of (each family is its own table, as upstream's proxier per family), with its
//! endpoints of that family, what Cluster and Local traffic does with each and why one is
//! passed over, and what traffic meets when it has no endpoint. It is made from the model by
//! the selection rendering uses (`topology`), so it says what the rules do; the schema is
//! documented in the README and versioned by [`SCHEMA_VERSION`].

use crate::model::{Endpoint, Family, Model, ObjectKey, Protocol, Scheduler, ServicePort};
use crate::topology::{Categorized, Choice, Unused, categorize_endpoints, endpoint_uses};
use serde::{Serialize, Serializer};
use std::net::IpAddr;

/// The schema's version: raised by a change that is more than an added field.
pub const SCHEMA_VERSION: u32 = 1;

/// What the document says about the sync loop, besides the model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncState {
    /// The last successful sync, if any.
    pub last: Option<LastSync>,
    /// Changes have arrived that the rules do not have yet (the view shows them already).
    pub pending: bool,
    /// The last sync failed: the kernel still holds the rules of `last`.
    pub failing: bool,
}

/// One successful sync.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastSync {
    /// `full`, `refresh`, `partial` or `unchanged`.
    pub kind: String,
    /// When it ended (RFC 3339).
    pub at: String,
}

/// What traffic to a frontend meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// It is balanced over endpoints.
    Endpoints,
    /// Dropped: endpoints exist, but none its traffic policy may use.
    Drop,
    /// Rejected: no usable endpoint exists at all.
    Reject,
}

/// What traffic to each kind of frontend of a service port meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Traffic {
    /// Traffic to the cluster IP (from pods and the node).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Verdict,
    /// Traffic to the external IPs, load balancer IPs and node port; `None` without any.
    pub external: Option<Verdict>,
}

impl Traffic {
    /// What traffic to `sp`'s frontends in `family` meets, by the rules `render::service`
    /// writes: each frontend's traffic goes to the endpoints its policy selects, and
    /// without any is rejected when no usable endpoint exists anywhere, else dropped.
    fn of(sp: &ServicePort, cat: &Categorized, family: Family) -> Traffic {
        let refused = if cat.has_any { Verdict::Drop } else { Verdict::Reject };
        let verdict = |has: bool| if has { Verdict::Endpoints } else { refused };
        let internal = if sp.internal_policy_local { &cat.local } else { &cat.cluster };
        let external = if sp.external_policy_local { !cat.local.is_empty() } else { cat.has_any };
        let of_family = |ips: &[IpAddr]| ips.iter().any(|ip| Family::of(ip) == family);
        let reachable = sp.node_port.is_some() || of_family(&sp.external_ips) || of_family(&sp.load_balancer_ips);
        Traffic { cluster_ip: verdict(!internal.is_empty()), external: reachable.then(|| verdict(external)) }
    }

    /// What traffic without an endpoint meets, if some frontend's has none.
    pub fn refused(&self) -> Option<Verdict> {
        [Some(self.cluster_ip), self.external].into_iter().flatten().find(|v| *v != Verdict::Endpoints)
    }
}

/// A traffic policy, as a Service's spec spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Policy {
    /// Over every endpoint the selection allows.
    Cluster,
    /// Over this node's endpoints only.
    Local,
}

impl Policy {
    fn of(local: bool) -> Policy {
        if local { Policy::Local } else { Policy::Cluster }
    }
}

/// One endpoint of a service port, and how this node uses it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// Its address.
    pub ip: IpAddr,
    /// Its port for this service port.
    pub port: u16,
    /// The node it runs on, if its slice says.
    pub node_name: Option<String>,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
    /// `hints.forZones`.
    pub zone_hints: Box<[String]>,
    /// `hints.forNodes`.
    pub node_hints: Box<[String]>,
    /// What Cluster-policy traffic does with it ([`Choice::name`]).
    #[serde(serialize_with = "choice")]
    pub cluster: Choice,
    /// What Local-policy traffic does with it.
    #[serde(serialize_with = "choice")]
    pub local: Choice,
    /// Why it takes no traffic at all, if it takes none.
    #[serde(serialize_with = "unused")]
    pub unused: Option<Unused>,
}

impl EndpointView {
    fn new(e: Endpoint, (cluster, local): (Choice, Choice), unused: Option<Unused>) -> EndpointView {
        EndpointView {
            ip: e.ip,
            port: e.port,
            node_name: e.node_name.as_deref().map(str::to_string),
            ready: e.ready,
            serving: e.serving,
            terminating: e.terminating,
            zone_hints: e.zone_hints,
            node_hints: e.node_hints,
            cluster,
            local,
            unused,
        }
    }
}

fn choice<S: Serializer>(c: &Choice, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

/// A reason as JSON: its machine name and a sentence.
#[derive(Serialize)]
struct Reason {
    reason: &'static str,
    message: String,
}

fn unused<S: Serializer>(u: &Option<Unused>, s: S) -> Result<S::Ok, S::Error> {
    u.map(|u| Reason { reason: u.name(), message: u.to_string() }).serialize(s)
}

/// A service port's scheduler: what it asks for, where from, and what the rules do.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerView {
    /// The scheduler's name (`random`, `rr`, `sh`, `mh`, or an IPVS scheduler served as random).
    pub name: &'static str,
    /// Its flags (`sh-port`, `mh-port`).
    pub flags: &'static [&'static str],
    /// `annotation` (the Service's) or `node` (`--ipvs-scheduler`, or the default).
    pub from: &'static str,
    /// What the rules do: the scheduler's name, `random` for one nftables cannot serve, or
    /// `ClientIP` where session affinity takes precedence.
    pub served_as: &'static str,
}

impl SchedulerView {
    fn of(sp: &ServicePort, node_default: Scheduler) -> SchedulerView {
        let s = sp.scheduler_or(node_default);
        SchedulerView {
            name: s.name(),
            flags: s.flags(),
            from: if sp.scheduler.is_some() { "annotation" } else { "node" },
            served_as: if sp.affinity_timeout.is_some() { "ClientIP" } else { s.served().name() },
        }
    }
}

/// One service port as served in one family.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortView<'m> {
    /// Upstream's `ServicePortName`: `namespace/name:port` (`namespace/name` when unnamed).
    pub name: String,
    /// The Service's namespace.
    pub namespace: &'m str,
    /// The Service's name.
    pub service: &'m str,
    /// The port's name (empty when unnamed).
    pub port_name: &'m str,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: &'static str,
    /// `IPv4` or `IPv6`: the table this view is of.
    pub ip_family: &'static str,
    /// The cluster IP of this family.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: IpAddr,
    /// The service port number.
    pub port: u16,
    /// External IPs of this family.
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<IpAddr>,
    /// Load balancer IPs of this family.
    #[serde(rename = "loadBalancerIPs")]
    pub load_balancer_ips: Vec<IpAddr>,
    /// `loadBalancerSourceRanges` of this family.
    pub load_balancer_source_ranges: Vec<String>,
    /// The node port, if any.
    pub node_port: Option<u16>,
    /// The health-check node port, if any.
    pub health_check_node_port: Option<u16>,
    /// `internalTrafficPolicy`.
    pub internal_traffic_policy: Policy,
    /// `externalTrafficPolicy`, as applied: Local only where traffic from outside can reach
    /// the port.
    pub external_traffic_policy: Policy,
    /// `None` or `ClientIP`.
    pub session_affinity: &'static str,
    /// The affinity timeout, with `ClientIP`.
    pub session_affinity_timeout_seconds: Option<u32>,
    /// How a new connection picks among the endpoints.
    pub scheduler: SchedulerView,
    /// What traffic to each kind of frontend meets.
    pub traffic: Traffic,
    /// The endpoints of this family, in address order.
    pub endpoints: Vec<EndpointView>,
}

impl<'m> PortView<'m> {
    /// `sp` as served in `family`, whose cluster IP is `cluster_ip`, from `node`.
    fn new(model: &Model, sp: &'m ServicePort, family: Family, cluster_ip: IpAddr, node: Node) -> PortView<'m> {
        let Node { name: node, scheduler } = node;
        let zone = model.node.as_ref().and_then(|n| n.zone.as_deref());
        let endpoints = model.endpoints(&sp.name, family);
        let traffic = Traffic::of(sp, &categorize_endpoints(&endpoints, sp, node, zone), family);
        let uses: Vec<_> =
            endpoint_uses(&endpoints, sp, node, zone).iter().map(|u| ((u.cluster, u.local), u.unused())).collect();
        let endpoints = endpoints.into_iter().zip(uses).map(|(e, (c, u))| EndpointView::new(e, c, u)).collect();
        let of_family = |ips: &[IpAddr]| ips.iter().copied().filter(|ip| Family::of(ip) == family).collect();
        PortView {
            name: sp.name.to_string(),
            namespace: &sp.name.namespace,
            service: &sp.name.name,
            port_name: &sp.name.port,
            protocol: match sp.name.protocol {
                Protocol::Tcp => "TCP",
                Protocol::Udp => "UDP",
                Protocol::Sctp => "SCTP",
            },
            ip_family: family.label(),
            cluster_ip,
            port: sp.port,
            external_ips: of_family(&sp.external_ips),
            load_balancer_ips: of_family(&sp.load_balancer_ips),
            load_balancer_source_ranges: sp
                .source_ranges
                .iter()
                .filter(|r| Family::of(&r.addr()) == family)
                .map(ToString::to_string)
                .collect(),
            node_port: sp.node_port,
            health_check_node_port: sp.health_check_node_port,
            internal_traffic_policy: Policy::of(sp.internal_policy_local),
            external_traffic_policy: Policy::of(sp.external_policy_local),
            session_affinity: if sp.affinity_timeout.is_some() { "ClientIP" } else { "None" },
            session_affinity_timeout_seconds: sp.affinity_timeout,
            scheduler: SchedulerView::of(sp, scheduler),
            traffic,
            endpoints,
        }
    }
}

/// The node the views are from: its name and its default scheduler.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    /// The node's name.
    pub name: &'a str,
    /// The scheduler of the Services that do not name one.
    pub scheduler: Scheduler,
}

/// The views of the model's service ports (of Service `only`, if given) from `node`, in
/// name order, each once per family it has a cluster IP of.
pub fn port_views<'m>(
    model: &'m Model,
    node: Node<'m>,
    only: Option<&ObjectKey>,
) -> impl Iterator<Item = PortView<'m>> {
    let services = match only {
        Some(key) => model.services.range(key.clone()..=key.clone()),
        None => model.services.range(..),
    };
    services.flat_map(|(_, ports)| ports).flat_map(move |sp| {
        Family::ALL.into_iter().filter_map(move |family| {
            let ip = sp.cluster_ips.iter().copied().find(|ip| Family::of(ip) == family)?;
            Some(PortView::new(model, sp, family, ip, node))
        })
    })
}

/// The whole document.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    version: u32,
    node: &'a str,
    zone: Option<&'a str>,
    sync: &'a SyncState,
    service_ports: Ports<'a>,
}

/// The service ports, each made as it is written, so the document is never held twice.
struct Ports<'a> {
    model: &'a Model,
    node: Node<'a>,
    only: Option<&'a ObjectKey>,
}

impl Serialize for Ports<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(port_views(self.model, self.node, self.only))
    }
}

/// Writes the `/debug/services` document (one line of JSON) from `node` to `out`.
pub fn write(
    out: &mut impl std::io::Write,
    model: &Model,
    node: Node,
    sync: &SyncState,
    only: Option<&ObjectKey>,
) -> Result<(), serde_json::Error> {
    let zone = model.node.as_ref().and_then(|n| n.zone.as_deref());
    let service_ports = Ports { model, node, only };
    let doc = Document { version: SCHEMA_VERSION, node: node.name, zone, sync, service_ports };
    serde_json::to_writer(&mut *out, &doc)?;
    out.write_all(b"\n").map_err(serde_json::Error::io)
}
