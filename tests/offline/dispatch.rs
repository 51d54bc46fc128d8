//! The dispatch by endpoint count: adding a plain ClusterIP Service, or changing its endpoint
//! count to one in use, changes no chain and adds no jump (the kernel re-validates every jump
//! of a table when a transaction adds one); a count not yet in use rebuilds the dispatch.

use crate::common::synth::{self, Case};
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::Protocol;
use kube_nftproxy::model::{ApiObject, Model};
use kube_nftproxy::render::{Key, MapName, Rendered, Scope, Update, Value};

fn case(endpoints: u32) -> Case {
    Case { name: String::new(), services: 0, endpoints, mix: false }
}

fn service(i: u32) -> ApiObject {
    ApiObject::Service(Box::new(serde_json::from_value(synth::service_json(&case(1), i)).expect("service")))
}

/// Applies `objects` and updates `rendered`; returns the chains the update changed and the
/// values it set that are jumps.
fn update(
    rendered: &mut Rendered,
    model: &mut Model,
    cfg: &Config,
    objects: &[ApiObject],
) -> (Vec<String>, Vec<String>) {
    for o in objects {
        model.apply(o, "node-a").expect("object");
    }
    let changes = model.take_changes();
    let Update::Patched(journals) = rendered.update(model, cfg, &changes).expect("update") else {
        panic!("not an update in place");
    };
    let (mut chains, mut jumps) = (Vec::new(), Vec::new());
    for (journal, table) in journals.iter().zip(&rendered.ruleset().tables) {
        chains.extend(
            journal.chains.iter().filter(|(n, old)| table.chains.get(*n) != old.as_ref()).map(|(n, _)| n.clone()),
        );
        for ((map, key), old) in &journal.elements {
            let new = table.value(*map, key);
            if new != old.as_ref() && matches!(new, Some(Value::Goto(_) | Value::Dispatch(..) | Value::Reject(_))) {
                jumps.push(format!("{map} {key:?}: {new:?}"));
            }
        }
    }
    (chains, jumps)
}

/// Node `node-a`'s configuration, and a model holding its Node alone.
fn node_a() -> (Config, Model) {
    let cfg = Config::from_flags(&Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a"])).expect("config");
    let mut model = Model::default();
    let node = serde_json::from_value(synth::node_json()).expect("node");
    model.apply(&ApiObject::Node(Box::new(node)), "node-a").expect("node");
    (cfg, model)
}

#[test]
fn a_plain_service_added_or_resized_to_a_count_in_use_adds_no_jump() {
    let (cfg, mut model) = node_a();
    for i in 0..20 {
        model.apply(&service(i), "node-a").expect("service");
        model.apply(&synth::slice(&case(if i < 10 { 3 } else { 5 }), i, 0), "node-a").expect("slice");
    }
    model.take_changes();
    let mut rendered = Rendered::build(&model, &cfg, None).expect("render");

    let added = update(&mut rendered, &mut model, &cfg, &[service(20), synth::slice(&case(3), 20, 0)]);
    assert_eq!(added, (vec![], vec![]), "a Service of three endpoints, a count in use");
    let resized = update(&mut rendered, &mut model, &cfg, &[synth::slice(&case(5), 20, 0)]);
    assert_eq!(resized, (vec![], vec![]), "three endpoints to five, a count in use");

    // A count not in use yet: its `lb-*` chain and a step of the dispatch are new.
    let (chains, jumps) = update(&mut rendered, &mut model, &cfg, &[synth::slice(&case(4), 20, 0)]);
    assert!(chains.contains(&"lb-cluster-tcp-4".to_string()), "{chains:?}");
    assert!(chains.iter().any(|c| c.starts_with("dispatch-cluster-tcp-")), "{chains:?}");
    assert_eq!(jumps, Vec::<String>::new());
}

#[test]
fn an_external_ip_equal_to_the_services_own_cluster_ip_is_served_as_the_cluster_ip() {
    let (cfg, mut model) = node_a();
    let mut svc = synth::service_json(&case(1), 0);
    svc["spec"]["externalIPs"] = serde_json::json!([synth::cluster_ip(0)]);
    model.apply(&ApiObject::Service(Box::new(serde_json::from_value(svc).expect("service"))), "node-a").expect("svc");
    model.apply(&synth::slice(&case(2), 0, 0), "node-a").expect("slice");
    let ruleset = kube_nftproxy::render::render(&model, &cfg).expect("render");
    let table = &ruleset.tables[0];
    let ip: std::net::IpAddr = synth::cluster_ip(0).parse().expect("ip");
    let key = Key::IpProtoPort(ip, Protocol::Tcp, 80);
    assert_eq!(table.value(MapName::ServiceIps, &key), None, "the external chain took the ClusterIP over");
    assert!(table.value(MapName::Endpoints(Scope::Cluster, Protocol::Tcp, 0), &Key::IpSlot(ip, 80, 0)).is_some());
    assert!(!table.chains.keys().any(|c| c.starts_with("external-")), "{:?}", table.chains.keys());
    assert!(table.warnings.iter().any(|w| w.contains("also an external IP")), "{:?}", table.warnings);
}
