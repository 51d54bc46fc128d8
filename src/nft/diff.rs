//! The partial sync: what to send so the kernel goes from the applied tables to the desired
//! ones, proportional to what changed, never to the size of the cluster.

use crate::model::Family;
use crate::render::{Journal, Key, MapName, Table, Value, render_template, words};
use askama::Template;
use std::collections::{BTreeMap, BTreeSet};

/// The changes to one family's table.
#[derive(Debug, Default)]
pub struct TableDiff<'a> {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// Address type, for affinity set declarations.
    pub addr_type: &'static str,
    /// Affinity sets to create.
    pub new_sets: Vec<(&'a str, u32)>,
    /// Chains to create.
    pub new_chains: Vec<&'a str>,
    /// Chains (new or changed) whose rules are (re)written.
    pub rewrite: Vec<(&'a str, &'a str)>,
    /// Chains no longer used: flushed now, deleted by a later sync.
    pub stale: Vec<&'a str>,
    /// Element keys to delete, per map.
    pub delete_elements: BTreeMap<MapName, Vec<&'a Key>>,
    /// Elements to add, per map.
    pub add_elements: BTreeMap<MapName, Vec<(&'a Key, &'a Value)>>,
    /// Affinity sets to delete (after the rules using them are gone).
    pub delete_sets: Vec<&'a str>,
}

impl TableDiff<'_> {
    /// Whether no chain or set changes, whatever happens to elements.
    fn chains_and_sets_unchanged(&self) -> bool {
        self.new_sets.is_empty()
            && self.new_chains.is_empty()
            && self.rewrite.is_empty()
            && self.stale.is_empty()
            && self.delete_sets.is_empty()
    }

    /// Whether only elements changed, all in maps the netlink path can write.
    pub fn elements_only(&self) -> bool {
        self.chains_and_sets_unchanged()
            && self.delete_elements.keys().chain(self.add_elements.keys()).all(super::wire::encodable)
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.chains_and_sets_unchanged() && self.delete_elements.is_empty() && self.add_elements.is_empty()
    }
}

/// `partial-sync.nft`.
#[derive(Template)]
#[template(path = "partial-sync.nft")]
struct PartialSync<'a> {
    tables: Vec<TableDiff<'a>>,
}

/// `delete-chains.nft`.
#[derive(Template)]
#[template(path = "delete-chains.nft")]
struct DeleteChains<'a> {
    chains: Vec<(&'static str, &'a str)>,
}

/// Compares the applied and desired table of one family. `existing_stale` are chains still in
/// the kernel (flushed earlier, not yet deleted): reusing one needs no `add chain`.
pub fn diff<'a>(old: &'a Table, new: &'a Table, existing_stale: &BTreeSet<String>) -> TableDiff<'a> {
    let w = words(new.family);
    let mut d = TableDiff { fam: w.fam, addr_type: w.addr_type, ..TableDiff::default() };
    for (name, body) in &new.chains {
        match old.chains.get(name) {
            Some(old_body) if old_body == body => {}
            Some(_) => d.rewrite.push((name, body)),
            None => {
                if !existing_stale.contains(name) {
                    d.new_chains.push(name);
                }
                d.rewrite.push((name, body));
            }
        }
    }
    d.stale = old.chains.keys().filter(|n| !new.chains.contains_key(*n)).map(String::as_str).collect();
    // A set whose timeout changed cannot be altered in place; the applier syncs fully then.
    for (name, timeout) in &new.affinity_sets {
        if !old.affinity_sets.contains_key(name) {
            d.new_sets.push((name, *timeout));
        }
    }
    d.delete_sets.extend(old.affinity_sets.keys().filter(|n| !new.affinity_sets.contains_key(*n)).map(String::as_str));
    diff_elements(old, new, &mut d);
    d
}

