//! A daemon's start through the API server at scale: the emulator, loaded with N services ×
//! 5 endpoints, listens in a node-like namespace's gateway, and the real binary with default
//! flags (protobuf; the first list at resourceVersion=0 comes whole from the watch cache)
//! follows it from spawn to its first sync done; then a second daemon restarts over the
//! rules the first left.
//!
//! Measured, from the daemon's log lines as they appear: spawn to "following the API
//! server" (the process's own start), each resource's list (as the daemon logs it, and when
//! its line appeared), every source listed, the wait from then to the sync's start (the
//! last objects filed into the model), the sync's render and apply; and the daemon's
//! resident memory after the first sync and at its highest; for the restart, when the read
//! of our tables ahead of its first sync ended too. The emulator is warmed first
//! (see `warm_up`). `-- --api-start N` runs it once
//! at N services; `-- --api-start-only` three times each at 30k and 100k.

use super::common::daemon::Daemon;
use super::common::emulator::{Emulator, tls_agent};
use super::common::{Netns, Scratch};
use super::observe::*;
use super::synth::Case;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Where the emulator listens: the gateway's address on the node's uplink.
const API_LISTEN: &str = "192.168.1.254:6443";

/// The sizes `--api-start-only` measures by default.
pub const SIZES: [u32; 2] = [30_000, 100_000];

/// How long the first sync may take before the run is given up.
pub(super) const FIRST_SYNC_LIMIT: Duration = Duration::from_secs(180);

/// The lists the daemon reads first, in protobuf as it asks for them.
const WARMED: [&str; 2] = ["/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"];

/// Lists Services and EndpointSlices once in protobuf, as the daemon will: the emulator
/// encodes each object's message for the first protobuf client and keeps it (a real server's
/// watch cache has its objects at hand), so the daemon's start is not timed with the
/// emulator's first encoding in it. From the node's namespace, where the daemon reaches the
/// emulator. Returns how long that took (ms).
fn warm_up(ns: &Netns, emu: &Emulator) -> f64 {
    super::common::net::in_netns(&ns.name, || warm_up_here(emu))
}

fn warm_up_here(emu: &Emulator) -> f64 {
    let agent = tls_agent(&emu.tls_dir, true);
    let t = Instant::now();
    for path in WARMED {
        let url = format!("{}{path}?limit=500&resourceVersion=0", emu.api);
        let resp = agent.get(url).header("Accept", "application/vnd.kubernetes.protobuf").call().expect("warm-up list");
        let body = resp.into_body().with_config().limit(1 << 30).read_to_vec().expect("warm-up body");
        assert!(body.starts_with(b"k8s\0"), "the emulator answered {path} in another format");
    }
    round2(t.elapsed().as_secs_f64() * 1e3)
}

/// When the first line containing `what` appeared, in ms after `spawned`.
fn at(lines: &[(Instant, String)], spawned: Instant, what: &str) -> Option<f64> {
    lines.iter().find(|(_, l)| l.contains(what)).map(|(t, _)| ms_between(spawned, *t))
}

/// A node-like namespace and the emulator in its gateway, loaded with N services × 5
/// endpoints and warmed (see `warm_up`): where a daemon is started through the API server.
pub(super) struct Stage {
    /// The API server (dropped first: it runs in the namespace's gateway).
    pub emu: Emulator,
    /// The manifest's directory.
    _dir: Scratch,
    /// The node's namespace.
    pub ns: Netns,
    /// What the emulator serves.
    pub case: Case,
    /// How long warming the emulator took (ms); `None` when left cold.
    pub warm_ms: Option<f64>,
}

impl Stage {
    /// The stage for `services` services, its namespace and scratch directory named by `tag`.
    pub(super) fn new(services: u32, tag: &str) -> Stage {
        let case = Case { name: format!("{}k x 5", services / 1000), services, endpoints: 5, mix: false };
        let dir = Scratch::new(tag);
        let manifest = dir.0.join("cluster.json");
        super::churn::write_manifest(&case, 0, &manifest);
        let ns = Netns::node_like(tag);
        let t = Instant::now();
        let emu = Emulator::start(Some(&ns.gateway().name), API_LISTEN, Some(&manifest), &[]);
        eprintln!("{tag}: emulator ready with {services} services in {:?}", t.elapsed());
        // KNP_BENCH_COLD=1 leaves the emulator cold, its first encoding in the daemon's lists.
        let warm_ms = std::env::var_os("KNP_BENCH_COLD").is_none().then(|| warm_up(&ns, &emu));
        Stage { emu, _dir: dir, ns, case, warm_ms }
    }

    /// Starts a daemon with default flags following the emulator.
    pub(super) fn daemon(&self) -> Daemon {
        self.daemon_with(&[])
    }

    /// As [`Stage::daemon`], with `env` set for it (a log filter).
    pub(super) fn daemon_with(&self, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_api(&self.ns, &self.emu.kubeconfig(), &[], env)
    }

