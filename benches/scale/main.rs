//! The scale benchmark: synthetic clusters, measured in fresh network namespaces against
//! upstream kube-proxy's rule shapes loaded the same way in the same run.
//!
//! `cargo bench --bench scale` runs every case (many minutes: upstream's shapes are slow);
//! `-- --smoke` runs a small one in seconds (CI does). Each case runs in its own process so
//! peak RSS is its own. Results are printed as a table and written to
//! `target/bench/scale.{csv,json}`. Every run also has the daemon follow an API server (the
//! emulator) at 30k services (`api.rs`); `-- --api-only` runs that part alone (results in
//! `target/bench/api.{csv,json}`), `-- --api-idle SECONDS` runs the daemon idle that long
//! against it and reports the requests it made. `-- --health-only` measures health-check node
//! ports alone (`health.rs`). `-- --conntrack` times the conntrack cleanup over tables of 10k
//! and 100k UDP flows (`conntrack.rs`; results in `target/bench/conntrack.json`). Every full run
//! also has the static musl binary and the glibc build each do a first sync at 30k services
//! (`musl.rs`; `-- --musl-only` runs that part alone, `-- --no-musl` leaves it out). Every full
//! run also times `--dry-run --diff` against its own full sync at 30k services (`diff.rs`;
//! `-- --diff-only` runs that part alone), and what a family's refused table costs the other
//! family's first sync (`refused.rs`; `-- --refused-only` runs that part alone), and what the
//! API's JSON and protobuf cost a client per object (`wire.rs`; `-- --wire-only` runs it alone).
//! `-- --api-start-only [N]` times a daemon's start through the API server at 30k and 100k
//! services, or N, and a second one's restart over the rules it left (`start.rs`). Every full run also measures issue 25's schedulers against
//! their baselines (`schedulers.rs`; `-- --schedulers-only` runs that part alone).
//! `-- --neighbour-only [N]` measures how long another nftables user's commits wait while the
//! daemon syncs, restarts and refreshes at 100k services, or N (`neighbour.rs`; not part of a
//! full run). `-- --rehash-only [N]` measures the same waits, and our syncs, while the daemon
//! rehashes the maps it built at 16 % of 100k Services, or N, as the cluster grows past four
//! times them (`rehash.rs`; not part of a full run). `-- --dispatch-only` measures what the dispatch by endpoint count costs a new
//! connection, 64 counts in use against one (`dispatch.rs`; not part of a full run).
//! Every full run also measures what `trace` costs a node (`tracing.rs`; `-- --tracing-only`
//! runs that part alone), what localhost NodePorts cost against the primary address
//! (`localhost.rs`; `-- --localhost-only` runs that part alone), and a daemon's first state
//! at 30k services by LIST and by WatchList, in protobuf and JSON: the bytes the API server
//! sent and the daemon's peak memory (`first_state.rs`; `-- --first-state-only` runs that
//! part alone).
//! `-- --cases-only` runs the cases alone and prints their table (to compare build profiles).

mod api;
mod case;
mod churn;
#[path = "../../tests/common/mod.rs"]
mod common;
use common::{synth, verify};
mod conntrack;
mod diff;
mod dispatch;
mod first_state;
mod health;
mod latency;
mod latency_pairs;
mod localhost;
mod measure;
mod musl;
mod neighbour;
mod observe;
mod refused;
mod rehash;
mod report;
mod runs;
mod schedulers;
mod start;
mod tracing;
mod upstream;
mod views;
mod wire;

use kube_nftproxy::config::Config;
use runs::in_child;
use serde_json::Value;
use std::time::Duration;
use synth::Case;

#[global_allocator]
static ALLOC: measure::Counting = measure::Counting;

fn cases(smoke: bool) -> Vec<Case> {
    let c = |name: &str, services, endpoints, mix| Case { name: name.into(), services, endpoints, mix };
    if smoke {
        return vec![c("1k x 5", 1000, 5, false)];
    }
    vec![
        c("1k x 5", 1000, 5, false),
        c("10k x 5", 10_000, 5, false),
        c("30k x 5", 30_000, 5, false),
        c("1k x 100", 1000, 100, false),
        c("10k x 5 mix", 10_000, 5, true),
        c("100k x 5", 100_000, 5, false),
    ]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 1e2
}

