//! EndpointSlices, converted and validated: which addresses serve which service port, and in what state.

use super::{Family, ObjectKey, Protocol, ServicePortName};
use crate::model::services::ObjectError;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The annotation the EndpointSlice controller sets to when the change it wrote was
/// triggered (a Pod or Service change): where network programming latency starts.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// One endpoint of one service port, with the conditions endpoint selection needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The endpoint's address (the first of the slice endpoint's addresses, as upstream uses).
    pub ip: IpAddr,
    /// The target port, resolved by the EndpointSlice for this slice.
    pub port: u16,
    /// `conditions.ready` (absent means ready).
    pub ready: bool,
    /// `conditions.serving` (absent means the same as ready).
    pub serving: bool,
    /// `conditions.terminating` (absent means not terminating).
    pub terminating: bool,
    /// The node the endpoint runs on, if the slice says.
    pub node_name: Option<Arc<str>>,
    /// `hints.forZones`; empty when the endpoint has no zone hints.
    pub zone_hints: Box<[String]>,
    /// `hints.forNodes`; empty when the endpoint has no node hints.
    pub node_hints: Box<[String]>,
}

/// A port listed by an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePort {
    /// The service port name it serves ("" for an unnamed port).
    pub name: String,
    /// The protocol.
    pub protocol: Protocol,
    /// The endpoints' port number for this service port.
    pub port: u16,
}

/// An endpoint as a slice lists it, before it is paired with a port. A type apart from
/// [`Endpoint`] because a slice lists each endpoint once for all its ports, while a service
/// port holds one [`Endpoint`] per address and target port: the pairing is where a slice's
/// ports meet the service's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceEndpoint {
    /// Address.
    pub ip: IpAddr,
    /// Ready condition.
    pub ready: bool,
    /// Serving condition.
    pub serving: bool,
    /// Terminating condition.
    pub terminating: bool,
    /// Node name.
    pub node_name: Option<Arc<str>>,
    /// Zone hints.
    pub zone_hints: Box<[String]>,
    /// Node hints.
    pub node_hints: Box<[String]>,
}

/// A validated EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSliceInfo {
    /// Namespace.
    pub namespace: String,
    /// The slice's own name.
    pub name: String,
    /// The Service it belongs to.
    pub service: String,
    /// Address family of all its endpoints.
    pub family: Family,
    /// Ports.
    pub ports: Vec<SlicePort>,
    /// Endpoints.
    pub endpoints: Vec<SliceEndpoint>,
    /// When the change this object carries was triggered ([`TRIGGER_TIME_ANNOTATION`]); set
    /// on arrival only, taken out when the change is filed.
    pub trigger_time: Option<SystemTime>,
}

impl EndpointSliceInfo {
    /// Appends this slice's endpoints for `spn` to `out`.
    pub fn endpoints_for(&self, spn: &ServicePortName, out: &mut Vec<Endpoint>) {
        for p in self.ports.iter().filter(|p| p.name == spn.port && p.protocol == spn.protocol) {
            out.extend(self.endpoints.iter().map(|e| Endpoint {
                ip: e.ip,
                port: p.port,
                ready: e.ready,
                serving: e.serving,
                terminating: e.terminating,
                node_name: e.node_name.clone(),
                zone_hints: e.zone_hints.clone(),
                node_hints: e.node_hints.clone(),
            }));
        }
    }