    /// Starts a daemon (with `env`) and waits for its first sync; `what` names it if it never
    /// syncs.
    fn synced(&self, env: &[(&str, &str)], what: &str) -> Synced {
        let spawned = Instant::now();
        let d = self.daemon_with(env);
        let log = LogTail::start(&d.log);
        let Some((at, line)) = log.wait(0, FIRST_SYNC_LIMIT, is_sync) else {
            panic!("{what} never synced:\n{}", d.logged());
        };
        let start_ms = ms_between(spawned, at);
        eprintln!("api-start: {what} synced {start_ms} ms after spawning: {}", line.trim());
        Synced { d, log, spawned, start_ms, line }
    }
}

/// A daemon that has done its first sync: its log, when it was spawned, spawn to synced
/// (ms), and the sync's line.
struct Synced {
    d: Daemon,
    log: LogTail,
    spawned: Instant,
    start_ms: f64,
    line: String,
}

/// One start at `services` services × 5 endpoints; one JSON object.
pub fn run(services: u32) -> Value {
    let stage = Stage::new(services, "startbench");
    let Synced { d, log, spawned, start_ms, line } = stage.synced(&[], "the daemon");
    let rss_synced = rss_mb(d.pid());
    std::thread::sleep(Duration::from_secs(1));
    let (rss_after, rss_peak) = (rss_mb(d.pid()), peak_rss_of(d.pid()));
    let lines = log.lines();
    let sync = sync_figures(&line);
    let all_listed = at(&lines, spawned, "every source has listed");
    // The sync began `took` before its line; from every source listed to then, the sync thread
    // filed what was still waiting.
    let sync_began = sync["took_ms"].as_f64().map(|took| start_ms - took);
    let filing = all_listed.zip(sync_began).map(|(l, b)| round2(b - l));
    let log_text = d.stop();
    let warnings: Vec<&str> = log_text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    let restart = restart(&stage);
    let (endpoints, warm_ms) = (stage.case.endpoints, stage.warm_ms);
    drop(stage);
    json!({"services": services, "endpoints": endpoints, "start_ms": start_ms, "restart": restart,
           "following_ms": at(&lines, spawned, "following the API server"),
           "listed": listings(&lines, spawned), "all_listed_ms": all_listed,
           "filing_ms": filing, "render_ms": sync["render_ms"], "apply_ms": sync["apply_ms"],
           "sync": sync, "rss_synced_mb": rss_synced, "rss_after_1s_mb": rss_after, "rss_peak_mb": rss_peak,
           "warnings": warnings.len(), "emulator_warm_up_ms": warm_ms})
}

/// A second daemon started over the rules the first left (it stopped, its tables stay), as
/// after an upgrade: spawn to its first sync, and where the time went.
fn restart(stage: &Stage) -> Value {
    let Synced { d, log, spawned, start_ms, line } = stage.synced(&[("RUST_LOG", READ_AHEAD_LOG)], "the restart");
    let lines = log.lines();
    let sync = sync_figures(&line);
    d.stop();
    let read_ahead = at(&lines, spawned, "read our tables ahead");
    // The first render waits for the read (it keeps the slots the tables hold): its logged
    // render time includes that wait, so the sync's own part is what followed the read.
    let after_read = read_ahead.map(|r| round2(start_ms - r));
    json!({"start_ms": start_ms, "all_listed_ms": at(&lines, spawned, "every source has listed"),
           "read_ahead_ms": read_ahead, "after_read_ms": after_read, "sync": sync})
}

/// The restart's log filter: the read ahead of its first sync logs at debug.
const READ_AHEAD_LOG: &str = "info,kube_nftproxy::nft::read=debug";

/// Prints runs at one size combined: median (lowest–highest) of each part.
pub fn print(runs: &[Value]) {
    let c = super::runs::combine(runs);
    let cell = |path: &[&str]| super::runs::spread(&c, path);
    println!("daemon start through the API server ({} runs; median (lowest–highest), ms after spawning):", runs.len());
    println!(
        "| services | first sync done | following | services listed | slices listed | nodes listed | all listed | filing | render | apply | RSS after MB | peak RSS MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        c["median"]["services"],
        cell(&["start_ms"]),
        cell(&["following_ms"]),
        cell(&["listed", "services", "at_ms"]),
        cell(&["listed", "endpointslices", "at_ms"]),
        cell(&["listed", "nodes", "at_ms"]),
        cell(&["all_listed_ms"]),
        cell(&["filing_ms"]),
        cell(&["render_ms"]),
        cell(&["apply_ms"]),
        cell(&["rss_after_1s_mb"]),
        cell(&["rss_peak_mb"]),
    );
    println!(
        "  list times as logged: services {} ms, slices {} ms, nodes {} ms",
        cell(&["listed", "services", "took_ms"]),
        cell(&["listed", "endpointslices", "took_ms"]),
        cell(&["listed", "nodes", "took_ms"])
    );
    println!(
        "  restart over its own rules: synced {} ms after spawning; all listed {}, tables read ahead {}, the sync after that read {}",
        cell(&["restart", "start_ms"]),
        cell(&["restart", "all_listed_ms"]),
        cell(&["restart", "read_ahead_ms"]),
        cell(&["restart", "after_read_ms"]),
    );
    let name = format!("api-start-{}.json", c["median"]["services"]);
    super::runs::write(&name, &json!({"combined": c, "runs": runs}));
}
