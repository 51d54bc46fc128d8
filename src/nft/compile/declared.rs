//! What a script declares, kept as data instead of messages: each table's chains with their
//! hooks and rules (text and expressions), and its named sets as the kernel is told of them.
//! `--dry-run --diff` compares this with what the kernel lists.

use super::expr::Expr;
use super::set::AnonSet;
use super::{Batch, CompileError, Out, Schema};
use crate::model::Family;
use crate::netlink::Hook;
use crate::netlink::SetSpec;
use std::collections::BTreeMap;

/// Every table a script leaves declared, by family.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    /// The tables.
    pub tables: BTreeMap<Family, DeclaredTable>,
}

/// One table as declared.
#[derive(Debug, Clone, Default)]
pub struct DeclaredTable {
    /// Its chains by name.
    pub chains: BTreeMap<String, DeclaredChain>,
    /// Its named sets and maps by name.
    pub sets: BTreeMap<String, SetSpec>,
}

/// One chain as declared.
#[derive(Debug, Clone, Default)]
pub struct DeclaredChain {
    /// Its hook, for a base chain.
    pub hook: Option<Hook>,
    /// Its rules in order.
    pub rules: Vec<DeclaredRule>,
}

/// One rule: its text, and what it compiles to.
#[derive(Debug, Clone)]
pub struct DeclaredRule {
    /// The rule's text, as the script writes it.
    pub text: String,
    /// Its expressions (sets named as in the batch: an anonymous one by its `__set%d` name).
    pub exprs: Vec<Expr>,
    /// The anonymous sets it declares, with their elements.
    pub anon: Vec<AnonSet>,
    /// Its line in the script, for its text.
    pub(super) line: usize,
}

impl Declared {
    /// The table of `family`, created empty on first use.
    pub(super) fn table(&mut self, family: Family) -> &mut DeclaredTable {
        self.tables.entry(family).or_default()
    }

    /// Fills in each rule's text from the script it was compiled from.
    pub(super) fn with_text(mut self, script: &str) -> Declared {
        let lines: Vec<&str> = script.lines().collect();
        for rule in self.tables.values_mut().flat_map(|t| t.chains.values_mut()).flat_map(|c| c.rules.iter_mut()) {
            let line = rule.line.checked_sub(1).and_then(|i| lines.get(i));
            rule.text = line.map_or_else(String::new, |l| l.trim().to_string());
        }
        self
    }
}

/// What `script` leaves declared: its tables' chains, rules and named sets, as the batch it
/// compiles to would create them.
pub fn declared(script: &str) -> Result<Declared, CompileError> {
    declared_with(script, &mut Schema::default())
}

/// As [`declared`], learning the script's sets into `schema` as compiling it for the kernel
/// would (a refresh that sends only differences compiles them against those sets).
pub fn declared_with(script: &str, schema: &mut Schema) -> Result<Declared, CompileError> {
    let mut batch = Batch::new();
    let mut out = Out { record: Some(Declared::default()), ..Out::new(&mut batch, schema, 0) };
    out.script(script)?;
    Ok(out.record.unwrap_or_default().with_text(script))
}
