//! nf_tables expressions, the kernel's rule bytecode: what a rule compiles to, encoded as
//! netlink attributes, and printed as libnftnl prints them (`nft --debug=netlink`), which is
//! what the tests compare against `nft`'s own compilation of the same text.

use crate::netlink::abi::*;
use crate::netlink::attr::{put_be32, put_be64, put_str, put_with};
pub use crate::netlink::data::Data;
use std::fmt;

/// Where a payload load reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The network header.
    Network = 1,
    /// The transport header.
    Transport = 2,
}

/// One expression. Registers are nf_tables' numbers (0: verdict, 1-4: 16-byte, 8-23: 4-byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Loads `len` bytes at `offset` of `base` into `dreg`.
    Payload { base: Base, offset: u32, len: u32, dreg: u32 },
    /// Loads meta key `key` into `dreg`.
    Meta { key: u32, dreg: u32 },
    /// Sets meta key `key` from `sreg`.
    MetaSet { key: u32, sreg: u32 },
    /// Loads conntrack key `key` into `dreg`.
    Ct { key: u32, dreg: u32 },
    /// Routing lookup `flags` with `result` into `dreg`.
    Fib { flags: u32, result: u32, dreg: u32 },
    /// Compares `sreg` with `data` (`op`: 0 equal, 1 not equal).
    Cmp { sreg: u32, op: u32, data: Vec<u8> },
    /// `dreg = (sreg & mask) ^ xor` over `mask.len()` bytes.
    Bitwise { sreg: u32, dreg: u32, mask: Vec<u8>, xor: Vec<u8> },
    /// Byte order conversion (`op` 1: to network order) of `len` bytes in units of `size`.
    Byteorder { sreg: u32, dreg: u32, op: u32, len: u32, size: u32 },
    /// Looks `sreg` up in a set (by name, and by id when it is new in this batch).
    Lookup { sreg: u32, set: String, set_id: Option<u32>, dreg: Option<u32>, invert: bool },
    /// Loads `data` into `dreg`.
    Immediate { dreg: u32, data: Data },
    /// A number below `modulus`, plus `offset`, into `dreg`: random, or (`inc`) a counter.
    Numgen { dreg: u32, inc: bool, modulus: u32, offset: u32 },
    /// Jenkins' hash of `len` bytes at `sreg` with `seed`, scaled to below `modulus`, plus
    /// `offset`, into `dreg`.
    Hash { sreg: u32, dreg: u32, len: u32, modulus: u32, seed: u32, offset: u32 },
    /// Destination NAT to the address (and port) in registers.
    Dnat { family: u32, addr: u32, proto: u32, flags: u32 },
    /// Masquerade with `flags`.
    Masq { flags: u32 },
    /// Reject (`kind` 0: ICMP unreachable with `code`, 1: TCP reset).
    Reject { kind: u32, code: u8 },
    /// Adds `sreg` to a set or refreshes its timeout.
    DynsetUpdate { sreg: u32, set: String, set_id: Option<u32>, timeout_ms: Option<u64> },
    /// A packet rate limit: `rate` packets per `unit` seconds, bursts of `burst`; the rule
    /// goes on while within it (or, with `NFT_LIMIT_F_INV` in `flags`, while over it).
    Limit { rate: u64, unit: u64, burst: u32, flags: u32 },
}

fn value_attr(b: &mut Vec<u8>, kind: u16, bytes: &[u8]) {
    put_with(b, kind | NLA_F_NESTED, |b| put_with(b, NFTA_DATA_VALUE, |b| b.extend_from_slice(bytes)));
}

