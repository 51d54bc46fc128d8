//! Measurements inside fresh network namespaces: timings, peak RSS, transaction sizes, and
//! first-packet connect latency.

use super::common::Netns;
use super::common::net::{EchoServer, Proto, in_netns, probe};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Peak resident set of this process (`self`) or of its waited-for children, in MB.
pub fn peak_rss_mb(children: bool) -> f64 {
    let who = if children { libc::RUSAGE_CHILDREN } else { libc::RUSAGE_SELF };
    // SAFETY: getrusage fills a zeroed rusage struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to our rusage.
    unsafe { libc::getrusage(who, &mut ru) };
    ru.ru_maxrss as f64 / 1024.0
}

/// Set while this benchmark runs as the proxy's `nft` (see `nft_peaks`).
const AS_NFT: &str = "KNP_BENCH_AS_NFT";

/// Makes the proxy run `nft` through this benchmark, which records each run's peak RSS.
///
/// A child's `ru_maxrss` starts from its parent's resident set when it is spawned without a
/// fresh address space (as `posix_spawn` does), so measured from the proxy's process it would
/// count the proxy's memory again. A small process in between measures `nft` alone.
pub fn record_nft_peaks(file: &std::path::Path) {
    let exe = std::env::current_exe().expect("exe");
    // SAFETY: called at the start of a single-threaded case process, before any thread exists.
    unsafe {
        std::env::set_var("NFT", exe);
        std::env::set_var(AS_NFT, file);
    }
}

/// When this process was started as the proxy's `nft`: runs the real one, appends its peak
/// RSS to the file `record_nft_peaks` named and exits with its status.
pub fn act_as_nft() {
    let Some(file) = std::env::var_os(AS_NFT) else { return };
    let status = Command::new("nft")
        .args(std::env::args_os().skip(1))
        .env_remove("NFT")
        .env_remove(AS_NFT)
        .status()
        .expect("run nft");
    let line = format!("{}\n", peak_rss_mb(true));
    let mut f = std::fs::OpenOptions::new().append(true).create(true).open(file).expect("peaks file");
    std::io::Write::write_all(&mut f, line.as_bytes()).expect("write peak");
    std::process::exit(status.code().unwrap_or(1));
}

/// The largest `nft` peak recorded since the last call, in MB (0 when none ran), forgetting them.
pub fn take_nft_peak(file: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let _ = std::fs::remove_file(file);
    text.lines().filter_map(|l| l.parse::<f64>().ok()).fold(0.0, f64::max)
}

