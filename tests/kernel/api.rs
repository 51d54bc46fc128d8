//! The daemon following an API server (the emulator, on the "remote node" of a test cluster)
//! through a real kernel: changes carry traffic within a second, every fault the emulator can
//! make is recovered from, ending with the kernel equal to a fresh dry run of the emulator's
//! final state, and authentication works or fails clearly.

use crate::common::check::{web_on as web, who};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for};
use crate::common::emulator::Emulator;
use crate::common::{Netns, kernel_available, tables};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Where the emulator listens: the remote node's address, as a control plane off the node.
const API_ADDR: &str = "192.168.1.2:6443";

/// Service `name` at `ip`:80 with endpoints on `pods`.
fn svc(c: &Cluster, name: &str, ip: &str, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service(name, spec, json!({})), slice(name, false, "TCP", eps)]
}

/// A cluster with `local` and `remote` pods, and its emulator (on the remote node, bookmarks
/// every second) holding this Node and `web` on pod-1.
fn serving_web(local: u8, remote: u8) -> (Cluster, Emulator) {
    let c = Cluster::new(local, remote);
    let emu = Emulator::start(Some(&c.remote.name), API_ADDR, None, &["--bookmark-interval", "1s"]);
    emu.apply(&Value::Array([vec![Cluster::node_object()], web(&c, &["pod-1"])].concat()));
    (c, emu)
}

/// A cluster, its emulator serving `web` on pod-1 and this Node, and a daemon following it.
fn running(extra: &[&str]) -> (Cluster, Emulator, Daemon) {
    let (c, emu) = serving_web(2, 1);
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), extra, &[]);
    assert!(
        wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some(),
        "the daemon never served what the API server holds:\n{}",
        d.logged()
    );
    (c, emu, d)
}

/// `kube-nftproxy --dry-run` for node-a against the API server of `kubeconfig`, run by `cmd`.
fn dry_run_command(mut cmd: Command, kubeconfig: &Path, log: &str) -> Output {
    cmd.arg("--dry-run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--hostname-override=node-a")
        .env("RUST_LOG", log)
        .env_remove("NODE_NAME")
        .output()
        .expect("run the dry run")
}

/// The dry run inside `ns` (to see its addresses).
fn dry_run(ns: &Netns, kubeconfig: &Path) -> Output {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &ns.name,
        env!("CARGO_BIN_EXE_kube-nftproxy"),
        "--cluster-cidr=10.0.0.0/8,fd00:10::/32",
    ]);
    dry_run_command(cmd, kubeconfig, "warn")
}

