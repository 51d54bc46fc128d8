//! A listed rule's expressions read back into the compiler's terms, so a comparison with the
//! desired rules is of like with like. The kernel lists what it was sent plus what it derives
//! (a lookup's flags word, a dynset's zero timeout, the NAT flags implied by its registers, a
//! numgen's type); each is read back to the form the compiler writes, or the expression stays
//! unknown, which no compiled rule equals.

use super::expr::{Base, Data, Expr};
use crate::netlink::ListedExpr;
use crate::netlink::abi::*;
use crate::netlink::attr::{all, be32, be64, get, utf8};
use crate::netlink::data::read_data;
use std::fmt;

/// One listed expression: one this compiler writes, or another one (or a malformed one),
/// kept by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadExpr {
    /// An expression the compiler writes, in its normal form (`Expr::normal`).
    Known(Expr),
    /// Anything else: its name and attributes.
    Other(ListedExpr),
}

impl fmt::Display for ReadExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadExpr::Known(e) => e.fmt(f),
            ReadExpr::Other(e) => write!(f, "[ {} (not written by kube-nftproxy) ]", e.name),
        }
    }
}

/// Reads one listed expression back.
pub fn read_back(e: &ListedExpr) -> ReadExpr {
    match known(e) {
        Some(expr) => ReadExpr::Known(expr.normal()),
        None => ReadExpr::Other(e.clone()),
    }
}

type Attrs<'a> = [(u16, &'a [u8])];

fn u32_at(a: &Attrs<'_>, t: u16) -> Option<u32> {
    get(a, t).and_then(be32)
}

fn u64_at(a: &Attrs<'_>, t: u16) -> Option<u64> {
    get(a, t).and_then(be64)
}

fn value_at(a: &Attrs<'_>, t: u16) -> Option<Vec<u8>> {
    match read_data(get(a, t)?).ok()? {
        Data::Value(v) => Some(v),
        Data::Verdict(..) => None,
    }
}

fn string_at(a: &Attrs<'_>, t: u16) -> Option<String> {
    get(a, t).and_then(utf8)
}

/// The expression, if it is of a kind and form the compiler writes.
fn known(e: &ListedExpr) -> Option<Expr> {
    let a = all(&e.data).ok()?;
    let a = a.as_slice();
    Some(match e.name.as_str() {
        "payload" => {
            let base = match u32_at(a, NFTA_PAYLOAD_BASE)? {
                1 => Base::Network,
                2 => Base::Transport,
                _ => return None,
            };
            let (offset, len) = (u32_at(a, NFTA_PAYLOAD_OFFSET)?, u32_at(a, NFTA_PAYLOAD_LEN)?);
            Expr::Payload { base, offset, len, dreg: u32_at(a, NFTA_PAYLOAD_DREG)? }
        }
        "meta" => match (u32_at(a, NFTA_META_DREG), u32_at(a, NFTA_META_SREG)) {
            (Some(dreg), None) => Expr::Meta { key: u32_at(a, NFTA_META_KEY)?, dreg },
            (None, Some(sreg)) => Expr::MetaSet { key: u32_at(a, NFTA_META_KEY)?, sreg },
            _ => return None,
        },
        "ct" => Expr::Ct { key: u32_at(a, NFTA_CT_KEY)?, dreg: u32_at(a, NFTA_CT_DREG)? },
        "fib" => Expr::Fib {
            flags: u32_at(a, NFTA_FIB_FLAGS)?,
            result: u32_at(a, NFTA_FIB_RESULT)?,
            dreg: u32_at(a, NFTA_FIB_DREG)?,
        },
        "cmp" => Expr::Cmp {
            sreg: u32_at(a, NFTA_CMP_SREG)?,
            op: u32_at(a, NFTA_CMP_OP)?,
            data: value_at(a, NFTA_CMP_DATA)?,
        },
        "bitwise" => bitwise(a)?,
        "byteorder" => Expr::Byteorder {
            sreg: u32_at(a, NFTA_BYTEORDER_SREG)?,
            dreg: u32_at(a, NFTA_BYTEORDER_DREG)?,
            op: u32_at(a, NFTA_BYTEORDER_OP)?,
            len: u32_at(a, NFTA_BYTEORDER_LEN)?,
            size: u32_at(a, NFTA_BYTEORDER_SIZE)?,
        },
        "lookup" => Expr::Lookup {
            sreg: u32_at(a, NFTA_LOOKUP_SREG)?,
            set: string_at(a, NFTA_LOOKUP_SET)?,
            set_id: None,
            dreg: u32_at(a, NFTA_LOOKUP_DREG),
            invert: u32_at(a, NFTA_LOOKUP_FLAGS).unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
        },
        "immediate" => Expr::Immediate {
            dreg: u32_at(a, NFTA_IMMEDIATE_DREG)?,
            data: read_data(get(a, NFTA_IMMEDIATE_DATA)?).ok()?,
        },
        "numgen" => Expr::Numgen {
            dreg: u32_at(a, NFTA_NG_DREG)?,
            inc: match u32_at(a, NFTA_NG_TYPE)? {
                NFT_NG_INCREMENTAL => true,
                NFT_NG_RANDOM => false,
                _ => return None,
            },
            modulus: u32_at(a, NFTA_NG_MODULUS)?,
            offset: u32_at(a, NFTA_NG_OFFSET).unwrap_or(0),
        },
        // Jenkins' only, with its seed: the kernel lists none when it picked one itself.
        "hash" if u32_at(a, NFTA_HASH_TYPE).unwrap_or(NFT_HASH_JENKINS) == NFT_HASH_JENKINS => Expr::Hash {
            sreg: u32_at(a, NFTA_HASH_SREG)?,
            dreg: u32_at(a, NFTA_HASH_DREG)?,
            len: u32_at(a, NFTA_HASH_LEN)?,
            modulus: u32_at(a, NFTA_HASH_MODULUS)?,
            seed: u32_at(a, NFTA_HASH_SEED)?,
            // The kernel lists an offset only when it is not zero.
            offset: u32_at(a, NFTA_HASH_OFFSET).unwrap_or(0),
        },
        "nat" => nat(a)?,
        "masq" if get(a, NFTA_NAT_REG_PROTO_MIN).is_none() => {
            Expr::Masq { flags: u32_at(a, NFTA_MASQ_FLAGS).unwrap_or(0) }
        }
        "reject" => Expr::Reject {
            kind: u32_at(a, NFTA_REJECT_TYPE)?,
            // A TCP reset has no code: the kernel lists none, the compiler writes zero.
            code: get(a, NFTA_REJECT_ICMP_CODE).map_or(Some(&0), |c| c.first()).copied()?,
        },
        "dynset" => dynset(a)?,
        // A packet limit; a byte limit is no rule of ours.
        "limit" if u32_at(a, NFTA_LIMIT_TYPE)? == NFT_LIMIT_PKTS => Expr::Limit {
            rate: u64_at(a, NFTA_LIMIT_RATE)?,
            unit: u64_at(a, NFTA_LIMIT_UNIT)?,
            burst: u32_at(a, NFTA_LIMIT_BURST)?,
            flags: u32_at(a, NFTA_LIMIT_FLAGS).unwrap_or(0),
        },
        _ => return None,
    })
}

