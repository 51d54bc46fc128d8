//! Where a table's rules lead: the takeover deletes every rule that jumps or goes to a chain
//! it removes. iptables-nft writes `-j CHAIN` as nft writes `jump CHAIN`: an `immediate`
//! expression whose data is a jump or goto verdict naming the chain. Every length is checked:
//! a malformed reply is an error.

use super::abi::{
    NFT_GOTO, NFT_JUMP, NFTA_EXPR_DATA, NFTA_EXPR_NAME, NFTA_IMMEDIATE_DATA, NFTA_LIST_ELEM, NFTA_RULE_CHAIN,
    NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE,
};
use super::attr::{Malformed, all, be64, get};
use super::data::{Data, read_data};
use super::{NfFamily, Socket};
use std::io;

/// One rule of a table and the chains it jumps or goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleJumps {
    /// The chain holding the rule (lossily shown if not UTF-8).
    pub chain: String,
    /// The rule's handle, which deleting it takes.
    pub handle: u64,
    /// The chains its `immediate` verdicts jump or go to, in order.
    pub targets: Vec<String>,
}

impl Socket {
    /// Every rule of `table` (none if the table is missing), with where it jumps or goes.
    pub fn rule_jumps(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<RuleJumps>> {
        self.rule_replies(family, table)?.iter().map(|m| rule(m)).collect()
    }
}

/// Reads one rule message (nfgenmsg, then attributes).
fn rule(body: &[u8]) -> io::Result<RuleJumps> {
    let attrs = all(body.get(4..).ok_or(Malformed("no valid rule header"))?)?;
    let chain = get(&attrs, NFTA_RULE_CHAIN).ok_or(Malformed("no valid chain"))?;
    let chain = String::from_utf8_lossy(chain.strip_suffix(&[0]).unwrap_or(chain)).into_owned();
    let handle = get(&attrs, NFTA_RULE_HANDLE).and_then(be64).ok_or(Malformed("no valid rule handle"))?;
    let mut targets = Vec::new();
    if let Some(list) = get(&attrs, NFTA_RULE_EXPRESSIONS) {
        for (kind, expr) in all(list)? {
            if kind == NFTA_LIST_ELEM
                && let Some(target) = jump_target(expr)?
            {
                targets.push(target);
            }
        }
    }
    Ok(RuleJumps { chain, handle, targets })
}

/// The chain an expression jumps or goes to, if it is an `immediate` verdict that does.
fn jump_target(expr: &[u8]) -> io::Result<Option<String>> {
    let attrs = all(expr)?;
    let name = get(&attrs, NFTA_EXPR_NAME).ok_or(Malformed("no valid expression name"))?;
    if name.strip_suffix(&[0]).unwrap_or(name) != b"immediate" {
        return Ok(None);
    }
    let data = get(&attrs, NFTA_EXPR_DATA).ok_or(Malformed("an immediate with no valid data"))?;
    let value = get(&all(data)?, NFTA_IMMEDIATE_DATA).ok_or(Malformed("an immediate with no valid value"))?;
    match read_data(value)? {
        Data::Verdict(NFT_JUMP | NFT_GOTO, Some(chain)) => Ok(Some(chain)),
        Data::Verdict(NFT_JUMP | NFT_GOTO, None) => Err(Malformed("a jump with no valid chain").into()),
        // Another verdict, or a value loaded into a register.
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::abi::{NF_ACCEPT, NFTA_IMMEDIATE_DREG, NFTA_RULE_TABLE, NLA_F_NESTED as NESTED};
    use crate::netlink::attr::{put_str, put_with};
    use crate::netlink::data::DataRef;

    fn expr(b: &mut Vec<u8>, name: &str, data: impl FnOnce(&mut Vec<u8>)) {
        put_with(b, NFTA_LIST_ELEM | NESTED, |b| {
            put_str(b, NFTA_EXPR_NAME, name);
            put_with(b, NFTA_EXPR_DATA | NESTED, data);
        });
    }

    fn verdict(b: &mut Vec<u8>, code: i32, chain: Option<&str>) {
        put_with(b, NFTA_IMMEDIATE_DREG, |b| b.extend_from_slice(&0u32.to_be_bytes()));
        DataRef::Verdict(code, chain).put(b, NFTA_IMMEDIATE_DATA);
    }

    /// `-A INPUT -m comment -j KUBE-FIREWALL` as iptables-nft writes it, with an accept and a
    /// goto besides.
    fn message() -> Vec<u8> {
        let mut b = vec![2u8, 0, 0, 0];
        put_str(&mut b, NFTA_RULE_TABLE, "filter");
        put_str(&mut b, NFTA_RULE_CHAIN, "INPUT");
        put_with(&mut b, NFTA_RULE_HANDLE, |b| b.extend_from_slice(&9u64.to_be_bytes()));
        put_with(&mut b, NFTA_RULE_EXPRESSIONS | NESTED, |b| {
            expr(b, "counter", |b| put_with(b, 1, |b| b.extend_from_slice(&0u64.to_be_bytes())));
            expr(b, "immediate", |b| verdict(b, NF_ACCEPT, None));
            expr(b, "immediate", |b| {
                put_with(b, NFTA_IMMEDIATE_DREG, |b| b.extend_from_slice(&1u32.to_be_bytes()));
                DataRef::Value(&[0; 4]).put(b, NFTA_IMMEDIATE_DATA);
            });
            expr(b, "immediate", |b| verdict(b, NFT_JUMP, Some("KUBE-FIREWALL")));
            expr(b, "immediate", |b| verdict(b, NFT_GOTO, Some("KUBE-SERVICES")));
        });
        b
    }

    #[test]
    fn finds_jumps_and_gotos_and_nothing_else() {
        let found = rule(&message()).expect("a well-formed rule");
        assert_eq!((found.chain.as_str(), found.handle), ("INPUT", 9));
        assert_eq!(found.targets, ["KUBE-FIREWALL", "KUBE-SERVICES"]);
    }

    #[test]
    fn a_truncated_or_overrunning_reply_is_an_error_not_a_panic() {
        let whole = message();
        for end in 0..whole.len() {
            // Some cuts fall between attributes and still read; none may panic.
            let _ = rule(&whole[..end]);
        }
        assert!(rule(&whole[..whole.len() - 3]).is_err(), "a cut inside the expressions");
        let mut overrun = whole.clone();
        // The first attribute claims more bytes than the message holds.
        overrun[4..6].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert!(rule(&overrun).is_err());
        let mut short = whole;
        short[4..6].copy_from_slice(&2u16.to_ne_bytes());
        assert!(rule(&short).is_err(), "a length under the header's");
    }
}
