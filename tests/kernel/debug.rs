//! The running daemon's debug views as an operator uses them: `/debug/ruleset` and
//! `/debug/services` over real HTTP on the metrics address inside a network namespace, and
//! the summary SIGUSR1 writes to the log; upstream's z-pages (`/statusz`, `/flagz`,
//! `/configz`) and `/metrics/slis` beside them.

use crate::common::daemon::{Daemon, wait_for, write_list};
use crate::common::net::{http_get, http_get_accepting};
use crate::common::owner::TableOwner;
use crate::common::{Netns, Scratch, dry_run_in, kernel_available};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the daemon serves metrics, and so the debug views, in the test's namespace.
const METRICS: &str = "127.0.0.1:10249";

/// Where it serves health, which has no debug views.
const HEALTHZ: &str = "127.0.0.1:10256";

/// The cluster CIDRs `Daemon::start` passes, for the dry run to match.
const CLUSTER_CIDR: &str = "--cluster-cidr=10.0.0.0/8,fd00:10::/32";

/// Writes this node (zone `z1`) and `objects` as the manifests in `dir`, at once.
fn write(dir: &Path, objects: Vec<Value>) -> PathBuf {
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}});
    let items: Vec<Value> = std::iter::once(node).chain(objects).collect();
    write_list(dir, &json!({"apiVersion": "v1", "kind": "List", "items": items}))
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

/// The EndpointSlice of service `name`, port 8080, with `endpoints`.
fn slice(name: &str, endpoints: Vec<Value>) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": endpoints})
}

fn ep(ip: &str, node: &str, ready: bool, zone: Option<&str>) -> Value {
    let mut e = json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": ready}});
    if let Some(z) = zone {
        e["hints"] = json!({"forZones": [{"name": z}]});
    }
    e
}

/// A cluster with a not-ready and a topology-hinted endpoint (`web`), an
/// externalTrafficPolicy Local service without a local endpoint (`local`, unless
/// `local_here`), and a ClientIP affinity service (`sticky`); `web`'s third endpoint is
/// ready when `all_ready`.
fn objects(all_ready: bool, local_here: bool) -> Vec<Value> {
    vec![
        service("web", json!({"clusterIP": "172.30.0.10", "ports": [{"port": 80}]})),
        slice(
            "web",
            vec![
                ep("10.1.0.1", "node-a", true, Some("z1")),
                ep("10.2.0.1", "node-b", true, Some("z2")),
                ep("10.1.0.2", "node-a", all_ready, Some("z1")),
            ],
        ),
        service(
            "local",
            json!({"type": "NodePort", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.11",
                   "ports": [{"port": 443, "nodePort": 30443}]}),
        ),
        slice(
            "local",
            [Some(ep("10.2.0.4", "node-b", true, None)), local_here.then(|| ep("10.1.0.4", "node-a", true, None))]
                .into_iter()
                .flatten()
                .collect(),
        ),
        service(
            "sticky",
            json!({"clusterIP": "172.30.0.12", "sessionAffinity": "ClientIP", "ports": [{"port": 53, "protocol": "UDP"}]}),
        ),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "sticky-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "sticky"}},
            "addressType": "IPv4", "ports": [{"port": 5353, "protocol": "UDP"}],
            "endpoints": [ep("10.1.0.5", "node-a", true, None), ep("10.2.0.5", "node-b", true, None)]}),
    ]
}

/// The daemon in `ns` over `objects`, serving metrics and health, once it has synced.
fn start(ns: &Netns, dir: &Scratch, objects: Vec<Value>) -> (PathBuf, Daemon) {
    start_with(ns, dir, objects, &[])
}

/// [`start`] with `extra` flags.
fn start_with(ns: &Netns, dir: &Scratch, objects: Vec<Value>, extra: &[&str]) -> (PathBuf, Daemon) {
    let path = write(&dir.0, objects);
    let flags = [format!("--metrics-bind-address={METRICS}"), format!("--healthz-bind-address={HEALTHZ}")];
    let d = Daemon::start(ns, &path, &[[flags[0].as_str(), flags[1].as_str()].as_slice(), extra].concat(), &[]);
    // A restart over the rules of an earlier run refreshes them instead.
    let synced = || ["Full sync", "Refresh sync"].iter().any(|s| d.logged().contains(s));
    assert!(wait_for(Duration::from_secs(10), synced).is_some(), "{}", d.logged());
    (path, d)
}

fn get(ns: &Netns, path: &str) -> (u16, String, String) {
    http_get(&ns.name, METRICS, path).unwrap_or_else(|| panic!("no answer to {path}"))
}

