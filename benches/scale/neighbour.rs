//! What another nftables user waits while the daemon works (issue 37): the kernel holds
//! nf_tables' commit mutex for a whole transaction, so every other process changing nftables
//! waits until ours is done.
//!
//! A probe thread in the daemon's namespace, with a table of its own, commits one transaction
//! adding one new element every 20 ms over raw netlink (the library's `wire::Batch` and
//! `send::Sender`), each timed from before the send to the kernel's acknowledgement. The
//! daemon follows the emulator as in `start.rs`. A run's phases, about a second apart (the
//! probe's commits between them are filed as `between`):
//! - `idle`: the probe alone for 3 s, before any daemon: the baseline of the same run;
//! - `first sync`: from the daemon's spawn to its first sync;
//! - `refresh`: SIGHUP, a full sync in place;
//! - `restart`: the daemon stopped and a new one started over the rules it left, to its first
//!   sync;
//! - `every slice at once`: every EndpointSlice posted again in one request, each endpoint at
//!   a new address, until the daemon's partial syncs of them have rested 2.5 s;
//! - `a map past its size`: as many new Services and their slices as take the endpoint map
//!   past the size it was declared with, posted in one request, until the daemon has synced
//!   them all and its syncs have rested 2.5 s.
//!
//! A phase ends at the last of the daemon's syncs in a row: a commit of the probe's during a
//! full sync makes the daemon check its tables with a refresh ("another process committed to
//! nftables during the full sync"), and those syncs are the phase's too; a refresh that found
//! nothing to send is not counted as a full sync. Per phase: the waits' worst, p99 and p50, the
//! commits, our full syncs, the maps declared larger in place and the phase's length. `-- --neighbour N` runs it once at N
//! services × 5 endpoints; `-- --neighbour-only [N]` three times at N (100k by default),
//! written to `target/bench/neighbour-N.json`.

use super::common::Netns;
use super::common::net::spawn_in_netns;
use super::common::synth;
use super::observe::{LogTail, is_sync, ms_between, percentile, sync_figures};
use super::start::{FIRST_SYNC_LIMIT, Stage};
use kube_nftproxy::model::Family;
use kube_nftproxy::netlink::send::Sender;
use kube_nftproxy::nft::wire::Batch;
use kube_nftproxy::render::{Key, MapName, Value as Element};
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The size `--neighbour-only` measures by default.
pub const SERVICES: u32 = 100_000;

/// The probe's table (family `ip`), holding one set named as ours is.
const TABLE: &str = "neighbour-probe";

/// How long the probe waits after each commit before the next.
const EVERY: Duration = Duration::from_millis(20);

/// The probe alone before any daemon: the run's baseline.
pub(super) const IDLE: Duration = Duration::from_secs(3);

/// The quiet between phases, so one phase's last syncs do not run into the next's.
pub(super) const QUIET: Duration = Duration::from_secs(1);

/// The phases in the order they run; commits in none are filed under `BETWEEN`.
const PHASES: [&str; 6] = ["idle", "first sync", "refresh", "restart", "every slice at once", "a map past its size"];

/// How long without a sync ends the phase of every slice changed at once.
const REST: Duration = Duration::from_millis(2500);

/// Where the commits outside every phase are filed: the daemon idle.
pub(super) const BETWEEN: &str = "between";

/// The daemon's note that another process committed during its full sync, which it checks
/// by a refresh (a comparison with the kernel's tables, sending what differs).
const RESYNC: &str = "another process committed to nftables during the full sync";

/// The daemon's note that a partial sync declares a map larger (`nft::Applier::partial`).
const GROWN: &str = "map larger, for";

/// The daemon's note that it rehashed a map (`nft::rehash`).
pub(super) use kube_nftproxy::nft::REHASHED;

/// The probe's addresses: 10.200.0.0/16 counted up, so every commit adds a new element.
const FIRST_ADDRESS: u32 = u32::from_be_bytes([10, 200, 0, 0]);
const ADDRESSES: u32 = 1 << 16;

/// One commit of the probe: when it was sent, how long until the kernel acknowledged it
/// (ms), and whether it went through.
pub(super) struct Commit {
    at: Instant,
    wait_ms: f64,
    ok: bool,
}

/// The probe thread, committing until finished.
pub(super) struct Probe {
    stop: Arc<AtomicBool>,
    commits: Arc<Mutex<Vec<Commit>>>,
    thread: JoinHandle<()>,
}

