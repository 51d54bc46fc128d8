//! Full syncs over tables someone changed: refreshed in place keeping affinity, foreign objects
//! deleted by handle, a hooked chain of ours undone, a big first sync staged unseen by
//! packets, a big table repaired in one transaction.

use super::*;
use kube_nftproxy::model::Protocol;
use kube_nftproxy::render::Scope;

/// Adds a base chain that drops everything to our table, as a careless firewall script might.
fn add_stray_chain(ns: &Netns, hook: &str) {
    let spec = format!("{{ type filter hook {hook} priority 5; policy drop; }}");
    ns.nft(&["add", "chain", "ip", "kube-nftproxy", "stray", &spec]);
}

#[test]
fn a_refresh_sends_only_what_differs_from_the_kernels_tables_in_one_transaction() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut objects = web(&c, &["pod-1", "pod-2"]);
    objects[0]["spec"]["sessionAffinity"] = json!("ClientIP");
    objects.extend(bulk(0..300));
    let mut proxy = Proxy::new(node_a_config());
    sync(&c.node, &mut proxy, &objects, false).unwrap();
    let first = who(&c.client, "172.30.0.40:80");
    let clean = sorted_lines(c.node.nft(&["list", "ruleset"]));
    let generation = || in_netns(&c.node.name, || Socket::open().and_then(|mut s| s.generation())).unwrap();
    // Over tables that hold what they should, nothing is sent.
    let before = generation();
    let update = proxy.render();
    let idle = proxy.apply(&c.node.name, &update, Resync::Refresh).unwrap();
    assert_eq!((idle.kind, idle.transactions, idle.elements), (SyncKind::Refresh, 0, Some(0)));
    assert_eq!(generation(), before, "a refresh of intact tables committed something");
    // Drift nobody reported, of the kinds a partial transaction mends: an element gone, a
    // stray element, a stray rule in a chain of ours.
    let chain = proxy.ruleset().tables[0].chains.keys().find(|c| c.starts_with("lb-")).expect("an lb- chain").clone();
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", "{ 172.30.0.40 . tcp . 80 }"]);
    c.node.nft(&["add", "element", "ip", "kube-nftproxy", "cluster-ips", "{ 172.30.9.9 }"]);
    c.node.nft(&["insert", "rule", "ip", "kube-nftproxy", &chain, "drop"]);
    let before = generation();
    let update = proxy.render();
    let mended = proxy.apply(&c.node.name, &update, Resync::Refresh).unwrap();
    assert_eq!((mended.kind, mended.transactions), (SyncKind::Refresh, 1));
    assert_eq!(mended.elements, Some(2), "one element added, one deleted:\n{}", mended.script);
    assert!(mended.script.contains(&format!("flush chain ip kube-nftproxy {chain}")), "{}", mended.script);
    assert_eq!(generation().wrapping_sub(before), 1);
    let refreshed = c.node.nft(&["list", "ruleset"]);
    assert!(refreshed.contains(" expires "), "the affinity entry was lost:\n{refreshed}");
    let without_affinity =
        |v: Vec<String>| -> Vec<String> { v.into_iter().filter(|l| !l.contains("expires")).collect() };
    assert_eq!(without_affinity(sorted_lines(refreshed)), without_affinity(clean), "the refresh left drift behind");
    for _ in 0..5 {
        assert_eq!(who(&c.client, "172.30.0.40:80"), first, "affinity must survive a refresh");
    }
    // A stateful object someone added is no element, chain or set: the rewrite in place
    // deletes it by handle.
    c.node.nft(&["add", "counter", "ip", "kube-nftproxy", "stray-counter"]);
    let update = proxy.render();
    let rewritten = proxy.apply(&c.node.name, &update, Resync::Refresh).unwrap();
    assert_eq!((rewritten.kind, rewritten.elements), (SyncKind::Refresh, None), "a rewrite in place");
    assert!(!c.node.nft(&["list", "ruleset"]).contains("stray-counter"), "the counter stayed");
}

