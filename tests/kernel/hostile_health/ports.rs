//! Which health check ports listen where: across Services' policy and port changes, the node's
//! addresses, bindv6only, the healthz port; their metrics and an unhealthy proxy's answers.

use super::*;

#[test]
fn with_bindv6only_set_a_port_on_every_address_still_takes_ipv4() {
    if !kernel_available() {
        return;
    }
    // Go's listener on 0.0.0.0 (upstream's for "all") clears IPV6_V6ONLY itself; a socket
    // that leaves it to the sysctl takes no IPv4 on hosts that set it. A dual-stack Service
    // gets such a `[::]`; an IPv4 one `0.0.0.0` alone, as upstream's IPv4 proxier opens it.
    let c = Cluster::new(1, 0);
    let out = c.node.run(&["sysctl", "-qw", "net.ipv6.bindv6only=1"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut objects = local_lb(&c, "web", 64, 32064, &["pod-1"]);
    let mut dual = local_lb(&c, "dual", 65, 32065, &["pod-1"]);
    let spec = &mut dual[0]["spec"];
    spec["clusterIPs"] = json!(["172.30.0.65", "fd00:172:30::65"]);
    spec["ipFamilies"] = json!(["IPv4", "IPv6"]);
    spec["ipFamilyPolicy"] = json!("RequireDualStack");
    dual.push(slice("dual", true, "TCP", vec![endpoint(c.pod_named("pod-1"), true, json!({}))]));
    objects.extend(dual);
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--nodeport-addresses=all"], &[]);
    expect(&c, &d, 32065, Some((200, "1")), "a dual-stack Service's port takes IPv4");
    expect_at(&c, &d, "[fd00:172:16::1]:32065", Some((200, "1")), "and IPv6, counting IPv6 endpoints");
    expect(&c, &d, 32064, Some((200, "1")), "an IPv4 Service's port");
    expect_at(&c, &d, "[fd00:172:16::1]:32064", None, "not over IPv6, where it could only answer 503");
    d.stop();
}

/// Writes `objects` with `node` as this node's Node object where [`write_manifests`] does.
fn write_with_node(c: &Cluster, node: Value, objects: Vec<Value>) {
    let path = write_manifests(c, Vec::new());
    let mut items = vec![node];
    items.extend(objects);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(&path, serde_json::to_vec(&list).unwrap()).unwrap();
}

/// A ClusterIP Service with no endpoints, to make a sync happen.
fn bystander(n: u8) -> Value {
    service(
        &format!("bystander-{n}"),
        json!({"clusterIP": format!("172.30.1.{n}"), "ports": [{"port": 80}]}),
        json!({}),
    )
}

#[test]
fn ports_follow_services_across_policy_and_port_changes_and_a_draining_node_keeps_them() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let a = |hcnp| local_lb(&c, "a", 70, hcnp, &["pod-1"]);
    let mut objects = a(32070);
    objects.extend(local_lb(&c, "b", 71, 32071, &["pod-1", "pod-2"]));
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &[], &[]);
    expect(&c, &d, 32070, Some((200, "1")), "a served");
    expect(&c, &d, 32071, Some((200, "2")), "b served");
    // a's port changes; b turns to the Cluster policy (the API server drops its port).
    let mut objects = a(32072);
    let mut b = local_lb(&c, "b", 71, 32071, &["pod-1", "pod-2"]);
    b[0]["spec"]["externalTrafficPolicy"] = json!("Cluster");
    b[0]["spec"].as_object_mut().unwrap().remove("healthCheckNodePort");
    objects.extend(b);
    write_manifests(&c, objects);
    expect(&c, &d, 32072, Some((200, "1")), "a's new port");
    expect(&c, &d, 32070, None, "a's old port closes");
    expect(&c, &d, 32071, None, "b has no health check under the Cluster policy");
    // Two Services claim one port: it answers for one, then for the other once that goes.
    let one = local_lb(&c, "one", 73, 32073, &["pod-1"]);
    let two = local_lb(&c, "two", 74, 32073, &["pod-1", "pod-2"]);
    write_manifests(&c, [one.clone(), two.clone()].concat());
    let first = wait_for(Duration::from_secs(5), || check_at(&c, &format!("{NODE_IP}:32073")).is_some());
    assert!(first.is_some(), "the shared port is not served:\n{}", d.logged());
    let (_, weight, body) = check_at(&c, &format!("{NODE_IP}:32073")).unwrap();
    let (left, want) = if weight == "1" { (two.clone(), "2") } else { (one.clone(), "1") };
    assert!(body.contains(if weight == "1" { "\"one\"" } else { "\"two\"" }), "{weight} {body}");
    // The conflict is logged, as upstream logs it: once, however often the ports change.
    let claimed = "health-check node port 32073 of Service test/two is already claimed by Service test/one";
    assert!(d.logged().contains(claimed), "the conflict is not logged:\n{}", d.logged());
    write_manifests(&c, [one, two, local_lb(&c, "three", 75, 32075, &["pod-1"])].concat());
    expect(&c, &d, 32075, Some((200, "1")), "a third port");
    assert_eq!(d.logged().matches(claimed).count(), 1, "logged more than once:\n{}", d.logged());
    write_manifests(&c, left.clone());
    expect(&c, &d, 32073, Some((200, want)), "the other claimant takes the port");
    // The cluster autoscaler marks the node for deletion: /healthz drains it, but upstream's
    // health-check ports do not look at the node's eligibility.
    let mut node = Cluster::node_object();
    node["spec"] = json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]});
    write_with_node(&c, node, left);
    let drained = wait_for(Duration::from_secs(5), || {
        http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").is_some_and(|r| r.0 == 503)
    });
    assert!(drained.is_some(), "/healthz does not drain:\n{}", d.logged());
    expect(&c, &d, 32073, Some((200, want)), "the health-check port still answers 200");
    metrics_are_strict_and_count_health_answers(&c, &d);
    d.stop();
}

