//! A family's table as `explain` runs it: the chains a full sync declares (compiled as sent,
//! `compile::declared`), its named sets with the desired state's elements laid out as the
//! kernel holds them (`element`), and the rules' anonymous sets by their id in the batch.

use super::ExplainError;
use crate::model::Family;
use crate::netlink::abi::{NFT_SET_ELEM_INTERVAL_END, NFT_SET_INTERVAL};
use crate::netlink::elements::Element;
use crate::nft::compile::{self, DeclaredChain, SetSpec};
use crate::nft::element;
use crate::render::{self, Ruleset};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One family's table.
#[derive(Debug, Clone)]
pub struct Table {
    /// Its family.
    pub family: Family,
    /// Chains by name.
    pub chains: BTreeMap<String, DeclaredChain>,
    /// Named sets and maps by name.
    pub sets: BTreeMap<String, Set>,
    /// Anonymous sets by their id in the batch (how a rule's lookup names them).
    pub anon: BTreeMap<u32, Set>,
}

/// A set or map with its elements, each with the service port that put it there.
#[derive(Debug, Clone)]
pub struct Set {
    /// How it is declared to the kernel.
    pub spec: SetSpec,
    /// Its elements.
    pub elements: Vec<(Element, Option<Arc<str>>)>,
}

impl Set {
    /// Whether it is an interval set.
    pub fn interval(&self) -> bool {
        self.spec.flags & NFT_SET_INTERVAL != 0
    }

    /// The element that `key` matches: equal keys in a hash set; in an interval set, a
    /// range that holds it (a concatenation's element spans its first to its last key, field by
    /// field; a single field's ranges are start elements, each ended by the next end element).
    pub fn find(&self, key: &[u8]) -> Option<&(Element, Option<Arc<str>>)> {
        if !self.interval() {
            return self.elements.iter().find(|(e, _)| e.key == key);
        }
        if self.elements.iter().any(|(e, _)| e.key_end.is_some()) {
            let fields = super::packet::field_widths(&self.spec);
            return self.elements.iter().find(|(e, _)| {
                let end = e.key_end.as_deref().unwrap_or(&e.key);
                let mut at = 0;
                fields.iter().all(|w| {
                    let f = at..(at + w).min(key.len());
                    at += w;
                    e.key.get(f.clone()) <= key.get(f.clone()) && key.get(f.clone()) <= end.get(f)
                })
            });
        }
        // Where a range ends exactly where the next starts, the start wins.
        let below = self.elements.iter().filter(|(e, _)| e.key.as_slice() <= key);
        let top = below.clone().map(|(e, _)| &e.key).max()?;
        below.filter(|(e, _)| &e.key == top).find(|(e, _)| e.flags & NFT_SET_ELEM_INTERVAL_END == 0)
    }
}

/// The tables a full sync of `ruleset` creates, with their elements.
pub fn tables(ruleset: &Ruleset, node: &str) -> Result<Vec<Table>, ExplainError> {
    let script = render::full_sync_script_without_elements(ruleset, node)?;
    let mut declared = compile::declared(&script)?;
    let mut out = Vec::new();
    for desired in &ruleset.tables {
        let Some(d) = declared.tables.remove(&desired.family) else { continue };
        let mut anon = BTreeMap::new();
        for a in d.chains.values().flat_map(|c| c.rules.iter()).flat_map(|r| r.anon.iter()) {
            let elements = a
                .elements
                .iter()
                .map(|(key, flags, data)| {
                    let e = Element { key: key.clone(), flags: *flags, data: data.clone(), ..Element::default() };
                    (e, None)
                })
                .collect();
            anon.insert(a.id, Set { spec: a.spec.clone(), elements });
        }
        let mut sets: BTreeMap<String, Set> =
            d.sets.into_iter().map(|(name, spec)| (name, Set { spec, elements: Vec::new() })).collect();
        for (map, entries) in &desired.elements {
            let Some(set) = sets.get_mut(&map.to_string()) else { continue };
            for (key, entry) in entries {
                let owner = Some(entry.owner.clone());
                set.elements.extend(element::elements(key, Some(&entry.value)).into_iter().map(|e| (e, owner.clone())));
            }
        }
        out.push(Table { family: desired.family, chains: d.chains, sets, anon });
    }
    Ok(out)
}