/// Whether the node's tables equal a fresh dry run of what the emulator holds now, loaded
/// into `twin`; the difference when not.
fn converged(c: &Cluster, emu: &Emulator, twin: &Netns) -> Result<(), String> {
    let out = dry_run(&c.node, &emu.kubeconfig());
    if !out.status.success() {
        return Err(format!("the dry run failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let _ = twin.run(&["nft", "flush", "ruleset"], "");
    twin.nft_apply(&String::from_utf8_lossy(&out.stdout))?;
    let (want, have) = (tables::state(twin), tables::state(&c.node));
    if want == have { Ok(()) } else { Err(tables::difference(&want, &have)) }
}

/// Waits up to `limit` for the node to converge; panics with the difference and the log.
fn assert_converges(c: &Cluster, emu: &Emulator, twin: &Netns, d: &Daemon, what: &str, limit: Duration) {
    let start = Instant::now();
    let mut last = Err(String::new());
    while start.elapsed() < limit {
        last = converged(c, emu, twin);
        if last.is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not converged after {limit:?}: {}\n{}", last.unwrap_err(), d.logged());
}

#[test]
fn the_daemon_follows_the_api_server_through_a_real_kernel() {
    if !kernel_available() {
        return;
    }
    let (c, emu, d) = running(&[]);
    // Past the minimum sync period, a new Service is served within a second of its creation.
    std::thread::sleep(Duration::from_millis(1200));
    let created = Instant::now();
    emu.apply(&Value::Array(svc(&c, "api", "172.30.0.41", &["pod-2"])));
    // In the kernel (its endpoint map dispatches the new ClusterIP) within a second; a probe
    // sent before that would only be retransmitted a second later, so the kernel is polled.
    let endpoints = || c.node.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp"]);
    let took = wait_for(Duration::from_secs(5), || endpoints().contains("172.30.0.41 . 80"));
    assert!(took.is_some(), "the new Service never reached the kernel:\n{}", d.logged());
    assert!(
        created.elapsed() < Duration::from_secs(1),
        "in the kernel only after {:?}:\n{}",
        created.elapsed(),
        d.logged()
    );
    assert_eq!(who(&c.client, "172.30.0.41:80"), "pod-2", "the new Service does not carry traffic");
    // An endpoint removed receives no new connections.
    emu.apply(&Value::Array(web(&c, &["pod-2"])));
    assert!(wait_for(Duration::from_secs(3), || who(&c.client, "172.30.0.40:80") == "pod-2").is_some());
    for _ in 0..20 {
        assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2", "a removed endpoint still got a connection");
    }
    // A deleted Service is gone from the kernel.
    emu.delete(&Value::Array(svc(&c, "api", "172.30.0.41", &[])));
    let gone = wait_for(Duration::from_secs(3), || {
        !c.node.nft(&["list", "table", "ip", "kube-nftproxy"]).contains("172.30.0.41")
    });
    assert!(gone.is_some(), "the deleted Service is still in the kernel:\n{}", d.logged());
    // An update the rules do not depend on (an annotation) and bookmarks sync nothing.
    let syncs = |log: &str| log.matches(" sync").count();
    let before = syncs(&d.logged());
    let mut annotated = web(&c, &["pod-2"]);
    annotated[0]["metadata"]["annotations"] = json!({"example.com/owner": "team-a"});
    emu.apply(&Value::Array(annotated));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(syncs(&d.logged()), before, "an annotation caused a sync:\n{}", d.logged());
    // One list per resource, then watches only (before the dry runs below list too).
    let stats = emu.stats();
    for resource in ["services", "endpointslices", "nodes"] {
        assert_eq!(stats["requests"]["list"][resource], 1, "{resource} listed more than once: {stats}");
    }
    let twin = Netns::new("twin");
    assert_converges(&c, &emu, &twin, &d, "after the changes", Duration::from_secs(5));
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}

/// One fault and a change made after it (web's endpoints, and a new Service `gen-N`).
fn fault_then_change(c: &Cluster, emu: &Emulator, fault: Value, generation: usize) {
    emu.fault(&fault);
    let pods: &[&str] = if generation.is_multiple_of(2) { &["pod-1", "rpod-1"] } else { &["pod-2"] };
    emu.apply(&Value::Array(web(c, pods)));
    emu.apply(&Value::Array(svc(c, &format!("gen-{generation}"), &format!("172.30.1.{generation}"), &["pod-1"])));
}

/// Where the daemons of the fault groups serve metrics, in the node's namespace.
const METRICS: &str = "127.0.0.1:10249";

/// The value of the sample `series` (name and labels, as written) in a scrape; 0 when absent.
fn sample(scrape: &str, series: &str) -> f64 {
    scrape.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

/// Runs `faults` one by one against a fresh daemon (retries back off across faults, up to a
/// minute, so each group starts anew), a change after each; the node must converge each time.
/// Returns the daemon's log and its last metrics scrape.
fn recovers(c: &Cluster, emu: &Emulator, twin: &Netns, faults: &[Value], generation: &mut usize) -> (String, String) {
    // Short watches, so a stalled stream is noticed within seconds.
    let flags = ["--watch-timeout=2s", &format!("--metrics-bind-address={METRICS}")];
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &flags, &[]);
    assert_converges(c, emu, twin, &d, "at start", Duration::from_secs(10));
    for fault in faults {
        fault_then_change(c, emu, fault.clone(), *generation);
        *generation += 1;
        assert_converges(c, emu, twin, &d, &format!("after {fault}"), Duration::from_secs(20));
        emu.fault(&json!({"stall": false}));
    }
    let scrape = crate::common::net::http_get(&c.node.name, METRICS, "/metrics").map(|r| r.2).unwrap_or_default();
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
    (log, scrape)
}

#[test]
fn every_fault_is_recovered_from_and_nothing_stale_remains() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    let twin = Netns::new("twin");
    let mut generation = 0;
    let streams =
        [json!({"drop": "clean"}), json!({"drop": "abrupt"}), json!({"drop": "reset"}), json!({"stall": true})];
    let (_, scrape) = recovers(&c, &emu, &twin, &streams, &mut generation);
    let restarts = sample(&scrape, "kube_nftproxy_watch_restarts_total{resource=\"services\"}");
    assert!(restarts >= 4.0, "every dropped or stalled stream is a watch restart: {restarts}\n{scrape}");
    let gone = [json!({"compact": true, "drop": "clean"}), json!({"expire": true})];
    let (log, scrape) = recovers(&c, &emu, &twin, &gone, &mut generation);
    assert!(log.contains("listing again"), "no relist after 410:\n{log}");
    let relists = sample(&scrape, "kube_nftproxy_relists_total{resource=\"services\"}");
    assert!(relists >= 1.0, "a 410 Gone is a relist: {relists}\n{scrape}");
    let statuses = [
        json!({"fail": {"status": 500, "count": 3}, "drop": "clean"}),
        json!({"fail": {"status": 429, "count": 2, "retry_after": 1}, "drop": "reset"}),
        json!({"fail": {"status": 503, "count": 2}, "drop": "abrupt"}),
    ];
    recovers(&c, &emu, &twin, &statuses, &mut generation);
    let bad = [json!({"malformed": "services"}), json!({"garbage": "endpointslices"})];
    let (log, _) = recovers(&c, &emu, &twin, &bad, &mut generation);
    assert!(log.contains("skipping Service"), "the malformed object was not reported:\n{log}");
    let mixed = [json!({"garbage": "services", "drop": "reset", "fail": {"status": 500, "count": 1}, "compact": true})];
    recovers(&c, &emu, &twin, &mixed, &mut generation);
    // Deleted while the daemon could not see it, with the history compacted: only a relist
    // finds out, and the Service must go.
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &["--watch-timeout=2s"], &[]);
    assert_converges(&c, &emu, &twin, &d, "at start", Duration::from_secs(10));
    emu.fault(&json!({"stall": true}));
    emu.delete(&Value::Array(svc(&c, "gen-1", "172.30.1.1", &[])));
    emu.fault(&json!({"compact": true}));
    assert_converges(&c, &emu, &twin, &d, "after a deletion lost to compaction", Duration::from_secs(20));
    assert!(!c.node.nft(&["list", "table", "ip", "kube-nftproxy"]).contains("172.30.1.1 "));
    let log = d.stop();
    assert!(log.contains("listing again"), "{log}");
}

/// A kubeconfig in `dir` for the emulator with `user` as its user entry.
fn kubeconfig(dir: &Path, emu: &Emulator, ca: &Path, user: Value) -> std::path::PathBuf {
    let kc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "emu", "cluster": {"server": emu.api, "certificate-authority": ca}}],
        "users": [{"name": "proxy", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "emu", "user": "proxy"}}]
    });
    let path = dir.join(format!("kubeconfig-{}", fastrand::u32(..)));
    std::fs::write(&path, serde_json::to_vec(&kc).unwrap()).unwrap();
    path
}

