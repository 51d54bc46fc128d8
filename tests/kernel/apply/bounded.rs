//! A big partial sync in bounded transactions: each frontend's changes whole in one of them
//! (as `nft monitor` reports the transactions), traffic through a Service whose changes go
//! last unbroken (its endpoint count new to the node too), and a transaction refused
//! half-way mended by the full sync that follows at once.

use super::sync;
use crate::common::check::{bulk, probe_during, web_on as web, who};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::wait_for;
use crate::common::kernel_available;
use crate::common::monitor::Monitor;
use crate::common::proxy::{Proxy, node_a_config};
use kube_nftproxy::nft::{CUT_CHANGES, SyncKind};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A Service whose address sorts after every bulk one's, so its changes go in the last
/// transaction of a cut sync: `late` at 172.31.255.1:80, on `pods`.
const LATE: &str = "172.31.255.1:80";

fn late(c: &Cluster, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": "172.31.255.1", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service("late", spec, json!({})), slice("late", false, "TCP", eps)]
}

/// The bulk Services of `bulk(range)`, their endpoints moved from `10.5.*` to `10.6.*`.
fn moved(range: std::ops::Range<u32>) -> Vec<Value> {
    let text = serde_json::to_string(&bulk(range)).expect("json");
    serde_json::from_str(&text.replace("\"10.5.", "\"10.6.")).expect("json")
}

/// The transactions `nft monitor` reported in `events` that changed the proxy's IPv4 table
/// and that `nft` itself did not commit (a test's tampering), each as the bulk frontends its
/// element changes touched (`172.31.A.B . 80 . slot` in an element list).
fn frontends_by_transaction(events: &str) -> Vec<BTreeSet<String>> {
    let (mut out, mut current, mut ours) = (Vec::new(), BTreeSet::new(), false);
    for line in events.lines() {
        if line.starts_with("# new generation") {
            let done = std::mem::take(&mut current);
            if std::mem::take(&mut ours) && !line.ends_with("(nft)") {
                out.push(done);
            }
            continue;
        }
        // Not the tracer's table (`kube-nftproxy-trace-…`), which `who` adds and deletes.
        ours |= line.contains(" ip kube-nftproxy ");
        if line.contains("element ip kube-nftproxy ") {
            for part in line.split(['{', ',']).map(str::trim).filter(|p| p.starts_with("172.31.")) {
                current.insert(part.split(' ').next().unwrap_or_default().to_string());
            }
        }
    }
    out
}

/// What `monitor` has reported so far, once it has been quiet for a moment.
fn settled(monitor: &Monitor) -> usize {
    let mut len = monitor.events().len();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = monitor.events().len();
        if now == len {
            return len;
        }
        len = now;
    }
}

/// Asserts that each of `frontends` changed in one of `transactions` only, and that every
/// one of them did.
fn each_whole_in_one(transactions: &[BTreeSet<String>], frontends: usize) {
    let mut seen = BTreeSet::new();
    for (i, t) in transactions.iter().enumerate() {
        for f in t {
            assert!(seen.insert(f.clone()), "frontend {f} changed in transaction {i} and an earlier one");
        }
    }
    assert_eq!(
        seen.len(),
        frontends,
        "frontends changed: {:?}",
        transactions.iter().map(BTreeSet::len).collect::<Vec<_>>()
    );
}

/// A node with web on pod-1, `late` on pod-1 and 2,100 bulk Services, synced, with a monitor
/// reporting from before the first sync (started over a big table it reports nothing for
/// seconds); the monitor's output so far.
fn loaded(c: &Cluster, proxy: &mut Proxy) -> (Monitor, usize) {
    let monitor = Monitor::start(&c.node);
    let mut before = web(c, &["pod-1"]);
    before.extend(late(c, &["pod-1"]));
    before.extend(bulk(0..2100));
    assert_eq!(sync(&c.node, proxy, &before, false).unwrap().kind, SyncKind::Full);
    let mark = settled(&monitor);
    (monitor, mark)
}

/// Every bulk endpoint moved, web on pod-2, and `late` on `late_pods`.
fn after(c: &Cluster, late_pods: &[&str]) -> Vec<Value> {
    let mut after = web(c, &["pod-2"]);
    after.extend(late(c, late_pods));
    after.extend(moved(0..2100));
    after
}

