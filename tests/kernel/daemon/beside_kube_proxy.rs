//! The daemon beside kube-proxy: a health port in use is a start error naming its flag, and a
//! Service moves in and out with its label.

use super::*;

#[test]
fn beside_kube_proxy_a_health_port_in_use_is_a_start_error_naming_its_flag() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    // kube-proxy's health port, held as kube-proxy holds it (every address, both families).
    let held =
        crate::common::net::in_netns(&c.node.name, || std::net::TcpListener::bind("[::]:10256").expect("bind 10256"));
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let mut d = Daemon::start(&c.node, &manifests, &["--service-proxy-name=canary"], &[]);
    let status = d.wait_exit(Duration::from_secs(10)).expect("the daemon kept running with its port taken");
    let log = d.logged();
    assert!(!status.success(), "{log}");
    assert!(log.contains("give --healthz-bind-address another") && log.contains("10256"), "{log}");
    // Another port, as the README says: it serves.
    let mut d = Daemon::start(
        &c.node,
        &manifests,
        &["--service-proxy-name=canary", "--healthz-bind-address=0.0.0.0:10266"],
        &[],
    );
    let served = wait_for(Duration::from_secs(10), || {
        crate::common::net::http_get(&c.node.name, "127.0.0.1:10266", "/healthz").is_some()
    });
    assert!(served.is_some() && d.running(), "{}", d.logged());
    drop(held);
    d.stop();
}

#[test]
fn beside_kube_proxy_a_service_moves_in_and_out_with_its_label() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let emu = Emulator::start(Some(&c.remote.name), "192.168.1.2:6443", None, &[]);
    let web_of = |proxy: Option<&str>| {
        let mut objects = web(&c, &["pod-1"]);
        let labels = proxy.map(|p| json!({"service.kubernetes.io/service-proxy-name": p}));
        objects[0]["metadata"]["labels"] = labels.unwrap_or(json!({}));
        Value::Array(objects)
    };
    emu.apply(&Value::Array(vec![Cluster::node_object()]));
    emu.apply(&web_of(None));
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &["--service-proxy-name=canary"], &[]);
    let ours = || c.node.nft(&["list", "table", "ip", "kube-nftproxy"]).contains("172.30.0.40");
    let synced = wait_for(Duration::from_secs(10), || c.node.nft(&["list", "tables"]).contains("kube-nftproxy"));
    assert!(synced.is_some() && !ours(), "kube-proxy's Service (no label) was served:\n{}", d.logged());
    assert_ne!(who(&c.client, "172.30.0.40:80"), "pod-1", "with no kube-proxy here, nothing serves it");
    emu.apply(&web_of(Some("canary")));
    let moved = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(moved.is_some(), "the Service labelled for this proxy was not served:\n{}", d.logged());
    emu.apply(&web_of(Some("another-proxy")));
    assert!(wait_for(Duration::from_secs(5), || !ours()).is_some(), "a Service moved away stayed:\n{}", d.logged());
    d.stop();
}
