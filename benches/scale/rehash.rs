//! A cluster that outgrows the maps the daemon built (issue 37): what another nftables user
//! waits, and what our changes wait, while the daemon rehashes a map past four times the size
//! its table was built for (`nft::rehash`), against the probe alone in the same run.
//!
//! The daemon starts at 16 % of N Services × 5 endpoints through the API server, with the
//! probe of `neighbour.rs` committing to a table of its own every 20 ms. Phases:
//! - `idle`: the probe alone, before any daemon;
//! - `first sync`: from the daemon's spawn to its first sync;
//! - `grown in place`: Services added in one post up to 300 short of the count at which the
//!   maps pass four times their tables: the maps are declared larger in place;
//! - `rehash, one by one`: 600 more Services, each with its slice, posted one at a time 10 ms
//!   apart (100 a second, as a rollout delivers them), until the daemon has synced them all
//!   and rested 2.5 s: the sync that takes the maps past four times rehashes each of them, its
//!   copy about four times as large as the map was built for, the worst a rehash copies.
//!
//! Per phase, as `neighbour.rs`: the probe's worst, p99 and p50 waits, our syncs, full syncs
//! (none is the target), maps grown and rehashed; and each rehash's transactions and length,
//! as logged. `-- --rehash-only [N]` runs it three times at N (100k by default), written to
//! `target/bench/rehash-N.json`; `-- --rehash N` runs it once.

use super::neighbour::{self, BETWEEN, Probe, QUIET, REHASHED};
use super::observe::{LogTail, debug_ms, is_sync, round2, sync_figures};
use super::start::Stage;
use super::synth::{self, Case};
use kube_nftproxy::model::Protocol;
use kube_nftproxy::nft::GROW_IN_PLACE;
use kube_nftproxy::render::{MapName, PARTS, Scope};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The size `--rehash-only` measures by default.
pub const SERVICES: u32 = 100_000;

/// The phases after `idle` and `first sync`, in the order they run.
const PHASES: [&str; 4] = ["idle", "first sync", "grown in place", "rehash, one by one"];

/// The daemon's debug line for each transaction of a rehash (`nft::rehash`).
use kube_nftproxy::nft::REHASH_STEP as STEP;

/// Services posted one at a time, around the count that takes the maps past four times.
const ONE_BY_ONE: u32 = 600;

/// Their spacing: 100 a second.
const SPACING: Duration = Duration::from_millis(10);

/// The first Service count at which one of the endpoint maps (or `cluster-ips`) of `case`'s
/// Services outgrows four times the table a full sync at `built` Services gave it.
fn past_four_times(case: &Case, built: u32) -> u32 {
    let per = |part: u8| if part + 1 < PARTS { 1 } else { case.endpoints.saturating_sub(u32::from(PARTS) - 1) };
    let mut maps: Vec<(MapName, u32)> =
        (0..PARTS).map(|p| (MapName::Endpoints(Scope::Cluster, Protocol::Tcp, p), per(p))).collect();
    maps.push((MapName::ClusterIps, 1));
    let past = |n: u32| {
        maps.iter().any(|(map, per)| {
            let size = |services: u32| map.size_for((services * per) as usize).unwrap_or(0);
            size(n) > GROW_IN_PLACE * size(built)
        })
    };
    (built..).find(|n| past(*n)).expect("a count past four times")
}

/// Services `range` of `case`, each with its slice.
fn services_of(case: &Case, range: std::ops::Range<u32>) -> Vec<Value> {
    range.flat_map(|i| [synth::service_json(case, i), synth::slice_json(case, i, 0)]).collect()
}

