//! The monitoring shipped in `packaging/monitoring/`: the alert rules pass `promtool check
//! rules` and their own `promtool test rules`, and a real Prometheus (Debian's `prometheus`,
//! installed by tests/run) scraping the daemon while EndpointSlices change finds data for
//! every query of the Grafana dashboard and loads the rules.

use crate::common::check::web_on as web;
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, slice};
use crate::common::daemon::{Daemon, wait_for};
use crate::common::emulator::Emulator;
use crate::common::net::http_get;
use crate::common::{Scratch, kernel_available, root};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const API_ADDR: &str = "192.168.1.2:6443";
/// Where Prometheus listens, in the node's namespace beside the daemon's metrics.
const PROMETHEUS: &str = "127.0.0.1:19090";

fn monitoring(file: &str) -> std::path::PathBuf {
    root().join("packaging/monitoring").join(file)
}

#[test]
fn the_alert_rules_pass_promtool_s_checks_and_their_own_tests() {
    if !kernel_available() {
        return;
    }
    for args in [["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(monitoring(""))
            .output()
            .expect("promtool (Debian's prometheus, installed by tests/run)");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && said.contains("SUCCESS"), "promtool {args:?}: {said}");
    }
}

/// Prometheus in `ns`, scraping the daemon's metrics every second with the alert rules
/// loaded; killed when dropped.
struct Prometheus(Child);

impl Prometheus {
    fn start(ns: &str, dir: &std::path::Path) -> Prometheus {
        let config = dir.join("prometheus.yml");
        let rules = monitoring("alerts.yaml");
        let text = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{:?}]\n\
             scrape_configs:\n  - job_name: kube-nftproxy\n    static_configs: [{{targets: ['127.0.0.1:10249']}}]\n",
            rules.display()
        );
        std::fs::write(&config, text).expect("prometheus.yml");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "prometheus"])
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={PROMETHEUS}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's prometheus, installed by tests/run)");
        Prometheus(child)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `text` percent-encoded for a query string.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// Prometheus's answer to `query` (its `data.result`), or why there is none.
fn query(ns: &str, query: &str) -> Result<Vec<Value>, String> {
    let path = format!("/api/v1/query?query={}", encoded(query));
    let (code, _, body) = http_get(ns, PROMETHEUS, &path).ok_or("no answer")?;
    let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{code} {e}: {body}"))?;
    match answer["data"]["result"].as_array() {
        Some(result) if code == 200 => Ok(result.clone()),
        _ => Err(format!("{code}: {body}")),
    }
}

/// Whether one of `result`'s samples is a number (not NaN).
fn has_a_number(result: &[Value]) -> bool {
    result.iter().any(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).is_some_and(f64::is_finite))
}

/// web's slice at `generation`: on pod-1 or pod-2 in turn, with the trigger time an
/// EndpointSlice controller writes, so network programming latency is observed.
fn web_slice(c: &Cluster, generation: u32) -> Value {
    let pod = if generation.is_multiple_of(2) { "pod-1" } else { "pod-2" };
    let mut s = slice("web", false, "TCP", vec![endpoint(c.pod_named(pod), false, json!({}))]);
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    s["metadata"]["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": now});
    s["ports"][0]["port"] = json!(ECHO_PORT);
    s
}

#[test]
fn every_query_of_the_dashboard_finds_data_from_a_daemon_under_churn() {
    if !kernel_available() {
        return;
    }
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring("kube-nftproxy-dashboard.json")).expect("dashboard"))
            .expect("the dashboard is JSON");
    let queries: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(|e| e.replace("$__rate_interval", "1m").replace("$instance", ".*")))
        .collect();
    assert!(queries.len() >= 8, "{queries:?}");

    let c = Cluster::new(2, 1);
    let emu = Emulator::start(Some(&c.remote.name), API_ADDR, None, &["--bookmark-interval", "1s"]);
    emu.apply(&Value::Array([vec![Cluster::node_object()], web(&c, &["pod-1"])].concat()));
    let dir = Scratch::new("prometheus");
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), &[], &[]);
    let _prometheus = Prometheus::start(&c.node.name, &dir.0);
    let up = wait_for(Duration::from_secs(20), || {
        query(&c.node.name, "up{job=\"kube-nftproxy\"} == 1").is_ok_and(|r| !r.is_empty())
    });
    assert!(up.is_some(), "Prometheus never scraped the daemon:\n{}", d.logged());
    // The churn: web's endpoint moves five times a second for eight seconds.
    let started = Instant::now();
    let mut generation = 0;
    while started.elapsed() < Duration::from_secs(8) {
        generation += 1;
        emu.apply(&web_slice(&c, generation));
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut missing = Vec::new();
    for q in &queries {
        let found = wait_for(Duration::from_secs(10), || query(&c.node.name, q).is_ok_and(|r| has_a_number(&r)));
        if found.is_none() {
            missing.push(format!("{q}: {:?}", query(&c.node.name, q)));
        }
    }
    assert!(missing.is_empty(), "queries without data:\n{}\n{}", missing.join("\n"), d.logged());
    let rules = http_get(&c.node.name, PROMETHEUS, "/api/v1/rules").map(|r| r.2).unwrap_or_default();
    assert!(rules.contains("KubeNftproxySyncsFailing") && rules.contains("\"health\":\"ok\""), "{rules}");
    d.stop();
}
