//! `--dry-run --diff` on a real kernel, in network namespaces: a ruleset just applied by the
//! library's applier diffs as empty (every golden case, both families, affinity, anonymous
//! sets, a thousand mixed services with sized maps); manifest changes and changes by hand
//! show up under the service they belong to; the exit status says which; nothing is written.

use crate::common::synth;

use crate::common::cluster::Cluster;
use crate::common::net::in_netns;
use crate::common::{Netns, Scratch, kernel_available};
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::Model;
use kube_nftproxy::netlink::Socket;
use kube_nftproxy::nft::kdiff::{self, Report};
use kube_nftproxy::nft::{Applier, OwnPorts, Resync};
use kube_nftproxy::render::{self, Ruleset, Update};
use kube_nftproxy::{host, manifests};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn config(args: &[String]) -> Config {
    let argv = ["kube-nftproxy".to_string(), "--hostname-override=node-a".to_string()];
    Config::from_flags(&Flags::parse_from(argv.iter().chain(args))).expect("configuration")
}

/// Renders `model` with the namespace's addresses, as the dry run does, and applies it there.
fn render_and_apply(ns: &Netns, mut model: Model, cfg: &Config) -> Ruleset {
    in_netns(&ns.name, || {
        model.set_host_addresses(host::interface_addresses().expect("addresses"));
        let ruleset = render::render(&model, cfg).expect("render");
        let mut applier = Applier::new("node-a", Arc::new(OwnPorts::default()));
        applier.sync(&ruleset, &Update::Replaced, Resync::Replace).expect("apply");
        ruleset
    })
}

fn diff_in(ns: &Netns, ruleset: &Ruleset) -> Report {
    in_netns(&ns.name, || kdiff::against_kernel(ruleset, "node-a").expect("diff"))
}

fn generation(ns: &Netns) -> u32 {
    in_netns(&ns.name, || Socket::open().and_then(|mut s| s.generation()).expect("generation"))
}

/// Runs `kube-nftproxy --dry-run --diff` over `manifests` in `ns`: exit status and stdout.
fn run_diff(ns: &Netns, manifests: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .args(extra.iter().take_while(|a| **a != "--"))
        .arg(env!("CARGO_BIN_EXE_kube-nftproxy"))
        .args(["--dry-run", "--diff", "--hostname-override=node-a", "--manifests"])
        .arg(manifests)
        .args(extra.iter().skip_while(|a| **a != "--").skip(1))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kube-nftproxy");
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).expect("utf-8"))
}

#[test]
fn every_golden_case_diffs_empty_right_after_applying() {
    if !kernel_available() {
        return;
    }
    for case in crate::common::golden_cases() {
        let cfg = config(&case.args);
        let (model, _) = manifests::load_model(&case.dir.join("manifests.yaml"), "node-a").expect("manifests");
        let ns = Netns::new("kdiff-golden");
        let ruleset = render_and_apply(&ns, model, &cfg);
        let report = diff_in(&ns, &ruleset);
        assert!(!report.differences, "{}: a fresh ruleset differs:\n{}", case.name, report.to_text());
    }
}

#[test]
fn the_schedulers_picks_diff_empty_right_after_applying_and_unlike_random_ones() {
    if !kernel_available() {
        return;
    }
    // Rules with `jhash` and `numgen inc` read back from the kernel as they were compiled, in
    // both families (each pick stands in for `numgen random`).
    let case = crate::common::golden_cases().into_iter().find(|c| c.name == "dual-stack").expect("dual-stack");
    let (model, _) = manifests::load_model(&case.dir.join("manifests.yaml"), "node-a").expect("manifests");
    let cfg = config(&case.args);
    let ns = Netns::new("kdiff-picks");
    for pick in crate::common::SCHEDULER_PICKS {
        let (random, picked) = in_netns(&ns.name, || {
            let mut model = model.clone();
            model.set_host_addresses(host::interface_addresses().expect("addresses"));
            let random = render::render(&model, &cfg).expect("render");
            let mut picked = random.clone();
            for rules in picked.tables.iter_mut().flat_map(|t| t.chains.values_mut()) {
                *rules = crate::common::with_pick(rules, pick);
            }
            let mut applier = Applier::new("node-a", Arc::new(OwnPorts::default()));
            applier.sync(&picked, &Update::Replaced, Resync::Replace).expect("apply");
            (random, picked)
        });
        let report = diff_in(&ns, &picked);
        assert!(!report.differences, "{pick}: a fresh ruleset differs:\n{}", report.to_text());
        // The same rules with `numgen random` are not what the kernel holds.
        let report = diff_in(&ns, &random);
        let (text, held) = (report.to_text(), if pick.starts_with("jhash") { "= jhash(reg " } else { "= inc mod " });
        assert!(report.summary.changed >= 4 && text.contains(held), "{pick}: the picks went unseen:\n{text}");
    }
}

