//! Objects as the kernel lists them, sent again: a map's declaration under another name or
//! size, and a rule replaced (by its handle) by the same expressions reading another map. A
//! rehash (`nft::rehash`) moves the rules that read a map to a copy of it, and back.

use super::parse::Obj;
use super::set::{ANON_NAME, AnonSet};
use super::{CompileError, Out, Schema, SetSpec};
use crate::model::Family;
use crate::netlink::RuleListing;
use crate::netlink::abi::{
    NFT_MSG_NEWRULE, NFTA_EXPR_DATA, NFTA_EXPR_NAME, NFTA_LIST_ELEM, NFTA_LOOKUP_SET, NFTA_LOOKUP_SET_ID,
    NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NLA_F_NESTED, NLM_F_REPLACE,
};
use crate::netlink::attr::{self, put, put_be32, put_be64, put_str, put_with};
use crate::netlink::elements::Element;
use crate::nft::wire::Batch;
use crate::render::TABLE_NAME;
use std::collections::BTreeMap;

/// An anonymous set a listed rule reads, as the kernel lists it.
#[derive(Debug, Clone)]
pub struct ListedAnon {
    /// Its declaration.
    pub spec: SetSpec,
    /// Its elements.
    pub elements: Vec<Element>,
}

/// Declares `spec` (a listed declaration, renamed or resized) in `family`'s table.
pub fn declare(batch: &mut Batch, family: Family, spec: &SetSpec) {
    let mut schema = Schema::default();
    let id = schema.id();
    let obj = Obj { family, table: TABLE_NAME.to_string() };
    Out::new(batch, &mut schema, 0).new_set(&obj, spec, id);
}

/// The sets a listed rule looks its keys up in, by name.
pub fn lookups(rule: &RuleListing) -> Vec<String> {
    let set = |data: &[u8]| attr::find(data, NFTA_LOOKUP_SET).map(|s| attr::lossy(s.strip_suffix(&[0]).unwrap_or(s)));
    rule.exprs.iter().filter(|e| e.name == "lookup").filter_map(|e| set(&e.data)).collect()
}

/// Replaces `family`'s rule `rule` (by its handle, so it keeps its place) by the same
/// expressions, reading set `to` where it read `from`. The anonymous sets it reads (in
/// `anon`, by their listed names) are declared anew with it, as the kernel binds an
/// anonymous set to one rule only.
pub fn reread(
    batch: &mut Batch,
    family: Family,
    rule: &RuleListing,
    (from, to): (&str, &str),
    anon: &BTreeMap<String, ListedAnon>,
) -> Result<(), CompileError> {
    if rule.userdata {
        return Err(CompileError::new(format!("rule {} of chain {} carries a comment", rule.handle, rule.chain)));
    }
    let mut schema = Schema::default();
    let obj = Obj { family, table: TABLE_NAME.to_string() };
    let mut out = Out::new(batch, &mut schema, 0);
    let mut exprs = Vec::new();
    for e in &rule.exprs {
        let data = if e.name == "lookup" { lookup(&mut out, &obj, &e.data, (from, to), anon)? } else { e.data.clone() };
        put_with(&mut exprs, NFTA_LIST_ELEM | NLA_F_NESTED, |b| {
            put_str(b, NFTA_EXPR_NAME, &e.name);
            put_with(b, NFTA_EXPR_DATA | NLA_F_NESTED, |b| b.extend_from_slice(&data));
        });
    }
    out.on(NFT_MSG_NEWRULE, NLM_F_REPLACE, &obj, |b| {
        put_str(b, NFTA_RULE_CHAIN, &rule.chain);
        put_be64(b, NFTA_RULE_HANDLE, rule.handle);
        put_with(b, NFTA_RULE_EXPRESSIONS | NLA_F_NESTED, |b| b.extend_from_slice(&exprs));
    });
    Ok(())
}

/// A lookup's attributes, reading `to` for `from`, or a new copy of the anonymous set it read.
fn lookup(
    out: &mut Out,
    obj: &Obj,
    data: &[u8],
    (from, to): (&str, &str),
    anon: &BTreeMap<String, ListedAnon>,
) -> Result<Vec<u8>, CompileError> {
    let bad = |e: std::io::Error| CompileError::new(format!("a listed lookup: {e}"));
    let mut b = Vec::new();
    for (kind, payload) in attr::all(data).map_err(bad)? {
        if kind != NFTA_LOOKUP_SET {
            put(&mut b, kind, payload);
            continue;
        }
        let name = attr::lossy(payload.strip_suffix(&[0]).unwrap_or(payload));
        match anon.get(&name) {
            Some(set) => {
                let id = out.schema.id();
                let copy = anon_copy(set, id)?;
                out.new_set(obj, &copy.spec, id);
                out.anon_elements(obj, &copy);
                put_str(&mut b, NFTA_LOOKUP_SET, &copy.spec.name);
                put_be32(&mut b, NFTA_LOOKUP_SET_ID, id);
            }
            None if name == from => put_str(&mut b, NFTA_LOOKUP_SET, to),
            None => put(&mut b, kind, payload),
        }
    }
    Ok(b)
}

/// A listed anonymous set, to be declared anew in the batch as set `id`: its elements in
/// ascending order, as `nft` sends an interval set's (a dump lists them descending).
fn anon_copy(set: &ListedAnon, id: u32) -> Result<AnonSet, CompileError> {
    let mut elements = Vec::with_capacity(set.elements.len());
    let mut listed: Vec<&Element> = set.elements.iter().collect();
    listed.sort_by(|a, b| a.key.cmp(&b.key));
    for e in listed {
        if e.key_end.is_some() {
            return Err(CompileError::new(format!("anonymous set {} holds ranges of concatenations", set.spec.name)));
        }
        elements.push((e.key.clone(), e.flags, e.data.clone()));
    }
    let spec = SetSpec { name: ANON_NAME.into(), ..set.spec.as_sent() };
    Ok(AnonSet { spec, id, elements })
}
