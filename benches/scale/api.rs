//! The daemon following an API server at scale: the emulator, loaded with a synthetic cluster,
//! listens in a node-like namespace's gateway (as a control plane off the node), and the real
//! binary follows it with the emulator's client-certificate kubeconfig.
//!
//! Measured, with the daemon's default flags: the time from spawning it to its first sync done
//! (with the list times and the sync's own as it logs them); new Service + EndpointSlice pairs
//! a while apart, event → kernel and event → traffic (`latency_pairs.rs`); a churn of 100
//! changes per second (syncs, event → kernel, CPU) with new pairs probed alongside; every
//! slice changed at once; the change-wait histogram it exports; resident memory; and the
//! requests the API server saw. Then, on a second daemon with `--min-sync-period=0`, single
//! EndpointSlice changes, isolated. The kernel side is taken from the kernel itself: an
//! `nft monitor` in the node's namespace, its lines timestamped as they arrive.

use super::common::daemon::Daemon;
use super::common::emulator::Emulator;
use super::common::{Netns, Scratch};
use super::latency_pairs::{self, Backend, Pairs, Prober};
use super::observe::*;
use super::synth::{self, Case};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Where the emulator listens: the gateway's address on the node's uplink.
const API_LISTEN: &str = "192.168.1.254:6443";

/// The real server's bookmark interval.
const BOOKMARKS: &str = "60s";

/// Spacing of the isolated changes, after the previous one reached the kernel (run on a
/// daemon with `--min-sync-period=0`, so pacing plays no part).
const ISOLATED_GAP: Duration = Duration::from_millis(50);

/// Changes per churn tick, and ticks per second.
const CHURN_BATCH: u32 = 10;
const CHURN_TICK: Duration = Duration::from_millis(100);

/// The steady churn: the same rate, one change at a time, as a cluster-wide rollout delivers
/// them (the batches above coalesce ten changes into one sync for free).
const STEADY_BATCH: u32 = 1;
const STEADY_TICK: Duration = Duration::from_millis(10);

/// A new Service + EndpointSlice pair every this many churn ticks (2.5 a second).
const CHURN_PAIR_TICKS: u32 = 4;

/// Spacing of the isolated pairs, each from the previous one's start: past the default
/// min-sync-period of 1 s, so each finds the pace's allowance back.
const PAIR_GAP: Duration = Duration::from_millis(1200);

/// How the benchmark sizes this part.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Isolated changes (min-sync-period 0).
    pub isolated: u32,
    /// Isolated Service + EndpointSlice pairs (default flags).
    pub pairs: u32,
    /// Seconds of churn.
    pub churn_s: u32,
}

impl Sizes {
    /// The figures, or a few seconds' worth for `--smoke`.
    pub fn new(smoke: bool) -> Sizes {
        if smoke {
            Sizes { isolated: 20, pairs: 10, churn_s: 5 }
        } else {
            Sizes { isolated: 200, pairs: 50, churn_s: 60 }
        }
    }
}

/// The slices the benchmark changes, each to an endpoint address never used before: service
/// `k * STRIDE mod N` for the k-th change (a stride prime to N, so the first N changes touch N
/// different services), its generation one up.
struct Changes<'c> {
    case: &'c Case,
    next: u64,
    generation: Vec<u32>,
}

/// Prime, and divides neither 1,000 nor 30,000.
const STRIDE: u64 = 7919;

impl<'c> Changes<'c> {
    fn new(case: &'c Case) -> Changes<'c> {
        Changes { case, next: 0, generation: vec![0; case.services as usize] }
    }

    /// The next change: the slice and its new endpoint address.
    fn next(&mut self) -> (Value, String) {
        let i = (self.next * STRIDE % u64::from(self.case.services)) as u32;
        self.next += 1;
        self.bump(i)
    }

    /// Service `i`'s slice one generation up, and its new endpoint address.
    fn bump(&mut self, i: u32) -> (Value, String) {
        let g = &mut self.generation[i as usize];
        *g += 1;
        let ip = synth::endpoint_ip(i, 0, self.case.endpoints, *g);
        (synth::slice_json(self.case, i, *g), ip)
    }

    /// Every slice one generation up, in order.
    fn all(&mut self) -> Vec<(Value, String)> {
        (0..self.case.services).map(|i| self.bump(i)).collect()
    }
}

/// A node-like namespace with the emulator in its gateway, holding `case`.
struct Rig {
    ns: Netns,
    emu: Emulator,
    _backend: Backend,
    _dir: Scratch,
}

impl Rig {
    fn new(case: &Case) -> Rig {
        let dir = Scratch::new("apibench");
        let manifest = dir.0.join("cluster.json");
        super::churn::write_manifest(case, 0, &manifest);
        let ns = Netns::node_like("apibench");
        let backend = Backend::new(&ns);
        let t = Instant::now();
        let emu =
            Emulator::start(Some(&ns.gateway().name), API_LISTEN, Some(&manifest), &["--bookmark-interval", BOOKMARKS]);
        eprintln!("api: emulator ready with {} services in {:?}", case.services, t.elapsed());
        Rig { ns, emu, _backend: backend, _dir: dir }
    }

