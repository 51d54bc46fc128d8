//! Printing and saving the benchmark's results.

use serde_json::{Value, json};

fn f(v: &Value) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    }
}

/// How many times upstream's load took ours; past the cut-off, at least the cut-off's.
fn ratio(up: &Value, ours: &Value, limit_s: &Value) -> String {
    match (up.as_f64(), ours.as_f64(), limit_s.as_f64()) {
        (Some(u), Some(o), _) if o > 0.0 => format!("{:.0}x", u / o),
        (None, Some(o), Some(l)) if o > 0.0 && l > 0.0 => format!("> {:.0}x", l * 1000.0 / o),
        _ => "-".into(),
    }
}

/// One progress line per case, as it finishes.
pub fn print_case(r: &Value) {
    eprintln!("done: {} (full sync {} ms)", r["case"].as_str().unwrap_or("?"), f(&r["full_first_ms"]));
}

const HEADER: &str = "case,render_ms,full_first_ms,full_refresh_ms,full_repair_ms,partial1_ms,partial1_lines,partial100_ms,partial100_lines,peak_first_mb,peak_refresh_mb,peak_repair_mb,upstream_ga_ms,upstream_newest_ms";

/// Peak RSS of the proxy plus that of the `nft` it ran, for one kind of full sync.
fn peak(r: &Value, proxy: &str, nft: &str) -> String {
    match (r[proxy].as_f64(), r[nft].as_f64()) {
        (Some(p), Some(n)) => format!("{:.0} ({:.0} + {:.0})", p + n, p, n),
        _ => "-".into(),
    }
}

fn row(r: &Value) -> Vec<String> {
    vec![
        r["case"].as_str().unwrap_or("?").to_string(),
        f(&r["render_ms"]),
        f(&r["full_first_ms"]),
        f(&r["full_refresh_ms"]),
        f(&r["full_repair_ms"]),
        f(&r["partial_1"]["total_ms"]),
        r["partial_1"]["lines"].to_string(),
        f(&r["partial_100"]["total_ms"]),
        r["partial_100"]["lines"].to_string(),
        peak(r, "proxy_rss_first_mb", "nft_rss_first_mb"),
        peak(r, "proxy_rss_refresh_mb", "nft_rss_refresh_mb"),
        peak(r, "proxy_rss_repair_mb", "nft_rss_repair_mb"),
        f(&r["upstream_ga_ms"]),
        f(&r["upstream_newest_ms"]),
    ]
}

/// Prints the table again from the JSON a full run wrote (`-- --report`).
pub fn reprint() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench/scale.json");
    let text = std::fs::read_to_string(&file).expect("target/bench/scale.json: run the benchmark first");
    let all: Value = serde_json::from_str(&text).expect("scale.json");
    let cases = all["cases"].as_array().cloned().unwrap_or_default();
    finish(&cases, all["latency"].as_array().map(Vec::as_slice).unwrap_or_default());
}

/// Prints the table and the targets, and writes CSV and JSON under `target/bench/`.
pub fn finish(results: &[Value], latency: &[Value]) {
    println!("| {} | GA / ours | newest / ours |", HEADER.replace(',', " | "));
    println!("|{}", "---|".repeat(HEADER.split(',').count() + 2));
    for r in results {
        // Like for like: upstream's shapes are loaded into an empty namespace, as our first sync.
        let ours = &r["full_first_ms"];
        println!(
            "| {} | {} | {} |",
            row(r).join(" | "),
            ratio(&r["upstream_ga_ms"], ours, &r["upstream_limit_s"]),
            ratio(&r["upstream_newest_ms"], ours, &r["upstream_limit_s"])
        );
    }
    println!(
        "\nupstream loads are cut at {} s (`-` = did not finish)",
        results.first().map(|r| r["upstream_limit_s"].clone()).unwrap_or_default()
    );
    println!("\n| services | connect median µs | connect p99 µs |\n|---|---|---|");
    for l in latency {
        println!("| {} | {} | {} |", l["services"], f(&l["median_us"]), f(&l["p99_us"]));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let csv: Vec<String> =
        std::iter::once(HEADER.to_string()).chain(results.iter().map(|r| row(r).join(","))).collect();
    std::fs::write(dir.join("scale.csv"), csv.join("\n") + "\n").expect("csv");
    let all = json!({"cases": results, "latency": latency});
    std::fs::write(dir.join("scale.json"), serde_json::to_string_pretty(&all).expect("json")).expect("json");
    println!("\nwritten: target/bench/scale.csv, target/bench/scale.json");
}
