//! A traced connection printed for its reader: a block of aligned fields and the rules it
//! passed, for people, or one JSON object per line, for scripts (fields in the README,
//! "Tracing a live connection"). Text from the kernel and the API server is made printable.

use super::report::Connection;
use crate::text::push_line;
use serde_json::{Value, json};

/// Where the connection came from, in words.
fn origin(c: &Connection) -> String {
    match (&c.interface, c.from_node) {
        (_, true) => "this node".into(),
        (Some(i), false) => format!("in on {i}"),
        (None, false) => "in".into(),
    }
}

/// The connection for people.
pub fn text(c: &Connection) -> String {
    let mut out = String::new();
    let mut line = |text: String| push_line(&mut out, &text);
    line(format!("{} > {} {} ({})", c.source, c.destination, c.protocol, origin(c)));
    let service = match (&c.service, &c.port) {
        (Some(s), Some(p)) if !p.is_empty() => format!("{s}:{p}"),
        (Some(s), _) => s.clone(),
        (None, _) => "none".into(),
    };
    line(format!("  {:<9}{service}", "service"));
    let partial = if c.whole { "" } else { " (the trace is not whole)" };
    line(format!("  {:<9}{}{partial}", "result", super::why::kernel_text(c)));
    for (i, w) in c.why.iter().enumerate() {
        line(format!("  {:<9}{w}", if i == 0 { "why" } else { "" }));
    }
    line(format!("  {:<9}{}", "explain", c.explain));
    let width = |f: fn(&super::report::Hop) -> &str| c.hops.iter().map(|h| f(h).chars().count()).max().unwrap_or(0);
    let (cw, rw) = (width(|h| &h.chain), width(|h| &h.rule));
    for (i, h) in c.hops.iter().enumerate() {
        let chain =
            if h.table == crate::render::TABLE_NAME { h.chain.clone() } else { format!("{}:{}", h.table, h.chain) };
        let label = if i == 0 { "rules" } else { "" };
        line(format!("  {label:<9}{chain:<cw$}  {:<rw$}  {}", h.rule, h.verdict).trim_end().to_string());
    }
    out
}

/// The connection for scripts: one object, printed on one line.
pub fn json(c: &Connection) -> Value {
    let chains: Vec<Value> = c
        .hops
        .iter()
        .map(|h| json!({"table": h.table, "chain": h.chain, "rule": h.rule, "verdict": h.verdict}))
        .collect();
    json!({
        "source": c.source.to_string(),
        "destination": c.destination.to_string(),
        "protocol": c.protocol,
        "from": if c.from_node { "node".to_string() } else { c.interface.clone().unwrap_or_default() },
        "service": c.service,
        "port": c.port,
        "endpoint": c.endpoint.map(|e| e.to_string()),
        "verdict": c.verdict,
        "whole": c.whole,
        "masquerade": c.masquerade,
        "why": c.why,
        "chains": chains,
        "explain": c.explain,
    })
}