/// One run growing to about `services` Services × 5 endpoints; one JSON object.
pub fn run(services: u32) -> Value {
    let built = services / 100 * 16;
    let stage = Stage::new(built, "rehash");
    let case = Case { services, ..stage.case.clone() };
    let past = past_four_times(&case, built);
    assert!(past + ONE_BY_ONE / 2 <= services, "{services} Services do not take maps built at {built} past four times");
    let probe = Probe::start(&stage.ns);
    let mut phases = vec![neighbour::idle()];
    std::thread::sleep(QUIET);
    let (spawned, d) = (Instant::now(), stage.daemon_with(&[("RUST_LOG", "info,kube_nftproxy::nft::rehash=debug")]));
    let log = LogTail::start(&d.log);
    phases.push(neighbour::settle_at(PHASES[1], &log, 0, spawned, built));
    std::thread::sleep(QUIET);
    let below = past - ONE_BY_ONE / 2;
    let (from, posted) = (log.lines().len(), Instant::now());
    stage.emu.apply(&Value::Array(services_of(&case, built..below)));
    phases.push(neighbour::settle_at(PHASES[2], &log, from, posted, below));
    std::thread::sleep(QUIET);
    let (from, started) = (log.lines().len(), Instant::now());
    for (k, i) in (below..below + ONE_BY_ONE).enumerate() {
        std::thread::sleep((started + SPACING * k as u32).saturating_duration_since(Instant::now()));
        stage.emu.apply(&Value::Array(services_of(&case, i..i + 1)));
    }
    phases.push(neighbour::settle_at(PHASES[3], &log, from, started, below + ONE_BY_ONE));
    std::thread::sleep(QUIET);
    let commits = probe.finish();
    let lines: Vec<String> = log.lines().into_iter().map(|(_, l)| l).collect();
    d.stop();
    drop(stage);
    let mut r = neighbour::report(below + ONE_BY_ONE, &phases, &commits);
    r["built_at"] = json!(built);
    r["past_four_times_at"] = json!(past);
    r["rehashes"] = rehashes(&lines);
    r["steps"] = longest_step(&lines);
    // The changes posted meanwhile wait for the sync that rehashes: its length, as logged.
    let took = lines[from..].iter().filter(|l| is_sync(l)).filter_map(|l| sync_figures(l)["took_ms"].as_f64());
    r["longest_sync_ms"] = json!(took.fold(0.0, f64::max));
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    r
}

/// The rehash's transactions as the daemon logged them (at debug level): how many, the
/// longest's time from send to acknowledgement (ms) and what it did, and all of theirs.
fn longest_step(lines: &[String]) -> Value {
    let steps = lines.iter().filter_map(|l| {
        let (_, rest) = l.split_once(STEP)?;
        let (what, took) = rest.rsplit_once(" in ")?;
        Some((debug_ms(took)?, what.trim().to_string()))
    });
    let (mut longest, mut count, mut sum) = ((0.0, String::new()), 0, 0.0);
    for step in steps {
        count += 1;
        sum += step.0;
        if step.0 > longest.0 {
            longest = step;
        }
    }
    json!({"steps": count, "longest_ms": longest.0, "longest": longest.1, "all_ms": round2(sum)})
}

/// Each rehash the daemon logged: its map, transactions and length (ms).
fn rehashes(lines: &[String]) -> Value {
    let each = lines.iter().filter_map(|l| {
        let (_, rest) = l.split_once(REHASHED)?;
        let map = rest.split_whitespace().nth(1)?;
        let (_, figures) = rest.split_once(": ")?;
        let transactions: u64 = figures.split_whitespace().next()?.parse().ok()?;
        let ms = debug_ms(figures.rsplit_once(" in ")?.1)?;
        Some(json!({"map": map, "transactions": transactions, "ms": ms}))
    });
    Value::Array(each.collect())
}

/// Prints the runs combined, a phase a row: median (lowest–highest) of each figure.
pub fn print(runs: &[Value]) {
    let c = super::runs::combine(runs);
    let services = c["median"]["services"].as_f64().unwrap_or(0.0) as u64;
    println!(
        "another nftables user's wait for one commit (one element, every 20 ms) while the daemon rehashes the maps \
         it built at {} Services, past four times at {} ({} runs; median (lowest–highest)):",
        c["median"]["built_at"],
        c["median"]["past_four_times_at"],
        runs.len()
    );
    println!(
        "| phase | worst ms | p99 ms | p50 ms | samples | our syncs | our full syncs | maps grown | maps rehashed | phase ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for name in PHASES.iter().chain([&BETWEEN]) {
        let cell = |figure: &str| super::runs::spread(&c, &["phases", name, figure]);
        let (worst, p99, p50, samples) = (cell("worst_ms"), cell("p99_ms"), cell("p50_ms"), cell("samples"));
        let (syncs, full, grown, rehashed) =
            (cell("syncs"), cell("full_syncs"), cell("maps_grown"), cell("maps_rehashed"));
        println!(
            "| {name} | {worst} | {p99} | {p50} | {samples} | {syncs} | {full} | {grown} | {rehashed} | {} |",
            cell("phase_ms")
        );
    }
    println!(
        "  the longest sync while Services came one by one (the one that rehashed), ms: {}",
        super::runs::spread(&c, &["longest_sync_ms"])
    );
    println!("  our longest transaction of a rehash, ms: {}", super::runs::spread(&c, &["steps", "longest_ms"]));
    println!("  the rehashes' transactions, all together, ms: {}", super::runs::spread(&c, &["steps", "all_ms"]));
    for (i, run) in runs.iter().enumerate() {
        let each: Vec<String> = run["rehashes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{} {} transactions {} ms", r["map"].as_str().unwrap_or("?"), r["transactions"], r["ms"]))
            .collect();
        println!("  run {}: rehashed {}", i + 1, each.join("; "));
    }
    super::runs::write(&format!("rehash-{services}.json"), &json!({"combined": c, "runs": runs}));
}
