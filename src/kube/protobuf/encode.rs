//! k8s-openapi objects into protobuf messages: what the emulator serves a protobuf client,
//! and the Event the daemon posts. Every field the decoder reads is written, so an object
//! encoded here decodes to the object it came from.

use super::kinds as pb;
use super::meta;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn time(t: &metav1::Time) -> meta::Time {
    meta::Time { seconds: Some(t.0.as_second()), nanos: Some(t.0.subsec_nanosecond()) }
}

/// Object metadata.
pub(super) fn object_meta(m: &metav1::ObjectMeta) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: m.name.clone(),
        generate_name: m.generate_name.clone(),
        namespace: m.namespace.clone(),
        self_link: m.self_link.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        generation: m.generation,
        creation_timestamp: m.creation_timestamp.as_ref().map(time),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(time),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        owner_references: m
            .owner_references
            .iter()
            .flatten()
            .map(|o| meta::OwnerReference {
                kind: Some(o.kind.clone()),
                name: Some(o.name.clone()),
                uid: Some(o.uid.clone()),
                api_version: Some(o.api_version.clone()),
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
    }
}

/// A Service.
pub(super) fn service(s: &core::Service) -> pb::Service {
    let status = s.status.as_ref().map(|st| pb::ServiceStatus {
        load_balancer: st
            .load_balancer
            .as_ref()
            .map(|lb| pb::LoadBalancerStatus { ingress: lb.ingress.iter().flatten().map(ingress).collect() }),
    });
    pb::Service { metadata: Some(object_meta(&s.metadata)), spec: s.spec.as_ref().map(service_spec), status }
}

fn service_spec(s: &core::ServiceSpec) -> pb::ServiceSpec {
    pb::ServiceSpec {
        ports: s.ports.iter().flatten().map(service_port).collect(),
        selector: s.selector.clone().unwrap_or_default(),
        cluster_ip: s.cluster_ip.clone(),
        r#type: s.type_.clone(),
        external_ips: s.external_ips.clone().unwrap_or_default(),
        session_affinity: s.session_affinity.clone(),
        load_balancer_ip: s.load_balancer_ip.clone(),
        load_balancer_source_ranges: s.load_balancer_source_ranges.clone().unwrap_or_default(),
        external_name: s.external_name.clone(),
        external_traffic_policy: s.external_traffic_policy.clone(),
        health_check_node_port: s.health_check_node_port,
        publish_not_ready_addresses: s.publish_not_ready_addresses,
        session_affinity_config: s.session_affinity_config.as_ref().map(|c| pb::SessionAffinityConfig {
            client_ip: c.client_ip.as_ref().map(|ip| pb::ClientIpConfig { timeout_seconds: ip.timeout_seconds }),
        }),
        ip_family_policy: s.ip_family_policy.clone(),
        cluster_ips: s.cluster_ips.clone().unwrap_or_default(),
        ip_families: s.ip_families.clone().unwrap_or_default(),
        allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
        load_balancer_class: s.load_balancer_class.clone(),
        internal_traffic_policy: s.internal_traffic_policy.clone(),
        traffic_distribution: s.traffic_distribution.clone(),
    }
}

