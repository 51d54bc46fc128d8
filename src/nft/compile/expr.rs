//! nf_tables expressions, the kernel's rule bytecode: what a rule compiles to, encoded as
//! netlink attributes, and printed as libnftnl prints them (`nft --debug=netlink`), which is
//! what the tests compare against `nft`'s own compilation of the same text.

use crate::nft::wire::{attr, str_attr};
use std::fmt;

/// Where a payload load reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The network header.
    Network = 1,
    /// The transport header.
    Transport = 2,
}

/// Immediate data: a value, or a verdict (`NF_DROP`, `NF_ACCEPT`, `NFT_JUMP`, `NFT_GOTO`)
/// with its chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// Bytes, as the register holds them.
    Value(Vec<u8>),
    /// A verdict code and, for jump and goto, the chain.
    Verdict(i32, Option<String>),
}

/// Verdict codes.
pub const NF_DROP: i32 = 0;
/// Accept.
pub const NF_ACCEPT: i32 = 1;
/// Jump to a chain.
pub const NFT_JUMP: i32 = -3;
/// Go to a chain.
pub const NFT_GOTO: i32 = -4;

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
    /// A random number below `modulus` into `dreg`.
    Numgen { dreg: u32, modulus: u32, offset: u32 },
    /// Destination NAT to the address (and port) in registers.
    Dnat { family: u32, addr: u32, proto: u32, flags: u32 },
    /// Masquerade with `flags`.
    Masq { flags: u32 },
    /// Reject (`kind` 0: ICMP unreachable with `code`, 1: TCP reset).
    Reject { kind: u32, code: u8 },
    /// Adds `sreg` to a set or refreshes its timeout.
    DynsetUpdate { sreg: u32, set: String, set_id: Option<u32>, timeout_ms: Option<u64> },
}

fn u32_attr(b: &mut Vec<u8>, kind: u16, v: u32) {
    attr(b, kind, |b| b.extend_from_slice(&v.to_be_bytes()));
}

fn value_attr(b: &mut Vec<u8>, kind: u16, bytes: &[u8]) {
    attr(b, kind | NESTED, |b| attr(b, 1, |b| b.extend_from_slice(bytes)));
}

const NESTED: u16 = 0x8000;

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
            Expr::Dnat { .. } => "nat",
            Expr::Masq { .. } => "masq",
            Expr::Reject { .. } => "reject",
            Expr::DynsetUpdate { .. } => "dynset",
        }
    }

    /// Appends the expression as one `NFTA_LIST_ELEM` of a rule's expression list.
    pub fn encode(&self, b: &mut Vec<u8>) {
        attr(b, 1 | NESTED, |b| {
            str_attr(b, 1, self.name());
            attr(b, 2 | NESTED, |b| self.encode_data(b));
        });
    }

    fn encode_data(&self, b: &mut Vec<u8>) {
        match self {
            Expr::Payload { base, offset, len, dreg } => {
                for (k, v) in [(1, *dreg), (2, *base as u32), (3, *offset), (4, *len)] {
                    u32_attr(b, k, v);
                }
            }
            Expr::Meta { key, dreg } => [(2, *key), (1, *dreg)].iter().for_each(|&(k, v)| u32_attr(b, k, v)),
            Expr::MetaSet { key, sreg } => [(2, *key), (3, *sreg)].iter().for_each(|&(k, v)| u32_attr(b, k, v)),
            Expr::Ct { key, dreg } => [(2, *key), (1, *dreg)].iter().for_each(|&(k, v)| u32_attr(b, k, v)),
            Expr::Fib { flags, result, dreg } => {
                [(1, *dreg), (2, *result), (3, *flags)].iter().for_each(|&(k, v)| u32_attr(b, k, v))
            }
            Expr::Cmp { sreg, op, data } => {
                u32_attr(b, 1, *sreg);
                u32_attr(b, 2, *op);
                value_attr(b, 3, data);
            }
            Expr::Bitwise { sreg, dreg, mask, xor } => {
                u32_attr(b, 1, *sreg);
                u32_attr(b, 2, *dreg);
                u32_attr(b, 3, mask.len() as u32);
                value_attr(b, 4, mask);
                value_attr(b, 5, xor);
            }
            Expr::Byteorder { sreg, dreg, op, len, size } => {
                for (k, v) in [(1, *sreg), (2, *dreg), (3, *op), (4, *len), (5, *size)] {
                    u32_attr(b, k, v);
                }
            }
            Expr::Lookup { sreg, set, set_id, dreg, invert } => {
                u32_attr(b, 2, *sreg);
                if let Some(d) = dreg {
                    u32_attr(b, 3, *d);
                }
                str_attr(b, 1, set);
                if let Some(id) = set_id {
                    u32_attr(b, 4, *id);
                }
                if *invert {
                    u32_attr(b, 5, 1);
                }
            }
            Expr::Immediate { dreg, data } => {
                u32_attr(b, 1, *dreg);
                attr(b, 2 | NESTED, |b| match data {
                    Data::Value(v) => attr(b, 1, |b| b.extend_from_slice(v)),
                    Data::Verdict(code, chain) => attr(b, 2 | NESTED, |b| {
                        attr(b, 1, |b| b.extend_from_slice(&code.to_be_bytes()));
                        if let Some(c) = chain {
                            str_attr(b, 2, c);
                        }
                    }),
                });
            }
            Expr::Numgen { dreg, modulus, offset } => {
                [(1, *dreg), (2, *modulus), (3, 1), (4, *offset)].iter().for_each(|&(k, v)| u32_attr(b, k, v))
            }
            Expr::Dnat { family, addr, proto, flags } => {
                [(1, 1), (2, *family), (3, *addr), (5, *proto)].iter().for_each(|&(k, v)| u32_attr(b, k, v));
                if *flags != 0 {
                    u32_attr(b, 7, *flags);
                }
            }
            Expr::Masq { flags } => u32_attr(b, 1, *flags),
            Expr::Reject { kind, code } => {
                u32_attr(b, 1, *kind);
                attr(b, 2, |b| b.push(*code));
            }
            Expr::DynsetUpdate { sreg, set, set_id, timeout_ms } => {
                str_attr(b, 1, set);
                if let Some(id) = set_id {
                    u32_attr(b, 2, *id);
                }
                u32_attr(b, 3, 1);
                u32_attr(b, 4, *sreg);
                if let Some(ms) = timeout_ms {
                    attr(b, 6, |b| b.extend_from_slice(&ms.to_be_bytes()));
                }
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

const META_KEYS: [(u32, &str); 3] = [(3, "mark"), (6, "iifname"), (16, "l4proto")];

fn meta_name(key: u32) -> &'static str {
    META_KEYS.iter().find(|(k, _)| *k == key).map_or("?", |(_, n)| n)
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
            Expr::Numgen { dreg, modulus, offset: 0 } => write!(f, "[ numgen reg {dreg} = random mod {modulus} ]"),
            Expr::Numgen { dreg, modulus, offset } => {
                write!(f, "[ numgen reg {dreg} = random mod {modulus} offset {offset} ]")
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
        }
    }
}
