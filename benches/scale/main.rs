//! The scale benchmark: synthetic clusters, measured in fresh network namespaces against
//! upstream kube-proxy's rule shapes loaded the same way in the same run.
//!
//! `cargo bench --bench scale` runs every case (many minutes: upstream's shapes are slow);
//! `-- --smoke` runs a small one in seconds (CI does). Each case runs in its own process so
//! peak RSS is its own. Results are printed as a table and written to
//! `target/bench/scale.{csv,json}`. Every run also has the daemon follow an API server (the
//! emulator) at 30k services (`api.rs`); `-- --api-only` runs that part alone (results in
//! `target/bench/api.{csv,json}`), `-- --api-idle SECONDS` runs the daemon idle that long
//! against it and reports the requests it made. `-- --health-only` measures health-check node
//! ports alone (`health.rs`). `-- --conntrack` times the conntrack cleanup over tables of 10k
//! and 100k UDP flows (`conntrack.rs`; results in `target/bench/conntrack.json`). Every full run
//! also has the static musl binary and the glibc build each do a first sync at 30k services
//! (`musl.rs`; `-- --musl-only` runs that part alone, `-- --no-musl` leaves it out). Every full
//! run also times `--dry-run --diff` against its own full sync at 30k services (`diff.rs`;
//! `-- --diff-only` runs that part alone), and what a family's refused table costs the other
//! family's first sync (`refused.rs`; `-- --refused-only` runs that part alone), and what the
//! API's JSON and protobuf cost a client per object (`wire.rs`; `-- --wire-only` runs it alone).
//! `-- --api-start-only [N]` times a daemon's start through the API server at 30k and 100k
//! services, or N (`start.rs`). Every full run also measures issue 25's schedulers against
//! their baselines (`schedulers.rs`; `-- --schedulers-only` runs that part alone).

mod api;
mod churn;
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{synth, verify};
mod conntrack;
mod diff;
mod health;
mod latency_pairs;
mod measure;
mod musl;
mod observe;
mod refused;
mod report;
mod runs;
mod schedulers;
mod start;
mod upstream;
mod views;
mod wire;

use common::proxy::Proxy;
use kube_nftproxy::config::Config;
use kube_nftproxy::netlink::Socket;
use kube_nftproxy::nft::{Resync, SyncReport};
use kube_nftproxy::render::{self, Update};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use synth::Case;

#[global_allocator]
static ALLOC: measure::Counting = measure::Counting;

fn cases(smoke: bool) -> Vec<Case> {
    let c = |name: &str, services, endpoints, mix| Case { name: name.into(), services, endpoints, mix };
    if smoke {
        return vec![c("1k x 5", 1000, 5, false)];
    }
    vec![
        c("1k x 5", 1000, 5, false),
        c("10k x 5", 10_000, 5, false),
        c("30k x 5", 30_000, 5, false),
        c("1k x 100", 1000, 100, false),
        c("10k x 5 mix", 10_000, 5, true),
        c("100k x 5", 100_000, 5, false),
    ]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 1e2
}

