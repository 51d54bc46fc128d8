//! The partial sync: what to send so the kernel goes from the applied tables to the desired
//! ones, proportional to what changed, never to the size of the cluster.

use crate::model::Family;
use crate::render::{AffinityGroup, Journal, Key, MapName, Table, Value, render_template, words};
use askama::Template;
use std::collections::{BTreeMap, BTreeSet};

/// The changes to one family's table.
#[derive(Debug, Default)]
pub struct TableDiff<'a> {
    /// `ip` or `ip6`.
    pub fam: &'static str,
    /// Affinity sets to create.
    pub new_sets: Vec<&'a str>,
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
    /// What the dispatch's entry chain held before, when it is rewritten (`None` when not, or
    /// when the kernel's was compared, not our own).
    pub dispatch_was: Option<&'a str>,
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

    /// How many elements it deletes and adds.
    pub fn element_count(&self) -> usize {
        self.delete_elements.values().map(Vec::len).sum::<usize>()
            + self.add_elements.values().map(Vec::len).sum::<usize>()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.chains_and_sets_unchanged() && self.delete_elements.is_empty() && self.add_elements.is_empty()
    }
}

/// `partial-sync.nft`: its parts in a transaction's order: new sets and chains, rewritten
/// chains (`head`); the elements; stale chains flushed and the sets no longer used (`tail`),
/// once no element leads to them, so that a sync cut into several transactions
/// (`split`) may send its elements between the two.
#[derive(Template)]
#[template(path = "partial-sync.nft")]
struct PartialSync<'a, 'd> {
    tables: &'a [TableDiff<'d>],
    head: bool,
    elements: bool,
    tail: bool,
}

/// `delete-chains.nft`.
#[derive(Template)]
#[template(path = "delete-chains.nft")]
struct DeleteChains<'a> {
    chains: Vec<(&'static str, &'a str)>,
}

impl<'a> TableDiff<'a> {
    /// An empty diff of a family's table.
    fn of(family: Family) -> TableDiff<'a> {
        let w = words(family);
        TableDiff { fam: w.fam, ..TableDiff::default() }
    }

    /// Files what happened to chain `name`. `existing_stale` are chains still in the kernel
    /// (flushed earlier, not yet deleted): reusing one needs no `add chain`.
    fn chain(&mut self, name: &'a str, old: Option<&'a String>, new: Option<&'a String>, stale: &BTreeSet<String>) {
        match (old, new) {
            (Some(o), Some(n)) if o == n => {}
            (Some(o), Some(n)) => {
                if name == crate::render::chain::DISPATCH {
                    self.dispatch_was = Some(o);
                }
                self.rewrite.push((name, n));
            }
            (None, Some(n)) => {
                if !stale.contains(name) {
                    self.new_chains.push(name);
                }
                self.rewrite.push((name, n));
            }
            (Some(_), None) => self.stale.push(name),
            (None, None) => {}
        }
    }

    /// Files what happened to affinity set `name`: created when first used, deleted when no
    /// longer (after the rules that used it).
    fn set(&mut self, name: &'a str, old: Option<&Vec<AffinityGroup>>, new: Option<&Vec<AffinityGroup>>) {
        match (old, new) {
            (None, Some(_)) => self.new_sets.push(name),
            (Some(_), None) => self.delete_sets.push(name),
            _ => {}
        }
    }

    /// Files what happened to one element; a changed value is a delete and an add in the
    /// same transaction.
    fn element(&mut self, map: MapName, key: &'a Key, old: Option<&Value>, new: Option<&'a Value>) {
        if old == new {
            return;
        }
        if old.is_some() {
            self.delete_elements.entry(map).or_default().push(key);
        }
        if let Some(v) = new {
            self.add_elements.entry(map).or_default().push((key, v));
        }
    }
}

/// Compares the applied and desired table of one family; `None` when only a full sync can
/// express the change (see `TableDiff::set`). `stale` as for `TableDiff::chain`.
pub fn diff<'a>(old: &'a Table, new: &'a Table, stale: &BTreeSet<String>) -> Option<TableDiff<'a>> {
    let mut d = TableDiff::of(new.family);
    let chains: BTreeSet<&String> = old.chains.keys().chain(new.chains.keys()).collect();
    for name in chains {
        d.chain(name, old.chains.get(name), new.chains.get(name), stale);
    }
    let sets: BTreeSet<&String> = old.affinity_maps.keys().chain(new.affinity_maps.keys()).collect();
    for name in sets {
        d.set(name, old.affinity_maps.get(name), new.affinity_maps.get(name));
    }
    for (map, key, before, after) in crate::render::element_changes(old, new) {
        d.element(map, key, before, after);
    }
    Some(d)
}

/// The changes an incremental update made to `new`, from the journal of what it touched
/// (`None` when only a full sync can express them).
pub fn from_journal<'a>(new: &'a Table, j: &'a Journal, stale: &BTreeSet<String>) -> Option<TableDiff<'a>> {
    if j.fixed_changed {
        return None;
    }
    let mut d = TableDiff::of(new.family);
    for (name, old) in &j.chains {
        d.chain(name, old.as_ref(), new.chains.get(name), stale);
    }
    for (name, old) in &j.sets {
        d.set(name, old.as_ref(), new.affinity_maps.get(name));
    }
    // In key order, as a diff of two tables lists them.
    let mut touched: Vec<_> = j.elements.iter().collect();
    touched.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for ((map, key), old) in touched {
        d.element(*map, key, old.as_ref(), new.value(*map, key));
    }
    Some(d)
}

/// Adds the element changes of `diffs` to `batch` (deletions first, as in the script).
pub fn element_ops(batch: &mut super::wire::Batch, diffs: &[TableDiff<'_>], families: &[Family]) {
    for (d, family) in diffs.iter().zip(families) {
        for (map, keys) in &d.delete_elements {
            let elems = keys.iter().map(|k| (*k, &Value::None));
            batch.elements(*family, crate::render::TABLE_NAME, map, false, elems);
        }
        for (map, entries) in &d.add_elements {
            batch.elements(*family, crate::render::TABLE_NAME, map, true, entries.iter().copied());
        }
    }
}

/// Renders the partial-sync transaction for all tables, elements included.
pub fn partial_script(diffs: &[TableDiff<'_>]) -> Result<String, crate::render::RenderError> {
    render_template(&PartialSync { tables: diffs, head: true, elements: true, tail: true }, "partial-sync.nft")
}

/// The partial sync's text without elements, in its two parts: what comes before the
/// element changes, and what after.
pub fn partial_scripts(diffs: &[TableDiff<'_>]) -> Result<(String, String), crate::render::RenderError> {
    let part = |head: bool| PartialSync { tables: diffs, head, elements: false, tail: !head };
    Ok((render_template(&part(true), "partial-sync.nft")?, render_template(&part(false), "partial-sync.nft")?))
}

/// Renders the deletion of stale chains.
pub fn delete_chains_script(chains: &[(Family, String)]) -> Result<String, crate::render::RenderError> {
    let chains = chains.iter().map(|(f, n)| (words(*f).fam, n.as_str())).collect();
    render_template(&DeleteChains { chains }, "delete-chains.nft")
}

/// Whether a partial sync cannot express the change because the fixed part changed, so the
/// table must be replaced whole.
pub fn needs_full(old: &Table, new: &Table) -> bool {
    old.family != new.family || old.fixed != new.fixed
}
