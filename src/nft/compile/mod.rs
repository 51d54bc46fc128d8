//! The templates' scripts compiled in-process into one nf_tables netlink batch, as `nft -f`
//! would send them, so that no sync needs the `nft` binary: the text `--dry-run` prints is
//! the text compiled. It takes the command forms the templates write (tables, chains with
//! hooks, sets and maps by `type` or `typeof`, rules, flushes, deletions by name or handle);
//! map and set elements go from the desired state straight to the kernel (`wire`), so a big
//! table's elements are never written as text. `tests/kernel/compile.rs` holds every golden script's
//! compilation to `nft`'s own, message by message, and the kernel's tables to `nft -f`'s.

mod copy;
mod declared;
pub(crate) mod expr;
mod field;
mod grow;
mod lex;
mod parse;
mod read_back;
mod rule;
mod set;

pub use crate::netlink::SetSpec;
pub use copy::{ListedAnon, declare, lookups, reread};
pub(crate) use declared::{Declared, DeclaredChain, DeclaredRule, DeclaredTable, declared, declared_with};
pub use expr::Data;
pub(crate) use expr::Expr;
pub use grow::grow;
pub(crate) use read_back::{ReadExpr, read_back};
pub use set::AnonSet;

use crate::model::Family;
use crate::netlink::abi::*;
use crate::netlink::attr::{put_be32, put_be64, put_str, put_with};
use crate::netlink::{Hook, NfFamily, udata};
use crate::nft::element::Laid;
use crate::nft::wire::{self, Batch, ELEMENT_LIST_BUDGET};
use parse::{Command, Obj};
use std::collections::BTreeMap;

/// A script this compiler cannot take: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("compiling the ruleset{}: {what}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
pub struct CompileError {
    line: Option<usize>,
    what: String,
}

impl CompileError {
    fn new(what: impl Into<String>) -> CompileError {
        CompileError { line: None, what: what.into() }
    }

    fn at(line: usize, what: impl Into<String>) -> CompileError {
        CompileError { line: Some(line), what: what.into() }
    }
}

/// What a compiled rule needs to know of a named set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetInfo {
    /// Its id in the batch being built, when the batch creates it.
    pub id: Option<u32>,
    /// An interval set (whose host-order key fields are converted before a lookup).
    pub interval: bool,
}

/// The named sets declared so far, by family and name (with their declarations, which a map
/// growing in place is declared again by), and the ids of the batch being built.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    sets: BTreeMap<(Family, String), (SetInfo, SetSpec)>,
    next_id: u32,
}

impl Schema {
    /// A named set of `family`'s table.
    pub fn set(&self, family: Family, name: &str) -> Option<SetInfo> {
        self.sets.get(&(family, name.to_string())).map(|(info, _)| *info)
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn anon_interval(&mut self, f: field::Field, prefixes: &[(Vec<u8>, u32)]) -> AnonSet {
        let id = self.id();
        set::anon_interval(f, prefixes, id)
    }

    fn anon_values(&mut self, f: field::Field, keys: Vec<Vec<u8>>) -> Result<AnonSet, CompileError> {
        let id = self.id();
        set::anon_values(f, keys, id)
    }

    fn anon_vmap(&mut self, entries: Vec<(u32, Data)>) -> AnonSet {
        let id = self.id();
        set::anon_vmap(entries, id)
    }

    /// `family`'s set `spec.name` was declared anew as `spec`, in a transaction sent already.
    pub fn redeclared(&mut self, family: Family, spec: SetSpec) {
        let interval = spec.flags & NFT_SET_INTERVAL != 0;
        self.sets.insert((family, spec.name.clone()), (SetInfo { id: None, interval }, spec));
    }

    /// Forgets `family`'s sets, before a full sync declares them anew.
    pub fn forget(&mut self, family: Family) {
        self.sets.retain(|(f, _), _| *f != family);
    }

    /// Takes `families`' sets from `other` (a schema learned from their declarations), keeping
    /// the other families' as they are.
    pub fn adopt(&mut self, other: Schema, families: &[Family]) {
        self.sets.retain(|(f, _), _| !families.contains(f));
        self.sets.extend(other.sets.into_iter().filter(|((f, _), _)| families.contains(f)));
    }

    /// The batch went to the kernel: its sets are known there by name from now on.
    pub fn sent(&mut self) {
        for (info, _) in self.sets.values_mut() {
            info.id = None;
        }
        self.next_id = 0;
    }
}

/// A hook's number (`NF_INET_*`) by its name.
fn hook_number(hook: &str) -> u32 {
    NF_INET_HOOK_NAMES.iter().position(|n| *n == hook).map_or(NF_INET_POST_ROUTING, |i| i as u32)
}

/// Compiles `script` into `batch`, learning its sets into `schema`; returns the messages
/// added.
pub fn compile(script: &str, schema: &mut Schema, batch: &mut Batch) -> Result<usize, CompileError> {
    compile_after(script, 0, schema, batch)
}

/// As [`compile`], for a script that continues another of `lines_before` lines in the same
/// batch: its messages are labelled with lines counted from the start of the first.
pub fn compile_after(
    script: &str,
    lines_before: usize,
    schema: &mut Schema,
    batch: &mut Batch,
) -> Result<usize, CompileError> {
    let mut out = Out::new(batch, schema, lines_before);
    out.script(script)?;
    Ok(out.messages)
}

/// Every rule of `script` as `nft --debug=netlink` prints what it sends: a line naming the
/// family, table and chain, then the expressions, then a blank line.
pub fn describe(script: &str) -> Result<String, CompileError> {
    let (mut batch, mut schema) = (Batch::new(), Schema::default());
    let mut out = Out { trace: Some(String::new()), ..Out::new(&mut batch, &mut schema, 0) };
    out.script(script)?;
    Ok(out.trace.unwrap_or_default())
}

struct Out<'a> {
    batch: &'a mut Batch,
    schema: &'a mut Schema,
    messages: usize,
    /// Each rule's expressions as text, when asked for.
    trace: Option<String>,
    /// What the script declares, when asked for.
    record: Option<Declared>,
    /// The script line the next messages come from, which names a message the kernel refuses.
    line: usize,
    /// Lines of the scripts compiled into the batch before this one.
    base: usize,
}

