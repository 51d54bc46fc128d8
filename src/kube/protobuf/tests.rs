//! Round trips through the protobuf messages: every field the proxy reads survives, Go's way
//! of writing empty value fields reads as JSON's absence, and a bad message is an error.

use super::*;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use serde_json::{Value, json};

fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "labels": {"app": "web"}, "annotations": {"a": "b"}, "creationTimestamp": "2024-01-02T03:04:05Z",
            "deletionTimestamp": "2024-01-02T03:04:06Z", "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "ux", "controller": true}]},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
            "externalIPs": ["192.0.2.1"], "loadBalancerSourceRanges": ["203.0.113.0/24"],
            "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Cluster", "healthCheckNodePort": 31000,
            "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack", "selector": {"app": "web"},
            "allocateLoadBalancerNodePorts": false, "trafficDistribution": "PreferClose",
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web", "nodePort": 30080},
                      {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353, "appProtocol": "dns"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1", "ipMode": "Proxy"},
            {"ip": "198.51.100.2", "ports": [{"port": 80, "protocol": "TCP"}]}, {"hostname": "lb.example"}]}}})
}

fn slice() -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2024-01-02T03:04:05Z"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false},
             "nodeName": "node-a", "zone": "z1", "hostname": "h",
             "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "node-a"}]},
             "targetRef": {"kind": "Pod", "name": "p1", "namespace": "shop", "uid": "pu"}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "terminating": true}, "nodeName": ""},
            {"addresses": ["10.0.0.3"], "conditions": {}}],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}, {"name": "none", "protocol": "UDP"}]})
}

fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:244:1::/64"],
            "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule", "value": "1",
                        "timeAdded": "2024-01-02T03:04:05Z"}], "providerID": "p://1", "unschedulable": true},
        "status": {"phase": "Running", "addresses": [{"type": "InternalIP", "address": "192.168.1.1"},
            {"type": "Hostname", "address": "node-a"}, {"type": "ExternalIP", "address": "203.0.113.9"}]}})
}

fn cidr() -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes", "resourceVersion": "7"}, "spec": {"cidrs": ["10.96.0.0/16", "fd00::/108"]}})
}

fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).expect("a valid object")
}

#[test]
fn every_kind_reads_back_as_the_json_path_reads_it() {
    let check = |kind: ObjectKind, v: Value, json: ApiObject| {
        let raw = encode_json(kind.as_str(), &v).expect("encodes");
        let back = object(kind, &raw).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{json:?}"), "{kind:?}");
        let (ns, name, rv) = names(&raw).expect("names");
        assert_eq!(
            (ns.as_str(), name.as_str()),
            (v["metadata"]["namespace"].as_str().unwrap_or(""), v["metadata"]["name"].as_str().unwrap())
        );
        assert_eq!(rv, v["metadata"]["resourceVersion"].as_str().unwrap_or(""));
    };
    check(ObjectKind::Service, service(), ApiObject::Service(Box::new(typed::<Service>(&service()))));
    check(ObjectKind::EndpointSlice, slice(), ApiObject::EndpointSlice(Box::new(typed::<EndpointSlice>(&slice()))));
    check(ObjectKind::Node, node(), ApiObject::Node(Box::new(typed::<Node>(&node()))));
    check(ObjectKind::ServiceCidr, cidr(), ApiObject::ServiceCidr(Box::new(typed::<ServiceCIDR>(&cidr()))));
}

