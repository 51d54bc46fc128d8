//! A map past what its hash table was built for is rehashed (`nft::rehash`): copied, the
//! rules that read it moved to the copy chain by chain and back into the map declared anew,
//! in short transactions, while connections go through; the rules keep what they read
//! besides (a rule's anonymous set is declared anew with it); a restart then finds nothing
//! to send. A rehash cut short (a copy left, the map gone) is finished by the next full sync.

use super::sync;
use crate::common::check::{bulk_wide, probe_while, web_on as web};
use crate::common::cluster::Cluster;
use crate::common::net::in_netns;
use crate::common::net::{Proto, probe};
use crate::common::proxy::Proxy;
use crate::common::{Netns, kernel_available};
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::Protocol;
use kube_nftproxy::nft::{Applier, OwnPorts, SyncKind, kdiff};
use kube_nftproxy::render::{BUILT_FOR, COPY_SUFFIX, MapName, Scope, copy_of};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Node A with two IPv4 cluster CIDRs: the rule that marks traffic from outside them reads
/// `cluster-ips` and an anonymous set of the two, so moving it moves the anonymous set too.
/// With `--masquerade-all` every ClusterIP has a chain of its own, which its `service-ips`
/// element leads to: a verdict map of jumps is rehashed too.
fn config() -> Config {
    let cidrs = "--cluster-cidr=10.0.0.0/8,100.64.0.0/10,fd00:10::/32";
    let args = ["kube-nftproxy", "--hostname-override=node-a", cidrs, "--masquerade-all"];
    Config::from_flags(&Flags::parse_from(args)).expect("test configuration")
}

/// A proxy whose applier cannot raise a map's limit in place (a kernel before 6.5), so any
/// map past its size is rehashed.
fn unraised() -> Proxy {
    let mut proxy = Proxy::new(config());
    let applier = std::mem::replace(&mut proxy.applier, Applier::new("node-a", Arc::new(OwnPorts::default())));
    proxy.applier = applier.growing_maps(false);
    proxy
}

/// Who answers `web` from `client`, probed without a trace: the tracer's `explain` may still
/// be reading these thousands of Services when the connection comes (it then says so, and
/// the traced check of `check::who` fails on a timing, not on the rules).
fn answers(client: &Netns) -> String {
    let web = "172.30.0.40:80".parse().expect("an address");
    in_netns(&client.name, move || probe(Proto::Tcp, web, None, Duration::from_secs(2)).who())
}

fn with(c: &Cluster, services: u32) -> Vec<Value> {
    let mut objects = web(c, &["pod-1"]);
    objects.extend(bulk_wide(0..services, 2));
    objects
}

/// The size and comment the kernel lists map (or set) `name` with.
fn declared(ns: &Netns, name: &str) -> (Option<u32>, String) {
    let kind = if name == "cluster-ips" { "set" } else { "map" };
    let listed = ns.nft(&["list", kind, "ip", "kube-nftproxy", name]);
    let line = |p: &str| listed.lines().map(str::trim).find(|l| l.starts_with(p)).map(|l| l[p.len()..].to_string());
    (line("size ").and_then(|s| s.parse().ok()), line("comment ").unwrap_or_default())
}

/// Every set and map of the IPv4 table named as a rehash's copy.
fn copies(ns: &Netns) -> Vec<String> {
    let listed = ns.nft(&["list", "sets", "ip"]) + &ns.nft(&["list", "maps", "ip"]);
    let names = listed.lines().filter_map(|l| l.trim().strip_prefix("map ").or(l.trim().strip_prefix("set ")));
    names.filter_map(|n| n.split_whitespace().next()).filter(|n| n.ends_with(COPY_SUFFIX)).map(str::to_string).collect()
}

#[test]
fn maps_past_their_tables_are_rehashed_in_short_transactions_while_connections_go_through() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = unraised();
    assert_eq!(sync(&c.node, &mut proxy, &with(&c, 4200), false).unwrap().kind, SyncKind::Full);
    let (ips, cluster_ips) = (MapName::ServiceIps, MapName::ClusterIps);
    assert_eq!(declared(&c.node, "service-ips").0, ips.size_for(4201));
    let marking = |ns: &Netns| ns.nft(&["list", "chain", "ip", "kube-nftproxy", "services"]);
    let before = marking(&c.node);
    assert!(before.contains("ip saddr != { 10.0.0.0/8, 100.64.0.0/10 }"), "{before}");

    // 9,000 Services pass every sized map's size: each is rehashed, then the partial sync adds.
    let done = Arc::new(AtomicBool::new(false));
    let going = done.clone();
    let probe = probe_while(&c.client, "172.30.0.40:80", move || !going.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(200));
    let report = sync(&c.node, &mut proxy, &with(&c, 9000), false).unwrap();
    done.store(true, Ordering::Relaxed);
    assert!(probe.join().expect("probe").is_empty(), "connections failed while the maps were rehashed");
    assert_eq!(report.kind, SyncKind::Partial, "{}", report.script);
    // Four maps, each: declared, filled, its chains moved, deleted; twice.
    assert!(report.transactions >= 4 * 2 * 4, "{} transactions", report.transactions);
    assert_eq!(copies(&c.node), Vec::<String>::new(), "a copy was left");
    let first_slots = MapName::Endpoints(Scope::Cluster, Protocol::Tcp, 0);
    for map in [ips, cluster_ips, first_slots] {
        let size = map.size_for(9001).expect("sized");
        let (listed, comment) = declared(&c.node, &map.to_string());
        assert_eq!(listed, Some(size), "{map}");
        assert!(comment.ends_with(&format!("{BUILT_FOR}{size}\"")), "{map}: {comment}");
    }
    let after = marking(&c.node);
    assert_eq!(after, before, "the services chain reads other sets than it did");
    let listed = c.node.nft(&["list", "map", "ip", "kube-nftproxy", "service-ips"]);
    assert!(listed.contains("172.31.35.250 . tcp . 80 : "), "the last bulk Service is missing");
    assert_eq!(answers(&c.client), "pod-1");

    // A restart finds the rehashed maps as it would declare them: nothing to send or show.
    let mut restarted = unraised();
    let report = sync(&c.node, &mut restarted, &with(&c, 9000), false).unwrap();
    assert_eq!((report.kind, report.elements, report.transactions), (SyncKind::Refresh, Some(0), 0));
    let desired = restarted.ruleset().clone();
    let diff = in_netns(&c.node.name, move || kdiff::against_kernel(&desired, "node-a").expect("diff"));
    assert!(!diff.differences, "{:?}", diff.table);
}

