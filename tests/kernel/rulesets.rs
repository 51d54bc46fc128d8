//! Real-kernel tests: every golden ruleset loads into a fresh network namespace with the
//! installed `nft`, what `nft` lists loads again, and a follow-up sync applies on top.
//!
//! Needs root, `ip netns` and `nft`; outside CI they are skipped with a printed reason,
//! in CI (`CI` set) their absence fails the run.

use crate::common::{Netns, Scratch, dry_run_ok, golden_cases, kernel_available, root};

#[test]
fn golden_rulesets_load_list_and_load_again() {
    if !kernel_available() {
        return;
    }
    for case in golden_cases() {
        let script = std::fs::read_to_string(case.dir.join("expected.nft")).expect("expected.nft");
        let ns = Netns::new("golden");
        ns.nft_apply(&script).unwrap_or_else(|e| panic!("{}: expected.nft does not load:\n{e}", case.name));
        let listed = ns.nft(&["list", "ruleset"]);
        assert!(
            listed.contains("table ip kube-nftproxy") && listed.contains("table ip6 kube-nftproxy"),
            "{}",
            case.name
        );

        // What the host's nft prints must load again: a later partial sync depends on it.
        let copy = Netns::new("roundtrip");
        copy.nft_apply(&listed).unwrap_or_else(|e| panic!("{}: listing does not load again:\n{e}", case.name));
        assert_eq!(copy.nft(&["list", "ruleset"]), listed, "{}: listing changed after a round trip", case.name);

        // A full sync over the existing tables replaces them and leaves the same state.
        ns.nft_apply(&script).unwrap_or_else(|e| panic!("{}: re-applying over itself fails:\n{e}", case.name));
        assert_eq!(ns.nft(&["list", "ruleset"]), listed, "{}: re-applying changed the state", case.name);
    }
}

#[test]
fn a_follow_up_sync_with_one_more_endpoint_applies_on_top() {
    if !kernel_available() {
        return;
    }
    let scratch = Scratch::new("followup");
    let dir = scratch.0.clone();
    for entry in std::fs::read_dir(root().join("examples/cluster")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let args = vec!["--cluster-cidr=10.0.0.0/8,fd00:10::/48".to_string()];
    let before = dry_run_ok(&dir, &args);
    std::fs::write(
        dir.join("zz-new-endpoint.yaml"),
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {name: web-c, namespace: shop, labels: {kubernetes.io/service-name: web}}\n\
         addressType: IPv4\nports: [{name: http, port: 8080, protocol: TCP}]\n\
         endpoints: [{addresses: [10.2.0.23], conditions: {ready: true}, nodeName: node-b}]\n",
    )
    .unwrap();
    let after = dry_run_ok(&dir, &args);
    assert_ne!(before, after);

    let ns = Netns::new("followup");
    ns.nft_apply(&before).expect("first sync");
    let old = ns.endpoint_map("ip", "cluster-endpoints-tcp");
    assert!(!old.contains("10.2.0.23"));
    ns.nft_apply(&after).expect("follow-up sync");
    let new = ns.endpoint_map("ip", "cluster-endpoints-tcp");
    assert!(new.contains("172.30.0.20 . 80 . 3 : 10.2.0.23 . 8080"), "new endpoint slot missing:\n{new}");
    // The dispatch by endpoint count leads a frontend holding slot 3 to the chain of four.
    let table = ns.nft(&["list", "table", "ip", "kube-nftproxy"]);
    assert!(
        table.contains(
            "ip daddr . tcp dport . numgen random mod 1 offset 3 @cluster-endpoints-tcp-3 goto lb-cluster-tcp-4"
        ),
        "no search reaches 4 endpoints:\n{table}"
    );
}

#[test]
fn a_broken_script_changes_nothing() {
    if !kernel_available() {
        return;
    }
    let good = dry_run_ok(&root().join("examples/cluster"), &["--cluster-cidr=10.0.0.0/8".to_string()]);
    let ns = Netns::new("atomic");
    ns.nft_apply(&good).expect("load");
    let before = ns.nft(&["list", "ruleset"]);
    let broken = format!("{good}\nadd rule ip kube-nftproxy no-such-chain accept\n");
    assert!(ns.nft_apply(&broken).is_err());
    assert_eq!(ns.nft(&["list", "ruleset"]), before, "a failed transaction must leave the old rules in place");
}
