//! The comparison without a kernel: the desired state against a kernel table built as a sync
//! would leave it, then changed.

use super::chains::{KernelChain, desired_rules, owner_of_chain};
use super::kernel::KernelTable;
use super::*;
use crate::model::{ApiObject, Model};
use crate::netlink::elements::Element;
use crate::render::{Key, MapName, Scope, Value};
use clap::Parser;

/// A golden case's desired state and declarations: several endpoints per frontend, and
/// rules with anonymous sets (more than one cluster CIDR per family).
fn desired() -> (Ruleset, Declared) {
    let args = ["--cluster-cidr=10.0.0.0/16,10.1.0.0/16,fd00:10::/48,fd00:20::/64", "--detect-local-mode=ClusterCIDR"];
    golden("cluster-cidrs", &args)
}

/// The desired state and declarations of golden case `case` under `args`.
fn golden(case: &str, args: &[&str]) -> (Ruleset, Declared) {
    let argv = ["kube-nftproxy", "--hostname-override=node-a"].into_iter().chain(args.iter().copied());
    let flags = crate::config::Flags::parse_from(argv);
    let cfg = crate::config::Config::from_flags(&flags).expect("config");
    // The model from `model`'s own API, not the manifests source above this layer.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{case}/manifests.yaml"));
    let text = std::fs::read_to_string(path).expect("manifests");
    let docs = serde_saphyr::from_multiple::<serde_json::Value>(&text).expect("yaml");
    let objects: Vec<_> = docs.into_iter().filter_map(|d| ApiObject::from_json(d).expect("object")).collect();
    let (model, _) = Model::from_objects(&objects, "node-a");
    let ruleset = render::render(&model, &cfg).expect("render");
    let script = render::full_sync_script_without_elements(&ruleset, "node-a").expect("script");
    (ruleset.clone(), compile::declared(&script).expect("compile"))
}

fn element(key: &Key, value: &Value) -> Element {
    crate::nft::element::elements(key, Some(value)).remove(0)
}

/// The kernel's tables as a full sync of `ruleset` leaves them.
fn applied(ruleset: &Ruleset, declared: &Declared) -> BTreeMap<Family, Option<KernelTable>> {
    let mut out = BTreeMap::new();
    for t in &ruleset.tables {
        let d = &declared.tables[&t.family];
        let mut k = KernelTable::default();
        for (name, c) in &d.chains {
            k.chains.insert(name.clone(), KernelChain { hook: c.hook.clone(), rules: desired_rules(c) });
        }
        for (name, s) in &d.sets {
            k.sets.insert(name.clone(), s.clone());
        }
        for (map, entries) in &t.elements {
            k.maps.insert(*map, entries.iter().map(|(key, e)| element(key, &e.value)).collect());
        }
        out.insert(t.family, Some(k));
    }
    out
}

const ENDPOINTS: MapName = MapName::Endpoints(Scope::Cluster, crate::model::Protocol::Tcp, 0);
const SECOND: MapName = MapName::Endpoints(Scope::Cluster, crate::model::Protocol::Tcp, 1);

/// Where the first frontend with two slots is: its slot 0 in the first part of the endpoint
/// maps, and its slot 1 in the second.
fn two_slots(kernel: &BTreeMap<Family, Option<KernelTable>>) -> (usize, usize) {
    let table = kernel.get(&Family::V4).and_then(Option::as_ref).expect("ip table");
    let (first, second) = (&table.maps[&ENDPOINTS], &table.maps[&SECOND]);
    second
        .iter()
        .enumerate()
        .find_map(|(j, e)| first.iter().position(|f| f.key[..8] == e.key[..8]).map(|i| (i, j)))
        .expect("two slots")
}

/// Swaps the endpoints of the first frontend with two slots, keeping or dropping slot 0's
/// comment.
fn swap_two_slots(kernel: &mut BTreeMap<Family, Option<KernelTable>>, comment: bool) {
    let (i, j) = two_slots(kernel);
    let table = kernel.get_mut(&Family::V4).and_then(Option::as_mut).expect("ip table");
    let b = table.maps[&SECOND][j].data.clone();
    let first = &mut table.maps.get_mut(&ENDPOINTS).expect("first part")[i];
    let a = std::mem::replace(&mut first.data, b);
    if !comment {
        first.comment = None;
    }
    table.maps.get_mut(&SECOND).expect("second part")[j].data = a;
}

#[test]
fn a_table_as_applied_has_no_difference_even_with_endpoints_in_other_slots() {
    let (ruleset, declared) = desired();
    let mut kernel = applied(&ruleset, &declared);
    assert!(!compare(&ruleset, &declared, kernel.clone()).differences);
    swap_two_slots(&mut kernel, true);
    assert!(!compare(&ruleset, &declared, kernel).differences, "slots swapped are the same endpoints");
}

#[test]
fn a_first_slot_without_its_comment_differs_even_with_its_endpoints_moved() {
    let (ruleset, declared) = desired();
    let mut kernel = applied(&ruleset, &declared);
    // As a table an earlier version wrote: no comment on slot 0, and the endpoints swapped.
    swap_two_slots(&mut kernel, false);
    let report = compare(&ruleset, &declared, kernel);
    assert_eq!((report.summary.added, report.summary.removed), (1, 1), "{}", report.to_text());
}

