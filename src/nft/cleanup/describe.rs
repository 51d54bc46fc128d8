//! Describing, for the log, what a takeover removed and what it left: a line per table and
//! kind of object, iptables mode's per-service chains counted rather than named.

use super::{ChainRef, JumpRule, Kept};
use crate::netlink::NfFamily;
use crate::nft::owners::{self, Keep};

/// Most chain names one log line lists before it counts the rest.
const NAMES_SHOWN: usize = 8;

fn names(mut list: Vec<&str>) -> String {
    let more = list.len().saturating_sub(NAMES_SHOWN);
    list.truncate(NAMES_SHOWN);
    let shown = list.join(", ");
    if more > 0 { format!("{shown} and {more} more") } else { shown }
}

fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// Describes kube-proxy's tables and chains, one line per table; iptables mode's
/// per-service chains are counted, not named.
pub fn describe(tables: &[(NfFamily, String)], chains: &[ChainRef]) -> Vec<String> {
    let mut lines: Vec<String> =
        tables.iter().map(|(f, t)| format!("nftables table `{} {t}` (kube-proxy nftables mode)", f)).collect();
    let mut seen: Vec<(NfFamily, &str)> = Vec::new();
    for c in chains {
        let key = (c.family, c.table.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let in_table: Vec<&str> =
            chains.iter().filter(|o| (o.family, o.table.as_str()) == key).map(|o| o.name.as_str()).collect();
        let per_service = |n: &str| owners::SERVICE_PREFIXES.iter().any(|p| n.starts_with(p));
        let services = in_table.iter().filter(|n| per_service(n)).count();
        let mut text = names(in_table.iter().copied().filter(|n| !per_service(n)).collect());
        if services > 0 {
            let sep = if text.is_empty() { "" } else { " and " };
            text = format!("{text}{sep}{}", count(services, "per-service chain"));
        }
        lines.push(format!("`{} {}` {text} (kube-proxy iptables/IPVS mode)", c.family, c.table));
    }
    lines
}

/// Describes the rules removed for jumping into kube-proxy's chains, one line per table.
pub fn describe_rules(rules: &[JumpRule]) -> Vec<String> {
    let mut seen: Vec<(NfFamily, &str)> = Vec::new();
    let mut lines = Vec::new();
    for r in rules {
        let key = (r.chain.family, r.chain.table.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let in_table: Vec<&JumpRule> =
            rules.iter().filter(|o| (o.chain.family, o.chain.table.as_str()) == key).collect();
        let mut per_chain: Vec<(&str, usize)> = Vec::new();
        for o in &in_table {
            match per_chain.iter_mut().find(|(c, _)| *c == o.chain.name) {
                Some((_, n)) => *n += 1,
                None => per_chain.push((o.chain.name.as_str(), 1)),
            }
        }
        let counts: Vec<String> = per_chain.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let (f, t) = (key.0, key.1);
        let n = count(in_table.len(), "rule");
        lines.push(format!("{n} of `{f} {t}` that led to them ({})", counts.join(", ")));
    }
    lines
}

/// Describes what was left and why, one line per table and reason, e.g.
/// "`ip filter KUBE-FIREWALL`: kubelet's".
pub fn describe_kept(kept: &[Kept]) -> Vec<String> {
    let mut lines: Vec<String> = kept
        .iter()
        .filter(|k| k.chain.is_none())
        .map(|k| format!("table `{} {}`: {}", k.family, k.table, k.why.reason()))
        .collect();
    let chains: Vec<(&Kept, &str)> = kept.iter().filter_map(|k| Some((k, k.chain.as_deref()?))).collect();
    let mut seen: Vec<(NfFamily, &str, Keep)> = Vec::new();
    for (k, _) in &chains {
        let key = (k.family, k.table.as_str(), k.why);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let group: Vec<&str> =
            chains.iter().filter(|(o, _)| (o.family, o.table.as_str(), o.why) == key).map(|(_, c)| *c).collect();
        let f = k.family;
        let what = match group.as_slice() {
            [one] => format!("`{f} {} {one}`", k.table),
            _ => format!("`{f} {}` {}", k.table, names(group)),
        };
        lines.push(format!("{what}: {}", k.why.reason()));
    }
    lines
}
