//! `--cleanup`: removing what kube-nftproxy created, and finding (and on request removing)
//! what upstream kube-proxy left behind, for a migration.
//!
//! This reads and writes through the `nftables` crate (`nft -j`): listing tables and chains
//! and deleting objects by name or handle are what its typed JSON model covers well.

use super::NftError;
use super::exec::nft_binary;
use crate::render::TABLE_NAME;
use nftables::batch::Batch;
use nftables::schema::{Chain, FlushObject, NfCmd, NfListObject, NfObject, Rule, Table};
use nftables::stmt::Statement;
use nftables::types::NfFamily;
use std::borrow::Cow;

/// Upstream kube-proxy's nftables table name.
pub const KUBE_PROXY_TABLE: &str = "kube-proxy";

/// Objects of upstream kube-proxy found on the host.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// `(family, table)` of its nftables-mode tables.
    pub tables: Vec<(NfFamily, String)>,
    /// `(family, table, chain)` of iptables-mode `KUBE-*` chains (iptables-nft).
    pub chains: Vec<(NfFamily, String, String)>,
}

impl Leftovers {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.chains.is_empty()
    }
}

fn nft_err(e: nftables::helper::NftablesError) -> NftError {
    NftError::Rejected { message: e.to_string(), line: None }
}

fn list(args: &[&str]) -> Result<Vec<NfObject<'static>>, NftError> {
    let nft = nft_binary();
    let doc =
        nftables::helper::get_current_ruleset_with_args(Some(nft.as_str()), args.iter().copied()).map_err(nft_err)?;
    Ok(doc.objects.into_owned())
}

fn family_word(f: NfFamily) -> &'static str {
    match f {
        NfFamily::IP => "ip",
        NfFamily::IP6 => "ip6",
        NfFamily::INet => "inet",
        NfFamily::ARP => "arp",
        NfFamily::Bridge => "bridge",
        NfFamily::NetDev => "netdev",
    }
}

/// Finds upstream kube-proxy's tables and `KUBE-*` chains.
pub fn find_kube_proxy() -> Result<Leftovers, NftError> {
    let mut found = Leftovers::default();
    for obj in list(&["list", "tables"])? {
        if let NfObject::ListObject(NfListObject::Table(t)) = obj
            && t.name == KUBE_PROXY_TABLE
        {
            found.tables.push((t.family, t.name.into_owned()));
        }
    }
    for obj in list(&["list", "chains"])? {
        if let NfObject::ListObject(NfListObject::Chain(c)) = obj
            && c.name.starts_with("KUBE-")
            && c.table != KUBE_PROXY_TABLE
            && c.table != TABLE_NAME
        {
            found.chains.push((c.family, c.table.into_owned(), c.name.into_owned()));
        }
    }
    Ok(found)
}

/// Describes leftovers for the user.
pub fn describe(l: &Leftovers) -> Vec<String> {
    let mut lines: Vec<String> = l
        .tables
        .iter()
        .map(|(f, t)| format!("nftables table `{} {t}` (kube-proxy nftables mode)", family_word(*f)))
        .collect();
    let mut tables: Vec<(NfFamily, &str)> = l.chains.iter().map(|(f, t, _)| (*f, t.as_str())).collect();
    tables.dedup();
    for (f, t) in tables {
        let n = l.chains.iter().filter(|(cf, ct, _)| *cf == f && ct == t).count();
        lines.push(format!("{n} iptables KUBE-* chains in `{} {t}` (kube-proxy iptables mode)", family_word(f)));
    }
    lines
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
    let nft = nft_binary();
    nftables::helper::apply_ruleset_with_args(&batch.to_nftables(), Some(nft.as_str()), std::iter::empty::<&str>())
        .map_err(nft_err)
}

/// Removes kube-proxy's tables and `KUBE-*` chains (with the rules jumping to them) in one transaction.
pub fn remove_kube_proxy(l: &Leftovers) -> Result<(), NftError> {
    let mut batch = Batch::new();
    for (family, name) in &l.tables {
        batch.delete(NfListObject::Table(Table { family: *family, name: Cow::Owned(name.clone()), handle: None }));
    }
    let mut tables: Vec<(NfFamily, &str)> = l.chains.iter().map(|(f, t, _)| (*f, t.as_str())).collect();
    tables.dedup();
    for (family, table) in tables {
        for rule in jumps_into_kube_chains(family, table)? {
            batch.delete(NfListObject::Rule(rule));
        }
        let chains = l.chains.iter().filter(|(f, t, _)| *f == family && t == table);
        for (_, _, name) in chains.clone() {
            batch.add_cmd(NfCmd::Flush(FlushObject::Chain(chain(family, table, name))));
        }
        for (_, _, name) in chains {
            batch.delete(NfListObject::Chain(chain(family, table, name)));
        }
    }
    apply(batch)
}

fn chain(family: NfFamily, table: &str, name: &str) -> Chain<'static> {
    Chain { family, table: Cow::Owned(table.to_string()), name: Cow::Owned(name.to_string()), ..Chain::default() }
}

/// Rules outside `KUBE-*` chains that jump or go to one (e.g. `PREROUTING -j KUBE-SERVICES`).
fn jumps_into_kube_chains(family: NfFamily, table: &str) -> Result<Vec<Rule<'static>>, NftError> {
    let mut out = Vec::new();
    for obj in list(&["list", "table", family_word(family), table])? {
        let NfObject::ListObject(NfListObject::Rule(rule)) = obj else { continue };
        let into_kube = rule.expr.iter().any(|s| match s {
            Statement::Jump(t) | Statement::Goto(t) => t.target.starts_with("KUBE-"),
            _ => false,
        });
        if into_kube && !rule.chain.starts_with("KUBE-") {
            out.push(Rule { expr: Cow::Owned(Vec::new()), ..rule });
        }
    }
    Ok(out)
}