/// `nft` copies map (or set) `name` of the IPv4 table, elements and all, as a rehash does.
fn copy_by_hand(ns: &Netns, kind: &str, name: &str) {
    let listed = ns.nft(&["list", kind, "ip", "kube-nftproxy", name]);
    let copy = listed.replace(&format!("{kind} {name} {{"), &format!("{kind} {} {{", copy_of(name)));
    ns.nft_apply(&copy).expect("the copy");
}

/// `nft` replaces the first rule of `chain` reading `@from` by the same reading `@to`.
fn move_rule(ns: &Netns, chain: &str, from: &str, to: &str) {
    let listed = ns.nft(&["-a", "list", "chain", "ip", "kube-nftproxy", chain]);
    let reads = |l: &&str| l.split_whitespace().any(|w| w == format!("@{from}"));
    let rule = listed.lines().find(reads).unwrap_or_else(|| panic!("no rule of {chain} reads {from}"));
    let handle = rule.rsplit_once("# handle ").expect("a handle").1.trim();
    let text = rule.split(" # handle").next().expect("rule").trim().replace(&format!("@{from}"), &format!("@{to}"));
    ns.nft_apply(&format!("replace rule ip kube-nftproxy {chain} handle {handle} {text}\n")).expect("moved");
}

/// A restart over tables a rehash was cut short in: the rehash is finished before the tables
/// are read, the copy is gone, traffic flows, and nothing else differs.
fn restart_finishes(c: &Cluster, reading: &[(&str, &str)]) {
    let mut restarted = unraised();
    let report = sync(&c.node, &mut restarted, &with(c, 4200), false).unwrap();
    assert_eq!((report.kind, report.elements), (SyncKind::Refresh, Some(0)), "{}", report.script);
    assert_eq!(copies(&c.node), Vec::<String>::new(), "the copy was left");
    for (chain, map) in reading {
        let listed = c.node.nft(&["list", "chain", "ip", "kube-nftproxy", chain]);
        assert!(listed.split_whitespace().any(|w| w == format!("@{map}")), "{chain} does not read {map}:\n{listed}");
    }
    assert_eq!(answers(&c.client), "pod-1");
    let desired = restarted.ruleset().clone();
    let diff = in_netns(&c.node.name, move || kdiff::against_kernel(&desired, "node-a").expect("diff"));
    assert!(!diff.differences, "{:?}", diff.table);
}

#[test]
fn a_rehash_cut_short_is_finished_by_the_next_full_sync() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = unraised();
    assert_eq!(sync(&c.node, &mut proxy, &with(&c, 4200), false).unwrap().kind, SyncKind::Full);
    let (ips, cluster_ips) = ("service-ips", "cluster-ips");

    // Cut short after the first half: the rules read the copy, the map is gone.
    copy_by_hand(&c.node, "map", ips);
    move_rule(&c.node, "services", ips, &copy_of(ips));
    c.node.nft_apply(&format!("delete map ip kube-nftproxy {ips}\n")).expect("the map deleted");
    assert_eq!(copies(&c.node), vec![copy_of(ips)]);
    assert_eq!(answers(&c.client), "pod-1", "the copy serves");
    restart_finishes(&c, &[("services", ips)]);

    // Cut short while the first chains moved: one chain reads the copy, another the set.
    copy_by_hand(&c.node, "set", cluster_ips);
    move_rule(&c.node, "cluster-ips-check", cluster_ips, &copy_of(cluster_ips));
    restart_finishes(&c, &[("cluster-ips-check", cluster_ips), ("services", cluster_ips)]);

    // Cut short right after the copy was declared: nothing reads it, it holds nothing.
    let declared = c.node.nft(&["list", "set", "ip", "kube-nftproxy", cluster_ips]);
    let empty: String = declared.lines().take_while(|l| !l.contains("elements = ")).collect::<Vec<_>>().join("\n");
    let empty = empty.replace(&format!("set {cluster_ips} {{"), &format!("set {} {{", copy_of(cluster_ips)));
    c.node.nft_apply(&format!("{empty}\n}}\n}}\n")).expect("the empty copy");
    assert_eq!(copies(&c.node), vec![copy_of(cluster_ips)]);
    restart_finishes(&c, &[("services", cluster_ips)]);
}
