//! What a rule or a set's key is made of: the packet fields and values the templates use,
//! with their data types, lengths and byte orders as nftables defines them, how each is
//! loaded into a register, and how a constant of each type is written in a register.

use super::CompileError;
use super::expr::{Base, Expr};
use super::lex::Token;
use crate::model::Family;
use crate::netlink::abi::{
    IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, NFT_CT_STATE, NFT_CT_STATUS, NFT_FIB_RESULT_ADDRTYPE, NFT_META_IIFNAME,
    NFT_META_L4PROTO, NFT_META_MARK, NFTA_FIB_F_DADDR, NFTA_FIB_F_SADDR, PROTO_DESC_IP, PROTO_DESC_IP6,
    PROTO_DESC_SCTP, PROTO_DESC_TCP, PROTO_DESC_UDP,
};
use std::net::IpAddr;

/// nftables' data types (`TYPE_*`), the numbers set keys are declared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `integer` (numgen's and a hash's result).
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
    /// A number below the modulus, plus an offset: random, or (`inc`) counting round, one
    /// more each packet (`random mod 1 offset N` is the constant N, how a rule puts a number
    /// into a concatenated key).
    Numgen {
        /// `numgen inc` rather than `numgen random`.
        inc: bool,
        /// The modulus.
        modulus: u32,
        /// The offset.
        offset: u32,
    },
    /// A hash of header fields below the modulus (`jhash … mod M seed S [offset O]`).
    Hash(Hash),
}

/// A header field a hash reads: its header, offset and length.
pub type Span = (Base, u32, u32);

/// `jhash F [. G] mod M seed S [offset O]`: Jenkins' hash of header fields, each padded to
/// whole 32-bit words as the registers hold them, scaled to below `modulus`, plus `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hash {
    /// The fields hashed (the second optional): kept as spans so that a field stays `Copy`.
    pub src: [Option<Span>; 2],
    /// The modulus.
    pub modulus: u32,
    /// The seed: always given, since without one the kernel picks a random seed per rule.
    pub seed: u32,
    /// The offset.
    pub offset: u32,
}

impl Hash {
    /// The loads of the hashed fields into consecutive slots from `scratch`, then the hash
    /// into `dreg`.
    fn loads(&self, dreg: u32, scratch: u32) -> Vec<Expr> {
        let mut out = Vec::new();
        let mut slot = scratch;
        for &(base, offset, len) in self.src.iter().flatten() {
            out.push(Expr::Payload { base, offset, len, dreg: reg(slot) });
            slot += slots(len);
        }
        let (modulus, seed, offset) = (self.modulus, self.seed, self.offset);
        out.push(Expr::Hash { sreg: reg(scratch), dreg, len: (slot - scratch) * 4, modulus, seed, offset });
        out
    }
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

/// The protocol number of a `tcp`, `udp` or `sctp` word.
pub fn proto_number(word: &str) -> Option<u8> {
    match word {
        "tcp" => Some(IPPROTO_TCP),
        "udp" => Some(IPPROTO_UDP),
        "sctp" => Some(IPPROTO_SCTP),
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
            ("ip", "saddr") if family == Family::V4 => ip(12, Kind::Ipv4, PROTO_DESC_IP, 11),
            ("ip", "daddr") if family == Family::V4 => ip(16, Kind::Ipv4, PROTO_DESC_IP, 12),
            ("ip6", "saddr") if family == Family::V6 => ip(8, Kind::Ipv6, PROTO_DESC_IP6, 8),
            ("ip6", "daddr") if family == Family::V6 => ip(24, Kind::Ipv6, PROTO_DESC_IP6, 9),
            ("meta", "l4proto") => Field::new(Load::Meta(NFT_META_L4PROTO), Kind::Proto),
            ("meta", "mark") => Field::new(Load::Meta(NFT_META_MARK), Kind::Mark),
            ("iifname", _) => return Ok((Field::new(Load::Meta(NFT_META_IIFNAME), Kind::Ifname), 1)),
            // Any transport header's ports (TCP, UDP, SCTP alike: source, then destination);
            // `nft` adds no protocol match before them.
            ("th", "sport") => Field::new(Load::Payload(Base::Transport, 0), Kind::Port),
            ("th", "dport") => Field::new(Load::Payload(Base::Transport, 2), Kind::Port),
            (p @ ("tcp" | "udp" | "sctp"), dir @ ("sport" | "dport")) => {
                let desc = match p {
                    "tcp" => PROTO_DESC_TCP,
                    "udp" => PROTO_DESC_UDP,
                    _ => PROTO_DESC_SCTP,
                };
                // Source port first in each of these headers, then the destination port.
                let (offset, tmpl) = if dir == "sport" { (0, 1) } else { (2, 2) };
                Field {
                    needs_proto: proto_number(p),
                    desc: Some((desc, tmpl)),
                    ..Field::new(Load::Payload(Base::Transport, offset), Kind::Port)
                }
            }
            ("ct", "state") => Field::new(Load::Ct(NFT_CT_STATE), Kind::CtState),
            ("ct", "status") => Field::new(Load::Ct(NFT_CT_STATUS), Kind::CtStatus),
            ("fib", dir @ ("saddr" | "daddr")) if w(2) == "type" => {
                let flags = if dir == "saddr" { NFTA_FIB_F_SADDR } else { NFTA_FIB_F_DADDR };
                return Ok((Field::new(Load::Fib(flags), Kind::FibType), 3));
            }
            ("numgen", kind @ ("random" | "inc")) if w(2) == "mod" => {
                let modulus = number_at(t, 3, "numgen modulus")?;
                let (offset, n) = match w(4) {
                    "offset" => (number_at(t, 5, "numgen offset")?, 6),
                    _ => (0, 4),
                };
                let load = Load::Numgen { inc: kind == "inc", modulus, offset };
                return Ok((Field::new(load, Kind::Integer), n));
            }
            ("jhash", _) => return jhash(t, family),
            (a, b) => return Err(CompileError::new(format!("`{a} {b}` is not a field this compiler knows"))),
        };
        Ok((f, 2))
    }

