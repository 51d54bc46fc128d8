//! Every probe a data-plane test sends is also asked of `explain`, over what the rules the
//! node holds were made from: the manifests and flags the test's cluster last applied (the
//! command, run in the node's namespace), or the model and configuration a `Proxy` last
//! synced (the library, in the node's namespace). What the packet did must be one of the
//! outcomes explain predicted: the endpoint it reached, with its source kept or masqueraded
//! as predicted; dropped, rejected, or left alone. Probes of a thread whose cluster applied
//! nothing are not checked.

use super::Netns;
use super::net::{Probe, Proto};
use kube_nftproxy::config::Config;
use kube_nftproxy::explain::{self, Query};
use kube_nftproxy::model::Model;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;

/// Who is who in a test cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The node's namespace, where explain runs (so it sees the node's addresses and routes).
    pub node: String,
    /// Namespace name → its source address (v4, v6); `None` for the node itself.
    pub sources: BTreeMap<String, Option<(IpAddr, IpAddr)>>,
    /// Pod name → its namespace (whose addresses are read when a probe is checked, so one a
    /// test added counts).
    pub pods: BTreeMap<String, String>,
}

/// What the rules the node holds were made from.
#[derive(Debug, Clone)]
pub enum Rules {
    /// The dry run of these manifests and flags (besides `--manifests` and the node name).
    Binary {
        /// The manifests file.
        manifests: PathBuf,
        /// The flags.
        args: Vec<String>,
    },
    /// A sync of this model under this configuration.
    InProcess(Box<(Model, Config)>),
}

thread_local! {
    static CLUSTER: RefCell<Option<Cluster>> = const { RefCell::new(None) };
    static RULES: RefCell<Option<Rules>> = const { RefCell::new(None) };
    static CHECKED: RefCell<usize> = const { RefCell::new(0) };
}

/// Knows this thread's cluster (`None` forgets it, and its rules).
pub fn know(cluster: Option<Cluster>) {
    if cluster.is_none() {
        rules(None);
    }
    CLUSTER.with(|c| *c.borrow_mut() = cluster);
}

/// Whether this thread has a cluster whose probes are checked.
pub fn cluster_known() -> bool {
    CLUSTER.with(|c| c.borrow().is_some())
}

/// Remembers what the rules were made from (`None`: probes go unchecked until the next).
pub fn rules(rules: Option<Rules>) {
    RULES.with(|r| *r.borrow_mut() = rules);
}

/// This thread's cluster and what its rules were made from, when both are known.
pub fn current() -> Option<(Cluster, Rules)> {
    Some((CLUSTER.with(|c| c.borrow().clone())?, RULES.with(|r| r.borrow().clone())?))
}

/// How many probes of this thread explain has been checked against.
pub fn checked() -> usize {
    CHECKED.with(|c| *c.borrow())
}

/// Asks explain about the probe just sent from `ns` (from `src`, when given: its port too,
/// when not 0) to `dst` and asserts that `probe` is one of its predicted outcomes.
pub fn check(ns: &Netns, proto: Proto, dst: SocketAddr, src: Option<SocketAddr>, probe: &Probe) -> Option<Value> {
    let (cluster, rules) = current()?;
    let source = cluster.sources.get(&ns.name)?;
    let from = match (src, source) {
        (Some(a), _) if a.port() != 0 => a.to_string(),
        (Some(a), _) => a.ip().to_string(),
        (None, None) => "node".to_string(),
        (None, Some((v4, v6))) => if dst.is_ipv4() { *v4 } else { *v6 }.to_string(),
    };
    let answer = ask(&cluster, &rules, &from, dst, proto);
    let outcomes = answer["outcomes"].as_array().cloned().unwrap_or_default();
    // The source explain took: the client's, or the one the node's route gives.
    let source = answer["from"]["address"].as_str().and_then(|a| a.parse().ok());
    let fits = outcomes.iter().any(|o| fits(o, probe, &cluster, (source, from == "node"), dst));
    let seen = match probe {
        Probe::Reply(r) => format!(" (which saw {} as its source)", r.seen),
        _ => String::new(),
    };
    assert!(
        fits,
        "explain --from {from} --to {dst} ({proto:?}) predicted {}, but the packet went to {}{seen}:\n{}",
        summary(&outcomes),
        probe.who(),
        serde_json::to_string_pretty(&answer).unwrap_or_default()
    );
    CHECKED.with(|c| *c.borrow_mut() += 1);
    Some(answer)
}

