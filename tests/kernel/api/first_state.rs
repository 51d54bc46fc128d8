//! How the daemon gets its first state, through a real kernel: by WatchList in protobuf and in
//! JSON (no list; no token of the rate limit, nor timed); from a server refusing WatchList by
//! a list, asking for a WatchList again at its next listing; a WatchList cut before its
//! bookmark removes nothing from the node; and a 429's `Retry-After` waited out before the
//! next request, on a list, on a WatchList and on the Starting Event.

use super::*;

/// The resources the daemon follows.
const RESOURCES: [&str; 4] = ["services", "endpointslices", "nodes", "servicecidrs"];

/// The emulator's counter of `verb` requests of `resource`.
fn count(emu: &Emulator, verb: &str, resource: &str) -> u64 {
    emu.stats()["requests"][verb][resource].as_u64().unwrap_or(0)
}

/// Whether the node's IPv4 table holds ClusterIP `ip` (not before the table is there).
fn in_kernel(c: &Cluster, ip: &str) -> bool {
    let out = c.node.run(&["nft", "list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0"], "");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&format!("{ip} . 80"))
}

#[test]
fn the_first_state_comes_by_watch_list_in_protobuf_and_json_and_no_list() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    let twin = Netns::new("twin");
    let formats = [("application/vnd.kubernetes.protobuf", "172.30.0.41"), ("application/json", "172.30.0.42")];
    for (i, (media, ip)) in formats.into_iter().enumerate() {
        let (content, metrics) =
            (format!("--kube-api-content-type={media}"), format!("--metrics-bind-address={METRICS}"));
        let flags = [content.as_str(), metrics.as_str()];
        // The dry runs of the previous round listed: this daemon's requests are counted from here.
        let before: Vec<(u64, u64)> =
            RESOURCES.iter().map(|r| (count(&emu, "watchlist", r), count(&emu, "list", r))).collect();
        let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &flags, &[]);
        let served = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
        assert!(served.is_some(), "{media}: never served:\n{}", d.logged());
        // The stream goes on as the watch: a new Service arrives on it.
        emu.apply(&Value::Array(svc(&c, &format!("new-{i}"), ip, &["pod-2"])));
        let followed = wait_for(Duration::from_secs(5), || who(&c.client, &format!("{ip}:80")) == "pod-2");
        assert!(followed.is_some(), "{media}: the change did not follow:\n{}", d.logged());
        for (resource, (streamed, listed)) in RESOURCES.iter().zip(before) {
            let (now_streamed, now_listed) = (count(&emu, "watchlist", resource), count(&emu, "list", resource));
            assert_eq!(now_streamed, streamed + 1, "{media}: {resource}: {}", emu.stats());
            assert_eq!(now_listed, listed, "{media}: {resource} listed: {}", emu.stats());
        }
        assert!(d.logged().contains(" services in ") && d.logged().contains(", by WatchList)"), "{}", d.logged());
        // Watches take no token and are not timed, as client-go's: four opened, none throttled.
        let scrape = crate::common::net::http_get(&c.node.name, METRICS, "/metrics").map(|r| r.2).unwrap_or_default();
        let series = format!("rest_client_requests_total{{code=\"200\",host=\"{API_ADDR}\",method=\"GET\"}}");
        assert_eq!(sample(&scrape, &series), 4.0, "{media}: {scrape}");
        let limited = format!("rest_client_rate_limiter_duration_seconds_count{{host=\"{API_ADDR}\",verb=\"GET\"}}");
        assert_eq!(sample(&scrape, &limited), 0.0, "{media}: {scrape}");
        assert_converges(&c, &emu, &twin, &d, media, Duration::from_secs(5));
        d.stop();
    }
    let media = emu.stats()["media"].clone();
    assert!(media["application/vnd.kubernetes.protobuf"].as_u64() >= Some(4), "{media}");
}

