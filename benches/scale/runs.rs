//! Repeated runs: every figure of a case is taken over several runs and reported as the
//! median with its spread (lowest to highest), so a table can be checked on another machine.

use serde_json::{Map, Value, json};

/// Picks one number out of a run's values (sorted ascending).
type Pick = fn(&[f64]) -> f64;

fn median(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn lowest(v: &[f64]) -> f64 {
    v[0]
}

fn highest(v: &[f64]) -> f64 {
    v[v.len() - 1]
}

/// The runs folded into one value of the same shape: numbers by `pick`, anything else as the
/// first run has it. A number missing in any run (an upstream load past its cut-off) is
/// missing in the result.
fn fold(runs: &[&Value], pick: Pick) -> Value {
    match runs.first() {
        Some(Value::Object(first)) => {
            let mut out = Map::new();
            for key in first.keys() {
                let column: Vec<&Value> = runs.iter().map(|r| &r[key.as_str()]).collect();
                out.insert(key.clone(), fold(&column, pick));
            }
            Value::Object(out)
        }
        Some(Value::Number(_)) => {
            let mut nums: Vec<f64> = runs.iter().filter_map(|v| v.as_f64()).collect();
            if nums.len() < runs.len() {
                return Value::Null;
            }
            nums.sort_by(f64::total_cmp);
            json!((pick(&nums) * 100.0).round() / 100.0)
        }
        Some(other) => (*other).clone(),
        None => Value::Null,
    }
}

/// One case over its runs: `{"median": …, "min": …, "max": …, "runs": N}`, each in the shape
/// of one run's result.
pub fn combine(runs: &[Value]) -> Value {
    let refs: Vec<&Value> = runs.iter().collect();
    json!({"median": fold(&refs, median), "min": fold(&refs, lowest), "max": fold(&refs, highest), "runs": runs.len()})
}

/// Lists of results (one list per run, same order) combined entry by entry.
pub fn combine_lists(runs: &[Value]) -> Vec<Value> {
    let len = runs.iter().filter_map(Value::as_array).map(Vec::len).min().unwrap_or(0);
    (0..len).map(|i| combine(&runs.iter().map(|r| r[i].clone()).collect::<Vec<_>>())).collect()
}

/// What anyone comparing figures needs to know of the machine, read before the first run.
pub fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let nft = std::process::Command::new("nft").arg("--version").output();
    let nft = nft.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(0);
    let loadavg = read("/proc/loadavg");
    let load = loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    json!({"kernel": read("/proc/sys/kernel/osrelease"), "nft": nft, "cores": cores, "load_before": load})
}