    /// Starts a daemon with `extra` flags and waits for its first sync: the daemon, its log,
    /// when it was spawned, and when the sync's line appeared.
    fn daemon(&self, extra: &[&str]) -> (Daemon, LogTail, Instant, Instant, String) {
        let spawned = Instant::now();
        let d = Daemon::start_api(&self.ns, &self.emu.kubeconfig(), extra, &[]);
        let log = LogTail::start(&d.log);
        let Some((at, line)) = log.wait(0, Duration::from_secs(120), is_sync) else {
            panic!("the daemon never synced:\n{}", d.logged());
        };
        (d, log, spawned, at, line)
    }
}

/// Posts `slices` through the control endpoint.
fn post(emu: &Emulator, slices: Vec<Value>) {
    emu.apply(&Value::Array(slices));
}

/// Waits until `mon` reports changes (see `Monitor::warm_up`), then until the pacing of the
/// warm-up's syncs is past, so what follows starts with the burst allowance.
fn live(rig: &Rig, mon: &mut Monitor, changes: &mut Changes) {
    mon.warm_up(|| {
        let (slice, ip) = changes.next();
        post(&rig.emu, vec![slice]);
        ip
    });
    std::thread::sleep(Duration::from_secs(2));
}

/// The churn: `batch` changes every `tick` for `secs`, on a daemon with default flags;
/// `on_tick` runs after each tick's post.
fn churn(
    (rig, d, log): (&Rig, &Daemon, &LogTail),
    mon: &mut Monitor,
    changes: &mut Changes,
    (batch, tick_every, secs): (u32, Duration, u32),
    mut on_tick: impl FnMut(u32),
) -> Value {
    let mut posted: Vec<(String, Instant)> = Vec::new();
    let from_line = log.lines().len();
    let (cpu0, emu0) = (cpu_s(d.pid()), cpu_s(rig.emu.pid()).0);
    let start = Instant::now();
    let ticks = secs * (Duration::from_secs(1).as_millis() / tick_every.as_millis()) as u32;
    for tick in 0..ticks {
        let due = start + tick_every * tick;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let (slices, ips): (Vec<Value>, Vec<String>) = (0..batch).map(|_| changes.next()).unzip();
        let at = Instant::now();
        post(&rig.emu, slices);
        posted.extend(ips.into_iter().map(|ip| (ip, at)));
        on_tick(tick);
    }
    let wall = start.elapsed();
    let (cpu1, emu1) = (cpu_s(d.pid()), cpu_s(rig.emu.pid()).0);
    // Every change's arrival in the kernel (the last ones within a sync period or so).
    let mut latencies = Vec::new();
    let mut missing = 0;
    let mut last_seen = start;
    let deadline = Instant::now() + Duration::from_secs(5);
    for (ip, at) in &posted {
        match mon.wait(ip, deadline.saturating_duration_since(Instant::now())) {
            Some(seen) => {
                latencies.push(ms_between(*at, seen));
                last_seen = last_seen.max(seen);
            }
            None => missing += 1,
        }
    }
    // The syncs that brought them, from the log (the last sync's line follows its elements).
    std::thread::sleep(Duration::from_millis(200));
    let lines = log.lines();
    let until = last_seen.max(start + wall) + Duration::from_millis(200);
    let window: Vec<&(Instant, String)> =
        lines[from_line..].iter().filter(|(t, l)| is_sync(l) && *t >= start && *t <= until).collect();
    let sync_ms: Vec<f64> = window.iter().filter_map(|(_, l)| sync_figures(l)["took_ms"].as_f64()).collect();
    let mut lat = latencies.clone();
    json!({"changes": posted.len(), "seconds": round2(wall.as_secs_f64()), "missing": missing,
           "syncs": window.len(), "sync_ms_max": sync_ms.iter().copied().fold(0.0, f64::max),
           "sync_ms_median": percentile(&mut sync_ms.clone(), 50.0),
           "p50_ms": percentile(&mut lat, 50.0), "p99_ms": percentile(&mut lat, 99.0),
           "max_ms": percentile(&mut lat, 100.0),
           "daemon_cpu_pct": share(cpu0.0, cpu1.0, wall), "daemon_children_cpu_pct": share(cpu0.1, cpu1.1, wall),
           "emulator_cpu_pct": share(emu0, emu1, wall)})
}

/// `n` changes one at a time, each `ISOLATED_GAP` after the previous one reached the kernel.
fn isolated(rig: &Rig, mon: &mut Monitor, changes: &mut Changes, n: u32) -> Value {
    live(rig, mon, changes);
    let mut latencies = Vec::new();
    let mut missing = 0;
    for _ in 0..n {
        let (slice, ip) = changes.next();
        let at = Instant::now();
        post(&rig.emu, vec![slice]);
        match mon.wait(&ip, Duration::from_secs(3)) {
            Some(seen) => latencies.push(ms_between(at, seen)),
            None => missing += 1,
        }
        std::thread::sleep(ISOLATED_GAP);
    }
    let mut lat = latencies;
    json!({"changes": n, "missing": missing, "gap_ms": ISOLATED_GAP.as_millis() as u64, "min_sync_period": "0",
           "p50_ms": percentile(&mut lat, 50.0), "p99_ms": percentile(&mut lat, 99.0),
           "max_ms": percentile(&mut lat, 100.0)})
}

/// Requests the API server saw, per verb and resource, from `/emulator/stats`: a first
/// listing is one WatchList (counted with the watches too), or where that is off one list
/// (resourceVersion=0), as a watch cache answers it whole.
fn requests(emu: &Emulator) -> Value {
    let s = emu.stats();
    let resources = ["services", "endpointslices", "nodes", "servicecidrs"];
    let pick = |verb: &str| {
        let per = &s["requests"][verb];
        let mut out = serde_json::Map::new();
        for r in resources {
            let n = per[r].as_u64().unwrap_or(0);
            out.insert(r.into(), json!(n));
        }
        Value::Object(out)
    };
    let errors: u64 = s["status"]
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| !k.starts_with('2')).filter_map(|(_, v)| v.as_u64()).sum())
        .unwrap_or(0);
    json!({"lists": pick("list"), "watch": pick("watch"), "watchlist": pick("watchlist"),
           "get": s["requests"]["get"].clone(),
           "errors": errors, "open_watches": s["openWatches"].clone()})
}

