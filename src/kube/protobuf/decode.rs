//! Protobuf messages into the k8s-openapi objects the JSON path yields, so both paths meet the
//! model through one validation. Go omits an empty value field (`omitempty`) from JSON but
//! writes it to protobuf, so empty strings, zeros and empty lists of value fields read as
//! absent; pointer fields (`ready`, `nodeName`, an EndpointPort's `port`, …) keep their
//! presence, as JSON does.

use super::kinds as pb;
use super::meta;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// A value field: empty means absent.
fn text(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn list<T>(v: Vec<T>) -> Option<Vec<T>> {
    if v.is_empty() { None } else { Some(v) }
}

fn map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if m.is_empty() { None } else { Some(m) }
}

/// Go's zero `time.Time` in seconds since the epoch: what a value timestamp never set
/// (`creationTimestamp` of an object not yet stored) is written as; JSON writes it as null.
const GO_ZERO_TIME: i64 = -62_135_596_800;

fn number<T: Default + PartialEq>(n: Option<T>) -> Option<T> {
    n.filter(|n| *n != T::default())
}

/// A timestamp that is set: Go writes its zero time as an empty message (and older encoders
/// as year 1), which JSON writes as null.
fn set(t: &meta::Time) -> bool {
    !(t.seconds.is_none() && t.nanos.is_none()) && t.seconds != Some(GO_ZERO_TIME)
}

/// A timestamp; one out of range is an error, as it is in JSON.
pub(super) fn time(t: meta::Time) -> Result<metav1::Time, String> {
    let (seconds, nanos) = (t.seconds.unwrap_or_default(), t.nanos.unwrap_or_default());
    k8s_openapi::jiff::Timestamp::new(seconds, nanos)
        .map(metav1::Time)
        .map_err(|e| format!("timestamp {seconds}s {nanos}ns: {e}"))
}

fn owner(o: meta::OwnerReference) -> metav1::OwnerReference {
    metav1::OwnerReference {
        api_version: o.api_version.unwrap_or_default(),
        kind: o.kind.unwrap_or_default(),
        name: o.name.unwrap_or_default(),
        uid: o.uid.unwrap_or_default(),
        controller: o.controller,
        block_owner_deletion: o.block_owner_deletion,
    }
}

/// Object metadata.
pub(super) fn object_meta(m: Option<meta::ObjectMeta>) -> Result<metav1::ObjectMeta, String> {
    let m = m.unwrap_or_default();
    Ok(metav1::ObjectMeta {
        name: text(m.name),
        generate_name: text(m.generate_name),
        namespace: text(m.namespace),
        self_link: text(m.self_link),
        uid: text(m.uid),
        resource_version: text(m.resource_version),
        generation: number(m.generation),
        creation_timestamp: m.creation_timestamp.filter(set).map(time).transpose()?,
        deletion_timestamp: m.deletion_timestamp.filter(set).map(time).transpose()?,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: map(m.labels),
        annotations: map(m.annotations),
        owner_references: list(m.owner_references.into_iter().map(owner).collect()),
        finalizers: list(m.finalizers),
        managed_fields: None,
    })
}

/// A Service.
pub(super) fn service(s: pb::Service) -> Result<core::Service, String> {
    Ok(core::Service {
        metadata: object_meta(s.metadata)?,
        spec: s.spec.map(service_spec),
        status: s.status.map(|st| core::ServiceStatus {
            load_balancer: st
                .load_balancer
                .map(|lb| core::LoadBalancerStatus { ingress: list(lb.ingress.into_iter().map(ingress).collect()) }),
            conditions: None,
        }),
    })
}

fn service_spec(s: pb::ServiceSpec) -> core::ServiceSpec {
    core::ServiceSpec {
        allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
        cluster_ip: text(s.cluster_ip),
        cluster_ips: list(s.cluster_ips),
        external_ips: list(s.external_ips),
        external_name: text(s.external_name),
        external_traffic_policy: text(s.external_traffic_policy),
        health_check_node_port: number(s.health_check_node_port),
        internal_traffic_policy: s.internal_traffic_policy,
        ip_families: list(s.ip_families),
        ip_family_policy: s.ip_family_policy,
        load_balancer_class: s.load_balancer_class,
        load_balancer_ip: text(s.load_balancer_ip),
        load_balancer_source_ranges: list(s.load_balancer_source_ranges),
        ports: list(s.ports.into_iter().map(service_port).collect()),
        publish_not_ready_addresses: s.publish_not_ready_addresses.filter(|p| *p),
        selector: map(s.selector),
        session_affinity: text(s.session_affinity),
        session_affinity_config: s.session_affinity_config.map(|c| core::SessionAffinityConfig {
            client_ip: c.client_ip.map(|ip| core::ClientIPConfig { timeout_seconds: ip.timeout_seconds }),
        }),
        traffic_distribution: s.traffic_distribution,
        type_: text(s.r#type),
    }
}

fn service_port(p: pb::ServicePort) -> core::ServicePort {
    core::ServicePort {
        app_protocol: p.app_protocol,
        name: text(p.name),
        node_port: number(p.node_port),
        port: p.port.unwrap_or_default(),
        protocol: text(p.protocol),
        target_port: p.target_port.map(|t| match t.r#type {
            Some(1) => IntOrString::String(t.str_val.unwrap_or_default()),
            _ => IntOrString::Int(t.int_val.unwrap_or_default()),
        }),
    }
}

