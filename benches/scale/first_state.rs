//! A daemon's first state at 30k services (1k with `--smoke`) by LIST and by WatchList, in
//! protobuf and in JSON, from one emulator in the same run: four starts of the real binary
//! with default flags but for the WatchList gate and the content type, each on a node whose
//! tables were flushed. Measured for each: the bytes the API server sent from the daemon's
//! spawn to its first sync (the emulator counts what its API listener writes, HTTP before TLS),
//! the daemon's resident memory at its highest over that time (`VmHWM`, and `VmRSS` sampled
//! every 2 ms, as memory jemalloc hands back with `madvise` may not raise `VmHWM`), and the
//! time to the first sync. LIST is the baseline. `-- --first-state-only` runs it alone, three
//! runs by default.

use super::common::daemon::Daemon;
use super::common::emulator::{Emulator, tls_agent};
use super::common::{Netns, Scratch};
use super::observe::*;
use super::synth::Case;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where the emulator listens: the gateway's address on the node's uplink.
const API_LISTEN: &str = "192.168.1.254:6443";

/// How long a first sync may take before the run is given up.
const FIRST_SYNC_LIMIT: Duration = Duration::from_secs(180);

/// The four ways, each a key of the results: how the state is read, and in what.
const WAYS: [(&str, &str, &str); 4] = [
    ("list_protobuf", "false", "application/vnd.kubernetes.protobuf"),
    ("watchlist_protobuf", "true", "application/vnd.kubernetes.protobuf"),
    ("list_json", "false", "application/json"),
    ("watchlist_json", "true", "application/json"),
];

/// Has the emulator encode every Service's and EndpointSlice's protobuf message once, as a
/// real server's watch cache has its objects at hand, so that the first protobuf start does
/// not time the emulator's encoding. From the node's namespace.
fn warm_up(ns: &Netns, emu: &Emulator) {
    super::common::net::in_netns(&ns.name, || {
        let agent = tls_agent(&emu.tls_dir, true);
        for path in ["/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"] {
            let url = format!("{}{path}?resourceVersion=0", emu.api);
            let resp = agent.get(url).header("Accept", "application/vnd.kubernetes.protobuf").call().expect("warm-up");
            resp.into_body().with_config().limit(1 << 30).read_to_vec().expect("warm-up body");
        }
    });
}

/// The highest of `pid`'s `VmRSS` sampled every 2 ms until `stop`, in MB.
fn sample_rss(pid: i32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        let mut most: f64 = 0.0;
        while !stop.load(Ordering::Relaxed) {
            let now = rss_mb(pid);
            if now.is_finite() {
                most = most.max(now);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        most
    })
}

/// One start: the bytes sent up to the first sync, the peak memory, the time to it.
fn start(ns: &Netns, emu: &Emulator, gate: &str, media: &str) -> Value {
    let _ = ns.run(&["nft", "flush", "ruleset"], "");
    let flags = [format!("--feature-gates=WatchListClient={gate}"), format!("--kube-api-content-type={media}")];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sent = || emu.stats()["bytesSent"].as_u64().unwrap_or(0);
    let before = sent();
    let spawned = Instant::now();
    let d = Daemon::start_api(ns, &emu.kubeconfig(), &flags, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(d.pid(), stop.clone());
    let log = LogTail::start(&d.log);
    let Some((synced, line)) = log.wait(0, FIRST_SYNC_LIMIT, is_sync) else {
        panic!("the daemon never synced:\n{}", d.logged());
    };
    let bytes = sent() - before;
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().expect("sampler").max(peak_rss_of(d.pid()));
    let streamed = log.lines().iter().any(|(_, l)| l.contains(", by WatchList)"));
    assert_eq!(streamed, gate == "true", "gate {gate}: not the way asked for:\n{}", d.logged());
    eprintln!("first-state: WatchList={gate} {media}: {bytes} bytes, peak {peak} MB: {}", line.trim());
    d.stop();
    json!({"bytes_mb": round2(bytes as f64 / 1e6), "peak_rss_mb": peak, "first_sync_ms": ms_between(spawned, synced)})
}

/// One run at `case`: each way once; one JSON object.
pub fn run(case: &Case) -> Value {
    let dir = Scratch::new("firststate");
    let manifest = dir.0.join("cluster.json");
    super::churn::write_manifest(case, 0, &manifest);
    let ns = Netns::node_like("firststate");
    let emu = Emulator::start(Some(&ns.gateway().name), API_LISTEN, Some(&manifest), &[]);
    warm_up(&ns, &emu);
    let mut out = json!({"services": case.services, "endpoints": case.endpoints});
    for (key, gate, media) in WAYS {
        out[key] = start(&ns, &emu, gate, media);
    }
    out
}

/// Prints runs combined: median (lowest–highest) of each figure, LIST first as the baseline.
pub fn print(runs: &[Value]) {
    let c = super::runs::combine(runs);
    let cell = |key: &str, figure: &str| super::runs::spread(&c, &[key, figure]);
    println!(
        "first state at {} services ({} runs; median (lowest–highest); LIST is the baseline):",
        c["median"]["services"].as_f64().unwrap_or(0.0) as u64,
        runs.len()
    );
    println!("| first state | bytes the API server sent, MB | daemon peak RSS, MB | first sync, ms |");
    println!("|---|---|---|---|");
    let names = ["LIST, protobuf", "WatchList, protobuf", "LIST, JSON", "WatchList, JSON"];
    for ((key, _, _), name) in WAYS.iter().zip(names) {
        println!(
            "| {name} | {} | {} | {} |",
            cell(key, "bytes_mb"),
            cell(key, "peak_rss_mb"),
            cell(key, "first_sync_ms")
        );
    }
    super::runs::write("first-state.json", &json!({"combined": c, "runs": runs}));
}