/// Runs the dry run with `kc`; returns (exit code, stderr).
fn dry_run_status(c: &Cluster, kc: &Path) -> (i32, String) {
    let out = dry_run(&c.node, kc);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn credentials_work_or_fail_with_one_clear_line() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(1, 0);
    let dir = &emu.tls_dir;
    let ca = dir.join("ca.crt");
    // Another emulator: another CA, another client key.
    let foreign = Emulator::start(None, "127.0.0.1:0", None, &[]);
    let foreign_ca = foreign.tls_dir.join("ca.crt");
    // An X.509 version 1 certificate (what `openssl x509 -req` makes without extensions):
    // rustls refuses it, and ureq would panic on it if it were not checked first.
    let (v1_cert, v1_key) = (dir.join("v1.crt"), dir.join("v1.key"));
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let csr = dir.join("v1.csr");
    let (csr_s, key_s, cert_s) = (csr.to_str().unwrap(), v1_key.to_str().unwrap(), v1_cert.to_str().unwrap());
    openssl(&["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key_s, "-subj", "/CN=v1", "-out", csr_s]);
    openssl(&["x509", "-req", "-in", csr_s, "-signkey", key_s, "-out", cert_s, "-days", "2"]);
    let cases: Vec<(&str, Value, &Path, Option<&str>)> = vec![
        (
            "client certificate",
            json!({"client-certificate": dir.join("client.crt"), "client-key": dir.join("client.key")}),
            &ca,
            None,
        ),
        ("token file", json!({"tokenFile": dir.join("token")}), &ca, None),
        ("wrong CA", json!({"tokenFile": dir.join("token")}), &foreign_ca, Some("certificate")),
        ("missing token file", json!({"tokenFile": dir.join("no-such-token")}), &ca, Some("no-such-token")),
        ("wrong token", json!({"token": "not-the-token"}), &ca, Some("Unauthorized")),
        ("no credentials", json!({}), &ca, Some("401")),
        (
            "certificate and key that do not match",
            json!({"client-certificate": dir.join("client.crt"), "client-key": foreign.tls_dir.join("client.key")}),
            &ca,
            Some("do not make a pair"),
        ),
        (
            "an X.509 v1 client certificate",
            json!({"client-certificate": v1_cert, "client-key": v1_key}),
            &ca,
            Some("client-certificate is not usable"),
        ),
        (
            "an unreadable client key",
            json!({"client-certificate": dir.join("client.crt"), "client-key": dir.join("nope.key")}),
            &ca,
            Some("nope.key"),
        ),
    ];
    for (what, user, ca, error) in cases {
        let kc = kubeconfig(dir, &emu, ca, user);
        let (code, stderr) = dry_run_status(&c, &kc);
        match error {
            None => assert_eq!(code, 0, "{what}: {stderr}"),
            Some(needle) => {
                assert_eq!(code, 1, "{what}: exit status {code}: {stderr}");
                let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
                assert_eq!(lines.len(), 1, "{what}: one line expected: {stderr}");
                assert!(stderr.contains(needle), "{what}: {needle:?} not in {stderr}");
            }
        }
    }
    drop(foreign);
}

#[test]
fn a_token_rotated_on_disk_is_picked_up() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 0);
    let kc = emu.tls_dir.join("kubeconfig-token");
    let d = Daemon::start_api(&c.node, &kc, &[], &[]);
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());
    // The token rotates: the server accepts only the new one, the file holds it, and the
    // open watches end; the daemon's next requests must use the new token.
    std::fs::write(emu.tls_dir.join("token"), "rotated-token-0123456789\n").unwrap();
    emu.fault(&json!({"drop": "reset"}));
    emu.apply(&Value::Array(web(&c, &["pod-2"])));
    let moved = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-2");
    assert!(moved.is_some(), "the rotated token was not picked up:\n{}", d.logged());
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}

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

