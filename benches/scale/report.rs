//! Printing and saving the benchmark's results: each figure as the median of the runs with
//! its spread (lowest–highest).

use serde_json::{Value, json};

mod api;
pub use api::finish_api;
use api::print_api;

/// A figure at `path` of a combined result: `median (min–max)`, or the median alone when the
/// runs agree (or there was one).
fn cell(r: &Value, path: &[&str]) -> String {
    let at = |which: &str| path.iter().fold(&r[which], |v, k| &v[*k]).as_f64();
    match (at("median"), at("min"), at("max")) {
        (Some(m), Some(lo), Some(hi)) if (hi - lo).abs() >= 0.05 => format!("{m:.1} ({lo:.1}–{hi:.1})"),
        (Some(m), _, _) => format!("{m:.1}"),
        _ => "-".into(),
    }
}

/// A count (services, rewrites) as a whole number.
fn count(v: &Value) -> String {
    v.as_f64().map_or_else(|| "-".into(), |n| format!("{n:.0}"))
}

/// How many times upstream's load took ours (medians); past the cut-off, at least the cut-off's.
fn ratio(r: &Value, upstream: &str) -> String {
    let m = &r["median"];
    match (m[upstream].as_f64(), m["full_first_ms"].as_f64(), m["upstream_limit_s"].as_f64()) {
        (Some(u), Some(o), _) if o > 0.0 => format!("{:.0}x", u / o),
        (None, Some(o), Some(l)) if o > 0.0 && l > 0.0 => format!("> {:.0}x", l * 1000.0 / o),
        _ => "-".into(),
    }
}

/// One progress line per case and run, as it finishes.
pub fn print_case(r: &Value, run: usize) {
    let first = r["full_first_ms"].as_f64().unwrap_or(f64::NAN);
    eprintln!("run {run}: {} (full sync {first:.1} ms)", r["case"].as_str().unwrap_or("?"));
}

const HEADER: &str = "case,render_ms,full_first_ms,full_refresh_ms,full_repair_ms,full_txns,partial1_ms,partial1_lines,partial100_ms,partial100_lines,peak_first_mb,peak_refresh_mb,peak_repair_mb,upstream_ga_ms,upstream_newest_ms";

/// Peak RSS of the proxy plus that of the `nft` it ran (medians), for one kind of full sync.
fn peak(r: &Value, proxy: &str, nft: &str) -> String {
    match (r["median"][proxy].as_f64(), r["median"][nft].as_f64()) {
        (Some(p), Some(n)) => format!("{:.0} ({:.0} + {:.0})", p + n, p, n),
        _ => "-".into(),
    }
}

fn row(r: &Value) -> Vec<String> {
    vec![
        r["median"]["case"].as_str().unwrap_or("?").to_string(),
        cell(r, &["render_ms"]),
        cell(r, &["full_first_ms"]),
        cell(r, &["full_refresh_ms"]),
        cell(r, &["full_repair_ms"]),
        ["full_first_txns", "full_refresh_txns", "full_repair_txns"].map(|k| count(&r["median"][k])).join("/"),
        cell(r, &["partial_1", "total_ms"]),
        count(&r["median"]["partial_1"]["lines"]),
        cell(r, &["partial_100", "total_ms"]),
        count(&r["median"]["partial_100"]["lines"]),
        peak(r, "proxy_rss_first_mb", "nft_rss_first_mb"),
        peak(r, "proxy_rss_refresh_mb", "nft_rss_refresh_mb"),
        peak(r, "proxy_rss_repair_mb", "nft_rss_repair_mb"),
        cell(r, &["upstream_ga_ms"]),
        cell(r, &["upstream_newest_ms"]),
    ]
}

