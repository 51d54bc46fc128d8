//! Data-plane tests of `trafficDistribution` (`PreferSameNode`, `PreferSameZone`, `PreferClose`):
//! Services whose EndpointSlices carry the hints the EndpointSlice controller writes for each
//! value, rendered and loaded into a real kernel, and connections from the node's namespace
//! counted per endpoint. The proxy reads the hints, never the field (as upstream).
//!
//! The node is `node-a` in `zone-a`; `pod-1` runs on it, `rpod-1` on `node-b` (`zone-a`) and
//! `rpod-2` stands for a pod on `node-c` in `zone-b` (its slice says so; only its address
//! routes through node-b).

use crate::common::check::spread;
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use serde_json::{Value, json};

/// Where each test pod runs, as its endpoint says: (pod, node, zone).
const PLACES: [(&str, &str, &str); 3] =
    [("pod-1", "node-a", "zone-a"), ("rpod-1", "node-b", "zone-a"), ("rpod-2", "node-c", "zone-b")];

/// Connections per Service: with three endpoints, a chosen one missed or a passed-over one
/// never drawn by chance is below 1e-9.
const TRIES: usize = 60;

/// The hints the controller writes for `distribution`: `forNodes` (its node) and `forZones`
/// (its zone) for PreferSameNode, `forZones` alone for PreferSameZone and PreferClose.
fn hints(distribution: &str, node: &str, zone: &str) -> Value {
    match distribution {
        "PreferSameNode" => json!({"forNodes": [{"name": node}], "forZones": [{"name": zone}]}),
        _ => json!({"forZones": [{"name": zone}]}),
    }
}

/// Endpoint of `pod` with its node and zone from [`PLACES`], and `hints` unless null.
fn placed(c: &Cluster, pod: &str, hints: Value) -> Value {
    let (_, node, zone) = PLACES.iter().find(|(p, ..)| *p == pod).unwrap_or_else(|| panic!("no place for {pod}"));
    let mut extra = json!({"nodeName": node, "zone": zone});
    if !hints.is_null() {
        extra["hints"] = hints;
    }
    endpoint(c.pod_named(pod), false, extra)
}

/// Service `name` at 172.30.0.`n` with `distribution`, and its slice of `endpoints`.
fn distributed(name: &str, n: u8, distribution: &str, endpoints: Vec<Value>) -> Vec<Value> {
    let spec = json!({"clusterIP": format!("172.30.0.{n}"), "trafficDistribution": distribution,
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    vec![service(name, spec, json!({})), slice(name, false, "TCP", endpoints)]
}

/// As the controller hints every endpoint of [`PLACES`] for `distribution`.
fn as_controller_writes(c: &Cluster, name: &str, n: u8, distribution: &str) -> Vec<Value> {
    let eps = PLACES.iter().map(|(pod, node, zone)| placed(c, pod, hints(distribution, node, zone))).collect();
    distributed(name, n, distribution, eps)
}

/// The endpoints the node's connections to 172.30.0.`n` reached.
fn reached_from_node(c: &Cluster, n: u8) -> Vec<String> {
    spread(&c.node, &format!("172.30.0.{n}:80"), TRIES).into_keys().collect()
}

#[test]
fn prefer_same_node_same_zone_and_close_keep_the_node_on_hinted_endpoints() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 2);
    let mut objects = as_controller_writes(&c, "same-node", 40, "PreferSameNode");
    objects.extend(as_controller_writes(&c, "same-zone", 41, "PreferSameZone"));
    objects.extend(as_controller_writes(&c, "close", 42, "PreferClose"));
    c.apply(objects, &[]);
    assert_eq!(reached_from_node(&c, 40), ["pod-1"], "PreferSameNode: only this node's endpoint");
    assert_eq!(reached_from_node(&c, 41), ["pod-1", "rpod-1"], "PreferSameZone: only zone-a's endpoints");
    assert_eq!(reached_from_node(&c, 42), ["pod-1", "rpod-1"], "PreferClose, PreferSameZone's old name: zone-a's");
}

#[test]
fn incomplete_or_foreign_hints_fall_back_as_upstream() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 2);
    let zone = |z: &str| json!({"forZones": [{"name": z}]});
    let node_and_zone = |n: &str, z: &str| hints("PreferSameNode", n, z);
    let unready_unhinted = {
        let mut e = placed(&c, "rpod-1", Value::Null);
        e["conditions"] = json!({"ready": false, "serving": false, "terminating": false});
        e
    };
    let objects = [
        // No endpoint hinted for this node: the zone hints decide.
        distributed(
            "elsewhere",
            43,
            "PreferSameNode",
            vec![
                placed(&c, "rpod-1", node_and_zone("node-b", "zone-a")),
                placed(&c, "rpod-2", node_and_zone("node-c", "zone-b")),
            ],
        ),
        // One ready endpoint without a node hint: node hints are ignored, zone hints decide.
        distributed(
            "half-node",
            44,
            "PreferSameNode",
            vec![
                placed(&c, "pod-1", node_and_zone("node-a", "zone-a")),
                placed(&c, "rpod-1", node_and_zone("node-b", "zone-a")),
                placed(&c, "rpod-2", zone("zone-b")),
            ],
        ),
        // One ready endpoint without any hint: every endpoint.
        distributed(
            "half-zone",
            45,
            "PreferSameZone",
            vec![
                placed(&c, "pod-1", zone("zone-a")),
                placed(&c, "rpod-1", zone("zone-a")),
                placed(&c, "rpod-2", Value::Null),
            ],
        ),
        // No endpoint hinted for this node's zone: every endpoint.
        distributed(
            "foreign",
            46,
            "PreferSameZone",
            vec![
                placed(&c, "pod-1", zone("zone-b")),
                placed(&c, "rpod-1", zone("zone-b")),
                placed(&c, "rpod-2", zone("zone-b")),
            ],
        ),
        // An unhinted endpoint that is not ready does not count: zone-a's endpoint only.
        distributed(
            "unready",
            47,
            "PreferSameZone",
            vec![placed(&c, "pod-1", zone("zone-a")), unready_unhinted, placed(&c, "rpod-2", zone("zone-b"))],
        ),
    ];
    c.apply(objects.into_iter().flatten().collect(), &[]);
    assert_eq!(reached_from_node(&c, 43), ["rpod-1"], "PreferSameNode with none here falls back to the zone");
    assert_eq!(reached_from_node(&c, 44), ["pod-1", "rpod-1"], "a missing node hint falls back to the zone");
    assert_eq!(reached_from_node(&c, 45), ["pod-1", "rpod-1", "rpod-2"], "a missing zone hint: every endpoint");
    assert_eq!(reached_from_node(&c, 46), ["pod-1", "rpod-1", "rpod-2"], "no hint for zone-a: every endpoint");
    assert_eq!(reached_from_node(&c, 47), ["pod-1"], "hints are judged on ready endpoints only");
}
