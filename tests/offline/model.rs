//! Model conversion: which API objects are kept, which are skipped, which are refused and why.

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_nftproxy::model::*;
use serde_json::{Value, json};
use std::net::IpAddr;

fn service(spec: Value, status: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": spec, "status": status}))
        .unwrap()
}

fn ports_of(spec: Value) -> Result<Option<Vec<ServicePort>>, ObjectError> {
    ServicePort::from_api(&service(spec, json!({}))).map(|o| o.map(|(_, p)| p))
}

#[test]
fn service_ports_carry_every_field() {
    let svc = service(
        json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.1", "fd00::1"], "externalIPs": ["192.0.2.1"],
               "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
               "loadBalancerSourceRanges": [" 203.0.113.0/25 "], "sessionAffinity": "ClientIP",
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "dns", "port": 53, "protocol": "UDP"}]}),
        json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}, {"ip": "198.51.100.2", "ipMode": "Proxy"}, {"hostname": "lb.example"}]}}),
    );
    let (key, ports) = ServicePort::from_api(&svc).unwrap().unwrap();
    assert_eq!(key, ("shop".to_string(), "web".to_string()));
    assert_eq!(ports.len(), 2);
    let http = &ports[0];
    assert_eq!(http.name.to_string(), "shop/web:http");
    assert_eq!((http.port, http.node_port, http.name.protocol), (80, Some(30080), Protocol::Tcp));
    assert_eq!(http.cluster_ips, vec!["10.96.0.1".parse::<IpAddr>().unwrap(), "fd00::1".parse().unwrap()]);
    assert_eq!(http.external_ips, vec!["192.0.2.1".parse::<IpAddr>().unwrap()]);
    assert_eq!(http.load_balancer_ips, vec!["198.51.100.1".parse::<IpAddr>().unwrap()], "ipMode Proxy is left out");
    assert_eq!(http.source_ranges, vec!["203.0.113.0/25".parse::<ipnet::IpNet>().unwrap()]);
    assert_eq!(http.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
    assert!(http.external_policy_local && http.internal_policy_local);
    assert_eq!(http.health_check_node_port, Some(32000));
    assert_eq!(ports[1].name.protocol, Protocol::Udp);
}

#[test]
fn external_policy_local_needs_external_access() {
    let ports = ports_of(json!({"clusterIP": "10.96.0.1", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}));
    assert!(!ports.unwrap().unwrap()[0].external_policy_local);
}

#[test]
fn services_the_proxy_does_not_handle_are_skipped_quietly() {
    assert_eq!(ports_of(json!({"clusterIP": "None", "ports": [{"port": 80}]})), Ok(None), "headless");
    assert_eq!(ports_of(json!({"type": "ExternalName", "externalName": "a.example"})), Ok(None), "ExternalName");
    assert_eq!(ports_of(json!({"clusterIP": "10.96.0.1"})), Ok(None), "no ports");
    let mut svc = service(json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}), json!({}));
    svc.metadata.labels = Some([(SERVICE_PROXY_NAME_LABEL.to_string(), "other".to_string())].into());
    assert_eq!(ServicePort::from_api(&svc), Ok(None), "another proxy's service");
    assert!(ServicePort::from_api_for(&svc, Some("other")).unwrap().is_some(), "--service-proxy-name=other serves it");
    assert_eq!(ServicePort::from_api_for(&svc, Some("canary")), Ok(None), "and no other name does");
    let unlabelled = service(json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}), json!({}));
    assert_eq!(ServicePort::from_api_for(&unlabelled, Some("other")), Ok(None), "kube-proxy's, beside it");
    svc.metadata.labels = Some([("service.kubernetes.io/headless".to_string(), String::new())].into());
    assert_eq!(ServicePort::from_api(&svc), Ok(None), "labelled headless, though it has a ClusterIP");
}

