//! A script's tables held as the kernel would hold them once the batch commits: chains of
//! compiled rules, sets with their declarations and elements. `explain` follows packets
//! through this instead of through a kernel, so what it answers is what would be sent.

use super::expr::{Data, Expr};
use super::parse::{self, Command, Hook};
use super::set::{self, SetSpec};
use super::{CompileError, Schema, SetInfo, lex, rule};
use crate::model::Family;
use crate::nft::netlink::abi::NFT_SET_INTERVAL;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One family's table.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    /// Its family.
    pub family: Family,
    /// Chains by name.
    pub chains: BTreeMap<String, LoadedChain>,
    /// Named sets and maps by name.
    pub sets: BTreeMap<String, LoadedSet>,
    /// Anonymous sets by their id in the batch (how a rule's lookup names them).
    pub anon: BTreeMap<u32, LoadedSet>,
}

/// A chain: its hook, for a base chain, and its rules in order.
#[derive(Debug, Clone)]
pub struct LoadedChain {
    /// The hook of a base chain.
    pub hook: Option<Hook>,
    /// Rules in order.
    pub rules: Vec<LoadedRule>,
}

/// A rule: its text as the script has it, and what it compiled to.
#[derive(Debug, Clone)]
pub struct LoadedRule {
    /// The rule's text.
    pub text: String,
    /// Its expressions.
    pub exprs: Vec<Expr>,
}

/// A set or map with its elements.
#[derive(Debug, Clone)]
pub struct LoadedSet {
    /// How it is declared to the kernel.
    pub spec: SetSpec,
    /// Its elements.
    pub elements: Vec<LoadedElement>,
}

impl LoadedSet {
    /// Whether it is an interval set.
    pub fn interval(&self) -> bool {
        self.spec.flags & NFT_SET_INTERVAL != 0
    }
}

/// One kernel element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedElement {
    /// Key bytes, as a register holds them.
    pub key: Vec<u8>,
    /// For a range in a concatenation, the last key it covers.
    pub key_end: Option<Vec<u8>>,
    /// `NFT_SET_ELEM_*` flags (an interval's end).
    pub flags: u32,
    /// A map's data.
    pub data: Option<Data>,
    /// The service port that put it there, for elements of the desired state.
    pub owner: Option<Arc<str>>,
}

/// Loads the tables that `script` (a full sync's, without elements) declares; elements are
/// added by the caller from the desired state.
pub fn load(script: &str) -> Result<Vec<LoadedTable>, CompileError> {
    let lines: Vec<&str> = script.lines().collect();
    let text = |line: usize| lines.get(line.wrapping_sub(1)).map_or("", |l| l.trim()).to_string();
    let mut tables = Vec::new();
    for (c, _) in parse::parse(&lex::tokens(script)?)? {
        let Command::Table { obj, sets, chains, .. } = c else { continue };
        let mut schema = Schema::default();
        let mut t =
            LoadedTable { family: obj.family, chains: BTreeMap::new(), sets: BTreeMap::new(), anon: BTreeMap::new() };
        for d in &sets {
            let spec = set::spec(d, obj.family).map_err(|e| e.line_or(d.line))?;
            let info = SetInfo { id: None, interval: spec.flags & NFT_SET_INTERVAL != 0 };
            schema.sets.insert((obj.family, d.name.clone()), info);
            t.sets.insert(d.name.clone(), LoadedSet { spec, elements: Vec::new() });
        }
        for chain in chains {
            let mut rules = Vec::new();
            for (line, tokens) in &chain.rules {
                let compiled = rule::compile(tokens, obj.family, &mut schema).map_err(|e| e.line_or(*line))?;
                for a in compiled.anon {
                    let elements = a
                        .elements
                        .into_iter()
                        .map(|(key, flags, data)| LoadedElement { key, key_end: None, flags, data, owner: None })
                        .collect();
                    t.anon.insert(a.id, LoadedSet { spec: a.spec, elements });
                }
                rules.push(LoadedRule { text: text(*line), exprs: compiled.exprs });
            }
            t.chains.insert(chain.name, LoadedChain { hook: chain.hook, rules });
        }
        tables.push(t);
    }
    Ok(tables)
}
