//! The daemon's memory under churn: the real binary on a node-like namespace follows a
//! manifest of a whole cluster rewritten again and again (every EndpointSlice changed each
//! time), once with a working `nft` and once with an `nft` that hangs, so the sync thread is
//! stuck while changes keep coming. Its resident memory must stay flat in both.

use super::common::Netns;
use super::common::daemon::{Daemon, fake_nft, wait_for};
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

/// One scenario: `rewrites` new generations, one every `every`; the sync thread stuck in a
/// hung `nft` when `stuck`. Returns the daemon's resident memory before, at most and after.
fn scenario(case: &Case, rewrites: u32, every: Duration, stuck: bool) -> Value {
    let dir = std::env::temp_dir().join(format!("knp-churn-{}-{stuck}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let manifest = dir.join("cluster.json");
    write_manifest(case, 0, &manifest);
    let ns = Netns::node_like("churn");
    // The shared stand-in answers `--version`, which the daemon asks at start, and hangs otherwise.
    let hung = fake_nft(&dir, &format!("touch {}/ran\nexec sleep 600", dir.display()));
    let env: Vec<(&str, &str)> = if stuck { vec![("NFT", hung.to_str().expect("path"))] } else { vec![] };
    let d = Daemon::start(&ns, &manifest, &[], &env);
    let started = if stuck { dir.join("ran") } else { dir.join("never") };
    let ready =
        wait_for(Duration::from_secs(60), || if stuck { started.exists() } else { d.logged().contains(" sync") });
    assert!(ready.is_some(), "the daemon never synced:\n{}", d.logged());
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
    let _ = std::fs::remove_dir_all(&dir);
    json!({"scenario": if stuck { "sync stuck" } else { "syncing" }, "rewrites": rewrites,
           "rss_before_mb": before, "rss_most_mb": most.max(after), "rss_after_mb": after, "syncs": syncs})
}

/// Both scenarios for `case`.
pub fn run(case: &Case, rewrites: u32) -> Value {
    let every = Duration::from_millis(600);
    json!([scenario(case, rewrites, every, false), scenario(case, rewrites, every, true)])
}