#[test]
fn a_big_partial_sync_goes_in_bounded_transactions_each_frontend_whole() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let (monitor, mark) = loaded(&c, &mut proxy);
    assert_eq!(who(&c.client, LATE), "pod-1");
    let probe = probe_during(&c.client, LATE, Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(200));
    let report = sync(&c.node, &mut proxy, &after(&c, &["pod-2"]), false).unwrap();
    let failures = probe.join().expect("probe");
    let reported = || frontends_by_transaction(&monitor.events()[mark..]);
    let all_in = wait_for(Duration::from_secs(10), || reported().len() >= report.transactions as usize);
    assert!(all_in.is_some(), "nft monitor reported {} of {} transactions", reported().len(), report.transactions);

    assert_eq!(report.kind, SyncKind::Partial);
    // 21,000 slot changes, and web's and late's two each.
    let changes = 2 * 2100 * 5 + 4;
    assert!(changes > CUT_CHANGES);
    assert_eq!(report.transactions as usize, changes.div_ceil(CUT_CHANGES), "{changes} changes");
    assert!(failures.is_empty(), "connections to {LATE} failed during the cut sync: {failures:?}");
    let transactions = reported();
    assert_eq!(transactions.len(), report.transactions as usize);
    // late's address sorts last: its changes went in the last transaction.
    assert!(transactions.last().is_some_and(|t| t.contains("172.31.255.1")), "late was not in the last transaction");
    each_whole_in_one(&transactions, 2101);
    assert_eq!(who(&c.client, LATE), "pod-2");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2");

    // Back again, with late on two pods: an endpoint count new to the node, so the dispatch
    // gains a step in the first transaction while late's slots change in the last. (The
    // step's rewrite deletes rules that read the endpoint map, after which `nft monitor`
    // 1.0.6 no longer reports its elements: the traffic tells.)
    let mut back = web(&c, &["pod-1"]);
    back.extend(late(&c, &["pod-1", "pod-2"]));
    back.extend(bulk(0..2100));
    let probe = probe_during(&c.client, LATE, Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(200));
    let report = sync(&c.node, &mut proxy, &back, false).unwrap();
    let failures = probe.join().expect("probe");
    assert_eq!(report.kind, SyncKind::Partial);
    assert!(report.transactions >= 3, "not cut: {} transactions", report.transactions);
    assert!(failures.is_empty(), "connections to {LATE} failed while the dispatch changed: {failures:?}");
    let served: BTreeSet<String> = (0..20).map(|_| who(&c.client, LATE)).collect();
    assert_eq!(served, ["pod-1", "pod-2"].map(String::from).into(), "late is not served by both pods");
}

/// Each bulk frontend's slots in the kernel's `cluster-endpoints-tcp`, as the second octet of
/// their endpoints (5 before the move, 6 after).
fn held_generations(node: &crate::common::Netns) -> BTreeMap<String, Vec<String>> {
    let listed = node.endpoint_map("ip", "cluster-endpoints-tcp");
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
fn a_cut_sync_refused_half_way_is_mended_at_once_each_frontend_whole_throughout() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let (monitor, _) = loaded(&c, &mut proxy);
    // Someone deletes a slot of the last bulk frontend (the highest bulk address, so its
    // changes go in the last transaction but one): that transaction's deletion is refused.
    let last = "172.31.8.100";
    c.node.nft(&[
        "delete",
        "element",
        "ip",
        "kube-nftproxy",
        "cluster-endpoints-tcp-0",
        &format!("{{ {last} . 80 . 0 }}"),
    ]);
    let mark = settled(&monitor);
    let report = sync(&c.node, &mut proxy, &after(&c, &["pod-2"]), false).unwrap();
    // The transactions before the refused one stay; the tables no longer hold what was
    // applied, so each family is synced fully at once: compared with the kernel, and the
    // rest sent.
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert!(matches!(report.kind, SyncKind::Refresh | SyncKind::Full), "{:?}", report.kind);
    settled(&monitor);
    let transactions = frontends_by_transaction(&monitor.events()[mark..]);
    assert!(transactions.len() >= 2, "no transaction went in before the refusal: {}", transactions.len());
    each_whole_in_one(&transactions, 2101);
    let held = held_generations(&c.node);
    assert_eq!(held.len(), 2101);
    let whole = |slots: &Vec<String>| slots.len() == 5 && slots.iter().all(|s| *s == "6");
    assert!(held.iter().filter(|(f, _)| !f.starts_with("172.31.255.")).all(|(_, s)| whole(s)), "the rest was not sent");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2");
}