#[test]
fn malformed_services_are_refused_with_the_reason() {
    let cases = [
        (json!({"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}), "is not an IP address"),
        (json!({"clusterIP": "10.96.0.1", "ports": [{"port": 70000}]}), "out of range"),
        (json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80, "nodePort": -1}]}), "out of range"),
        (json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80, "protocol": "ICMP"}]}), "unknown protocol"),
        (json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80}, {"port": 81}]}), "used twice"),
        (
            json!({"clusterIP": "10.96.0.1", "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}, "ports": [{"port": 80}]}),
            "timeoutSeconds",
        ),
        (json!({"clusterIPs": ["10.96.0.1", "10.96.0.2"], "ports": [{"port": 80}]}), "same family"),
        (json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80, "name": "Bad_Name"}]}), "DNS label"),
        (json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80, "name": "p".repeat(64)}]}), "DNS label"),
        (
            json!({"clusterIPs": ["10.96.0.1", "fd00::1", "10.96.0.2"], "ports": [{"port": 80}]}),
            "clusterIPs has 3 addresses",
        ),
    ];
    for (spec, reason) in cases {
        let err = ports_of(spec.clone()).expect_err(&spec.to_string());
        let msg = err.to_string();
        assert!(msg.starts_with("skipping Service shop/web: "), "{msg}");
        assert!(msg.contains(reason), "{spec}: {msg}");
    }
}

#[test]
fn an_unreadable_external_ip_ingress_ip_or_source_range_skips_that_entry_not_the_service() {
    let svc = service(
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.1",
               "externalIPs": ["192.0.2.1", "nope", "", "192.000.002.002", "192.0.2.1"],
               "loadBalancerSourceRanges": ["203.0.113.0/25", "1.2.3.4/40", "ranges", "010.000.000.000/8", "192.0.2.7/24"],
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
        json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}, {"ip": "lb.example"}, {"ip": ""},
                                            {"hostname": "lb.example"}, {"ip": "198.051.100.002"}]}}),
    );
    let (_, ports) = ServicePort::from_api(&svc).unwrap().expect("the Service is kept");
    let ips = |v: &[IpAddr]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    let http = &ports[0];
    assert_eq!((http.port, http.node_port), (80, Some(30080)));
    assert_eq!(ips(&http.external_ips), ["192.0.2.1", "192.0.2.2"], "the bogus externalIP is gone, the rest kept once");
    assert_eq!(ips(&http.load_balancer_ips), ["198.51.100.1", "198.51.100.2"]);
    let ranges: Vec<String> = http.source_ranges.iter().map(ToString::to_string).collect();
    // Read as upstream's ParseCIDRSloppy: leading zeros as decimal, host bits cleared.
    assert_eq!(ranges, ["203.0.113.0/25", "10.0.0.0/8", "192.0.2.0/24"]);
}

fn slice(address_type: &str, ports: Value, endpoints: Value, name: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": address_type, "ports": ports, "endpoints": endpoints}))
    .unwrap()
}

