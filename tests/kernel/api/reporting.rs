//! What the daemon tells about its talk with the API server: its starting event on the Node,
//! and client-go's rest client metrics for every request.

use super::*;

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
    // The first watch of Services is answered 410: counted with that code, then a relist. By
    // lists (the WatchList gate off), which are timed and take tokens; WatchLists, which are
    // neither, are in first_state.rs.
    emu.fault(&json!({"fail": {"status": 410, "verb": "watch", "resource": "services", "count": 1}}));
    let flags = [&format!("--metrics-bind-address={METRICS}"), "--feature-gates=WatchListClient=false"];
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &flags, &[]);
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
