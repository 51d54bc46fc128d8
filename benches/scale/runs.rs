//! Repeated runs: every figure of a case is taken over several runs and reported as the
//! median with its spread (lowest to highest), so a table can be checked on another machine;
//! each run in a child process of its own, so its peak memory and leftovers are its own.

use serde_json::{Map, Value, json};

/// Runs `args` in a child process of this benchmark and returns the JSON it prints last.
pub fn in_child(args: &[String]) -> Value {
    let out = std::process::Command::new(std::env::current_exe().expect("exe")).args(args).output().expect("child");
    assert!(out.status.success(), "bench child {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).expect("child output")
}

/// A part measured at N services: one run at N, and the runs at one size printed combined.
pub type Sized = (fn(u32) -> Value, fn(&[Value]));

/// A part measured at N services, given the command line `args`: `CHILD N` runs it once with
/// `run` and prints its JSON; `ONLY [N]` runs `runs` children at N, or at each of `sizes`,
/// and prints each size's with `print`. Whether `args` asked for it.
pub fn sized_part(
    args: &[String],
    runs: usize,
    (child, only): (&str, &str),
    sizes: &[u32],
    (run, print): Sized,
) -> bool {
    let size_after = |i: usize| args.get(i + 1).and_then(|n| n.parse::<u32>().ok());
    if let Some(i) = args.iter().position(|a| a == child) {
        println!("{}", run(size_after(i).unwrap_or_else(|| panic!("{child} N"))));
    } else if let Some(i) = args.iter().position(|a| a == only) {
        for n in size_after(i).map_or(sizes.to_vec(), |n| vec![n]) {
            print(&(0..runs).map(|_| in_child(&[child.into(), n.to_string()])).collect::<Vec<_>>());
        }
    } else {
        return false;
    }
    true
}

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

/// The figure at `path` of combined runs (`combine`) as "median (lowest–highest)"; "-" for
/// one missing.
pub fn spread(c: &Value, path: &[&str]) -> String {
    let at = |which: &str| path.iter().fold(&c[which], |v, p| &v[*p]).as_f64().map_or("-".into(), |x| x.to_string());
    format!("{} ({}–{})", at("median"), at("min"), at("max"))
}

/// Writes `value` as `target/bench/NAME`, for comparing with later runs; a failure to write
/// only loses that file, the figures are printed anyway.
pub fn write(name: &str, value: &Value) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(name), value.to_string());
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
