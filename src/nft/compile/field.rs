//! What a rule or a set's key is made of: the packet fields and values the templates use,
//! with their data types, lengths and byte orders as nftables defines them, how each is
//! loaded into a register, and how a constant of each type is written in a register.

use super::CompileError;
use super::expr::{Base, Expr};
use super::lex::Token;
use crate::model::Family;
use std::net::IpAddr;

/// nftables' data types (`TYPE_*`), the numbers set keys are declared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `integer` (numgen's result).
    Integer = 4,
    /// `ipv4_addr`.
    Ipv4 = 7,
    /// `ipv6_addr`.
    Ipv6 = 8,
    /// `inet_proto`.
    Proto = 12,
    /// `inet_service`.
    Port = 13,
    /// `mark`.
    Mark = 19,
    /// `ct_state`.
    CtState = 21,
    /// `ct_status`.
    CtStatus = 23,
    /// `fib_addrtype`.
    FibType = 44,
    /// `ifname`.
    Ifname = 41,
}

impl Kind {
    /// The declared type's bytes in a register.
    pub fn len(self) -> u32 {
        match self {
            Kind::Ipv4 | Kind::Integer | Kind::Mark | Kind::CtState | Kind::CtStatus | Kind::FibType => 4,
            Kind::Ipv6 | Kind::Ifname => 16,
            Kind::Proto => 1,
            Kind::Port => 2,
        }
    }

    /// Whether values are in network byte order (nftables' `BYTEORDER_BIG_ENDIAN`).
    pub fn big_endian(self) -> bool {
        matches!(self, Kind::Ipv4 | Kind::Ipv6 | Kind::Port)
    }

    /// The type named in a set's `type` declaration.
    pub fn named(name: &str) -> Option<Kind> {
        Some(match name {
            "ipv4_addr" => Kind::Ipv4,
            "ipv6_addr" => Kind::Ipv6,
            "inet_proto" => Kind::Proto,
            "inet_service" => Kind::Port,
            "mark" => Kind::Mark,
            "integer" => Kind::Integer,
            _ => return None,
        })
    }
}

/// How a field is loaded into a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Bytes of a header.
    Payload(Base, u32),
    /// A meta key.
    Meta(u32),
    /// A conntrack key.
    Ct(u32),
    /// A routing lookup's address type, for the source (1) or destination (2).
    Fib(u32),
    /// A random number below the modulus, plus an offset (`mod 1 offset N` is the constant
    /// N, how a rule puts a number into a concatenated key).
    Numgen(u32, u32),
}

/// One packet field as a rule or a `typeof` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// How it is loaded.
    pub load: Load,
    /// Its type.
    pub kind: Kind,
    /// The transport protocol a `tcp`/`udp`/`sctp` header field implies (nft's dependency).
    pub needs_proto: Option<u8>,
    /// For `typeof`: nftables' protocol description and field template ids of a header
    /// field (`PROTO_DESC_*`, `*HDR_*`).
    pub desc: Option<(u32, u32)>,
}

/// nftables' `PROTO_DESC_*` ids of the headers the templates read.
const DESC_TCP: u32 = 8;
const DESC_UDP: u32 = 6;
const DESC_SCTP: u32 = 10;
const DESC_IP: u32 = 12;
const DESC_IP6: u32 = 13;

/// Meta keys.
pub const META_MARK: u32 = 3;
/// `iifname`.
pub const META_IIFNAME: u32 = 6;
/// `l4proto`.
pub const META_L4PROTO: u32 = 16;

/// The protocol number of a `tcp`, `udp` or `sctp` word.
pub fn proto_number(word: &str) -> Option<u8> {
    match word {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        n => n.parse().ok(),
    }
}

impl Field {
    fn new(load: Load, kind: Kind) -> Field {
        Field { load, kind, needs_proto: None, desc: None }
    }

