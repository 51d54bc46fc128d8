//! What one family's refusal costs the other: the full sync of a fresh node-like namespace
//! (the baseline, in the same run), then the same cluster's first sync in another while
//! another process owns `table ip6 kube-nftproxy` (the transaction of both refused, IPv4's
//! applied alone), and the refused family's full sync of its own table once it is freed.
//! `-- --refused-only` runs it alone at 30k x 5 (1k x 5 with `--smoke`); a full run runs it
//! once per run.

use super::case::timed_apply;
use super::common::Netns;
use super::common::owner::TableOwner;
use super::common::proxy::Proxy;
use super::synth::{self, Case};
use super::{config, ms};
use kube_nftproxy::model::Family;
use kube_nftproxy::nft::{Resync, SyncKind};
use kube_nftproxy::render::Update;
use serde_json::{Value, json};

/// A proxy over `case` in a fresh node-like namespace, rendered.
fn fresh(case: &Case) -> (Netns, Proxy, Update) {
    let mut proxy = Proxy::with_model(config(), synth::model(case)).reading_host_addresses();
    let ns = Netns::node_like("bench-refused");
    super::common::net::in_netns(&ns.name, || proxy.read_host_addresses());
    let update = proxy.render();
    (ns, proxy, update)
}

/// The three syncs' times; each must have done what it is timed as.
pub fn run(case: &Case) -> Value {
    let (ns, mut proxy, update) = fresh(case);
    let (report, both) = timed_apply(&ns, &mut proxy, &update, Resync::Changes);
    assert!(report.kind == SyncKind::Full && report.refused.is_empty(), "{report:?}");
    drop((ns, proxy, update));

    let (ns, mut proxy, update) = fresh(case);
    let owner = TableOwner::take(&ns, "ip6");
    let (report, alone) = timed_apply(&ns, &mut proxy, &update, Resync::Changes);
    let refused: Vec<Family> = report.refused.iter().map(|(f, _)| *f).collect();
    assert_eq!(refused, [Family::V6], "IPv6 refused, IPv4 applied: {report:?}");
    drop(owner);
    let nothing = proxy.render();
    let (report, healed) = timed_apply(&ns, &mut proxy, &nothing, Resync::Changes);
    assert!(report.refused.is_empty(), "IPv6 went through once freed: {report:?}");
    let r = json!({"case": case.name, "full_sync_ms": ms(both), "refused_first_sync_ms": ms(alone),
                   "freed_family_sync_ms": ms(healed)});
    eprintln!("{}", line(&r));
    r
}

fn line(r: &Value) -> String {
    format!(
        "one family refused at {}: the first sync {} ms with IPv6's table owned by another process \
         (both families {} ms), IPv6's own full sync once freed {} ms",
        r["case"].as_str().unwrap_or("?"),
        r["refused_first_sync_ms"],
        r["full_sync_ms"],
        r["freed_family_sync_ms"]
    )
}

/// Prints the runs' figures, one line each.
pub fn print(runs: &[Value]) {
    for (i, r) in runs.iter().enumerate() {
        println!("run {}: {}", i + 1, line(r));
    }
}
