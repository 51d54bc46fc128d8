//! An answer printed for its reader: aligned text for people, JSON for scripts (the fields
//! are listed in the README, "Seeing what the proxy does").

use super::{Explanation, Fate, Outcome, SourceKind, Step};
use crate::text::push_line;
use serde_json::{Value, json};

fn kind_name(k: SourceKind) -> &'static str {
    match k {
        SourceKind::Node => "node",
        SourceKind::LocalPod => "local-pod",
        SourceKind::RemotePod => "remote-pod",
        SourceKind::Outside => "outside",
    }
}

fn kind_text(k: SourceKind) -> &'static str {
    match k {
        SourceKind::Node => "this node",
        SourceKind::LocalPod => "a pod on this node",
        SourceKind::RemotePod => "a pod on another node",
        SourceKind::Outside => "outside the cluster",
    }
}

/// The result's name: what every outcome does, or `mixed`.
fn result_name(f: &Fate) -> &'static str {
    match f {
        Fate::Endpoint { .. } => "dnat",
        Fate::Unchanged { .. } => "unchanged",
        Fate::Dropped => "drop",
        Fate::Rejected => "reject",
    }
}

/// What happens, overall.
pub fn result(e: &Explanation) -> &'static str {
    let mut names = e.outcomes.iter().map(|o| result_name(&o.fate));
    let first = names.next().unwrap_or("unchanged");
    if names.all(|n| n == first) { first } else { "mixed" }
}

fn percent(chance: f64) -> String {
    let p = chance * 100.0;
    if (p - p.round()).abs() < 0.05 { format!("{p:.0}%") } else { format!("{p:.1}%") }
}

fn path_text(path: &[Step]) -> String {
    let mut chains: Vec<&str> = Vec::new();
    for s in path {
        if let Step::Rule { chain, .. } = s
            && chains.last() != Some(&chain.as_str())
        {
            chains.push(chain);
        }
    }
    chains.join(" > ")
}

/// The answer for people: aligned fields, a table of outcomes, the reasons. Each line is
/// made printable: node names and reasons carry text from the API server.
pub fn text(e: &Explanation) -> String {
    let mut out = String::new();
    let mut line = |text: String| push_line(&mut out, &text);
    let q = &e.query;
    line(format!("{:<9}{} ({})", "from", e.source, kind_text(e.kind)));
    line(format!("{:<9}{} {}", "to", q.to, q.protocol));
    let service = e.service.as_ref().map_or("none".to_string(), |(s, f)| format!("{s} ({f})"));
    line(format!("{:<9}{service}", "service"));
    line(format!("{:<9}{}", "result", result(e)));
    let rows: Vec<[String; 4]> = e.outcomes.iter().map(outcome_row).collect();
    let head = ["OUTCOME", "CHANCE", "NODE", "SOURCE"].map(String::from);
    let widths: Vec<usize> =
        (0..4).map(|i| rows.iter().chain([&head]).map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for row in [&head].into_iter().chain(rows.iter()) {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        line(format!("  {}", cells.join("  ").trim_end()));
    }
    for (i, r) in e.reasons.iter().enumerate() {
        line(format!("{:<9}{}", if i == 0 { "why" } else { "" }, r.text));
    }
    for (i, u) in e.unused.iter().enumerate() {
        let node = u.node.as_deref().map(|n| format!(" on {n}")).unwrap_or_default();
        line(format!("{:<9}{}{node}: {}", if i == 0 { "unused" } else { "" }, u.endpoint, u.text));
    }
    if let Some(o) = e.outcomes.first() {
        line(format!("{:<9}{}", "path", path_text(&o.path)));
    }
    out
}

fn outcome_row(o: &Outcome) -> [String; 4] {
    let source = |m: bool| if m { "masqueraded" } else { "kept" }.to_string();
    match &o.fate {
        Fate::Endpoint { to, node, masquerade } => {
            [format!("dnat {to}"), percent(o.chance), node.clone().unwrap_or("-".into()), source(*masquerade)]
        }
        Fate::Unchanged { masquerade } => ["unchanged".into(), percent(o.chance), "-".into(), source(*masquerade)],
        Fate::Dropped => ["dropped".into(), percent(o.chance), "-".into(), "-".into()],
        Fate::Rejected => ["rejected".into(), percent(o.chance), "-".into(), "-".into()],
    }
}

/// The answer for scripts: camelCase fields as the debug views', under a `version` that
/// only gains fields.
pub fn json(e: &Explanation) -> Value {
    let outcomes: Vec<Value> = e
        .outcomes
        .iter()
        .map(|o| {
            let (endpoint, masquerade) = match &o.fate {
                Fate::Endpoint { to, node, masquerade } => {
                    (json!({"address": to.ip().to_string(), "port": to.port(), "node": node}), json!(masquerade))
                }
                Fate::Unchanged { masquerade } => (Value::Null, json!(masquerade)),
                Fate::Dropped | Fate::Rejected => (Value::Null, Value::Null),
            };
            let path: Vec<Value> = o
                .path
                .iter()
                .map(|s| match s {
                    Step::Rule { chain, text } => json!({"chain": chain, "rule": text}),
                    Step::Element { set, owner } => json!({"set": set, "service": owner.as_deref()}),
                    Step::Marked { chain } => json!({"chain": chain, "marked": true}),
                })
                .collect();
            json!({"result": result_name(&o.fate), "chance": o.chance, "endpoint": endpoint,
                   "masquerade": masquerade, "path": path})
        })
        .collect();
    let reasons: Vec<Value> = e.reasons.iter().map(|r| json!({"kind": r.kind, "text": r.text})).collect();
    let unused: Vec<Value> = e
        .unused
        .iter()
        .map(|u| {
            json!({"address": u.endpoint.ip().to_string(), "port": u.endpoint.port(), "node": u.node,
                   "reason": u.reason, "text": u.text})
        })
        .collect();
    json!({
        "version": 1,
        "from": {"address": e.source.to_string(), "kind": kind_name(e.kind)},
        "to": {"address": e.query.to.ip().to_string(), "port": e.query.to.port(), "protocol": e.query.protocol.as_str()},
        "service": e.service.as_ref().map(|(s, _)| s),
        "frontend": e.service.as_ref().map(|(_, f)| f),
        "result": result(e),
        "outcomes": outcomes,
        "reasons": reasons,
        "unusedEndpoints": unused,
    })
}
