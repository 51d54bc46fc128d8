//! The ClusterIP dispatch by endpoint count. A ClusterIP frontend whose endpoints are picked
//! at random and that needs no chain of its own has no `service-ips` element: the `dispatch`
//! chain finds its shared `lb-*` chain from its slots in the endpoint map, which hold
//! its endpoint count (a frontend with `n` endpoints holds slots 0 to `n - 1`), in a binary
//! search over the counts in use. Adding such a Service, or changing its endpoint count,
//! then adds no jump to the table: the kernel re-validates every jump of a table whenever a
//! transaction adds one, which at 30,000 Services was most of the cost of adding one.

use super::builder::{LbKey, Pick};
use super::maps::{MapName, Scope};
use super::names;
use super::templates::{DispatchChain, DispatchRule, FamilyWords};
use super::{RenderError, render_template};
use crate::model::Protocol;
use std::collections::BTreeMap;

/// The dispatch's chains, name → body: the entry chain, with a rule for each scope and
/// protocol with a random-pick `lb-*` chain for IP frontends among `lb`, and the steps of
/// each one's search.
pub(super) fn chains(
    words: FamilyWords,
    lb: impl Iterator<Item = LbKey>,
) -> Result<BTreeMap<String, String>, RenderError> {
    let mut counts: BTreeMap<(Protocol, Scope), Vec<usize>> = BTreeMap::new();
    for key in lb.filter(|k| k.pick == Pick::Random && !k.nodeport) {
        counts.entry((key.proto, key.scope)).or_default().push(key.n);
    }
    let mut out = BTreeMap::new();
    let mut entry = Vec::new();
    for ((proto, scope), mut ns) in counts {
        ns.sort_unstable();
        ns.dedup();
        let search = Search { words, scope, proto };
        let to = search.step(&ns, &mut out)?;
        // Slot 0: the frontend has endpoints of this scope at all.
        entry.push(DispatchRule { proto: proto.as_str(), slot: 0, map: search.map(0), to });
    }
    let t = DispatchChain { fam: words.fam, rules: entry, otherwise: None };
    out.insert(names::chain::DISPATCH.to_string(), render_template(&t, "dispatch.nft")?);
    Ok(out)
}

/// One scope's and protocol's search.
struct Search {
    words: FamilyWords,
    scope: Scope,
    proto: Protocol,
}

impl Search {
    /// The endpoint map that holds `slot`.
    fn map(&self, slot: usize) -> String {
        MapName::endpoints(self.scope, self.proto, false, slot).to_string()
    }

    /// The chain that leads a frontend with one of the counts `ns` (sorted, distinct) to its
    /// `lb-*` chain, adding the steps it needs to `out`: the `lb-*` chain itself for one
    /// count; otherwise a step that tests the middle count's last slot and halves the rest.
    fn step(&self, ns: &[usize], out: &mut BTreeMap<String, String>) -> Result<String, RenderError> {
        let lb = |n| {
            names::lb_chain(&LbKey { scope: self.scope, nodeport: false, proto: self.proto, n, pick: Pick::Random })
        };
        let (Some(&lo), Some(&hi)) = (ns.first(), ns.last()) else { return Ok(lb(1)) };
        if lo == hi {
            return Ok(lb(lo));
        }
        let mid = ns.len() / 2;
        let at_least = ns[mid];
        let more = self.step(&ns[mid..], out)?;
        let fewer = self.step(&ns[..mid], out)?;
        let rule =
            DispatchRule { proto: self.proto.as_str(), slot: at_least - 1, map: self.map(at_least - 1), to: more };
        let t = DispatchChain { fam: self.words.fam, rules: vec![rule], otherwise: Some(fewer) };
        let name = names::dispatch_chain(self.scope, self.proto, lo, hi);
        out.insert(name.clone(), render_template(&t, "dispatch.nft")?);
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> FamilyWords {
        FamilyWords { fam: "ip", addr_type: "ipv4_addr", loopback: "127.0.0.0/8" }
    }

    fn random(scope: Scope, proto: Protocol, n: usize) -> LbKey {
        LbKey { scope, nodeport: false, proto, n, pick: Pick::Random }
    }

    /// Follows the chains as the kernel would for a frontend with `n` slots.
    fn follow(chains: &BTreeMap<String, String>, from: &str, n: usize) -> String {
        let mut at = from.to_string();
        while let Some(body) = chains.get(&at) {
            let next = body.lines().find_map(|line| {
                if let Some(to) = line.strip_prefix("goto ") {
                    return Some(to.to_string());
                }
                let (test, to) = line.split_once(" goto ")?;
                let slot = match test.split_once(" offset ") {
                    Some((_, rest)) => rest.split_whitespace().next()?.parse::<usize>().ok()?,
                    None => 0,
                };
                (slot < n).then(|| to.to_string())
            });
            at = next.unwrap_or_default();
        }
        at
    }

    #[test]
    fn every_count_in_use_reaches_its_own_lb_chain() {
        let counts = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144];
        let keys = counts.iter().map(|&n| random(Scope::Cluster, Protocol::Tcp, n));
        let chains = chains(words(), keys).expect("render");
        let entry = &chains[names::chain::DISPATCH];
        assert_eq!(entry.lines().count(), 1, "{entry}");
        let root = entry.split_once(" goto ").map(|(_, to)| to.trim().to_string()).expect("entry rule");
        assert_eq!(root, "dispatch-cluster-tcp-1-144");
        for n in counts {
            assert_eq!(follow(&chains, &root, n), format!("lb-cluster-tcp-{n}"));
        }
        // 11 counts: every frontend passes at most four tests after the entry's.
        assert_eq!(chains.len(), 1 + counts.len() - 1);
    }

    #[test]
    fn the_floors_read_from_the_entry_are_the_least_counts_in_use() {
        let keys = [3, 5, 9]
            .map(|n| random(Scope::Cluster, Protocol::Tcp, n))
            .into_iter()
            .chain([random(Scope::Local, Protocol::Tcp, 2), random(Scope::Cluster, Protocol::Udp, 4)]);
        let chains = chains(words(), keys).expect("render");
        let floors = names::dispatch_floors(&chains[names::chain::DISPATCH]);
        let want = [("cluster-endpoints-tcp-0", 3), ("cluster-endpoints-udp-0", 4), ("local-endpoints-tcp-0", 2)];
        assert_eq!(floors, want.map(|(m, n)| (m.to_string(), n)).into_iter().collect());
    }

    #[test]
    fn one_count_leads_straight_to_its_chain_and_other_picks_are_not_dispatched() {
        let keys = [
            random(Scope::Local, Protocol::Udp, 2),
            LbKey { scope: Scope::Cluster, nodeport: true, proto: Protocol::Tcp, n: 3, pick: Pick::Random },
            LbKey {
                scope: Scope::Cluster,
                nodeport: false,
                proto: Protocol::Tcp,
                n: 3,
                pick: Pick::Hash { port: false },
            },
        ];
        let chains = chains(words(), keys.into_iter()).expect("render");
        assert_eq!(chains.len(), 1, "{chains:?}");
        assert_eq!(
            chains[names::chain::DISPATCH],
            "ip daddr . udp dport . numgen random mod 1 @local-endpoints-udp-0 goto lb-local-udp-2\n"
        );
    }

    #[test]
    fn no_counts_leave_an_empty_entry_chain() {
        let chains = chains(words(), std::iter::empty()).expect("render");
        assert_eq!(chains.into_iter().collect::<Vec<_>>(), [(names::chain::DISPATCH.to_string(), String::new())]);
    }
}
