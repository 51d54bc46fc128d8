//! The daemon following an API server at scale: the emulator, loaded with a synthetic cluster,
//! listens in a node-like namespace's gateway (as a control plane off the node), and the real
//! binary follows it with the emulator's client-certificate kubeconfig.
//!
//! Measured: the time from spawning the daemon to its first sync done (with the list times and
//! the sync's own as the daemon logs them); one EndpointSlice change to the kernel, isolated;
//! a churn of 100 changes per second (syncs, event-to-kernel, CPU); resident memory; and the
//! requests the API server saw. The kernel side is taken from the kernel itself: an
//! `nft monitor` in the node's namespace, its lines timestamped as they arrive.

use super::common::Netns;
use super::common::daemon::Daemon;
use super::common::emulator::Emulator;
use super::synth::{self, Case};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the emulator listens: the gateway's address on the node's uplink.
const API_LISTEN: &str = "192.168.1.254:6443";

/// The real server's bookmark interval.
const BOOKMARKS: &str = "60s";

/// Spacing of the isolated changes, after the previous one reached the kernel (run on a
/// daemon with `--min-sync-period=0`, so pacing plays no part).
const ISOLATED_GAP: Duration = Duration::from_millis(50);

/// Changes per churn tick, and ticks per second.
const CHURN_BATCH: u32 = 10;
const CHURN_TICK: Duration = Duration::from_millis(100);

/// How the benchmark sizes this part.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Isolated changes.
    pub isolated: u32,
    /// Seconds of churn.
    pub churn_s: u32,
}

impl Sizes {
    /// The figures, or a few seconds' worth for `--smoke`.
    pub fn new(smoke: bool) -> Sizes {
        if smoke { Sizes { isolated: 20, churn_s: 5 } } else { Sizes { isolated: 200, churn_s: 60 } }
    }
}

/// Lines read from a stream, each with the moment it was read.
type Stamped = Arc<Mutex<Vec<(Instant, String)>>>;

/// Follows the daemon's log file as it grows, stamping each line as it appears (polled every
/// 2 ms: the figures are tens of milliseconds and up).
struct LogTail {
    lines: Stamped,
    stop: Arc<AtomicBool>,
}

impl LogTail {
    fn start(path: &Path) -> LogTail {
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
    fn lines(&self) -> Vec<(Instant, String)> {
        self.lines.lock().expect("lines").clone()
    }

    /// Waits up to `limit` for a line matching `f` at or after line `from`; its time and text.
    fn wait(&self, from: usize, limit: Duration, f: impl Fn(&str) -> bool) -> Option<(Instant, String)> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(hit) = self.lines.lock().expect("lines").iter().skip(from).find(|(_, l)| f(l)) {
                return Some(hit.clone());
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

/// Whether a daemon log line reports a sync (every kind but "Unchanged" is logged).
fn is_sync(line: &str) -> bool {
    line.contains(" sync: ") || line.contains(" sync (netlink): ")
}

/// A `Duration`'s `Debug` text (`1.2s`, `812.3ms`, `40.1µs`, `900ns`) in ms.
fn debug_ms(text: &str) -> Option<f64> {
    let text = text.trim().trim_end_matches([',', ')']);
    let (num, scale) = [("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6), ("s", 1e3)]
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, *scale)))?;
    num.parse::<f64>().ok().map(|n| round2(n * scale))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn ms_between(from: Instant, to: Instant) -> f64 {
    round2(to.saturating_duration_since(from).as_secs_f64() * 1e3)
}

/// A sync line's figures: kind, script lines, time, render and apply (ms), netlink or not.
fn sync_figures(line: &str) -> Value {
    let msg = line.split_once("] ").map_or(line, |(_, m)| m);
    let kind = msg.split(" sync").next().unwrap_or("?");
    let words: Vec<&str> = msg.split_whitespace().collect();
    let after = |w: &str| words.iter().position(|x| *x == w).and_then(|i| words.get(i + 1)).copied();
    let lines = msg.split(": ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse::<u64>().ok());
    json!({"kind": kind, "netlink": msg.contains("(netlink)"), "lines": lines,
           "took_ms": after("in").and_then(debug_ms), "render_ms": after("(render").and_then(debug_ms),
           "apply_ms": after("apply").and_then(debug_ms)})
}

/// The daemon's "listed N RESOURCE in T" lines: per resource, the time it took as logged, the
/// objects, and when the line appeared (ms after `spawned`).
fn listings(lines: &[(Instant, String)], spawned: Instant) -> Value {
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
struct Monitor {
    child: Child,
    lines: Stamped,
    read: usize,
    seen: HashMap<String, Instant>,
}

impl Monitor {
    fn start(ns: &Netns) -> Monitor {
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
    fn warm_up(&mut self, emu: &Emulator, changes: &mut Changes) {
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
            let (slice, ip) = changes.next();
            post(emu, vec![slice]);
            if self.wait(&ip, Duration::from_secs(5)).is_some() {
                eprintln!("api: nft monitor live after {:?}", start.elapsed());
                return;
            }
        }
        panic!("nft monitor never reported a change");
    }

    /// Files the lines read since the last call.
    fn drain(&mut self) {
        let lines = self.lines.lock().expect("lines");
        for (at, line) in &lines[self.read..] {
            for word in line.split_whitespace() {
                if word.parse::<std::net::Ipv4Addr>().is_ok() {
                    self.seen.entry(word.to_string()).or_insert(*at);
                }
            }
        }
        self.read = lines.len();
    }

    /// When `ip` first appeared in the kernel, waiting up to `limit` for it.
    fn wait(&mut self, ip: &str, limit: Duration) -> Option<Instant> {
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
fn cpu_s(pid: i32) -> (f64, f64) {
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
fn share(before: f64, after: f64, wall: Duration) -> f64 {
    round2((after - before) / wall.as_secs_f64() * 100.0)
}

fn rss_mb(pid: i32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().split(' ').next()?.parse().ok());
    kb.map_or(f64::NAN, |kb: f64| (kb / 1024.0 * 10.0).round() / 10.0)
}

/// The emulator's process id: the process whose command line names its TLS directory.
fn emulator_pid(emu: &Emulator) -> i32 {
    let needle = emu.tls_dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmd).split('\0').any(|a| a == needle)
        })
        .expect("the emulator's process")
}

/// The name of the node's gateway namespace (`Netns::node_like` names it after the node's tag
/// and makes it right after the node).
fn gateway(tag: &str) -> String {
    let prefix = format!("knp-{tag}-gw-{}-", std::process::id());
    let mut names: Vec<String> = std::fs::read_dir("/run/netns")
        .expect("/run/netns")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort_by_key(|n| n[prefix.len()..].parse::<u64>().unwrap_or(0));
    names.pop().expect("the node's gateway namespace")
}

/// Nearest-rank percentile of `v` (sorted here), in ms; `None` when empty.
fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64 * p / 100.0).ceil() as usize).max(1);
    v.get(rank - 1).map(|x| round2(*x))
}

/// The slices the benchmark changes, each to an endpoint address never used before: service
/// `k * STRIDE mod N` for the k-th change (a stride prime to N, so the first N changes touch N
/// different services), its generation one up.
struct Changes<'c> {
    case: &'c Case,
    next: u64,
    generation: Vec<u32>,
}

