//! What the benchmark observes of the processes it runs: the daemon's log lines and the
//! kernel's element notifications (`nft monitor`), each stamped as it arrives; CPU time and
//! resident memory from `/proc`.

use super::common::Netns;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines read from a stream, each with the moment it was read.
pub type Stamped = Arc<Mutex<Vec<(Instant, String)>>>;

/// Follows the daemon's log file as it grows, stamping each line as it appears (polled every
/// 2 ms: the figures are tens of milliseconds and up).
pub struct LogTail {
    lines: Stamped,
    stop: Arc<AtomicBool>,
}

impl LogTail {
    pub fn start(path: &Path) -> LogTail {
        let file = std::fs::File::open(path).expect("daemon log");
        let (lines, stop): (Stamped, _) = (Arc::default(), Arc::new(AtomicBool::new(false)));
        let (out, done) = (lines.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reader = BufReader::new(file);
            let mut line = String::new();
            while !done.load(Ordering::Relaxed) {
                match reader.read_line(&mut line) {
                    Ok(_) if line.ends_with('\n') => {
                        out.lock().expect("lines").push((Instant::now(), std::mem::take(&mut line)));
                    }
                    // At the end, or in the middle of a line being written.
                    _ => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        LogTail { lines, stop }
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<(Instant, String)> {
        self.lines.lock().expect("lines").clone()
    }

    /// Waits up to `limit` for a line matching `f` at or after line `from`; its time and text.
    pub fn wait(&self, from: usize, limit: Duration, f: impl Fn(&str) -> bool) -> Option<(Instant, String)> {
        self.position(from, limit, f).map(|i| self.lines.lock().expect("lines")[i].clone())
    }

    /// Waits up to `limit` for a line matching `f` at or after line `from`; its index.
    pub fn position(&self, from: usize, limit: Duration, f: impl Fn(&str) -> bool) -> Option<usize> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(i) = self.lines.lock().expect("lines").iter().skip(from).position(|(_, l)| f(l)) {
                return Some(from + i);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }
}

impl Drop for LogTail {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whether a daemon log line reports a sync that went through (every kind but "Unchanged" is
/// logged; a failed one says so).
pub fn is_sync(line: &str) -> bool {
    line.contains(" sync: ") && !line.contains("sync failed")
}

/// A `Duration`'s `Debug` text (`1.2s`, `812.3ms`, `40.1µs`, `900ns`) in ms.
pub fn debug_ms(text: &str) -> Option<f64> {
    let text = text.trim().trim_end_matches([',', ')']);
    let (num, scale) = [("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6), ("s", 1e3)]
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, *scale)))?;
    num.parse::<f64>().ok().map(|n| round2(n * scale))
}

pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn ms_between(from: Instant, to: Instant) -> f64 {
    round2(to.saturating_duration_since(from).as_secs_f64() * 1e3)
}

/// A sync line's figures: kind, elements and bytes sent, time, render and apply (ms).
pub fn sync_figures(line: &str) -> Value {
    let msg = line.split_once("] ").map_or(line, |(_, m)| m);
    let kind = msg.split(" sync").next().unwrap_or("?");
    let words: Vec<&str> = msg.split_whitespace().collect();
    let after = |w: &str| words.iter().position(|x| *x == w).and_then(|i| words.get(i + 1)).copied();
    let before = |w: &str| words.iter().position(|x| *x == w).and_then(|i| i.checked_sub(1)).map(|i| words[i]);
    let count = |w: Option<&str>| w.and_then(|n| n.trim_end_matches(',').parse::<u64>().ok());
    json!({"kind": kind, "elements": count(after("sent")),
           "bytes": count(before("bytes")),
           "took_ms": after("in").and_then(debug_ms), "render_ms": after("(render").and_then(debug_ms),
           "apply_ms": after("apply").and_then(debug_ms)})
}

/// The daemon's "listed N RESOURCE in T" lines: per resource, the time it took as logged, the
/// objects, and when the line appeared (ms after `spawned`).
pub fn listings(lines: &[(Instant, String)], spawned: Instant) -> Value {
    let mut out = serde_json::Map::new();
    for (at, line) in lines {
        let Some(rest) = line.split_once("] listed ").map(|(_, r)| r) else { continue };
        let w: Vec<&str> = rest.split_whitespace().collect();
        if w.len() < 4 || w[2] != "in" {
            continue;
        }
        out.entry(w[1].to_string()).or_insert_with(|| {
            json!({"objects": w[0].parse::<u64>().ok(), "took_ms": debug_ms(w[3]), "at_ms": ms_between(spawned, *at)})
        });
    }
    Value::Object(out)
}

/// `nft monitor new elements` in a namespace: the first time each IPv4 address appears in an
/// added element, stamped by a reader thread as the line arrives.
pub struct Monitor {
    child: Child,
    lines: Stamped,
    read: usize,
    seen: HashMap<String, Instant>,
}

impl Monitor {
    pub fn start(ns: &Netns) -> Monitor {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "monitor", "new", "elements"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("nft monitor");
        let stdout = child.stdout.take().expect("stdout");
        let lines: Stamped = Arc::default();
        let out = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                out.lock().expect("lines").push((Instant::now(), line));
            }
        });
        Monitor { child, lines, read: 0, seen: HashMap::new() }
    }

    /// Waits until the monitor reports changes: `nft monitor` first reads the whole ruleset
    /// into its cache (210,000 elements at 30k services) and starts that over whenever the
    /// ruleset changes meanwhile, so under a stream of changes it may never get going. One
    /// change, made while nothing else changes, shows it is live.
    /// Changes made while it still loads are not reported at all, so it is first left to
    /// finish (its CPU time stops growing), then probed until a change shows.
    /// `probe` makes a change and returns the endpoint address it introduced.
    pub fn warm_up(&mut self, mut probe: impl FnMut() -> String) {
        let start = Instant::now();
        let pid = self.child.id() as i32;
        let mut used = cpu_s(pid).0;
        while start.elapsed() < Duration::from_secs(180) {
            std::thread::sleep(Duration::from_millis(300));
            let now = cpu_s(pid).0;
            if now == used {
                break;
            }
            used = now;
        }
        for _ in 0..10 {
            let ip = probe();
            if self.wait(&ip, Duration::from_secs(5)).is_some() {
                eprintln!("api: nft monitor live after {:?}", start.elapsed());
                return;
            }
        }
        panic!("nft monitor never reported a change");
    }

    /// Files the lines read since the last call: each address under itself, and under
    /// `SET/ADDRESS` for the set or map it was added to (`add element FAMILY TABLE SET { … }`),
    /// so an address that moves from one map to another can be waited for in the second.
    pub fn drain(&mut self) {
        let lines = self.lines.lock().expect("lines");
        for (at, line) in &lines[self.read..] {
            let set = line.strip_prefix("add element ").and_then(|r| r.split_whitespace().nth(2));
            for word in line.split_whitespace().map(|w| w.trim_matches([',', '{', '}'])) {
                if word.parse::<std::net::Ipv4Addr>().is_ok() {
                    self.seen.entry(word.to_string()).or_insert(*at);
                    if let Some(set) = set {
                        self.seen.entry(format!("{set}/{word}")).or_insert(*at);
                    }
                }
            }
        }
        self.read = lines.len();
    }

    /// When `ip` (or `SET/ip`, see `drain`) first appeared in the kernel, waiting up to
    /// `limit` for it.
    pub fn wait(&mut self, ip: &str, limit: Duration) -> Option<Instant> {
        let start = Instant::now();
        loop {
            self.drain();
            if let Some(at) = self.seen.get(ip) {
                return Some(*at);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds of `pid` so far: its own (user + system) and its waited-for children's.
pub fn cpu_s(pid: i32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis start with the state (field 3).
    let f: Vec<f64> =
        stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let at = |i: usize| f.get(i).copied().unwrap_or(f64::NAN);
    ((at(11) + at(12)) / hz, (at(13) + at(14)) / hz)
}

/// CPU use between two readings over `wall`, as a percentage of one core.
pub fn share(before: f64, after: f64, wall: Duration) -> f64 {
    round2((after - before) / wall.as_secs_f64() * 100.0)
}

/// The threads `pid` runs now.
pub fn threads(pid: i32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok()).unwrap_or(f64::NAN)
}

/// Prints one table row of combined runs (`runs::combine`): the figure at `path`, as the
/// median (lowest–highest).
pub fn median_row(r: &Value, name: &str, path: &[&str]) {
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x}"));
    let pick = |which: &str| path.iter().fold(&r[which], |v, k| &v[*k]).clone();
    println!("| {name} | {} ({}–{}) |", f(&pick("median")), f(&pick("min")), f(&pick("max")));
}

pub fn rss_mb(pid: i32) -> f64 {
    status_mb(pid, "VmRSS:")
}

/// The most `pid` has had resident so far (the kernel's high-water mark), in MB.
pub fn peak_rss_of(pid: i32) -> f64 {
    status_mb(pid, "VmHWM:")
}

/// A size field of `/proc/PID/status` (given in kB there), in MB.
fn status_mb(pid: i32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().split(' ').next()?.parse().ok());
    kb.map_or(f64::NAN, |kb: f64| (kb / 1024.0 * 10.0).round() / 10.0)
}

/// Nearest-rank percentile of `v` (sorted here), in ms; `None` when empty.
pub fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64 * p / 100.0).ceil() as usize).max(1);
    v.get(rank - 1).map(|x| round2(*x))
}
