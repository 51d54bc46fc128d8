//! Event → traffic: new Services, each with its EndpointSlice posted a moment after, probed by
//! real TCP connections to the new ClusterIP from the node's namespace until one reaches a
//! real server through the daemon's rules; beside it, event → kernel from `nft monitor`.
//!
//! Before its rules exist a connection to a new ClusterIP is refused at once: the gateway holds
//! the whole service range as local addresses with nothing listening on the service port, so
//! its kernel answers the SYN with a TCP reset (the emulator serves no ServiceCIDR, so the
//! daemon does not drop the range itself). The endpoints' range is local to the gateway too,
//! routed there from the node, with an echo server on the target port: once DNATed, the
//! connection is accepted. Each pair's first attempt is made before its Service is posted and
//! must be refused, so a figure cannot come from a connection that needed no new rule.
//!
//! Also here: every slice changed at once (event → kernel for a sample of them), and the
//! daemon's change-wait histogram as it exports it.

use super::common::Netns;
use super::common::emulator::Emulator;
use super::common::net::{EchoServer, Probe, Proto, in_netns, probe};
use super::observe::{LogTail, Monitor, is_sync, ms_between, percentile, round2, sync_figures};
use super::synth::{self, Case};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The synthetic services' ClusterIPs (`synth::cluster_ip`), new ones included.
const SERVICE_RANGE: &str = "172.20.0.0/14";

/// The new pairs' endpoint addresses: below the synthetic endpoints' (10.64.0.0 and up, a
/// generation 1 Mi further each) and apart from the node's pod routes.
const POD_RANGE: &str = "10.32.0.0/16";

/// The gateway's address on the node's uplink.
const GATEWAY: &str = "192.168.1.254";

/// The service port and the endpoints' target port, as `synth` writes them.
const SERVICE_PORT: u16 = 80;
const TARGET_PORT: u16 = 8080;

/// The echo server's name, which a connection that went through answers with.
const POD_NAME: &str = "pod";

/// How long one attempt may take (a refused one ends in microseconds; a longer one is dropped
/// traffic, counted apart), how long between rounds of attempts, and when a pair is given up.
const ATTEMPT: Duration = Duration::from_millis(200);
const ROUND: Duration = Duration::from_millis(1);
const GIVE_UP: Duration = Duration::from_secs(10);

/// Endpoint addresses of the slices changed at once that are waited for: this many spread
/// over the range, and the last few posted.
const BULK_SAMPLE: u32 = 190;
const BULK_LAST: u32 = 10;

/// What answers the connections: the gateway's local routes and its echo server. Set up before
/// the daemon starts, so the node's addresses it reads do not change (only a route is added
/// on the node).
pub struct Backend {
    _server: EchoServer,
}

impl Backend {
    pub fn new(node: &Netns) -> Backend {
        let gw = node.gateway();
        for range in [SERVICE_RANGE, POD_RANGE] {
            ip(gw, &["route", "add", "local", range, "dev", "lo"]);
        }
        ip(node, &["route", "add", POD_RANGE, "via", GATEWAY]);
        Backend { _server: EchoServer::start(&gw.name, POD_NAME, TARGET_PORT) }
    }
}