/// Prime, and divides neither 1,000 nor 30,000.
const STRIDE: u64 = 7919;

impl<'c> Changes<'c> {
    fn new(case: &'c Case) -> Changes<'c> {
        Changes { case, next: 0, generation: vec![0; case.services as usize] }
    }

    /// The next change: the slice and its new endpoint address.
    fn next(&mut self) -> (Value, String) {
        let i = (self.next * STRIDE % u64::from(self.case.services)) as u32;
        self.next += 1;
        let g = &mut self.generation[i as usize];
        *g += 1;
        let ip = synth::endpoint_ip(i, 0, self.case.endpoints, *g);
        (synth::slice_json(self.case, i, *g), ip)
    }
}

/// A node-like namespace with the emulator in its gateway, holding `case`.
struct Rig {
    ns: Netns,
    emu: Emulator,
    emu_pid: i32,
    dir: std::path::PathBuf,
}

impl Rig {
    fn new(case: &Case) -> Rig {
        let dir = std::env::temp_dir().join(format!("knp-apibench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let manifest = dir.join("cluster.json");
        super::churn::write_manifest(case, 0, &manifest);
        let ns = Netns::node_like("apibench");
        let gw = gateway("apibench");
        let t = Instant::now();
        let emu = Emulator::start(Some(&gw), API_LISTEN, Some(&manifest), &["--bookmark-interval", BOOKMARKS]);
        eprintln!("api: emulator ready with {} services in {:?}", case.services, t.elapsed());
        let emu_pid = emulator_pid(&emu);
        Rig { ns, emu, emu_pid, dir }
    }

    /// Starts a daemon with `extra` flags and waits for its first sync: the daemon, its log,
    /// when it was spawned, and when the sync's line appeared.
    fn daemon(&self, extra: &[&str]) -> (Daemon, LogTail, Instant, Instant, String) {
        let spawned = Instant::now();
        let d = Daemon::start_api(&self.ns, &self.emu.kubeconfig(), extra, &[]);
        let log = LogTail::start(&d.log);
        let Some((at, line)) = log.wait(0, Duration::from_secs(120), is_sync) else {
            panic!("the daemon never synced:\n{}", d.logged());
        };
        (d, log, spawned, at, line)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Posts `slices` through the control endpoint.
fn post(emu: &Emulator, slices: Vec<Value>) {
    emu.apply(&Value::Array(slices));
}

/// The churn: `CHURN_BATCH` changes every `CHURN_TICK` for `secs`, on a daemon with default
/// flags.
fn churn(rig: &Rig, d: &Daemon, log: &LogTail, changes: &mut Changes, secs: u32) -> Value {
    let mut mon = Monitor::start(&rig.ns);
    mon.warm_up(&rig.emu, changes);
    // Past the pacing of the warm-up's sync, so the churn starts with the burst allowance.
    std::thread::sleep(Duration::from_secs(2));
    let mut posted: Vec<(String, Instant)> = Vec::new();
    let from_line = log.lines().len();
    let (cpu0, emu0) = (cpu_s(d.pid()), cpu_s(rig.emu_pid).0);
    let start = Instant::now();
    let ticks = secs * (Duration::from_secs(1).as_millis() / CHURN_TICK.as_millis()) as u32;
    for tick in 0..ticks {
        let due = start + CHURN_TICK * tick;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let (slices, ips): (Vec<Value>, Vec<String>) = (0..CHURN_BATCH).map(|_| changes.next()).unzip();
        let at = Instant::now();
        post(&rig.emu, slices);
        posted.extend(ips.into_iter().map(|ip| (ip, at)));
    }
    let wall = start.elapsed();
    let (cpu1, emu1) = (cpu_s(d.pid()), cpu_s(rig.emu_pid).0);
    // Every change's arrival in the kernel (the last ones within a sync period or so).
    let mut latencies = Vec::new();
    let mut missing = 0;
    let mut last_seen = start;
    let deadline = Instant::now() + Duration::from_secs(5);
    for (ip, at) in &posted {
        match mon.wait(ip, deadline.saturating_duration_since(Instant::now())) {
            Some(seen) => {
                latencies.push(ms_between(*at, seen));
                last_seen = last_seen.max(seen);
            }
            None => missing += 1,
        }
    }
    // The syncs that brought them, from the log (the last sync's line follows its elements).
    std::thread::sleep(Duration::from_millis(200));
    let lines = log.lines();
    let until = last_seen.max(start + wall) + Duration::from_millis(200);
    let window: Vec<&(Instant, String)> =
        lines[from_line..].iter().filter(|(t, l)| is_sync(l) && *t >= start && *t <= until).collect();
    let sync_ms: Vec<f64> = window.iter().filter_map(|(_, l)| sync_figures(l)["took_ms"].as_f64()).collect();
    let mut lat = latencies.clone();
    json!({"changes": posted.len(), "seconds": round2(wall.as_secs_f64()), "missing": missing,
           "syncs": window.len(), "sync_ms_max": sync_ms.iter().copied().fold(0.0, f64::max),
           "sync_ms_median": percentile(&mut sync_ms.clone(), 50.0),
           "p50_ms": percentile(&mut lat, 50.0), "p99_ms": percentile(&mut lat, 99.0),
           "max_ms": percentile(&mut lat, 100.0),
           "daemon_cpu_pct": share(cpu0.0, cpu1.0, wall), "daemon_children_cpu_pct": share(cpu0.1, cpu1.1, wall),
           "emulator_cpu_pct": share(emu0, emu1, wall)})
}

/// `n` changes one at a time, each `ISOLATED_GAP` after the previous one reached the kernel.
fn isolated(rig: &Rig, changes: &mut Changes, n: u32) -> Value {
    let mut mon = Monitor::start(&rig.ns);
    mon.warm_up(&rig.emu, changes);
    let mut latencies = Vec::new();
    let mut missing = 0;
    for _ in 0..n {
        let (slice, ip) = changes.next();
        let at = Instant::now();
        post(&rig.emu, vec![slice]);
        match mon.wait(&ip, Duration::from_secs(3)) {
            Some(seen) => latencies.push(ms_between(at, seen)),
            None => missing += 1,
        }
        std::thread::sleep(ISOLATED_GAP);
    }
    let mut lat = latencies;
    json!({"changes": n, "missing": missing, "gap_ms": ISOLATED_GAP.as_millis() as u64, "min_sync_period": "0",
           "p50_ms": percentile(&mut lat, 50.0), "p99_ms": percentile(&mut lat, 99.0),
           "max_ms": percentile(&mut lat, 100.0)})
}

/// The daemon lists in pages of this many objects (README, "The API server").
const PAGE: u64 = 500;

/// Requests the API server saw, per verb and resource, from `/emulator/stats`. The emulator
/// counts every page of a list as a list request; `lists` divides by the pages one listing of
/// the objects the daemon logged takes (`listed`, from `listings`).
fn requests(emu: &Emulator, listed: &Value) -> Value {
    let s = emu.stats();
    let resources = ["services", "endpointslices", "nodes", "servicecidrs"];
    let pick = |verb: &str, per_list: &dyn Fn(&str) -> u64| {
        let per = &s["requests"][verb];
        let mut out = serde_json::Map::new();
        for r in resources {
            let n = per[r].as_u64().unwrap_or(0);
            out.insert(r.into(), json!(round2(n as f64 / per_list(r) as f64)));
        }
        Value::Object(out)
    };
    let pages = |r: &str| listed[r]["objects"].as_u64().map_or(1, |n| n.div_ceil(PAGE).max(1));
    let errors: u64 = s["status"]
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| !k.starts_with('2')).filter_map(|(_, v)| v.as_u64()).sum())
        .unwrap_or(0);
    json!({"lists": pick("list", &pages), "list_requests": pick("list", &|_| 1), "watch": pick("watch", &|_| 1),
           "get": s["requests"]["get"].clone(),
           "errors": errors, "open_watches": s["openWatches"].clone()})
}

/// The whole API part for `case`, in one process; one JSON object.
pub fn run(case: &Case, sizes: Sizes) -> Value {
    let rig = Rig::new(case);
    let mut changes = Changes::new(case);
    // 1. Start to rules in the kernel, on a node without our tables, default flags.
    let (d, log, spawned, synced, line) = rig.daemon(&[]);
    let lines = log.lines();
    let first = sync_figures(&line);
    let start_ms = ms_between(spawned, synced);
    let following =
        lines.iter().find(|(_, l)| l.contains("following the API server")).map(|(t, _)| ms_between(spawned, *t));
    let all_listed =
        lines.iter().find(|(_, l)| l.contains("every source has listed")).map(|(t, _)| ms_between(spawned, *t));
    eprintln!("api: first sync {start_ms} ms after spawning: {}", line.trim());
    std::thread::sleep(Duration::from_secs(1));
    let rss_start = rss_mb(d.pid());
    // 3. Churn, then memory at rest.
    let churned = churn(&rig, &d, &log, &mut changes, sizes.churn_s);
    eprintln!("api: churn {churned}");
    std::thread::sleep(Duration::from_secs(3));
    let rss_after = rss_mb(d.pid());
    // 5. What the API server saw over this daemon's life.
    let served = requests(&rig.emu, &listings(&lines, spawned));
    let covered_s = round2(spawned.elapsed().as_secs_f64());
    let log_text = d.stop();
    let warnings = log_text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).count();
    // 2. Isolated changes, on a second daemon without pacing (it starts over the first's rules).
    let (d2, _log2, spawned2, synced2, line2) = rig.daemon(&["--min-sync-period=0"]);
    let restart = json!({"ms": ms_between(spawned2, synced2), "sync": sync_figures(&line2)});
    std::thread::sleep(Duration::from_millis(500));
    let one = isolated(&rig, &mut changes, sizes.isolated);
    eprintln!("api: isolated {one}");
    d2.stop();
    json!({"services": case.services, "endpoints": case.endpoints,
           "start": {"ms": start_ms, "following_ms": following, "all_listed_ms": all_listed,
                     "listed": listings(&lines, spawned), "sync": first},
           "restart": restart, "isolated": one, "churn": churned,
           "rss_start_mb": rss_start, "rss_after_churn_mb": rss_after,
           "requests": served, "covered_s": covered_s, "warnings": warnings})
}

/// `--api-idle SECONDS`: the daemon follows the emulator and does nothing else that long; what
/// the API server saw, the syncs, CPU and memory.
pub fn idle(case: &Case, secs: u64) -> Value {
    let rig = Rig::new(case);
    let (d, log, spawned, synced, _) = rig.daemon(&[]);
    let from = log.lines().len();
    let (cpu0, t0) = (cpu_s(d.pid()).0, Instant::now());
    let rss_start = rss_mb(d.pid());
    eprintln!("api-idle: synced {} ms after spawning; idle for {secs} s", ms_between(spawned, synced));
    std::thread::sleep(Duration::from_secs(secs));
    let cpu = share(cpu0, cpu_s(d.pid()).0, t0.elapsed());
    let syncs = log.lines()[from..].iter().filter(|(_, l)| is_sync(l)).count();
    let served = requests(&rig.emu, &listings(&log.lines(), spawned));
    let rss_end = rss_mb(d.pid());
    let covered_s = round2(spawned.elapsed().as_secs_f64());
    let log_text = d.stop();
    let notable: Vec<&str> = log_text.lines().filter(|l| !l.contains(" INFO ") || l.contains(" again")).collect();
    json!({"services": case.services, "idle_s": secs, "covered_s": covered_s, "syncs_while_idle": syncs,
           "daemon_cpu_pct": cpu, "rss_start_mb": rss_start, "rss_end_mb": rss_end, "requests": served,
           "log_not_info": notable})
}