/// The scrape passes a strict parser (Python's prometheus_client, when installed), no label
/// carries a Service's name, and `/healthz` and `/livez` answers are counted by code.
fn metrics_are_strict_and_count_health_answers(c: &Cluster, d: &Daemon) {
    let scrape = || http_get(&c.node.name, "127.0.0.1:10249", "/metrics").map(|r| r.2).unwrap_or_default();
    let count = |text: &str, line: &str| {
        text.lines().find_map(|l| l.strip_prefix(line)).map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
    };
    let before = scrape();
    for _ in 0..3 {
        assert_eq!(http_get(&c.node.name, "127.0.0.1:10256", "/healthz").map(|r| r.0), Some(503));
        assert_eq!(http_get(&c.node.name, "127.0.0.1:10256", "/livez").map(|r| r.0), Some(200));
    }
    let text = scrape();
    for (line, n) in
        [("kubeproxy_proxy_healthz_total{code=\"503\"}", 3.0), ("kubeproxy_proxy_livez_total{code=\"200\"}", 3.0)]
    {
        assert_eq!(count(&text, line) - count(&before, line), n, "{line}\n{text}");
    }
    for name in ["\"one\"", "\"two\"", "\"a\"", "\"test\""] {
        assert!(!text.contains(name), "a label carries a Service's name {name}:\n{text}");
    }
    let python = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as p\n\
                  print(sum(1 for _ in p(sys.stdin.read())))";
    let probe = std::process::Command::new("/usr/bin/python3").args(["-c", "import prometheus_client"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("CI").is_none(), "python3 with prometheus_client is missing (tests/run installs it)");
        eprintln!("SKIPPING the strict parse of /metrics: python3 with prometheus_client is not installed");
        return;
    }
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", python])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refuses /metrics: {}\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.logged()
    );
}