/// `/debug/services` parsed.
fn services(ns: &Netns, query: &str) -> Value {
    let (code, head, body) = get(ns, &format!("/debug/services{query}"));
    assert_eq!(code, 200, "{body}");
    assert!(head.contains("content-type: application/json"), "{head}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `(cluster, local, unused reason)` of endpoint `ip` of the IPv4 port `name` in `doc`.
fn uses(doc: &Value, name: &str, ip: &str) -> (String, String, Option<String>) {
    let ports = doc["servicePorts"].as_array().expect("ports");
    let port = ports.iter().find(|p| p["name"] == name && p["ipFamily"] == "IPv4").expect("port");
    let e = port["endpoints"].as_array().and_then(|eps| eps.iter().find(|e| e["ip"] == ip)).expect("endpoint");
    let s = |v: &Value| v.as_str().map(str::to_string);
    (s(&e["cluster"]).unwrap_or_default(), s(&e["local"]).unwrap_or_default(), s(&e["unused"]["reason"]))
}

fn traffic(doc: &Value, name: &str) -> Value {
    let ports = doc["servicePorts"].as_array().expect("ports");
    ports.iter().find(|p| p["name"] == name).map(|p| p["traffic"].clone()).unwrap_or_default()
}

#[test]
fn the_ruleset_is_what_the_dry_run_prints_and_loads_to_the_kernels_tables() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::with_loopback("dbg-ruleset");
    let dir = Scratch::new("dbg-ruleset");
    let (path, d) = start(&ns, &dir, objects(false, false));
    let (code, head, body) = get(&ns, "/debug/ruleset");
    assert_eq!(code, 200, "{body}");
    assert!(head.contains("content-type: text/plain"), "{head}");
    let (first, script) = body.split_once('\n').expect("a header line");
    assert!(first.starts_with("# as applied by the last successful sync (Full, ended 20"), "{first}");
    assert_eq!(script, dry_run_in(&ns, &path, &[CLUSTER_CIDR.to_string()]), "what --dry-run prints");
    let fresh = Netns::new("dbg-fresh");
    fresh.nft_apply(&body).unwrap_or_else(|e| panic!("the ruleset does not load: {e}"));
    for family in ["ip", "ip6"] {
        let listing = |n: &Netns| n.nft(&["list", "table", family, "kube-nftproxy"]);
        assert_eq!(listing(&fresh), listing(&ns), "{family}: loaded, the view lists as the kernel's tables");
    }
    let (code, _, _) = http_get(&ns.name, HEALTHZ, "/debug/ruleset").expect("health answers");
    assert_eq!(code, 404, "the debug views are on the metrics address only");
    d.stop();
}

#[test]
fn the_services_view_gives_uses_and_reasons_and_follows_changes() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::with_loopback("dbg-services");
    let dir = Scratch::new("dbg-services");
    let (_, d) = start(&ns, &dir, objects(false, false));
    let doc = services(&ns, "");
    assert_eq!((doc["node"].clone(), doc["zone"].clone()), (json!("node-a"), json!("z1")));
    assert_eq!((doc["sync"]["last"]["kind"].clone(), doc["sync"]["pending"].clone()), (json!("full"), json!(false)));
    assert_eq!(uses(&doc, "shop/web", "10.1.0.1"), ("chosen".into(), "not-needed".into(), None));
    assert_eq!(uses(&doc, "shop/web", "10.2.0.1"), ("topology".into(), "not-needed".into(), Some("topology".into())));
    assert_eq!(uses(&doc, "shop/web", "10.1.0.2"), ("not-ready".into(), "not-needed".into(), Some("not-ready".into())));
    assert_eq!(uses(&doc, "shop/local", "10.2.0.4"), ("chosen".into(), "other-node".into(), None));
    assert_eq!(traffic(&doc, "shop/local"), json!({"clusterIP": "endpoints", "external": "drop"}));
    let sticky = &services(&ns, "?service=shop/sticky")["servicePorts"];
    assert_eq!(sticky.as_array().map(Vec::len), Some(1), "{sticky}");
    assert_eq!(
        (sticky[0]["sessionAffinity"].clone(), sticky[0]["protocol"].clone()),
        (json!("ClientIP"), json!("UDP"))
    );
    assert_eq!(uses(&services(&ns, "?service=shop/sticky"), "shop/sticky", "10.2.0.5").0, "chosen");
    assert_eq!(get(&ns, "/debug/services?namespace=shop").0, 400, "an unknown filter is refused, not ignored");

    write(&dir.0, objects(true, true));
    let changed = || {
        let doc = services(&ns, "");
        uses(&doc, "shop/web", "10.1.0.2").0 == "chosen" && traffic(&doc, "shop/local")["external"] == "endpoints"
    };
    assert!(wait_for(Duration::from_secs(5), changed).is_some(), "{}\n{}", services(&ns, ""), d.logged());
    assert_eq!(uses(&services(&ns, ""), "shop/local", "10.1.0.4"), ("chosen".into(), "chosen".into(), None));
    d.stop();
}

