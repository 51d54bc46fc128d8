//! Map elements as the kernel holds them: sent over netlink they list as `nft` loads them, one
//! endpoint's change is one slot, a big batch of long names is split.

use super::*;

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
    let listed = ns.endpoint_map("ip", "cluster-endpoints-tcp");
    assert!(
        listed.contains("172.30.0.50 . 80 . 2 : 10.9.0.250 . 8080"),
        "the new endpoint must take the freed slot:\n{listed}"
    );
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

/// `script` (a full sync's) as a version before the endpoint maps' parts wrote it: one
/// endpoint map per scope, frontend kind and protocol (`cluster-endpoints-tcp`), holding
/// every slot.
fn before_the_parts(script: &str) -> String {
    let parts: Vec<String> =
        MapName::all().into_iter().filter(|m| *m != m.first_part()).map(|m| m.to_string()).collect();
    let (mut out, mut skipping) = (String::new(), false);
    for line in script.lines() {
        // The parts after the first are declared no more; the first takes the old name.
        let declared = line.trim().strip_prefix("map ").and_then(|l| l.strip_suffix(" {"));
        if declared.is_some_and(|name| parts.iter().any(|p| p == name)) {
            skipping = true;
        }
        if !skipping {
            let mut line = line.to_string();
            for part in 0..kube_nftproxy::render::PARTS {
                for proto in ["tcp", "udp", "sctp"] {
                    line = line.replace(&format!("-endpoints-{proto}-{part}"), &format!("-endpoints-{proto}"));
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        skipping &= line.trim() != "}";
    }
    out
}

#[test]
fn a_restart_over_an_earlier_versions_endpoint_maps_moves_to_the_parts_in_place() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let objects = web(&c, &["pod-1", "pod-2"]);
    let mut proxy = Proxy::new(node_a_config());
    proxy.model.replace(model_of(&objects));
    proxy.render();
    let script = kube_nftproxy::render::full_sync_script(proxy.ruleset(), "node-a").unwrap();
    c.node.nft_apply(&before_the_parts(&script)).expect("the earlier layout loads");
    let listed = c.node.nft(&["list", "table", "ip", "kube-nftproxy"]);
    assert!(listed.contains("map cluster-endpoints-tcp {") && !listed.contains("cluster-endpoints-tcp-1"), "{listed}");
    let before = who(&c.client, "172.30.0.40:80");
    assert!(before == "pod-1" || before == "pod-2", "the earlier layout serves: {before}");
    // A restarted daemon finds maps it does not declare, of its own earlier layout: the
    // tables are rewritten in place, and hold what a first sync would.
    let mut restarted = Proxy::new(node_a_config());
    let report = sync(&c.node, &mut restarted, &objects, false).unwrap();
    assert_eq!(report.kind, SyncKind::Refresh, "{}", report.script);
    let fresh = Netns::new("parts-fresh");
    fresh.nft_apply(&script).expect("a first sync");
    assert_eq!(sorted_lines(c.node.nft(&["list", "ruleset"])), sorted_lines(fresh.nft(&["list", "ruleset"])));
    let served: std::collections::BTreeSet<String> = (0..40).map(|_| who(&c.client, "172.30.0.40:80")).collect();
    assert_eq!(served, ["pod-1", "pod-2"].map(String::from).into(), "both endpoints, through the parts");
}
