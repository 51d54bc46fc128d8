//! Health-check node ports and metrics as a cloud load balancer and Prometheus see them: the
//! daemon runs in a node namespace; the checker asks from outside the node over real HTTP.

use crate::common::checker::{self, NODE_IP, check_at, expect};
use crate::common::cluster::{Cluster, endpoint};
use crate::common::daemon::{Daemon, systemd_nofile, wait_for, write_manifests};
use crate::common::kernel_available;
use crate::common::net::http_get;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the test asks for metrics, inside the node.
const METRICS: &str = "127.0.0.1:10249";

/// Service `name` with health-check port `32000 + n`.
fn local_lb(c: &Cluster, name: &str, n: u8, pods: &[&str]) -> Vec<Value> {
    checker::local_lb(c, name, n, 32000 + u16::from(n), pods)
}

/// What the checker sees on `port` of the node: status, weight header, body.
fn check(c: &Cluster, port: u16) -> Option<(u16, String, String)> {
    check_at(c, &format!("{NODE_IP}:{port}"))
}

#[test]
fn health_check_node_ports_follow_local_endpoints_and_services() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let mut objects = local_lb(&c, "web", 10, &["pod-1", "pod-2", "rpod-1"]);
    objects.extend(local_lb(&c, "api", 11, &["rpod-1"]));
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address="], &[]);
    expect(&c, &d, 32010, Some((200, "2")), "two ready endpoints here");
    let (_, _, body) = check(&c, 32010).unwrap();
    assert_eq!(
        body,
        "{\n\t\"service\": {\n\t\t\"namespace\": \"test\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
    );
    expect(&c, &d, 32011, Some((503, "0")), "no endpoint here");

    // A pod on this node becomes not ready, and one of api's is scheduled here.
    let mut web = local_lb(&c, "web", 10, &["pod-2", "rpod-1"]);
    web[1]["endpoints"].as_array_mut().unwrap().push(endpoint(
        c.pod_named("pod-1"),
        false,
        json!({"conditions": {"ready": false, "serving": true, "terminating": true}}),
    ));
    let mut objects = web;
    objects.extend(local_lb(&c, "api", 11, &["pod-1", "rpod-1"]));
    write_manifests(&c, objects);
    expect(&c, &d, 32010, Some((200, "1")), "a terminating endpoint does not count");
    expect(&c, &d, 32011, Some((200, "1")), "api now has an endpoint here");

    // web goes: its port closes; api's stays.
    write_manifests(&c, local_lb(&c, "api", 11, &["pod-1"]));
    expect(&c, &d, 32010, None, "a deleted service's port closes");
    expect(&c, &d, 32011, Some((200, "1")), "the other port stays");
    d.stop();
}

#[test]
fn a_health_check_port_already_taken_is_retried_not_fatal() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    // Another process holds the port on the node's address.
    let squatter =
        crate::common::net::in_netns(&c.node.name, || std::net::TcpListener::bind((NODE_IP, 32012)).unwrap());
    let path = write_manifests(&c, local_lb(&c, "web", 12, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address="], &[]);
    let logged = wait_for(Duration::from_secs(5), || d.logged().contains("cannot serve the health-check node port"));
    assert!(logged.is_some(), "the taken port is not reported:\n{}", d.logged());
    // Rules are applied regardless: the NodePort works.
    let probe = crate::common::check::who(&c.client, &format!("{NODE_IP}:30012"));
    assert_eq!(probe, "pod-1", "{}", d.logged());
    drop(squatter);
    let served = wait_for(Duration::from_secs(10), || check(&c, 32012).is_some_and(|r| r.0 == 200));
    assert!(served.is_some(), "the port is not taken once free:\n{}", d.logged());
    d.stop();
}

/// Samples of one metric family, by their labels rendered `k=v,...`.
fn samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("a Prometheus text parser accepts /metrics");
    let mut out = BTreeMap::new();
    for s in scrape.samples.into_iter().filter(|s| s.metric == name) {
        let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut labels = labels;
        labels.sort();
        let value = match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
            prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        };
        out.insert(labels.join(","), value);
    }
    out
}

