//! Issue 25's schedulers at scale, each figure beside its baseline from the same run: the
//! mix's first sync with its 1,000 ClientIP-affinity services asking for `sh` instead; a
//! 30k-service node with 1,000 `mh` services against the plain 30k (first sync, peak RSS,
//! and one endpoint of one such service replaced); first-packet latency through a ClusterIP
//! served by `random`, `rr`, `sh` and `mh` on one node. Each case runs in a child process of
//! its own (`--scheduler-case NAME`, `--scheduler-latency`) so its peak RSS is its own.
//! `-- --schedulers-only` runs this part alone; a full run runs it once per run.

use super::case::{partial, timed_apply};
use super::common::net::in_netns;
use super::common::proxy::Proxy;
use super::common::{Netns, Scratch};
use super::synth::{self, Case};
use super::{config, in_child, measure, ms, verify};
use kube_nftproxy::model::{ApiObject, Model, SCHEDULER_ANNOTATION};
use kube_nftproxy::nft::{Resync, SyncKind};
use kube_nftproxy::render::Ruleset;
use serde_json::{Map, Value, json};

mod table;
pub use table::print;

/// The sync cases, in the order each run takes them: the mix as it is (ClientIP), the mix
/// with those services on `sh`, plain 30k x 5, and 30k x 5 with one service in 30 on `mh`.
const CASES: [&str; 4] = ["mix", "mix-sh", "plain", "mh"];

/// The service whose endpoint changes at 30k: an `mh` one in the `mh` case, random in the
/// plain one, so the partial syncs differ by the scheduler alone.
const CHANGED: u32 = 30;

/// The schedulers timed for latency, on services 0 to 3 of the latency node.
const LATENCY: [&str; 4] = ["random", "rr", "sh", "mh"];

/// The case `which` names, at full size or (`--smoke`) small.
fn case_of(which: &str, smoke: bool) -> Case {
    let mix = which.starts_with("mix");
    let services = match (mix, smoke) {
        (true, false) => 10_000,
        (false, false) => 30_000,
        (_, true) => 1000,
    };
    let name = match which {
        "mix" => format!("{}k x 5 mix", services / 1000),
        "mix-sh" => format!("{}k x 5 mix sh", services / 1000),
        "mh" => format!("{}k x 5 mh", services / 1000),
        _ => format!("{}k x 5", services / 1000),
    };
    Case { name, services, endpoints: 5, mix }
}

/// The scheduler case `which` gives service `i` (with its spec as synth wrote it), if any.
fn scheduler_of(which: &str, i: u32, spec: &Value) -> Option<&'static str> {
    match which {
        // The same services the ClientIP mix gives affinity to.
        "mix-sh" if spec["sessionAffinity"] == "ClientIP" => Some("sh"),
        "mh" if i.is_multiple_of(30) => Some("mh"),
        _ => None,
    }
}

/// Service `i` of `case` asking for `scheduler` by annotation, without session affinity
/// (which would take precedence).
fn annotated(case: &Case, i: u32, scheduler: Option<&str>) -> Value {
    let mut svc = synth::service_json(case, i);
    if let Some(s) = scheduler {
        let mut notes = Map::new();
        notes.insert(SCHEDULER_ANNOTATION.into(), json!(s));
        svc["metadata"]["annotations"] = Value::Object(notes);
        svc["spec"].as_object_mut().map(|spec| spec.remove("sessionAffinity"));
    }
    svc
}

/// A model as `synth::model` builds it, each service asking for `pick(i, spec)`'s scheduler.
fn model(case: &Case, pick: impl Fn(u32, &Value) -> Option<&'static str>) -> Model {
    let mut m = Model::default();
    m.apply(&ApiObject::Node(Box::new(serde_json::from_value(synth::node_json()).expect("node"))), "node-a")
        .expect("node");
    for i in 0..case.services {
        let scheduler = pick(i, &synth::service_json(case, i)["spec"]);
        let svc = annotated(case, i, scheduler);
        m.apply(&ApiObject::Service(Box::new(serde_json::from_value(svc).expect("service"))), "node-a")
            .expect("service");
        m.apply(&synth::slice(case, i, 0), "node-a").expect("slice");
    }
    m
}