#[test]
fn slice_conditions_default_as_the_api_says() {
    let s = slice(
        "IPv4",
        json!([{"name": "http", "port": 8080}]),
        json!([{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
               {"addresses": ["10.0.0.3"], "conditions": {"ready": false, "serving": true, "terminating": true},
                "nodeName": "n1", "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "n1"}]}}]),
        "web-1",
    );
    let info = EndpointSliceInfo::from_api(&s).unwrap().unwrap();
    let e = &info.endpoints;
    assert!(e[0].ready && e[0].serving && !e[0].terminating);
    // `serving` unset means serving whatever `ready` says, as upstream reads it.
    assert!(!e[1].ready && e[1].serving && !e[1].terminating);
    assert!(!e[2].ready && e[2].serving && e[2].terminating);
    assert_eq!((e[2].zone_hints.to_vec(), e[2].node_hints.to_vec()), (vec!["z1".to_string()], vec!["n1".to_string()]));
    assert_eq!(info.ports[0].protocol, Protocol::Tcp);
}

#[test]
fn slices_that_cannot_be_used_are_skipped_or_refused() {
    let fqdn = slice("FQDN", json!([{"port": 443}]), json!([{"addresses": ["a.example"]}]), "f");
    assert_eq!(EndpointSliceInfo::from_api(&fqdn), Ok(None));
    // As upstream: an endpoint whose address cannot be read, and a port without a number,
    // are left out; the rest of the slice stays.
    let kept = slice(
        "IPv4",
        json!([{"name": "x"}, {"name": "http", "port": 80}, {"name": "zero", "port": 0},
               {"name": "icmp", "port": 81, "protocol": "ICMP"}, {"name": "big", "port": 65536},
               {"name": "dns", "port": 53, "protocol": "UDP"}]),
        json!([{"addresses": ["not-an-ip"]}, {"addresses": ["fd00::1"]}, {"addresses": []},
               {"addresses": ["010.000.000.007"]}]),
        "partly-bad",
    );
    let info = EndpointSliceInfo::from_api(&kept).unwrap().unwrap();
    let ports: Vec<(&str, u16, Protocol)> = info.ports.iter().map(|p| (p.name.as_str(), p.port, p.protocol)).collect();
    assert_eq!(ports, [("http", 80, Protocol::Tcp), ("dns", 53, Protocol::Udp)], "only the usable ports stay");
    let ips: Vec<String> = info.endpoints.iter().map(|e| e.ip.to_string()).collect();
    assert_eq!(ips, ["10.0.0.7"], "leading zeros read as decimal, the unreadable ones dropped");
    let err = EndpointSliceInfo::from_api(&slice("IPv9", json!([]), json!([]), "bad-type")).unwrap_err();
    assert!(err.to_string().starts_with("skipping EndpointSlice shop/bad-type: "), "{err}");
    let mut unlabelled = slice("IPv4", json!([]), json!([]), "u");
    unlabelled.metadata.labels = None;
    assert!(EndpointSliceInfo::from_api(&unlabelled).unwrap_err().reason.contains("service-name"));
}

fn spn(port: &str) -> ServicePortName {
    ServicePortName { namespace: "shop".into(), name: "web".into(), port: port.into(), protocol: Protocol::Tcp }
}

#[test]
fn endpoints_merge_slices_resolve_named_ports_and_dedup() {
    let mut model = Model::default();
    let a = slice("IPv4", json!([{"name": "http", "port": 8080}]), json!([{"addresses": ["10.0.0.2"]}]), "web-a");
    let b = slice(
        "IPv4",
        json!([{"name": "http", "port": 8081}, {"name": "admin", "port": 9000}]),
        json!([{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]),
        "web-b",
    );
    let dup = slice("IPv4", json!([{"name": "http", "port": 8080}]), json!([{"addresses": ["10.0.0.2"]}]), "web-c");
    for s in [a, b, dup] {
        model.upsert_slice(EndpointSliceInfo::from_api(&s).unwrap().unwrap());
    }
    let got: Vec<(String, u16)> =
        model.endpoints(&spn("http"), Family::V4).iter().map(|e| (e.ip.to_string(), e.port)).collect();
    let want = [("10.0.0.1", 8081), ("10.0.0.2", 8080), ("10.0.0.2", 8081)];
    assert_eq!(got, want.map(|(ip, p)| (ip.to_string(), p)));
    assert_eq!(model.endpoints(&spn("admin"), Family::V4).len(), 2);
    assert!(model.endpoints(&spn("http"), Family::V6).is_empty());
    model.delete_slice(&("shop".into(), "web-b".into()));
    assert_eq!(model.endpoints(&spn("http"), Family::V4).len(), 1);
    model.delete_slice(&("shop".into(), "web-a".into()));
    model.delete_slice(&("shop".into(), "web-c".into()));
    assert!(
        model.endpoints(&spn("http"), Family::V4).is_empty() && model.endpoints(&spn("admin"), Family::V4).is_empty()
    );
}

#[test]
fn node_primary_ips_prefer_internal_addresses() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "status": {"addresses": [{"type": "ExternalIP", "address": "203.0.113.9"}, {"type": "Hostname", "address": "n1"},
                                 {"type": "InternalIP", "address": "192.168.0.2"}, {"type": "ExternalIP", "address": "2001:db8::9"}]}}))
    .unwrap();
    let info = NodeInfo::from_api(&node).unwrap();
    assert_eq!(info.zone.as_deref(), Some("z1"));
    assert_eq!(info.primary_ip(Family::V4), Some("192.168.0.2".parse().unwrap()));
    assert_eq!(info.primary_ip(Family::V6), Some("2001:db8::9".parse().unwrap()));
}

#[test]
fn an_unreadable_node_address_skips_that_address_not_the_node() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {"podCIDRs": ["10.1.0.0/24", "fd00:10:1::/64"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.999"}, {"type": "InternalIP", "address": ""},
                                 {"type": "InternalIP", "address": "192.168.000.002"}, {"type": "ExternalIP", "address": "nope"},
                                 {"type": "ExternalIP", "address": "2001:db8::9"}]}}))
    .unwrap();
    let info = NodeInfo::from_api(&node).expect("the Node is kept");
    let addresses: Vec<String> = info.addresses.iter().map(ToString::to_string).collect();
    assert_eq!(addresses, ["192.168.0.2", "2001:db8::9"]);
    assert_eq!(info.zone.as_deref(), Some("z1"));
    let cidrs: Vec<String> = info.pod_cidrs.iter().map(ToString::to_string).collect();
    assert_eq!(cidrs, ["10.1.0.0/24", "fd00:10:1::/64"]);
    assert_eq!(info.primary_ip(Family::V4), Some("192.168.0.2".parse().unwrap()));
}