#[test]
fn a_server_refusing_watch_list_is_listed_and_asked_for_a_watch_list_again_at_the_next_listing() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let emu = Emulator::start(Some(&c.remote.name), API_ADDR, None, &["--bookmark-interval", "1s", "--no-watch-list"]);
    emu.apply(&Value::Array([vec![Cluster::node_object()], web(&c, &["pod-1"])].concat()));
    let twin = Netns::new("twin");
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[&format!("--metrics-bind-address={METRICS}")], &[]);
    let served = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(served.is_some(), "never served:\n{}", d.logged());
    for resource in RESOURCES {
        assert_eq!(count(&emu, "watchlist", resource), 1, "{resource}: {}", emu.stats());
        assert_eq!(count(&emu, "list", resource), 1, "{resource}: {}", emu.stats());
    }
    let relists = || {
        let scrape = crate::common::net::http_get(&c.node.name, METRICS, "/metrics").map(|r| r.2).unwrap_or_default();
        sample(&scrape, "kube_nftproxy_relists_total{resource=\"services\"}")
    };
    assert_eq!(relists(), 0.0, "a first listing is no relist, whichever way it went");
    assert_eq!(emu.stats()["status"]["422"], 4, "{}", emu.stats());
    assert!(d.logged().contains("the server does not stream the listing"), "{}", d.logged());
    emu.apply(&Value::Array(svc(&c, "api", "172.30.0.41", &["pod-2"])));
    let followed = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.41:80") == "pod-2");
    assert!(followed.is_some(), "the watch after the list did not follow:\n{}", d.logged());
    // A relist while it still refuses: the WatchList asked for again, then a list; one relist.
    emu.fault(&json!({"resource": "services", "expire": true}));
    let relisted = wait_for(Duration::from_secs(10), || count(&emu, "list", "services") == 2);
    assert!(relisted.is_some(), "no relist: {}\n{}", emu.stats(), d.logged());
    assert_eq!(count(&emu, "watchlist", "services"), 2, "asked for again: {}", emu.stats());
    assert!(wait_for(Duration::from_secs(2), || relists() == 1.0).is_some(), "{} relists", relists());
    // The server turns WatchList on. The Service `api` (not its slice, whose deletion would
    // show) is deleted where the watch cannot see it; the listing its expiry calls for is a
    // WatchList again, and removes it.
    emu.fault(&json!({"watch_list": true}));
    emu.fault(&json!({"resource": "services", "stall": true}));
    emu.delete(&svc(&c, "api", "172.30.0.41", &[])[0]);
    emu.fault(&json!({"resource": "services", "expire": true}));
    let gone = wait_for(Duration::from_secs(10), || !in_kernel(&c, "172.30.0.41"));
    assert!(gone.is_some(), "the Service deleted meanwhile stayed:\n{}", d.logged());
    assert_eq!(count(&emu, "watchlist", "services"), 3, "{}", emu.stats());
    assert_eq!(count(&emu, "list", "services"), 2, "{}", emu.stats());
    assert_eq!(relists(), 2.0, "one relist each");
    assert_converges(&c, &emu, &twin, &d, "after the WatchList", Duration::from_secs(5));
    d.stop();
}