/// The whole API part for `case`, in one process; one JSON object.
pub fn run(case: &Case, sizes: Sizes) -> Value {
    let rig = Rig::new(case);
    let mut changes = Changes::new(case);
    // 1. Start to rules in the kernel, on a node without our tables, default flags.
    let (d, log, spawned, synced, line) = rig.daemon(&[]);
    let lines = log.lines();
    let first = sync_figures(&line);
    let start_ms = ms_between(spawned, synced);
    let following =
        lines.iter().find(|(_, l)| l.contains("following the API server")).map(|(t, _)| ms_between(spawned, *t));
    let all_listed =
        lines.iter().find(|(_, l)| l.contains("every source has listed")).map(|(t, _)| ms_between(spawned, *t));
    eprintln!("api: first sync {start_ms} ms after spawning: {}", line.trim());
    std::thread::sleep(Duration::from_secs(1));
    let rss_start = rss_mb(d.pid());
    // 4. The debug views, fetched whole, against the memory held at rest.
    let views = super::views::fetch_all(&rig.ns.name, d.pid());
    // 2.–3. Changes, new services and churn, by the kernel and by connections.
    let (followed, mut mon) = follow_changes(&rig, (&d, &log), &mut changes, case, sizes);
    // 5. What the API server saw over this daemon's life.
    let served = requests(&rig.emu);
    let covered_s = round2(spawned.elapsed().as_secs_f64());
    let log_text = d.stop();
    let warned: Vec<&str> = log_text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    let warnings = warned.len();
    // Kept in the results, so a missed target says what it missed.
    let warning_lines: Vec<String> = warned.iter().take(10).map(|l| l.to_string()).collect();
    // 6. Isolated changes, on a second daemon without pacing (it starts over the first's rules).
    let (d2, _log2, spawned2, synced2, line2) = rig.daemon(&["--min-sync-period=0"]);
    let restart = json!({"ms": ms_between(spawned2, synced2), "sync": sync_figures(&line2)});
    std::thread::sleep(Duration::from_millis(500));
    let one = isolated(&rig, &mut mon, &mut changes, sizes.isolated);
    eprintln!("api: isolated {one}");
    d2.stop();
    // 7. The steady churn's baseline in the same run: the pace's bound alone, no share aimed at.
    let (d3, log3, _, _, _) = rig.daemon(&["--sync-share=1"]);
    std::thread::sleep(Duration::from_secs(2));
    let steady = (STEADY_BATCH, STEADY_TICK, sizes.churn_s);
    let unaimed = churn((&rig, &d3, &log3), &mut mon, &mut changes, steady, |_| {});
    eprintln!("api: steady churn, the bound alone {unaimed}");
    d3.stop();
    json!({"services": case.services, "endpoints": case.endpoints,
           "start": {"ms": start_ms, "following_ms": following, "all_listed_ms": all_listed,
                     "listed": listings(&lines, spawned), "sync": first},
           "restart": restart, "isolated": one, "pairs_isolated": followed["pairs_isolated"],
           "churn": followed["churn"], "steady_churn": followed["steady_churn"], "steady_churn_unaimed": unaimed,
           "all_at_once": followed["all_at_once"],
           "change_wait": followed["change_wait"], "rss_start_mb": rss_start,
           "rss_after_churn_mb": followed["rss_after_churn_mb"], "requests": served, "covered_s": covered_s,
           "warnings": warnings, "warning_lines": warning_lines, "debug_views": views})
}