impl Probe {
    /// Creates the probe's table in `ns` and starts committing to it.
    pub(super) fn start(ns: &Netns) -> Probe {
        ns.nft_apply(&format!("table ip {TABLE} {{ set {} {{ type ipv4_addr; }}\n}}\n", MapName::ClusterIps))
            .expect("the probe's table");
        let (stop, commits): (Arc<AtomicBool>, Arc<Mutex<Vec<Commit>>>) = Default::default();
        let (done, out, name) = (stop.clone(), commits.clone(), ns.name.clone());
        let thread = spawn_in_netns(&ns.name, move || commit_loop(&done, &out, &name));
        Probe { stop, commits, thread }
    }

    /// Stops the probe; its commits.
    pub(super) fn finish(self) -> Vec<Commit> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("probe thread");
        std::mem::take(&mut *self.commits.lock().expect("commits"))
    }
}

/// Commits one new element at a time until `stop`, from a thread in namespace `ns`.
fn commit_loop(stop: &AtomicBool, out: &Mutex<Vec<Commit>>, ns: &str) {
    // Opened on the first send, in this thread's namespace, and kept like the daemon keeps its
    // own: closing a socket would put an RCU grace period into the next commit.
    let sender = Sender::default();
    for n in (0..ADDRESSES).cycle() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if n == 0 && !out.lock().expect("commits").is_empty() {
            // Wrapped round: empty the set so every element added is new again (not timed).
            let set = MapName::ClusterIps.to_string();
            let flush = ["netns", "exec", ns, "nft", "flush", "set", "ip", TABLE, &set];
            let ok = std::process::Command::new("ip").args(flush).status().is_ok_and(|s| s.success());
            assert!(ok, "flushing the probe's set failed");
        }
        let key = Key::Ip(IpAddr::V4(Ipv4Addr::from(FIRST_ADDRESS + n)));
        let mut batch = Batch::new();
        batch.elements(Family::V4, TABLE, &MapName::ClusterIps, true, [(&key, &Element::None)]);
        let bytes = batch.finish();
        let at = Instant::now();
        let ok = sender.send(&bytes).is_ok();
        let wait_ms = ms_between(at, Instant::now());
        out.lock().expect("commits").push(Commit { at, wait_ms, ok });
        std::thread::sleep(EVERY);
    }
}

/// One phase of a run: its span, and the daemon's syncs in it.
pub(super) struct Phase {
    pub(super) name: &'static str,
    pub(super) start: Instant,
    pub(super) end: Instant,
    /// The phase's first sync line, ms after its start (`None` for `idle`).
    pub(super) first_sync_ms: Option<f64>,
    /// Its syncs, those full (Full or Refresh), and those announced as repeated for another
    /// process.
    pub(super) syncs: usize,
    pub(super) full_syncs: usize,
    pub(super) resyncs: usize,
    /// Maps the daemon declared larger in a partial sync.
    pub(super) grown: usize,
    /// Maps the daemon rehashed (`nft::rehash`).
    pub(super) rehashed: usize,
}

/// The phase `name` from `start` until the daemon, after line `from` of its log, has synced
/// and stopped repeating full syncs for another process's commits.
fn settle(name: &'static str, log: &LogTail, from: usize, start: Instant) -> Phase {
    let never = || -> ! {
        let text: String = log.lines().into_iter().map(|(_, l)| l).collect();
        panic!("{name}: the daemon did not sync within {FIRST_SYNC_LIMIT:?}:\n{text}")
    };
    let first = log.position(from, FIRST_SYNC_LIMIT, is_sync).unwrap_or_else(|| never());
    let mut last = first;
    // The note follows its sync's line at once, from the same thread: a moment tells.
    while let Some(i) = log.position(last + 1, Duration::from_millis(300), |l| is_sync(l) || l.contains(RESYNC))
        && log.lines()[i].1.contains(RESYNC)
    {
        last = log.position(i + 1, FIRST_SYNC_LIMIT, is_sync).unwrap_or_else(|| never());
    }
    phase(name, log, from, (first, last), start)
}

/// The phase `name` from `start` until the daemon, after line `from` of its log, has logged
/// no sync for `REST`: every slice changed at once takes syncs one after another.
fn settle_quiet(name: &'static str, log: &LogTail, from: usize, start: Instant) -> Phase {
    let first = log.position(from, FIRST_SYNC_LIMIT, is_sync).unwrap_or_else(|| panic!("{name}: no sync"));
    let mut last = first;
    while let Some(i) = log.position(last + 1, REST, is_sync) {
        last = i;
    }
    phase(name, log, from, (first, last), start)
}