#[test]
fn a_missing_or_extra_element_shows_under_its_service_and_unreadable_ones_under_the_table() {
    let (ruleset, declared) = desired();
    let mut kernel = applied(&ruleset, &declared);
    let (at, _) = two_slots(&kernel);
    let table = kernel.get_mut(&Family::V4).and_then(Option::as_mut).expect("ip table");
    let owner = ruleset.tables[0].elements[&ENDPOINTS].values().nth(at).expect("an endpoint").owner.to_string();
    let elements = table.maps.get_mut(&ENDPOINTS).expect("endpoints");
    let gone = elements.remove(at);
    let mut extra = gone.clone();
    extra.key[8..12].copy_from_slice(&7u32.to_ne_bytes());
    // Slot 7 where a sync writes it (the last part), and where it does not (the first).
    let last = MapName::Endpoints(Scope::Cluster, crate::model::Protocol::Tcp, crate::render::PARTS - 1);
    elements.push(extra.clone());
    elements.push(Element { key: vec![1, 2, 3], ..Element::default() });
    table.maps.entry(last).or_default().push(extra);
    let report = compare(&ruleset, &declared, kernel);
    let ours = report.services.iter().find(|s| s.service == owner).expect("the owner's group");
    let kinds: Vec<(Kind, &str)> = ours.changes.iter().map(|c| (c.change, c.name.as_str())).collect();
    let last = last.to_string();
    assert_eq!(kinds, [(Kind::Added, "cluster-endpoints-tcp-0"), (Kind::Removed, last.as_str())]);
    assert!(ours.changes[1].removed[0].contains(" . 7 comment "), "{:?}", ours.changes[1]);
    assert_eq!(report.table.len(), 2, "{:?}", report.table);
    assert!(report.table.iter().all(|c| c.name == "cluster-endpoints-tcp-0"), "{:?}", report.table);
    assert!(report.table.iter().any(|c| c.removed[0].starts_with("key 0x010203")), "{:?}", report.table);
}

#[test]
fn a_missing_table_is_all_additions() {
    let (ruleset, declared) = desired();
    let mut kernel = applied(&ruleset, &declared);
    kernel.insert(Family::V6, None);
    let report = compare(&ruleset, &declared, kernel);
    let all: Vec<&Change> = report.table.iter().chain(report.services.iter().flat_map(|s| &s.changes)).collect();
    assert!(all.iter().all(|c| c.family == "ip6" && c.change == Kind::Added), "{all:?}");
    assert!(all.iter().any(|c| c.object == Object::Table));
    assert!(all.iter().any(|c| c.object == Object::Chain && c.name == "services"));
}

#[test]
fn chains_belong_to_the_service_port_their_name_carries() {
    assert_eq!(owner_of_chain("service-ns/web/tcp/http").as_deref(), Some("ns/web:http"));
    assert_eq!(owner_of_chain("external-ns/web/udp/53").as_deref(), Some("ns/web"));
    assert_eq!(owner_of_chain("local-ns/web/sctp/p1").as_deref(), Some("ns/web:p1"));
    for shared in ["cluster-ips-check", "lb-cluster-tcp-3", "services", "nodeport-endpoints-check"] {
        assert_eq!(owner_of_chain(shared), None, "{shared}");
    }
}

#[test]
fn a_name_longer_than_a_comment_keeps_its_changes_in_one_group() {
    let (ruleset, declared) = golden("longest-names", &["--cluster-cidr=10.0.0.0/8"]);
    let mut kernel = applied(&ruleset, &declared);
    let table = kernel.get_mut(&Family::V4).and_then(Option::as_mut).expect("ip table");
    let dispatch = table.maps.get_mut(&MapName::ServiceIps).expect("service-ips");
    let long = dispatch.iter_mut().find(|e| e.comment.as_ref().is_some_and(|c| c.len() == 128)).expect("a cut comment");
    // The kernel's element goes elsewhere than the desired one: removed and added, same service.
    long.data = Some(crate::nft::compile::Data::Verdict(crate::netlink::abi::NF_DROP, None));
    let report = compare(&ruleset, &declared, kernel);
    assert_eq!(report.services.len(), 1, "{:?}", report.services.iter().map(|s| &s.service).collect::<Vec<_>>());
    assert!(report.services[0].service.len() > 128, "grouped under the full name: {}", report.services[0].service);
    let kinds: Vec<Kind> = report.services[0].changes.iter().map(|c| c.change).collect();
    assert!(kinds.contains(&Kind::Added) && kinds.contains(&Kind::Removed), "{kinds:?}");
}

#[test]
fn a_verdict_no_desired_rule_has_reads_back_as_nft_writes_it() {
    use crate::netlink::abi::{NF_DROP, NFT_GOTO, NFT_JUMP};
    assert_eq!(super::chains::verdict_text(NFT_GOTO, Some("lb-cluster-tcp-3")), "goto lb-cluster-tcp-3");
    assert_eq!(super::chains::verdict_text(NFT_JUMP, Some("c")), "jump c");
    assert_eq!(super::chains::verdict_text(NF_DROP, None), "drop");
}

#[test]
fn every_element_a_sync_writes_reads_back_known_and_in_key_order_however_it_is_listed() {
    let (ruleset, _) = desired();
    let mut maps = 0;
    for t in &ruleset.tables {
        for (map, entries) in &t.elements {
            // Listed backwards: a dump lists in the kernel's hash order, not the key order.
            let listed: Vec<Element> = entries.iter().rev().map(|(key, e)| element(key, &e.value)).collect();
            let read = read_map(t.family, *map, listed);
            assert!(read.raw.is_empty(), "{map}: {:?} did not read back", read.raw);
            let want: Vec<(&Key, &Value)> = entries.iter().map(|(k, e)| (k, &e.value)).collect();
            let got: Vec<(&Key, &Value)> = read.known.iter().map(|(k, v)| (k, v)).collect();
            assert_eq!(got, want, "{map}");
            maps += usize::from(!entries.is_empty());
        }
    }
    assert!(maps >= 4, "the golden case fills only {maps} maps");
}
