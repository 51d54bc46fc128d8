//! Every probe a data-plane test sends is also asked of `kube-nftproxy explain`, over the
//! manifests and flags the test's cluster last applied: what the packet did must be one of
//! the outcomes explain predicted (the endpoint it reached, with its source kept or
//! masqueraded as predicted; dropped, rejected, or left alone). A test thread remembers its
//! cluster's last apply; probes of threads with none are not checked.

use super::Netns;
use super::net::{Probe, Proto};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;

/// What a cluster last applied, and who is who in it.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The node's namespace, where explain runs (so it sees the node's addresses).
    pub node: String,
    /// The manifests file.
    pub manifests: PathBuf,
    /// The flags besides `--manifests` and `--hostname-override`.
    pub args: Vec<String>,
    /// Namespace name → its source address (v4, v6); `None` for the node itself.
    pub sources: BTreeMap<String, Option<(IpAddr, IpAddr)>>,
    /// Pod address → pod name.
    pub pods: BTreeMap<IpAddr, String>,
}

thread_local! {
    static APPLIED: RefCell<Option<Applied>> = const { RefCell::new(None) };
    static CHECKED: RefCell<usize> = const { RefCell::new(0) };
}

/// Remembers what this thread's cluster applied (`None` forgets it).
pub fn remember(applied: Option<Applied>) {
    APPLIED.with(|a| *a.borrow_mut() = applied);
}

/// How many probes of this thread explain has been checked against.
pub fn checked() -> usize {
    CHECKED.with(|c| *c.borrow())
}

/// Asks explain about the probe just sent from `ns` to `dst` and asserts that `probe` is one
/// of its predicted outcomes.
pub fn check(ns: &Netns, proto: Proto, dst: SocketAddr, src: Option<IpAddr>, probe: &Probe) {
    let Some(applied) = APPLIED.with(|a| a.borrow().clone()) else { return };
    let Some(source) = applied.sources.get(&ns.name) else { return };
    let from = match (src, source) {
        (Some(ip), _) => ip.to_string(),
        (None, None) => "node".to_string(),
        (None, Some((v4, v6))) => if dst.is_ipv4() { *v4 } else { *v6 }.to_string(),
    };
    let answer = explain(&applied, &from, dst, proto);
    let outcomes = answer["outcomes"].as_array().cloned().unwrap_or_default();
    // The source explain took: the client's, or the one the node's route gives.
    let source = answer["from"]["address"].as_str().and_then(|a| a.parse().ok());
    let fits = outcomes.iter().any(|o| fits(o, probe, &applied, (source, from == "node"), dst));
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
}

fn explain(applied: &Applied, from: &str, dst: SocketAddr, proto: Proto) -> Value {
    let proto = match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Sctp => "sctp",
    };
    let out = Command::new("ip")
        .args(["netns", "exec", &applied.node, env!("CARGO_BIN_EXE_kube-nftproxy"), "explain", "--output=json"])
        .arg("--manifests")
        .arg(&applied.manifests)
        .arg("--hostname-override=node-a")
        .args(&applied.args)
        .args(["--from", from, "--to", &dst.to_string(), "--protocol", proto])
        .env("RUST_LOG", "warn")
        .env_remove("NODE_NAME")
        .output()
        .expect("run kube-nftproxy explain");
    assert!(out.status.success(), "explain --from {from} --to {dst} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("explain's JSON")
}

/// Whether what the probe saw is what outcome `o` says.
fn fits(
    o: &Value,
    probe: &Probe,
    applied: &Applied,
    (source, from_node): (Option<IpAddr>, bool),
    dst: SocketAddr,
) -> bool {
    let is = |ip: Option<IpAddr>, name: &str| ip.and_then(|ip| applied.pods.get(&ip)).is_some_and(|n| n == name);
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