/// The phase `name` from `start` until the daemon, after line `from` of its log, has synced
/// `services` Services (a full sync logs only when done, seconds later, so a pause in its
/// syncs does not end the phase), then logged no sync for `REST`.
pub(super) fn settle_at(name: &'static str, log: &LogTail, from: usize, start: Instant, services: u32) -> Phase {
    let all = format!(" sync: {services} services");
    let first = log.position(from, FIRST_SYNC_LIMIT, is_sync).unwrap_or_else(|| panic!("{name}: no sync"));
    let mut last = log.position(first, FIRST_SYNC_LIMIT, |l| l.contains(&all)).unwrap_or_else(|| {
        let text: String = log.lines().into_iter().map(|(_, l)| l).collect();
        panic!("{name}: never synced {services} services:\n{text}")
    });
    while let Some(i) = log.position(last + 1, REST, is_sync) {
        last = i;
    }
    phase(name, log, from, (first, last), start)
}

/// The phase `name` from `start` to line `last` of the log, its first sync at line `first`.
fn phase(name: &'static str, log: &LogTail, from: usize, (first, last): (usize, usize), start: Instant) -> Phase {
    let lines = log.lines();
    let seen = &lines[from..=last];
    // A refresh that found nothing to send held no lock: a check, not a full sync.
    let full = |l: &str| {
        is_sync(l)
            && !l.contains("nothing sent")
            && matches!(sync_figures(l)["kind"].as_str(), Some("Full" | "Refresh"))
    };
    Phase {
        name,
        start,
        end: lines[last].0,
        first_sync_ms: Some(ms_between(start, lines[first].0)),
        syncs: seen.iter().filter(|(_, l)| is_sync(l)).count(),
        full_syncs: seen.iter().filter(|(_, l)| full(l)).count(),
        resyncs: seen.iter().filter(|(_, l)| l.contains(RESYNC)).count(),
        grown: seen.iter().filter(|(_, l)| l.contains(GROWN)).count(),
        rehashed: seen.iter().filter(|(_, l)| l.contains(REHASHED)).count(),
    }
}

/// The probe alone for `IDLE`, before any daemon: the run's baseline.
pub(super) fn idle() -> Phase {
    let start = Instant::now();
    std::thread::sleep(IDLE);
    let (syncs, full_syncs, resyncs, grown, rehashed) = (0, 0, 0, 0, 0);
    Phase {
        name: PHASES[0],
        start,
        end: Instant::now(),
        first_sync_ms: None,
        syncs,
        full_syncs,
        resyncs,
        grown,
        rehashed,
    }
}

/// One run at `services` services × 5 endpoints; one JSON object.
pub fn run(services: u32) -> Value {
    let stage = Stage::new(services, "neighbour");
    let probe = Probe::start(&stage.ns);
    let mut phases = vec![idle()];
    std::thread::sleep(QUIET);
    let (spawned, d) = (Instant::now(), stage.daemon());
    let log = LogTail::start(&d.log);
    phases.push(settle(PHASES[1], &log, 0, spawned));
    std::thread::sleep(QUIET);
    let (from, hup) = (log.lines().len(), Instant::now());
    d.signal(libc::SIGHUP);
    phases.push(settle(PHASES[2], &log, from, hup));
    std::thread::sleep(QUIET);
    let stopping = Instant::now();
    d.stop();
    let d = stage.daemon();
    let log = LogTail::start(&d.log);
    phases.push(settle(PHASES[3], &log, 0, stopping));
    std::thread::sleep(QUIET);
    // Every slice one generation up (each endpoint a new address), in one post.
    let slices: Vec<Value> = (0..services).map(|i| synth::slice_json(&stage.case, i, 1)).collect();
    let (from, posted) = (log.lines().len(), Instant::now());
    stage.emu.apply(&Value::Array(slices));
    phases.push(settle_quiet(PHASES[4], &log, from, posted));
    std::thread::sleep(QUIET);
    let (from, posted) = (log.lines().len(), Instant::now());
    let grown = past_the_size(&stage.case);
    stage.emu.apply(&Value::Array(grown.clone()));
    phases.push(settle_at(PHASES[5], &log, from, posted, services + grown.len() as u32 / 2));
    std::thread::sleep(QUIET);
    let commits = probe.finish();
    d.stop();
    drop(stage);
    let r = report(services, &phases, &commits);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    r
}

