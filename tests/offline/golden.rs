//! Golden tests: manifests in, the exact dry-run ruleset out, one case per feature.
//!
//! `UPDATE_GOLDEN=1 cargo test --test offline golden` rewrites `expected.nft` files; review the diff.

use crate::common::{Scratch, dry_run, dry_run_ok, golden_cases, root};

#[test]
fn every_case_renders_its_expected_ruleset() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatched = Vec::new();
    for case in golden_cases() {
        let got = dry_run_ok(&case.dir.join("manifests.yaml"), &case.args);
        let path = case.dir.join("expected.nft");
        if update {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            mismatched.push(case.name.clone());
            eprintln!("--- {} differs from {}:\n{got}", case.name, path.display());
        }
    }
    assert!(mismatched.is_empty(), "golden cases differ: {mismatched:?} (UPDATE_GOLDEN=1 rewrites them)");
}

#[test]
fn warnings_are_exactly_the_expected_ones() {
    for case in golden_cases() {
        let out = dry_run(&case.dir.join("manifests.yaml"), &case.args);
        assert!(out.status.success(), "{}: bad input must not fail the run", case.name);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
        let expected = std::fs::read_to_string(case.dir.join("warnings.txt")).unwrap_or_default();
        let expected: Vec<&str> = expected.lines().filter(|l| !l.is_empty()).collect();
        for want in &expected {
            let hits = warnings.iter().filter(|w| w.contains(want)).count();
            assert_eq!(hits, 1, "{}: expected one warning containing {want:?}, got:\n{stderr}", case.name);
        }
        assert_eq!(warnings.len(), expected.len(), "{}: unexpected warnings:\n{stderr}", case.name);
    }
}

#[test]
fn output_is_deterministic() {
    let example = root().join("examples/cluster");
    let args = vec!["--cluster-cidr=10.0.0.0/8,fd00:10::/48".to_string()];
    let first = dry_run_ok(&example, &args);
    assert!(first.contains("table ip kube-nftproxy") && first.contains("table ip6 kube-nftproxy"));
    for _ in 0..3 {
        assert_eq!(dry_run_ok(&example, &args), first);
    }
}

#[test]
fn example_cluster_renders_every_feature_without_warnings() {
    let out = dry_run(&root().join("examples/cluster"), &["--cluster-cidr=10.0.0.0/8,fd00:10::/48".to_string()]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("WARN"), "{stderr}");
    let script = String::from_utf8(out.stdout).unwrap();
    for feature in [
        "goto external-shop/web/tcp/http",
        "nodeport-shop/web/tcp/http",
        "@affinity-3 update @affinity-3 {",
        "goto lb-local-tcp-1",
        "comment \"shop/local-none:http\" : drop",
        "ip daddr @cluster-ips goto reject-chain",
        "198.51.100.10 . tcp . 80 . 203.0.113.0/25",
        "lb-cluster-sctp-1",
        "fd00:172:30::20 . 80 . 0 comment \"shop/web:http\"",
        "ip6 daddr . tcp dport . numgen random mod 1 @cluster-endpoints-tcp-0 goto lb-cluster-tcp-2",
        "ip daddr @service-cidrs drop",
        "add element ip6 kube-nftproxy service-cidrs {\n\tfd00:172:30::/108,\n}",
    ] {
        assert!(script.contains(feature), "example cluster lacks {feature:?}");
    }
    assert!(!script.contains("198.51.100.11"), "an ipMode: Proxy ingress IP must not be served");
}

#[test]
fn unparsable_file_fails_with_status_2_naming_file_and_line() {
    let dir = Scratch::new("bad");
    dir.write("broken.yaml", "kind: Service\nmetadata:\n  name: [unclosed\nspec: {}\n");
    let out = dry_run(&dir.path("broken.yaml"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.yaml:"), "{stderr}");
    assert!(
        stderr.contains("line 4") || stderr.contains("broken.yaml:4") || stderr.contains("broken.yaml:3"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing may be printed from a file that did not parse");
}

#[test]
fn bad_flags_fail_with_status_2() {
    let out = dry_run(&root().join("examples/cluster"), &["--cluster-cidr=10.0.0.0/40".to_string()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cluster-cidr"));
}

#[test]
fn periods_too_long_for_a_timer_fail_with_status_2_naming_the_flag() {
    for flag in ["--iptables-sync-period", "--iptables-min-sync-period", "--full-sync-period", "--nft-timeout"] {
        for value in ["99999999999999999999h", "400d", "-1s", "1e30"] {
            let out = dry_run(&root().join("examples/cluster"), &[format!("{flag}={value}")]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag}={value}: {stderr}");
            assert!(stderr.contains(flag), "{flag}={value}: {stderr}");
        }
    }
    for flag in ["--iptables-sync-period", "--full-sync-period", "--nft-timeout"] {
        let out = dry_run(&root().join("examples/cluster"), &[format!("{flag}=0")]);
        assert_eq!(out.status.code(), Some(2), "{flag}=0 must be refused");
    }
}

#[test]
fn node_names_kubernetes_would_refuse_fail_with_status_2() {
    let run = |name: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
            .args(["--dry-run", "--manifests"])
            .arg(root().join("examples/cluster"))
            .arg(format!("--hostname-override={name}"))
            .output()
            .unwrap()
    };
    for name in ["node-a\nadd table ip injected", "node a", "node_a", "-node", &"a".repeat(254)] {
        let out = run(name);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name:?}: {stderr}");
        assert!(stderr.contains("not a valid node name") && out.stdout.is_empty(), "{name:?}: {stderr}");
    }
    // Upstream lower-cases the host name; so does this proxy.
    let out = run("Node-A");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.starts_with("# kube-nftproxy full sync for node node-a:"), "{}", &script[..80]);
}