fn ingress(i: pb::LoadBalancerIngress) -> core::LoadBalancerIngress {
    let ports = i.ports.into_iter().map(|p| core::PortStatus {
        error: p.error,
        port: p.port.unwrap_or_default(),
        protocol: p.protocol.unwrap_or_default(),
    });
    core::LoadBalancerIngress {
        hostname: text(i.hostname),
        ip: text(i.ip),
        ip_mode: i.ip_mode,
        ports: list(ports.collect()),
    }
}

/// An EndpointSlice.
pub(super) fn endpoint_slice(s: pb::EndpointSlice) -> Result<discovery::EndpointSlice, String> {
    Ok(discovery::EndpointSlice {
        metadata: object_meta(s.metadata)?,
        address_type: s.address_type.unwrap_or_default(),
        endpoints: s.endpoints.into_iter().map(endpoint).collect(),
        ports: list(
            s.ports
                .into_iter()
                .map(|p| discovery::EndpointPort {
                    app_protocol: p.app_protocol,
                    name: p.name,
                    port: p.port,
                    protocol: p.protocol,
                })
                .collect(),
        ),
    })
}

fn endpoint(e: pb::Endpoint) -> discovery::Endpoint {
    let names = |v: Vec<pb::ForName>| v.into_iter().map(|n| n.name.unwrap_or_default());
    discovery::Endpoint {
        addresses: e.addresses,
        conditions: e.conditions.map(|c| discovery::EndpointConditions {
            ready: c.ready,
            serving: c.serving,
            terminating: c.terminating,
        }),
        deprecated_topology: None,
        hints: e.hints.map(|h| discovery::EndpointHints {
            for_nodes: list(names(h.for_nodes).map(|name| discovery::ForNode { name }).collect()),
            for_zones: list(names(h.for_zones).map(|name| discovery::ForZone { name }).collect()),
        }),
        hostname: e.hostname,
        node_name: e.node_name,
        target_ref: e.target_ref.map(object_reference),
        zone: e.zone,
    }
}

/// An object reference.
pub(super) fn object_reference(r: pb::ObjectReference) -> core::ObjectReference {
    core::ObjectReference {
        api_version: text(r.api_version),
        field_path: text(r.field_path),
        kind: text(r.kind),
        name: text(r.name),
        namespace: text(r.namespace),
        resource_version: text(r.resource_version),
        uid: text(r.uid),
    }
}

/// A Node.
pub(super) fn node(n: pb::Node) -> Result<core::Node, String> {
    let spec = n.spec.map(|s| {
        let taints = s.taints.into_iter().map(|t| {
            Ok(core::Taint {
                effect: t.effect.unwrap_or_default(),
                key: t.key.unwrap_or_default(),
                time_added: t.time_added.filter(set).map(time).transpose()?,
                value: text(t.value),
            })
        });
        Ok::<_, String>(core::NodeSpec {
            config_source: None,
            external_id: text(s.external_id),
            pod_cidr: text(s.pod_cidr),
            pod_cidrs: list(s.pod_cidrs),
            provider_id: text(s.provider_id),
            taints: list(taints.collect::<Result<_, String>>()?),
            unschedulable: s.unschedulable.filter(|u| *u),
        })
    });
    let status = n.status.map(|s| core::NodeStatus {
        addresses: list(
            s.addresses
                .into_iter()
                .map(|a| core::NodeAddress {
                    address: a.address.unwrap_or_default(),
                    type_: a.r#type.unwrap_or_default(),
                })
                .collect(),
        ),
        phase: text(s.phase),
        ..Default::default()
    });
    Ok(core::Node { metadata: object_meta(n.metadata)?, spec: spec.transpose()?, status })
}

/// A ServiceCIDR.
pub(super) fn service_cidr(c: pb::ServiceCidr) -> Result<networking::ServiceCIDR, String> {
    Ok(networking::ServiceCIDR {
        metadata: object_meta(c.metadata)?,
        spec: c.spec.map(|s| networking::ServiceCIDRSpec { cidrs: list(s.cidrs) }),
        status: None,
    })
}

/// An Event.
pub(super) fn event(e: pb::Event) -> Result<k8s_openapi::api::events::v1::Event, String> {
    let micro = |t: meta::Time| time(t).map(|t| metav1::MicroTime(t.0));
    Ok(k8s_openapi::api::events::v1::Event {
        metadata: object_meta(e.metadata)?,
        event_time: e.event_time.map(micro).transpose()?,
        reporting_controller: text(e.reporting_controller),
        reporting_instance: text(e.reporting_instance),
        action: text(e.action),
        reason: text(e.reason),
        regarding: e.regarding.map(object_reference),
        related: e.related.map(object_reference),
        note: text(e.note),
        type_: text(e.r#type),
        ..Default::default()
    })
}
