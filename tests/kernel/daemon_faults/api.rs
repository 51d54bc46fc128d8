//! A misbehaving API server followed by the daemon: watches refused (WatchLists too),
//! redirects, endless lines, trickling lists and WatchLists, a dead connection; never a loop,
//! memory bounded, `/livez` told.

use super::*;

// A misbehaving API server: the emulator on the remote node, the daemon following it.

/// Where the emulator listens: the remote node's address, as a control plane off the node.
const API_ADDR: &str = "192.168.1.2:6443";

/// A cluster with two local pods and its emulator (on the remote node, with `flags`) holding
/// this Node and `web` on pod-1.
fn api_cluster(flags: &[&str]) -> (Cluster, Emulator) {
    let c = Cluster::new(2, 0);
    let emu = Emulator::start(Some(&c.remote.name), API_ADDR, None, flags);
    emu.apply(&Value::Array([vec![Cluster::node_object()], web(&c, &["pod-1"])].concat()));
    (c, emu)
}

/// Waits up to `limit` for `web` to be served by `pod`.
fn serves(c: &Cluster, pod: &str, limit: Duration) -> Option<Duration> {
    wait_for(limit, || who(&c.client, "172.30.0.40:80") == pod)
}

/// Lists the emulator answered so far, over every resource.
fn lists(emu: &Emulator) -> u64 {
    let stats = emu.stats();
    stats["requests"]["list"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

#[test]
fn a_server_refusing_every_watch_is_listed_a_few_times_not_in_a_loop() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = api_cluster(&[]);
    let refusals = [
        json!({"status": 410, "verb": "watch", "count": 1_000_000}),
        json!({"status": 504, "verb": "watch", "count": 1_000_000}),
        json!({"status": 410, "as_event": true, "verb": "watch", "count": 1_000_000}),
    ];
    // By lists (the WatchList gate off); a server refusing every WatchList is below.
    for refusal in refusals {
        emu.fault(&json!({"fail": refusal}));
        let before = lists(&emu);
        let started = std::time::Instant::now();
        let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &["--feature-gates=WatchListClient=false"], &[]);
        assert!(serves(&c, "pod-1", Duration::from_secs(8)).is_some(), "{refusal}: never served:\n{}", d.logged());
        std::thread::sleep(Duration::from_secs(10).saturating_sub(started.elapsed()));
        let log = d.stop();
        let listed = lists(&emu) - before;
        // Four resources, each relisting after 0.8 s, 1.6 s, 3.2 s … (jittered up to twice
        // that): at most four lists each in ten seconds. Without the backoff, thousands.
        assert!((8..=16).contains(&listed), "{refusal}: {listed} lists in about ten seconds:\n{log}");
        emu.fault(&json!({"clear": true}));
    }
    // Every WatchList answered 410 (too old, which no real server says of the latest state):
    // each asks again for the latest state after the same backoff, never in a loop.
    let streamed = |emu: &Emulator| {
        let stats = emu.stats();
        stats["requests"]["watchlist"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
    };
    emu.fault(&json!({"fail": {"status": 410, "verb": "watchlist", "count": 1_000_000}}));
    let (before, listed) = (streamed(&emu), lists(&emu));
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    std::thread::sleep(Duration::from_secs(10));
    let log = d.stop();
    let asked = streamed(&emu) - before;
    assert!((8..=16).contains(&asked), "{asked} WatchLists in about ten seconds:\n{log}");
    assert_eq!(lists(&emu), listed, "a 410 asks for the WatchList again, not a list:\n{log}");
    emu.fault(&json!({"clear": true}));
}

#[test]
fn a_redirect_is_an_error_and_what_it_points_at_is_never_applied() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = api_cluster(&[]);
    // Another server, plain HTTP on another port, holding other endpoints for web.
    let other = Emulator::start(Some(&c.remote.name), "192.168.1.2:8080", None, &["--plain"]);
    other.apply(&Value::Array([vec![Cluster::node_object()], web(&c, &["pod-2"])].concat()));
    emu.fault(&json!({"fail": {"status": 307, "count": 1_000_000, "location": other.api}}));
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    let applied = serves(&c, "pod-2", Duration::from_secs(5));
    assert!(applied.is_none(), "the redirect target's objects were applied:\n{}", d.logged());
    assert_eq!(lists(&other), 0, "the redirect was followed");
    assert!(d.logged().contains("HTTP 307"), "{}", d.logged());
    emu.fault(&json!({"clear": true}));
    assert!(serves(&c, "pod-1", Duration::from_secs(40)).is_some(), "no recovery:\n{}", d.logged());
    assert!(d.logged().contains("redirect, which is not followed"), "{}", d.logged());
    d.stop();
}

/// A line of the daemon's `/proc/PID/status` in KiB (0 once it is gone).
fn status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find_map(|l| l.strip_prefix(field)).unwrap_or("0");
    line.trim().trim_end_matches("kB").trim().parse().unwrap_or(0)
}

/// The daemon's resident memory at its highest while `during` runs, in KiB. Sampled every
/// few milliseconds besides `VmHWM`: the kernel does not raise `VmHWM` for memory the
/// allocator hands back with `madvise`, as jemalloc does within a second.
fn peak_rss_kib_during(d: &Daemon, during: impl FnOnce()) -> u64 {
    let (pid, stop) = (d.pid(), std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let flag = stop.clone();
    let sampler = std::thread::spawn(move || {
        let mut most = 0;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            most = most.max(status_kib(pid, "VmRSS:"));
            std::thread::sleep(Duration::from_millis(2));
        }
        most
    });
    during();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap().max(status_kib(pid, "VmHWM:"))
}