#[test]
fn metrics_carry_upstreams_names_and_what_the_proxy_did() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let mut objects = local_lb(&c, "web", 13, &["pod-1"]);
    objects.extend(local_lb(&c, "api", 14, &["rpod-1"]));
    // A stamp from before the start (what a listing brings) is no latency of this proxy's.
    let stamp = |t: std::time::SystemTime| json!({"endpoints.kubernetes.io/last-change-trigger-time": humantime::format_rfc3339_nanos(t).to_string()});
    let started = std::time::SystemTime::now();
    objects[1]["metadata"]["annotations"] = stamp(started - Duration::from_secs(3600));
    let path = write_manifests(&c, objects.clone());
    let d = Daemon::start(&c.node, &path, &[&format!("--healthz-bind-address={NODE_IP}:10256")], &[]);
    expect(&c, &d, 32013, Some((200, "1")), "served");
    // The EndpointSlice controller stamps a change it began 0.2 s after the start; the
    // daemon applies it more than 2 s later.
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed().unwrap_or_default()));
    objects[1]["metadata"]["annotations"] = stamp(started + Duration::from_millis(200));
    objects[1]["endpoints"].as_array_mut().unwrap().push(json!({"addresses": ["10.1.1.99"], "nodeName": "node-b"}));
    write_manifests(&c, objects);
    let scrape = || http_get(&c.node.name, METRICS, "/metrics").map(|(_, _, body)| body).unwrap_or_default();
    let synced = wait_for(Duration::from_secs(5), || {
        samples(&scrape(), "kubeproxy_network_programming_duration_seconds_count").values().any(|n| *n >= 1.0)
    });
    assert!(synced.is_some(), "no sync counted:\n{}", scrape());
    let text = scrape();
    for (name, labels, want) in [
        ("kubeproxy_sync_proxy_rules_duration_seconds_count", "ip_family=IPv4", 1.0),
        ("kubeproxy_network_programming_duration_seconds_count", "ip_family=IPv4", 1.0),
        ("kubeproxy_sync_proxy_rules_no_local_endpoints_total", "ip_family=IPv4,traffic_policy=external", 1.0),
        ("kube_nftproxy_health_check_node_ports", "", 2.0),
        ("kubeproxy_sync_proxy_rules_service_changes_total", "", 2.0),
        ("kubeproxy_sync_proxy_rules_endpoint_changes_total", "", 2.0),
        ("kubeproxy_sync_proxy_rules_service_changes_pending", "", 0.0),
    ] {
        let got = samples(&text, name).get(labels).copied();
        assert!(got.is_some_and(|v| v >= want), "{name}{{{labels}}} = {got:?}, want at least {want}:\n{text}");
    }
    // The programming latency started 2 s before the sync: it lands in a bucket past 2 s.
    let scrape_of = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let buckets = scrape_of.samples.iter().find_map(|s| match &s.value {
        prometheus_parse::Value::Histogram(h)
            if s.metric == "kubeproxy_network_programming_duration_seconds"
                && s.labels.get("ip_family") == Some("IPv4") =>
        {
            Some(h.iter().map(|b| (b.less_than, b.count)).collect::<Vec<_>>())
        }
        _ => None,
    });
    let buckets = buckets.expect("the network programming histogram");
    assert_eq!(buckets.iter().find(|b| b.0 == 2.0).map(|b| b.1), Some(0.0), "{text}");
    assert_eq!(buckets.iter().find(|b| b.0 == 300.0).map(|b| b.1), Some(1.0), "{text}");
    for name in [
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "process_resident_memory_bytes",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing:\n{text}");
    }
    let health = http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").map(|r| r.0);
    assert_eq!(health, Some(200));
    let text = scrape();
    assert_eq!(samples(&text, "kubeproxy_proxy_healthz_total").get("code=200"), Some(&1.0), "{text}");
    let mode = http_get(&c.node.name, METRICS, "/proxyMode").map(|r| (r.0, r.2));
    assert_eq!(mode, Some((200, "nftables".to_string())));
    assert_eq!(http_get(&c.node.name, METRICS, "/healthz").map(|r| r.2), Some("ok".to_string()));
    assert!(http_get(&c.client.name, &format!("{NODE_IP}:10249"), "/metrics").is_none(), "metrics are local only");
    d.stop();
}

