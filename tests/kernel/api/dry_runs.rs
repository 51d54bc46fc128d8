//! The dry run from the API server equals the one over the same manifests, whatever the page
//! size, the server's age or its lack of ServiceCIDRs.

use super::*;

#[test]
fn the_dry_run_from_the_api_server_equals_the_dry_run_over_the_same_manifests() {
    let examples = crate::common::root().join("examples/cluster");
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&examples), &[]);
    let (from_api, _) = dry_run_local(&emu, &[]);
    let from_files = crate::common::dry_run_ok(&examples, &["--cluster-cidr=10.0.0.0/8,fd00:10::/48".to_string()]);
    assert!(from_api.contains("service-ips"), "{from_api}");
    assert_eq!(from_api, from_files, "the API server and the files hold the same cluster");
}

/// The dry run of node-a against `emu` with `extra` flags, here; its stdout and its log.
fn dry_run_local(emu: &Emulator, extra: &[&str]) -> (String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"));
    cmd.arg("--cluster-cidr=10.0.0.0/8,fd00:10::/48").args(extra);
    let out = dry_run_command(cmd, &emu.kubeconfig(), "info");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).expect("utf-8"), stderr)
}

#[test]
fn small_pages_old_servers_and_servers_without_servicecidrs_give_the_same_rules() {
    let examples = crate::common::root().join("examples/cluster");
    let modern = Emulator::start(None, "127.0.0.1:0", Some(&examples), &[]);
    let (expected, _) = dry_run_local(&modern, &["--list-page-size=2"]);
    // A watch cache answers the first listing (resourceVersion=0) whole, whatever its limit.
    assert_eq!(modern.stats()["requests"]["list"]["services"], 1, "{}", modern.stats());
    // Without one, pages of two objects: every list is many pages, joined at one snapshot.
    let uncached = Emulator::start(None, "127.0.0.1:0", Some(&examples), &["--no-watch-cache"]);
    let (paged, log) = dry_run_local(&uncached, &["--list-page-size=2"]);
    assert_eq!(paged, expected, "a paged list differs");
    assert!(log.contains("listed 12 services"), "{log}");
    assert_eq!(uncached.stats()["requests"]["list"]["services"], 6, "pages of 2: {}", uncached.stats());
    // A server before 1.31 refuses the field selector on Service specs: the proxy lists
    // without it; a headless Service it then sees renders nothing.
    let headless = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless", "namespace": "shop"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
    let old = Emulator::start(None, "127.0.0.1:0", Some(&examples), &["--no-service-field-selectors"]);
    old.apply(&headless);
    let (script, log) = dry_run_local(&old, &[]);
    assert_eq!(script, expected, "the old server's rules differ");
    assert!(log.contains("filtering here instead"), "{log}");
    // The example holds a headless Service too: 12 served, 2 headless.
    assert!(log.contains("listed 14 services"), "the headless Services were not listed: {log}");
    // Without ServiceCIDRs (404), the drop set is simply empty.
    let bare = Emulator::start(None, "127.0.0.1:0", Some(&examples), &["--no-servicecidrs"]);
    let (script, log) = dry_run_local(&bare, &[]);
    assert!(log.contains("has no servicecidrs"), "{log}");
    assert!(expected.contains("172.30.0.0/16"), "the example's ServiceCIDR is in the modern rules");
    assert!(!script.contains("172.30.0.0/16"), "no ServiceCIDR without the resource");
}