fn service_port(p: &core::ServicePort) -> pb::ServicePort {
    pb::ServicePort {
        name: p.name.clone(),
        protocol: p.protocol.clone(),
        port: Some(p.port),
        target_port: p.target_port.as_ref().map(|t| match t {
            IntOrString::Int(n) => meta::IntOrString { r#type: Some(0), int_val: Some(*n), str_val: None },
            IntOrString::String(s) => meta::IntOrString { r#type: Some(1), int_val: None, str_val: Some(s.clone()) },
        }),
        node_port: p.node_port,
        app_protocol: p.app_protocol.clone(),
    }
}

fn ingress(i: &core::LoadBalancerIngress) -> pb::LoadBalancerIngress {
    let ports = i.ports.iter().flatten().map(|p| pb::PortStatus {
        port: Some(p.port),
        protocol: Some(p.protocol.clone()),
        error: p.error.clone(),
    });
    pb::LoadBalancerIngress {
        ip: i.ip.clone(),
        hostname: i.hostname.clone(),
        ip_mode: i.ip_mode.clone(),
        ports: ports.collect(),
    }
}

/// An EndpointSlice.
pub(super) fn endpoint_slice(s: &discovery::EndpointSlice) -> pb::EndpointSlice {
    let ports = s.ports.iter().flatten().map(|p| pb::EndpointPort {
        name: p.name.clone(),
        protocol: p.protocol.clone(),
        port: p.port,
        app_protocol: p.app_protocol.clone(),
    });
    pb::EndpointSlice {
        metadata: Some(object_meta(&s.metadata)),
        endpoints: s.endpoints.iter().map(endpoint).collect(),
        ports: ports.collect(),
        address_type: Some(s.address_type.clone()),
    }
}

fn endpoint(e: &discovery::Endpoint) -> pb::Endpoint {
    let named = |name: &String| pb::ForName { name: Some(name.clone()) };
    pb::Endpoint {
        addresses: e.addresses.clone(),
        conditions: e.conditions.as_ref().map(|c| pb::EndpointConditions {
            ready: c.ready,
            serving: c.serving,
            terminating: c.terminating,
        }),
        hostname: e.hostname.clone(),
        target_ref: e.target_ref.as_ref().map(object_reference),
        node_name: e.node_name.clone(),
        zone: e.zone.clone(),
        hints: e.hints.as_ref().map(|h| pb::EndpointHints {
            for_zones: h.for_zones.iter().flatten().map(|z| named(&z.name)).collect(),
            for_nodes: h.for_nodes.iter().flatten().map(|n| named(&n.name)).collect(),
        }),
    }
}

fn object_reference(r: &core::ObjectReference) -> pb::ObjectReference {
    pb::ObjectReference {
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        uid: r.uid.clone(),
        api_version: r.api_version.clone(),
        resource_version: r.resource_version.clone(),
        field_path: r.field_path.clone(),
    }
}

/// A Node.
pub(super) fn node(n: &core::Node) -> pb::Node {
    let spec = n.spec.as_ref().map(|s| pb::NodeSpec {
        pod_cidr: s.pod_cidr.clone(),
        external_id: s.external_id.clone(),
        provider_id: s.provider_id.clone(),
        unschedulable: s.unschedulable,
        taints: s
            .taints
            .iter()
            .flatten()
            .map(|t| pb::Taint {
                key: Some(t.key.clone()),
                value: t.value.clone(),
                effect: Some(t.effect.clone()),
                time_added: t.time_added.as_ref().map(time),
            })
            .collect(),
        pod_cidrs: s.pod_cidrs.clone().unwrap_or_default(),
    });
    let status = n.status.as_ref().map(|s| pb::NodeStatus {
        phase: s.phase.clone(),
        addresses: s
            .addresses
            .iter()
            .flatten()
            .map(|a| pb::NodeAddress { r#type: Some(a.type_.clone()), address: Some(a.address.clone()) })
            .collect(),
    });
    pb::Node { metadata: Some(object_meta(&n.metadata)), spec, status }
}

/// A ServiceCIDR.
pub(super) fn service_cidr(c: &networking::ServiceCIDR) -> pb::ServiceCidr {
    pb::ServiceCidr {
        metadata: Some(object_meta(&c.metadata)),
        spec: c.spec.as_ref().map(|s| pb::ServiceCidrSpec { cidrs: s.cidrs.clone().unwrap_or_default() }),
    }
}

/// An Event.
pub(super) fn event(e: &events::Event) -> pb::Event {
    pb::Event {
        metadata: Some(object_meta(&e.metadata)),
        event_time: e.event_time.as_ref().map(|t| time(&metav1::Time(t.0))),
        reporting_controller: e.reporting_controller.clone(),
        reporting_instance: e.reporting_instance.clone(),
        action: e.action.clone(),
        reason: e.reason.clone(),
        regarding: e.regarding.as_ref().map(object_reference),
        related: e.related.as_ref().map(object_reference),
        note: e.note.clone(),
        r#type: e.type_.clone(),
    }
}