fn config() -> Config {
    let flags = clap::Parser::parse_from(["kube-nftproxy", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8"]);
    Config::from_flags(&flags).expect("config")
}

/// Applies the proxy's rendered state inside `ns`, timing the sync alone.
fn timed_apply(ns: &common::Netns, proxy: &mut Proxy, update: &Update, resync: Resync) -> (SyncReport, Duration) {
    let (r, took, _) = counted_apply(ns, proxy, update, resync);
    (r, took)
}

/// As `timed_apply`, also counting the kernel transactions the sync committed (the ruleset
/// generation's steps).
fn counted_apply(
    ns: &common::Netns,
    proxy: &mut Proxy,
    update: &Update,
    resync: Resync,
) -> (SyncReport, Duration, u32) {
    let desired = proxy.rendered.as_ref().expect("rendered").ruleset();
    let applier = &mut proxy.applier;
    let generation = || Socket::open().and_then(|mut s| s.generation()).expect("generation");
    let (r, took, txns) = common::net::in_netns(&ns.name, || {
        let before = generation();
        let start = Instant::now();
        let r = applier.sync(desired, update, resync).map_err(|e| e.to_string());
        let took = start.elapsed();
        (r, took, generation().wrapping_sub(before))
    });
    (r.expect("sync"), took, txns)
}

/// Changes the first endpoint of services `from..to` and syncs as the daemon does (the host's
/// addresses read first); returns figures. The parts are timed apart, so the cost of entering
/// the namespace from the benchmark (the daemon runs in it) is left out.
fn partial(ns: &common::Netns, proxy: &mut Proxy, case: &Case, range: std::ops::Range<u32>) -> Value {
    let start = Instant::now();
    for i in range {
        proxy.model.apply(&synth::slice(case, i, 1), "node-a").expect("slice");
    }
    let file = start.elapsed();
    let addresses = common::net::in_netns(&ns.name, || {
        let t = Instant::now();
        proxy.read_host_addresses();
        t.elapsed()
    });
    let t = Instant::now();
    let update = proxy.render();
    let render = t.elapsed();
    let (r, took) = timed_apply(ns, proxy, &update, Resync::Changes);
    let elements = update.elements(proxy.ruleset());
    drop(update);
    let lines = r.script.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
    json!({"total_ms": ms(file + addresses + render + took), "file_ms": ms(file), "addresses_ms": ms(addresses),
           "render_ms": ms(render), "apply_ms": ms(took), "kind": format!("{:?}", r.kind),
           "lines": lines, "bytes": r.bytes, "elements_touched": elements,
           "elements_sent": schedulers::sent_elements(&r.script, ""), "elements_added": schedulers::sent_elements(&r.script, "add")})
}

fn run_case(case: &Case, upstream_limit: Duration) -> Value {
    let mut proxy = Proxy::with_model(config(), synth::model(case)).reading_host_addresses();
    let model_mb = measure::live_heap_mb();
    // A namespace that looks like a node: its addresses reach the model before every sync, as
    // on a real node, so whatever they cost is measured.
    let ns = common::Netns::node_like("bench");
    common::net::in_netns(&ns.name, || proxy.read_host_addresses());
    let t = Instant::now();
    let update = proxy.render();
    let render_ms = ms(t.elapsed());
    let live_mb = measure::live_heap_mb();
    let peaks = std::env::temp_dir().join(format!("knp-bench-nft-{}", std::process::id()));
    measure::record_nft_peaks(&peaks);
    let (first, first_took, first_txns) = counted_apply(&ns, &mut proxy, &update, Resync::Changes);
    let nft_rss_first = measure::take_nft_peak(&peaks);
    let proxy_rss_first = measure::peak_rss_mb(false);
    // The periodic full sync: everything rewritten in place.
    let (_, refresh_took, refresh_txns) = counted_apply(&ns, &mut proxy, &Update::Replaced, Resync::Refresh);
    let nft_rss_refresh = measure::take_nft_peak(&peaks);
    let proxy_rss_refresh = measure::peak_rss_mb(false);
    // The repair after tampering or a failure (in place where the tables exist, see `nft::full`).
    let (repair, repair_took, repair_txns) = counted_apply(&ns, &mut proxy, &Update::Replaced, Resync::Replace);
    let nft_rss_repair = measure::take_nft_peak(&peaks);
    let proxy_rss_repair = measure::peak_rss_mb(false);
    // The one-transaction script is written only now (the syncs above do not need it for a big
    // table), so their peaks are their own.
    let t = Instant::now();
    let script = render::full_sync_script(proxy.ruleset(), "node-a").expect("script");
    let script_ms = ms(t.elapsed());
    let script_mb = script.len() as f64 / 1e6;
    // KNP_BENCH_DUMP=DIR keeps each case's full-sync script, for looking into nft's costs.
    if let Some(dir) = std::env::var_os("KNP_BENCH_DUMP") {
        let file = std::path::Path::new(&dir).join(format!("{}.nft", case.name.replace(' ', "")));
        std::fs::write(file, &script).expect("dump script");
    }
    drop(script);
    let p1 = partial(&ns, &mut proxy, case, 7..8);
    let p100 = partial(&ns, &mut proxy, case, 100..200);
    // After the partial syncs: `explain` is a command of its own, never run in the daemon,
    // and the allocator tidying up what it freed (millions of small blocks) would be timed
    // as the next step's.
    let explain_ms = explain_once(&proxy, case);
    verify::verify(&ns, proxy.ruleset());
    drop(ns);
    let up = |shape| {
        // Upstream's shapes are past the cut-off from 10k services on; 100k would only wait.
        if upstream_limit.is_zero() || case.services > 30_000 {
            return None;
        }
        let ns = common::Netns::new("upstream");
        measure::nft_load(&ns, &upstream::script(case, shape), upstream_limit).map(ms)
    };
    json!({"case": case.name, "services": case.services, "endpoints": case.endpoints,
        "render_ms": render_ms, "explain_ms": explain_ms, "script_ms": script_ms, "script_mb": script_mb, "live_heap_mb": live_mb, "model_heap_mb": model_mb,
        "full_first_ms": ms(first_took), "full_first_kind": format!("{:?}", first.kind), "full_first_mb": first.bytes as f64 / 1e6, "full_repair_ms": ms(repair_took), "full_repair_kind": format!("{:?}", repair.kind),
        "partial_1": p1, "partial_100": p100, "proxy_rss_repair_mb": proxy_rss_repair, "nft_rss_repair_mb": nft_rss_repair,
        "proxy_rss_first_mb": proxy_rss_first, "nft_rss_first_mb": nft_rss_first,
        "full_refresh_ms": ms(refresh_took), "full_first_txns": first_txns, "full_refresh_txns": refresh_txns,
        "full_repair_txns": repair_txns, "proxy_rss_refresh_mb": proxy_rss_refresh, "nft_rss_refresh_mb": nft_rss_refresh,
        "upstream_ga_ms": up(upstream::Shape::Ga), "upstream_newest_ms": up(upstream::Shape::Newest),
        "upstream_limit_s": upstream_limit.as_secs()})
}

/// `explain` over the case's model: a pod of another node to service 3's ClusterIP (in the
/// mix an affinity service, whose cascade it follows); the answer must reach its endpoints.
fn explain_once(proxy: &Proxy, case: &Case) -> f64 {
    let to = format!("{}:80", synth::cluster_ip(3));
    let query = kube_nftproxy::explain::Query::parse("10.250.0.1", &to, "tcp").expect("query");
    let t = Instant::now();
    let answer = kube_nftproxy::explain::explain(&proxy.model, &config(), &query).expect("explain");
    let took = ms(t.elapsed());
    assert_eq!(answer.outcomes.len() as u32, case.endpoints, "explain at {}: {:?}", case.name, answer.outcomes);
    took
}

/// A latency rig whose node holds a table of `services` services (service 0 has one endpoint,
/// the rig's pod).
fn latency_rig(services: u32) -> measure::LatencyRig {
    let case = Case { name: format!("{services} x 5"), services, endpoints: 5, mix: false };
    let mut model = synth::model(&case);
    let single = Case { endpoints: 1, ..case.clone() };
    model.apply(&synth::slice(&single, 0, 0), "node-a").expect("slice");
    let rig = measure::LatencyRig::new();
    let mut proxy = Proxy::with_model(config(), model);
    proxy.sync(&rig.node.name, Resync::Changes).expect("sync");
    rig
}

/// First-packet connect latency through a small and a large table, measured in alternating
/// rounds so drift on the machine hits both alike.
fn run_latency(small: u32, large: u32) -> Value {
    let rigs = [latency_rig(small), latency_rig(large)];
    let dst = format!("{}:80", synth::cluster_ip(0));
    let mut samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _round in 0..10 {
        for (rig, out) in rigs.iter().zip(samples.iter_mut()) {
            out.extend(rig.connect_latencies(&dst, 50));
        }
    }
    let stats = |mut v: Vec<f64>, services: u32| {
        v.sort_by(f64::total_cmp);
        let (median, p99) = (v[v.len() / 2], v[v.len() * 99 / 100]);
        json!({"services": services, "median_us": (median * 10.0).round() / 10.0, "p99_us": (p99 * 10.0).round() / 10.0})
    };
    let [a, b] = samples;
    json!([stats(a, small), stats(b, large)])
}

/// Runs `args` in a child process of this benchmark and returns the JSON it prints last.
fn in_child(args: &[String]) -> Value {
    let out = std::process::Command::new(std::env::current_exe().expect("exe")).args(args).output().expect("child");
    assert!(out.status.success(), "bench child {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).expect("child output")
}

fn main() {
    measure::act_as_nft();
    let all: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; anything else (e.g. `cargo test --all-targets`) runs
    // this target as a test, which must not start a many-minute benchmark.
    if all.iter().any(|a| a == "--report") {
        report::reprint(all.iter().any(|a| a == "--api-only"));
        return;
    }
    let modes = [
        "--bench",
        "--case",
        "--latency",
        "--churn",
        "--api",
        "--api-idle",
        "--health",
        "--conntrack",
        "--conntrack-child",
        "--diff",
        "--diff-only",
        "--refused",
        "--refused-only",
        "--wire",
        "--wire-only",
        "--api-start",
        "--api-start-only",
        "--scheduler-case",
        "--scheduler-latency",
        "--schedulers-only",
    ];
    if !all.iter().any(|a| modes.contains(&a.as_str())) {
        println!("scale benchmark: run it with `cargo bench --bench scale [-- --smoke]`");
        return;
    }
    let args: Vec<String> = all.into_iter().filter(|a| a != "--bench").collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    // --only-ours skips upstream's shapes (a quick look at our own figures).
    let only_ours = args.iter().any(|a| a == "--only-ours");
    // Upstream's shapes take minutes at 30k; a minute's cut-off keeps three runs within half
    // an hour and still shows the ratio (past it, at least the cut-off's).
    let limit = Duration::from_secs(if only_ours {
        0
    } else if smoke {
        30
    } else {
        60
    });
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).and_then(|n| n.parse().ok()).filter(|n| *n > 0).expect("--runs N"),
        None if smoke => 1,
        None => 3,
    };
    if let Some(i) = args.iter().position(|a| a == "--case") {
        let idx: usize = args[i + 1].parse().expect("case index");
        println!("{}", run_case(&cases(smoke)[idx], limit));
        return;
    }
    if let Some(r) = schedulers::child(&args, smoke) {
        println!("{r}");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--conntrack-child") {
        println!("{}", conntrack::child(&args[i + 1], &args[i + 2]));
        return;
    }
    if args.iter().any(|a| a == "--conntrack") {
        if !common::kernel_available() {
            std::process::exit(1);
        }
        let results = conntrack::run(smoke, runs);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        std::fs::create_dir_all(&dir).expect("target/bench");
        std::fs::write(dir.join("conntrack.json"), results.to_string()).expect("write conntrack.json");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--latency") {
        let size = |k: usize| args[i + k].parse().expect("services");
        println!("{}", run_latency(size(1), size(2)));
        return;
    }
    // The daemon's own cases: 30k x 5, or 1k x 5 for --smoke.
    let daemon_case = if smoke { cases(true)[0].clone() } else { cases(false)[2].clone() };
    if args.iter().any(|a| a == "--churn") {
        println!("{}", churn::run(&daemon_case, if smoke { 3 } else { 25 }));
        return;
    }
    if args.iter().any(|a| a == "--api") {
        println!("{}", api::run(&daemon_case, api::Sizes::new(smoke)));
        return;
    }
    if args.iter().any(|a| a == "--diff") {
        println!("{}", diff::run(&daemon_case));
        return;
    }
    if args.iter().any(|a| a == "--refused") {
        println!("{}", refused::run(&daemon_case));
        return;
    }
    if args.iter().any(|a| a == "--wire") {
        println!("{}", wire::run(&daemon_case));
        return;
    }
    let health_services = if smoke { 50 } else { health::SERVICES };
    if args.iter().any(|a| a == "--health") {
        println!("{}", health::run(health_services));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--api-idle") {
        let secs = args.get(i + 1).and_then(|s| s.parse().ok()).expect("--api-idle SECONDS");
        let r = api::idle(&daemon_case, secs);
        eprintln!("{}", serde_json::to_string_pretty(&r).expect("json"));
        println!("{r}");
        return;
    }
    // `--api-start N`: one daemon start at N services through the API server (`start.rs`);
    // `--api-start-only [N]`: `runs` of them at N, or at 30k and 100k.
    if let Some(i) = args.iter().position(|a| a == "--api-start") {
        println!("{}", start::run(args.get(i + 1).and_then(|n| n.parse().ok()).expect("--api-start N")));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--api-start-only") {
        let sizes = args.get(i + 1).and_then(|n| n.parse().ok()).map_or(start::SIZES.to_vec(), |n| vec![n]);
        for n in sizes {
            let all: Vec<Value> = (0..runs).map(|_| in_child(&["--api-start".into(), n.to_string()])).collect();
            start::print(&all);
        }
        return;
    }
    if !common::kernel_available() {
        eprintln!("the scale benchmark needs root, nft and ip netns");
        std::process::exit(1);
    }
    let mut mode: Vec<String> = if smoke { vec!["--smoke".into()] } else { vec![] };
    if only_ours {
        mode.push("--only-ours".into());
    }
    let machine = runs::machine();
    if args.iter().any(|a| a == "--api-only") {
        let mut apis = Vec::new();
        for run in 1..=runs {
            apis.push(in_child(&[mode.clone(), vec!["--api".into()]].concat()));
            eprintln!("run {run}: the daemon following the API server");
        }
        report::finish_api(&runs::combine(&apis), &machine);
        return;
    }
    // The static build takes minutes; --smoke leaves it out unless asked for.
    let statics = if args.iter().any(|a| a == "--no-musl") || (smoke && !args.iter().any(|a| a == "--musl-only")) {
        None
    } else {
        musl::binaries()
    };
    if args.iter().any(|a| a == "--musl-only") {
        let Some(bins) = statics else { return };
        let all: Vec<Value> = (1..=runs).map(|run| musl::run(&daemon_case, &bins, run)).collect();
        musl::print(&runs::combine(&all));
        return;
    }
    if args.iter().any(|a| a == "--diff-only") {
        let all: Vec<Value> = (0..runs).map(|_| in_child(&[mode.clone(), vec!["--diff".into()]].concat())).collect();
        diff::print(&all);
        return;
    }
    if args.iter().any(|a| a == "--schedulers-only") {
        schedulers::print(&(0..runs).map(|_| schedulers::run_once(&mode)).collect::<Vec<_>>());
        return;
    }
    if args.iter().any(|a| a == "--refused-only") {
        let all: Vec<Value> = (0..runs).map(|_| in_child(&[mode.clone(), vec!["--refused".into()]].concat())).collect();
        refused::print(&all);
        return;
    }
    if args.iter().any(|a| a == "--wire-only") {
        let all: Vec<Value> = (0..runs).map(|_| in_child(&[mode.clone(), vec!["--wire".into()]].concat())).collect();
        wire::print(&all);
        return;
    }
    if args.iter().any(|a| a == "--health-only") {
        let runs: Vec<Value> = (0..runs).map(|_| in_child(&[mode.clone(), vec!["--health".into()]].concat())).collect();
        health::print(&runs::combine(&runs));
        return;
    }
    let n = cases(smoke).len();
    let mut per_case: Vec<Vec<Value>> = vec![Vec::new(); n];
    let mut latencies = Vec::new();
    let mut churns = Vec::new();
    let mut apis = Vec::new();
    let mut healths = Vec::new();
    let mut musls = Vec::new();
    let mut diffs = Vec::new();
    let mut refusals = Vec::new();
    let mut wires = Vec::new();
    let mut scheds = Vec::new();
    let large = if smoke { "1000" } else { "30000" };
    // Runs interleave the cases, so a slow spell on the machine does not land on one case.
    for run in 1..=runs {
        for (idx, results) in per_case.iter_mut().enumerate() {
            let mut a = mode.clone();
            a.extend(["--case".to_string(), idx.to_string()]);
            let r = in_child(&a);
            report::print_case(&r, run);
            results.push(r);
        }
        latencies.push(in_child(&[mode.clone(), vec!["--latency".into(), "100".into(), large.into()]].concat()));
        churns.push(in_child(&[mode.clone(), vec!["--churn".into()]].concat()));
        apis.push(in_child(&[mode.clone(), vec!["--api".into()]].concat()));
        eprintln!("run {run}: the daemon following the API server");
        healths.push(in_child(&[mode.clone(), vec!["--health".into()]].concat()));
        diffs.push(in_child(&[mode.clone(), vec!["--diff".into()]].concat()));
        refusals.push(in_child(&[mode.clone(), vec!["--refused".into()]].concat()));
        wires.push(in_child(&[mode.clone(), vec!["--wire".into()]].concat()));
        scheds.push(schedulers::run_once(&mode));
        if let Some(bins) = &statics {
            musls.push(musl::run(&daemon_case, bins, run));
            eprintln!("run {run}: the static binary and the glibc build");
        }
    }
    let results: Vec<Value> = per_case.iter().map(|r| runs::combine(r)).collect();
    let api = runs::combine(&apis);
    report::finish(&results, &runs::combine_lists(&latencies), &runs::combine_lists(&churns), &api, &machine);
    health::print(&runs::combine(&healths));
    diff::print(&diffs);
    refused::print(&refusals);
    wire::print(&wires);
    schedulers::print(&scheds);
    if !musls.is_empty() {
        musl::print(&runs::combine(&musls));
    }
}