/// Fails unless the rendered state serves what case `which` asked for, so no figure is taken
/// of a ruleset that quietly fell back to `random` or kept affinity.
fn check(which: &str, rules: &Ruleset) {
    let t = &rules.tables[0];
    let hashed = t.chains.values().any(|body| body.contains("jhash"));
    let affinity = !t.affinity_maps.is_empty();
    let (want_hash, want_affinity) = match which {
        "mix" => (false, true),
        "mix-sh" | "mh" => (true, false),
        _ => (false, false),
    };
    assert_eq!((hashed, affinity), (want_hash, want_affinity), "{which}: (jhash chains, affinity sets)");
    if which == "mh" {
        // Maglev's table: 101 slots for each of the 1,000 frontends.
        assert!(t.chains.values().any(|body| body.contains("mod 101")), "mh: no 101-slot lb chain");
    }
}

/// One case in this process (`--scheduler-case NAME`): the first sync's time and the
/// process's peak RSS, and at 30k one endpoint of service `CHANGED` replaced.
pub fn case(which: &str, smoke: bool) -> Value {
    let case = case_of(which, smoke);
    let built = model(&case, |i, spec| scheduler_of(which, i, spec));
    let mut proxy = Proxy::with_model(config(), built).reading_host_addresses();
    let ns = Netns::node_like("bench-sched");
    in_netns(&ns.name, || proxy.read_host_addresses());
    let update = proxy.render();
    check(which, proxy.ruleset());
    // Kept to the end: the partial syncs' `nft` still appends to it.
    let scratch = Scratch::new("bench-sched-nft");
    let peaks = scratch.0.join("peaks");
    measure::record_nft_peaks(&peaks);
    let (report, took) = timed_apply(&ns, &mut proxy, &update, Resync::Changes);
    assert_eq!(report.kind, SyncKind::Full, "{which}: the first sync");
    drop(update);
    let (proxy_mb, nft_mb) = (measure::peak_rss_mb(false), measure::take_nft_peak(&peaks));
    let mut r = json!({"case": case.name, "first_sync_ms": ms(took), "peak_rss_mb": proxy_mb + nft_mb,
                       "proxy_rss_mb": proxy_mb, "nft_rss_mb": nft_mb, "elements": proxy.ruleset().element_count()});
    if !case.mix {
        // The first change after a first sync costs this process some 20 ms more, whatever it
        // is (both cases alike): the benchmark's own slice object built in the allocator's
        // first steps after the sync's large frees, and its render; the kernel's part is as
        // ever. A random service's, reported apart, so the figures below are a node's in use.
        r["first_change"] = partial(&ns, &mut proxy, &case, 1..2);
        let one = partial(&ns, &mut proxy, &case, CHANGED..CHANGED + 1);
        assert_eq!(one["kind"], "Partial", "{which}: one endpoint changed");
        r["one_endpoint"] = one;
        r["one_endpoint_removed"] = removed(&ns, &mut proxy, &case, CHANGED + 30);
    }
    verify::verify(&ns, proxy.ruleset());
    eprintln!("{}: first sync {} ms, peak RSS {:.0} MB", case.name, r["first_sync_ms"], proxy_mb + nft_mb);
    r
}

/// The partial sync after service `i` lost its last endpoint (`i` is an mh service in the
/// mh case): what Maglev's table promises to keep small, as opposed to a replacement, where
/// the new endpoint also takes its share of slots from the others.
fn removed(ns: &Netns, proxy: &mut Proxy, case: &Case, i: u32) -> Value {
    let mut slice = synth::slice_json(case, i, 0);
    slice["endpoints"].as_array_mut().and_then(Vec::pop).expect("an endpoint");
    let t = std::time::Instant::now();
    proxy
        .model
        .apply(&ApiObject::EndpointSlice(Box::new(serde_json::from_value(slice).expect("slice"))), "node-a")
        .expect("slice");
    let file_ms = ms(t.elapsed());
    // No slice of its own to file: the render and sync of what the model holds, timed as ever.
    let mut r = partial(ns, proxy, case, 0..0);
    assert_eq!(r["kind"], "Partial", "one endpoint removed");
    r["file_ms"] = json!(file_ms);
    r["total_ms"] = json!(r["total_ms"].as_f64().unwrap_or(f64::NAN) + file_ms);
    r
}

/// How many elements a partial sync's script adds or deletes (a changed value is both; `op`
/// "add" or "delete" counts one kind, "" both): what the kernel was sent, where the update's
/// own count is every element the render touched, changed or not.
pub fn sent_elements(script: &str, op: &str) -> usize {
    let ops = script.lines().filter(|l| {
        let kind = l.split_whitespace().take(2).collect::<Vec<_>>();
        kind.get(1) == Some(&"element") && (op.is_empty() || kind[0] == op)
    });
    // Elements are separated by ", " and hold no comma themselves (owners' comments neither).
    ops.map(|l| l.matches(", ").count() + 1).sum()
}