fn bitwise(a: &Attrs<'_>) -> Option<Expr> {
    if u32_at(a, NFTA_BITWISE_OP).unwrap_or(NFT_BITWISE_BOOL) != NFT_BITWISE_BOOL {
        return None;
    }
    let (mask, xor) = (value_at(a, NFTA_BITWISE_MASK)?, value_at(a, NFTA_BITWISE_XOR)?);
    let len = u32_at(a, NFTA_BITWISE_LEN)?;
    (mask.len() == len as usize).then_some(Expr::Bitwise {
        sreg: u32_at(a, NFTA_BITWISE_SREG)?,
        dreg: u32_at(a, NFTA_BITWISE_DREG)?,
        mask,
        xor,
    })
}

/// A DNAT whose ranges are single registers (maximum equal to minimum), as the compiler writes.
fn nat(a: &Attrs<'_>) -> Option<Expr> {
    if u32_at(a, NFTA_NAT_TYPE)? != NFT_NAT_DNAT {
        return None;
    }
    let (addr, proto) = (u32_at(a, NFTA_NAT_REG_ADDR_MIN).unwrap_or(0), u32_at(a, NFTA_NAT_REG_PROTO_MIN).unwrap_or(0));
    let single = |max: u16, min: u32| u32_at(a, max).is_none_or(|m| m == min);
    if !single(NFTA_NAT_REG_ADDR_MAX, addr) || !single(NFTA_NAT_REG_PROTO_MAX, proto) {
        return None;
    }
    let flags = u32_at(a, NFTA_NAT_FLAGS).unwrap_or(0);
    Some(Expr::Dnat { family: u32_at(a, NFTA_NAT_FAMILY)?, addr, proto, flags })
}

