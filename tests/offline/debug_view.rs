//! The debug views without a daemon: the `/debug/services` JSON a model makes (uses, reasons,
//! traffic, filtering), that what it says traffic meets is what the rendered rules do, and
//! the summary SIGUSR1 logs.

use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::debug::services_page::{self, SyncState, Verdict};
use kube_nftproxy::debug::summary;
use kube_nftproxy::model::{ApiObject, Model, ObjectKey, Scheduler};
use kube_nftproxy::render::{self, Key, MapName, Scope, Value as Element};
use serde_json::{Value, json};

const NODE: &str = "node-a";
/// The view from node-a, whose default scheduler is random.
const FROM: services_page::Node = services_page::Node { name: NODE, scheduler: Scheduler::Random };

/// This node, in zone `z1`.
fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "z1"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}})
}

/// Service `name` in namespace `shop` with `spec` (one port, 80, unless it says).
fn service(name: &str, mut spec: Value) -> Value {
    if spec.get("ports").is_none() {
        spec["ports"] = json!([{"port": 80}]);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

/// The IPv4 EndpointSlice of service `name` with `endpoints` on port 8080 (named `port`).
fn slice(name: &str, port: &str, endpoints: Vec<Value>) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "ports": [{"name": port, "port": 8080}], "endpoints": endpoints})
}

/// An endpoint at `ip` on `node`, merged with `extra` (conditions, hints).
fn ep(ip: &str, node: &str, extra: Value) -> Value {
    let mut e = json!({"addresses": [ip], "nodeName": node});
    if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
        e.extend(extra.clone());
    }
    e
}

fn model(objects: Vec<Value>) -> Model {
    let objects: Vec<ApiObject> =
        objects.into_iter().map(|o| ApiObject::from_json(o).expect("object").expect("a kind the proxy uses")).collect();
    let (model, refused) = Model::from_objects(&objects, NODE);
    assert!(refused.is_empty(), "{refused:?}");
    model
}

/// The document for `model` (of Service `only`), parsed.
fn document(model: &Model, only: Option<&ObjectKey>) -> Value {
    let mut out = Vec::new();
    services_page::write(&mut out, model, FROM, &SyncState::default(), only).expect("write");
    assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1, "one line");
    serde_json::from_slice(&out).expect("JSON")
}

/// The port named `name` (and family) in `doc`, with its endpoints by address.
fn port<'d>(doc: &'d Value, name: &str, family: &str) -> &'d Value {
    let ports = doc["servicePorts"].as_array().expect("servicePorts");
    ports.iter().find(|p| p["name"] == name && p["ipFamily"] == family).unwrap_or_else(|| panic!("{name}: {doc}"))
}

/// `(cluster, local, unused reason)` of the endpoint at `ip` of `port`.
fn uses(port: &Value, ip: &str) -> (String, String, Value) {
    let e = port["endpoints"].as_array().and_then(|eps| eps.iter().find(|e| e["ip"] == ip)).expect("endpoint");
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (s(&e["cluster"]), s(&e["local"]), e["unused"]["reason"].clone())
}

