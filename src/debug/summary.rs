//! The summary SIGUSR1 logs after its first line (services, ports, the last sync): totals of
//! the services view, what the tables hold, and a line for each service port whose traffic
//! finds no endpoint, up to [`MAX_PROBLEMS`] of them, so a big cluster's log stays readable.

use super::services_page::{Policy, PortView, Verdict};
use crate::render::{Ruleset, chain, words};
use crate::topology::Unused;
use std::collections::BTreeMap;

/// The most service ports named one per line; the rest are counted.
pub const MAX_PROBLEMS: usize = 30;

/// Counts by reason, as `2 not-ready, 1 topology`.
fn by_reason(counts: &BTreeMap<Unused, usize>) -> String {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (why, n) in counts {
        *names.entry(why.name()).or_default() += n;
    }
    names.iter().map(|(name, n)| format!("{n} {name}")).collect::<Vec<_>>().join(", ")
}

/// What one port's traffic without an endpoint meets, as words.
fn fate(v: Verdict) -> &'static str {
    match v {
        Verdict::Endpoints => "balanced over endpoints",
        Verdict::Drop => "dropped",
        Verdict::Reject => "rejected",
    }
}

/// The line for a port whose traffic finds no endpoint somewhere, if it has one: what that
/// traffic meets, and why the policy it follows passed each endpoint over.
fn problem(p: &PortView) -> Option<String> {
    p.traffic.refused()?;
    let mut what = vec![format!("cluster IP traffic {}", fate(p.traffic.cluster_ip))];
    let mut local = Vec::new();
    if p.traffic.cluster_ip != Verdict::Endpoints {
        local.push(p.internal_traffic_policy == Policy::Local);
    }
    if let Some(external) = p.traffic.external {
        what.push(format!("external traffic {}", fate(external)));
        if external != Verdict::Endpoints {
            local.push(p.external_traffic_policy == Policy::Local);
        }
    }
    let mut unused = BTreeMap::new();
    for e in &p.endpoints {
        // One reason per endpoint: the first refused traffic's (each passed every one over).
        let mut choices = local.iter().map(|l| if *l { e.local } else { e.cluster });
        if let Some(why) = choices.find_map(|c| c.passed()) {
            *unused.entry(why).or_default() += 1;
        }
    }
    let endpoints = match p.endpoints.len() {
        0 => "no endpoints".to_string(),
        n => format!("endpoints: {n}, passed over: {}", by_reason(&unused)),
    };
    Some(format!("{} ({}): {}; {endpoints}", p.name, p.ip_family, what.join(", ")))
}

/// The totals and problem lines of `ports`.
pub fn ports<'m>(ports: impl Iterator<Item = PortView<'m>>) -> Vec<String> {
    let (mut views, mut endpoints, mut used) = (0, 0, 0);
    let mut unused: BTreeMap<Unused, usize> = BTreeMap::new();
    let mut refused: BTreeMap<Verdict, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for p in ports {
        views += 1;
        endpoints += p.endpoints.len();
        for e in &p.endpoints {
            match e.unused {
                Some(why) => *unused.entry(why).or_default() += 1,
                None => used += 1,
            }
        }
        if let Some(v) = p.traffic.refused() {
            *refused.entry(v).or_default() += 1;
            problems.extend(problem(&p));
        }
    }
    let unused_total: usize = unused.values().sum();
    let mut lines = vec![format!(
        "{views} service ports (counted per IP family) with {endpoints} endpoints: {used} used, {unused_total} unused{}",
        if unused.is_empty() { String::new() } else { format!(" ({})", by_reason(&unused)) }
    )];
    let count = |v: Verdict| refused.get(&v).copied().unwrap_or(0);
    lines.push(match problems.len() {
        0 => "every service port's traffic has an endpoint to go to".to_string(),
        n => format!(
            "{n} service ports have traffic that finds no endpoint: {} reject it, {} drop it",
            count(Verdict::Reject),
            count(Verdict::Drop)
        ),
    });
    let more = problems.len().saturating_sub(MAX_PROBLEMS);
    lines.extend(problems.into_iter().take(MAX_PROBLEMS));
    if more > 0 {
        lines.push(format!("... and {more} more (see /debug/services on the metrics address)"));
    }
    lines
}

/// One line per table: its chains and their rules, its set and map elements and affinity sets.
pub fn tables(ruleset: &Ruleset) -> Vec<String> {
    ruleset
        .tables
        .iter()
        .map(|t| {
            let rules: usize = t.chains.values().map(|body| body.lines().filter(|l| !l.trim().is_empty()).count()).sum();
            let elements: usize = t.elements.values().map(|m| m.len()).sum();
            format!(
                "{} table: {} fixed and {} rendered chains ({rules} rules in the rendered), {elements} set and map elements, {} affinity sets",
                words(t.family).fam,
                chain::ALL.len(),
                t.chains.len(),
                t.affinity_maps.len()
            )
        })
        .collect()
}
