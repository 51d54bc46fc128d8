//! Answers that are not what was asked for, and faults in a burst: a Status answered with 200
//! to a relist (its WatchList and its list), or a watch event whose object is another kind, changes nothing in the kernel
//! (in JSON and in protobuf), and the node follows again as soon as the server does; seven
//! recovered faults in 40 s leave the node following within seconds, not blind for a minute.

use super::*;

/// A daemon following `emu` with `flags`, serving `web` from the start.
fn following(c: &Cluster, emu: &Emulator, twin: &Netns, flags: &[&str]) -> Daemon {
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), flags, &[]);
    assert_converges(c, emu, twin, &d, "at start", Duration::from_secs(10));
    d
}

/// The node's table, to compare before and after an answer that must change nothing.
fn table(c: &Cluster) -> String {
    c.node.nft(&["list", "table", "ip", "kube-nftproxy"])
}

#[test]
fn a_status_in_place_of_a_list_or_an_object_changes_nothing() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    let twin = Netns::new("twin");
    for content_type in
        ["--kube-api-content-type=application/json", "--kube-api-content-type=application/vnd.kubernetes.protobuf"]
    {
        // Short watches, so that a fault meets a watch soon after it is opened too.
        let d = following(&c, &emu, &twin, &["--watch-timeout=2s", content_type]);
        let before = table(&c);
        // A 410 makes the daemon list again, and the next two requests for Services (the
        // WatchList, then the list it falls back to, as client-go's does on an answer that is
        // not a stream of events) are answered 200 with a Status.
        let status = json!({"status": 500, "in_200": true, "resource": "services", "count": 2});
        emu.fault(&json!({"fail": status, "resource": "services", "expire": true}));
        let refused = wait_for(Duration::from_secs(15), || d.logged().contains("a Status, not a list"));
        assert!(refused.is_some(), "{content_type}: the Status was not reported:\n{}", d.logged());
        assert_eq!(table(&c), before, "{content_type}: a Status read as a list changed the kernel");
        assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
        // Once the server answers lists again, changes are followed.
        emu.apply(&Value::Array(svc(&c, "after", "172.30.1.9", &["pod-2"])));
        assert_converges(&c, &emu, &twin, &d, content_type, Duration::from_secs(25));
        // A DELETED event whose object is a Status naming web deletes nothing.
        let before = table(&c);
        emu.fault(&json!({"foreign": {"resource": "services", "namespace": "test", "name": "web"}}));
        let noticed = wait_for(Duration::from_secs(10), || d.logged().contains("whose object is a \"Status\""));
        assert!(noticed.is_some(), "{content_type}: the foreign event was not reported:\n{}", d.logged());
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(table(&c), before, "{content_type}: a Status in a DELETED event changed the kernel");
        emu.delete(&Value::Array(svc(&c, "after", "172.30.1.9", &[])));
        assert_converges(&c, &emu, &twin, &d, content_type, Duration::from_secs(15));
        let log = d.stop();
        assert!(!log.contains("listed 0 services"), "{content_type}:\n{log}");
    }
}

#[test]
fn seven_recovered_faults_in_forty_seconds_leave_the_node_following_within_seconds() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    let twin = Netns::new("twin");
    // Watches as long as a real node's (5 to 10 minutes): each fault meets one open.
    let d = following(&c, &emu, &twin, &["--kube-api-content-type=application/json"]);
    // What an API server's rolling restart looks like from a node, each recovered from.
    let on = |fault: Value| {
        let mut fault = fault;
        fault["resource"] = json!("services");
        fault
    };
    let burst = [
        on(json!({"expire": true})),
        on(json!({"drop": "reset"})),
        on(json!({"drop": "clean"})),
        on(json!({"fail": {"status": 500, "count": 3, "resource": "services"}, "drop": "clean"})),
        on(json!({"fail": {"status": 429, "count": 1, "retry_after": 1, "resource": "services"}, "drop": "reset"})),
        json!({"malformed": "services"}),
        json!({"garbage": "services"}),
    ];
    for (i, fault) in burst.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(5700));
        }
        emu.fault(fault);
    }
    let last = Instant::now();
    emu.apply(&Value::Array(svc(&c, "late", "172.30.1.7", &["pod-2"])));
    assert_converges(&c, &emu, &twin, &d, "after the burst", Duration::from_secs(15));
    let took = last.elapsed();
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!("converged {took:?} after the last of seven faults");
}
