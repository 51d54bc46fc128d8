//! `--cleanup`: removing what kube-nftproxy created, and finding (and on request removing)
//! what upstream kube-proxy left behind, for a migration: its nftables tables and its
//! iptables-nft chains, never another component's (`owners.rs` decides whose a chain is).
//!
//! Everything goes over nf_tables netlink, no `nft` run: tables, chains and rules are read
//! from the kernel's dumps (`netlink`), and each removal is one transaction (`batch.rs`).
//! Legacy (x_tables) tables, which nftables cannot see, are read and written through
//! `iptables-legacy-save`/`-restore` (`legacy.rs`).

mod batch;
mod describe;
pub mod legacy;

use super::NftError;
use super::owners::{self, Keep, Verdict};
use crate::netlink::{NfFamily, Socket};
use crate::render::TABLE_NAME;
use batch::Removal;
pub use describe::{describe, describe_kept, describe_rules};
use std::collections::HashSet;

/// Upstream kube-proxy's nftables table name.
pub const KUBE_PROXY_TABLE: &str = "kube-proxy";

/// The iptables-nft tables kube-proxy's iptables and IPVS modes write chains into.
const KUBE_PROXY_TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// A chain, by family, table and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChainRef {
    /// The table's family.
    pub family: NfFamily,
    /// The table.
    pub table: String,
    /// The chain.
    pub name: String,
}

impl std::fmt::Display for ChainRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.family, self.table, self.name)
    }
}

/// A `KUBE-*` chain, or a `kube-proxy` table, left in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The table's family.
    pub family: NfFamily,
    /// The table.
    pub table: String,
    /// The chain; `None` for the table itself.
    pub chain: Option<String>,
    /// Why it stays.
    pub why: Keep,
}

/// What of upstream kube-proxy is on the host, and what looks like it but is not its own.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// `(family, table)` of its nftables-mode tables (`ip`/`ip6 kube-proxy`).
    pub tables: Vec<(NfFamily, String)>,
    /// Its iptables-nft chains (iptables, IPVS and userspace modes).
    pub chains: Vec<ChainRef>,
    /// Everything else named like it, with the reason it stays.
    pub kept: Vec<Kept>,
}

impl Leftovers {
    /// Whether nothing of kube-proxy's was found (kept objects do not count).
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.chains.is_empty()
    }
}

/// A rule outside kube-proxy's chains that jumps or goes to one, removed with them (e.g.
/// `PREROUTING -j KUBE-SERVICES`, or a user's own jump).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpRule {
    /// The chain holding the rule.
    pub chain: ChainRef,
    /// The rule's handle.
    pub handle: u64,
    /// The kube-proxy chain it jumps or goes to.
    pub target: String,
}

/// What [`remove_kube_proxy`] deleted, in one transaction.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Its nftables tables.
    pub tables: Vec<(NfFamily, String)>,
    /// Its iptables-nft chains.
    pub chains: Vec<ChainRef>,
    /// The rules elsewhere that led into them.
    pub rules: Vec<JumpRule>,
}

/// The outcome of [`take_over_kube_proxy`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// What was removed.
    pub removed: Removed,
    /// What was left, and why.
    pub kept: Vec<Kept>,
}

/// The family as nft writes it (`ip`, `ip6`…).
pub fn family_word(f: NfFamily) -> &'static str {
    f.word()
}