#[test]
fn sigusr1_logs_a_summary_naming_what_finds_no_endpoint() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::with_loopback("dbg-summary");
    let dir = Scratch::new("dbg-summary");
    let mut more = objects(false, false);
    more.push(service("empty", json!({"clusterIP": "172.30.0.13", "ports": [{"port": 80}]})));
    let (_, d) = start(&ns, &dir, more);
    d.signal(libc::SIGUSR1);
    let expected = [
        "summary: 4 services with 4 ports; last sync ",
        "summary: ip table: 15 fixed and ",
        "summary: ip6 table: 15 fixed and 1 rendered chains (0 rules in the rendered), 0 set and map elements",
        "summary: 4 service ports (counted per IP family) with 6 endpoints: 4 used, 2 unused (1 not-ready, 1 topology)",
        "summary: 2 service ports have traffic that finds no endpoint: 1 reject it, 1 drop it",
        "summary: shop/empty (IPv4): cluster IP traffic rejected; no endpoints",
        "summary: shop/local (IPv4): cluster IP traffic balanced over endpoints, external traffic dropped; endpoints: 1, passed over: 1 other-node",
    ];
    let logged = || expected.iter().all(|line| d.logged().contains(line));
    assert!(wait_for(Duration::from_secs(5), logged).is_some(), "SIGUSR1 must log the summary:\n{}", d.logged());
    let summary: Vec<String> = d.logged().lines().filter(|l| l.contains("summary: ")).map(str::to_string).collect();
    assert_eq!(summary.len(), expected.len(), "nothing else: {summary:#?}");
    d.stop();
}

#[test]
fn a_sync_that_failed_is_not_shown_as_applied() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::with_loopback("dbg-failed");
    let dir = Scratch::new("dbg-failed");
    let (_, d) = start(&ns, &dir, objects(false, false));
    let owner = TableOwner::take(&ns, "ip");
    let mut more = objects(false, false);
    more.push(service("new", json!({"clusterIP": "172.30.0.20", "ports": [{"port": 80}]})));
    write(&dir.0, more);
    // Taking the table fails a sync at once (the repair); the new Service's, too, once read.
    let known = || {
        let doc = services(&ns, "?service=shop/new");
        doc["sync"]["failing"] == true && doc["servicePorts"].as_array().is_some_and(|p| p.len() == 1)
    };
    assert!(wait_for(Duration::from_secs(5), known).is_some(), "{}", d.logged());
    let (code, _, body) = get(&ns, "/debug/ruleset");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("the last sync failed"), "{body}");
    let doc = services(&ns, "?service=shop/new");
    assert_eq!(doc["sync"]["pending"], true, "the new Service waits to be applied: {doc}");
    assert_eq!(traffic(&doc, "shop/new"), json!({"clusterIP": "reject", "external": null}), "the view shows the model");
    owner.release();
    let applied = || {
        let (code, _, body) = get(&ns, "/debug/ruleset");
        code == 200 && body.contains("172.30.0.20")
    };
    assert!(wait_for(Duration::from_secs(10), applied).is_some(), "{}", d.logged());
    assert_eq!(services(&ns, "")["sync"]["failing"], false);
    d.stop();
}

/// The `(name, value)` lines of `/flagz` after its four header lines, whichever separator
/// upstream's randomness picked (`:`, `: `, `=` or ` `; no flag name holds one).
fn z_flags(page: &str) -> Vec<(String, String)> {
    let split = |l: &str| {
        let at = l.find([':', '=', ' '])?;
        let value = l[at + 1..].strip_prefix(' ').unwrap_or(&l[at + 1..]);
        Some((l[..at].to_string(), value.to_string()))
    };
    page.lines().skip(4).filter(|l| !l.is_empty()).filter_map(split).collect()
}

/// The value of `/statusz`'s field `name`, whichever separator was picked.
fn z_status<'a>(page: &'a str, name: &str) -> Option<&'a str> {
    let rest = page.lines().find_map(|l| l.strip_prefix(name))?;
    [": ", ":", "=", " "].iter().find_map(|d| rest.strip_prefix(d).and_then(|v| v.strip_prefix(' ')))
}