fn ip(ns: &Netns, args: &[&str]) {
    let out = std::process::Command::new("ip").arg("-n").arg(&ns.name).args(args).output().expect("ip");
    assert!(out.status.success(), "ip -n {} {args:?}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}

/// How the connections to one ClusterIP went.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// When the first connection that reached the echo server was established.
    pub connected: Option<Instant>,
    /// Attempts made, and those that timed out rather than being refused.
    pub attempts: u32,
    pub timeouts: u32,
}

/// A new target: its id, address, and where to send the first attempt's result.
type Target = (usize, SocketAddr, Sender<Probe>);

/// A thread in the node's namespace connecting to every pending ClusterIP each `ROUND` until
/// one connection reaches the echo server.
pub struct Prober {
    tx: Option<Sender<Target>>,
    outcomes: Arc<Mutex<HashMap<usize, Outcome>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    next: usize,
}

impl Prober {
    pub fn start(node: &Netns) -> Prober {
        let (tx, rx) = channel();
        let outcomes: Arc<Mutex<HashMap<usize, Outcome>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (out, done, ns) = (outcomes.clone(), stop.clone(), node.name.clone());
        let thread = std::thread::spawn(move || in_netns(&ns, move || probe_loop(&rx, &out, &done)));
        Prober { tx: Some(tx), outcomes, stop, thread: Some(thread), next: 0 }
    }

    /// Starts probing `addr`; returns its id and how the first attempt, made before this
    /// returns, ended.
    pub fn add(&mut self, addr: SocketAddr) -> (usize, Probe) {
        let id = self.next;
        self.next += 1;
        let (tx, rx) = channel();
        self.tx.as_ref().expect("prober").send((id, addr, tx)).expect("prober thread");
        (id, rx.recv_timeout(Duration::from_secs(5)).expect("first attempt"))
    }

    /// How target `id` has gone so far.
    pub fn outcome(&self, id: usize) -> Outcome {
        self.outcomes.lock().expect("outcomes").get(&id).cloned().unwrap_or_default()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn probe_loop(rx: &Receiver<Target>, outcomes: &Mutex<HashMap<usize, Outcome>>, stop: &AtomicBool) {
    let mut pending: Vec<(usize, SocketAddr, Instant)> = Vec::new();
    let attempt = |id: usize, addr: SocketAddr| {
        let p = probe(Proto::Tcp, addr, None, ATTEMPT);
        let mut all = outcomes.lock().expect("outcomes");
        let o = all.entry(id).or_default();
        o.attempts += 1;
        match &p {
            Probe::Reply(r) if r.name == POD_NAME => o.connected = Some(Instant::now()),
            Probe::Timeout => o.timeouts += 1,
            _ => {}
        }
        p
    };
    while !stop.load(Ordering::SeqCst) {
        // Idle: wait for a target rather than spin.
        let wait = if pending.is_empty() { Duration::from_millis(50) } else { Duration::ZERO };
        if let Ok((id, addr, reply)) = rx.recv_timeout(wait) {
            let first = attempt(id, addr);
            if !matches!(first, Probe::Reply(_)) {
                pending.push((id, addr, Instant::now()));
            }
            let _ = reply.send(first);
        }
        pending.retain(|(id, addr, since)| {
            let p = attempt(*id, *addr);
            !matches!(p, Probe::Reply(_)) && since.elapsed() < GIVE_UP
        });
        std::thread::sleep(ROUND);
    }
}

/// One pair posted: the Service's ClusterIP and the slice's endpoint, the moment the Service's
/// post began (the event) and how long after it the slice's began, and the first attempt.
pub struct Pair {
    id: usize,
    cluster_ip: String,
    endpoint: String,
    at: Instant,
    slice_after: Duration,
    first: Probe,
}

/// Makes the pairs: service `services + k` of `case` for the k-th, one endpoint in `POD_RANGE`.
pub struct Pairs {
    case: Case,
    made: u32,
    /// Every pair made so far.
    pub all: Vec<Pair>,
}

impl Pairs {
    pub fn new(case: &Case) -> Pairs {
        Pairs { case: Case { endpoints: 1, ..case.clone() }, made: 0, all: Vec::new() }
    }

    /// Posts the next pair: the Service, then its EndpointSlice, two applies back to back,
    /// after the first connection attempt to its ClusterIP.
    pub fn post(&mut self, emu: &Emulator, prober: &mut Prober) {
        let (k, i) = (self.made, self.case.services + self.made);
        self.made += 1;
        let cluster_ip = synth::cluster_ip(i);
        let endpoint = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 32, 0, 1)) + k).to_string();
        let mut slice = synth::slice_json(&self.case, i, 0);
        slice["endpoints"][0]["addresses"] = json!([endpoint]);
        slice["endpoints"][0]["nodeName"] = json!("node-b");
        let service = synth::service_json(&self.case, i);
        let (id, first) = prober.add(format!("{cluster_ip}:{SERVICE_PORT}").parse().expect("address"));
        let at = Instant::now();
        emu.apply(&service);
        let slice_after = at.elapsed();
        emu.apply(&slice);
        self.all.push(Pair { id, cluster_ip, endpoint, at, slice_after, first });
    }

    /// The pairs made since the `from`-th: event → kernel (the later of the ClusterIP's slot
    /// in the endpoint map, which the dispatch by endpoint count finds, and its endpoint) and
    /// event → traffic, each waited for until `limit` from now.
    pub fn figures(&self, from: usize, mon: &mut Monitor, prober: &Prober, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        let left = || deadline.saturating_duration_since(Instant::now());
        let (mut kernel, mut traffic, mut slice_ms) = (Vec::new(), Vec::new(), Vec::new());
        let (mut kernel_missing, mut traffic_missing, mut not_refused) = (0, 0, 0);
        let (mut attempts, mut timeouts) = (0, 0);
        for p in &self.all[from..] {
            slice_ms.push(p.slice_after.as_secs_f64() * 1e3);
            not_refused += u32::from(p.first != Probe::Refused);
            let service = mon.wait(&format!("cluster-endpoints-tcp-0/{}", p.cluster_ip), left());
            match (service, mon.wait(&p.endpoint, left())) {
                (Some(a), Some(b)) => kernel.push(ms_between(p.at, a.max(b))),
                _ => kernel_missing += 1,
            }
            while prober.outcome(p.id).connected.is_none() && p.at.elapsed() < GIVE_UP && !left().is_zero() {
                std::thread::sleep(Duration::from_millis(5));
            }
            let o = prober.outcome(p.id);
            (attempts, timeouts) = (attempts + o.attempts, timeouts + o.timeouts);
            match o.connected {
                Some(t) => traffic.push(ms_between(p.at, t)),
                None => traffic_missing += 1,
            }
        }
        let firsts: Vec<String> =
            self.all[from..].iter().filter(|p| p.first != Probe::Refused).map(|p| p.first.who()).collect();
        json!({"pairs": self.all.len() - from, "first_not_refused": not_refused, "first_not_refused_as": firsts.first(),
               "kernel_p50_ms": percentile(&mut kernel, 50.0), "kernel_p99_ms": percentile(&mut kernel, 99.0),
               "kernel_max_ms": percentile(&mut kernel, 100.0), "kernel_missing": kernel_missing,
               "traffic_p50_ms": percentile(&mut traffic, 50.0), "traffic_p99_ms": percentile(&mut traffic, 99.0),
               "traffic_max_ms": percentile(&mut traffic, 100.0), "traffic_missing": traffic_missing,
               "slice_post_after_ms": percentile(&mut slice_ms, 50.0), "attempts": attempts, "attempt_timeouts": timeouts})
    }
}

