//! Every fault the emulator can make, recovered from: the kernel ends equal to a fresh dry run
//! of the emulator's final state, nothing stale left.

use super::*;

/// One fault and a change made after it (web's endpoints, and a new Service `gen-N`).
fn fault_then_change(c: &Cluster, emu: &Emulator, fault: Value, generation: usize) {
    emu.fault(&fault);
    let pods: &[&str] = if generation.is_multiple_of(2) { &["pod-1", "rpod-1"] } else { &["pod-2"] };
    emu.apply(&Value::Array(web(c, pods)));
    emu.apply(&Value::Array(svc(c, &format!("gen-{generation}"), &format!("172.30.1.{generation}"), &["pod-1"])));
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