/// Every metric the kubernetes-mixin's "Proxy" dashboard (`dashboards/proxy.libsonnet`, as of
/// kubernetes-monitoring/kubernetes-mixin aa38e2b) queries, with the series its queries read;
/// its panels select `job="kube-proxy"`. Left out: `up` (Prometheus' own, per scrape target)
/// and `go_goroutines` (the "Goroutines" panel: Go's runtime, which this binary has not).
const DASHBOARD: &[(&str, &str)] = &[
    // "Rules Sync Rate": sum(rate(…_count)); "Rules Sync Latency 99th Quantile": from _bucket.
    ("kubeproxy_sync_proxy_rules_duration_seconds_count", "proxy"),
    ("kubeproxy_sync_proxy_rules_duration_seconds_bucket", "proxy"),
    // "Network Programming Rate" and "… Latency 99th Quantile".
    ("kubeproxy_network_programming_duration_seconds_count", "proxy"),
    ("kubeproxy_network_programming_duration_seconds_bucket", "proxy"),
    // "Kube API Request Rate" by code class: client-go's, from the API client.
    ("rest_client_requests_total", "api client"),
    // "Post Request Latency" (verb POST: the Events) and "Get Request Latency" (verb GET).
    ("rest_client_request_duration_seconds_bucket", "api client"),
    // "Memory".
    ("process_resident_memory_bytes", "process"),
    // "CPU usage": rate(…).
    ("process_cpu_seconds_total", "process"),
];

#[test]
fn the_mixins_proxy_dashboard_finds_every_series_it_queries() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let path = write_manifests(&c, local_lb(&c, "web", 15, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, &[], &[]);
    expect(&c, &d, 32015, Some((200, "1")), "served");
    let text = http_get(&c.node.name, METRICS, "/metrics").map(|r| r.2).unwrap_or_default();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
    // prometheus_parse folds a histogram's series into its family's name.
    let present = |series: &str| {
        let family = ["_count", "_bucket", "_sum"].iter().find_map(|s| series.strip_suffix(s)).unwrap_or(series);
        scrape.samples.iter().any(|s| s.metric == series || s.metric == family)
    };
    for (series, from) in DASHBOARD {
        // Over manifests no API client runs: its series are required once it has any.
        if *from == "api client" && !text.contains("rest_client_") {
            continue;
        }
        assert!(present(series), "{series} ({from}) missing:\n{text}");
        // A histogram's family must be one, as the dashboard's quantiles need `le`.
        if let Some(family) = series.strip_suffix("_bucket") {
            assert!(text.contains(&format!("# TYPE {family} histogram")), "{family}:\n{text}");
        }
    }
    let synced = samples(&text, "kubeproxy_sync_proxy_rules_duration_seconds_count");
    assert!(synced.get("ip_family=IPv4").is_some_and(|n| *n >= 1.0), "the rate has syncs to count: {synced:?}");
    d.stop();
}

#[test]
fn one_loop_serves_every_port_and_a_silent_client_holds_up_no_check() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let objects: Vec<Value> = (20..30).flat_map(|n| local_lb(&c, &format!("svc-{n}"), n, &["pod-1"])).collect();
    let path = write_manifests(&c, objects);
    // NodePorts (and so the checks) on every address: one `0.0.0.0` listener per port.
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--nodeport-addresses=all"], &[]);
    expect(&c, &d, 32029, Some((200, "1")), "served on every address");
    // Not over IPv6: an IPv4 Service's port is its family's alone, as upstream's IPv4
    // proxier's (an IPv6 listener would only answer 503 and cost a descriptor per port).
    let v6 = http_get(&c.client.name, "[fd00:172:16::1]:32020", "/").map(|r| r.0);
    assert_eq!(v6, None, "not over IPv6");
    // Clients that connect and say nothing, or send garbage, are dealt with apart.
    let silent: Vec<std::net::TcpStream> = crate::common::net::in_netns(&c.client.name, || {
        (0..50).map(|_| std::net::TcpStream::connect((NODE_IP, 32021)).unwrap()).collect()
    });
    let garbage = crate::common::net::in_netns(&c.client.name, || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect((NODE_IP, 32022)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"\x01\x02 not http\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    });
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage:?}");
    let started = std::time::Instant::now();
    for port in 32020..32030 {
        assert_eq!(check(&c, port).map(|r| r.0), Some(200), "port {port}");
    }
    assert!(started.elapsed() < Duration::from_secs(1), "checks waited: {:?}", started.elapsed());
    let threads = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let threads: usize = threads.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap();
    assert!(threads < 20, "ten ports must not cost a thread each: {threads} threads");
    drop(silent);
    d.stop();
}