#[test]
fn tables_read_ahead_are_compared_unless_they_changed_since() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(3, 0);
    let mut first = Proxy::new(node_a_config());
    sync(&c.node, &mut first, &[web(&c, &["pod-1", "pod-2"]), bulk(0..50)].concat(), false).unwrap();
    // A partial sync keeps pod-2's slot and gives pod-3 pod-1's: not the address order a
    // fresh render numbers slots in.
    let objects = [web(&c, &["pod-2", "pod-3"]), bulk(0..50)].concat();
    assert_eq!(sync(&c.node, &mut first, &objects, false).unwrap().kind, SyncKind::Partial);
    let clean = sorted_lines(c.node.nft(&["list", "ruleset"]));
    let generation = || in_netns(&c.node.name, || Socket::open().and_then(|mut s| s.generation())).unwrap();
    // A second run over the first's tables, as a restart: read ahead, then its first render
    // keeps their slots and its first sync finds nothing to send.
    let restart = |c: &Cluster| {
        let mut p = Proxy::new(node_a_config());
        let fresh = std::mem::replace(&mut p.applier, Applier::new("node-a", Arc::new(OwnPorts::default())));
        p.applier = in_netns(&c.node.name, || fresh.reading_ahead());
        p
    };
    let mut second = restart(&c);
    std::thread::sleep(Duration::from_millis(300));
    let before = generation();
    let report = sync(&c.node, &mut second, &objects, false).unwrap();
    assert_eq!((report.kind, report.transactions), (SyncKind::Refresh, 0), "{}", report.script);
    assert_eq!(generation(), before);
    // Someone deletes an element after the read ahead: the notification makes the first sync
    // read the tables again, and mend them.
    let mut third = restart(&c);
    std::thread::sleep(Duration::from_millis(300));
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "cluster-ips", "{ 172.30.0.40 }"]);
    let report = sync(&c.node, &mut third, &objects, false).unwrap();
    assert_eq!((report.kind, report.transactions, report.elements), (SyncKind::Refresh, 1, Some(1)));
    assert_eq!(sorted_lines(c.node.nft(&["list", "ruleset"])), clean);
}

#[test]
fn a_check_mends_chains_without_reading_elements_and_a_refresh_mends_the_rest() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let objects = [web(&c, &["pod-1"]), bulk(0..50)].concat();
    let mut proxy = Proxy::new(node_a_config());
    sync(&c.node, &mut proxy, &objects, false).unwrap();
    let chain = proxy.ruleset().tables[0].chains.keys().find(|c| c.starts_with("lb-")).expect("an lb- chain").clone();
    c.node.nft(&["insert", "rule", "ip", "kube-nftproxy", &chain, "drop"]);
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "cluster-ips", "{ 172.30.0.40 }"]);
    // The sync that checks also carries a change of the cluster: a Service added.
    let grown = [objects.clone(), bulk(50..51)].concat();
    proxy.model.replace(model_of(&grown));
    let update = proxy.render();
    let checked = proxy.apply(&c.node.name, &update, Resync::Check).unwrap();
    assert_eq!((checked.kind, checked.transactions), (SyncKind::Partial, 2), "the changes, then the check");
    let listed = c.node.nft(&["list", "ruleset"]);
    assert!(listed.contains("172.31.0.51"), "the Service added with the check is missing:\n{listed}");
    assert!(!listed.contains("drop\n\t\tdnat"), "the stray rule stayed:\n{listed}");
    assert!(!listed.contains("172.30.0.40,") && !listed.contains("172.30.0.40 }"), "a check reads no element");
    let update = proxy.render();
    let refreshed = proxy.apply(&c.node.name, &update, Resync::Refresh).unwrap();
    assert_eq!((refreshed.transactions, refreshed.elements), (1, Some(1)));
    let fresh = Netns::new("check-fresh");
    fresh.nft_apply(&kube_nftproxy::render::full_sync_script(proxy.ruleset(), "node-a").unwrap()).unwrap();
    assert_eq!(sorted_lines(c.node.nft(&["list", "ruleset"])), sorted_lines(fresh.nft(&["list", "ruleset"])));
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

/// What the node's IPv4 table showed at each ruleset generation a sampler saw: whether its
/// `nat-prerouting` chain had a rule, and how many elements the parts of
/// `cluster-endpoints-tcp` held (the biggest maps, so their elements span several
/// transactions).
fn endpoint_parts() -> Vec<String> {
    (0..kube_nftproxy::render::PARTS).map(|part| format!("cluster-endpoints-tcp-{part}")).collect()
}