impl Expr {
    /// The expression's name in the kernel.
    fn name(&self) -> &'static str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Ct { .. } => "ct",
            Expr::Fib { .. } => "fib",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Byteorder { .. } => "byteorder",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } => "immediate",
            Expr::Numgen { .. } => "numgen",
            Expr::Hash { .. } => "hash",
            Expr::Dnat { .. } => "nat",
            Expr::Masq { .. } => "masq",
            Expr::Reject { .. } => "reject",
            Expr::DynsetUpdate { .. } => "dynset",
            Expr::Limit { .. } => "limit",
        }
    }

    /// The expression as the kernel lists it back: no set ids (they name sets within one
    /// batch), and a DNAT's flags with those its registers imply, which the kernel adds.
    pub fn normal(mut self) -> Expr {
        match &mut self {
            Expr::Lookup { set_id, .. } | Expr::DynsetUpdate { set_id, .. } => *set_id = None,
            Expr::Dnat { addr, proto, flags, .. } => {
                if *addr != 0 {
                    *flags |= NF_NAT_RANGE_MAP_IPS;
                }
                if *proto != 0 {
                    *flags |= NF_NAT_RANGE_PROTO_SPECIFIED;
                }
            }
            _ => {}
        }
        self
    }

    /// Appends the expression as one `NFTA_LIST_ELEM` of a rule's expression list.
    pub fn encode(&self, b: &mut Vec<u8>) {
        put_with(b, NFTA_LIST_ELEM | NLA_F_NESTED, |b| {
            put_str(b, NFTA_EXPR_NAME, self.name());
            put_with(b, NFTA_EXPR_DATA | NLA_F_NESTED, |b| self.encode_data(b));
        });
    }

    fn encode_data(&self, b: &mut Vec<u8>) {
        match self {
            Expr::Payload { base, offset, len, dreg } => {
                for (k, v) in [
                    (NFTA_PAYLOAD_DREG, *dreg),
                    (NFTA_PAYLOAD_BASE, *base as u32),
                    (NFTA_PAYLOAD_OFFSET, *offset),
                    (NFTA_PAYLOAD_LEN, *len),
                ] {
                    put_be32(b, k, v);
                }
            }
            Expr::Meta { key, dreg } => {
                [(NFTA_META_KEY, *key), (NFTA_META_DREG, *dreg)].iter().for_each(|&(k, v)| put_be32(b, k, v))
            }
            Expr::MetaSet { key, sreg } => {
                [(NFTA_META_KEY, *key), (NFTA_META_SREG, *sreg)].iter().for_each(|&(k, v)| put_be32(b, k, v))
            }
            Expr::Ct { key, dreg } => {
                [(NFTA_CT_KEY, *key), (NFTA_CT_DREG, *dreg)].iter().for_each(|&(k, v)| put_be32(b, k, v))
            }
            Expr::Fib { flags, result, dreg } => {
                [(NFTA_FIB_DREG, *dreg), (NFTA_FIB_RESULT, *result), (NFTA_FIB_FLAGS, *flags)]
                    .iter()
                    .for_each(|&(k, v)| put_be32(b, k, v))
            }
            Expr::Cmp { sreg, op, data } => {
                put_be32(b, NFTA_CMP_SREG, *sreg);
                put_be32(b, NFTA_CMP_OP, *op);
                value_attr(b, NFTA_CMP_DATA, data);
            }
            Expr::Bitwise { sreg, dreg, mask, xor } => {
                put_be32(b, NFTA_BITWISE_SREG, *sreg);
                put_be32(b, NFTA_BITWISE_DREG, *dreg);
                put_be32(b, NFTA_BITWISE_LEN, mask.len() as u32);
                value_attr(b, NFTA_BITWISE_MASK, mask);
                value_attr(b, NFTA_BITWISE_XOR, xor);
            }
            Expr::Byteorder { sreg, dreg, op, len, size } => {
                for (k, v) in [
                    (NFTA_BYTEORDER_SREG, *sreg),
                    (NFTA_BYTEORDER_DREG, *dreg),
                    (NFTA_BYTEORDER_OP, *op),
                    (NFTA_BYTEORDER_LEN, *len),
                    (NFTA_BYTEORDER_SIZE, *size),
                ] {
                    put_be32(b, k, v);
                }
            }
            Expr::Lookup { sreg, set, set_id, dreg, invert } => {
                put_be32(b, NFTA_LOOKUP_SREG, *sreg);
                if let Some(d) = dreg {
                    put_be32(b, NFTA_LOOKUP_DREG, *d);
                }
                put_str(b, NFTA_LOOKUP_SET, set);
                if let Some(id) = set_id {
                    put_be32(b, NFTA_LOOKUP_SET_ID, *id);
                }
                if *invert {
                    put_be32(b, NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
                }
            }
            Expr::Immediate { dreg, data } => {
                put_be32(b, NFTA_IMMEDIATE_DREG, *dreg);
                data.put(b, NFTA_IMMEDIATE_DATA);
            }
            Expr::Numgen { dreg, inc, modulus, offset } => [
                (NFTA_NG_DREG, *dreg),
                (NFTA_NG_MODULUS, *modulus),
                (NFTA_NG_TYPE, if *inc { NFT_NG_INCREMENTAL } else { NFT_NG_RANDOM }),
                (NFTA_NG_OFFSET, *offset),
            ]
            .iter()
            .for_each(|&(k, v)| put_be32(b, k, v)),
            Expr::Hash { sreg, dreg, len, modulus, seed, offset } => [
                (NFTA_HASH_SREG, *sreg),
                (NFTA_HASH_DREG, *dreg),
                (NFTA_HASH_LEN, *len),
                (NFTA_HASH_MODULUS, *modulus),
                (NFTA_HASH_SEED, *seed),
                (NFTA_HASH_OFFSET, *offset),
                (NFTA_HASH_TYPE, NFT_HASH_JENKINS),
            ]
            .iter()
            .for_each(|&(k, v)| put_be32(b, k, v)),
            Expr::Dnat { family, addr, proto, flags } => {
                [
                    (NFTA_NAT_TYPE, NFT_NAT_DNAT),
                    (NFTA_NAT_FAMILY, *family),
                    (NFTA_NAT_REG_ADDR_MIN, *addr),
                    (NFTA_NAT_REG_PROTO_MIN, *proto),
                ]
                .iter()
                .for_each(|&(k, v)| put_be32(b, k, v));
                if *flags != 0 {
                    put_be32(b, NFTA_NAT_FLAGS, *flags);
                }
            }
            Expr::Masq { flags } => put_be32(b, NFTA_MASQ_FLAGS, *flags),
            Expr::Reject { kind, code } => {
                put_be32(b, NFTA_REJECT_TYPE, *kind);
                put_with(b, NFTA_REJECT_ICMP_CODE, |b| b.push(*code));
            }
            Expr::DynsetUpdate { sreg, set, set_id, timeout_ms } => {
                put_str(b, NFTA_DYNSET_SET_NAME, set);
                if let Some(id) = set_id {
                    put_be32(b, NFTA_DYNSET_SET_ID, *id);
                }
                put_be32(b, NFTA_DYNSET_OP, NFT_DYNSET_OP_UPDATE);
                put_be32(b, NFTA_DYNSET_SREG_KEY, *sreg);
                if let Some(ms) = timeout_ms {
                    put_with(b, NFTA_DYNSET_TIMEOUT, |b| b.extend_from_slice(&ms.to_be_bytes()));
                }
            }
            Expr::Limit { rate, unit, burst, flags } => {
                put_be64(b, NFTA_LIMIT_RATE, *rate);
                put_be64(b, NFTA_LIMIT_UNIT, *unit);
                put_be32(b, NFTA_LIMIT_BURST, *burst);
                put_be32(b, NFTA_LIMIT_TYPE, NFT_LIMIT_PKTS);
                put_be32(b, NFTA_LIMIT_FLAGS, *flags);
            }
        }
    }
}