/// New Services after `case`'s, with their slices, enough to take the endpoint map's last
/// part (the slots from `PARTS - 1` on: two of a Service's five) past the size a full sync
/// declared it with.
fn past_the_size(case: &synth::Case) -> Vec<Value> {
    use kube_nftproxy::render::{PARTS, Scope};
    let map = MapName::Endpoints(Scope::Cluster, kube_nftproxy::model::Protocol::Tcp, PARTS - 1);
    let per_service = (case.endpoints as usize).saturating_sub(usize::from(PARTS - 1));
    let size = |services: u32| map.size_for(services as usize * per_service);
    let first = case.services;
    let last = (first..).find(|n| size(*n) != size(first)).expect("a larger size");
    let mut objects = Vec::new();
    for i in first..=last {
        objects.push(synth::service_json(case, i));
        objects.push(synth::slice_json(case, i, 0));
    }
    eprintln!("neighbour: {} new Services take {map} past {:?}", last - first + 1, size(first));
    objects
}

/// Each phase's figures, and the commits between phases.
pub(super) fn report(services: u32, phases: &[Phase], commits: &[Commit]) -> Value {
    let within = |p: &Phase, c: &Commit| (p.start..=p.end).contains(&c.at);
    let mut out = serde_json::Map::new();
    for p in phases {
        let mut fig = waits(commits.iter().filter(|c| within(p, c)));
        fig["syncs"] = json!(p.syncs);
        fig["full_syncs"] = json!(p.full_syncs);
        fig["resyncs"] = json!(p.resyncs);
        fig["maps_grown"] = json!(p.grown);
        fig["maps_rehashed"] = json!(p.rehashed);
        fig["first_sync_ms"] = json!(p.first_sync_ms);
        fig["phase_ms"] = json!(ms_between(p.start, p.end));
        out.insert(p.name.into(), fig);
    }
    out.insert(BETWEEN.into(), waits(commits.iter().filter(|c| !phases.iter().any(|p| within(p, c)))));
    json!({"services": services, "endpoints": 5, "every_ms": EVERY.as_millis() as u64, "phases": out,
           "failed": commits.iter().filter(|c| !c.ok).count()})
}

/// The waits of `commits`: how many, how many failed, and the worst, p99 and p50 (ms).
pub(super) fn waits<'c>(commits: impl Iterator<Item = &'c Commit>) -> Value {
    let (mut ms, mut failed) = (Vec::new(), 0);
    for c in commits {
        ms.push(c.wait_ms);
        failed += usize::from(!c.ok);
    }
    json!({"samples": ms.len(), "failed": failed, "worst_ms": percentile(&mut ms, 100.0),
           "p99_ms": percentile(&mut ms, 99.0), "p50_ms": percentile(&mut ms, 50.0)})
}

/// Prints the runs combined, a phase a row: median (lowest–highest) of each figure.
pub fn print(runs: &[Value]) {
    let c = super::runs::combine(runs);
    let services = c["median"]["services"].as_f64().unwrap_or(0.0) as u64;
    println!(
        "another nftables user's wait for one commit (one element, every {} ms) while the daemon works, \
         at {services} services × 5 endpoints ({} runs; median (lowest–highest)):",
        EVERY.as_millis(),
        runs.len()
    );
    println!("| phase | worst ms | p99 ms | p50 ms | samples | our syncs | our full syncs | maps grown | phase ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for name in PHASES.iter().chain([&BETWEEN]) {
        let cell = |figure: &str| super::runs::spread(&c, &["phases", name, figure]);
        let (worst, p99, p50, samples) = (cell("worst_ms"), cell("p99_ms"), cell("p50_ms"), cell("samples"));
        let (syncs, full, grown, length) = (cell("syncs"), cell("full_syncs"), cell("maps_grown"), cell("phase_ms"));
        println!("| {name} | {worst} | {p99} | {p50} | {samples} | {syncs} | {full} | {grown} | {length} |");
    }
    if c["max"]["failed"].as_f64().is_some_and(|n| n > 0.0) {
        println!("  commits the kernel refused: {} in a run", super::runs::spread(&c, &["failed"]));
    }
    super::runs::write(&format!("neighbour-{services}.json"), &json!({"combined": c, "runs": runs}));
}
