//! Synthetic clusters: N services x E endpoints, plain ClusterIP or a realistic mix.

use kube_nftproxy::model::{ApiObject, Model};
use serde_json::{Value, json};

/// One benchmark case.
#[derive(Debug, Clone)]
#[allow(dead_code)] // `name` is read by the benchmark, not by the scale test.
pub struct Case {
    /// Label, e.g. `10k x 5`.
    pub name: String,
    /// Services.
    pub services: u32,
    /// Endpoints per service.
    pub endpoints: u32,
    /// NodePort, LoadBalancer, affinity and Local-policy services mixed in.
    pub mix: bool,
}

/// The ClusterIP of service `i` (172.20.0.0/14 holds 262k).
pub fn cluster_ip(i: u32) -> String {
    let n = (172u32 << 24 | 20 << 16) + i + 1;
    std::net::Ipv4Addr::from(n).to_string()
}

/// Endpoint `e` of service `i` at generation `gen` (a changed endpoint gets a new address).
pub fn endpoint_ip(i: u32, e: u32, per: u32, generation: u32) -> String {
    let n = (10u32 << 24 | 64 << 16) + 1 + (i * per + e) + generation * 0x0010_0000;
    std::net::Ipv4Addr::from(n).to_string()
}

/// The kind of service `i` in a mixed cluster: one in ten each is NodePort, LoadBalancer
/// with source ranges, ClientIP affinity, and externalTrafficPolicy Local; the rest ClusterIP.
fn spec(case: &Case, i: u32) -> (Value, Value) {
    let mut spec = json!({"clusterIP": cluster_ip(i), "ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
    let mut status = json!({});
    if !case.mix {
        return (spec, status);
    }
    let node_port = 30000 + (i % 2700);
    match i % 10 {
        0 => {
            spec["type"] = json!("NodePort");
            spec["ports"][0]["nodePort"] = json!(node_port);
        }
        1 | 2 => {
            spec["type"] = json!("LoadBalancer");
            spec["ports"][0]["nodePort"] = json!(node_port);
            spec["loadBalancerSourceRanges"] = json!(["203.0.113.0/24"]);
            status = json!({"loadBalancer": {"ingress": [{"ip": std::net::Ipv4Addr::from((198u32 << 24 | 18 << 16) + i).to_string()}]}});
        }
        3 => spec["sessionAffinity"] = json!("ClientIP"),
        4 => {
            spec["type"] = json!("NodePort");
            spec["externalTrafficPolicy"] = json!("Local");
            spec["ports"][0]["nodePort"] = json!(node_port);
        }
        _ => {}
    }
    // Node ports must be unique; only the first 2700 such services get one.
    if i >= 27000 && spec.get("type").is_some() {
        spec["type"] = json!("ClusterIP");
        spec["ports"][0].as_object_mut().map(|p| p.remove("nodePort"));
    }
    (spec, status)
}

/// The EndpointSlice of service `i`; endpoint 0 of every fifth service runs on this node.
pub fn slice(case: &Case, i: u32, generation: u32) -> ApiObject {
    ApiObject::EndpointSlice(Box::new(serde_json::from_value(slice_json(case, i, generation)).expect("slice")))
}

/// The EndpointSlice of service `i` as the API server would send it.
pub fn slice_json(case: &Case, i: u32, generation: u32) -> Value {
    let eps: Vec<Value> = (0..case.endpoints)
        .map(|e| {
            let node = if e == 0 && i.is_multiple_of(5) { "node-a" } else { "node-b" };
            json!({"addresses": [endpoint_ip(i, e, case.endpoints, if e == 0 { generation } else { 0 })], "nodeName": node})
        })
        .collect();
    let v = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{i}-1"), "namespace": "bench", "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": eps});
    v
}

/// This node's Node object.
pub fn node_json() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}})
}

/// Service `i` as the API server would send it.
pub fn service_json(case: &Case, i: u32) -> Value {
    let (spec, status) = spec(case, i);
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("svc-{i}"), "namespace": "bench"},
        "spec": spec, "status": status})
}

/// Builds the model of a case.
pub fn model(case: &Case) -> Model {
    let mut m = Model::default();
    m.apply(&ApiObject::Node(Box::new(serde_json::from_value(node_json()).expect("node"))), "node-a").expect("node");
    for i in 0..case.services {
        let svc = service_json(case, i);
        m.apply(&ApiObject::Service(Box::new(serde_json::from_value(svc).expect("service"))), "node-a").expect("svc");
        m.apply(&slice(case, i, 0), "node-a").expect("slice");
    }
    m
}