    /// The expressions that load the field into slot `slot` (`len` shortens an address load
    /// to a prefix's whole bytes); a hash first loads the fields it hashes into slots from
    /// `scratch` (see [`scratch`]).
    pub fn loads(&self, slot: u32, len: Option<u32>, scratch: u32) -> Vec<Expr> {
        let dreg = reg(slot);
        vec![match self.load {
            Load::Payload(base, offset) => Expr::Payload { base, offset, len: len.unwrap_or(self.kind.len()), dreg },
            Load::Meta(key) => Expr::Meta { key, dreg },
            Load::Ct(key) => Expr::Ct { key, dreg },
            Load::Fib(flags) => Expr::Fib { flags, result: NFT_FIB_RESULT_ADDRTYPE, dreg },
            Load::Numgen { inc, modulus, offset } => Expr::Numgen { dreg, inc, modulus, offset },
            Load::Hash(h) => return h.loads(dreg, scratch),
        }]
    }

    /// A constant of this field's type in register form: the bytes and, for an address
    /// prefix, its length in bits.
    pub fn constant(&self, word: &str) -> Result<(Vec<u8>, Option<u32>), CompileError> {
        let bad = || CompileError::new(format!("`{word}` is not a {:?} value", self.kind));
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
            Kind::Port => ((number(word).ok_or_else(bad)? as u16).to_be_bytes().to_vec(), None),
            Kind::Mark | Kind::Integer => (number(word).ok_or_else(bad)?.to_ne_bytes().to_vec(), None),
            Kind::CtState => (flag(word, &[("new", 8), ("established", 2), ("related", 4)]).ok_or_else(bad)?, None),
            Kind::CtStatus => (flag(word, &[("dnat", 0x20), ("snat", 0x10)]).ok_or_else(bad)?, None),
            Kind::FibType => (flag(word, &[("local", 2), ("unicast", 1)]).ok_or_else(bad)?, None),
            Kind::Ifname => return Err(bad()),
        })
    }
}

/// A decimal or `0x` hexadecimal number.
fn number(w: &str) -> Option<u32> {
    match w.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => w.parse().ok(),
    }
}

/// The number at token `i` of `t`, or an error naming `what`.
fn number_at(t: &[Token], i: usize, what: &str) -> Result<u32, CompileError> {
    let w = match t.get(i) {
        Some(Token::Word(w)) => w.as_str(),
        _ => "",
    };
    number(w).ok_or_else(|| CompileError::new(format!("{what} `{w}`")))
}

/// `jhash F [. G] mod M seed S [offset O]` at the front of `t`: the hashed fields are header
/// fields; a transport field's protocol is the hash's dependency.
fn jhash(t: &[Token], family: Family) -> Result<(Field, usize), CompileError> {
    let mut src = [None; 2];
    let (mut i, mut needs_proto) = (1, None);
    for (n, slot) in src.iter_mut().enumerate() {
        let (f, used) = Field::parse(&t[i.min(t.len())..], family)?;
        let Load::Payload(base, offset) = f.load else {
            return Err(CompileError::new("a hash of something other than header fields"));
        };
        *slot = Some((base, offset, f.kind.len()));
        needs_proto = needs_proto.or(f.needs_proto);
        i += used;
        if t.get(i) != Some(&Token::Dot) || n == 1 {
            break;
        }
        i += 1;
    }
    let at = |k: usize, w: &str| matches!(t.get(i + k), Some(Token::Word(x)) if x == w);
    if !at(0, "mod") || !at(2, "seed") {
        return Err(CompileError::new("`jhash FIELDS mod M seed S`: a hash without a seed is random per rule"));
    }
    let (modulus, seed) = (number_at(t, i + 1, "jhash modulus")?, number_at(t, i + 3, "jhash seed")?);
    let (offset, used) = match at(4, "offset") {
        true => (number_at(t, i + 5, "jhash offset")?, i + 6),
        false => (0, i + 4),
    };
    let load = Load::Hash(Hash { src, modulus, seed, offset });
    Ok((Field { needs_proto, ..Field::new(load, Kind::Integer) }, used))
}