#[test]
fn apply_keeps_the_model_unchanged_on_bad_input() {
    let mut model = Model::default();
    let good =
        ApiObject::Service(Box::new(service(json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}), json!({}))));
    model.apply(&good, "n1").unwrap();
    let bad = ApiObject::Service(Box::new(service(json!({"clusterIP": "bogus", "ports": [{"port": 80}]}), json!({}))));
    assert!(model.apply(&bad, "n1").is_err());
    assert_eq!(model.services.len(), 1, "the earlier good version stays");
    let headless =
        ApiObject::Service(Box::new(service(json!({"clusterIP": "None", "ports": [{"port": 80}]}), json!({}))));
    model.apply(&headless, "n1").unwrap();
    assert!(model.services.is_empty(), "a service that became headless is removed");
}

#[test]
fn a_snapshot_on_a_node_with_addresses_changes_only_what_differs() {
    let objects = |ip: &str| -> Vec<ApiObject> {
        let svc = json!({"kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]}});
        let db = json!({"kind": "Service", "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"clusterIP": "10.96.0.9", "ports": [{"port": 5432}]}});
        [svc, db].into_iter().map(|v| ApiObject::from_json(v).unwrap().unwrap()).collect()
    };
    let mut model = Model::from_objects(&objects("10.96.0.1"), "node-a").0;
    model.set_host_addresses(vec!["192.168.1.1".parse().unwrap(), "fd00:1::1".parse().unwrap()]);
    model.take_changes();
    model.replace(Model::from_objects(&objects("10.96.0.2"), "node-a").0);
    let changes = model.take_changes();
    assert!(!changes.global, "the host's addresses did not change");
    assert_eq!(changes.services.into_iter().collect::<Vec<_>>(), [("shop".to_string(), "web".to_string())]);
    assert_eq!(model.host_addresses().len(), 2);
}

fn service_cidr(name: &str, cidrs: Value) -> ApiObject {
    let v = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": name}, "spec": {"cidrs": cidrs}});
    ApiObject::from_json(v).unwrap().expect("a kind the proxy uses")
}

fn nets(list: &[&str]) -> Vec<ipnet::IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn service_cidrs_decode_cluster_scoped_in_canonical_order() {
    let obj = service_cidr("kubernetes", json!(["fd00:172:30::/108", "10.96.0.0/16"]));
    let change = ObjectChange::from_api(&obj, "node-a").unwrap().unwrap();
    assert_eq!(
        change,
        ObjectChange::ServiceCidr("kubernetes".into(), Some(nets(&["10.96.0.0/16", "fd00:172:30::/108"])))
    );
    assert_eq!(change.id(), (ObjectKind::ServiceCidr, (String::new(), "kubernetes".to_string())));
    assert_eq!(ObjectKind::ServiceCidr.as_str(), "ServiceCIDR");
    assert_eq!(ObjectChange::deleted(&change.id()), ObjectChange::ServiceCidr("kubernetes".into(), None));
    let mut model = Model::default();
    model.apply(&obj, "node-a").unwrap();
    assert_eq!(model.service_cidrs(Family::V4), nets(&["10.96.0.0/16"]));
    assert_eq!(model.service_cidrs(Family::V6), nets(&["fd00:172:30::/108"]));
    assert!(model.take_changes().service_cidrs);
}

#[test]
fn malformed_service_cidrs_are_refused_and_the_last_good_state_stays() {
    let mut model = Model::default();
    model.apply(&service_cidr("kubernetes", json!(["10.96.0.0/16"])), "n1").unwrap();
    model.take_changes();
    for (cidrs, reason) in [
        (json!(["10.96.0.1/16"]), "host bits"),
        (json!(["10.96.0.0/33"]), "is not a CIDR"),
        (json!(["bogus"]), "is not a CIDR"),
        (json!(["10.96.0.0/16", "10.97.0.0/16"]), "same family"),
        (json!(["10.96.0.0/16", "fd00::/108", "10.97.0.0/16"]), "one or two"),
        (json!([]), "one or two"),
    ] {
        let err = model.apply(&service_cidr("kubernetes", cidrs.clone()), "n1").unwrap_err();
        assert_eq!((err.kind, err.name.as_str()), ("ServiceCIDR", "kubernetes"));
        assert!(err.reason.contains(reason), "{cidrs}: {}", err.reason);
        assert!(err.to_string().contains("ServiceCIDR kubernetes"), "{err}");
    }
    assert_eq!(model.service_cidr("kubernetes"), Some(&nets(&["10.96.0.0/16"])), "the good version stays");
    assert_eq!(model.take_changes(), Changes::default(), "refused objects mark nothing");
}

#[test]
fn a_service_cidr_update_marks_a_change_only_when_its_cidrs_change() {
    let mut model = Model::default();
    let both = |a: &str, b: &str| ObjectChange::ServiceCidr("k".into(), Some(nets(&[a, b])));
    assert!(model.file(both("10.96.0.0/16", "fd00::/108")));
    model.take_changes();
    let relisted = service_cidr("k", json!(["fd00::/108", "10.96.0.0/16"]));
    model.apply(&relisted, "n1").unwrap();
    assert_eq!(model.take_changes(), Changes::default(), "the same CIDRs in another order are no change");
    assert!(!model.file(both("10.96.0.0/16", "fd00::/108")));
    assert!(model.file(both("10.96.0.0/12", "fd00::/108")));
    let changes = model.take_changes();
    assert!(changes.service_cidrs && !changes.global && changes.services.is_empty(), "{changes:?}");
}

#[test]
fn ranges_merge_over_objects_and_leave_with_theirs() {
    let mut model = Model::default();
    for (name, cidrs) in
        [("outer", json!(["10.96.0.0/12"])), ("inner", json!(["10.96.0.0/16"])), ("other", json!(["10.200.0.0/24"]))]
    {
        model.apply(&service_cidr(name, cidrs), "n1").unwrap();
    }
    assert_eq!(model.service_cidrs(Family::V4), nets(&["10.96.0.0/12", "10.200.0.0/24"]), "inner lies within outer");
    assert!(model.service_cidrs(Family::V6).is_empty());
    model.take_changes();
    assert!(model.file(ObjectChange::deleted(&(ObjectKind::ServiceCidr, (String::new(), "outer".into())))));
    assert!(model.take_changes().service_cidrs);
    assert_eq!(model.service_cidrs(Family::V4), nets(&["10.96.0.0/16", "10.200.0.0/24"]), "inner shows again");
    assert!(!model.file(ObjectChange::ServiceCidr("never-seen".into(), None)), "deleting the unknown is no change");
}

#[test]
fn a_service_cidr_being_deleted_still_counts_and_snapshots_carry_service_cidrs() {
    let v = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "retiring", "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "finalizers": ["networking.k8s.io/service-cidr-finalizer"]},
        "spec": {"cidrs": ["10.96.0.0/16"]}});
    let objects = [ApiObject::from_json(v).unwrap().unwrap()];
    let (snapshot, refused) = Model::from_objects(&objects, "n1");
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(snapshot.service_cidrs(Family::V4), nets(&["10.96.0.0/16"]));
    let mut model = Model::default();
    model.replace(snapshot);
    assert!(model.take_changes().service_cidrs);
    assert_eq!(model.service_cidrs(Family::V4), nets(&["10.96.0.0/16"]));
    model.replace(Model::default());
    assert!(model.take_changes().service_cidrs, "gone from the snapshot: deleted");
    assert!(model.service_cidrs(Family::V4).is_empty());
}

#[test]
fn a_service_cidr_of_another_api_version_is_a_decoding_error() {
    let v = json!({"apiVersion": "networking.k8s.io/v1beta1", "kind": "ServiceCIDR",
        "metadata": {"name": "old"}, "spec": {"cidrs": ["10.96.0.0/16"]}});
    assert!(ApiObject::from_json(v).is_err());
}