#[test]
fn a_thousand_mixed_services_diff_empty_and_nothing_is_written() {
    if !kernel_available() {
        return;
    }
    // Ten endpoints each: the endpoint map's last part (slots 3 to 9) holds enough for a size.
    let case = synth::Case { name: "1k mix".into(), services: 1000, endpoints: 10, mix: true };
    let cfg = config(&["--cluster-cidr=10.0.0.0/8".to_string()]);
    let ns = Netns::new("kdiff-1k");
    let ruleset = render_and_apply(&ns, synth::model(&case), &cfg);
    let last =
        render::MapName::Endpoints(render::Scope::Cluster, kube_nftproxy::model::Protocol::Tcp, render::PARTS - 1);
    assert!(ruleset.tables[0].declared_size(last).is_some(), "the test needs a map declared with a size");
    let before = generation(&ns);
    let report = diff_in(&ns, &ruleset);
    assert!(!report.differences, "a fresh ruleset differs:\n{}", report.to_text());
    // One element gone by hand: the comparison is not blind at this size either.
    let listed = ns.nft(&["list", "map", "ip", "kube-nftproxy", "service-ips"]);
    let first = listed.lines().find_map(|l| l.trim().strip_prefix("elements = { ")).expect("an element");
    let key = first.split(" comment").next().expect("a key");
    ns.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", &format!("{{ {key} }}")]);
    let after_delete = generation(&ns);
    let report = diff_in(&ns, &ruleset);
    assert_eq!(
        (report.summary.added, report.summary.removed, report.summary.changed),
        (1, 0, 0),
        "{}",
        report.to_text()
    );
    assert_eq!(generation(&ns), after_delete, "the diff wrote to the kernel");
    assert_eq!(after_delete, before + 1);
}

