//! Applying to a real kernel: partial syncs are small and take effect, a failed transaction
//! changes nothing, tampering is repaired, restarts keep traffic flowing, cleanup is complete.

use crate::common::check::{bulk, web_on as web, who};
use crate::common::cluster::{Cluster, ECHO_PORT, service, slice};
use crate::common::net::in_netns;
use crate::common::owner::TableOwner;
use crate::common::proxy::{Proxy, model_of, node_a_config};
use crate::common::{Netns, kernel_available};
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::{Family, Model};
use kube_nftproxy::netlink::{NfFamily, Socket};
use kube_nftproxy::nft::{Applier, OwnPorts, Resync, STAGE_ELEMENTS, SyncKind, SyncReport};
use kube_nftproxy::render::{MapName, Update};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

mod bounded;
mod elements;
mod grow;
mod rehash;
mod repairs;

/// Syncs the node to `objects` as the sync loop does after a snapshot: only what changed is
/// rendered again and sent.
fn sync(ns: &Netns, proxy: &mut Proxy, objects: &[Value], full: bool) -> Result<SyncReport, String> {
    proxy.model.replace(model_of(objects));
    proxy.sync(&ns.name, if full { Resync::Replace } else { Resync::Changes })
}

#[test]
fn a_partial_sync_is_a_few_lines_and_traffic_follows() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let first = sync(&c.node, &mut proxy, &web(&c, &["pod-1"]), false);
    assert_eq!(first.unwrap().kind, SyncKind::Full, "the first sync must be full");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");

    let second = sync(&c.node, &mut proxy, &web(&c, &["pod-2"]), false);
    let report = second.unwrap();
    let lines: Vec<&str> = report.script.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    assert_eq!(report.kind, SyncKind::Partial);
    assert!(lines.len() <= 4, "one endpoint swapped took {} lines:\n{}", lines.len(), report.script);
    for _ in 0..10 {
        assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2", "traffic did not follow the endpoint change");
    }

    // Growing to two endpoints moves the service to another lb chain; the old one is flushed
    // now and deleted by a sync at least a second later.
    let third = sync(&c.node, &mut proxy, &web(&c, &["pod-1", "pod-2"]), false);
    assert_eq!(third.unwrap().kind, SyncKind::Partial);
    assert!(c.node.nft(&["list", "chain", "ip", "kube-nftproxy", "lb-cluster-tcp-1"]).contains("chain"));
    std::thread::sleep(Duration::from_millis(1100));
    let fourth = sync(&c.node, &mut proxy, &web(&c, &["pod-1", "pod-2"]), false);
    let report = fourth.unwrap();
    assert_eq!((report.kind, report.deleted_chains), (SyncKind::Unchanged, 1));
    let listed = c.node.nft(&["list", "table", "ip", "kube-nftproxy"]);
    assert!(!listed.contains("lb-cluster-tcp-1 {"), "the stale chain was not deleted");
}

/// The ruleset's lines, sorted: chains built in another order list in another order.
fn sorted_lines(text: String) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn a_failed_sync_changes_nothing_and_the_next_one_is_full() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut proxy = Proxy::new(node_a_config());
    let first = sync(&c.node, &mut proxy, &web(&c, &["pod-1"]), false);
    first.unwrap();
    // Someone deletes the service's endpoint behind our back; the next partial sync deletes
    // it too, so its transaction fails halfway (after other commands were accepted).
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0", "{ 172.30.0.40 . 80 . 0 }"]);
    let before = c.node.nft(&["list", "ruleset"]);
    let spec = json!({"clusterIP": "172.30.0.40", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let mut changed = web(&c, &["pod-2"]);
    changed.push(service("extra", json!({"clusterIP": "172.30.0.41", "ports": spec["ports"]}), json!({})));
    changed[0]["spec"]["sessionAffinity"] = json!("ClientIP");
    // IPv4's part fails (alone too); IPv6's, with nothing to change, goes through.
    let failed = sync(&c.node, &mut proxy, &changed, false).expect("IPv6 went through");
    let [(Family::V4, err)] = &failed.refused[..] else { panic!("IPv4 must be refused: {:?}", failed.refused) };
    assert!(err.to_string().contains("failing line:"), "the error must show the failing line: {err}");
    assert_eq!(c.node.nft(&["list", "ruleset"]), before, "a failed transaction must leave the rules byte for byte");

    let retry = sync(&c.node, &mut proxy, &changed, false);
    let kind = retry.unwrap().kind;
    assert!(matches!(kind, SyncKind::Full | SyncKind::Refresh), "after a failure the next sync is full, not {kind:?}");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2");
}

#[test]
fn a_family_the_kernel_refuses_keeps_its_table_while_the_other_syncs_and_is_synced_fully_once_freed() {
    if !kernel_available() {
        return;
    }
    for (family, refused, other) in [("ip6", Family::V6, Family::V4), ("ip", Family::V4, Family::V6)] {
        let c = Cluster::new(2, 0);
        let to = |f: Family, n: u8| {
            if f == Family::V4 { format!("172.30.0.{n}:80") } else { format!("[fd00:172:30::{n}]:80") }
        };
        let mut proxy = Proxy::new(node_a_config());
        sync(&c.node, &mut proxy, &c.dual("web", 40, &["pod-1"]), false).unwrap();
        // Another process owns one family's table (nftables `flags owner`): the kernel refuses
        // any change to it from the proxy.
        let owner = TableOwner::take(&c.node, family);
        let held = c.node.nft(&["list", "table", family, "kube-nftproxy"]);
        let changed = [c.dual("web", 40, &["pod-2"]), c.dual("api", 41, &["pod-1"])].concat();
        let report = sync(&c.node, &mut proxy, &changed, false).expect("the other family went through");
        let [(f, e)] = &report.refused[..] else { panic!("{family}: {:?}", report.refused) };
        assert_eq!(*f, refused);
        assert!(e.to_string().contains("Operation not permitted"), "not the fault this test makes: {e}");
        assert_eq!(report.kind, SyncKind::Partial, "{family} refused: the other family's sync stays partial");
        assert_eq!(who(&c.client, &to(other, 40)), "pod-2", "{family} refused: the other's endpoint change");
        assert_eq!(who(&c.client, &to(other, 41)), "pod-1", "{family} refused: the other's new service");
        assert_eq!(c.node.nft(&["list", "table", family, "kube-nftproxy"]), held, "the refused table was touched");
        let again = sync(&c.node, &mut proxy, &changed, false).expect("the other family is unchanged");
        assert_eq!((again.refused.len(), again.kind), (1, SyncKind::Unchanged), "{family}: still refused");
        // Freed: the refused family's next sync is a full one (its table is not what the proxy
        // last applied), the other's has nothing to send.
        owner.release();
        let healed = sync(&c.node, &mut proxy, &changed, false).expect("both go through");
        assert!(healed.refused.is_empty(), "{:?}", healed.refused);
        assert_eq!(healed.kind, SyncKind::Full, "{family}: freed, its table is made anew");
        assert_eq!(who(&c.client, &to(refused, 40)), "pod-2", "{family} freed: the endpoint change");
        assert_eq!(who(&c.client, &to(refused, 41)), "pod-1", "{family} freed: the new service");
        let partial = sync(&c.node, &mut proxy, &c.dual("web", 40, &["pod-1"]), false).unwrap();
        assert_eq!(partial.kind, SyncKind::Partial, "both families in step again: one partial sync");
        assert_eq!(who(&c.client, &to(refused, 40)), "pod-1");
    }
}
