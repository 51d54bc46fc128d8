//! The machine on the schedulers' endpoint picks: a `jhash` pick lands each client on the slot
//! `render::hash::slot` (the kernel's hash) gives it, and a round robin's counter is followed
//! down every slot.

use super::{Run, Verdict, run_chain};
use crate::explain::packet::Packet;
use crate::explain::table::{Set, Table};
use crate::model::Family;
use crate::netlink::elements::Element;
use crate::nft::compile::{self, Data};
use crate::render::hash;
use std::net::IpAddr;
use std::sync::Arc;

/// The endpoint port every slot's element sends to.
const PORT: u16 = 8080;

/// A table of `family` whose chain `c` picks an endpoint with `pick`, and whose map holds
/// an element for `daddr`:80 in each of `slots`, slot `s` sending to the address ending in `s`.
fn table(family: Family, pick: &str, daddr: IpAddr, slots: std::ops::Range<u32>) -> Table {
    let (ip, kind) = if family == Family::V4 { ("ip", "ipv4_addr") } else { ("ip6", "ipv6_addr") };
    let script = format!(
        "table {ip} t {{\n map m {{\n  type {kind} . inet_service . integer : {kind} . inet_service\n }}\n \
         chain c {{\n  dnat {ip} to {ip} daddr . tcp dport . {pick} map @m\n }}\n}}\n"
    );
    let mut declared = compile::declared(&script).expect("compile");
    let d = declared.tables.remove(&family).expect("the table");
    let addr = |last: u8| match daddr {
        IpAddr::V4(_) => vec![10, 0, 0, last],
        IpAddr::V6(_) => [&[0xfd, 0][..], &[0; 13], &[last]].concat(),
    };
    let padded = |p: u16| [p.to_be_bytes(), [0, 0]].concat();
    let elements = slots
        .map(|s| {
            let key = [bytes(daddr), padded(80), s.to_ne_bytes().to_vec()].concat();
            let data = Some(Data::Value([addr(s as u8), padded(PORT)].concat()));
            (Element { key, data, ..Element::default() }, None)
        })
        .collect();
    let sets = d.sets.into_iter().map(|(name, spec)| (name, Set { spec, elements: Vec::new() })).collect();
    let mut t = Table { family, chains: d.chains, sets, anon: Default::default() };
    t.sets.get_mut("m").expect("map m").elements = elements;
    t
}

fn bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

fn packet(saddr: IpAddr, sport: u16, daddr: IpAddr) -> Packet {
    Packet {
        saddr,
        daddr,
        proto: 6,
        sport,
        dport: 80,
        iif: Some("eth0".into()),
        mark: 0,
        ct_status: 0,
        local: Arc::new(Vec::new()),
        dnat: false,
        masquerade: false,
        remembered: Vec::new(),
    }
}

/// Every path `p` takes through chain `c`: the address's last byte it was sent to, and the
/// path's chance.
fn picked(t: &Table, p: Packet) -> Vec<(u8, f64)> {
    let runs = run_chain(t, "c", Run::new(p, 1.0, Vec::new())).expect("run");
    runs.into_iter()
        .map(|(v, r)| {
            assert_eq!(v, Verdict::Accept);
            assert!(r.packet.dnat && r.packet.dport == PORT, "{:?}", r.packet);
            (*bytes(r.packet.daddr).last().expect("an address"), r.chance)
        })
        .collect()
}

#[test]
fn a_hash_of_the_source_sends_each_client_to_the_slot_the_kernel_hash_gives() {
    let daddr: IpAddr = "10.96.0.10".parse().expect("address");
    let t = table(Family::V4, "jhash ip saddr . tcp sport mod 7 seed 0x6b6e7078", daddr, 0..7);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..40u16 {
        let (saddr, sport) = (IpAddr::from([192, 168, 7, i as u8]), 40000 + i * 7);
        let key = [bytes(saddr), sport.to_be_bytes().to_vec(), vec![0, 0]].concat();
        let want = hash::slot(&key, 7) as u8;
        assert_eq!(picked(&t, packet(saddr, sport, daddr)), vec![(want, 1.0)], "{saddr}:{sport}");
        seen.insert(want);
    }
    assert!(seen.len() >= 5, "forty clients over seven slots took only {seen:?}");
}

#[test]
fn a_hash_of_an_ipv6_source_with_an_offset_lands_past_the_offset() {
    let daddr: IpAddr = "fd00:96::10".parse().expect("address");
    let t = table(Family::V6, "jhash ip6 saddr mod 3 seed 0x6b6e7078 offset 4", daddr, 4..7);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..20u16 {
        let saddr: IpAddr = format!("fd00:7::{i:x}").parse().expect("address");
        let want = hash::slot(&bytes(saddr), 3) as u8 + 4;
        assert_eq!(picked(&t, packet(saddr, 1000, daddr)), vec![(want, 1.0)], "{saddr}");
        seen.insert(want);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[test]
fn a_round_robin_is_followed_down_every_slot_with_its_share() {
    let daddr: IpAddr = "10.96.0.10".parse().expect("address");
    let t = table(Family::V4, "numgen inc mod 3", daddr, 0..3);
    let mut paths = picked(&t, packet("192.168.7.1".parse().expect("address"), 1000, daddr));
    paths.sort_by_key(|(slot, _)| *slot);
    let slots: Vec<u8> = paths.iter().map(|(s, _)| *s).collect();
    assert_eq!(slots, [0, 1, 2]);
    assert!(paths.iter().all(|(_, chance)| (chance - 1.0 / 3.0).abs() < 1e-9), "{paths:?}");
}