/// Loads `script` with `nft -f -` in `ns`; returns the wall time, or `None` past `limit`.
pub fn nft_load(ns: &Netns, script: &str, limit: Duration) -> Option<Duration> {
    use std::io::Write;
    let start = Instant::now();
    let mut child = Command::new("timeout")
        .arg(limit.as_secs().to_string())
        .args(["ip", "netns", "exec", &ns.name, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nft");
    let _ = child.stdin.take().expect("stdin").write_all(script.as_bytes());
    let out = child.wait_with_output().expect("wait nft");
    let took = start.elapsed();
    if out.status.code() == Some(124) {
        return None;
    }
    assert!(out.status.success(), "upstream-shape script failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(took)
}

/// A client, a node holding the ruleset, and one pod behind it, for connect latency.
pub struct LatencyRig {
    /// The node namespace (load rules here).
    pub node: Netns,
    /// The client's namespace (172.16.0.2).
    pub client: Netns,
    pod: Netns,
    _server: EchoServer,
}

fn ip(ns: &Netns, args: &str) {
    let ok = Command::new("ip").arg("-n").arg(&ns.name).args(args.split_whitespace()).status().expect("ip");
    assert!(ok.success(), "ip -n {} {args}", ns.name);
}

impl LatencyRig {
    /// Builds client 172.16.0.2 — node — pod 10.64.0.1 (the first endpoint of service 0).
    pub fn new() -> LatencyRig {
        let (node, client, pod) = (Netns::new("lat-node"), Netns::new("lat-client"), Netns::new("lat-pod"));
        for ns in [&node, &client, &pod] {
            ip(ns, "link set lo up");
        }
        ip(&node, &format!("link add c0 type veth peer name eth0 netns {}", client.name));
        ip(&node, &format!("link add p0 type veth peer name eth0 netns {}", pod.name));
        ip(&node, "addr add 172.16.0.1/24 dev c0");
        ip(&node, "addr add 10.64.0.254/24 dev p0");
        ip(&client, "addr add 172.16.0.2/24 dev eth0");
        ip(&pod, "addr add 10.64.0.1/24 dev eth0");
        for (ns, dev) in [(&node, "c0"), (&node, "p0"), (&client, "eth0"), (&pod, "eth0")] {
            ip(ns, &format!("link set {dev} up"));
        }
        ip(&client, "route add default via 172.16.0.1");
        ip(&pod, "route add default via 10.64.0.254");
        let fwd = node.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"], "");
        assert!(fwd.status.success());
        let server = EchoServer::start(&pod.name, "pod", 8080);
        LatencyRig { node, client, pod, _server: server }
    }

    /// Gives the pod another address of its /24, so a service's several endpoints reach it.
    pub fn add_pod_address(&self, addr: &str) {
        ip(&self.pod, &format!("addr add {addr}/24 dev eth0"));
    }

    /// The times of `n` fresh TCP connections (connect, reply, close) from the client to `dst`, in µs.
    pub fn connect_latencies(&self, dst: &str, n: usize) -> Vec<f64> {
        let dst: std::net::SocketAddr = dst.parse().expect("address");
        let _ = &self.pod;
        in_netns(&self.client.name, move || {
            (0..n)
                .map(|_| {
                    let start = Instant::now();
                    let p = probe(Proto::Tcp, dst, None, Duration::from_secs(2));
                    assert!(matches!(p, super::common::net::Probe::Reply(_)), "latency probe failed: {p:?}");
                    start.elapsed().as_secs_f64() * 1e6
                })
                .collect()
        })
    }
}

/// The daemon's allocator (jemalloc, with the settings `.cargo/config.toml` builds into it),
/// counting the bytes live on the heap (RSS also holds freed memory the allocator kept; this
/// tells what the proxy's data really takes). The C library's would charge its own tidying
/// after a large sync's frees to whatever step comes next (15 to 25 ms on a one-Service
/// change at 100k), a cost the daemon does not have.
pub struct Counting;

static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The most bytes live since `track_peak`, kept only while asked for: the extra atomic step on
/// every allocation would otherwise weigh on every other figure.
static PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static TRACKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts keeping the heap's peak, from what is live now.
pub fn track_peak() {
    PEAK.store(LIVE.load(std::sync::atomic::Ordering::Relaxed), std::sync::atomic::Ordering::Relaxed);
    TRACKING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The heap's peak since `track_peak`, in MB; stops keeping it.
pub fn tracked_peak_mb() -> f64 {
    TRACKING.store(false, std::sync::atomic::Ordering::Relaxed);
    PEAK.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6 / 1.048576
}

// SAFETY: forwards to jemalloc unchanged; only counts.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed) + layout.size();
        if TRACKING.load(std::sync::atomic::Ordering::Relaxed) {
            PEAK.fetch_max(live, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { tikv_jemallocator::Jemalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { tikv_jemallocator::Jemalloc.dealloc(ptr, layout) }
    }

    /// Forwarded as such, as the proxy's own allocator gets it: the default (allocate, copy,
    /// free) would hold a growing buffer twice where the C library moves a big one's pages
    /// (so the resident figures would not be the proxy's). The tracked peak counts the old
    /// and the new block both, as a copying move holds them: an upper bound.
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let moved = unsafe { tikv_jemallocator::Jemalloc.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            let both = LIVE.fetch_add(new_size, std::sync::atomic::Ordering::Relaxed) + new_size;
            if TRACKING.load(std::sync::atomic::Ordering::Relaxed) {
                PEAK.fetch_max(both, std::sync::atomic::Ordering::Relaxed);
            }
            LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        moved
    }
}

/// Heap bytes live now, in MB.
pub fn live_heap_mb() -> f64 {
    LIVE.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6 / 1.048576
}
