//! A big partial sync in bounded transactions: each frontend's changes whole in one of them
//! (as `nft monitor` reports the transactions), and traffic through a moving Service unbroken.

use super::sync;
use crate::common::check::{bulk, probe_during, web_on as web, who};
use crate::common::cluster::Cluster;
use crate::common::daemon::wait_for;
use crate::common::kernel_available;
use crate::common::monitor::Monitor;
use crate::common::proxy::{Proxy, node_a_config};
use kube_nftproxy::nft::{CUT_CHANGES, SyncKind};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The bulk Services of `bulk(range)`, their endpoints moved from `10.5.*` to `10.6.*`.
fn moved(range: std::ops::Range<u32>) -> Vec<Value> {
    let text = serde_json::to_string(&bulk(range)).expect("json");
    serde_json::from_str(&text.replace("\"10.5.", "\"10.6.")).expect("json")
}

/// The transactions `nft monitor` reported after its readiness check, each as the bulk
/// frontends its element changes touched (`172.31.A.B . 80 . slot` in an element list).
fn frontends_by_transaction(events: &str) -> Vec<BTreeSet<String>> {
    let ready = events.rfind("monitor-ready").unwrap_or(0);
    let mut lines = events[ready..].lines().skip_while(|l| !l.starts_with("# new generation")).skip(1);
    let mut out = vec![BTreeSet::new()];
    for line in lines.by_ref() {
        if line.starts_with("# new generation") {
            out.push(BTreeSet::new());
            continue;
        }
        let Some(current) = out.last_mut().filter(|_| line.contains("element ip kube-nftproxy")) else { continue };
        for part in line.split(['{', ',']).map(str::trim).filter(|p| p.starts_with("172.31.")) {
            current.insert(part.split(' ').next().unwrap_or_default().to_string());
        }
    }
    // The last is still open.
    out.pop();
    out
}

#[test]
fn a_big_partial_sync_goes_in_bounded_transactions_each_frontend_whole() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let mut before = web(&c, &["pod-1"]);
    before.extend(bulk(0..2100));
    // Started over the empty namespace: `nft monitor` starting over the big table reports
    // nothing for seconds.
    let monitor = Monitor::start(&c.node);
    let first = sync(&c.node, &mut proxy, &before, false).unwrap();
    assert_eq!(first.kind, SyncKind::Full);
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");

    // Every bulk endpoint moves (10,500 slots deleted and added again) and web moves to
    // pod-2, all in one sync, while a client connects to web.
    let mut after = web(&c, &["pod-2"]);
    after.extend(moved(0..2100));
    let probe = probe_during(&c.client, "172.30.0.40:80", Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(200));
    let report = sync(&c.node, &mut proxy, &after, false).unwrap();
    let failures = probe.join().expect("probe");
    let reported = || frontends_by_transaction(&monitor.events());
    let total = (first.transactions + report.transactions) as usize;
    let all_in = wait_for(Duration::from_secs(10), || reported().len() >= total);
    assert!(all_in.is_some(), "nft monitor reported {} of {total} transactions", reported().len());
    let transactions = reported();

    assert_eq!(report.kind, SyncKind::Partial);
    let changes = 2 * 2100 * 5;
    assert!(changes > CUT_CHANGES);
    assert_eq!(report.transactions as usize, changes.div_ceil(CUT_CHANGES), "{changes} changes");
    assert!(failures.is_empty(), "connections failed during the cut sync: {failures:?}");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2");
    // Every bulk frontend's ten changes went in one of the sync's transactions, the last
    // ones reported (the first sync may be followed by a sweep of its own).
    let ours = &transactions[transactions.len() - report.transactions as usize..];
    let mut seen = BTreeSet::new();
    for (i, frontends) in ours.iter().enumerate() {
        for f in frontends {
            assert!(seen.insert(f.clone()), "frontend {f} changed in transaction {i} and an earlier one");
        }
    }
    assert_eq!(seen.len(), 2100, "every bulk frontend changed");
    assert!(
        ours.iter().all(|t| !t.is_empty()),
        "a transaction without elements: {:?}",
        ours.iter().map(BTreeSet::len).collect::<Vec<_>>()
    );
}

/// Each bulk frontend's slots in the kernel's `cluster-endpoints-tcp`, as the second octet of
/// their endpoints (5 before the move, 6 after).
fn held_generations(node: &crate::common::Netns) -> BTreeMap<String, Vec<String>> {
    let listed = node.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp"]);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for element in listed.split([',', '{', '\n']).map(str::trim).filter(|e| e.starts_with("172.31.")) {
        let (Some(frontend), Some((_, value))) = (element.split(' ').next(), element.split_once(" : ")) else {
            continue;
        };
        let octet = value.split('.').nth(1).unwrap_or_default().to_string();
        out.entry(frontend.to_string()).or_default().push(octet);
    }
    out
}

#[test]
fn a_cut_sync_refused_half_way_leaves_each_frontend_whole_and_the_next_sync_sends_the_rest() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let mut before = web(&c, &["pod-1"]);
    before.extend(bulk(0..2100));
    sync(&c.node, &mut proxy, &before, false).unwrap();
    // Someone deletes a slot of the last frontend (the highest address, so its changes go in
    // the last transaction): that transaction's deletion of it is refused.
    let last = "172.31.8.100";
    c.node.nft(&[
        "delete",
        "element",
        "ip",
        "kube-nftproxy",
        "cluster-endpoints-tcp",
        &format!("{{ {last} . 80 . 0 }}"),
    ]);
    let mut after = web(&c, &["pod-2"]);
    after.extend(moved(0..2100));
    let failed = sync(&c.node, &mut proxy, &after, false).expect("IPv6 went through");
    assert_eq!(failed.refused.len(), 1, "IPv4 must be refused: {:?}", failed.refused);

    // The first transaction went in, the last did not; every frontend is whole, old or new.
    let held = held_generations(&c.node);
    let whole = |slots: &Vec<String>| slots.len() == 5 && slots.iter().all(|s| *s == slots[0]);
    let broken: Vec<_> = held.iter().filter(|(f, s)| f.as_str() != last && !whole(s)).collect();
    assert!(broken.is_empty(), "frontends half moved: {broken:?}");
    let moved_now = held.values().filter(|s| s[0] == "6").count();
    assert!(moved_now > 0 && moved_now < 2100, "{moved_now} frontends moved: not cut half-way");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2", "web's change was in the first transaction");

    // The next sync compares with the kernel and sends the rest.
    let retry = sync(&c.node, &mut proxy, &after, false).unwrap();
    assert!(matches!(retry.kind, SyncKind::Full | SyncKind::Refresh), "{:?}", retry.kind);
    let held = held_generations(&c.node);
    assert_eq!(held.len(), 2100);
    assert!(held.values().all(|s| whole(s) && s[0] == "6"), "the rest was not sent");
}