impl<'a> Out<'a> {
    /// A compilation into `batch`, after `base` lines of earlier scripts; nothing traced or
    /// recorded.
    fn new(batch: &'a mut Batch, schema: &'a mut Schema, base: usize) -> Out<'a> {
        Out { batch, schema, messages: 0, trace: None, record: None, line: 0, base }
    }

    fn script(&mut self, script: &str) -> Result<(), CompileError> {
        for (c, line) in parse::parse(&lex::tokens(script)?)? {
            self.line = line;
            self.command(c)?;
        }
        Ok(())
    }

    fn msg(&mut self, kind: u16, flags: u16, family: Family, f: impl FnOnce(&mut Vec<u8>)) {
        self.messages += 1;
        self.batch.message(kind, flags | NLM_F_ACK, NfFamily::from(family) as u8, f);
        self.batch.label(self.base + self.line);
    }

    /// A message about `obj`'s table whose other attributes `f` writes.
    fn on(&mut self, kind: u16, flags: u16, obj: &Obj, f: impl FnOnce(&mut Vec<u8>)) {
        let table = obj.table.clone();
        self.msg(kind, flags, obj.family, move |b| {
            // Every object's table is its attribute 1 (`NFTA_TABLE_NAME`, `NFTA_CHAIN_TABLE`…).
            put_str(b, NFTA_TABLE_NAME, &table);
            f(b);
        });
    }

    fn command(&mut self, c: Command) -> Result<(), CompileError> {
        match c {
            Command::AddTable(obj) => self.table(&obj, None, 0),
            Command::DeleteTable(obj) => {
                if let Some(r) = &mut self.record {
                    r.tables.remove(&obj.family);
                }
                self.on(NFT_MSG_DELTABLE, 0, &obj, |_| {})
            }
            Command::FlushTable(obj) => self.on(NFT_MSG_DELRULE, 0, &obj, |_| {}),
            Command::Table { obj, comment, flags, sets, chains } => {
                self.table(&obj, comment.as_deref(), flags);
                for chain in &chains {
                    self.line = chain.line;
                    self.chain(&obj, &chain.name, chain.hook.as_ref());
                }
                for s in &sets {
                    self.line = s.line;
                    self.set(&obj, s)?;
                }
                for chain in &chains {
                    for (line, r) in &chain.rules {
                        self.line = *line;
                        self.rule(&obj, &chain.name, r)?;
                    }
                }
            }
            Command::AddChain(obj, name) => self.chain(&obj, &name, None),
            Command::FlushChain(obj, name) => self.on(NFT_MSG_DELRULE, 0, &obj, |b| put_str(b, NFTA_RULE_CHAIN, &name)),
            Command::DeleteChain(obj, name) => {
                self.on(NFT_MSG_DELCHAIN, 0, &obj, |b| put_str(b, NFTA_CHAIN_NAME, &name))
            }
            Command::AddRule(obj, chain, r) => self.rule(&obj, &chain, &r)?,
            Command::AddSet(obj, s) => self.set(&obj, &s)?,
            Command::FlushSet(obj, name) => {
                self.on(NFT_MSG_DELSETELEM, 0, &obj, |b| put_str(b, NFTA_SET_ELEM_LIST_SET, &name))
            }
            Command::DeleteSet(obj, name) => {
                self.schema.sets.remove(&(obj.family, name.clone()));
                self.on(NFT_MSG_DELSET, 0, &obj, |b| put_str(b, NFTA_SET_NAME, &name));
            }
            Command::DeleteHandle(obj, kind, handle) => self.delete_handle(&obj, &kind, handle)?,
        }
        Ok(())
    }

    /// A table with its comment and flags (`NFT_TABLE_F_OWNER`: the kernel ties it to the
    /// socket the batch is sent on, and removes it when that socket closes).
    fn table(&mut self, obj: &Obj, comment: Option<&str>, flags: u32) {
        self.on(NFT_MSG_NEWTABLE, NLM_F_CREATE, obj, |b| {
            put_be32(b, NFTA_TABLE_FLAGS, flags);
            if let Some(c) = comment {
                put_with(b, NFTA_TABLE_USERDATA, |b| udata::put_comment(b, NFTNL_UDATA_TABLE_COMMENT, c));
            }
        });
    }

    fn chain(&mut self, obj: &Obj, name: &str, hook: Option<&parse::Hook>) {
        if let Some(r) = &mut self.record {
            let hook = hook.map(|h| Hook {
                kind: h.kind.clone(),
                hooknum: hook_number(&h.hook),
                priority: h.priority,
                policy: NF_ACCEPT as u32,
            });
            r.table(obj.family).chains.entry(name.to_string()).or_default().hook = hook;
        }
        self.on(NFT_MSG_NEWCHAIN, NLM_F_CREATE, obj, |b| {
            put_str(b, NFTA_CHAIN_NAME, name);
            let Some(h) = hook else { return };
            put_str(b, NFTA_CHAIN_TYPE, &h.kind);
            put_be32(b, NFTA_CHAIN_POLICY, NF_ACCEPT as u32);
            put_with(b, NFTA_CHAIN_HOOK | NLA_F_NESTED, |b| {
                put_be32(b, NFTA_HOOK_HOOKNUM, hook_number(&h.hook));
                put_be32(b, NFTA_HOOK_PRIORITY, h.priority as u32);
            });
        });
    }

    fn set(&mut self, obj: &Obj, d: &parse::SetDecl) -> Result<(), CompileError> {
        let spec = set::spec(d, obj.family)?;
        let id = self.schema.id();
        let interval = spec.flags & NFT_SET_INTERVAL != 0;
        self.schema.sets.insert((obj.family, d.name.clone()), (SetInfo { id: Some(id), interval }, spec.clone()));
        if let Some(r) = &mut self.record {
            r.table(obj.family).sets.insert(d.name.clone(), spec.clone());
        }
        self.new_set(obj, &spec, id);
        Ok(())
    }

    fn new_set(&mut self, obj: &Obj, s: &SetSpec, id: u32) {
        self.on(NFT_MSG_NEWSET, NLM_F_CREATE, obj, |b| {
            put_str(b, NFTA_SET_NAME, &s.name);
            put_be32(b, NFTA_SET_FLAGS, s.flags);
            put_be32(b, NFTA_SET_KEY_TYPE, s.key.0);
            put_be32(b, NFTA_SET_KEY_LEN, s.key.1);
            if let Some((ty, len)) = s.data {
                put_be32(b, NFTA_SET_DATA_TYPE, ty);
                put_be32(b, NFTA_SET_DATA_LEN, len);
            }
            put_be32(b, NFTA_SET_ID, id);
            if let Some(ms) = s.timeout_ms {
                put_be64(b, NFTA_SET_TIMEOUT, ms);
            }
            if s.size.is_some() || !s.concat.is_empty() {
                put_with(b, NFTA_SET_DESC | NLA_F_NESTED, |b| {
                    if let Some(n) = s.size {
                        put_be32(b, NFTA_SET_DESC_SIZE, n);
                    }
                    if !s.concat.is_empty() {
                        put_with(b, NFTA_SET_DESC_CONCAT | NLA_F_NESTED, |b| {
                            for len in &s.concat {
                                put_with(b, NFTA_LIST_ELEM | NLA_F_NESTED, |b| put_be32(b, NFTA_SET_FIELD_LEN, *len));
                            }
                        })
                    }
                })
            }
            put_with(b, NFTA_SET_USERDATA, |b| b.extend_from_slice(&s.udata));
        });
    }

    fn rule(&mut self, obj: &Obj, chain: &str, r: &[lex::Token]) -> Result<(), CompileError> {
        let compiled = rule::compile(r, obj.family, self.schema)?;
        if let Some(t) = &mut self.trace {
            let fam = if obj.family == Family::V4 { "ip" } else { "ip6" };
            t.push_str(&format!("{fam} {} {chain}\n", obj.table));
            for e in &compiled.exprs {
                t.push_str(&format!("  {e}\n"));
            }
            t.push('\n');
        }
        for anon in &compiled.anon {
            self.new_set(obj, &anon.spec, anon.id);
            self.anon_elements(obj, anon);
        }
        if let Some(r) = &mut self.record {
            let rule = DeclaredRule {
                text: String::new(),
                exprs: compiled.exprs.clone(),
                anon: compiled.anon.clone(),
                line: self.line,
            };
            r.table(obj.family).chains.entry(chain.to_string()).or_default().rules.push(rule);
        }
        self.on(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, obj, |b| {
            put_str(b, NFTA_RULE_CHAIN, chain);
            put_with(b, NFTA_RULE_EXPRESSIONS | NLA_F_NESTED, |b| compiled.exprs.iter().for_each(|e| e.encode(b)));
        });
        Ok(())
    }

    /// An anonymous set's elements, in as many messages as their size takes.
    fn anon_elements(&mut self, obj: &Obj, anon: &AnonSet) {
        let mut elements = anon.elements.iter().peekable();
        while elements.peek().is_some() {
            self.on(NFT_MSG_NEWSETELEM, NLM_F_CREATE, obj, |b| {
                put_str(b, NFTA_SET_ELEM_LIST_SET, &anon.spec.name);
                put_be32(b, NFTA_SET_ELEM_LIST_SET_ID, anon.id);
                put_with(b, NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| {
                    let start = b.len();
                    // Numbered from 1 in each message, as libnftnl numbers them (the kernel
                    // reads the list whatever its entries' types): `nft`'s very bytes. The
                    // budget holds a few thousand at most, below the attribute flags' bits.
                    let mut n: u16 = 0;
                    while b.len() - start < ELEMENT_LIST_BUDGET {
                        let Some((key, flags, data)) = elements.next() else { break };
                        let data = data.as_ref().map(Data::as_data_ref);
                        let e = Laid { key, key_end: None, flags: *flags, data, comment: None };
                        n += 1;
                        put_with(b, n | NLA_F_NESTED, |b| wire::element(b, &e));
                    }
                });
            });
        }
    }

    /// `delete KIND … handle N`: chains, sets and flowtables by their own messages, stateful
    /// objects by type.
    fn delete_handle(&mut self, obj: &Obj, kind: &str, handle: u64) -> Result<(), CompileError> {
        let (msg, attr_handle, obj_type) = match kind {
            "chain" => (NFT_MSG_DELCHAIN, NFTA_CHAIN_HANDLE, None),
            "set" | "map" => (NFT_MSG_DELSET, NFTA_SET_HANDLE, None),
            "flowtable" => (NFT_MSG_DELFLOWTABLE, NFTA_FLOWTABLE_HANDLE, None),
            "counter" => (NFT_MSG_DELOBJ, NFTA_OBJ_HANDLE, Some(NFT_OBJECT_COUNTER)),
            "quota" => (NFT_MSG_DELOBJ, NFTA_OBJ_HANDLE, Some(NFT_OBJECT_QUOTA)),
            "limit" => (NFT_MSG_DELOBJ, NFTA_OBJ_HANDLE, Some(NFT_OBJECT_LIMIT)),
            "secmark" => (NFT_MSG_DELOBJ, NFTA_OBJ_HANDLE, Some(NFT_OBJECT_SECMARK)),
            "synproxy" => (NFT_MSG_DELOBJ, NFTA_OBJ_HANDLE, Some(NFT_OBJECT_SYNPROXY)),
            other => return Err(CompileError::new(format!("deleting a {other} by handle"))),
        };
        self.on(msg, 0, obj, |b| {
            if let Some(t) = obj_type {
                put_be32(b, NFTA_OBJ_TYPE, t);
            }
            put_be64(b, attr_handle, handle);
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