fn config() -> Config {
    let flags = clap::Parser::parse_from(["kube-nftproxy", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8"]);
    Config::from_flags(&flags).expect("config")
}

/// The flags that start a run or a child part of one; with none of them, this target was run
/// as a test (`cargo test --all-targets`) and only says how to run it.
const MODES: [&str; 32] = [
    "--bench",
    "--case",
    "--latency",
    "--churn",
    "--api",
    "--api-idle",
    "--health",
    "--conntrack",
    "--conntrack-child",
    "--diff",
    "--diff-only",
    "--refused",
    "--refused-only",
    "--wire",
    "--wire-only",
    "--api-start",
    "--api-start-only",
    "--scheduler-case",
    "--scheduler-latency",
    "--schedulers-only",
    "--tracing",
    "--tracing-only",
    "--localhost",
    "--localhost-only",
    "--first-state",
    "--first-state-only",
    "--neighbour",
    "--neighbour-only",
    "--rehash",
    "--rehash-only",
    "--dispatch",
    "--dispatch-only",
];

/// The command line past its mode (`--bench` dropped), and what it sets for every part.
struct Opts {
    args: Vec<String>,
    smoke: bool,
    only_ours: bool,
    /// The cut-off of upstream's shapes' loads (zero: not loaded).
    limit: Duration,
    runs: usize,
}

impl Opts {
    fn parse(all: Vec<String>) -> Opts {
        let args: Vec<String> = all.into_iter().filter(|a| a != "--bench").collect();
        let smoke = args.iter().any(|a| a == "--smoke");
        // --only-ours skips upstream's shapes (a quick look at our own figures).
        let only_ours = args.iter().any(|a| a == "--only-ours");
        // Upstream's shapes take minutes at 30k; a minute's cut-off keeps three runs within half
        // an hour and still shows the ratio (past it, at least the cut-off's).
        let limit = Duration::from_secs(if only_ours {
            0
        } else if smoke {
            30
        } else {
            60
        });
        let runs: usize = match args.iter().position(|a| a == "--runs") {
            Some(i) => args.get(i + 1).and_then(|n| n.parse().ok()).filter(|n| *n > 0).expect("--runs N"),
            None if smoke => 1,
            None => 3,
        };
        Opts { args, smoke, only_ours, limit, runs }
    }

    /// Whether `flag` was given.
    fn has(&self, flag: &str) -> bool {
        self.args.iter().any(|a| a == flag)
    }

    /// The daemon's own cases: 30k x 5, or 1k x 5 for --smoke.
    fn daemon_case(&self) -> Case {
        if self.smoke { cases(true)[0].clone() } else { cases(false)[2].clone() }
    }

    /// `args` after the flags every child of this run is given (`--smoke`, `--only-ours`).
    fn child_args(&self, args: &[&str]) -> Vec<String> {
        let mut mode: Vec<String> = if self.smoke { vec!["--smoke".into()] } else { vec![] };
        if self.only_ours {
            mode.push("--only-ours".into());
        }
        mode.extend(args.iter().map(|a| a.to_string()));
        mode
    }
}

fn main() {
    measure::act_as_nft();
    let all: Vec<String> = std::env::args().skip(1).collect();
    if all.iter().any(|a| a == "--report") {
        report::reprint(all.iter().any(|a| a == "--api-only"));
        return;
    }
    // `cargo bench` passes --bench; anything else (e.g. `cargo test --all-targets`) runs
    // this target as a test, which must not start a many-minute benchmark.
    if !all.iter().any(|a| MODES.contains(&a.as_str())) {
        println!("scale benchmark: run it with `cargo bench --bench scale [-- --smoke]`");
        return;
    }
    let o = Opts::parse(all);
    if in_process(&o) || daemon_part(&o) {
        return;
    }
    if !common::kernel_available() {
        eprintln!("the scale benchmark needs root, nft and ip netns");
        std::process::exit(1);
    }
    let machine = runs::machine();
    if o.has("--api-only") {
        let mut apis = Vec::new();
        for run in 1..=o.runs {
            apis.push(in_child(&o.child_args(&["--api"])));
            eprintln!("run {run}: the daemon following the API server");
        }
        report::finish_api(&runs::combine(&apis), &machine);
        return;
    }
    // The static build takes minutes; --smoke leaves it out unless asked for.
    let statics = if o.has("--no-musl") || (o.smoke && !o.has("--musl-only")) { None } else { musl::binaries() };
    if part_alone(&o, statics.as_ref()) {
        return;
    }
    full_run(&o, statics.as_ref(), &machine);
}

/// The parts run in this process that need no daemon: one case (`--case N`), a scheduler
/// case, conntrack's, first-packet latency. Whether `o` asked for one.
fn in_process(o: &Opts) -> bool {
    let (args, smoke) = (&o.args, o.smoke);
    if let Some(i) = args.iter().position(|a| a == "--case") {
        let idx: usize = args[i + 1].parse().expect("case index");
        println!("{}", case::run_case(&cases(smoke)[idx], o.limit));
        return true;
    }
    if let Some(r) = schedulers::child(args, smoke) {
        println!("{r}");
        return true;
    }
    if let Some(i) = args.iter().position(|a| a == "--conntrack-child") {
        println!("{}", conntrack::child(&args[i + 1], &args[i + 2]));
        return true;
    }
    if o.has("--conntrack") {
        if !common::kernel_available() {
            std::process::exit(1);
        }
        let results = conntrack::run(smoke, o.runs);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        std::fs::create_dir_all(&dir).expect("target/bench");
        std::fs::write(dir.join("conntrack.json"), results.to_string()).expect("write conntrack.json");
        return true;
    }
    if o.has("--dispatch") {
        println!("{}", dispatch::run(smoke));
        return true;
    }
    if let Some(i) = args.iter().position(|a| a == "--latency") {
        let size = |k: usize| args[i + k].parse().expect("services");
        println!("{}", latency::run(size(1), size(2)));
        return true;
    }
    false
}

/// The parts that run the daemon at the daemon's own case, one in this process, or at N
/// services (`runs::sized_part`). Whether `o` asked for one.
fn daemon_part(o: &Opts) -> bool {
    // `--api-start N`: one daemon start at N services through the API server (`start.rs`);
    // `--api-start-only [N]`: `runs` of them at N, or at 30k and 100k. The same for another
    // nftables user's waits (`neighbour.rs`) at N, or 100k.
    let (api_start, neighbour): (runs::Sized, runs::Sized) =
        ((start::run, start::print), (neighbour::run, neighbour::print));
    let rehashing: runs::Sized = (rehash::run, rehash::print);
    if runs::sized_part(&o.args, o.runs, ("--api-start", "--api-start-only"), &start::SIZES, api_start)
        || runs::sized_part(&o.args, o.runs, ("--neighbour", "--neighbour-only"), &[neighbour::SERVICES], neighbour)
        || runs::sized_part(&o.args, o.runs, ("--rehash", "--rehash-only"), &[rehash::SERVICES], rehashing)
    {
        return true;
    }
    let (args, smoke) = (&o.args, o.smoke);
    let daemon_case = o.daemon_case();
    let r = if o.has("--churn") {
        churn::run(&daemon_case, if smoke { 3 } else { 25 })
    } else if o.has("--api") {
        api::run(&daemon_case, api::Sizes::new(smoke))
    } else if o.has("--diff") {
        diff::run(&daemon_case)
    } else if o.has("--refused") {
        refused::run(&daemon_case)
    } else if o.has("--wire") {
        wire::run(&daemon_case)
    } else if o.has("--tracing") {
        tracing::run(&daemon_case)
    } else if o.has("--first-state") {
        first_state::run(&daemon_case)
    } else if o.has("--health") {
        health::run(if smoke { 50 } else { health::SERVICES })
    } else if o.has("--localhost") {
        localhost::run(if smoke { 50 } else { localhost::SERVICES })
    } else if let Some(i) = args.iter().position(|a| a == "--api-idle") {
        let secs = args.get(i + 1).and_then(|s| s.parse().ok()).expect("--api-idle SECONDS");
        let r = api::idle(&daemon_case, secs);
        eprintln!("{}", serde_json::to_string_pretty(&r).expect("json"));
        r
    } else {
        return false;
    };
    println!("{r}");
    true
}

/// One part alone, `runs` times (`--musl-only`, `--diff-only`, ...), its figures printed
/// combined. Whether `o` asked for one.
fn part_alone(o: &Opts, statics: Option<&musl::Binaries>) -> bool {
    let each = |flag: &str| -> Vec<Value> { (0..o.runs).map(|_| in_child(&o.child_args(&[flag]))).collect() };
    if o.has("--musl-only") {
        let Some(bins) = statics else { return true };
        let all: Vec<Value> = (1..=o.runs).map(|run| musl::run(&o.daemon_case(), bins, run)).collect();
        musl::print(&runs::combine(&all));
    } else if o.has("--diff-only") {
        diff::print(&each("--diff"));
    } else if o.has("--schedulers-only") {
        let mode = o.child_args(&[]);
        schedulers::print(&(0..o.runs).map(|_| schedulers::run_once(&mode)).collect::<Vec<_>>());
    } else if o.has("--refused-only") {
        refused::print(&each("--refused"));
    } else if o.has("--wire-only") {
        wire::print(&each("--wire"));
    } else if o.has("--tracing-only") {
        tracing::print(&each("--tracing"));
    } else if o.has("--first-state-only") {
        first_state::print(&each("--first-state"));
    } else if o.has("--health-only") {
        health::print(&runs::combine(&each("--health")));
    } else if o.has("--dispatch-only") {
        dispatch::print(&each("--dispatch"));
    } else if o.has("--localhost-only") {
        localhost::print(&runs::combine(&each("--localhost")));
    } else if o.has("--cases-only") {
        report::print_cases(&cases_runs(o), &runs::machine());
    } else {
        return false;
    }
    true
}

/// The cases alone, `runs` times, interleaved as in a full run; their combined results.
fn cases_runs(o: &Opts) -> Vec<Value> {
    let mut per_case: Vec<Vec<Value>> = vec![Vec::new(); cases(o.smoke).len()];
    for run in 1..=o.runs {
        for (idx, results) in per_case.iter_mut().enumerate() {
            let r = in_child(&o.child_args(&["--case", &idx.to_string()]));
            report::print_case(&r, run);
            results.push(r);
        }
    }
    per_case.iter().map(|r| runs::combine(r)).collect()
}

/// Every part, `runs` times: the cases, each in a child, then the others; the tables printed
/// and the results written under `target/bench/`.
fn full_run(o: &Opts, statics: Option<&musl::Binaries>, machine: &Value) {
    let n = cases(o.smoke).len();
    let mut per_case: Vec<Vec<Value>> = vec![Vec::new(); n];
    let mut latencies = Vec::new();
    let mut churns = Vec::new();
    let mut apis = Vec::new();
    let mut healths = Vec::new();
    let mut musls = Vec::new();
    let mut diffs = Vec::new();
    let mut refusals = Vec::new();
    let mut wires = Vec::new();
    let mut scheds = Vec::new();
    let mut traces = Vec::new();
    let mut localhosts = Vec::new();
    let mut firsts = Vec::new();
    let large = if o.smoke { "1000" } else { "30000" };
    let daemon_case = o.daemon_case();
    // Runs interleave the cases, so a slow spell on the machine does not land on one case.
    for run in 1..=o.runs {
        for (idx, results) in per_case.iter_mut().enumerate() {
            let r = in_child(&o.child_args(&["--case", &idx.to_string()]));
            report::print_case(&r, run);
            results.push(r);
        }
        latencies.push(in_child(&o.child_args(&["--latency", "100", large])));
        churns.push(in_child(&o.child_args(&["--churn"])));
        apis.push(in_child(&o.child_args(&["--api"])));
        eprintln!("run {run}: the daemon following the API server");
        healths.push(in_child(&o.child_args(&["--health"])));
        diffs.push(in_child(&o.child_args(&["--diff"])));
        refusals.push(in_child(&o.child_args(&["--refused"])));
        wires.push(in_child(&o.child_args(&["--wire"])));
        traces.push(in_child(&o.child_args(&["--tracing"])));
        localhosts.push(in_child(&o.child_args(&["--localhost"])));
        firsts.push(in_child(&o.child_args(&["--first-state"])));
        scheds.push(schedulers::run_once(&o.child_args(&[])));
        if let Some(bins) = statics {
            musls.push(musl::run(&daemon_case, bins, run));
            eprintln!("run {run}: the static binary and the glibc build");
        }
    }
    let results: Vec<Value> = per_case.iter().map(|r| runs::combine(r)).collect();
    let api = runs::combine(&apis);
    report::finish(&results, &runs::combine_lists(&latencies), &runs::combine_lists(&churns), &api, machine);
    health::print(&runs::combine(&healths));
    diff::print(&diffs);
    refused::print(&refusals);
    wire::print(&wires);
    tracing::print(&traces);
    localhost::print(&runs::combine(&localhosts));
    first_state::print(&firsts);
    schedulers::print(&scheds);
    if !musls.is_empty() {
        musl::print(&runs::combine(&musls));
    }
}