#[test]
fn one_starting_event_on_the_node_after_the_first_sync_and_a_refusal_is_one_warning() {
    if !kernel_available() {
        return;
    }
    // `running` returns once the daemon serves web: its first sync went through.
    let (c, emu, d) = running(&[]);
    let events = || emu.list("/apis/events.k8s.io/v1/events")["items"].as_array().cloned().unwrap_or_default();
    assert!(wait_for(Duration::from_secs(5), || !events().is_empty()).is_some(), "no Event:\n{}", d.logged());
    std::thread::sleep(Duration::from_secs(1));
    let recorded = events();
    assert_eq!(recorded.len(), 1, "exactly one Event: {recorded:?}");
    let e = &recorded[0];
    let field = |path: &str| path.split('.').fold(e, |v, part| &v[part]).as_str().unwrap_or_default().to_string();
    let want = [
        ("metadata.namespace", "default"),
        ("reason", "Starting"),
        ("action", "StartKubeProxy"),
        ("type", "Normal"),
        ("regarding.kind", "Node"),
        ("regarding.name", "node-a"),
        ("reportingController", "kube-nftproxy"),
    ];
    for (path, value) in want {
        assert_eq!(field(path), value, "{path} of {e}");
    }
    assert!(field("metadata.name").starts_with("node-a."), "{e}");
    let log = d.stop();
    assert!(log.contains("recorded the Starting event"), "{log}");
    // A server whose RBAC lacks the grant refuses it: one warning, no retry, and the proxy runs on.
    emu.fault(&json!({"fail": {"status": 403, "count": 2, "resource": "events", "verb": "create"}}));
    let mut d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    let warned = |log: &str| log.lines().filter(|l| l.contains("WARN") && l.contains("Starting event")).count();
    assert!(wait_for(Duration::from_secs(10), || warned(&d.logged()) > 0).is_some(), "{}", d.logged());
    emu.apply(&Value::Array(web(&c, &["pod-2"])));
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-2").is_some());
    assert!(d.running(), "the refusal ended the daemon:\n{}", d.logged());
    assert_eq!(emu.stats()["requests"]["create"]["events"], 2, "the 403 was retried");
    assert_eq!(events().len(), 1, "no Event stored past the refusal");
    let log = d.stop();
    assert_eq!(warned(&log), 1, "{log}");
    assert!(log.contains("403"), "{log}");
}