fn flag(word: &str, names: &[(&str, u32)]) -> Option<Vec<u8>> {
    names.iter().find(|(n, _)| *n == word).map(|(_, v)| v.to_ne_bytes().to_vec())
}

/// nf_tables' register for the 32-bit slot `slot` of the register space, named as `nft`
/// names it: a 16-byte register where the slot starts one, a 4-byte register otherwise.
pub fn reg(slot: u32) -> u32 {
    if slot.is_multiple_of(4) { 1 + slot / 4 } else { 8 + slot }
}

/// The first slot free for a hash's fields after a key of `fields` loaded from slot 0, with
/// `reserved` slots taken before (a NAT statement's address register): as `nft` allocates,
/// a concatenation takes its own slots and any other value a whole 16-byte register.
pub fn scratch(fields: &[Field], reserved: u32) -> u32 {
    let key: u32 = fields.iter().map(|f| slots(f.kind.len())).sum();
    reserved + if fields.len() > 1 { key } else { 4 }
}

/// 32-bit slots a value of `len` bytes takes.
pub fn slots(len: u32) -> u32 {
    len.div_ceil(4)
}

/// Byte `i` of a `bits`-long prefix mask.
pub fn prefix_byte(bits: u32, i: u32) -> u8 {
    match bits.saturating_sub(i * 8) {
        0 => 0,
        n if n >= 8 => 0xff,
        n => 0xff << (8 - n),
    }
}

/// `10.0.0.1:80` or `[fd00::1]:80` as address bytes and port.
pub fn constant_target(w: &str) -> Option<(Vec<u8>, u16)> {
    let (addr, port) = w.rsplit_once(':')?;
    let addr = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
    let ip: std::net::IpAddr = addr.parse().ok()?;
    let bytes = match ip {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    Some((bytes, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(text: &str, family: Family) -> Result<(Field, usize), CompileError> {
        let tokens: Vec<Token> = super::super::lex::tokens(text).expect("tokens").into_iter().map(|(t, _)| t).collect();
        Field::parse(&tokens, family)
    }

    #[test]
    fn a_hash_takes_its_fields_modulus_seed_and_offset_and_needs_them_all_but_the_offset() {
        let (f, n) =
            field("jhash ip6 saddr . udp sport mod 61 seed 0x6b6e7078 offset 3 map", Family::V6).expect("a hash");
        assert_eq!(n, 12);
        let src = [Some((Base::Network, 8, 16)), Some((Base::Transport, 0, 2))];
        assert_eq!(f.load, Load::Hash(Hash { src, modulus: 61, seed: 0x6b6e_7078, offset: 3 }));
        assert_eq!((f.kind, f.needs_proto), (Kind::Integer, Some(17)));
        let unseeded = field("jhash ip saddr mod 61 map", Family::V4).expect_err("no seed");
        assert!(unseeded.to_string().contains("without a seed"), "{unseeded}");
        assert!(field("jhash ip6 saddr mod 2 seed 1", Family::V4).is_err(), "another family's address");
        assert!(field("jhash meta mark mod 2 seed 1", Family::V4).is_err(), "not a header field");
        let three = field("jhash ip saddr . tcp sport . tcp dport mod 2 seed 1", Family::V4);
        assert!(three.is_err(), "three fields");
        let typeof_ = "table ip t {\n map m {\n  typeof jhash ip saddr mod 2 seed 1 : ip daddr\n }\n}\n";
        let refused = super::super::describe(typeof_).expect_err("a hash in a typeof");
        assert!(refused.to_string().contains("a hash in a set's `typeof`"), "{refused}");
    }

    #[test]
    fn a_counter_is_a_numgen_of_its_own_kind() {
        let (f, n) = field("numgen inc mod 3 offset 2", Family::V4).expect("a counter");
        assert_eq!((f.load, n), (Load::Numgen { inc: true, modulus: 3, offset: 2 }, 6));
        let (f, n) = field("numgen random mod 3 map", Family::V4).expect("a random number");
        assert_eq!((f.load, n), (Load::Numgen { inc: false, modulus: 3, offset: 0 }, 4));
    }
}
