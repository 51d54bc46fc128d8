//! The kernel's kube-nftproxy tables in a form two nodes can be compared in: every chain's
//! rules, every set and map element, without handles; an endpoint map's slot numbers are
//! left out, since a daemon keeps an endpoint in its slot across syncs while a fresh dry run
//! numbers slots in address order.

use super::Netns;
use serde_json::Value;
use std::collections::BTreeSet;

/// One line per rule, chain, set, map and element of both families' tables in `ns`.
pub fn state(ns: &Netns) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for family in ["ip", "ip6"] {
        let text = ns.nft(&["-j", "list", "table", family, "kube-nftproxy"]);
        let doc: Value = serde_json::from_str(&text).expect("nft -j output");
        for item in doc["nftables"].as_array().into_iter().flatten() {
            describe(family, item, &mut out);
        }
    }
    out
}

fn describe(family: &str, item: &Value, out: &mut BTreeSet<String>) {
    let Some((kind, body)) = item.as_object().and_then(|o| o.iter().next()) else { return };
    let name = body["name"].as_str().unwrap_or_default();
    match kind.as_str() {
        "chain" => {
            out.insert(format!("{family} chain {name} {}", without(body, &["handle"])));
        }
        "rule" => {
            out.insert(format!("{family} rule {} {}", body["chain"].as_str().unwrap_or_default(), body["expr"]));
        }
        "set" | "map" => {
            out.insert(format!("{family} {kind} {name} {}", without(body, &["handle", "elem"])));
            let endpoints = name.contains("endpoints");
            for elem in body["elem"].as_array().into_iter().flatten() {
                let elem = if endpoints { without_slot(elem) } else { elem.clone() };
                out.insert(format!("{family} {name} element {elem}"));
            }
        }
        _ => {}
    }
}

fn without(v: &Value, keys: &[&str]) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    v
}

/// An endpoint map element `[{"concat": [daddr, port, slot]}, value]` without its slot.
fn without_slot(elem: &Value) -> Value {
    let mut elem = elem.clone();
    if let Some(concat) = elem.get_mut(0).and_then(|k| k.get_mut("concat")).and_then(Value::as_array_mut) {
        concat.pop();
    }
    elem
}

/// What one state has that the other lacks, for a readable failure.
pub fn difference(a: &BTreeSet<String>, b: &BTreeSet<String>) -> String {
    let only_a: Vec<&String> = a.difference(b).take(20).collect();
    let only_b: Vec<&String> = b.difference(a).take(20).collect();
    format!("only in the first: {only_a:#?}\nonly in the second: {only_b:#?}")
}
