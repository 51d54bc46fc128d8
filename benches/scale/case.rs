//! One case of the scale table, measured in this process (`--case N`): the first, refresh and
//! repair full syncs with their peak RSS, partial syncs of 1 and 100 services, `explain`, and
//! upstream's shapes loaded into an empty namespace for comparison.

use super::common::{self, proxy::Proxy, synth, verify};
use super::{config, measure, ms, schedulers, upstream};
use kube_nftproxy::netlink::Socket;
use kube_nftproxy::nft::{Resync, SyncReport};
use kube_nftproxy::render::{self, Update};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use synth::Case;

/// Applies the proxy's rendered state inside `ns`, timing the sync alone.
pub fn timed_apply(ns: &common::Netns, proxy: &mut Proxy, update: &Update, resync: Resync) -> (SyncReport, Duration) {
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
pub fn partial(ns: &common::Netns, proxy: &mut Proxy, case: &Case, range: std::ops::Range<u32>) -> Value {
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

/// Case `case` in this process (`--case N`): its figures as one JSON object, upstream's shapes
/// loaded with `upstream_limit` as their cut-off (zero: not loaded).
pub fn run_case(case: &Case, upstream_limit: Duration) -> Value {
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
    // Kept to the end: the partial syncs' `nft` still appends to it.
    let scratch = common::Scratch::new("bench-nft");
    let peaks = scratch.0.join("peaks");
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
    let up = |shape| upstream_ms(case, shape, upstream_limit);
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

/// The time upstream's `shape` of `case` takes to load into an empty namespace, in ms; `None`
/// past `limit`, or when not loaded.
fn upstream_ms(case: &Case, shape: upstream::Shape, limit: Duration) -> Option<f64> {
    // Upstream's shapes are past the cut-off from 10k services on; 100k would only wait.
    if limit.is_zero() || case.services > 30_000 {
        return None;
    }
    let ns = common::Netns::new("upstream");
    measure::nft_load(&ns, &upstream::script(case, shape), limit).map(ms)
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