/// explain's JSON answer, asked as `rules` were made.
fn ask(cluster: &Cluster, rules: &Rules, from: &str, dst: SocketAddr, proto: Proto) -> Value {
    let proto = match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Sctp => "sctp",
    };
    let (manifests, args) = match rules {
        Rules::Binary { manifests, args } => (manifests, args),
        Rules::InProcess(made) => {
            let query = Query::parse(from, &dst.to_string(), proto).expect("a query");
            let (model, cfg) = &**made;
            return super::net::in_netns(&cluster.node, || {
                let mut model = model.clone();
                model.set_host_addresses(kube_nftproxy::host::interface_addresses().expect("addresses"));
                let answer = explain::explain(&model, cfg, &query.seen_from_this_host()).expect("explain");
                explain::json(&answer)
            });
        }
    };
    let out = Command::new("ip")
        .args(["netns", "exec", &cluster.node, env!("CARGO_BIN_EXE_kube-nftproxy"), "explain", "--output=json"])
        .arg("--manifests")
        .arg(manifests)
        .arg("--hostname-override=node-a")
        .args(args)
        .args(["--from", from, "--to", &dst.to_string(), "--protocol", proto])
        .env("RUST_LOG", "warn")
        .env_remove("NODE_NAME")
        .output()
        .expect("run kube-nftproxy explain");
    assert!(out.status.success(), "explain --from {from} --to {dst} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("explain's JSON")
}

/// Whether pod `name` holds `ip` now.
pub fn holds(cluster: &Cluster, name: &str, ip: Option<IpAddr>) -> bool {
    let (Some(ns), Some(ip)) = (cluster.pods.get(name), ip) else { return false };
    let out = Command::new("ip").args(["-n", ns, "-o", "addr", "show"]).output().expect("ip addr");
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    listed.split_whitespace().filter_map(|w| w.split('/').next()?.parse::<IpAddr>().ok()).any(|a| a == ip)
}

/// Whether what the probe saw is what outcome `o` says.
fn fits(
    o: &Value,
    probe: &Probe,
    cluster: &Cluster,
    (source, from_node): (Option<IpAddr>, bool),
    dst: SocketAddr,
) -> bool {
    let is = |ip: Option<IpAddr>, name: &str| holds(cluster, name, ip);
    match (o["result"].as_str().unwrap_or_default(), probe) {
        ("dnat", Probe::Reply(r)) => {
            let endpoint: Option<IpAddr> = o["endpoint"]["address"].as_str().and_then(|a| a.parse().ok());
            is(endpoint, &r.name) && source_as_said(o, r.seen, source, from_node)
        }
        // Left alone, it reaches whoever holds the address.
        ("unchanged", Probe::Reply(r)) => is(Some(dst.ip()), &r.name) && source_as_said(o, r.seen, source, from_node),
        ("unchanged", Probe::Refused | Probe::Timeout | Probe::SendDenied | Probe::Error(_)) => true,
        ("drop", Probe::Timeout | Probe::SendDenied) => true,
        ("reject", Probe::Refused | Probe::SendDenied) => true,
        _ => false,
    }
}

/// Whether the endpoint saw the source the outcome says: the packet's when not masqueraded;
/// another when masqueraded, unless the packet came from the node with the very address
/// masquerading picks (its address towards the endpoint).
fn source_as_said(o: &Value, seen: IpAddr, source: Option<IpAddr>, from_node: bool) -> bool {
    let Some(source) = source else { return false };
    match o["masquerade"].as_bool() {
        Some(true) => seen != source || from_node,
        _ => seen == source,
    }
}

fn summary(outcomes: &[Value]) -> String {
    let each: Vec<String> = outcomes
        .iter()
        .map(|o| {
            let to = o["endpoint"]["address"].as_str().map(|a| format!(" {a}")).unwrap_or_default();
            let masq = if o["masquerade"].as_bool() == Some(true) { " masqueraded" } else { "" };
            format!(
                "{}{to}{masq} ({:.0}%)",
                o["result"].as_str().unwrap_or("?"),
                o["chance"].as_f64().unwrap_or(0.0) * 100.0
            )
        })
        .collect();
    each.join(", ")
}
