//! The shipped static binary (musl, `packaging/build-static.sh`) against the glibc build: each
//! runs as an operator runs it, over the manifests of a 30k x 5 cluster in a fresh node-like
//! namespace, and its first full sync is timed from its log line, the duration that
//! `kubeproxy_sync_proxy_rules_duration_seconds` observes too. Also measured: spawn to that
//! line (manifests parsed, model built) and the process's peak resident memory.
//!
//! The static binary is built here unless `KNP_BENCH_MUSL` names one already built; where the
//! script cannot build it (no rustup target, no musl-gcc), this part is skipped.

use super::common::Netns;
use super::common::daemon::Daemon;
use super::observe::{LogTail, cpu_s, is_sync, ms_between, peak_rss_of, round2, sync_figures};
use super::synth::Case;
use serde_json::{Value, json};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The two binaries compared, by the name each is reported under.
pub struct Binaries {
    glibc: PathBuf,
    musl: PathBuf,
}

/// The glibc build is the one `cargo bench` built (the bench profile is the release one), the
/// static one `KNP_BENCH_MUSL` or built now; `None` when it cannot be had.
pub fn binaries() -> Option<Binaries> {
    let glibc = PathBuf::from(env!("CARGO_BIN_EXE_kube-nftproxy"));
    if let Some(path) = std::env::var_os("KNP_BENCH_MUSL") {
        return Some(Binaries { glibc, musl: path.into() });
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/bench/static");
    eprintln!("musl: building the static binary (packaging/build-static.sh; KNP_BENCH_MUSL=PATH uses one built)");
    let t = Instant::now();
    // Its output goes to stderr: stdout is the benchmark's report.
    let status =
        Command::new(root.join("packaging/build-static.sh")).arg(&out).stdout(Stdio::from(std::io::stderr())).status();
    match status {
        Ok(s) if s.success() => {
            eprintln!("musl: built in {:.0} s", t.elapsed().as_secs_f64());
            Some(Binaries { glibc, musl: out.join("kube-nftproxy") })
        }
        other => {
            eprintln!("musl: skipped, the static build failed ({other:?})");
            None
        }
    }
}

/// One binary's first sync over `manifest`, in a namespace of its own.
fn first_sync(binary: &Path, manifest: &Path) -> Value {
    let ns = Netns::node_like("muslbench");
    let argv: Vec<OsString> = [
        binary.as_os_str(),
        "--hostname-override=node-a".as_ref(),
        "--cluster-cidr=10.0.0.0/8,fd00:10::/32".as_ref(),
        "--manifests".as_ref(),
        manifest.as_os_str(),
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    let spawned = Instant::now();
    let d = Daemon::start_argv(&ns, &argv, manifest, &[]);
    let log = LogTail::start(&d.log);
    let Some((at, line)) = log.wait(0, Duration::from_secs(120), is_sync) else {
        panic!("{} never synced:\n{}", binary.display(), d.logged());
    };
    // The sync's peak is behind it once its line is written. CPU time is read too: on a
    // machine shared with other work it moves less than wall time does.
    let (peak, cpu) = (peak_rss_of(d.pid()), cpu_s(d.pid()).0);
    d.stop();
    let sync = sync_figures(&line);
    json!({"took_ms": sync["took_ms"], "render_ms": sync["render_ms"], "apply_ms": sync["apply_ms"],
           "kind": sync["kind"], "start_ms": ms_between(spawned, at), "cpu_ms": round2(cpu * 1e3), "peak_mb": peak})
}

/// One run: both binaries over the same manifest, in turn (which goes first alternates with
/// `run`, so a slow spell of the machine does not always land on the same one).
pub fn run(case: &Case, bins: &Binaries, run: usize) -> Value {
    let dir = super::common::Scratch::new("muslbench");
    let manifest = dir.0.join("cluster.json");
    super::churn::write_manifest(case, 0, &manifest);
    let mut out = serde_json::Map::new();
    let order = [("glibc", &bins.glibc), ("musl", &bins.musl)];
    for i in 0..2 {
        let (name, path) = order[(i + run) % 2];
        out.insert(name.into(), first_sync(path, &manifest));
    }
    let _ = std::fs::remove_dir_all(&dir.0);
    // The ratio within each run too: the two ran a few seconds apart, so drift on the machine
    // cancels out more than across runs.
    let over =
        |k: &str| round2(out["musl"][k].as_f64().unwrap_or(f64::NAN) / out["glibc"][k].as_f64().unwrap_or(f64::NAN));
    json!({"services": case.services, "endpoints": case.endpoints, "glibc": out["glibc"], "musl": out["musl"],
           "ratio": {"took_ms": over("took_ms"), "start_ms": over("start_ms"), "cpu_ms": over("cpu_ms")}})
}

/// Prints the combined runs (`runs::combine`) with musl's time over glibc's, and writes them
/// to `target/bench/musl.json`.
pub fn print(r: &Value) {
    let f = |which: &str, bin: &str, key: &str| r[which][bin][key].as_f64().unwrap_or(f64::NAN);
    let cell = |bin: &str, key: &str| {
        format!("{:.0} ({:.0}–{:.0})", f("median", bin, key), f("min", bin, key), f("max", bin, key))
    };
    let m = &r["median"];
    println!(
        "\nstatic musl binary against the glibc build: {} x {}, first full sync over --manifests, {} runs, median (lowest–highest)\n",
        m["services"].as_f64().unwrap_or_default(),
        m["endpoints"].as_f64().unwrap_or_default(),
        r["runs"]
    );
    println!("| binary | sync, ms | render, ms | apply, ms | spawn to synced, ms | CPU to synced, ms | peak RSS, MB |");
    println!("|---|---|---|---|---|---|---|");
    for bin in ["glibc", "musl"] {
        let cells = ["took_ms", "render_ms", "apply_ms", "start_ms", "cpu_ms", "peak_mb"].map(|k| cell(bin, k));
        println!("| {bin} | {} |", cells.join(" | "));
    }
    let ratio = |key: &str| {
        let at = |which: &str| r[which]["ratio"][key].as_f64().unwrap_or(f64::NAN);
        format!("{:.2}x ({:.2}–{:.2})", at("median"), at("min"), at("max"))
    };
    println!("\nmusl / glibc, per run (median, lowest–highest):");
    println!("sync {}, spawn to synced {}, CPU to synced {}", ratio("took_ms"), ratio("start_ms"), ratio("cpu_ms"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    std::fs::write(dir.join("musl.json"), serde_json::to_string_pretty(r).expect("json")).expect("write musl.json");
    println!("written: target/bench/musl.json");
}