fn cluster() -> Model {
    model(vec![
        node(),
        service("web", json!({"clusterIP": "172.30.0.10"})),
        slice(
            "web",
            "",
            vec![
                ep("10.1.0.1", NODE, json!({"hints": {"forZones": [{"name": "z1"}]}})),
                ep("10.2.0.1", "node-b", json!({"hints": {"forZones": [{"name": "z2"}]}})),
                ep("10.2.0.2", "node-b", json!({"conditions": {"ready": false, "serving": false}})),
                ep("10.2.0.3", "node-b", json!({"conditions": {"ready": false, "serving": true, "terminating": true}})),
            ],
        ),
        service(
            "local",
            json!({"type": "NodePort", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.11",
                   "ports": [{"name": "https", "port": 443, "nodePort": 30443}]}),
        ),
        slice("local", "https", vec![ep("10.2.0.4", "node-b", json!({}))]),
        service(
            "sticky",
            json!({"clusterIP": "172.30.0.12", "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}),
        ),
        slice("sticky", "", vec![ep("10.1.0.5", NODE, json!({}))]),
        service("inside", json!({"clusterIP": "172.30.0.13", "internalTrafficPolicy": "Local"})),
        slice("inside", "", vec![ep("10.2.0.6", "node-b", json!({}))]),
        service("empty", json!({"clusterIPs": ["172.30.0.14", "fd00::14"], "ipFamilies": ["IPv4", "IPv6"]})),
    ])
}

#[test]
fn each_endpoint_says_how_it_is_used_and_why_not() {
    let doc = document(&cluster(), None);
    assert_eq!(
        (doc["version"].clone(), doc["node"].clone(), doc["zone"].clone()),
        (json!(1), json!(NODE), json!("z1"))
    );
    let web = port(&doc, "shop/web", "IPv4");
    assert_eq!(
        (web["clusterIP"].clone(), web["port"].clone(), web["protocol"].clone()),
        (json!("172.30.0.10"), json!(80), json!("TCP"))
    );
    let unused = |r: &str| json!(r);
    assert_eq!(uses(web, "10.1.0.1"), ("chosen".into(), "not-needed".into(), Value::Null));
    assert_eq!(uses(web, "10.2.0.1"), ("topology".into(), "not-needed".into(), unused("topology")));
    assert_eq!(uses(web, "10.2.0.2"), ("not-ready".into(), "not-needed".into(), unused("not-ready")));
    assert_eq!(uses(web, "10.2.0.3"), ("terminating".into(), "not-needed".into(), unused("terminating")));
    let e = &web["endpoints"][1];
    assert_eq!((e["nodeName"].clone(), e["zoneHints"].clone()), (json!("node-b"), json!(["z2"])));
    assert!(e["unused"]["message"].as_str().is_some_and(|m| m.contains("other zones")), "{e}");
    assert_eq!(web["traffic"], json!({"clusterIP": "endpoints", "external": null}));

    let local = port(&doc, "shop/local:https", "IPv4");
    assert_eq!((local["externalTrafficPolicy"].clone(), local["nodePort"].clone()), (json!("Local"), json!(30443)));
    assert_eq!(uses(local, "10.2.0.4"), ("chosen".into(), "other-node".into(), Value::Null), "pods still reach it");
    assert_eq!(local["traffic"], json!({"clusterIP": "endpoints", "external": "drop"}));

    let sticky = port(&doc, "shop/sticky", "IPv4");
    assert_eq!(
        (sticky["sessionAffinity"].clone(), sticky["sessionAffinityTimeoutSeconds"].clone()),
        (json!("ClientIP"), json!(60))
    );
    assert_eq!(uses(sticky, "10.1.0.5").0, "chosen");

    let inside = port(&doc, "shop/inside", "IPv4");
    assert_eq!(inside["internalTrafficPolicy"], "Local");
    assert_eq!(uses(inside, "10.2.0.6"), ("not-needed".into(), "other-node".into(), unused("other-node")));
    assert_eq!(inside["traffic"]["clusterIP"], "drop", "an endpoint exists, but not one this policy may use");

    for family in ["IPv4", "IPv6"] {
        let empty = port(&doc, "shop/empty", family);
        assert_eq!(empty["traffic"]["clusterIP"], "reject", "{family}: no endpoint at all");
        assert_eq!(empty["endpoints"], json!([]));
    }
    assert_eq!(port(&doc, "shop/empty", "IPv6")["clusterIP"], "fd00::14");
    assert_eq!(doc["servicePorts"].as_array().map(Vec::len), Some(6), "one entry per port and family");
}

#[test]
fn each_port_says_its_scheduler_where_it_comes_from_and_what_serves() {
    let annotated = |name: &str, scheduler: &str, flags: &str, mut spec: Value| {
        let mut svc = service(name, spec.take());
        svc["metadata"]["annotations"] =
            json!({"kube-nftproxy.io/scheduler": scheduler, "kube-nftproxy.io/scheduler-flags": flags});
        svc
    };
    let m = model(vec![
        node(),
        service("plain", json!({"clusterIP": "172.30.0.20"})),
        annotated("hashed", "mh", "mh-port", json!({"clusterIP": "172.30.0.21"})),
        annotated("least", "lc", "", json!({"clusterIP": "172.30.0.22"})),
        annotated("sticky", "sh", "", json!({"clusterIP": "172.30.0.23", "sessionAffinity": "ClientIP"})),
    ]);
    let mut out = Vec::new();
    let from = services_page::Node { name: NODE, scheduler: Scheduler::RoundRobin };
    services_page::write(&mut out, &m, from, &SyncState::default(), None).expect("write");
    let doc: Value = serde_json::from_slice(&out).expect("JSON");
    let scheduler = |name: &str| port(&doc, name, "IPv4")["scheduler"].clone();
    assert_eq!(scheduler("shop/plain"), json!({"name": "rr", "flags": [], "from": "node", "servedAs": "rr"}));
    assert_eq!(
        scheduler("shop/hashed"),
        json!({"name": "mh", "flags": ["mh-port"], "from": "annotation", "servedAs": "mh"})
    );
    assert_eq!(scheduler("shop/least"), json!({"name": "lc", "flags": [], "from": "annotation", "servedAs": "random"}));
    assert_eq!(scheduler("shop/sticky")["servedAs"], "ClientIP", "session affinity takes precedence");
}

#[test]
fn a_filter_keeps_one_service() {
    let m = cluster();
    let doc = document(&m, Some(&("shop".into(), "local".into())));
    let names: Vec<&Value> = doc["servicePorts"].as_array().expect("ports").iter().map(|p| &p["name"]).collect();
    assert_eq!(names, [&json!("shop/local:https")]);
    let none = document(&m, Some(&("shop".into(), "nothing".into())));
    assert_eq!(none["servicePorts"], json!([]));
}

/// A cluster of `n` services with random policies and endpoints (frontends all distinct).
fn random_cluster(rng: &mut fastrand::Rng, n: u16) -> Model {
    let mut objects = vec![node()];
    for i in 0..n {
        let name = format!("s{i}");
        let mut spec = json!({"clusterIP": format!("172.30.{}.{}", i / 250, i % 250 + 1)});
        match rng.u8(..4) {
            0 => spec["type"] = json!("ClusterIP"),
            1 => spec["externalIPs"] = json!([format!("192.0.{}.{}", i / 250, i % 250 + 1)]),
            _ => {
                spec["type"] = json!("NodePort");
                spec["ports"] = json!([{"port": 80, "nodePort": 30000 + i}]);
            }
        }
        if rng.bool() {
            spec["externalTrafficPolicy"] = json!("Local");
        }
        if rng.u8(..4) == 0 {
            spec["internalTrafficPolicy"] = json!("Local");
        }
        objects.push(service(&name, spec));
        let eps: Vec<Value> = (0..rng.u8(..4))
            .map(|e| {
                let (ready, serving, terminating) =
                    [(true, true, false), (false, true, true), (false, false, false)][rng.usize(..3)];
                let node = [NODE, "node-b"][rng.usize(..2)];
                let ip = format!("10.{}.{}.{}", i / 250, i % 250, e + 1);
                ep(&ip, node, json!({"conditions": {"ready": ready, "serving": serving, "terminating": terminating}}))
            })
            .collect();
        objects.push(slice(&name, "", eps));
    }
    model(objects)
}

/// What the rendered table does with traffic to `key` that `map` holds no-endpoint verdicts of.
fn rendered(table: &render::Table, map: MapName, key: &Key) -> Verdict {
    match table.value(map, key) {
        Some(Element::Drop(_)) => Verdict::Drop,
        Some(Element::Reject(_)) => Verdict::Reject,
        None => Verdict::Endpoints,
        Some(other) => panic!("{map} holds {other:?}"),
    }
}

#[test]
fn what_the_view_says_traffic_meets_is_what_the_rules_do() {
    let cfg = Config::from_flags(&Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a"])).expect("config");
    let mut rng = fastrand::Rng::with_seed(14);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..5 {
        let m = random_cluster(&mut rng, 200);
        let ruleset = render::render(&m, &cfg).expect("render");
        let table = &ruleset.tables[0];
        for p in services_page::port_views(&m, FROM, None) {
            let proto = kube_nftproxy::model::Protocol::Tcp;
            let key = Key::IpProtoPort(p.cluster_ip, proto, p.port);
            // A `service-ips` element, or slots the dispatch by endpoint count finds.
            let slot = Key::IpSlot(p.cluster_ip, p.port, 0);
            let by_count = [Scope::Cluster, Scope::Local]
                .into_iter()
                .any(|s| table.value(MapName::Endpoints(s, proto, 0), &slot).is_some());
            let dispatched = table.value(MapName::ServiceIps, &key).is_some() || by_count;
            let cluster_ip = match rendered(table, MapName::NoEndpointServices, &key) {
                // Nothing DNATs it: `cluster-ips-check` rejects every such port of a ClusterIP.
                Verdict::Endpoints if !dispatched => {
                    assert!(table.value(MapName::ClusterIps, &Key::Ip(p.cluster_ip)).is_some(), "{}", p.name);
                    Verdict::Reject
                }
                verdict => verdict,
            };
            assert_eq!(cluster_ip, p.traffic.cluster_ip, "{}", p.name);
            if p.traffic.cluster_ip == Verdict::Endpoints {
                assert!(dispatched, "{}: no dispatch", p.name);
            }
            let external: Vec<(MapName, Key)> = p
                .node_port
                .map(|n| (MapName::NoEndpointNodeports, Key::ProtoPort(proto, n)))
                .into_iter()
                .chain(
                    p.external_ips.iter().map(|ip| (MapName::NoEndpointServices, Key::IpProtoPort(*ip, proto, p.port))),
                )
                .collect();
            assert_eq!(p.traffic.external.is_some(), !external.is_empty(), "{}", p.name);
            for (map, key) in external {
                assert_eq!(Some(rendered(table, map, &key)), p.traffic.external, "{}: {key:?}", p.name);
            }
            seen.insert((p.traffic.cluster_ip, p.traffic.external));
        }
    }
    for v in [Verdict::Endpoints, Verdict::Drop, Verdict::Reject] {
        assert!(seen.iter().any(|(c, _)| *c == v), "cluster IP traffic never met {v:?}: {seen:?}");
        assert!(seen.iter().any(|(_, e)| *e == Some(v)), "external traffic never met {v:?}: {seen:?}");
    }
}

#[test]
fn the_summary_counts_reasons_and_names_ports_without_endpoints_up_to_a_cap() {
    let m = cluster();
    let lines = summary::ports(services_page::port_views(&m, FROM, None));
    assert_eq!(
        lines[0],
        "6 service ports (counted per IP family) with 7 endpoints: 3 used, 4 unused (1 not-ready, 1 other-node, 1 terminating, 1 topology)"
    );
    assert_eq!(lines[1], "4 service ports have traffic that finds no endpoint: 2 reject it, 2 drop it");
    assert_eq!(
        lines[2..],
        [
            "shop/empty (IPv4): cluster IP traffic rejected; no endpoints",
            "shop/empty (IPv6): cluster IP traffic rejected; no endpoints",
            "shop/inside (IPv4): cluster IP traffic dropped; endpoints: 1, passed over: 1 other-node",
            "shop/local:https (IPv4): cluster IP traffic balanced over endpoints, external traffic dropped; endpoints: 1, passed over: 1 other-node",
        ]
    );
    let many: Vec<Value> = std::iter::once(node())
        .chain((0..40).map(|i| service(&format!("s{i:02}"), json!({"clusterIP": format!("172.30.1.{}", i + 1)}))))
        .collect();
    let lines = summary::ports(services_page::port_views(&model(many), FROM, None));
    assert_eq!(lines.len(), 2 + summary::MAX_PROBLEMS + 1);
    assert_eq!(lines[2], "shop/s00 (IPv4): cluster IP traffic rejected; no endpoints");
    assert_eq!(lines.last().map(String::as_str), Some("... and 10 more (see /debug/services on the metrics address)"));
}

#[test]
fn the_summary_counts_what_each_table_holds() {
    let cfg = Config::from_flags(&Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a"])).expect("config");
    let ruleset = render::render(&cluster(), &cfg).expect("render");
    let lines = summary::tables(&ruleset);
    let v4 = &ruleset.tables[0];
    let rules: usize = v4.chains.values().map(|c| c.lines().count()).sum();
    let elements: usize = v4.elements.values().map(|m| m.len()).sum();
    assert!(rules > 0 && elements > 0 && !v4.affinity_maps.is_empty());
    assert_eq!(
        lines[0],
        format!(
            "ip table: 15 fixed and {} rendered chains ({rules} rules in the rendered), {elements} set and map elements, {} affinity sets",
            v4.chains.len(),
            v4.affinity_maps.len()
        )
    );
    assert!(lines[1].starts_with("ip6 table: 15 fixed and "), "{lines:?}");
}