#[test]
fn every_api_request_shows_in_client_gos_rest_client_metrics() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    // The first watch of Services is answered 410: counted with that code, then a relist.
    emu.fault(&json!({"fail": {"status": 410, "verb": "watch", "resource": "services", "count": 1}}));
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[&format!("--metrics-bind-address={METRICS}")], &[]);
    let scrape = || crate::common::net::http_get(&c.node.name, METRICS, "/metrics").map(|r| r.2).unwrap_or_default();
    let requests = |code: &str, method: &str| {
        format!("rest_client_requests_total{{code=\"{code}\",host=\"{API_ADDR}\",method=\"{method}\"}}")
    };
    let settled = || {
        let stats = emu.stats();
        stats["requests"]["watch"]["services"].as_u64() >= Some(2) && stats["requests"]["create"]["events"] == 1
    };
    assert!(wait_for(Duration::from_secs(15), settled).is_some(), "{}\n{}", emu.stats(), d.logged());
    std::thread::sleep(Duration::from_millis(500));
    let (text, stats) = (scrape(), emu.stats());
    let sum =
        |verb: &str| stats["requests"][verb].as_object().map_or(0.0, |m| m.values().filter_map(Value::as_f64).sum());
    let (lists, watches) = (sum("list"), sum("watch"));
    assert_eq!(sample(&text, &requests("410", "GET")), 1.0, "{text}");
    assert_eq!(sample(&text, &requests("200", "GET")), lists + watches - 1.0, "{stats}\n{text}");
    assert_eq!(sample(&text, &requests("201", "POST")), 1.0, "the Event: {text}");
    // Lists and the Event are timed and take a token; watches neither, as client-go's.
    for (name, verb, want) in [
        ("rest_client_request_duration_seconds_count", "GET", lists),
        ("rest_client_request_duration_seconds_count", "POST", 1.0),
        ("rest_client_rate_limiter_duration_seconds_count", "GET", lists),
        ("rest_client_rate_limiter_duration_seconds_count", "POST", 1.0),
    ] {
        let s = format!("{name}{{host=\"{API_ADDR}\",verb=\"{verb}\"}}");
        assert_eq!(sample(&text, &s), want, "{s} in:\n{text}");
    }
    let buckets = text.lines().filter(|l| l.starts_with("rest_client_request_duration_seconds_bucket{")).count();
    assert_eq!(buckets, 2 * 13, "client-go's 12 buckets and +Inf, for GET and POST:\n{text}");
    d.stop();
}

/// Real distributions' kube-proxy invocations, each with exactly its arguments
/// (`tests/distros/`): it starts, syncs, answers `/healthz` and says what it serves
/// differently or ignores.
mod distributions {
    use super::kernel_available;
    use crate::common::distros;

    /// Runs invocation `name`; asserts it serves, with `/healthz` at `healthz`, and logged each of `logged`.
    fn check(name: &str, healthz: &str, logged: &[&str]) {
        if !kernel_available() {
            return;
        }
        let run = distros::start(name);
        run.assert_serves(healthz, logged);
        run.daemon.stop();
    }

    #[test]
    fn kubeadm() {
        check("kubeadm", "127.0.0.1:10256", &[]);
    }

    #[test]
    fn kubeadm_in_ipvs_mode() {
        check(
            "kubeadm-ipvs",
            "127.0.0.1:10256",
            &[
                "proxy mode \"ipvs\": kube-nftproxy serves",
                "IPVS scheduler \"rr\": served as rr with nftables",
                "ipvs.strictARP",
            ],
        );
    }

    #[test]
    fn gke() {
        // Its IPVS periods, for the mode it does not run in, do nothing (as upstream).
        let ignored = "flags taken with no effect in kube-nftproxy: --ipvs-sync-period, --ipvs-min-sync-period";
        check("gke", "127.0.0.1:10256", &[ignored, "proxy mode unset: served with nftables"]);
    }

    #[test]
    fn eks() {
        let removed = ["unknown field \"udpIdleTimeout\"", "unknown field \"resourceContainer\""];
        check(
            "eks",
            "127.0.0.1:10256",
            &[&removed[..], &["proxy mode \"iptables\"", "no effect in kube-nftproxy: configSyncPeriod"]].concat(),
        );
    }

    #[test]
    fn k3s() {
        check("k3s", "127.0.0.1:10256", &["proxy mode \"iptables\": kube-nftproxy serves"]);
    }

    #[test]
    fn rke2() {
        check("rke2", "127.0.0.1:10256", &["proxy mode \"iptables\": kube-nftproxy serves"]);
    }

    #[test]
    fn kops() {
        check("kops", "127.0.0.1:10256", &[]);
    }
}
