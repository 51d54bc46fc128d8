//! The schedulers part's table: each figure beside its baseline from the same runs, median
//! (lowest–highest), with its target and whether every run met it; also written to
//! `target/bench/schedulers.json`.

use super::LATENCY;
use serde_json::{Value, json};

/// One row of the report: label, the figure's path, its baseline's path, target and whether
/// a number (the figure, or the ratio at `judged`) meets it.
struct Row {
    label: String,
    path: Vec<&'static str>,
    baseline: Option<(String, Vec<&'static str>)>,
    judged: Vec<&'static str>,
    max: f64,
}

/// A row; `judged` empty when it has no target.
fn row(
    label: String,
    path: &[&'static str],
    base: Option<(String, &[&'static str])>,
    judged: &[&'static str],
    max: f64,
) -> Row {
    Row { label, path: path.to_vec(), baseline: base.map(|(l, p)| (l, p.to_vec())), judged: judged.to_vec(), max }
}

/// The rows, labelled with the cases' names from the median run `m`.
fn rows(m: &Value) -> Vec<Row> {
    let name = |c: &str| m[c]["case"].as_str().unwrap_or("?").to_string();
    let (sh, mh, plain) = (name("mix-sh"), name("mh"), name("plain"));
    let mut rows = vec![
        row(
            format!("{sh}: first sync, ms"),
            &["mix-sh", "first_sync_ms"],
            Some((format!("{} (ClientIP)", name("mix")), &["mix", "first_sync_ms"])),
            &["mix-sh", "first_sync_ms"],
            300.0,
        ),
        row(format!("{sh}: first sync / ClientIP's"), &["ratios", "sh_vs_clientip_sync"], None, &[], 0.0),
    ];
    for (what, key, ratio) in
        [("first sync, ms", "first_sync_ms", "mh_vs_plain_sync"), ("peak RSS, MB", "peak_rss_mb", "mh_vs_plain_rss")]
    {
        rows.push(row(
            format!("{mh}: {what}"),
            &["mh", key],
            Some((plain.clone(), &["plain", key])),
            &["ratios", ratio],
            1.5,
        ));
    }
    let first = "the first change after the first sync (a random service's endpoint), ms";
    let base = Some((plain.clone(), &["plain", "first_change", "total_ms"][..]));
    rows.push(row(format!("{mh}: {first}"), &["mh", "first_change", "total_ms"], base, &[], 0.0));
    rows.extend(change_rows(&mh, &plain));
    rows.push(row(
        format!("{mh}: elements in the tables"),
        &["mh", "elements"],
        Some((plain, &["plain", "elements"])),
        &[],
        0.0,
    ));
    rows.extend(latency_rows());
    rows
}

/// The partial syncs of the mh case's changes beside the same changes of a random service
/// (the plain case): time, and the elements sent and touched.
fn change_rows(mh: &str, plain: &str) -> Vec<Row> {
    let random = format!("{plain}, a random service");
    let mut rows = Vec::new();
    let changes = [
        ("one endpoint of an mh service replaced", "one_endpoint"),
        ("the last endpoint of another mh service removed", "one_endpoint_removed"),
    ];
    for (what, key) in changes {
        rows.push(row(
            format!("{mh}: {what}, partial sync ms"),
            &["mh", key, "total_ms"],
            Some((random.clone(), &["plain", key, "total_ms"])),
            &["mh", key, "total_ms"],
            5.0,
        ));
        for (label, k) in [
            ("elements sent (added or deleted; a changed value is both)", "elements_sent"),
            ("of them added", "elements_added"),
            ("elements touched (the count a sync logs)", "elements_touched"),
        ] {
            rows.push(row(
                format!("{mh}: {what}: {label}"),
                &["mh", key, k],
                Some((random.clone(), &["plain", key, k])),
                &[],
                0.0,
            ));
        }
    }
    rows
}

/// The latency rows: each scheduler's median beside random's, judged by its ratio, and the p99s.
fn latency_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for &s in &LATENCY[1..] {
        let base = Some(("random".to_string(), &["latency", "random", "median_us"][..]));
        rows.push(row(
            format!("first-packet connect latency, {s}, median µs"),
            &["latency", s, "median_us"],
            base,
            &["latency", s, "vs_random"],
            1.1,
        ));
    }
    for s in LATENCY {
        rows.push(row(format!("first-packet connect latency, {s}, p99 µs"), &["latency", s, "p99_us"], None, &[], 0.0));
    }
    rows
}

/// Whether the median and every run meet `row`'s target (empty when it has none).
fn verdict(all: &Value, row: &Row) -> (String, String) {
    if row.judged.is_empty() {
        return (String::new(), String::new());
    }
    let at = |which: &str| row.judged.iter().fold(&all[which], |v, k| &v[*k]).as_f64();
    let ok = |v: Option<f64>| v.is_some_and(|v| v <= row.max);
    let ratio = row.judged.first() == Some(&"ratios") || row.judged.last() == Some(&"vs_random");
    let target = if ratio { format!("≤ {}x", row.max) } else { format!("≤ {}", row.max) };
    let v = match (ok(at("median")), ok(at("min")) && ok(at("max"))) {
        (false, _) => "missed",
        (true, true) => "met",
        (true, false) => "met (median; not every run)",
    };
    (target, v.into())
}

/// A figure at `path` of the combined runs: `median (lowest–highest)`, the median alone when
/// they agree; counts whole, ratios to 1 part in 100, the rest to 0.1.
fn figure(all: &Value, path: &[&str]) -> String {
    let at = |which: &str| path.iter().fold(&all[which], |v, k| &v[*k]).as_f64();
    let ratio = path.first() == Some(&"ratios") || path.last() == Some(&"vs_random");
    let places = if path.last().is_some_and(|k| k.starts_with("elements")) {
        0
    } else if ratio {
        2
    } else {
        1
    };
    let f = |x: f64| format!("{x:.places$}");
    match (at("median"), at("min"), at("max")) {
        (Some(m), Some(lo), Some(hi)) if f(lo) != f(hi) => format!("{} ({}–{})", f(m), f(lo), f(hi)),
        (Some(m), _, _) => f(m),
        _ => "-".into(),
    }
}

/// Prints the runs' figures, median (lowest–highest), and writes `target/bench/schedulers.json`.
pub fn print(runs: &[Value]) {
    let all = crate::runs::combine(runs);
    println!("\nschedulers (issue 25; {} runs, median (lowest–highest), baselines from the same runs):\n", all["runs"]);
    println!("| figure | value | baseline | target | met? (ratio) |\n|---|---|---|---|---|");
    for row in rows(&all["median"]) {
        let base = row.baseline.as_ref().map_or(String::new(), |(l, p)| format!("{l}: {}", figure(&all, p)));
        let value = figure(&all, &row.path);
        let (target, mut v) = verdict(&all, &row);
        // A target on the ratio to the baseline: the ratio (each run's own) beside the verdict.
        if !row.judged.is_empty() && row.judged != row.path {
            v = format!("{v}: {}x", figure(&all, &row.judged));
        }
        println!("| {} | {value} | {base} | {target} | {v} |", row.label);
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let text = serde_json::to_string_pretty(&json!({"combined": all, "runs": runs})).expect("json");
    std::fs::write(dir.join("schedulers.json"), text).expect("write schedulers.json");
    println!("\nwritten: target/bench/schedulers.json");
}