#[test]
fn z_pages_and_slis_are_served_beside_the_metrics_as_upstreams() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::with_loopback("dbg-zpages");
    let dir = Scratch::new("dbg-zpages");
    let gates = "--feature-gates=ComponentStatusz=true,ComponentFlagz=true";
    let flags = [gates, "--iptables-sync-period=45s", "--conntrack-max-per-core=0", "--kube-api-qps=7.5"];
    let (_, d) = start_with(&ns, &dir, objects(false, false), &flags);
    let (code, head, page) = get(&ns, "/statusz");
    assert_eq!(code, 200, "{page}");
    assert!(head.contains("content-type: text/plain; charset=utf-8"), "{head}");
    assert!(page.starts_with("\nkube-nftproxy statusz\nWarning: This endpoint is not meant to be machine parseable"));
    let field = |name: &str| z_status(&page, name).unwrap_or_else(|| panic!("no {name}: {page}"));
    assert!(field("Started").contains(" UTC 20"), "{page}");
    assert!(field("Up").starts_with("0 hr 00 min "), "{page}");
    assert!(field("Go version").starts_with("rustc "), "{page}");
    assert_eq!(field("Paths"), "/configz /debug /flagz /healthz /metrics /proxyMode", "{page}");
    assert_eq!(page.lines().filter(|l| !l.is_empty()).count(), 7, "title, warning, five fields: {page}");
    let (code, _, page) = get(&ns, "/flagz");
    assert_eq!(code, 200, "{page}");
    let flags = z_flags(&page);
    let flag = |name: &str| flags.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(flag("hostname-override"), Some("node-a"), "given: {page}");
    assert_eq!(flag("metrics-bind-address"), Some(METRICS), "{page}");
    assert_eq!(flag("oom-score-adj"), Some("-999"), "a default: {page}");
    assert!(flags.windows(2).all(|w| w[0].0 < w[1].0), "sorted: {page}");
    let structured = "application/json;v=v1beta1;g=config.k8s.io;as=Flagz";
    let (code, head, body) = http_get_accepting(&ns.name, METRICS, "/flagz", Some(structured)).expect("an answer");
    assert!(code == 200 && head.contains("content-type: application/json"), "{head}");
    let doc: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!((doc["kind"].as_str(), doc["metadata"]["name"].as_str()), (Some("Flagz"), Some("kube-nftproxy")));
    assert_eq!(doc["flags"].as_object().map(|f| f.len()), Some(flags.len()), "the text's flags: {doc}");
    let bare = http_get_accepting(&ns.name, METRICS, "/statusz", Some("application/json")).map(|r| r.0);
    assert_eq!(bare, Some(406), "JSON only when asked for by version, group and kind");
    // The configuration under kube-proxy's API group as upstream's: its internal type, keyed
    // by Go field names, metav1.Durations as Go's duration text.
    let (code, head, body) = get(&ns, "/configz");
    assert!(code == 200 && head.contains("content-type: application/json"), "{head}");
    let config: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let config = &config["kubeproxy.config.k8s.io"];
    assert_eq!((config["Mode"].as_str(), config["SyncPeriod"].as_str()), (Some(""), Some("45s")), "{body}");
    assert_eq!(config["Linux"]["Conntrack"]["MaxPerCore"].as_u64(), Some(0), "{body}");
    assert_eq!(config["ClientConnection"]["QPS"].as_f64(), Some(7.5), "{body}");
    assert_eq!(
        (config["HostnameOverride"].as_str(), config["MetricsBindAddress"].as_str()),
        (Some("node-a"), Some(METRICS))
    );
    assert!(config.get("kind").is_none() && config.get("mode").is_none(), "not the v1alpha1 file: {body}");
    // The SLIs count the metrics address's /healthz, whose one check is `ping`.
    let slis = || get(&ns, "/metrics/slis").2;
    assert!(!slis().contains("kubernetes_healthcheck{"), "nothing checked yet: {}", slis());
    assert_eq!(get(&ns, "/healthz").2, "ok");
    let text = slis();
    assert!(text.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1"), "{text}");
    assert!(
        text.contains("kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 1"),
        "{text}"
    );
    let metrics = get(&ns, "/metrics").2;
    let info = metrics.lines().find(|l| l.starts_with("kubernetes_build_info{")).unwrap_or_default();
    assert!(
        info.contains("compiler=\"rustc\"") && info.contains("platform=\"linux/") && info.ends_with(" 1"),
        "{metrics}"
    );
    let (code, _, _) = http_get(&ns.name, HEALTHZ, "/statusz").expect("health answers");
    assert_eq!(code, 404, "the z-pages are on the metrics address only");
    d.stop();
    // ComponentFlagz off: no /flagz, and /statusz does not list it.
    let (_, d) = start_with(&ns, &dir, objects(false, false), &["--feature-gates=ComponentFlagz=false"]);
    assert_eq!(get(&ns, "/flagz").0, 404, "ComponentFlagz off");
    let page = get(&ns, "/statusz").2;
    assert_eq!(z_status(&page, "Paths"), Some("/configz /debug /healthz /metrics /proxyMode"), "{page}");
    d.stop();
}
