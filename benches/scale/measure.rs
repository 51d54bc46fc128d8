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
    client: Netns,
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