/// Finds upstream kube-proxy's tables and chains, and sorts every other `KUBE-*` chain (and
/// `kube-proxy` table of another family) into [`Leftovers::kept`] with its reason.
pub fn find_kube_proxy() -> Result<Leftovers, NftError> {
    let mut sock = Socket::open()?;
    let mut found = Leftovers::default();
    let mut others = Vec::new();
    for (family, name) in sock.tables()? {
        match (name.as_str(), family) {
            (KUBE_PROXY_TABLE, NfFamily::Ip | NfFamily::Ip6) => found.tables.push((family, name)),
            (KUBE_PROXY_TABLE, family) => {
                found.kept.push(Kept { family, table: name, chain: None, why: Keep::OtherTable })
            }
            // Our own tables hold tens of thousands of chains at scale: never listed here.
            (TABLE_NAME, _) => {}
            (_, family) => others.push((family, name)),
        }
    }
    let mut chains: Vec<ChainRef> = Vec::new();
    for (family, table) in others {
        let names = match sock.chains(family, &table) {
            Ok(names) => names,
            // Another component's table the kernel lists in a way this cannot read (kube-proxy
            // never made it): skipped, not a reason to take nothing over.
            Err(e) if !KUBE_PROXY_TABLES.contains(&table.as_str()) => {
                log::warn!("not looking for kube-proxy's chains in table {family} {table}: {e}");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        chains.extend(names.into_iter().map(|name| ChainRef { family, table: table.clone(), name }));
    }
    sort_chains(&mut found, chains);
    Ok(found)
}

/// Sorts the `KUBE-*` chains of `chains` into kube-proxy's and kept ones, leaving out those
/// of tables that go whole.
fn sort_chains(found: &mut Leftovers, chains: Vec<ChainRef>) {
    let mark_drop: HashSet<(NfFamily, String)> = chains
        .iter()
        .filter(|c| c.table == "nat" && c.name == owners::MARK_DROP)
        .map(|c| (c.family, c.table.clone()))
        .collect();
    for c in chains {
        let whole_table_goes = found.tables.iter().any(|(f, t)| *f == c.family && *t == c.table);
        if !c.name.starts_with("KUBE-") || c.table == TABLE_NAME || whole_table_goes {
            continue;
        }
        let here = mark_drop.contains(&(c.family, c.table.clone()));
        match owners::classify(c.family, &c.table, &c.name, here) {
            Verdict::KubeProxy => found.chains.push(c),
            Verdict::Keep(why) => found.kept.push(Kept { family: c.family, table: c.table, chain: Some(c.name), why }),
        }
    }
}

/// Finds kube-proxy's objects and removes them in one transaction: the one call a takeover
/// needs. Reports what went and what stayed.
pub fn take_over_kube_proxy() -> Result<Takeover, NftError> {
    let found = find_kube_proxy()?;
    let removed = remove_kube_proxy(&found)?;
    Ok(Takeover { removed, kept: found.kept })
}

/// Deletes kube-nftproxy's own tables; deleting what is not there is fine (each is added
/// first, in the same transaction, so the delete always finds it).
pub fn remove_own_tables() -> Result<(), NftError> {
    let mut removal = Removal::new();
    for family in [NfFamily::Ip, NfFamily::Ip6] {
        removal.add_table(family, TABLE_NAME);
        removal.delete_table(family, TABLE_NAME);
    }
    removal.send()
}

/// Removes kube-proxy's tables and chains found by [`find_kube_proxy`], with every rule in
/// another chain of their tables that jumps or goes to one of them, in one transaction:
/// either all of it goes or, if the host changed meanwhile, nothing does. Kept objects are
/// not touched.
pub fn remove_kube_proxy(l: &Leftovers) -> Result<Removed, NftError> {
    let mut removed = Removed { tables: l.tables.clone(), chains: l.chains.clone(), rules: Vec::new() };
    if removed.tables.is_empty() && removed.chains.is_empty() {
        return Ok(removed);
    }
    let doomed: HashSet<&ChainRef> = l.chains.iter().collect();
    let mut tables: Vec<(NfFamily, &str)> = Vec::new();
    for c in &l.chains {
        if !tables.contains(&(c.family, c.table.as_str())) {
            tables.push((c.family, c.table.as_str()));
        }
    }
    let mut sock = Socket::open()?;
    for (family, table) in tables {
        removed.rules.extend(jumps_into(&mut sock, family, table, &doomed)?);
    }
    let mut removal = Removal::new();
    for r in &removed.rules {
        removal.delete_rule(&r.chain, r.handle);
    }
    // Flushed first, all of them: kube-proxy's chains jump to each other, and a chain
    // still referenced cannot be deleted.
    for c in &removed.chains {
        removal.flush_chain(c);
    }
    for c in &removed.chains {
        removal.delete_chain(c);
    }
    for (family, name) in &removed.tables {
        removal.delete_table(*family, name);
    }
    removal.send()?;
    Ok(removed)
}

/// Rules of `family table`, outside the doomed chains, that jump or go to one of them.
fn jumps_into(
    sock: &mut Socket,
    family: NfFamily,
    table: &str,
    doomed: &HashSet<&ChainRef>,
) -> Result<Vec<JumpRule>, NftError> {
    let mut out = Vec::new();
    for rule in sock.rule_jumps(family, table)? {
        let here = ChainRef { family, table: table.to_string(), name: rule.chain };
        if doomed.contains(&here) {
            continue;
        }
        let to = |name: &String| doomed.contains(&ChainRef { name: name.clone(), ..here.clone() });
        if let Some(target) = rule.targets.into_iter().find(to) {
            out.push(JumpRule { chain: here, handle: rule.handle, target });
        }
    }
    Ok(out)
}
