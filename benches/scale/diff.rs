//! What `--dry-run --diff` costs: a cluster applied by a full sync in a fresh node-like
//! namespace (the sync's time is the baseline, measured in the same run), then both tables
//! read back over netlink and compared with the same desired state. `-- --diff-only` runs it
//! alone at 30k x 5 (1k x 5 with `--smoke`); a full run runs it once per run.

use super::case::timed_apply;
use super::common::Netns;
use super::common::net::in_netns;
use super::common::proxy::Proxy;
use super::synth::{self, Case};
use super::{config, measure, ms};
use kube_nftproxy::nft::{Resync, SyncKind, kdiff};
use serde_json::{Value, json};
use std::time::Instant;

/// Applies `case`, then times reading and comparing; the comparison must find nothing.
pub fn run(case: &Case) -> Value {
    let mut proxy = Proxy::with_model(config(), synth::model(case)).reading_host_addresses();
    let ns = Netns::node_like("bench-diff");
    in_netns(&ns.name, || proxy.read_host_addresses());
    let update = proxy.render();
    let (report, sync) = timed_apply(&ns, &mut proxy, &update, Resync::Changes);
    assert_eq!(report.kind, SyncKind::Full);
    drop(update);
    let desired = proxy.ruleset();
    let before_mb = measure::live_heap_mb();
    measure::track_peak();
    let (found, took) = in_netns(&ns.name, || {
        let start = Instant::now();
        let found = kdiff::against_kernel(desired, "node-a").expect("diff");
        (found, start.elapsed())
    });
    let peak_mb = measure::tracked_peak_mb() - before_mb;
    assert!(!found.differences, "a fresh ruleset differs:\n{}", found.to_text());
    let r = json!({"case": case.name, "full_sync_ms": ms(sync), "diff_ms": ms(took),
                   "diff_per_sync": (took.as_secs_f64() / sync.as_secs_f64() * 100.0).round() / 100.0,
                   "diff_heap_peak_mb": (peak_mb * 10.0).round() / 10.0,
                   "process_peak_rss_mb": measure::peak_rss_mb(false).round()});
    eprintln!("{}", line(&r));
    r
}

fn line(r: &Value) -> String {
    format!(
        "--dry-run --diff at {}: read and compared in {} ms (the full sync {} ms, ratio {}), \
         heap peak {} MB above the desired state's, process peak RSS {} MB",
        r["case"].as_str().unwrap_or("?"),
        r["diff_ms"],
        r["full_sync_ms"],
        r["diff_per_sync"],
        r["diff_heap_peak_mb"],
        r["process_peak_rss_mb"]
    )
}

/// Prints the runs' figures, one line each.
pub fn print(runs: &[Value]) {
    for (i, r) in runs.iter().enumerate() {
        println!("run {}: {}", i + 1, line(r));
    }
}