/// `n` LoadBalancer Services with the Local policy (IPv4), each with its own health-check
/// port, `31000 + i`, and one ready endpoint on this node.
fn many_local(c: &Cluster, n: u16) -> Vec<Value> {
    let each = |i: u16| {
        let mut objects = local_lb(c, &format!("many-{i}"), 1, &["pod-1"]);
        let spec = &mut objects[0]["spec"];
        spec["clusterIP"] = json!(format!("172.30.{}.{}", 10 + i / 250, i % 250 + 1));
        spec["healthCheckNodePort"] = json!(31000 + i);
        spec["ports"][0]["nodePort"] = json!(30000 + i);
        objects[0]["status"]["loadBalancer"]["ingress"][0]["ip"] = json!(format!("198.18.{}.{}", i / 250, i % 250 + 1));
        objects
    };
    (0..n).flat_map(each).collect()
}

/// Waits up to 30 s for every port of `ports` to answer 200, and `/healthz` and `/metrics`
/// too; the first that does not, if one never does.
fn all_answer(c: &Cluster, ports: impl Iterator<Item = u16> + Clone) -> Result<(), String> {
    let first_silent = || {
        let healthz = http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").map(|r| r.0);
        let metrics = http_get(&c.node.name, METRICS, "/metrics").map(|r| r.0);
        let port = ports.clone().find(|p| check(c, *p).map(|r| r.0) != Some(200));
        match (healthz, metrics, port) {
            (Some(200), Some(200), None) => None,
            (Some(200), Some(200), Some(p)) => Some(format!("port {p}")),
            (h, m, _) => Some(format!("/healthz {h:?}, /metrics {m:?}")),
        }
    };
    match wait_for(Duration::from_secs(30), || first_silent().is_none()) {
        Some(_) => Ok(()),
        None => Err(first_silent().unwrap_or_default()),
    }
}

#[test]
fn six_hundred_local_services_are_served_under_the_limits_systemd_and_a_runtime_give() {
    if !kernel_available() {
        return;
    }
    // A port per Local Service, on the node's address of its family alone: 600 listeners fit
    // a hard limit of 1,024, and systemd's soft 1,024 is raised to its hard limit.
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, many_local(&c, 600));
    let sample = (31000..31600).step_by(7);
    for nofile in [systemd_nofile(), "1024:1024".to_string()] {
        let d = Daemon::start_limited(&c.node, &path, &nofile, &[]);
        let served = all_answer(&c, sample.clone());
        assert!(served.is_ok(), "{served:?} does not answer under {nofile}:\n{}", d.logged());
        d.stop();
    }
    // More Services than a hard 1,024 allows: a quarter of the descriptors stays for
    // connections, so /healthz, /metrics and the ports served answer; the rest are logged
    // and tried again, and served once Services go.
    write_manifests(&c, many_local(&c, 900));
    let d = Daemon::start_limited(&c.node, &path, "1024:1024", &[]);
    let served = all_answer(&c, (31000..31700).step_by(7));
    assert!(served.is_ok(), "{served:?} does not answer with 900 Services:\n{}", d.logged());
    let refused = "cannot serve the health-check node port on 192.168.1.1:31899";
    assert!(wait_for(Duration::from_secs(5), || d.logged().contains(refused)).is_some(), "{}", d.logged());
    // A hundred Services go: a hundred of the ports refused are served now (720 of 800).
    assert_eq!(check(&c, 31750), None, "past the share:\n{}", d.logged());
    write_manifests(&c, many_local(&c, 900).into_iter().skip(2 * 100).collect());
    let served = all_answer(&c, (31720..31820).step_by(7));
    assert!(served.is_ok(), "{served:?} does not answer once Services went:\n{}", d.logged());
    d.stop();
}
