//! `--cleanup`: removing what kube-nftproxy created, and finding (and on request removing)
//! what upstream kube-proxy left behind, for a migration: its nftables tables and its
//! iptables-nft chains, never another component's (`owners.rs` decides whose a chain is).
//!
//! This reads and writes through the `nftables` crate (`nft -j`): listing tables and chains
//! and deleting objects by name or handle are what its typed JSON model covers well.

use super::NftError;
use super::exec::{self, Limits};
use super::owners::{self, Keep, Verdict};
use crate::render::TABLE_NAME;
use nftables::batch::Batch;
use nftables::schema::{Chain, FlushObject, NfCmd, NfListObject, NfObject, Rule, Table};
use nftables::stmt::Statement;
use nftables::types::NfFamily;
use std::borrow::Cow;
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
        write!(f, "{} {} {}", family_word(self.family), self.table, self.name)
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
    pub handle: u32,
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

/// `nft -j ARGS`, bounded in time as every `nft` run, read through the crate's JSON model.
fn list(args: &[&str]) -> Result<Vec<NfObject<'static>>, NftError> {
    let args: Vec<&str> = ["-j"].into_iter().chain(args.iter().copied()).collect();
    let text = exec::run(&args, None, &|_| {}, &Limits::default())?;
    let doc: nftables::schema::Nftables<'static> = serde_json::from_str(&text)
        .map_err(|e| NftError::Rejected { message: format!("reading `nft {}`: {e}", args.join(" ")), line: None })?;
    Ok(doc.objects.into_owned())
}

/// The family as nft writes it (`ip`, `ip6`…).
pub fn family_word(f: NfFamily) -> &'static str {
    match f {
        NfFamily::IP => "ip",
        NfFamily::IP6 => "ip6",
        NfFamily::INet => "inet",
        NfFamily::ARP => "arp",
        NfFamily::Bridge => "bridge",
        NfFamily::NetDev => "netdev",
    }
}

/// Finds upstream kube-proxy's tables and chains, and sorts every other `KUBE-*` chain (and
/// `kube-proxy` table of another family) into [`Leftovers::kept`] with its reason.
pub fn find_kube_proxy() -> Result<Leftovers, NftError> {
    let mut found = Leftovers::default();
    let mut others = Vec::new();
    for obj in list(&["list", "tables"])? {
        let NfObject::ListObject(NfListObject::Table(t)) = obj else { continue };
        match (t.name.as_ref(), t.family) {
            (KUBE_PROXY_TABLE, NfFamily::IP | NfFamily::IP6) => found.tables.push((t.family, t.name.into_owned())),
            (KUBE_PROXY_TABLE, family) => {
                found.kept.push(Kept { family, table: t.name.into_owned(), chain: None, why: Keep::OtherTable })
            }
            // Our own tables hold tens of thousands of chains at scale: never listed here.
            (TABLE_NAME, _) => {}
            (_, family) => others.push((family, t.name.into_owned())),
        }
    }
    let mut chains: Vec<Chain<'static>> = Vec::new();
    for (family, table) in &others {
        let objects = match list(&["list", "table", family_word(*family), table]) {
            Ok(objects) => objects,
            // Another component's table whose rules the JSON model cannot read (kube-proxy
            // never made it): skipped, not a reason to take nothing over.
            Err(e) if !KUBE_PROXY_TABLES.contains(&table.as_str()) => {
                log::warn!("not looking for kube-proxy's chains in table {} {table}: {e}", family_word(*family));
                continue;
            }
            Err(e) => return Err(e),
        };
        chains.extend(objects.into_iter().filter_map(|o| match o {
            NfObject::ListObject(NfListObject::Chain(c)) => Some(c),
            _ => None,
        }));
    }
    let mark_drop: HashSet<(NfFamily, &str)> = chains
        .iter()
        .filter(|c| c.table == "nat" && c.name == owners::MARK_DROP)
        .map(|c| (c.family, c.table.as_ref()))
        .collect();
    for c in &chains {
        let whole_table_goes = found.tables.iter().any(|(f, t)| *f == c.family && *t == c.table);
        if !c.name.starts_with("KUBE-") || c.table == TABLE_NAME || whole_table_goes {
            continue;
        }
        let here = mark_drop.contains(&(c.family, c.table.as_ref()));
        let (family, table, name) = (c.family, c.table.to_string(), c.name.to_string());
        match owners::classify(family, &table, &name, here) {
            Verdict::KubeProxy => found.chains.push(ChainRef { family, table, name }),
            Verdict::Keep(why) => found.kept.push(Kept { family, table, chain: Some(name), why }),
        }
    }
    Ok(found)
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
    let mut batch = Batch::new();
    for family in [NfFamily::IP, NfFamily::IP6] {
        let table = Table { family, name: Cow::Borrowed(TABLE_NAME), handle: None };
        batch.add(NfListObject::Table(table.clone()));
        batch.delete(NfListObject::Table(table));
    }
    apply(batch)
}

