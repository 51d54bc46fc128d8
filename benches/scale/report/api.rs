//! The API part's table: the daemon following the API server, each figure as the median of
//! the runs with its spread, its target and whether every run met it; also written as
//! `target/bench/{name}.csv` (and, for `--api-only`, `api.json`).

use super::{cell, count, print_machine};
use serde_json::{Value, json};

/// What a figure of the API part should be.
enum Target {
    /// No target; measured for context.
    None,
    /// At most this.
    Max(f64),
    /// Exactly this.
    Equal(f64),
}

/// One row of the API part: label, where in a run's result, target.
struct ApiRow {
    label: String,
    path: Vec<&'static str>,
    target: Target,
}

/// The API part's rows, some labelled from the median run (sync kinds, sizes).
fn api_rows(m: &Value) -> Vec<ApiRow> {
    let row = |label: &str, path: &[&'static str], target| ApiRow { label: label.into(), path: path.to_vec(), target };
    let kind = |p: &str| m[p]["sync"]["kind"].as_str().unwrap_or("?").to_string();
    let mut rows = vec![
        row("start: spawn → first sync done, ms", &["start", "ms"], Target::Max(2000.0)),
        row("start: following the API server, ms after spawn", &["start", "following_ms"], Target::None),
    ];
    for r in ["services", "endpointslices", "nodes", "servicecidrs"] {
        let label = format!("start: list {r}, ms (logged)");
        rows.push(ApiRow { label, path: vec!["start", "listed", r, "took_ms"], target: Target::None });
    }
    rows.extend([
        row("start: every source listed, ms after spawn", &["start", "all_listed_ms"], Target::None),
        row(
            &format!("start: first sync ({}), ms (logged)", kind("start")),
            &["start", "sync", "took_ms"],
            Target::None,
        ),
        row("start: first sync: render, ms", &["start", "sync", "render_ms"], Target::None),
        row("start: first sync: apply, ms", &["start", "sync", "apply_ms"], Target::None),
        row(
            &format!("restart over its rules: spawn → sync ({}) done, ms", kind("restart")),
            &["restart", "ms"],
            Target::None,
        ),
    ]);
    rows.extend(latency_rows(m));
    rows.extend([
        row("RSS after start, MB", &["rss_start_mb"], Target::Max(200.0)),
        row("RSS after churn (3 s after), MB", &["rss_after_churn_mb"], Target::Max(200.0)),
        row("debug views: RSS at rest before, MB", &["debug_views", "rss_at_rest_mb"], Target::None),
        row("debug views: /debug/ruleset, ms to the last byte", &["debug_views", "ruleset", "ms"], Target::None),
        row("debug views: /debug/ruleset, MB", &["debug_views", "ruleset", "mb"], Target::None),
        row("debug views: /debug/ruleset, RSS at most, MB", &["debug_views", "ruleset", "rss_most_mb"], Target::None),
        row("debug views: /debug/services, ms to the last byte", &["debug_views", "services", "ms"], Target::None),
        row("debug views: /debug/services, MB", &["debug_views", "services", "mb"], Target::None),
        row("debug views: /debug/services, RSS at most, MB", &["debug_views", "services", "rss_most_mb"], Target::None),
    ]);
    for r in ["services", "endpointslices", "nodes", "servicecidrs"] {
        // The first listing (resourceVersion=0) is answered whole, as a watch cache answers it.
        let label = format!("requests: list requests of {r}");
        rows.push(ApiRow { label, path: vec!["requests", "lists", r], target: Target::Equal(1.0) });
    }
    for r in ["services", "endpointslices", "nodes", "servicecidrs"] {
        rows.push(ApiRow {
            label: format!("requests: watches of {r}"),
            path: vec!["requests", "watch", r],
            target: Target::None,
        });
    }
    rows.extend([
        row("requests: answered with an error", &["requests", "errors"], Target::Equal(0.0)),
        row("daemon warnings and errors logged", &["warnings"], Target::Equal(0.0)),
        row("duration the requests cover, s", &["covered_s"], Target::None),
    ]);
    rows
}

/// The rows of the time from a change to the kernel and to traffic (issue 24's targets).
fn latency_rows(m: &Value) -> Vec<ApiRow> {
    [pair_rows(m), churn_rows(m), all_at_once_rows(m), wait_rows(), isolated_rows(m)].into_iter().flatten().collect()
}

/// A row with a label of its own making.
fn api_row(label: String, path: &[&'static str], target: Target) -> ApiRow {
    ApiRow { label, path: path.to_vec(), target }
}

/// New Service + slice pairs, isolated and under churn: event to traffic and to the kernel.
fn pair_rows(m: &Value) -> Vec<ApiRow> {
    let pi = format!(
        "new Service + slice, isolated ({} pairs {} ms apart, min-sync-period 1 s)",
        count(&m["pairs_isolated"]["pairs"]),
        count(&m["pairs_isolated"]["gap_ms"])
    );
    let pc = format!("new Service + slice under churn ({} pairs)", count(&m["churn"]["pairs"]["pairs"]));
    let mut rows = Vec::new();
    for (label, key, p50, p99) in [(&pi, "pairs_isolated", 10.0, 50.0), (&pc, "churn", 30.0, 100.0)] {
        let at = |k: &'static str| if key == "churn" { vec!["churn", "pairs", k] } else { vec![key, k] };
        for (what, k, target) in [
            ("event → traffic p50, ms", "traffic_p50_ms", Target::Max(p50)),
            ("event → traffic p99, ms", "traffic_p99_ms", Target::Max(p99)),
            ("event → traffic max, ms", "traffic_max_ms", Target::None),
            ("event → kernel p50, ms", "kernel_p50_ms", Target::Max(p50)),
            ("event → kernel p99, ms", "kernel_p99_ms", Target::Max(p99)),
            ("never connected", "traffic_missing", Target::Equal(0.0)),
            ("never in the kernel", "kernel_missing", Target::Equal(0.0)),
            ("first attempt (before the post) not refused", "first_not_refused", Target::Equal(0.0)),
            ("attempts that timed out instead of being refused", "attempt_timeouts", Target::None),
        ] {
            rows.push(ApiRow { label: format!("{label}: {what}"), path: at(k), target });
        }
    }
    rows
}

/// Both churns (`churn`: ten changes together every 100 ms; `steady_churn`: one every 10 ms):
/// rate, syncs, event to kernel, and CPU.
fn churn_rows(m: &Value) -> Vec<ApiRow> {
    let mut rows = Vec::new();
    let churns = [
        ("churn", "churn"),
        ("steady_churn", "steady churn, one by one"),
        ("steady_churn_unaimed", "the same, --sync-share=1 (baseline)"),
    ];
    for (key, name) in churns {
        let secs = m[key]["seconds"].as_f64().unwrap_or(0.0);
        let per_s = m[key]["changes"].as_f64().unwrap_or(0.0) / secs.max(1.0);
        let row = |label: &str, k: &'static str, target| api_row(format!("{name}: {label}"), &[key, k], target);
        rows.extend([
            row(&format!("changes ({per_s:.0}/s for {secs:.0} s)"), "changes", Target::None),
            row("syncs (min-sync-period 1 s)", "syncs", Target::None),
            row("sync time median, ms (logged)", "sync_ms_median", Target::None),
            row("sync time max, ms (logged)", "sync_ms_max", Target::None),
            row("event → kernel p50, ms", "p50_ms", Target::Max(30.0)),
            row("event → kernel p99, ms", "p99_ms", Target::Max(100.0)),
            row("event → kernel max, ms", "max_ms", Target::None),
            row("never in the kernel", "missing", Target::Equal(0.0)),
            row(
                "daemon CPU, % of one core",
                "daemon_cpu_pct",
                match key {
                    "churn" => Target::Max(15.0),
                    "steady_churn" => Target::Max(10.0),
                    _ => Target::None,
                },
            ),
            row("daemon's children (nft) CPU, % of one core", "daemon_children_cpu_pct", Target::None),
            row("emulator CPU, % of one core", "emulator_cpu_pct", Target::None),
        ]);
    }
    rows
}

/// Every slice changed in one post: until the kernel has the last, and the syncs it took.
fn all_at_once_rows(m: &Value) -> Vec<ApiRow> {
    vec![
        api_row(
            format!(
                "every slice at once ({}, one post): post → last sync done, ms",
                count(&m["all_at_once"]["slices"])
            ),
            &["all_at_once", "kernel_ms"],
            Target::None,
        ),
        api_row(
            "every slice at once: the emulator accepted the post, ms".into(),
            &["all_at_once", "accepted_ms"],
            Target::None,
        ),
        api_row(
            "every slice at once: first of the sample in the kernel, ms".into(),
            &["all_at_once", "first_in_kernel_ms"],
            Target::None,
        ),
        api_row(
            "every slice at once: sample never in the kernel".into(),
            &["all_at_once", "missing"],
            Target::Equal(0.0),
        ),
        api_row(
            "every slice at once: the last change's event (the post accepted) → kernel, ms".into(),
            &["all_at_once", "kernel_after_accepted_ms"],
            Target::Max(500.0),
        ),
        api_row(
            format!("every slice at once: syncs logged ({})", sync_kinds(m)),
            &["all_at_once", "syncs"],
            Target::None,
        ),
        api_row("every slice at once: their time, ms (logged)".into(), &["all_at_once", "syncs_took_ms"], Target::None),
    ]
}

/// How long changes waited after the churn, by the reason they waited.
fn wait_rows() -> Vec<ApiRow> {
    let mut rows = Vec::new();
    for reason in ["none", "gather", "cost", "pace", "retry"] {
        for (what, k) in [("changes", "count"), ("mean, ms", "mean_ms"), ("p99 bucket ≤, ms", "p99_le_ms")] {
            rows.push(ApiRow {
                label: format!("change wait after churn, reason {reason}: {what}"),
                path: vec!["change_wait", "after_churn", reason, k],
                target: Target::None,
            });
        }
    }
    rows
}

/// One slice change at a time on a daemon with min-sync-period 0: event to kernel.
fn isolated_rows(m: &Value) -> Vec<ApiRow> {
    vec![
        api_row(
            format!(
                "one slice change, isolated, on a second daemon with min-sync-period 0: event → kernel p50, ms ({} changes, {} ms apart)",
                count(&m["isolated"]["changes"]),
                count(&m["isolated"]["gap_ms"])
            ),
            &["isolated", "p50_ms"],
            Target::Max(20.0),
        ),
        api_row(
            "one slice change, isolated, min-sync-period 0: event → kernel p99, ms".into(),
            &["isolated", "p99_ms"],
            Target::Max(100.0),
        ),
        api_row(
            "one slice change, isolated, min-sync-period 0: event → kernel max, ms".into(),
            &["isolated", "max_ms"],
            Target::None,
        ),
        api_row(
            "one slice change, isolated, min-sync-period 0: never in the kernel".into(),
            &["isolated", "missing"],
            Target::Equal(0.0),
        ),
    ]
}

/// The kinds and sizes of the syncs logged for every slice changed at once (first run).
fn sync_kinds(m: &Value) -> String {
    let lines = m["all_at_once"]["sync_lines"].as_array().cloned().unwrap_or_default();
    let each = |s: &Value| format!("{} {} elements", s["kind"].as_str().unwrap_or("?"), count(&s["elements"]));
    lines.iter().map(each).collect::<Vec<_>>().join(", ")
}

/// A target as text, and whether the median and the worst run meet it.
fn judge(r: &Value, row: &ApiRow) -> (String, String) {
    let at = |which: &str| row.path.iter().fold(&r[which], |v, k| &v[*k]).as_f64();
    let meets = |v: Option<f64>, t: &Target| match (v, t) {
        (Some(v), Target::Max(m)) => Some(v <= *m),
        (Some(v), Target::Equal(e)) => Some((v - e).abs() < 1e-9),
        (None, Target::Max(_) | Target::Equal(_)) => Some(false),
        (_, Target::None) => None,
    };
    let text = match row.target {
        Target::None => String::new(),
        Target::Max(m) => format!("≤ {m}"),
        Target::Equal(e) => format!("= {e}"),
    };
    let worst = [at("min"), at("max")];
    let verdict = match meets(at("median"), &row.target) {
        None => String::new(),
        Some(false) => "missed".into(),
        Some(true) if worst.iter().all(|w| meets(*w, &row.target) == Some(true)) => "met".into(),
        Some(true) => "met (median; not every run)".into(),
    };
    (text, verdict)
}

/// Prints the API part's table (one combined result) and writes it as `target/bench/{name}.csv`.
pub fn print_api(api: &Value, name: &str) {
    if api.is_null() {
        return;
    }
    let m = &api["median"];
    println!(
        "\nthe daemon following the API server (emulator, {} services x {} endpoints; {} runs, median (lowest–highest)):\n",
        count(&m["services"]),
        count(&m["endpoints"]),
        api["runs"]
    );
    println!("| figure | value | target | |\n|---|---|---|---|");
    let mut csv = vec!["figure,median,lowest,highest,target,verdict".to_string()];
    for row in api_rows(m) {
        let (target, verdict) = judge(api, &row);
        println!("| {} | {} | {target} | {verdict} |", row.label, cell(api, &row.path));
        let num = |which: &str| {
            row.path.iter().fold(&api[which], |v, k| &v[*k]).as_f64().map_or(String::new(), |x| x.to_string())
        };
        csv.push(format!("\"{}\",{},{},{},{target},{verdict}", row.label, num("median"), num("min"), num("max")));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    std::fs::write(dir.join(format!("{name}.csv")), csv.join("\n") + "\n").expect("csv");
}

/// `--api-only`: the API part's table, and its results in `target/bench/api.{csv,json}`.
pub fn finish_api(api: &Value, machine: &Value) {
    print_machine(machine, &api["runs"]);
    print_api(api, "api");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let all = json!({"machine": machine, "api": api});
    std::fs::write(dir.join("api.json"), serde_json::to_string_pretty(&all).expect("json")).expect("json");
    println!("\nwritten: target/bench/api.csv, target/bench/api.json");
}
