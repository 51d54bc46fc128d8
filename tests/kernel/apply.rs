//! Applying to a real kernel: partial syncs are small and take effect, a failed transaction
//! changes nothing, tampering is repaired, restarts keep traffic flowing, cleanup is complete.

use crate::common::check::{web_on as web, who};
use crate::common::cluster::{Cluster, ECHO_PORT, service, slice};
use crate::common::net::in_netns;
use crate::common::owner::TableOwner;
use crate::common::proxy::{Proxy, model_of, node_a_config};
use crate::common::{Netns, kernel_available};
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::{Family, Model};
use kube_nftproxy::netlink::Socket;
use kube_nftproxy::nft::{Applier, OwnPorts, Resync, SyncKind, SyncReport};
use kube_nftproxy::render::Update;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

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

/// Adds a base chain that drops everything to our table, as a careless firewall script might.
fn add_stray_chain(ns: &Netns, hook: &str) {
    let spec = format!("{{ type filter hook {hook} priority 5; policy drop; }}");
    ns.nft(&["add", "chain", "ip", "kube-nftproxy", "stray", &spec]);
}

#[test]
fn a_refresh_rewrites_rules_and_maps_in_place_and_keeps_affinity() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut objects = web(&c, &["pod-1", "pod-2"]);
    objects[0]["spec"]["sessionAffinity"] = json!("ClientIP");
    let mut proxy = Proxy::new(node_a_config());
    sync(&c.node, &mut proxy, &objects, false).unwrap();
    let first = who(&c.client, "172.30.0.40:80");
    let clean = sorted_lines(c.node.nft(&["list", "ruleset"]));
    // Drift nobody reported: an element gone, a stray element, a stray rule, a stray base
    // chain that drops everything, a stray set.
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", "{ 172.30.0.40 . tcp . 80 }"]);
    c.node.nft(&["add", "element", "ip", "kube-nftproxy", "cluster-ips", "{ 172.30.9.9 }"]);
    c.node.nft(&["add", "rule", "ip", "kube-nftproxy", "services", "ip", "daddr", "172.30.0.40", "drop"]);
    add_stray_chain(&c.node, "forward");
    c.node.nft(&["add", "set", "ip", "kube-nftproxy", "stray-set", "{ type ipv4_addr; }"]);
    let update = proxy.render();
    let report = proxy.apply(&c.node.name, &update, Resync::Refresh).unwrap();
    assert_eq!(report.kind, SyncKind::Refresh);
    assert!(!report.script.contains("add element ip kube-nftproxy service-ips"), "map elements go over netlink");
    let refreshed = c.node.nft(&["list", "ruleset"]);
    // The client's affinity entry survives (a replace would drop it); the rest is as before.
    assert!(refreshed.contains(" expires "), "the affinity entry was lost:\n{refreshed}");
    let without_affinity =
        |v: Vec<String>| -> Vec<String> { v.into_iter().filter(|l| !l.contains("expires")).collect() };
    assert_eq!(without_affinity(sorted_lines(refreshed)), without_affinity(clean), "the refresh left drift behind");
    for _ in 0..5 {
        assert_eq!(who(&c.client, "172.30.0.40:80"), first, "affinity must survive a refresh");
    }
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
    // Someone deletes the service's element and the chain it led to behind our back; the next
    // partial sync flushes that chain, so its transaction fails halfway (after other commands
    // were accepted).
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", "{ 172.30.0.40 . tcp . 80 }"]);
    c.node.nft(&["delete", "chain", "ip", "kube-nftproxy", "lb-cluster-tcp-1"]);
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
fn a_big_first_sync_is_one_transaction_and_a_big_table_is_repaired_in_place() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let mut objects = web(&c, &["pod-1"]);
    objects.extend(bulk(0..2100));
    let mut proxy = Proxy::new(node_a_config());
    let generation = || in_netns(&c.node.name, || Socket::open().and_then(|mut s| s.generation())).unwrap();
    let before = generation();
    let report = sync(&c.node, &mut proxy, &objects, false).unwrap();
    assert_eq!(report.kind, SyncKind::Full);
    assert_eq!(generation().wrapping_sub(before), 1, "a first sync of >10k elements is one transaction");
    assert!(!report.script.contains("add element"), "the elements go from the ruleset, not from text");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    // The kernel holds what `nft -f` builds from the dry run's text.
    let staged = sorted_lines(c.node.nft(&["list", "ruleset"]));
    let by_nft = Netns::new("one-shot");
    by_nft.nft_apply(&kube_nftproxy::render::full_sync_script(proxy.ruleset(), "node-a").unwrap()).unwrap();
    assert_eq!(by_nft.nft(&["list", "ruleset"]), c.node.nft(&["list", "ruleset"]), "a different ruleset than nft's");

    // Repairing a big table (after tampering) happens in place, foreign objects removed...
    add_stray_chain(&c.node, "input");
    add_foreign_objects(&c.node);
    let repair = sync(&c.node, &mut proxy, &objects, true).unwrap();
    assert_eq!(repair.kind, SyncKind::Refresh, "a big table is repaired in place");
    assert_only(&c.node, &staged, "the repair");
    // ...a map someone redefined included: a refresh declares every map of ours anew.
    c.node.nft(&["delete", "map", "ip", "kube-nftproxy", "local-endpoints-sctp"]);
    c.node.nft(&["add", "map", "ip", "kube-nftproxy", "local-endpoints-sctp", "{ type ipv4_addr : ipv4_addr; }"]);
    let redefined = sync(&c.node, &mut proxy, &objects, true).unwrap();
    assert_eq!(redefined.kind, SyncKind::Refresh, "a redefined map is declared anew in place");
    assert!(sorted_lines(c.node.nft(&["list", "ruleset"])) == staged, "the refresh left drift behind");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    // The endpoint map's 10,500 elements were declared room for 16,384; growing past that
    // takes a full sync, which declares it anew, larger.
    let sized = |ns: &Netns| ns.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp"]);
    assert!(sized(&c.node).contains("size 16384"), "{}", sized(&c.node).chars().take(300).collect::<String>());
    objects.extend(bulk(2100..3300));
    let grown = sync(&c.node, &mut proxy, &objects, false).unwrap();
    assert_eq!(grown.kind, SyncKind::Refresh, "16,500 endpoint slots do not fit a map declared for 16,384");
    assert!(sized(&c.node).contains("size 32768"), "{}", sized(&c.node).chars().take(300).collect::<String>());
    let smaller = sync(&c.node, &mut proxy, &objects[..objects.len() - 200], false).unwrap();
    assert_eq!(smaller.kind, SyncKind::Partial, "shrinking fits");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
}

