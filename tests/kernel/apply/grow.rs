//! A map past the size it was declared with grows in place: the partial sync declares it
//! larger in its first transaction (no full sync, traffic unbroken), a restart over the grown
//! tables finds nothing to send and `--diff` nothing to show, a restart over a map too small
//! for what was added meanwhile grows it in place (its comment says what its table was built
//! for), and a map past four times that is rehashed, not declared anew by a full sync.

use super::sync;
use crate::common::check::{bulk_wide, probe_during, web_on as web, who};
use crate::common::cluster::Cluster;
use crate::common::net::in_netns;
use crate::common::proxy::{Proxy, node_a_config};
use crate::common::{Netns, kernel_available};
use kube_nftproxy::model::Protocol;
use kube_nftproxy::nft::{SyncKind, kdiff};
use kube_nftproxy::render::{MapName, Scope};
use std::time::Duration;

/// The last part of the endpoint map, which holds slots 3 and over: five of each bulk
/// Service's eight.
const MAP: &str = "cluster-endpoints-tcp-3";
const LAST: MapName = MapName::Endpoints(Scope::Cluster, Protocol::Tcp, kube_nftproxy::render::PARTS - 1);

/// The size the kernel lists the endpoint map with.
fn listed_size(ns: &Netns) -> Option<u32> {
    let listed = ns.nft(&["list", "map", "ip", "kube-nftproxy", MAP]);
    let line = listed.lines().map(str::trim).find(|l| l.starts_with("size "))?;
    line.trim_start_matches("size ").parse().ok()
}

/// The map's size for `services` bulk Services of eight endpoints.
fn size_for(services: usize) -> u32 {
    LAST.size_for(services * 5).expect("sized")
}

#[test]
fn a_map_past_its_size_grows_in_place_and_a_restart_finds_nothing_to_send() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let with = |services: u32| {
        let mut objects = web(&c, &["pod-1"]);
        objects.extend(bulk_wide(0..services, 8));
        objects
    };
    assert_eq!(sync(&c.node, &mut proxy, &with(900), false).unwrap().kind, SyncKind::Full);
    assert_eq!(listed_size(&c.node), Some(size_for(900)));

    // 2,100 Services' endpoints pass the size: declared larger, in the partial sync.
    assert!(size_for(2100) > size_for(900));
    let probe = probe_during(&c.client, "172.30.0.40:80", Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(200));
    let report = sync(&c.node, &mut proxy, &with(2100), false).unwrap();
    assert!(probe.join().expect("probe").is_empty(), "connections failed while the map grew");
    assert_eq!(report.kind, SyncKind::Partial, "{}", report.script);
    assert_eq!(listed_size(&c.node), Some(size_for(2100)));
    let listed = c.node.nft(&["list", "map", "ip", "kube-nftproxy", MAP]);
    assert!(listed.contains("172.31.8.100 . 80 . 4 : 10.5.99.5"), "the last bulk Service's last slot is missing");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    // Shrinking keeps the larger size: nothing to declare.
    assert_eq!(sync(&c.node, &mut proxy, &with(1000), false).unwrap().kind, SyncKind::Partial);
    assert_eq!(listed_size(&c.node), Some(size_for(2100)));
    let report = sync(&c.node, &mut proxy, &with(2100), false).unwrap();
    assert_eq!(report.kind, SyncKind::Partial);

    // A restart: the grown map serves as declared; nothing differs, nothing is sent, and
    // `--diff` shows no difference.
    let mut restarted = Proxy::new(node_a_config());
    let report = sync(&c.node, &mut restarted, &with(2100), false).unwrap();
    assert_eq!((report.kind, report.elements, report.transactions), (SyncKind::Refresh, Some(0), 0));
    let desired = restarted.ruleset().clone();
    let diff = in_netns(&c.node.name, move || kdiff::against_kernel(&desired, "node-a").expect("diff"));
    assert!(!diff.differences, "{:?}", diff.table);

    // The kernel kept the comment saying what the map's table was built for when it grew.
    let built = format!("comment \"{}{}\"", kube_nftproxy::render::BUILT_FOR, size_for(900));
    assert!(c.node.nft(&["list", "map", "ip", "kube-nftproxy", MAP]).contains(&built), "{built}");
    // Another restart, with Services added meanwhile: the refresh finds the map too small,
    // reads what its table was built for in its comment, and grows it in place with the
    // difference (a rewrite in place would report no element count).
    assert!(size_for(4500) <= 4 * size_for(900));
    let mut again = Proxy::new(node_a_config());
    let report = sync(&c.node, &mut again, &with(4500), false).unwrap();
    assert_eq!(report.kind, SyncKind::Refresh);
    assert!(report.elements.is_some_and(|n| n > 0), "rewritten in place: {:?}", report.elements);
    assert_eq!(listed_size(&c.node), Some(size_for(4500)));
    // Past four times its table, the map is rehashed (`rehash.rs`), then the elements added.
    assert!(size_for(7000) > 4 * size_for(900));
    let report = sync(&c.node, &mut again, &with(7000), false).unwrap();
    assert_eq!(report.kind, SyncKind::Partial, "not rehashed: {}", report.script);
    assert_eq!(listed_size(&c.node), Some(size_for(7000)));
    let built = format!("comment \"{}{}\"", kube_nftproxy::render::BUILT_FOR, size_for(7000));
    assert!(c.node.nft(&["list", "map", "ip", "kube-nftproxy", MAP]).contains(&built), "{built}");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
}