fn diff_elements<'a>(old: &'a Table, new: &'a Table, d: &mut TableDiff<'a>) {
    static EMPTY: BTreeMap<Key, crate::render::Entry> = BTreeMap::new();
    let maps: BTreeSet<&MapName> = old.elements.keys().chain(new.elements.keys()).collect();
    for map in maps {
        let (before, after) = (old.elements.get(map).unwrap_or(&EMPTY), new.elements.get(map).unwrap_or(&EMPTY));
        for (key, entry) in before {
            // A changed value is a delete and an add in the same transaction.
            if after.get(key).is_none_or(|e| e.value != entry.value) {
                d.delete_elements.entry(*map).or_default().push(key);
            }
        }
        for (key, entry) in after {
            if before.get(key).is_none_or(|e| e.value != entry.value) {
                d.add_elements.entry(*map).or_default().push((key, &entry.value));
            }
        }
    }
}

/// The changes an incremental update made to `new`, from the journal of what it touched
/// (`None` when an affinity set's timeout changed, which only a full sync can express).
pub fn from_journal<'a>(new: &'a Table, j: &'a Journal, existing_stale: &BTreeSet<String>) -> Option<TableDiff<'a>> {
    let w = words(new.family);
    let mut d = TableDiff { fam: w.fam, addr_type: w.addr_type, ..TableDiff::default() };
    for (name, old) in &j.chains {
        match (old, new.chains.get(name)) {
            (Some(o), Some(n)) if o == n => {}
            (Some(_), Some(n)) => d.rewrite.push((name, n)),
            (None, Some(n)) => {
                if !existing_stale.contains(name) {
                    d.new_chains.push(name);
                }
                d.rewrite.push((name, n));
            }
            (Some(_), None) => d.stale.push(name),
            (None, None) => {}
        }
    }
    for (name, old) in &j.sets {
        match (old, new.affinity_sets.get(name)) {
            (None, Some(t)) => d.new_sets.push((name, *t)),
            (Some(_), None) => d.delete_sets.push(name),
            (Some(o), Some(n)) if o != n => return None,
            _ => {}
        }
    }
    for ((map, key), old) in &j.elements {
        let now = new.value(*map, key);
        if old.as_ref() == now {
            continue;
        }
        if old.is_some() {
            d.delete_elements.entry(*map).or_default().push(key);
        }
        if let Some(v) = now {
            d.add_elements.entry(*map).or_default().push((key, v));
        }
    }
    Some(d)
}

/// The element changes of `diffs` as one netlink batch (deletions first, as in the script).
pub fn element_batch(diffs: &[TableDiff<'_>], families: &[Family]) -> Vec<u8> {
    let mut batch = super::wire::Batch::new();
    for (d, family) in diffs.iter().zip(families) {
        for (map, keys) in &d.delete_elements {
            let elems = keys.iter().map(|k| (*k, &Value::None));
            batch.elements(*family, crate::render::TABLE_NAME, map, false, elems);
        }
        for (map, entries) in &d.add_elements {
            batch.elements(*family, crate::render::TABLE_NAME, map, true, entries.iter().copied());
        }
    }
    batch.finish()
}

/// Renders the partial-sync transaction for all tables.
pub fn partial_script(diffs: Vec<TableDiff<'_>>) -> Result<String, crate::render::RenderError> {
    render_template(&PartialSync { tables: diffs }, "partial-sync.nft")
}

/// Renders the deletion of stale chains.
pub fn delete_chains_script(chains: &[(Family, String)]) -> Result<String, crate::render::RenderError> {
    let chains = chains.iter().map(|(f, n)| (words(*f).fam, n.as_str())).collect();
    render_template(&DeleteChains { chains }, "delete-chains.nft")
}

/// Whether a partial sync cannot express the change (the fixed part or an affinity timeout
/// changed), so the table must be replaced whole.
pub fn needs_full(old: &Table, new: &Table) -> bool {
    old.family != new.family
        || old.fixed != new.fixed
        || new.affinity_sets.iter().any(|(n, t)| old.affinity_sets.get(n).is_some_and(|o| o != t))
}