/// Isolated pairs: `n`, each `gap` after the previous one began.
pub fn isolated(
    emu: &Emulator,
    pairs: &mut Pairs,
    prober: &mut Prober,
    mon: &mut Monitor,
    n: u32,
    gap: Duration,
) -> Value {
    let from = pairs.all.len();
    let start = Instant::now();
    for k in 0..n {
        std::thread::sleep((start + gap * k).saturating_duration_since(Instant::now()));
        pairs.post(emu, prober);
    }
    let mut v = pairs.figures(from, mon, prober, Duration::from_secs(5));
    v["gap_ms"] = json!(gap.as_millis() as u64);
    v
}

/// Every slice changed at once, in one post: from its start, and from the moment the emulator
/// had accepted it (its last watch event sent), to the daemon's last sync of them, and the
/// syncs it logged meanwhile. `nft monitor` falls behind a rewrite's 200,000 elements (and
/// loses some), so it dates only the first of the sample; the last sync's log line dates the
/// end, and the kernel's own table, read afterwards, must hold every sampled address.
/// `all` is every slice, each with its new endpoint address, in the order posted.
pub fn all_at_once(ns: &str, emu: &Emulator, log: &LogTail, mon: &mut Monitor, all: Vec<(Value, String)>) -> Value {
    let (slices, ips): (Vec<Value>, Vec<String>) = all.into_iter().unzip();
    let n = ips.len() as u32;
    let mut sample: Vec<u32> = (0..BULK_SAMPLE).map(|k| k * n / BULK_SAMPLE).collect();
    sample.extend(n.saturating_sub(BULK_LAST)..n);
    sample.dedup();
    let from_line = log.lines().len();
    let start = Instant::now();
    emu.apply(&Value::Array(slices));
    let accepted = Instant::now();
    let first = mon.wait(&ips[sample[0] as usize], Duration::from_secs(10));
    // Done when no sync has been logged for a while (a rest after a sync is under a period).
    let quiet = Duration::from_millis(2500);
    let syncs_since = || -> Vec<(Instant, String)> {
        log.lines()[from_line..].iter().filter(|(t, l)| is_sync(l) && *t >= start).cloned().collect()
    };
    let deadline = start + Duration::from_secs(60);
    while Instant::now() < deadline {
        let last = syncs_since().last().map(|(t, _)| *t);
        if last.is_some_and(|t| t >= accepted && t.elapsed() >= quiet) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let syncs = syncs_since();
    let last = syncs.last().map_or(start, |(t, _)| *t);
    let table = in_netns(ns, || {
        std::process::Command::new("nft").args(["list", "table", "ip", "kube-nftproxy"]).output().expect("nft list")
    });
    let table = String::from_utf8_lossy(&table.stdout);
    let missing = sample.iter().filter(|i| !table.contains(&format!("{} ", ips[**i as usize]))).count();
    let lines: Vec<Value> = syncs
        .iter()
        .map(|(t, l)| {
            let mut f = sync_figures(l);
            f["logged_at_ms"] = json!(ms_between(start, *t));
            f
        })
        .collect();
    let took: f64 = lines.iter().filter_map(|s| s["took_ms"].as_f64()).sum();
    json!({"slices": n, "sample": sample.len(), "missing": missing,
           "accepted_ms": ms_between(start, accepted), "first_in_kernel_ms": first.map(|f| ms_between(start, f)),
           "kernel_ms": ms_between(start, last), "kernel_after_accepted_ms": ms_between(accepted, last),
           "syncs": lines.len(), "syncs_took_ms": round2(took), "sync_lines": lines})
}

/// One label's share of a Prometheus histogram.
#[derive(Default)]
struct Histogram {
    /// Upper bound (s) and cumulative count of each bucket.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    /// Count, sum, mean, the buckets the median and the 99th percentile fall in (upper bounds,
    /// ms) and the buckets themselves (`null` for `+Inf`).
    fn figures(mut self) -> Value {
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let count = self.count;
        let bound = |q: f64| {
            self.buckets.iter().find(|(_, c)| *c >= q * count).map(|(le, _)| le * 1e3).filter(|b| b.is_finite())
        };
        let mean = (count > 0.0).then(|| self.sum / count * 1e3);
        let kept: Vec<Value> = self.buckets.iter().map(|(le, c)| json!([le.is_finite().then_some(*le), c])).collect();
        json!({"count": count, "sum_s": self.sum, "mean_ms": mean, "p50_le_ms": bound(0.5),
               "p99_le_ms": bound(0.99), "buckets": kept})
    }
}

/// The daemon's histogram `kube_nftproxy_change_wait_seconds` from its `/metrics` in `ns`, per
/// `reason` (see `Histogram::figures`); `null` when the daemon does not export it.
pub fn change_wait(ns: &str) -> Value {
    const NAME: &str = "kube_nftproxy_change_wait_seconds";
    let text = in_netns(ns, || {
        use std::io::{Read, Write};
        let addr = super::views::METRICS.parse().expect("address");
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    })
    .unwrap_or_default();
    let mut reasons: HashMap<String, Histogram> = HashMap::new();
    for line in text.lines().filter(|l| l.starts_with(NAME)) {
        let (head, value) = line.rsplit_once(' ').unwrap_or((line, ""));
        let Ok(value) = value.parse::<f64>() else { continue };
        let label = |k: &str| head.split_once(&format!("{k}=\"")).and_then(|(_, r)| r.split_once('"')).map(|(v, _)| v);
        let h = reasons.entry(label("reason").unwrap_or("all").to_string()).or_default();
        match &head[NAME.len()..head.find('{').unwrap_or(head.len())] {
            "_bucket" => h.buckets.push((label("le").and_then(|l| l.parse().ok()).unwrap_or(f64::INFINITY), value)),
            "_sum" => h.sum = value,
            "_count" => h.count = value,
            _ => {}
        }
    }
    if reasons.is_empty() {
        return Value::Null;
    }
    Value::Object(reasons.into_iter().map(|(reason, h)| (reason, h.figures())).collect())
}
