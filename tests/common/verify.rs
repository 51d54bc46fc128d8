//! Checking the kernel's state after syncs: its sets and maps hold exactly the expected elements.

use super::Netns;
use kube_nftproxy::render::{Key, MapName, Ruleset, Value as Elem};
use std::collections::BTreeSet;

/// An element as `nft list` prints it.
fn listed(key: &Key, value: &Elem) -> String {
    let k = match key {
        Key::IpProtoPort(ip, proto, port) => format!("{ip} . {proto} . {port}"),
        Key::ProtoPort(proto, port) => format!("{proto} . {port}"),
        Key::Ip(ip) => ip.to_string(),
        Key::Allow(allow) => {
            let (ip, proto, port, net) = allow.as_ref();
            if net.prefix_len() == net.max_prefix_len() {
                format!("{ip} . {proto} . {port} . {}", net.addr())
            } else {
                format!("{ip} . {proto} . {port} . {net}")
            }
        }
        Key::SamePair(a) => format!("{a} . {a}"),
        Key::IpSlot(ip, port, slot) => format!("{ip} . {port} . {slot}"),
        Key::PortSlot(port, slot) => format!("{port} . {slot}"),
        Key::Turn(slot) => slot.to_string(),
        Key::Cidr(net) => net.to_string(),
    };
    let v = match value {
        Elem::None => String::new(),
        Elem::Goto(c) => format!(" : goto {c}"),
        Elem::Dispatch(c, o) => format!(" comment \"{o}\" : goto {c}"),
        Elem::Drop(o) => format!(" comment \"{o}\" : drop"),
        Elem::Reject(o) => format!(" comment \"{o}\" : goto reject-chain"),
        Elem::Endpoint(ip, port, None) => format!(" : {ip} . {port}"),
        Elem::Endpoint(ip, port, Some(o)) => format!(" comment \"{o}\" : {ip} . {port}"),
    };
    k + &v
}

/// The elements of one set or map in the kernel, as `nft list` prints them.
fn kernel_elements(ns: &Netns, map: &MapName) -> BTreeSet<String> {
    let kind = match map {
        MapName::ClusterIps
        | MapName::NodeportIps
        | MapName::FirewallIps
        | MapName::FirewallAllow
        | MapName::HairpinConnections
        | MapName::ServiceCidrs => "set",
        _ => "map",
    };
    let text = ns.nft(&["list", kind, "ip", "kube-nftproxy", &map.to_string()]);
    let Some(start) = text.find("elements = {") else { return BTreeSet::new() };
    let body = &text[start + "elements = {".len()..];
    // Elements hold no braces, so the first one closes the element list.
    let body = &body[..body.find('}').unwrap_or(body.len())];
    body.split(',').map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect()
}

/// Asserts the kernel's IPv4 sets and maps hold exactly the expected elements.
pub fn verify(ns: &Netns, expected: &Ruleset) {
    let table = &expected.tables[0];
    for (map, entries) in &table.elements {
        let want: BTreeSet<String> = entries.iter().map(|(k, e)| listed(k, &e.value)).collect();
        let got = kernel_elements(ns, map);
        let missing: Vec<&String> = want.difference(&got).take(3).collect();
        let extra: Vec<&String> = got.difference(&want).take(3).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{map}: {} expected, {} in the kernel; missing {missing:?}, extra {extra:?}",
            want.len(),
            got.len()
        );
    }
}