#[test]
fn empty_value_fields_as_go_writes_them_read_as_absent_and_pointers_keep_presence() {
    // Go writes every value field, empty or not: these are what an unset field looks like.
    let go = kinds::Service {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            namespace: Some("shop".into()),
            generate_name: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time { seconds: Some(-62_135_596_800), nanos: Some(0) }),
            // Go's `Time.Marshal` writes a zero time as nothing at all: an empty message.
            deletion_timestamp: Some(meta::Time { seconds: None, nanos: None }),
            ..Default::default()
        }),
        spec: Some(kinds::ServiceSpec {
            cluster_ip: Some(String::new()),
            r#type: Some(String::new()),
            health_check_node_port: Some(0),
            publish_not_ready_addresses: Some(false),
            ports: vec![kinds::ServicePort {
                port: Some(80),
                node_port: Some(0),
                protocol: Some(String::new()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let ApiObject::Service(s) = object(ObjectKind::Service, &go.encode_to_vec()).unwrap() else { panic!("a Service") };
    let json: Service = typed(&json!({"metadata": {"name": "web", "namespace": "shop"},
        "spec": {"ports": [{"port": 80}]}}));
    assert_eq!(*s, json);
    // Pointer fields: present-but-empty stays present (as JSON's "nodeName": "" does).
    let raw = encode_json("EndpointSlice", &slice()).unwrap();
    let ApiObject::EndpointSlice(s) = object(ObjectKind::EndpointSlice, &raw).unwrap() else { panic!("a slice") };
    assert_eq!(s.endpoints[1].node_name.as_deref(), Some(""));
    assert_eq!(s.endpoints[2].conditions.as_ref().and_then(|c| c.ready), None, "unset ready stays unset");
    assert_eq!(s.ports.as_ref().unwrap()[1].port, None, "a port without a number stays without");
}

#[test]
fn envelopes_lists_watch_frames_and_statuses_round_trip() {
    let raw = encode_json("Service", &service()).unwrap();
    let body = seal("v1", "Service", raw.clone());
    assert_eq!(&body[..4], b"k8s\0");
    assert_eq!(open(&body).unwrap(), Envelope { api_version: "v1".into(), kind: "Service".into(), raw: raw.clone() });
    assert!(matches!(open(b"{\"kind\":\"Service\"}"), Err(ProtoError::NoMagic)));
    assert!(matches!(open(b"k8s\0\xff\xff"), Err(ProtoError::Malformed(_))));
    let list = list_message("9", Some("next"), Some(4), &[&raw, b"\x10\x07"]);
    let page = list_page(&list).unwrap();
    assert_eq!((page.resource_version.as_str(), page.continue_.as_str()), ("9", "next"));
    assert_eq!(page.items, vec![raw.clone(), b"\x10\x07".to_vec()], "each item kept whole, the bad one too");
    assert!(object(ObjectKind::Service, &page.items[1]).is_err(), "a number where the spec belongs");
    let frame = watch_frame("MODIFIED", body.clone());
    assert_eq!(u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize, frame.len() - 4);
    assert_eq!(watch_event(&frame[4..]).unwrap(), ("MODIFIED".to_string(), body));
    let status_env = open(&status_body(410, "Expired", "too old resource version")).unwrap();
    assert_eq!(status_env.kind, "Status");
    assert_eq!(status(&status_env.raw), Some((410, "Expired".into(), "too old resource version".into())));
    let bookmark = metadata_only("", "", "77");
    assert_eq!(names(&bookmark), Some((String::new(), String::new(), "77".into())));
    assert!(object(ObjectKind::EndpointSlice, &bookmark).is_ok(), "metadata alone is a message of any kind");
    assert!(matches!(encode_json("ConfigMap", &json!({})), Err(ProtoError::Unsupported(_))));
    assert!(is_protobuf(Some("application/vnd.kubernetes.protobuf")) && !is_protobuf(Some("application/json")));
}

#[test]
fn an_event_reads_back_whole() {
    let event = json!({"metadata": {"name": "node-a.17", "namespace": "default"},
        "eventTime": "2023-11-14T22:13:20.123456Z", "reportingController": "kube-nftproxy",
        "reportingInstance": "kube-nftproxy-node-a", "action": "StartKubeProxy", "reason": "Starting",
        "type": "Normal", "note": "n", "regarding": {"kind": "Node", "name": "node-a", "uid": "node-a"}});
    let raw = encode_json("Event", &event).unwrap();
    let mut back = decode_json("Event", &raw).unwrap();
    assert_eq!((back["apiVersion"].take(), back["kind"].take()), (json!("events.k8s.io/v1"), json!("Event")));
    back.as_object_mut().unwrap().retain(|_, v| !v.is_null());
    assert_eq!(back, event);
}

#[test]
fn an_object_whose_labels_do_not_decode_is_still_named() {
    // ObjectMeta: name "web" (1), namespace "shop" (3), and labels (11) whose entry is cut.
    let mut metadata = vec![0x0a, 3];
    metadata.extend_from_slice(b"web");
    metadata.extend_from_slice(&[0x1a, 4]);
    metadata.extend_from_slice(b"shop");
    metadata.extend_from_slice(&[0x5a, 2, 0xff, 0xff]);
    let mut raw = vec![0x0a, metadata.len() as u8];
    raw.extend(metadata);
    assert!(object(ObjectKind::Service, &raw).is_err(), "the object does not decode");
    assert_eq!(names(&raw), Some(("shop".into(), "web".into(), String::new())));
}