/// Services `bulk-N` for `range`, each with five endpoints.
fn bulk(range: std::ops::Range<u32>) -> Vec<Value> {
    let mut objects = Vec::new();
    for i in range {
        let ip = format!("172.31.{}.{}", i / 250, i % 250 + 1);
        let spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        let name = format!("bulk-{i}");
        let eps: Vec<Value> =
            (1..=5).map(|e| json!({"addresses": [format!("10.5.{}.{e}", i % 250)], "nodeName": "node-b"})).collect();
        objects.push(service(&name, spec, json!({})));
        objects.push(slice(&name, false, "TCP", eps));
    }
    objects
}

/// The desired ruleset of a golden case, rendered from its manifests and flags.
fn golden_ruleset(case: &crate::common::Case) -> kube_nftproxy::render::Ruleset {
    let mut argv = vec!["kube-nftproxy".to_string(), "--hostname-override=node-a".to_string()];
    argv.extend(case.args.iter().cloned());
    let cfg = Config::from_flags(&Flags::parse_from(argv)).unwrap();
    let loaded = kube_nftproxy::manifests::load(&case.dir.join("manifests.yaml")).unwrap();
    let (model, _refused) = Model::from_objects(&loaded.objects, "node-a");
    kube_nftproxy::render::render(&model, &cfg).unwrap()
}

#[test]
fn elements_sent_over_netlink_list_like_elements_sent_by_nft() {
    if !kernel_available() {
        return;
    }
    for case in crate::common::golden_cases() {
        let desired = golden_ruleset(&case);
        let mut bare = desired.clone();
        for t in &mut bare.tables {
            t.elements.clear();
        }
        let by_text = Netns::new("text");
        by_text.nft_apply(&kube_nftproxy::render::full_sync_script(&desired, "node-a").unwrap()).unwrap();
        let by_netlink = Netns::new("netlink");
        let mut applier = Applier::new("node-a", Arc::new(OwnPorts::default()));
        in_netns(&by_netlink.name, || applier.sync(&bare, &Update::Replaced, Resync::Changes)).unwrap();
        let update = Update::Rebuilt(bare.clone());
        let report = in_netns(&by_netlink.name, || applier.sync(&desired, &update, Resync::Changes)).unwrap();
        assert_eq!(report.kind, SyncKind::Partial, "{}: elements alone are a partial sync", case.name);
        assert_eq!(
            by_netlink.nft(&["list", "ruleset"]),
            by_text.nft(&["list", "ruleset"]),
            "{}: the kernel holds different elements after the netlink path",
            case.name
        );
    }
}

