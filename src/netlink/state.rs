//! Reading back what a table declares, for a comparison with what a sync would write: each
//! chain with its hook, each set's declaration, and each rule's expressions as the kernel
//! lists them (name and attributes, read into the compiler's terms by `compile::decode`).

use super::abi::{
    NFT_CHAIN_BINDING, NFT_DATA_VERDICT, NFT_DYNSET_DEFAULT_SIZE, NFT_SET_EVAL, NFT_VERDICT_DATA_LEN, NFTA_CHAIN_FLAGS,
    NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME, NFTA_CHAIN_POLICY, NFTA_CHAIN_TYPE, NFTA_EXPR_DATA, NFTA_EXPR_NAME,
    NFTA_HOOK_HOOKNUM, NFTA_HOOK_PRIORITY, NFTA_LIST_ELEM, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE,
    NFTA_RULE_USERDATA, NFTA_SET_DATA_LEN, NFTA_SET_DATA_TYPE, NFTA_SET_DESC, NFTA_SET_DESC_CONCAT, NFTA_SET_DESC_SIZE,
    NFTA_SET_FIELD_LEN, NFTA_SET_FLAGS, NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE, NFTA_SET_NAME, NFTA_SET_TIMEOUT,
    NFTA_SET_USERDATA,
};
use super::attr::{Malformed, all, be32, be64, get, lossy};
use super::dump::{CHAINS, SETS};
use super::{NfFamily, Socket};
use std::io;

/// A base chain's hook, as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// `filter`, `nat`…
    pub kind: String,
    /// The hook's number (`NF_INET_*`).
    pub hooknum: u32,
    /// Its priority.
    pub priority: i32,
    /// Its policy (a verdict code).
    pub policy: u32,
}

/// One chain of a table (a rule's anonymous chains are left out: they go with the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainListing {
    /// Its name, lossily shown if not UTF-8.
    pub name: String,
    /// Its hook, for a base chain.
    pub hook: Option<Hook>,
}

/// One set's declaration: what the compiler tells the kernel, and what the kernel lists
/// (anonymous sets included), one type so the two compare field by field; a listing carries
/// values the kernel fills in itself, which [`SetSpec::as_sent`] takes away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSpec {
    /// Its name (`__set0`… for a rule's anonymous set).
    pub name: String,
    /// `NFT_SET_*` flags.
    pub flags: u32,
    /// Key type and length.
    pub key: (u32, u32),
    /// A map's data type and length.
    pub data: Option<(u32, u32)>,
    /// Default element timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Declared size (`NFTA_SET_DESC_SIZE`; the compiler gives it to anonymous sets).
    pub size: Option<u32>,
    /// A concatenation's field lengths in bytes, when declared (`NFTA_SET_DESC_CONCAT`; the
    /// compiler gives them to concatenated interval sets, never together with a size).
    pub concat: Vec<u32>,
    /// User data (`nft`'s record of the declaration: byte orders, `typeof`, comment).
    pub udata: Vec<u8>,
}

impl SetSpec {
    /// A listed declaration as it was sent: a verdict map's data length, and the size the
    /// kernel gives a set that rules fill, are the kernel's own.
    pub fn as_sent(&self) -> SetSpec {
        let data = self
            .data
            .map(|(ty, len)| (ty, if ty == NFT_DATA_VERDICT && len == NFT_VERDICT_DATA_LEN { 0 } else { len }));
        let dynamic = self.flags & NFT_SET_EVAL != 0 && self.size == Some(NFT_DYNSET_DEFAULT_SIZE);
        SetSpec { data, size: if dynamic { None } else { self.size }, ..self.clone() }
    }
}

/// One expression of a listed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedExpr {
    /// Its name (`payload`, `cmp`…).
    pub name: String,
    /// Its attributes (`NFTA_EXPR_DATA`'s payload).
    pub data: Vec<u8>,
}

/// One rule, in its chain's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleListing {
    /// Its chain.
    pub chain: String,
    /// Its handle (what a packet trace names it by).
    pub handle: u64,
    /// Its expressions.
    pub exprs: Vec<ListedExpr>,
    /// Whether it carries user data (a comment), which no rule of the proxy's has.
    pub userdata: bool,
}