fn dynset(a: &Attrs<'_>) -> Option<Expr> {
    let extra = [NFTA_DYNSET_EXPR, NFTA_DYNSET_EXPRESSIONS].iter().any(|t| get(a, *t).is_some());
    if extra || u32_at(a, NFTA_DYNSET_OP)? != NFT_DYNSET_OP_UPDATE || u32_at(a, NFTA_DYNSET_FLAGS).unwrap_or(0) != 0 {
        return None;
    }
    // The kernel lists a timeout of zero for none: the set's own applies.
    let timeout_ms = get(a, NFTA_DYNSET_TIMEOUT).map(be64).unwrap_or(Some(0))?;
    Some(Expr::DynsetUpdate {
        sreg: u32_at(a, NFTA_DYNSET_SREG_KEY)?,
        set: string_at(a, NFTA_DYNSET_SET_NAME)?,
        set_id: None,
        timeout_ms: (timeout_ms != 0).then_some(timeout_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr;

    /// Every kind the compiler writes, read back from its own encoding.
    #[test]
    fn what_the_compiler_encodes_reads_back_as_the_kernel_would_list_it() {
        let exprs = [
            Expr::Payload { base: Base::Network, offset: 16, len: 4, dreg: 1 },
            Expr::Meta { key: 16, dreg: 1 },
            Expr::MetaSet { key: 3, sreg: 1 },
            Expr::Ct { key: 0, dreg: 1 },
            Expr::Fib { flags: 2, result: 3, dreg: 1 },
            Expr::Cmp { sreg: 1, op: 1, data: vec![6] },
            Expr::Bitwise { sreg: 1, dreg: 1, mask: vec![0xff, 0, 0, 0], xor: vec![0; 4] },
            Expr::Byteorder { sreg: 1, dreg: 1, op: 1, len: 2, size: 2 },
            Expr::Lookup { sreg: 1, set: "s".into(), set_id: Some(3), dreg: Some(0), invert: true },
            Expr::Immediate { dreg: 0, data: Data::Verdict(NFT_GOTO, Some("c".into())) },
            Expr::Immediate { dreg: 1, data: Data::Value(vec![10, 0, 0, 1]) },
            Expr::Numgen { dreg: 1, inc: false, modulus: 3, offset: 7 },
            Expr::Numgen { dreg: 10, inc: true, modulus: 3, offset: 0 },
            Expr::Hash { sreg: 15, dreg: 10, len: 8, modulus: 61, seed: 0x6b6e_7078, offset: 0 },
            Expr::Hash { sreg: 18, dreg: 13, len: 20, modulus: 7, seed: 1, offset: 5 },
            Expr::Dnat { family: 2, addr: 1, proto: 2, flags: 0 },
            Expr::Masq { flags: 0x10 },
            Expr::Reject { kind: 1, code: 0 },
            Expr::DynsetUpdate { sreg: 1, set: "affinity-3".into(), set_id: Some(1), timeout_ms: Some(600_000) },
            Expr::MetaSet { key: NFT_META_NFTRACE, sreg: 1 },
            Expr::Limit { rate: 25, unit: 1, burst: 50, flags: 0 },
            Expr::Limit { rate: 3, unit: 60, burst: 5, flags: NFT_LIMIT_F_INV },
        ];
        for e in exprs {
            let mut b = Vec::new();
            e.encode(&mut b);
            let outer = attr::all(&b).expect("an attribute");
            let inner = attr::all(outer[0].1).expect("an expression");
            let listed = ListedExpr {
                name: String::from_utf8(attr::get(&inner, NFTA_EXPR_NAME).expect("name").to_vec())
                    .expect("utf-8")
                    .trim_end_matches('\0')
                    .to_string(),
                data: attr::get(&inner, NFTA_EXPR_DATA).expect("data").to_vec(),
            };
            assert_eq!(read_back(&listed), ReadExpr::Known(e.clone().normal()), "{e}");
        }
        let counter = ListedExpr { name: "counter".into(), data: Vec::new() };
        assert!(matches!(read_back(&counter), ReadExpr::Other(_)));
        // A hash whose seed the kernel picked is no rule of ours, nor is a symmetric hash.
        let listed = |attrs: &[(u16, u32)]| {
            let mut data = Vec::new();
            for &(k, v) in attrs {
                crate::netlink::attr::put_with(&mut data, k, |b| b.extend_from_slice(&v.to_be_bytes()));
            }
            read_back(&ListedExpr { name: "hash".into(), data })
        };
        let unseeded = [(NFTA_HASH_SREG, 15), (NFTA_HASH_DREG, 10), (NFTA_HASH_LEN, 4), (NFTA_HASH_MODULUS, 3)];
        assert!(matches!(listed(&unseeded), ReadExpr::Other(_)));
        let seeded = [unseeded.as_slice(), &[(NFTA_HASH_SEED, 9), (NFTA_HASH_TYPE, NFT_HASH_JENKINS)]].concat();
        assert!(matches!(listed(&seeded), ReadExpr::Known(Expr::Hash { seed: 9, .. })));
        let symmetric = [unseeded.as_slice(), &[(NFTA_HASH_SEED, 9), (NFTA_HASH_TYPE, 1)]].concat();
        assert!(matches!(listed(&symmetric), ReadExpr::Other(_)));
        // A byte rate limit is no rule of ours.
        let mut data = Vec::new();
        attr::put_be64(&mut data, NFTA_LIMIT_RATE, 1 << 20);
        attr::put_be64(&mut data, NFTA_LIMIT_UNIT, 1);
        [(NFTA_LIMIT_BURST, 0), (NFTA_LIMIT_TYPE, 1), (NFTA_LIMIT_FLAGS, 0)].iter().for_each(|&(k, v)| {
            attr::put_be32(&mut data, k, v);
        });
        assert!(matches!(read_back(&ListedExpr { name: "limit".into(), data }), ReadExpr::Other(_)));
    }
}
