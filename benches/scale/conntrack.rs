//! The conntrack cleanup over a large table (`-- --conntrack`): a namespace's table is filled
//! with UDP flows through ctnetlink, then swept with a plan that matches few of them, each
//! sweep in a child process of its own so its peak RSS is its own. The baseline, measured in
//! the same run, is the dump alone (decoding every entry, deleting nothing), and `conntrack
//! -L` where that binary is installed. Tables of 10k and 100k flows show that time follows
//! the table while memory does not.

use super::common::Netns;
use super::common::net::in_netns;
use super::{in_child, measure, runs};
use kube_nftproxy::conntrack::{self, Frontend, Plan};
use kube_nftproxy::netlink::conntrack::{IPPROTO_UDP, NewFlow, create};
use kube_nftproxy::netlink::{NfFamily, Socket};
use serde_json::{Value, json};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The flows a sweep deletes per run: a replaced endpoint's clients.
const STALE: u32 = 100;
/// Frontends in the plan (ClusterIPs 10.96.0.1–10 port 53).
const FRONTENDS: u8 = 10;
/// Of the bulk flows, one in this many goes to a planned frontend and a serving endpoint:
/// matched, and kept.
const KEPT_EVERY: u32 = 1000;

fn v4(base: [u8; 4], offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::from(base)) + offset)
}

/// The serving endpoint the plan allows.
fn serving() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 1, 0, 2).into(), 5353)
}

fn frontend(i: u32) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 96, 0, (i % u32::from(FRONTENDS)) as u8 + 1).into(), 53)
}

fn udp(client: Ipv4Addr, dst: SocketAddr, reply_src: SocketAddr) -> NewFlow {
    let client = SocketAddr::new(client.into(), 40000);
    NewFlow { proto: IPPROTO_UDP, orig_src: client, orig_dst: dst, reply_src, reply_dst: client, timeout: 3600 }
}

/// The bulk of the table: `n` flows, most to services outside the plan.
fn bulk(n: u32) -> impl Iterator<Item = NewFlow> {
    (0..n).map(|i| {
        let client = v4([10, 200, 0, 0], i);
        if i % KEPT_EVERY == 0 {
            udp(client, frontend(i), serving())
        } else {
            let service = SocketAddr::new(v4([10, 97, 0, 1], i % 5000).into(), 53);
            udp(client, service, SocketAddr::new(v4([10, 2, 0, 2], i % 250).into(), 5353))
        }
    })
}

/// Flows to planned frontends answered by an endpoint that no longer serves: `STALE` of them.
fn stale() -> impl Iterator<Item = NewFlow> {
    (0..STALE).map(|k| udp(v4([10, 210, 0, 0], k), frontend(k), SocketAddr::new(v4([10, 250, 0, 1], k).into(), 5353)))
}

fn plan() -> Plan {
    let mut plan = Plan::default();
    for i in 0..u32::from(FRONTENDS) {
        plan.frontends.insert(Frontend::Address(frontend(i)), [serving()].into());
    }
    plan
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 1e2
}

/// In a child: one sweep (`sweep`) or one dump alone (`dump`) in namespace `ns`; prints its
/// figures as JSON.
pub fn child(what: &str, ns: &str) -> Value {
    let (took, scanned, deleted) = in_netns(ns, || {
        let start = Instant::now();
        match what {
            "sweep" => {
                let report = conntrack::clear(&plan()).expect("sweep");
                let f = report.families.first().copied().expect("one family");
                (start.elapsed(), f.scanned, f.deleted)
            }
            _ => {
                let mut n = 0u64;
                let mut sock = Socket::open().expect("netlink socket");
                sock.dump_conntrack(NfFamily::Ip, |e| {
                    n += u64::from(e.proto == IPPROTO_UDP);
                    Ok(())
                })
                .expect("dump");
                (start.elapsed(), n, 0)
            }
        }
    });
    json!({"ms": ms(took), "scanned": scanned, "deleted": deleted, "rss_mb": measure::peak_rss_mb(false)})
}

/// `conntrack -L -p udp` in `ns`, if the binary is installed: its wall time in ms.
fn conntrack_tool(ns: &Netns) -> Option<f64> {
    let start = Instant::now();
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "conntrack", "-L", "-p", "udp"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    out.success().then(|| ms(start.elapsed()))
}

/// One table size: `runs` sweeps, each after the stale flows are created again, alternating
/// with the baseline.
fn table(size: u32, runs: usize) -> Value {
    let ns = Netns::new("ctbench");
    let start = Instant::now();
    let created = in_netns(&ns.name, || create(bulk(size))).expect("fill the table");
    assert_eq!(created, u64::from(size));
    let fill_ms = ms(start.elapsed());
    let mut results = Vec::new();
    for _ in 0..runs {
        let dump = in_child(&["--conntrack-child".into(), "dump".into(), ns.name.clone()]);
        let again = in_netns(&ns.name, || create(stale())).expect("stale flows");
        assert_eq!(again, u64::from(STALE));
        let sweep = in_child(&["--conntrack-child".into(), "sweep".into(), ns.name.clone()]);
        assert_eq!(sweep["deleted"].as_u64(), Some(u64::from(STALE)), "{sweep}");
        let tool = conntrack_tool(&ns);
        results.push(json!({"table": size, "dump": dump, "sweep": sweep, "conntrack_l_ms": tool}));
    }
    let mut r = runs::combine(&results);
    r["fill_ms"] = json!(fill_ms);
    r
}

/// `median (min–max)` of a figure.
fn cell(r: &Value, path: &[&str]) -> String {
    let at = |which: &str| path.iter().fold(&r[which], |v, k| &v[*k]).as_f64();
    match (at("median"), at("min"), at("max")) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:.1} ({lo:.1}–{hi:.1})"),
        _ => "-".into(),
    }
}

/// The whole mode: both table sizes (1k for `--smoke`), printed as a table and returned.
pub fn run(smoke: bool, runs: usize) -> Value {
    let sizes: &[u32] = if smoke { &[1000] } else { &[10_000, 100_000] };
    let tables: Vec<Value> = sizes.iter().map(|&n| table(n, runs)).collect();
    println!("conntrack cleanup, {runs} runs, median (lowest–highest); {STALE} stale flows deleted per sweep");
    println!("| UDP flows | dump alone ms | sweep ms | dump peak RSS MB | sweep peak RSS MB | conntrack -L ms |");
    println!("|---|---|---|---|---|---|");
    for t in &tables {
        println!(
            "| {:.0} | {} | {} | {} | {} | {} |",
            t["median"]["table"].as_f64().unwrap_or(f64::NAN),
            cell(t, &["dump", "ms"]),
            cell(t, &["sweep", "ms"]),
            cell(t, &["dump", "rss_mb"]),
            cell(t, &["sweep", "rss_mb"]),
            cell(t, &["conntrack_l_ms"]),
        );
    }
    json!(tables)
}
