//! The daemon's memory under churn: the real binary on a node-like namespace follows a
//! manifest of a whole cluster rewritten again and again (every EndpointSlice changed each
//! time), once syncing and once with every sync failing (another process owns both tables), so
//! changes keep coming while none is applied. Its resident memory must stay flat in both.

use super::common::daemon::{Daemon, wait_for};
use super::common::owner::TableOwner;
use super::common::{Netns, Scratch};
use super::observe::{is_sync, rss_mb};
use super::synth::{self, Case};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Writes generation `generation` of `case` as one JSON list, atomically (a rename).
pub fn write_manifest(case: &Case, generation: u32, path: &Path) {
    let tmp = path.with_extension("tmp");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("manifest"));
    write!(out, "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{}", synth::node_json()).expect("write");
    for i in 0..case.services {
        write!(out, ",{},{}", synth::service_json(case, i), synth::slice_json(case, i, generation)).expect("write");
    }
    write!(out, "]}}").expect("write");
    out.into_inner().expect("flush").sync_all().expect("sync");
    std::fs::rename(&tmp, path).expect("rename");
}

/// One scenario: `rewrites` new generations, one every `every`; every sync failing when
/// `stuck`. Returns the daemon's resident memory before, at most and after.
fn scenario(case: &Case, rewrites: u32, every: Duration, stuck: bool) -> Value {
    let dir = Scratch::new("churn");
    let manifest = dir.0.join("cluster.json");
    write_manifest(case, 0, &manifest);
    let ns = Netns::node_like("churn");
    // Both tables: with one owned, the other family's syncs would go through.
    let owners = stuck.then(|| [TableOwner::take(&ns, "ip"), TableOwner::take(&ns, "ip6")]);
    let d = Daemon::start(&ns, &manifest, &[], &[]);
    let started = if stuck { "sync failed" } else { " sync" };
    let ready = wait_for(Duration::from_secs(60), || d.logged().contains(started));
    assert!(ready.is_some(), "the daemon never tried a sync:\n{}", d.logged());
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_mb(d.pid());
    let mut most = before;
    for generation in 1..=rewrites {
        write_manifest(case, generation, &manifest);
        std::thread::sleep(every);
        most = most.max(rss_mb(d.pid()));
    }
    std::thread::sleep(Duration::from_secs(3));
    let after = rss_mb(d.pid());
    let syncs = d.logged().lines().filter(|l| is_sync(l)).count();
    d.stop();
    drop(owners);
    drop(dir);
    json!({"scenario": if stuck { "syncs failing" } else { "syncing" }, "rewrites": rewrites,
           "rss_before_mb": before, "rss_most_mb": most.max(after), "rss_after_mb": after, "syncs": syncs})
}

/// Both scenarios for `case`.
pub fn run(case: &Case, rewrites: u32) -> Value {
    let every = Duration::from_millis(600);
    json!([scenario(case, rewrites, every, false), scenario(case, rewrites, every, true)])
}