#[test]
fn one_endpoint_of_many_changing_changes_one_slot() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("slots");
    let objects = |replaced: &str| {
        let spec =
            json!({"clusterIP": "172.30.0.50", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        let mut eps: Vec<Value> =
            (1..=20).map(|i| json!({"addresses": [format!("10.9.0.{i}")], "nodeName": "node-b"})).collect();
        eps[2] = json!({"addresses": [replaced], "nodeName": "node-b"});
        vec![service("big", spec, json!({})), slice("big", false, "TCP", eps)]
    };
    let mut proxy = Proxy::new(node_a_config());
    sync(&ns, &mut proxy, &objects("10.9.0.3"), false).unwrap();
    // The replacement sorts last; without stable slots every later slot would shift.
    let script = sync(&ns, &mut proxy, &objects("10.9.0.250"), false).unwrap().script;
    let changed: usize = script
        .lines()
        .filter(|l| l.contains("cluster-endpoints-tcp"))
        .map(|l| l.matches("172.30.0.50 . 80 .").count())
        .sum();
    assert_eq!(changed, 2, "one slot must be deleted and re-added, nothing else:\n{script}");
    let listed = ns.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp"]);
    assert!(
        listed.contains("172.30.0.50 . 80 . 2 : 10.9.0.250 . 8080"),
        "the new endpoint must take the freed slot:\n{listed}"
    );
}

/// Chains and a set named to break or extend a script that pasted kernel names into it
/// (quotes, semicolons, newlines), written as JSON, which takes any name.
const HOSTILE_NAMES: &str = r#"{"nftables": [
    {"add": {"chain": {"family": "ip", "table": "kube-nftproxy", "name": "x; add table ip injected"}}},
    {"add": {"chain": {"family": "ip", "table": "kube-nftproxy", "name": "a\nadd table ip injected\n"}}},
    {"add": {"chain": {"family": "ip", "table": "kube-nftproxy", "name": "q \"quoted\" 'single' { }"}}},
    {"add": {"set": {"family": "ip", "table": "kube-nftproxy", "name": "s;\nadd table ip injected", "type": "ipv4_addr"}}},
    {"add": {"chain": {"family": "ip6", "table": "kube-nftproxy", "name": "x; add table ip6 injected"}}}
]}"#;

/// Named objects of every kind `nft` can add, and references among them that a refresh must
/// undo in the right order: a rule using a counter and a ct helper, a map jumping to a chain,
/// a rule of ours jumping to a foreign chain, a bound (anonymous) chain in a chain of ours.
const FOREIGN_OBJECTS: &str = r#"
add counter ip kube-nftproxy stray-counter
add quota ip kube-nftproxy stray-quota { over 10 mbytes; }
add limit ip kube-nftproxy stray-limit { rate 10/second; }
add ct helper ip kube-nftproxy stray-helper { type "ftp" protocol tcp; }
add ct timeout ip kube-nftproxy stray-timeout { protocol tcp; policy = { established: 100 }; }
add ct expectation ip kube-nftproxy stray-expectation { protocol tcp; dport 21; timeout 1s; size 10; }
add synproxy ip kube-nftproxy stray-synproxy { mss 1460; wscale 7; }
add counter ip6 kube-nftproxy stray-counter
add chain ip kube-nftproxy stray-target
add rule ip kube-nftproxy stray-target counter name stray-counter ct helper set stray-helper
add map ip kube-nftproxy stray-map { type ipv4_addr : verdict; elements = { 10.9.9.9 : jump stray-target }; }
add rule ip kube-nftproxy services jump stray-target
add rule ip kube-nftproxy services jump { counter; }
"#;

/// Adds to our tables everything someone else might: hostile names, objects of every kind
/// (a flowtable and a secmark where the kernel supports them).
fn add_foreign_objects(ns: &Netns) {
    let json = ns.run(&["nft", "-j", "-f", "-"], HOSTILE_NAMES);
    assert!(json.status.success(), "adding hostile names: {}", String::from_utf8_lossy(&json.stderr));
    ns.nft_apply(FOREIGN_OBJECTS).unwrap();
    let link = ns.run(&["ip", "link", "add", "stray0", "type", "veth", "peer", "name", "stray1"], "");
    assert!(link.status.success(), "ip link add: {}", String::from_utf8_lossy(&link.stderr));
    let optional = [
        ("flowtable", "add flowtable ip kube-nftproxy stray-ft { hook ingress priority 0; devices = { stray0 }; }"),
        ("secmark", r#"add secmark ip kube-nftproxy stray-secmark { "system_u:object_r:ssh_server_packet_t:s0" }"#),
    ];
    for (what, line) in optional {
        if let Err(e) = ns.nft_apply(line) {
            eprintln!("SKIPPING a foreign {what}: this kernel refuses one: {}", e.lines().next().unwrap_or(""));
        }
    }
    let listed = ns.nft(&["list", "ruleset"]);
    assert!(listed.contains("stray-counter") && listed.contains("add table ip injected"), "{listed}");
}

/// The kernel's tables, and no table named `injected` in any family.
fn assert_only(ns: &Netns, clean: &[String], what: &str) {
    let tables = ns.nft(&["list", "tables"]);
    assert!(!tables.contains("injected"), "{what}: a name read from the kernel was run as a command:\n{tables}");
    let now = sorted_lines(ns.nft(&["list", "ruleset"]));
    assert!(now == clean, "{what} left foreign objects behind:\n{}", now.join("\n"));
}

#[test]
fn a_refresh_deletes_every_foreign_object_by_handle() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("foreign");
    let spec = json!({"clusterIP": "172.30.0.50", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = vec![json!({"addresses": ["10.9.0.1"], "nodeName": "node-b"})];
    let objects = vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)];
    let mut proxy = Proxy::new(node_a_config());
    sync(&ns, &mut proxy, &objects, false).unwrap();
    let clean = sorted_lines(ns.nft(&["list", "ruleset"]));
    add_foreign_objects(&ns);
    let update = proxy.render();
    let report = proxy.apply(&ns.name, &update, Resync::Refresh).unwrap();
    assert_eq!(report.kind, SyncKind::Refresh);
    assert!(!report.script.contains("injected"), "a kernel name reached the script:\n{}", report.script);
    assert_only(&ns, &clean, "the refresh");
}