    /// Converts an EndpointSlice; `Ok(None)` means it is valid but not for this proxy (FQDN slices).
    pub fn from_api(slice: &EndpointSlice) -> Result<Option<EndpointSliceInfo>, ObjectError> {
        let (namespace, name) = object_key("EndpointSlice", &slice.metadata)?;
        let err = |what: String| ObjectError::new("EndpointSlice", &namespace, &name, what);
        let family = match slice.address_type.as_str() {
            "IPv4" => Family::V4,
            "IPv6" => Family::V6,
            "FQDN" => return Ok(None),
            other => return Err(err(format!("unknown addressType {other:?}"))),
        };
        let service = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .cloned()
            .ok_or_else(|| err(format!("has no {SERVICE_NAME_LABEL} label")))?;
        // As upstream: a port it cannot use is skipped, not the slice.
        let mut ports: Vec<SlicePort> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| match slice_port(p) {
                Ok(port) => Some(port),
                Err(why) => {
                    let port = p.name.as_deref().unwrap_or_default();
                    crate::skips::warn_skipped!("EndpointSlice {namespace}/{name}: skipping port {port:?}: {why}");
                    None
                }
            })
            .collect();
        // One unreadable address drops that endpoint, not the slice (nor the Service).
        let mut endpoints: Vec<SliceEndpoint> = slice
            .endpoints
            .iter()
            .filter_map(|e| match slice_endpoint(e, family) {
                Ok(e) => Some(e),
                Err(why) => {
                    crate::skips::warn_skipped!("EndpointSlice {namespace}/{name}: skipping an endpoint: {why}");
                    None
                }
            })
            .collect();
        // Kept for as long as the slice lives: a filtered collect leaves room to grow.
        ports.shrink_to_fit();
        endpoints.shrink_to_fit();
        let trigger_time = slice
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TRIGGER_TIME_ANNOTATION))
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
        Ok(Some(EndpointSliceInfo { namespace, name, service, family, ports, endpoints, trigger_time }))
    }
}

/// One port of a slice. Upstream passes over a port without a number or numbered 0; one of a
/// protocol no Service port can have serves nothing, so it goes too.
fn slice_port(p: &k8s_openapi::api::discovery::v1::EndpointPort) -> Result<SlicePort, String> {
    let port = p.port.ok_or("it has no number")?;
    let protocol = Protocol::parse(p.protocol.as_deref())?;
    Ok(SlicePort { name: p.name.clone().unwrap_or_default(), protocol, port: valid_port(port)? })
}

fn slice_endpoint(e: &k8s_openapi::api::discovery::v1::Endpoint, family: Family) -> Result<SliceEndpoint, String> {
    let first = e.addresses.first().ok_or("an endpoint has no addresses")?;
    let ip = super::parse_ip(first).ok_or_else(|| format!("endpoint address {first:?} is not an IP"))?;
    if Family::of(&ip) != family {
        return Err(format!("endpoint address {ip} does not match the slice's addressType"));
    }
    let c = e.conditions.clone().unwrap_or_default();
    let ready = c.ready.unwrap_or(true);
    let hints = e.hints.clone().unwrap_or_default();
    Ok(SliceEndpoint {
        ip,
        ready,
        // Unset means serving, as upstream reads it (whatever `ready` says).
        serving: c.serving.unwrap_or(true),
        terminating: c.terminating.unwrap_or(false),
        node_name: e.node_name.as_deref().map(Arc::from),
        zone_hints: hints.for_zones.into_iter().flatten().map(|z| z.name).collect(),
        node_hints: hints.for_nodes.into_iter().flatten().map(|n| n.name).collect(),
    })
}

/// Checks a port number is within 1..=65535.
pub fn valid_port(port: i32) -> Result<u16, String> {
    u16::try_from(port).ok().filter(|p| *p != 0).ok_or_else(|| format!("port {port} is out of range"))
}

/// Namespace and name of an object; both must be present.
pub fn object_key(
    kind: &'static str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Result<ObjectKey, ObjectError> {
    let name = meta.name.clone().unwrap_or_default();
    let cluster_scoped = matches!(kind, "Node" | "ServiceCIDR");
    let namespace =
        if cluster_scoped { String::new() } else { meta.namespace.clone().unwrap_or_else(|| "default".into()) };
    if name.is_empty() {
        return Err(ObjectError::new(kind, &namespace, "<unnamed>", "has no metadata.name".into()));
    }
    Ok((namespace, name))
}