fn sample_while(ns: &Netns, stop: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<Vec<(bool, usize)>> {
    let name = ns.name.clone();
    std::thread::spawn(move || {
        in_netns(&name, || {
            let mut sock = Socket::open().expect("socket");
            let (mut seen, mut last) = (Vec::new(), None);
            loop {
                // Read before the sample, so the last sample is of the finished table.
                let stopping = stop.load(std::sync::atomic::Ordering::SeqCst);
                let g = sock.generation().expect("generation");
                let hooked = sock.rule_count(NfFamily::Ip, "kube-nftproxy", "nat-prerouting").expect("rules");
                let elements: usize = (endpoint_parts().iter())
                    .map(|m| sock.elements(NfFamily::Ip, "kube-nftproxy", m).expect("elements").len())
                    .sum();
                // Kept only when nothing committed while the two were read.
                if sock.generation().expect("generation") == g && last != Some(g) {
                    seen.push((hooked.unwrap_or(0) > 0, elements));
                    last = Some(g);
                }
                if stopping {
                    break;
                }
            }
            seen
        })
    })
}

#[test]
fn a_big_first_sync_is_staged_unseen_by_packets_and_a_big_table_is_repaired_in_place() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let mut objects = web(&c, &["pod-1"]);
    objects.extend(bulk(0..2100));
    let mut proxy = Proxy::new(node_a_config());
    let generation = || in_netns(&c.node.name, || Socket::open().and_then(|mut s| s.generation())).unwrap();
    let before = generation();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample_while(&c.node, stop.clone());
    let report = sync(&c.node, &mut proxy, &objects, false).unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = sampler.join().expect("sampler");
    assert_eq!(report.kind, SyncKind::Full);
    // The table (each map declared with a size alone, between the rest), its elements in
    // transactions of a bounded size, then the hooks' rules.
    let elements = proxy.ruleset().element_count();
    let t = &proxy.ruleset().tables[0];
    let sized = MapName::all().into_iter().filter(|m| t.declared_size(*m).is_some()).count();
    assert_eq!(sized, 1, "the endpoint map's last part alone is big enough for a size");
    let expected = 1 + 2 * sized + elements.div_ceil(STAGE_ELEMENTS) + 1;
    assert_eq!(report.transactions as usize, expected, "{elements} elements");
    assert_eq!(generation().wrapping_sub(before), report.transactions, "one generation per stage, none else");
    // No packet met a half-built table: whenever the hooks had rules, every element was in.
    let all: usize = (0..kube_nftproxy::render::PARTS)
        .map(|part| proxy.ruleset().tables[0].elements[&MapName::Endpoints(Scope::Cluster, Protocol::Tcp, part)].len())
        .sum();
    let early: Vec<_> = seen.iter().filter(|(hooked, n)| *hooked && *n != all).collect();
    assert!(early.is_empty(), "packets were let into a table holding part of its {all} elements: {early:?}");
    assert!(seen.iter().any(|(hooked, _)| *hooked), "the sampler never saw the finished table: {seen:?}");
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
    c.node.nft(&["delete", "map", "ip", "kube-nftproxy", "local-endpoints-sctp-0"]);
    c.node.nft(&["add", "map", "ip", "kube-nftproxy", "local-endpoints-sctp-0", "{ type ipv4_addr : ipv4_addr; }"]);
    let redefined = sync(&c.node, &mut proxy, &objects, true).unwrap();
    assert_eq!(redefined.kind, SyncKind::Refresh, "a redefined map is declared anew in place");
    assert!(sorted_lines(c.node.nft(&["list", "ruleset"])) == staged, "the refresh left drift behind");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    // The last part's 4,200 elements (slots 3 and 4) were declared room for 12,288; growing
    // past that declares it larger in the partial sync.
    let sized = |ns: &Netns| ns.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp-3"]);
    assert!(sized(&c.node).contains("size 12288"), "{}", sized(&c.node).chars().take(300).collect::<String>());
    objects.extend(bulk(2100..6500));
    let grown = sync(&c.node, &mut proxy, &objects, false).unwrap();
    assert_eq!(grown.kind, SyncKind::Partial, "13,000 slots in the last part: the map declared larger in place");
    assert!(sized(&c.node).contains("size 24576"), "{}", sized(&c.node).chars().take(300).collect::<String>());
    let smaller = sync(&c.node, &mut proxy, &objects[..objects.len() - 200], false).unwrap();
    assert_eq!(smaller.kind, SyncKind::Partial, "shrinking fits");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
}

#[test]
fn a_map_declared_without_a_size_keeps_its_declaration_across_the_threshold_and_changes_stay_partial() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let small = [web(&c, &["pod-1"]), bulk(0..1900)].concat();
    let mut proxy = Proxy::new(node_a_config());
    sync(&c.node, &mut proxy, &small, false).unwrap();
    // The last part of the endpoint map: slots 3 and 4 of each bulk Service.
    let map = |ns: &Netns| ns.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp-3"]);
    let head = |ns: &Netns| map(ns).lines().take(4).collect::<Vec<_>>().join("\n");
    assert!(!head(&c.node).contains("size"), "3,800 slots are declared without a size:\n{}", head(&c.node));
    // Grown past 4,096 slots by one change: a fresh render would declare a size, but the
    // kernel's resizable hash has no limit, so the change goes as it is.
    let grown = [small.clone(), bulk(1900..2100)].concat();
    let report = sync(&c.node, &mut proxy, &grown, false).unwrap();
    assert_eq!(report.kind, SyncKind::Partial, "{}", report.script);
    assert!(!head(&c.node).contains("size"), "{}", head(&c.node));
    // A restart over it finds the declaration serving: nothing sent.
    let mut restarted = Proxy::new(node_a_config());
    let report = sync(&c.node, &mut restarted, &grown, false).unwrap();
    assert_eq!((report.kind, report.elements), (SyncKind::Refresh, Some(0)));
    // Shrunk back below it, and a change within: partial.
    let report = sync(&c.node, &mut restarted, &small, false).unwrap();
    assert_eq!(report.kind, SyncKind::Partial);
    let report = sync(&c.node, &mut restarted, &small[..small.len() - 2], false).unwrap();
    assert_eq!(report.kind, SyncKind::Partial, "a change that keeps every size is partial");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
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