#[test]
fn a_big_batch_of_long_named_elements_is_split_and_lists_as_nft_loads_it() {
    if !kernel_available() {
        return;
    }
    // 300 dual-stack services with long names: each IPv6 dispatch element (address, chain,
    // 128-byte comment) takes ~220 bytes, so the map's elements go in several messages (split
    // by size: see `wire`'s unit test for elements long enough to overflow a 16-bit length).
    let long = |i: u32, tag: &str| format!("{tag}{i:05}-{}", "x".repeat(50));
    let mut objects = Vec::new();
    for i in 0..300 {
        let name = long(i, "s");
        let spec = json!({"clusterIP": format!("172.31.{}.{}", i / 250, i % 250 + 1),
            "clusterIPs": [format!("172.31.{}.{}", i / 250, i % 250 + 1), format!("fd00:31::{:x}", i + 1)],
            "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack",
            "ports": [{"name": long(i, "p"), "port": 80, "targetPort": ECHO_PORT}]});
        let mut svc = service(&name, spec, json!({}));
        svc["metadata"]["namespace"] = json!(long(i, "n"));
        objects.push(svc);
        for v6 in [false, true] {
            let addr = if v6 { format!("fd00:5::{:x}", i + 1) } else { format!("10.5.{}.{}", i / 250, i % 250 + 1) };
            let mut s = slice(&name, v6, "TCP", vec![json!({"addresses": [addr], "nodeName": "node-b"})]);
            s["metadata"]["namespace"] = json!(long(i, "n"));
            s["ports"][0]["name"] = json!(long(i, "p"));
            objects.push(s);
        }
    }
    let ns = Netns::new("long-names");
    let mut proxy = Proxy::new(node_a_config());
    proxy.model.replace(model_of(&objects));
    let report = proxy.sync(&ns.name, Resync::Changes).expect("the kernel takes the batch");
    assert_eq!(report.kind, SyncKind::Full);
    let listed = ns.nft(&["list", "ruleset"]);
    assert!(listed.matches("s00299-").count() >= 2, "the last service is in both families");
    let by_nft = Netns::new("long-names-nft");
    by_nft.nft_apply(&kube_nftproxy::render::full_sync_script(proxy.ruleset(), "node-a").unwrap()).unwrap();
    assert_eq!(listed, by_nft.nft(&["list", "ruleset"]), "our batch built another ruleset than nft -f");
}

#[test]
fn a_chain_of_ours_someone_hooked_is_undone_by_replacing_the_tables() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let mut proxy = Proxy::new(node_a_config());
    let objects = web(&c, &["pod-1"]);
    sync(&c.node, &mut proxy, &objects, false).unwrap();
    let clean = c.node.nft(&["list", "ruleset"]);
    // `services` swapped for a base chain of the same name that drops everything it sees: the
    // kernel refuses the refresh's redeclaration of a hooked chain without its hook, so the
    // tables are replaced, and the hooked chain goes with them.
    let swap = [
        "flush chain ip kube-nftproxy nat-prerouting",
        "flush chain ip kube-nftproxy nat-output",
        "delete chain ip kube-nftproxy services",
        "add chain ip kube-nftproxy services { type filter hook input priority 5; policy drop; }",
    ];
    c.node.nft_apply(&swap.join("\n")).unwrap();
    assert!(c.node.nft(&["list", "ruleset"]).contains("hook input priority filter + 5; policy drop;"));
    let repair = sync(&c.node, &mut proxy, &objects, true).unwrap();
    assert_eq!(repair.kind, SyncKind::Full, "a refresh cannot unhook a chain: the tables were replaced");
    assert_eq!(c.node.nft(&["list", "ruleset"]), clean, "the hooked chain stayed");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
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