#[test]
fn a_watch_line_that_never_ends_is_a_broken_stream_and_memory_stays_bounded() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = api_cluster(&["--bookmark-interval", "1s"]);
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    assert!(serves(&c, "pod-1", Duration::from_secs(10)).is_some(), "{}", d.logged());
    let before = status_kib(d.pid(), "VmHWM:");
    let peak = peak_rss_kib_during(&d, || {
        // 256 MiB without a newline on the services watch, then the connection is cut.
        emu.fault(&json!({"endless": "services"}));
        // A protobuf stream (the default) announces the frame; a JSON one never ends its line.
        let broken = d.logs_within("longer than 16 MiB, taken as a broken stream", Duration::from_secs(30));
        assert!(broken, "{}", d.logged());
        emu.apply(&Value::Array(web(&c, &["pod-2"])));
        assert!(serves(&c, "pod-2", Duration::from_secs(20)).is_some(), "no recovery:\n{}", d.logged());
    });
    let grown = peak.saturating_sub(before) / 1024;
    assert!(grown < 40, "the daemon grew by {grown} MiB reading one line");
    d.stop();
}

#[test]
fn a_list_trickling_in_is_logged_and_given_up_after_a_minute() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = api_cluster(&[]);
    emu.fault(&json!({"fail": {"status": 200, "byte_every_ms": 1000, "resource": "services", "verb": "list"}}));
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &["--feature-gates=WatchListClient=false"], &[]);
    let slow = "listing services: a page is taking longer than 10s";
    assert!(d.logs_within(slow, Duration::from_secs(15)), "a slow list went unlogged:\n{}", d.logged());
    assert!(serves(&c, "pod-1", Duration::from_secs(70)).is_some(), "the slow list was not retried:\n{}", d.logged());
    assert!(d.logged().contains("a page took longer than 60s"), "{}", d.logged());
    d.stop();
}

#[test]
fn a_watch_list_trickling_in_is_listed_instead_after_a_minute() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = api_cluster(&[]);
    // One byte a second: the first event alone would take minutes. As a server that ignores
    // sendInitialEvents (and never sends the bookmark), it is listed after the bound.
    emu.fault(&json!({"fail": {"status": 200, "byte_every_ms": 1000, "resource": "services", "verb": "watchlist"}}));
    let started = std::time::Instant::now();
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    assert!(serves(&c, "pod-1", Duration::from_secs(80)).is_some(), "never listed instead:\n{}", d.logged());
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(60), "listed after {took:?}, before the bound");
    let log = d.logged();
    assert!(log.contains("no end of the initial events within 60s") && log.contains("listing instead"), "{log}");
    let stats = emu.stats();
    assert_eq!(stats["requests"]["list"]["services"], 1, "{stats}");
    assert_eq!(stats["requests"]["list"]["endpointslices"].as_u64(), None, "the others streamed: {stats}");
    d.stop();
}

/// The node's local ports of its connections to the API server.
fn api_ports(c: &Cluster) -> Vec<String> {
    let out = c.node.run(&["ss", "-Htn", "state", "established", "( dport = :6443 )"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().filter_map(|w| w.strip_prefix("192.168.1.1:")).map(str::to_string).collect()
}

/// `/livez`'s status on the node.
fn livez(c: &Cluster) -> u16 {
    crate::common::net::http_get(&c.node.name, "127.0.0.1:10256", "/livez").map_or(0, |r| r.0)
}

#[test]
fn a_dead_api_server_connection_is_noticed_within_a_minute_and_shows_in_livez() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = api_cluster(&[]);
    // A sync period of 5 s: the health timeout is 10 s.
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &["--sync-period=5s"], &[]);
    assert!(serves(&c, "pod-1", Duration::from_secs(10)).is_some(), "{}", d.logged());
    std::thread::sleep(Duration::from_secs(2));
    // The connections open now die without a reset (a middlebox lost them): their packets
    // are dropped from here on, while new connections get through.
    let ports = api_ports(&c).join(", ");
    assert!(!ports.is_empty(), "no connection to the API server");
    let cut = format!(
        "table inet cut {{\n chain out {{ type filter hook output priority -400; tcp sport {{ {ports} }} drop; }}
         chain in {{ type filter hook input priority -400; tcp dport {{ {ports} }} drop; }}\n}}"
    );
    c.node.nft_apply(&cut).unwrap();
    emu.apply(&Value::Array(web(&c, &["pod-2"])));
    let took = serves(&c, "pod-2", Duration::from_secs(60));
    assert!(took.is_some(), "a change on the server did not arrive within a minute of the cut:\n{}", d.logged());
    // Now nothing gets through: once the feed has been lost for longer than the health
    // timeout, /livez says so; it recovers, with the change made meanwhile, once the cut ends.
    c.node.nft_apply("flush table inet cut; add rule inet cut out ip daddr 192.168.1.2 drop; add rule inet cut in ip saddr 192.168.1.2 drop").unwrap();
    emu.apply(&Value::Array(web(&c, &["pod-1"])));
    let unhealthy = wait_for(Duration::from_secs(60), || livez(&c) == 503);
    assert!(unhealthy.is_some(), "/livez stayed {} with the API server unreachable:\n{}", livez(&c), d.logged());
    c.node.nft_apply("delete table inet cut").unwrap();
    assert!(serves(&c, "pod-1", Duration::from_secs(70)).is_some(), "no recovery:\n{}", d.logged());
    assert!(wait_for(Duration::from_secs(10), || livez(&c) == 200).is_some(), "/livez stayed unhealthy");
    d.stop();
}