/// On the daemon with default flags: isolated new Service + EndpointSlice pairs, the churn with
/// pairs alongside, the change-wait histogram after it, memory at rest, and every slice changed
/// at once. The figures, and the monitor (live) for what follows.
fn follow_changes(
    rig: &Rig,
    (d, log): (&Daemon, &LogTail),
    changes: &mut Changes,
    case: &Case,
    sizes: Sizes,
) -> (Value, Monitor) {
    let (mut prober, mut pairs) = (Prober::start(&rig.ns), Pairs::new(case));
    // A first pair, not timed: its endpoint count (one) is new to the node, so its sync adds
    // a step to the dispatch by endpoint count and rewrites the `dispatch` chain, and `nft
    // monitor` (1.0.6) drops a map from its cache when a rule that reads it is deleted, then
    // reports none of its elements. Started after it, the monitor sees the pairs that follow,
    // whose count is in use, as a cluster's new Services mostly are.
    pairs.post(&rig.emu, &mut prober);
    std::thread::sleep(Duration::from_secs(1));
    let mut mon = Monitor::start(&rig.ns);
    live(rig, &mut mon, changes);
    let pairs_isolated = latency_pairs::isolated(&rig.emu, &mut pairs, &mut prober, &mut mon, sizes.pairs, PAIR_GAP);
    eprintln!("api: isolated pairs {pairs_isolated}");
    std::thread::sleep(Duration::from_secs(2));
    let from = pairs.all.len();
    let mut churned = churn((rig, d, log), &mut mon, changes, (CHURN_BATCH, CHURN_TICK, sizes.churn_s), |tick| {
        if tick % CHURN_PAIR_TICKS == 0 {
            pairs.post(&rig.emu, &mut prober);
        }
    });
    churned["pairs"] = pairs.figures(from, &mut mon, &prober, Duration::from_secs(5));
    eprintln!("api: churn {churned}");
    std::thread::sleep(Duration::from_secs(3));
    let steady = churn((rig, d, log), &mut mon, changes, (STEADY_BATCH, STEADY_TICK, sizes.churn_s), |_| {});
    eprintln!("api: steady churn {steady}");
    let waits_after_churn = latency_pairs::change_wait(&rig.ns.name);
    std::thread::sleep(Duration::from_secs(3));
    let rss_after = rss_mb(d.pid());
    let all = latency_pairs::all_at_once(&rig.ns.name, &rig.emu, log, &mut mon, changes.all());
    eprintln!("api: every slice at once {all}");
    let waits_after_all = latency_pairs::change_wait(&rig.ns.name);
    let v = json!({"pairs_isolated": pairs_isolated, "churn": churned, "steady_churn": steady, "all_at_once": all,
                   "change_wait": {"after_churn": waits_after_churn, "after_all": waits_after_all},
                   "rss_after_churn_mb": rss_after});
    (v, mon)
}

/// `--api-idle SECONDS`: the daemon follows the emulator and does nothing else that long; what
/// the API server saw, the syncs, CPU and memory.
pub fn idle(case: &Case, secs: u64) -> Value {
    let rig = Rig::new(case);
    let (d, log, spawned, synced, _) = rig.daemon(&[]);
    let from = log.lines().len();
    let (cpu0, t0) = (cpu_s(d.pid()).0, Instant::now());
    let rss_start = rss_mb(d.pid());
    eprintln!("api-idle: synced {} ms after spawning; idle for {secs} s", ms_between(spawned, synced));
    std::thread::sleep(Duration::from_secs(secs));
    let cpu = share(cpu0, cpu_s(d.pid()).0, t0.elapsed());
    let syncs = log.lines()[from..].iter().filter(|(_, l)| is_sync(l)).count();
    let served = requests(&rig.emu);
    let rss_end = rss_mb(d.pid());
    let covered_s = round2(spawned.elapsed().as_secs_f64());
    let log_text = d.stop();
    let notable: Vec<&str> = log_text.lines().filter(|l| !l.contains(" INFO ") || l.contains(" again")).collect();
    json!({"services": case.services, "idle_s": secs, "covered_s": covered_s, "syncs_while_idle": syncs,
           "daemon_cpu_pct": cpu, "rss_start_mb": rss_start, "rss_end_mb": rss_end, "requests": served,
           "log_not_info": notable})
}