fn apply(batch: Batch) -> Result<(), NftError> {
    let json = serde_json::to_string(&batch.to_nftables()).map_err(|e| NftError::Io(std::io::Error::other(e)))?;
    exec::run(&["-j", "-f", "-"], Some(&json), &|_| {}, &Limits::default()).map(drop)
}

/// Removes kube-proxy's tables and chains found by [`find_kube_proxy`], with every rule in
/// another chain of their tables that jumps or goes to one of them, in one transaction:
/// either all of it goes or, if the host changed meanwhile, nothing does. Kept objects are
/// not touched.
pub fn remove_kube_proxy(l: &Leftovers) -> Result<Removed, NftError> {
    let mut removed = Removed { tables: l.tables.clone(), chains: l.chains.clone(), rules: Vec::new() };
    let doomed: HashSet<&ChainRef> = l.chains.iter().collect();
    let mut tables: Vec<(NfFamily, &str)> = Vec::new();
    for c in &l.chains {
        if !tables.contains(&(c.family, c.table.as_str())) {
            tables.push((c.family, c.table.as_str()));
        }
    }
    for (family, table) in tables {
        removed.rules.extend(jumps_into(family, table, &doomed)?);
    }
    if removed.tables.is_empty() && removed.chains.is_empty() {
        return Ok(removed);
    }
    let mut batch = Batch::new();
    for r in &removed.rules {
        let c = &r.chain;
        let (table, chain) = (Cow::Owned(c.table.clone()), Cow::Owned(c.name.clone()));
        batch.delete(NfListObject::Rule(Rule {
            family: c.family,
            table,
            chain,
            handle: Some(r.handle),
            ..Rule::default()
        }));
    }
    // Flushed first, all of them: kube-proxy's chains jump to each other, and a chain
    // still referenced cannot be deleted.
    for c in &removed.chains {
        batch.add_cmd(NfCmd::Flush(FlushObject::Chain(chain(c))));
    }
    for c in &removed.chains {
        batch.delete(NfListObject::Chain(chain(c)));
    }
    for (family, name) in &removed.tables {
        batch.delete(NfListObject::Table(Table { family: *family, name: Cow::Owned(name.clone()), handle: None }));
    }
    apply(batch)?;
    Ok(removed)
}

fn chain(c: &ChainRef) -> Chain<'static> {
    Chain { family: c.family, table: Cow::Owned(c.table.clone()), name: Cow::Owned(c.name.clone()), ..Chain::default() }
}

/// Rules of `family table`, outside the doomed chains, that jump or go to one of them.
fn jumps_into(family: NfFamily, table: &str, doomed: &HashSet<&ChainRef>) -> Result<Vec<JumpRule>, NftError> {
    let mut out = Vec::new();
    for obj in list(&["list", "table", family_word(family), table])? {
        let NfObject::ListObject(NfListObject::Rule(rule)) = obj else { continue };
        let here = ChainRef { family, table: table.to_string(), name: rule.chain.to_string() };
        let (Some(handle), false) = (rule.handle, doomed.contains(&here)) else { continue };
        let target = rule.expr.iter().find_map(|s| match s {
            Statement::Jump(t) | Statement::Goto(t) => {
                let to = ChainRef { name: t.target.to_string(), ..here.clone() };
                doomed.contains(&to).then_some(to.name)
            }
            _ => None,
        });
        if let Some(target) = target {
            out.push(JumpRule { chain: here, handle, target });
        }
    }
    Ok(out)
}

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
    let mut lines: Vec<String> = tables
        .iter()
        .map(|(f, t)| format!("nftables table `{} {t}` (kube-proxy nftables mode)", family_word(*f)))
        .collect();
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
        lines.push(format!("`{} {}` {text} (kube-proxy iptables/IPVS mode)", family_word(c.family), c.table));
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
        let (f, t) = (family_word(key.0), key.1);
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
        .map(|k| format!("table `{} {}`: {}", family_word(k.family), k.table, k.why.reason()))
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
        let f = family_word(k.family);
        let what = match group.as_slice() {
            [one] => format!("`{f} {} {one}`", k.table),
            _ => format!("`{f} {}` {}", k.table, names(group)),
        };
        lines.push(format!("{what}: {}", k.why.reason()));
    }
    lines
}