/// The latency node's model: `services` plain services, the first four asking for the
/// schedulers of `LATENCY`, each with service 0's five endpoints (the rig's pod holds them).
fn latency_model(services: u32) -> Model {
    let case = Case { name: format!("{services} x 5"), services, endpoints: 5, mix: false };
    let mut m = model(&case, |i, _| LATENCY.get(i as usize).copied());
    for k in 1..LATENCY.len() as u32 {
        let mut slice = synth::slice_json(&case, 0, 0);
        slice["metadata"]["name"] = json!(format!("svc-{k}-1"));
        slice["metadata"]["labels"]["kubernetes.io/service-name"] = json!(format!("svc-{k}"));
        let slice = ApiObject::EndpointSlice(Box::new(serde_json::from_value(slice).expect("slice")));
        m.apply(&slice, "node-a").expect("slice");
    }
    m
}

/// `--scheduler-latency`: new TCP connections through the node to each scheduler's
/// ClusterIP, in alternating rounds so drift on the machine hits all alike; each median also
/// as a ratio to random's.
pub fn latency(smoke: bool) -> Value {
    let rig = measure::LatencyRig::new();
    // Service 0's endpoints: 10.64.0.1 (the rig's pod) to .5.
    for e in 1..5 {
        rig.add_pod_address(&synth::endpoint_ip(0, e, 5, 0));
    }
    let mut proxy = Proxy::with_model(config(), latency_model(if smoke { 100 } else { 1000 }));
    let report = proxy.sync(&rig.node.name, Resync::Changes).expect("sync");
    assert_eq!(report.kind, SyncKind::Full);
    check("mh", proxy.ruleset());
    let dst = |k: usize| format!("{}:80", synth::cluster_ip(k as u32));
    // The first connection to each endpoint waits for the neighbour's address; not timed.
    for k in 0..LATENCY.len() {
        rig.connect_latencies(&dst(k), 20);
    }
    let mut samples = vec![Vec::new(); LATENCY.len()];
    // Short blocks, each round starting with another scheduler: a slow or fast spell of the
    // machine (the latency is bimodal here) then falls on all alike.
    let n = LATENCY.len();
    for round in 0..40 {
        for k in (0..n).map(|j| (j + round) % n) {
            samples[k].extend(rig.connect_latencies(&dst(k), 25));
        }
    }
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let mut r = Map::new();
    for ((name, v), median) in LATENCY.iter().zip(&samples).zip(&medians) {
        let p99 = v[v.len() * 99 / 100];
        let round = |x: f64| (x * 10.0).round() / 10.0;
        let vs = (median / medians[0] * 1000.0).round() / 1000.0;
        r.insert((*name).into(), json!({"median_us": round(*median), "p99_us": round(p99), "vs_random": vs}));
    }
    Value::Object(r)
}

/// Runs a child mode of this part when `args` asks for one; returns what it printed.
pub fn child(args: &[String], smoke: bool) -> Option<Value> {
    if let Some(i) = args.iter().position(|a| a == "--scheduler-case") {
        return Some(case(args.get(i + 1).expect("--scheduler-case NAME"), smoke));
    }
    args.iter().any(|a| a == "--scheduler-latency").then(|| latency(smoke))
}

/// One run: every case in a child of its own, then the latency child; with each figure's
/// ratio to its baseline in this run.
pub fn run_once(mode: &[String]) -> Value {
    let mut r = Map::new();
    for which in CASES {
        let args = [mode.to_vec(), vec!["--scheduler-case".into(), which.into()]].concat();
        r.insert(which.into(), in_child(&args));
    }
    r.insert("latency".into(), in_child(&[mode.to_vec(), vec!["--scheduler-latency".into()]].concat()));
    let ratio = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => json!((a / b * 1000.0).round() / 1000.0),
        _ => Value::Null,
    };
    let at = |c: &str, k: &str| r[c][k].clone();
    let ratios = json!({
        "sh_vs_clientip_sync": ratio(&at("mix-sh", "first_sync_ms"), &at("mix", "first_sync_ms")),
        "mh_vs_plain_sync": ratio(&at("mh", "first_sync_ms"), &at("plain", "first_sync_ms")),
        "mh_vs_plain_rss": ratio(&at("mh", "peak_rss_mb"), &at("plain", "peak_rss_mb")),
    });
    r.insert("ratios".into(), ratios);
    Value::Object(r)
}