#[test]
fn a_watch_list_cut_before_its_bookmark_removes_nothing_from_the_node() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    let ips: Vec<String> = (1..=5).map(|i| format!("172.30.1.{i}")).collect();
    for (i, ip) in ips.iter().enumerate() {
        emu.apply(&Value::Array(svc(&c, &format!("gen-{i}"), ip, &["pod-1"])));
    }
    let twin = Netns::new("twin");
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    let all = || ips.iter().all(|ip| in_kernel(&c, ip)) && in_kernel(&c, "172.30.0.40");
    assert!(wait_for(Duration::from_secs(10), all).is_some(), "never served:\n{}", d.logged());
    // The Service gen-0 (not its slice) goes where the watch cannot see it; the WatchList its
    // expiry calls for is cut after one of the six Services, twice. Until one reaches
    // its bookmark, every Service stays in the kernel: the five not sent again, and gen-0,
    // whose deletion only a whole listing shows.
    emu.fault(&json!({"resource": "services", "stall": true}));
    emu.delete(&svc(&c, "gen-0", &ips[0], &[])[0]);
    emu.fault(&json!({"cut_watch_list": {"resource": "services", "after": 1, "count": 2}}));
    emu.fault(&json!({"resource": "services", "expire": true}));
    let started = Instant::now();
    // The first, the two cut, and the whole one.
    while count(&emu, "watchlist", "services") < 4 {
        assert!(started.elapsed() < Duration::from_secs(20), "no whole WatchList: {}\n{}", emu.stats(), d.logged());
        // The whole WatchList may start and be synced while the kernel is being looked at:
        // gen-0 gone then is its work, not a cut one's.
        let whole_came = || count(&emu, "watchlist", "services") >= 4;
        assert!(all() || whole_came(), "a cut WatchList removed a Service:\n{}", d.logged());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ips[1..].iter().all(|ip| in_kernel(&c, ip)), "a Service sent again went:\n{}", d.logged());
    let gone = wait_for(Duration::from_secs(5), || !in_kernel(&c, &ips[0]));
    assert!(gone.is_some(), "the whole WatchList did not remove gen-0:\n{}", d.logged());
    assert!(ips[1..].iter().all(|ip| in_kernel(&c, ip)), "{}", d.logged());
    assert_eq!(who(&c.client, "172.30.1.2:80"), "pod-1");
    assert_eq!(count(&emu, "list", "services"), 0, "{}", emu.stats());
    assert_converges(&c, &emu, &twin, &d, "after the cuts", Duration::from_secs(5));
    d.stop();
}

#[test]
fn a_429_retry_after_is_waited_out_before_the_next_request_on_a_list_a_watch_list_and_the_event() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 1);
    let cases = [
        ("list", 4, "--feature-gates=WatchListClient=false"),
        ("watchlist", 3, "--feature-gates=WatchListClient=true"),
    ];
    for (verb, secs, gate) in cases {
        // 1.37's ConsistentListFromCacheSkipTimeoutFallback answers 429 where it read etcd.
        emu.fault(&json!({"fail": {"status": 429, "retry_after": secs, "verb": verb, "resource": "services"}}));
        let from = emu.requests("services").len();
        let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[gate], &[]);
        // Asked twice: refused, then again once the wait is out (the previous round's rules
        // still serve meanwhile, so serving says nothing of this daemon).
        let asked = wait_for(Duration::from_secs(secs + 10), || emu.requests("services").len() >= from + 2);
        assert!(asked.is_some(), "{verb}: not asked again: {:?}\n{}", emu.requests("services"), d.logged());
        let listed = d.logs_within(" services in ", Duration::from_secs(5));
        let served = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
        assert!(listed && served.is_some(), "{verb}: never listed:\n{}", d.logged());
        let seen = emu.requests("services");
        let seen = &seen[from..];
        assert!(seen.len() >= 2 && seen[..2].iter().all(|r| r.1 == verb), "{verb}: {seen:?}");
        let waited = seen[1].0 - seen[0].0;
        assert!(waited >= secs * 1000, "{verb}: asked again {waited} ms after a Retry-After of {secs} s: {seen:?}");
        assert!(waited < secs * 1000 + 1500, "{verb}: {waited} ms: the wait is the server's, not the backoff's");
        let log = d.stop();
        assert!(log.contains(&format!("retrying in {secs}.0s")), "{verb}:\n{log}");
    }
    // The Starting Event, retried once after 3 s, waits longer when the server says so.
    emu.fault(&json!({"fail": {"status": 429, "retry_after": 5, "verb": "create", "resource": "events"}}));
    let from = emu.requests("events").len();
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    let posted = wait_for(Duration::from_secs(20), || emu.requests("events").len() >= from + 2);
    assert!(posted.is_some(), "the Event was not posted again: {:?}\n{}", emu.requests("events"), d.logged());
    let seen = emu.requests("events");
    let waited = seen[from + 1].0 - seen[from].0;
    assert!((5000..6500).contains(&waited), "the Event was posted again {waited} ms after a Retry-After of 5 s");
    assert!(d.logs_within("recorded the Starting event", Duration::from_secs(5)), "{}", d.logged());
    d.stop();
}