/// Prints the table again from the JSON a full run wrote (`-- --report`), or that of the API
/// part alone (`-- --report --api-only`).
pub fn reprint(api_only: bool) {
    if api_only {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench/api.json");
        let text = std::fs::read_to_string(&file).expect("target/bench/api.json: run `-- --api-only` first");
        let all: Value = serde_json::from_str(&text).expect("api.json");
        finish_api(&all["api"], &all["machine"]);
        return;
    }
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench/scale.json");
    let text = std::fs::read_to_string(&file).expect("target/bench/scale.json: run the benchmark first");
    let all: Value = serde_json::from_str(&text).expect("scale.json");
    let cases = all["cases"].as_array().cloned().unwrap_or_default();
    let list = |key: &str| all[key].as_array().cloned().unwrap_or_default();
    finish(&cases, &list("latency"), &list("churn"), &all["api"], &all["machine"]);
}

/// Prints the machine and the cases' table alone (`-- --cases-only`: a quick look at the main
/// figures, e.g. of another build profile).
pub fn print_cases(results: &[Value], machine: &Value) {
    let runs = results.first().map(|r| r["runs"].clone()).unwrap_or_default();
    print_machine(machine, &runs);
    println!("| {} | GA / ours | newest / ours |", HEADER.replace(',', " | "));
    println!("|{}", "---|".repeat(HEADER.split(',').count() + 2));
    for r in results {
        // Like for like: upstream's shapes are loaded into an empty namespace, as our first sync.
        println!("| {} | {} | {} |", row(r).join(" | "), ratio(r, "upstream_ga_ms"), ratio(r, "upstream_newest_ms"));
    }
    println!(
        "\nupstream loads are cut at {} s (`-` = did not finish in some run)",
        results.first().map(|r| r["median"]["upstream_limit_s"].clone()).unwrap_or_default()
    );
}

/// Prints the table, and writes CSV and JSON under `target/bench/`.
pub fn finish(results: &[Value], latency: &[Value], churn: &[Value], api: &Value, machine: &Value) {
    print_cases(results, machine);
    println!("\n| case | explain ms | render alone ms |\n|---|---|---|");
    for r in results {
        let case = r["median"]["case"].as_str().unwrap_or("?");
        println!("| {case} | {} | {} |", cell(r, &["explain_ms"]), cell(r, &["render_ms"]));
    }
    println!("\n| services | connect median µs | connect p99 µs |\n|---|---|---|");
    for l in latency {
        println!("| {} | {} | {} |", count(&l["median"]["services"]), cell(l, &["median_us"]), cell(l, &["p99_us"]));
    }
    println!(
        "\n| daemon under churn | rewrites | RSS before MB | RSS at most MB | RSS after MB | syncs |\n|---|---|---|---|---|---|"
    );
    for c in churn {
        let m = &c["median"];
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            m["scenario"].as_str().unwrap_or("?"),
            count(&m["rewrites"]),
            cell(c, &["rss_before_mb"]),
            cell(c, &["rss_most_mb"]),
            cell(c, &["rss_after_mb"]),
            count(&m["syncs"])
        );
    }
    print_api(api, "api");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let csv: Vec<String> =
        std::iter::once(HEADER.to_string()).chain(results.iter().map(|r| row(r).join(","))).collect();
    std::fs::write(dir.join("scale.csv"), csv.join("\n") + "\n").expect("csv");
    let all = json!({"machine": machine, "cases": results, "latency": latency, "churn": churn, "api": api});
    std::fs::write(dir.join("scale.json"), serde_json::to_string_pretty(&all).expect("json")).expect("json");
    let api_csv = if api.is_null() { "" } else { ", target/bench/api.csv" };
    println!("\nwritten: target/bench/scale.csv, target/bench/scale.json{api_csv}");
}

/// The machine the runs ran on, and how many runs there were.
fn print_machine(machine: &Value, runs: &Value) {
    println!(
        "machine: {} cores, kernel {}, {}, load average before the first run {}; {runs} runs, median (lowest–highest)\n",
        machine["cores"],
        machine["kernel"].as_str().unwrap_or("?"),
        machine["nft"].as_str().unwrap_or("?"),
        machine["load_before"].as_str().unwrap_or("?")
    );
}
