//! `explain`: its answers over small clusters (service, outcomes and their chances,
//! masquerading, reasons, unused endpoints), its text and JSON, and the command's errors.
//! What the answers are worth against real packets is checked by every data-plane test
//! (`crate::common::explained`); the last test here shows that check failing when the kernel
//! does something else than the rules explain read.

use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::net::Proto;
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::explain::{self, Explanation, Fate, Query};
use kube_nftproxy::model::{ApiObject, Model};
use serde_json::{Value, json};
use std::net::IpAddr;

const NODE_IP: &str = "192.168.1.1";

fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "InternalIP", "address": "fd00::1"}]}})
}

fn svc(name: &str, spec: Value, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": status})
}

/// An endpoint at `ip` on `node`, merged with `extra`.
fn ep(ip: &str, node: &str, extra: Value) -> Value {
    let mut e = json!({"addresses": [ip], "nodeName": node});
    e.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    e
}

fn eps(name: &str, v6: bool, endpoints: Vec<Value>) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-x"), "namespace": "ns", "labels": {"kubernetes.io/service-name": name}},
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": endpoints})
}

fn ask_with(objects: &[Value], args: &[&str], from: &str, to: &str) -> Explanation {
    let all: Vec<ApiObject> = std::iter::once(node())
        .chain(objects.iter().cloned())
        .map(|v| ApiObject::from_json(v).unwrap().expect("a kind the proxy uses"))
        .collect();
    let mut model = Model::from_objects(&all, "node-a").0;
    model.set_host_addresses([NODE_IP, "127.0.0.1", "fd00::1"].iter().map(|a| a.parse().unwrap()).collect());
    let argv = ["kube-nftproxy", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/32"];
    let cfg = Config::from_flags(&Flags::parse_from(argv.iter().chain(args))).unwrap();
    explain::explain(&model, &cfg, &Query::parse(from, to, "tcp").unwrap()).unwrap()
}

fn ask(objects: &[Value], from: &str, to: &str) -> Explanation {
    ask_with(objects, &[], from, to)
}

/// (endpoint, percent, masqueraded) of each outcome that reaches an endpoint.
fn reached(e: &Explanation) -> Vec<(String, u32, bool)> {
    let mut out: Vec<_> = e
        .outcomes
        .iter()
        .filter_map(|o| match &o.fate {
            Fate::Endpoint { to, masquerade, .. } => {
                Some((to.to_string(), (o.chance * 100.0).round() as u32, *masquerade))
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn reasons(e: &Explanation) -> Vec<&str> {
    e.reasons.iter().map(|r| r.kind).collect()
}

fn web(spec: Value, endpoints: Vec<Value>) -> Vec<Value> {
    vec![svc("web", spec, json!({})), eps("web", false, endpoints)]
}

#[test]
fn a_cluster_ip_spreads_evenly_over_ready_endpoints_and_says_which_are_not_used() {
    let objects = web(
        json!({"clusterIP": "172.30.0.10", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
        vec![
            ep("10.1.0.1", "node-a", json!({})),
            ep("10.2.0.1", "node-b", json!({})),
            ep("10.2.0.2", "node-b", json!({})),
            ep("10.2.0.3", "node-b", json!({"conditions": {"ready": false}})),
        ],
    );
    let e = ask(&objects, "10.1.0.1", "172.30.0.10:80");
    assert_eq!(e.service, Some(("ns/web:http".to_string(), "ClusterIP")));
    assert_eq!(e.kind, explain::SourceKind::LocalPod);
    assert_eq!(
        reached(&e),
        [
            ("10.1.0.1:8080".into(), 33, true), // a pod reaching itself is masqueraded (hairpin)
            ("10.2.0.1:8080".into(), 33, false),
            ("10.2.0.2:8080".into(), 33, false)
        ]
    );
    let total: f64 = e.outcomes.iter().map(|o| o.chance).sum();
    assert!((total - 1.0).abs() < 1e-9, "chances sum to {total}");
    assert_eq!(e.unused.len(), 1);
    assert_eq!((e.unused[0].endpoint.to_string().as_str(), e.unused[0].reason), ("10.2.0.3:8080", "not-ready"));
    let says = |e: &Explanation, word: &str| e.reasons.iter().any(|r| r.kind == "masquerade" && r.text.contains(word));
    assert!(says(&e, "reaching itself"), "the hairpin is why: {:?}", e.reasons);
    // From outside the cluster: masqueraded everywhere (--detect-local-mode ClusterCIDR).
    let outside = ask(&objects, "203.0.113.5", "172.30.0.10:80");
    assert!(reached(&outside).iter().all(|(_, _, m)| *m), "{:?}", reached(&outside));
    assert!(says(&outside, "--detect-local-mode"), "the mark the services chain set is why: {:?}", outside.reasons);
}

#[test]
fn no_endpoints_rejects_and_a_local_policy_without_local_endpoints_drops() {
    let none = web(json!({"clusterIP": "172.30.0.11", "ports": [{"name": "http", "port": 80}]}), vec![]);
    let e = ask(&none, "10.2.0.9", "172.30.0.11:80");
    assert_eq!(e.outcomes.len(), 1);
    assert_eq!(e.outcomes[0].fate, Fate::Rejected);
    assert_eq!(reasons(&e), ["no-endpoints"]);

    let local = web(
        json!({"type": "NodePort", "clusterIP": "172.30.0.12", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30012}]}),
        vec![ep("10.2.0.1", "node-b", json!({}))],
    );
    let e = ask(&local, "203.0.113.5", &format!("{NODE_IP}:30012"));
    assert_eq!(e.service, Some(("ns/web:http".to_string(), "NodePort")));
    assert_eq!(e.outcomes[0].fate, Fate::Dropped);
    assert!(reasons(&e).contains(&"traffic-policy"), "{:?}", e.reasons);
    assert_eq!(e.unused[0].reason, "other-node");
    // The node itself is not bound by the Local policy (as upstream): it reaches node-b.
    let e = ask(&local, "node", &format!("{NODE_IP}:30012"));
    assert_eq!(reached(&e), [("10.2.0.1:8080".into(), 100, true)]);
}

#[test]
fn source_ranges_drop_other_sources_of_a_load_balancer_ip() {
    let objects = vec![
        svc(
            "lb",
            json!({"type": "LoadBalancer", "clusterIP": "172.30.0.13", "loadBalancerSourceRanges": ["198.51.100.0/24"],
                   "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30013}]}),
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.13"}]}}),
        ),
        eps("lb", false, vec![ep("10.2.0.1", "node-b", json!({}))]),
    ];
    let e = ask(&objects, "203.0.113.5", "192.0.2.13:80");
    assert_eq!(e.outcomes[0].fate, Fate::Dropped);
    assert_eq!(reasons(&e), ["source-ranges"]);
    let e = ask(&objects, "198.51.100.7", "192.0.2.13:80");
    assert_eq!(e.service, Some(("ns/lb:http".to_string(), "LoadBalancer IP")));
    assert_eq!(reached(&e), [("10.2.0.1:8080".into(), 100, true)]);
}

#[test]
fn affinity_spreads_a_new_client_evenly_through_its_cascade() {
    let endpoints = (1..=5).map(|i| ep(&format!("10.2.0.{i}"), "node-b", json!({}))).collect();
    let objects = web(
        json!({"clusterIP": "172.30.0.14", "sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}}, "ports": [{"name": "http", "port": 80}]}),
        endpoints,
    );
    let e = ask(&objects, "10.3.0.1", "172.30.0.14:80");
    let got = reached(&e);
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.iter().all(|(_, pct, _)| *pct == 20), "each endpoint 1 in 5: {got:?}");
    assert!(reasons(&e).contains(&"affinity"), "{:?}", e.reasons);
    assert!(e.reasons.iter().any(|r| r.text.contains("600s")), "{:?}", e.reasons);
}

#[test]
fn the_scheduler_is_named_and_a_hashing_one_names_the_clients_endpoint() {
    let endpoints = || (1..=4).map(|i| ep(&format!("10.2.0.{i}"), "node-b", json!({}))).collect();
    let with = |scheduler: &str, flags: &str, spec: Value| {
        let mut objects = web(spec, endpoints());
        objects[0]["metadata"]["annotations"] =
            json!({"kube-nftproxy.io/scheduler": scheduler, "kube-nftproxy.io/scheduler-flags": flags});
        objects
    };
    let plain = json!({"clusterIP": "172.30.0.16", "ports": [{"name": "http", "port": 80}]});
    let said = |e: &Explanation| e.reasons.iter().find(|r| r.kind == "scheduler").map(|r| r.text.clone());
    // Hashing: one outcome for a given client, the same every time, named in the reason.
    for (scheduler, flags) in [("sh", ""), ("mh", ""), ("mh", "mh-port")] {
        let objects = with(scheduler, flags, plain.clone());
        let e = ask(&objects, "10.3.0.1", "172.30.0.16:80");
        let got = reached(&e);
        assert_eq!(got.len(), 1, "{scheduler} {flags}: {got:?}");
        let text = said(&e).expect("a scheduler reason");
        assert!(text.starts_with(&format!("scheduler {scheduler}")) && text.contains(&got[0].0), "{text}");
        assert_eq!(flags.is_empty(), !text.contains("port 40000"), "{text}");
        let many: std::collections::BTreeSet<String> = (1..=40)
            .flat_map(|i| reached(&ask(&objects, &format!("10.3.1.{i}"), "172.30.0.16:80")))
            .map(|r| r.0)
            .collect();
        assert_eq!(many.len(), 4, "{scheduler}: forty clients reach every endpoint: {many:?}");
    }
    // The port flag: the client's port decides too (`--from IP:PORT`).
    let objects = with("sh", "sh-port", plain.clone());
    let ports: std::collections::BTreeSet<String> = (0..40)
        .map(|p| reached(&ask(&objects, &format!("10.3.0.1:{}", 30000 + p), "172.30.0.16:80"))[0].0.clone())
        .collect();
    assert_eq!(ports.len(), 4, "one client from forty ports: {ports:?}");
    // Round robin and random may go anywhere; an unserved one says it is random.
    for (scheduler, says) in [("rr", "in turn"), ("random", "at random"), ("lc", "served as random")] {
        let e = ask(&with(scheduler, "", plain.clone()), "10.3.0.1", "172.30.0.16:80");
        assert_eq!(reached(&e).len(), 4, "{scheduler}");
        assert!(said(&e).is_some_and(|t| t.contains(says)), "{scheduler}: {:?}", e.reasons);
    }
    // The node's default, and affinity over a scheduler.
    let e =
        ask_with(&web(plain, endpoints()), &["--proxy-mode=ipvs", "--ipvs-scheduler=sh"], "10.3.0.1", "172.30.0.16:80");
    assert!(said(&e).is_some_and(|t| t.starts_with("scheduler sh")), "{:?}", e.reasons);
    let sticky =
        json!({"clusterIP": "172.30.0.16", "sessionAffinity": "ClientIP", "ports": [{"name": "http", "port": 80}]});
    let e = ask(&with("mh", "", sticky), "10.3.0.1", "172.30.0.16:80");
    assert_eq!((reached(&e).len(), said(&e)), (4, None));
    assert!(
        e.reasons.iter().any(|r| r.kind == "affinity" && r.text.contains("precedence over scheduler mh")),
        "{:?}",
        e.reasons
    );
}

#[test]
fn addresses_no_service_holds_are_left_alone_or_refused_at_a_cluster_ip() {
    let objects = web(json!({"clusterIP": "172.30.0.15", "ports": [{"name": "http", "port": 80}]}), vec![]);
    let e = ask(&objects, "10.3.0.1", "198.51.100.1:443");
    assert_eq!(e.outcomes[0].fate, Fate::Unchanged { masquerade: false });
    assert_eq!((e.service.clone(), reasons(&e)), (None, vec!["no-service"]));
    let e = ask(&objects, "10.3.0.1", "172.30.0.15:81");
    assert_eq!(e.outcomes[0].fate, Fate::Rejected);
    assert_eq!(reasons(&e), ["cluster-ip-port"]);
}

#[test]
fn topology_hints_for_another_zone_leave_endpoints_unused_and_ipv6_works_alike() {
    let hinted = |zone: &str| json!({"hints": {"forZones": [{"name": zone}]}});
    let spec = json!({"clusterIP": "fd00:30::16", "ipFamilies": ["IPv6"], "ports": [{"name": "http", "port": 80}]});
    let objects = vec![
        svc("web", spec, json!({})),
        eps(
            "web",
            true,
            vec![ep("fd00:10:2::1", "node-b", hinted("zone-a")), ep("fd00:10:2::2", "node-b", hinted("zone-b"))],
        ),
    ];
    let e = ask(&objects, "fd00:10:3::1", "[fd00:30::16]:80");
    assert_eq!(reached(&e), [("[fd00:10:2::1]:8080".into(), 100, false)]);
    assert_eq!(e.unused.len(), 1);
    assert_eq!(
        (e.unused[0].endpoint.ip(), e.unused[0].reason),
        ("fd00:10:2::2".parse::<IpAddr>().unwrap(), "topology")
    );
}

#[test]
fn text_is_aligned_and_json_has_the_documented_fields() {
    let objects = web(
        json!({"clusterIP": "172.30.0.17", "ports": [{"name": "http", "port": 80}]}),
        vec![ep("10.2.0.1", "node-b", json!({})), ep("10.2.0.22", "node-b", json!({"conditions": {"ready": false}}))],
    );
    let e = ask(&objects, "10.3.0.1", "172.30.0.17:80");
    let text = explain::text(&e);
    let field = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name}:\n{text}"));
    for name in ["from", "to", "service", "result", "unused", "path"] {
        let line = field(name);
        let aligned = line.get(..9).is_some_and(|h| h.trim_end() == name) && !line[9..].starts_with(' ');
        assert!(aligned, "values start in column 10:\n{text}");
    }
    assert!(field("result").ends_with("dnat"), "{text}");
    let table: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(table.len(), 2, "a header and one outcome:\n{text}");
    assert_eq!(table[0].find("CHANCE"), table[1].find("100%"), "columns line up:\n{text}");
    let j = explain::json(&e);
    assert_eq!(j["version"], 1);
    assert_eq!(j["from"], json!({"address": "10.3.0.1", "kind": "remote-pod"}));
    assert_eq!(j["to"], json!({"address": "172.30.0.17", "port": 80, "protocol": "tcp"}));
    assert_eq!(
        (j["service"].as_str(), j["frontend"].as_str(), j["result"].as_str()),
        (Some("ns/web:http"), Some("ClusterIP"), Some("dnat"))
    );
    let o = &j["outcomes"][0];
    assert_eq!(
        (o["result"].as_str(), o["chance"].as_f64(), o["masquerade"].as_bool()),
        (Some("dnat"), Some(1.0), Some(false))
    );
    assert_eq!(o["endpoint"], json!({"address": "10.2.0.1", "port": 8080, "node": "node-b"}));
    assert!(o["path"].as_array().is_some_and(|p| p.iter().any(|s| s["chain"] == "services")), "{o}");
    assert_eq!(j["unusedEndpoints"][0]["reason"], "not-ready");
    assert!(j["reasons"].as_array().is_some(), "{j}");
}

/// An endpoint's node name comes from the API server as it is: the text answer shows its
/// control characters escaped, so it cannot clear the screen or forge a line.
#[test]
fn names_from_the_api_cannot_drive_a_terminal() {
    let objects = web(
        json!({"clusterIP": "172.30.0.18", "ports": [{"name": "http", "port": 80}]}),
        vec![ep("10.2.0.1", "node\u{1b}[2J\nwhy      forged", json!({}))],
    );
    let text = explain::text(&ask(&objects, "10.3.0.1", "172.30.0.18:80"));
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(text.contains("node\\x1b[2J\\nwhy      forged"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("why      forged")), "a line was forged:\n{text}");
}

#[test]
fn the_command_answers_over_manifests_and_refuses_bad_questions() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
            .args(["explain", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/48", "--manifests"])
            .arg(crate::common::root().join("examples/cluster"))
            .args(args)
            .env("RUST_LOG", "error")
            .output()
            .unwrap()
    };
    let out = run(&["--from", "10.3.0.1", "--to", "172.30.0.20:80", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["service"], "shop/web:http");
    for (args, says) in [
        (&["--from", "10.3.0.1"][..], "--to"),
        (&["--from", "10.3.0.1", "--to", "172.30.0.20"][..], "IP:PORT"),
        (&["--from", "pod-1", "--to", "172.30.0.20:80"][..], "--from"),
        (&["--from", "fd00::1", "--to", "172.30.0.20:80"][..], "families"),
        // The kernel drops a martian source before a connection can start.
        (&["--from", "224.0.0.1", "--to", "172.30.0.20:80"][..], "multicast or broadcast"),
        (&["--from", "255.255.255.255", "--to", "172.30.0.20:80"][..], "multicast or broadcast"),
        (&["--from", "ff02::1", "--to", "[fd00:10::20]:80"][..], "multicast or broadcast"),
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn the_command_answers_alike_from_a_live_api_server() {
    let manifests = crate::common::root().join("examples/cluster");
    let emu = crate::common::emulator::Emulator::start(None, "127.0.0.1:0", Some(&manifests), &[]);
    let run = |source: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
            .args(["explain", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/48", "--output=json"])
            .args(["--from", "203.0.113.9", "--to", "172.30.0.22:80"])
            .args(source)
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let kubeconfig = emu.kubeconfig();
    let from_api = run(&["--kubeconfig".as_ref(), kubeconfig.as_os_str()]);
    let from_files = run(&["--manifests".as_ref(), manifests.as_os_str()]);
    assert_eq!(from_api["service"], "shop/local-lb:http", "{from_api:#}");
    assert_eq!(from_api, from_files);
}

/// The data-plane check is not a formality: when the kernel does something else than the
/// rules explain reads (here an element deleted by hand), the probe's check fails.
#[test]
fn the_data_plane_check_fails_when_the_kernel_disagrees() {
    if !crate::common::kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let spec = json!({"clusterIP": "172.30.0.18", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
    c.apply(vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)], &[]);
    let before = crate::common::explained::checked();
    crate::common::check::send(&c.client, Proto::Tcp, "172.30.0.18:80", None, crate::common::check::LONG);
    assert_eq!(crate::common::explained::checked(), before + 1, "the probe was checked against explain");
    let out = c.node.run(
        &["nft", "delete", "element", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0", "{ 172.30.0.18 . 80 . 0 }"],
        "",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let client = &c.client;
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::common::check::send(client, Proto::Tcp, "172.30.0.18:80", None, crate::common::check::SHORT)
    }));
    let why = failed.expect_err("the check passed a packet that did not go where explain said");
    let text = why.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("predicted dnat"), "{text}");
}

#[test]
fn a_localhost_nodeport_is_named_with_what_serves_it_or_why_nothing_does() {
    let why = |to: &str, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
            .args(["explain", "--hostname-override=node-a", "--output=json", "--from=node", "--manifests"])
            .arg(crate::common::root().join("examples/cluster"))
            .args(["--to", to])
            .args(extra)
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        let reasons = j["reasons"].as_array().cloned().unwrap_or_default();
        let of_kind = reasons.iter().find(|r| r["kind"] == "localhost-nodeport").cloned();
        of_kind.map(|r| r["text"].as_str().unwrap_or_default().to_string()).unwrap_or_else(|| format!("{j}"))
    };
    let on = ["--nodeport-addresses=primary,localhost", "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true"];
    let served = why("127.0.0.1:30080", &on);
    assert!(served.contains("is a localhost NodePort of shop/web:http") && served.contains("3 endpoints"), "{served}");
    let v6 = why("[::1]:30080", &on);
    assert!(v6.contains("localhost NodePort") || v6.contains("no endpoint it may use"), "{v6}");
    let other = why("127.0.0.2:30080", &on);
    assert!(other.contains("127.0.0.1 and ::1 alone"), "{other}");
    let off = why("127.0.0.1:30080", &[]);
    assert!(off.contains("need nodePortAddresses `localhost` and --feature-gates="), "{off}");
}