impl Socket {
    /// Every chain of `table` with its hook (empty if the table is missing).
    pub fn chain_listings(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<ChainListing>> {
        let mut out = Vec::new();
        for m in self.dump(&CHAINS, family, table)? {
            let attrs = all(m.get(4..).ok_or(Malformed("no valid chain header"))?)?;
            let flags = get(&attrs, NFTA_CHAIN_FLAGS).map_or(Some(0), be32).ok_or(Malformed("no valid flags"))?;
            if flags & NFT_CHAIN_BINDING != 0 {
                continue;
            }
            let name = get(&attrs, NFTA_CHAIN_NAME).ok_or(Malformed("no valid chain name"))?;
            let hook = get(&attrs, NFTA_CHAIN_HOOK).map(|h| hook(h, &attrs)).transpose()?;
            out.push(ChainListing { name: lossy(name), hook });
        }
        Ok(out)
    }

    /// Every set and map of `table`, anonymous ones included, as declared.
    pub fn set_listings(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<SetSpec>> {
        self.dump(&SETS, family, table)?.iter().map(|m| set(m)).collect()
    }

    /// Every rule of `table` (none if the table is missing), chain by chain in order.
    pub fn rule_listings(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<RuleListing>> {
        self.rule_replies(family, table)?.iter().map(|m| rule(m)).collect()
    }
}

fn u32_of(attrs: &[(u16, &[u8])], t: u16, what: &'static str) -> io::Result<u32> {
    Ok(get(attrs, t).and_then(be32).ok_or(Malformed(what))?)
}

fn hook(nest: &[u8], chain: &[(u16, &[u8])]) -> io::Result<Hook> {
    let attrs = all(nest)?;
    let kind = get(chain, NFTA_CHAIN_TYPE).map(lossy).unwrap_or_default();
    let policy = get(chain, NFTA_CHAIN_POLICY).map_or(Some(1), be32).ok_or(Malformed("no valid policy"))?;
    Ok(Hook {
        kind,
        hooknum: u32_of(&attrs, NFTA_HOOK_HOOKNUM, "no valid hook number")?,
        priority: u32_of(&attrs, NFTA_HOOK_PRIORITY, "no valid hook priority")? as i32,
        policy,
    })
}

fn set(m: &[u8]) -> io::Result<SetSpec> {
    let attrs = all(m.get(4..).ok_or(Malformed("no valid set header"))?)?;
    let name = lossy(get(&attrs, NFTA_SET_NAME).ok_or(Malformed("no valid set name"))?);
    let flags = get(&attrs, NFTA_SET_FLAGS).map_or(Some(0), be32).ok_or(Malformed("no valid set flags"))?;
    let key = (
        u32_of(&attrs, NFTA_SET_KEY_TYPE, "no valid key type")?,
        u32_of(&attrs, NFTA_SET_KEY_LEN, "no valid key length")?,
    );
    let data = match get(&attrs, NFTA_SET_DATA_TYPE) {
        Some(_) => Some((
            u32_of(&attrs, NFTA_SET_DATA_TYPE, "no valid data type")?,
            u32_of(&attrs, NFTA_SET_DATA_LEN, "no valid data length")?,
        )),
        None => None,
    };
    let timeout_ms = get(&attrs, NFTA_SET_TIMEOUT).map(|t| be64(t).ok_or(Malformed("no valid timeout"))).transpose()?;
    let (mut size, mut concat) = (None, Vec::new());
    if let Some(desc) = get(&attrs, NFTA_SET_DESC) {
        let desc = all(desc)?;
        size = get(&desc, NFTA_SET_DESC_SIZE).map(|s| be32(s).ok_or(Malformed("no valid size"))).transpose()?;
        for (_, field) in get(&desc, NFTA_SET_DESC_CONCAT).map(all).transpose()?.unwrap_or_default() {
            concat.push(u32_of(&all(field)?, NFTA_SET_FIELD_LEN, "no valid field length")?);
        }
    }
    let udata = get(&attrs, NFTA_SET_USERDATA).unwrap_or_default().to_vec();
    Ok(SetSpec { name, flags, key, data, timeout_ms, size, concat, udata })
}

fn rule(m: &[u8]) -> io::Result<RuleListing> {
    let attrs = all(m.get(4..).ok_or(Malformed("no valid rule header"))?)?;
    let chain = lossy(get(&attrs, NFTA_RULE_CHAIN).ok_or(Malformed("no valid chain"))?);
    let mut exprs = Vec::new();
    for (kind, expr) in get(&attrs, NFTA_RULE_EXPRESSIONS).map(all).transpose()?.unwrap_or_default() {
        if kind != NFTA_LIST_ELEM {
            continue;
        }
        let e = all(expr)?;
        let name = lossy(get(&e, NFTA_EXPR_NAME).ok_or(Malformed("no valid expression name"))?);
        exprs.push(ListedExpr { name, data: get(&e, NFTA_EXPR_DATA).unwrap_or_default().to_vec() });
    }
    let handle = get(&attrs, NFTA_RULE_HANDLE).and_then(be64).ok_or(Malformed("no valid rule handle"))?;
    Ok(RuleListing { chain, handle, exprs, userdata: get(&attrs, NFTA_RULE_USERDATA).is_some() })
}