/// Register words as libnftnl prints them: 32-bit little-endian groups, zero-padded.
fn words(bytes: &[u8]) -> String {
    bytes
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            format!("0x{:08x}", u32::from_le_bytes(w))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

const META_KEYS: [(u32, &str); 4] = [
    (NFT_META_MARK, "mark"),
    (NFT_META_IIFNAME, "iifname"),
    (NFT_META_L4PROTO, "l4proto"),
    (NFT_META_NFTRACE, "nftrace"),
];

/// A limit's unit as libnftnl names it (`error` for a unit no statement writes).
fn unit_name(seconds: u64) -> &'static str {
    match seconds {
        1 => "second",
        60 => "minute",
        3_600 => "hour",
        86_400 => "day",
        604_800 => "week",
        _ => "error",
    }
}

fn meta_name(key: u32) -> &'static str {
    META_KEYS.iter().find(|(k, _)| *k == key).map_or("?", |(_, n)| n)
}

/// The end of a numgen or hash: its offset when not zero, as libnftnl prints it.
fn offset_text(f: &mut fmt::Formatter<'_>, offset: u32) -> fmt::Result {
    match offset {
        0 => write!(f, "]"),
        o => write!(f, "offset {o} ]"),
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Payload { base, offset, len, dreg } => {
                let base = if *base == Base::Network { "network" } else { "transport" };
                write!(f, "[ payload load {len}b @ {base} header + {offset} => reg {dreg} ]")
            }
            Expr::Meta { key, dreg } => write!(f, "[ meta load {} => reg {dreg} ]", meta_name(*key)),
            Expr::MetaSet { key, sreg } => write!(f, "[ meta set {} with reg {sreg} ]", meta_name(*key)),
            Expr::Ct { key, dreg } => {
                write!(f, "[ ct load {} => reg {dreg} ]", if *key == 0 { "state" } else { "status" })
            }
            Expr::Fib { flags, dreg, .. } => {
                write!(f, "[ fib {} type => reg {dreg} ]", if *flags == 1 { "saddr" } else { "daddr" })
            }
            Expr::Cmp { sreg, op, data } => {
                write!(f, "[ cmp {} reg {sreg} {} ]", if *op == 0 { "eq" } else { "neq" }, words(data))
            }
            Expr::Bitwise { sreg, dreg, mask, xor } => {
                write!(f, "[ bitwise reg {dreg} = ( reg {sreg} & {} ) ^ {} ]", words(mask), words(xor))
            }
            Expr::Byteorder { sreg, dreg, op, len, size } => {
                let op = if *op == 1 { "hton" } else { "ntoh" };
                write!(f, "[ byteorder reg {dreg} = {op}(reg {sreg}, {size}, {len}) ]")
            }
            Expr::Lookup { sreg, set, dreg, invert, .. } => {
                write!(f, "[ lookup reg {sreg} set {set}")?;
                if let Some(d) = dreg {
                    write!(f, " dreg {d}")?;
                }
                if *invert {
                    write!(f, " 0x1")?;
                }
                write!(f, " ]")
            }
            Expr::Immediate { dreg, data: Data::Value(v) } => write!(f, "[ immediate reg {dreg} {} ]", words(v)),
            Expr::Immediate { dreg, data: Data::Verdict(code, chain) } => {
                let v = match *code {
                    NF_DROP => "drop",
                    NF_ACCEPT => "accept",
                    NFT_JUMP => "jump",
                    _ => "goto",
                };
                match chain {
                    Some(c) => write!(f, "[ immediate reg {dreg} {v} -> {c} ]"),
                    None => write!(f, "[ immediate reg {dreg} {v} ]"),
                }
            }
            Expr::Numgen { dreg, inc, modulus, offset } => {
                let kind = if *inc { "inc" } else { "random" };
                write!(f, "[ numgen reg {dreg} = {kind} mod {modulus} ")?;
                offset_text(f, *offset)
            }
            Expr::Hash { sreg, dreg, len, modulus, seed, offset } => {
                write!(f, "[ hash reg {dreg} = jhash(reg {sreg}, {len}, 0x{seed:x}) % mod {modulus} ")?;
                offset_text(f, *offset)
            }
            Expr::Dnat { family, addr, proto, flags } => {
                let fam = if *family == 2 { "ip" } else { "ip6" };
                write!(f, "[ nat dnat {fam} addr_min reg {addr} proto_min reg {proto}")?;
                if *flags != 0 {
                    write!(f, " flags 0x{flags:x}")?;
                }
                write!(f, " ]")
            }
            Expr::Masq { flags } => write!(f, "[ masq flags 0x{flags:x} ]"),
            Expr::Reject { kind, code } => write!(f, "[ reject type {kind} code {code} ]"),
            Expr::DynsetUpdate { sreg, set, timeout_ms, .. } => {
                write!(f, "[ dynset update reg_key {sreg} set {set}")?;
                if let Some(ms) = timeout_ms {
                    write!(f, " timeout {ms}ms")?;
                }
                write!(f, " ]")
            }
            Expr::Limit { rate, unit, burst, flags } => {
                let unit = unit_name(*unit);
                write!(f, "[ limit rate {rate}/{unit} burst {burst} type packets flags 0x{flags:x} ]")
            }
        }
    }
}