/// A node, three IPv4 services (one with session affinity) and one IPv6 service.
fn objects(web_endpoints: &[&str], with_api: bool, with_extra: bool) -> Vec<Value> {
    let svc = |name: &str, ip: &str, affinity: bool, v6: bool| {
        let mut spec =
            json!({"clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]});
        if affinity {
            spec["sessionAffinity"] = json!("ClientIP");
        }
        if v6 {
            spec["ipFamilies"] = json!(["IPv6"]);
        }
        crate::common::cluster::service(name, spec, json!({}))
    };
    let slice = |name: &str, v6: bool, ips: &[&str]| {
        let eps: Vec<Value> = ips.iter().map(|ip| json!({"addresses": [ip], "nodeName": "node-b"})).collect();
        crate::common::cluster::slice(name, v6, "TCP", eps)
    };
    let mut all = vec![Cluster::node_object()];
    all.extend([svc("web", "172.30.0.40", false, false), slice("web", false, web_endpoints)]);
    all.extend([svc("sticky", "172.30.0.42", true, false), slice("sticky", false, &["10.2.1.2", "10.2.2.2"])]);
    all.extend([svc("six", "fd00:30::40", false, true), slice("six", true, &["fd00:10:2:1::2"])]);
    if with_api {
        all.extend([svc("api", "172.30.0.41", false, false), slice("api", false, &["10.2.3.2"])]);
    }
    if with_extra {
        all.extend([svc("extra", "172.30.0.43", true, false), slice("extra", false, &["10.2.4.2"])]);
    }
    all
}

fn write(dir: &Scratch, objects: &[Value]) {
    let docs: Vec<String> = objects.iter().map(Value::to_string).collect();
    dir.write("cluster.yaml", &docs.join("\n---\n"));
}

fn services(report: &Value) -> Vec<String> {
    let list = report["services"].as_array().expect("services");
    list.iter().map(|s| s["service"].as_str().expect("name").to_string()).collect()
}

/// The (object, name, change) of every change of service `name`.
fn changes_of(report: &Value, name: &str) -> Vec<(String, String, String)> {
    let group = report["services"].as_array().expect("services").iter().find(|s| s["service"] == name);
    let list = group.map(|g| g["changes"].as_array().expect("changes").clone()).unwrap_or_default();
    let field = |c: &Value, k: &str| c[k].as_str().expect("a string field").to_string();
    list.iter().map(|c| (field(c, "object"), field(c, "name"), field(c, "change"))).collect()
}

#[test]
fn manifest_changes_show_under_their_service_and_the_exit_status_says_so() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("kdiff-changes");
    let dir = Scratch::new("kdiff-changes");
    write(&dir, &objects(&["10.2.1.2", "10.2.2.2"], true, false));
    let (model, _) = manifests::load_model(&dir.0, "node-a").expect("manifests");
    render_and_apply(&ns, model, &config(&[]));
    let before = generation(&ns);
    assert_eq!(run_diff(&ns, &dir.0, &[]), (0, String::new()), "right after applying");
    let (code, out) = run_diff(&ns, &dir.0, &["--", "--output", "json"]);
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!((code, &report["differences"], &report["services"]), (0, &json!(false), &json!([])));

    // One endpoint more for web, api gone, a new affinity service.
    write(&dir, &objects(&["10.2.1.2", "10.2.2.2", "10.2.5.2"], false, true));
    let (code, out) = run_diff(&ns, &dir.0, &["--", "--output", "json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(services(&report), ["test/api:http", "test/extra:http", "test/web:http"], "{out}");
    let api = changes_of(&report, "test/api:http");
    assert!(api.iter().all(|c| c.2 == "removed") && !api.is_empty(), "{api:?}");
    assert!(api.contains(&("element".into(), "cluster-endpoints-tcp-0".into(), "removed".into())), "{api:?}");
    let extra = changes_of(&report, "test/extra:http");
    assert!(extra.contains(&("chain".into(), "cluster-test/extra/tcp/http".into(), "added".into())), "{extra:?}");
    // Two endpoints to three: the new endpoint takes slot 2 (the dispatch by endpoint count
    // finds the frontend's new chain; no element of its changes).
    let web = changes_of(&report, "test/web:http");
    assert!(web.contains(&("element".into(), "cluster-endpoints-tcp-2".into(), "added".into())), "{web:?}");
    assert_eq!(web.iter().filter(|c| c.1.starts_with("cluster-endpoints-tcp")).count(), 1, "{web:?}");
    for field in ["summary", "table"] {
        assert!(report.get(field).is_some(), "{field} missing");
    }

    // Text: a header per service, +/- lines.
    let (code, text) = run_diff(&ns, &dir.0, &[]);
    assert_eq!(code, 1);
    assert!(text.contains("test/web:http\n  + ip   cluster-endpoints-tcp-2"), "{text}");
    assert!(text.lines().last().is_some_and(|l| l.ends_with("changed")), "{text}");
    assert_eq!(generation(&ns), before, "the diff wrote to the kernel");
}

#[test]
fn changes_by_hand_show_up_and_trouble_exits_2() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("kdiff-hand");
    let dir = Scratch::new("kdiff-hand");
    write(&dir, &objects(&["10.2.1.2"], true, false));
    let (model, _) = manifests::load_model(&dir.0, "node-a").expect("manifests");
    render_and_apply(&ns, model, &config(&[]));
    ns.nft(&["delete", "element", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0", "{ 172.30.0.41 . 80 . 0 }"]);
    ns.nft(&["add", "rule", "ip", "kube-nftproxy", "services", "counter"]);
    ns.nft(&["add", "element", "ip", "kube-nftproxy", "cluster-ips", "{ 172.30.0.99 }"]);
    let (code, text) = run_diff(&ns, &dir.0, &[]);
    assert_eq!(code, 1, "{text}");
    let want = [
        "test/api:http\n  + ip   cluster-endpoints-tcp-0  172.30.0.41 . 80 . 0 comment \"test/api:http\" : 10.2.3.2 . 8080\n",
        "  ~ ip   chain services\n      - [ counter (not written by kube-nftproxy) ]\n",
        "  - ip   cluster-ips     172.30.0.99\n",
    ];
    for w in want {
        assert!(text.contains(w), "{w:?} not in:\n{text}");
    }

    // A foreign chain named to drive a terminal (nft's JSON input takes any name) is shown
    // with its control characters escaped, in the text and in the log alike.
    let evil =
        r#"{"nftables":[{"add":{"chain":{"family":"ip","table":"kube-nftproxy","name":"evil\u001b[2J\u001b[31m"}}}]}"#;
    let out = ns.run(&["nft", "-j", "-f", "-"], evil);
    assert!(out.status.success(), "nft -j: {}", String::from_utf8_lossy(&out.stderr));
    let (code, text) = run_diff(&ns, &dir.0, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("  - ip   chain evil\\x1b[2J\\x1b[31m\n"), "{text}");
    assert!(!text.contains('\x1b'), "an escape reached the terminal: {text:?}");

    // Without the table, everything is an addition.
    ns.nft(&["delete", "table", "ip6", "kube-nftproxy"]);
    let (_, out) = run_diff(&ns, &dir.0, &["--", "--output", "json"]);
    let report: Value = serde_json::from_str(&out).expect("JSON");
    let table = report["table"].as_array().expect("table");
    assert!(table.iter().any(|c| c["family"] == "ip6" && c["object"] == "table" && c["change"] == "added"), "{out}");
    let six = changes_of(&report, "test/six:http");
    assert!(!six.is_empty() && six.iter().all(|c| c.2 == "added"), "{six:?}");

    // No CAP_NET_ADMIN: nf_tables cannot be read.
    let (code, out) = run_diff(&ns, &dir.0, &["setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin", "--"]);
    assert_eq!((code, out.as_str()), (2, ""));
}