    /// Reads one field from the front of `t` (`ip daddr`, `meta l4proto`, `tcp dport`,
    /// `numgen random mod 3`…); returns it and the tokens it took.
    pub fn parse(t: &[Token], family: Family) -> Result<(Field, usize), CompileError> {
        let w = |i: usize| match t.get(i) {
            Some(Token::Word(w)) => w.as_str(),
            _ => "",
        };
        let ip = |offset: u32, kind: Kind, desc: u32, tmpl: u32| Field {
            desc: Some((desc, tmpl)),
            ..Field::new(Load::Payload(Base::Network, offset), kind)
        };
        let f = match (w(0), w(1)) {
            ("ip", "saddr") if family == Family::V4 => ip(12, Kind::Ipv4, DESC_IP, 11),
            ("ip", "daddr") if family == Family::V4 => ip(16, Kind::Ipv4, DESC_IP, 12),
            ("ip6", "saddr") if family == Family::V6 => ip(8, Kind::Ipv6, DESC_IP6, 8),
            ("ip6", "daddr") if family == Family::V6 => ip(24, Kind::Ipv6, DESC_IP6, 9),
            ("meta", "l4proto") => Field::new(Load::Meta(META_L4PROTO), Kind::Proto),
            ("meta", "mark") => Field::new(Load::Meta(META_MARK), Kind::Mark),
            ("iifname", _) => return Ok((Field::new(Load::Meta(META_IIFNAME), Kind::Ifname), 1)),
            ("th", "dport") => Field::new(Load::Payload(Base::Transport, 2), Kind::Port),
            (p @ ("tcp" | "udp" | "sctp"), "dport") => {
                let desc = match p {
                    "tcp" => DESC_TCP,
                    "udp" => DESC_UDP,
                    _ => DESC_SCTP,
                };
                Field {
                    needs_proto: proto_number(p),
                    desc: Some((desc, 2)),
                    ..Field::new(Load::Payload(Base::Transport, 2), Kind::Port)
                }
            }
            ("ct", "state") => Field::new(Load::Ct(0), Kind::CtState),
            ("ct", "status") => Field::new(Load::Ct(2), Kind::CtStatus),
            ("fib", dir @ ("saddr" | "daddr")) if w(2) == "type" => {
                let flags = if dir == "saddr" { 1 } else { 2 };
                return Ok((Field::new(Load::Fib(flags), Kind::FibType), 3));
            }
            ("numgen", "random") if w(2) == "mod" => {
                let m = w(3).parse().map_err(|_| CompileError::new(format!("numgen modulus `{}`", w(3))))?;
                if w(4) == "offset" {
                    let o = w(5).parse().map_err(|_| CompileError::new(format!("numgen offset `{}`", w(5))))?;
                    return Ok((Field::new(Load::Numgen(m, o), Kind::Integer), 6));
                }
                return Ok((Field::new(Load::Numgen(m, 0), Kind::Integer), 4));
            }
            (a, b) => return Err(CompileError::new(format!("`{a} {b}` is not a field this compiler knows"))),
        };
        Ok((f, 2))
    }

    /// The field's bytes as loaded (`prefix` shortens an address load to whole bytes).
    pub fn load_expr(&self, dreg: u32, len: Option<u32>) -> Expr {
        match self.load {
            Load::Payload(base, offset) => Expr::Payload { base, offset, len: len.unwrap_or(self.kind.len()), dreg },
            Load::Meta(key) => Expr::Meta { key, dreg },
            Load::Ct(key) => Expr::Ct { key, dreg },
            Load::Fib(flags) => Expr::Fib { flags, result: 3, dreg },
            Load::Numgen(modulus, offset) => Expr::Numgen { dreg, modulus, offset },
        }
    }

    /// A constant of this field's type in register form: the bytes and, for an address
    /// prefix, its length in bits.
    pub fn constant(&self, word: &str) -> Result<(Vec<u8>, Option<u32>), CompileError> {
        let bad = || CompileError::new(format!("`{word}` is not a {:?} value", self.kind));
        let num = |w: &str| -> Option<u32> {
            match w.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => w.parse().ok(),
            }
        };
        Ok(match self.kind {
            Kind::Ipv4 | Kind::Ipv6 => {
                let (addr, prefix) = match word.split_once('/') {
                    Some((a, p)) => (a, Some(p.parse::<u32>().map_err(|_| bad())?)),
                    None => (word, None),
                };
                let ip: IpAddr = addr.parse().map_err(|_| bad())?;
                let bytes = match ip {
                    IpAddr::V4(v4) if self.kind == Kind::Ipv4 => v4.octets().to_vec(),
                    IpAddr::V6(v6) if self.kind == Kind::Ipv6 => v6.octets().to_vec(),
                    _ => return Err(bad()),
                };
                let full = self.kind.len() * 8;
                (bytes, prefix.filter(|p| *p < full))
            }
            Kind::Proto => (vec![proto_number(word).ok_or_else(bad)?], None),
            Kind::Port => ((num(word).ok_or_else(bad)? as u16).to_be_bytes().to_vec(), None),
            Kind::Mark | Kind::Integer => (num(word).ok_or_else(bad)?.to_ne_bytes().to_vec(), None),
            Kind::CtState => (flag(word, &[("new", 8), ("established", 2), ("related", 4)]).ok_or_else(bad)?, None),
            Kind::CtStatus => (flag(word, &[("dnat", 0x20), ("snat", 0x10)]).ok_or_else(bad)?, None),
            Kind::FibType => (flag(word, &[("local", 2), ("unicast", 1)]).ok_or_else(bad)?, None),
            Kind::Ifname => return Err(bad()),
        })
    }
}

fn flag(word: &str, names: &[(&str, u32)]) -> Option<Vec<u8>> {
    names.iter().find(|(n, _)| *n == word).map(|(_, v)| v.to_ne_bytes().to_vec())
}

/// nf_tables' register for the 32-bit slot `slot` of the register space, named as `nft`
/// names it: a 16-byte register where the slot starts one, a 4-byte register otherwise.
pub fn reg(slot: u32) -> u32 {
    if slot.is_multiple_of(4) { 1 + slot / 4 } else { 8 + slot }
}

/// 32-bit slots a value of `len` bytes takes.
pub fn slots(len: u32) -> u32 {
    len.div_ceil(4)
}