#[test]
fn listeners_move_with_the_node_addresses_nodeport_addresses_selects() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, local_lb(&c, "web", 75, 32075, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--nodeport-addresses=172.16.0.0/24"], &[]);
    expect_at(&c, &d, "172.16.0.1:32075", Some((200, "1")), "served on the address in the CIDR");
    expect(&c, &d, 32075, None, "not on the primary address, outside the CIDR");
    // A second address in the CIDR arrives; the next sync (any change) listens there too.
    let ip = |args: &str| {
        let argv: Vec<&str> = args.split_whitespace().collect();
        assert!(c.node.run(&argv, "").status.success(), "{args}");
    };
    ip("ip addr add 172.16.0.9/24 dev to-client");
    let mut objects = local_lb(&c, "web", 75, 32075, &["pod-1"]);
    objects.push(bystander(1));
    write_manifests(&c, objects.clone());
    expect_at(&c, &d, "172.16.0.9:32075", Some((200, "1")), "the new address is served");
    ip("ip addr del 172.16.0.9/24 dev to-client");
    ip("ip addr add 172.16.0.9/24 dev to-b");
    objects.push(bystander(2));
    write_manifests(&c, objects);
    // Still on the node (another interface) and in the CIDR: still served.
    expect_at(&c, &d, "172.16.0.9:32075", Some((200, "1")), "moved to another interface");
    expect_at(&c, &d, "172.16.0.1:32075", Some((200, "1")), "the first address stays");
    d.stop();
}

#[test]
fn a_health_check_port_on_the_healthz_port_leaves_healthz_alone() {
    if !kernel_available() {
        return;
    }
    // A Service whose health-check port is kube-proxy's own 10256 (a manifest mistake; the
    // API server allocates from the NodePort range): /healthz keeps answering as /healthz,
    // the clash is logged, and the other ports are served.
    let c = Cluster::new(1, 0);
    let mut objects = local_lb(&c, "clash", 76, 10256, &["pod-1"]);
    objects.extend(local_lb(&c, "fine", 77, 32077, &["pod-1"]));
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &[], &[]);
    expect(&c, &d, 32077, Some((200, "1")), "the other port");
    let logged = wait_for(Duration::from_secs(5), || d.logged().contains("cannot serve the health-check node port"));
    assert!(logged.is_some(), "the clash is not logged:\n{}", d.logged());
    let healthz = http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").expect("healthz answers");
    assert!(healthz.2.contains("nodeEligible"), "/healthz was taken over: {healthz:?}");
    d.stop();
}

#[test]
fn an_unhealthy_proxy_makes_every_health_check_port_say_so() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let mut objects = local_lb(&c, "web", 78, 32078, &["pod-1"]);
    objects.extend(local_lb(&c, "api", 79, 32079, &["pod-1"]));
    let path = write_manifests(&c, objects.clone());
    let mut d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--sync-period=1s"], &[]);
    expect(&c, &d, 32078, Some((200, "1")), "healthy first");
    expect(&c, &d, 32079, Some((200, "1")), "healthy first");
    // From now on another process owns the tables: every sync fails with EPERM, so a new
    // Service cannot be applied. (The checks reach the ports still: the owned table is empty.)
    let _owner = [TableOwner::take(&c.node, "ip"), TableOwner::take(&c.node, "ip6")];
    let mut more = objects;
    more.extend(local_lb(&c, "new", 80, 32080, &["pod-1"]));
    write_manifests(&c, more);
    for port in [32078, 32079] {
        expect(&c, &d, port, Some((503, "1")), "an unhealthy proxy fails every check");
        let (_, _, body) = check_at(&c, &format!("{NODE_IP}:{port}")).unwrap();
        assert!(body.contains("\"serviceProxyHealthy\": false"), "{body}");
    }
    assert!(d.logged().contains("sync failed"), "the proxy is unhealthy for another reason:\n{}", d.logged());
    // SIGTERM still ends it promptly, its syncs failing and retried.
    let stopped = d.stop_within(Duration::from_secs(5));
    assert!(stopped.is_some_and(|(s, _)| s.success()), "{stopped:?}\n{}", d.logged());
}
