//! The nf_tables machine, for one packet: registers, the expressions the compiler writes, set
//! lookups, jumps and gotos, as the kernel runs a rule. A random number (or a round robin's
//! counter, whose value depends on the packets before) is kept as the set of values it may
//! take until something tells them apart; there the run forks, each fork weighted by its
//! share of the values, so every path a packet can take is followed once. A hash is exact.

use super::packet::Packet;
mod regs;

use super::table::Table;
use crate::netlink::abi::{
    NF_ACCEPT, NF_CT_STATE_NEW, NF_DROP, NFT_CT_STATE, NFT_CT_STATUS, NFT_FIB_RESULT_ADDRTYPE, NFT_GOTO, NFT_JUMP,
    NFT_META_IIFNAME, NFT_META_L4PROTO, NFT_META_MARK, NFT_META_NFTRACE, NFT_RETURN, NFTA_FIB_F_DADDR,
    NFTA_FIB_F_SADDR, RTN_LOCAL, RTN_UNICAST,
};
use crate::nft::compile::{Data, Expr};
use crate::render::hash;
use regs::{Random, narrow, offset, read, settle, span, write};
use std::sync::Arc;

/// Bytes of the data registers (four 16-byte registers, seen also as sixteen 4-byte ones).
const REG_BYTES: usize = 64;

/// Both address flags (`fib … type` of the source or the destination address).
const FIB_ADDRS: u32 = NFTA_FIB_F_SADDR | NFTA_FIB_F_DADDR;
/// Paths one packet may fork into before the machine gives up (a guard against bugs: every
/// fork narrows a random value, so paths are finite).
const MAX_PATHS: u32 = 1_000_000;

/// How a base chain left the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The hook's other chains go on (a NAT statement, an `accept`, the chain's policy).
    Accept,
    /// Dropped; `reject` when a reject statement answered the sender first.
    Drop {
        /// Whether the sender is told (TCP reset, ICMP unreachable).
        reject: bool,
    },
}

/// One step of a path, for the answer's "why".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A rule ran to its end or to a verdict.
    Rule {
        /// Its chain.
        chain: String,
        /// Its text.
        text: String,
    },
    /// A lookup found an element of a named set or map.
    Element {
        /// The set or map.
        set: String,
        /// The service port that put it there, for the desired state's elements.
        owner: Option<Arc<str>>,
    },
    /// A rule of this chain set the packet's mark (for masquerading).
    Marked {
        /// The chain.
        chain: String,
    },
}

/// One path through the rules, forked as randomness decides.
#[derive(Debug, Clone)]
pub struct Run {
    /// The packet as this path has changed it.
    pub packet: Packet,
    /// The path's probability.
    pub chance: f64,
    /// What the path did, in order.
    pub steps: Vec<Step>,
    regs: [u8; REG_BYTES],
    random: Vec<Random>,
    /// Return addresses of jumps: (chain, next rule).
    stack: Vec<(String, usize)>,
    chain: String,
    rule: usize,
    expr: usize,
}

/// What one expression did.
enum Flow {
    Next,
    Break,
    Done(Verdict),
    Jump(String, bool),
    Return,
    Fork(Vec<Run>),
}

impl Run {
    /// The start of a path: `packet`, with its probability and steps so far.
    pub fn new(packet: Packet, chance: f64, steps: Vec<Step>) -> Run {
        Run {
            packet,
            chance,
            steps,
            regs: [0; REG_BYTES],
            random: Vec::new(),
            stack: Vec::new(),
            chain: String::new(),
            rule: 0,
            expr: 0,
        }
    }
}

/// Runs base chain `chain` of `table` for every path `run` can take; returns each path with
/// the verdict it ends in. An expression beyond this machine is an error naming it.
pub fn run_chain(table: &Table, chain: &str, mut run: Run) -> Result<Vec<(Verdict, Run)>, String> {
    run.chain = chain.to_string();
    (run.rule, run.expr) = (0, 0);
    run.stack.clear();
    let mut done = Vec::new();
    let mut todo = vec![run];
    let mut budget = MAX_PATHS;
    while let Some(mut r) = todo.pop() {
        budget = budget.checked_sub(1).ok_or("too many paths through the rules")?;
        match advance(table, &mut r)? {
            Ok(v) => done.push((v, r)),
            Err(forks) => todo.extend(forks),
        }
    }
    Ok(done)
}

/// Runs `r` to its chain's verdict (`Ok`) or to a fork (`Err` with the forked runs).
fn advance(table: &Table, r: &mut Run) -> Result<Result<Verdict, Vec<Run>>, String> {
    loop {
        let chain = table.chains.get(&r.chain).ok_or_else(|| format!("no chain {}", r.chain))?;
        let Some(rule) = chain.rules.get(r.rule) else {
            // A chain's end: back to the caller; a base chain's policy is accept.
            match r.stack.pop() {
                Some((c, next)) => (r.chain, r.rule, r.expr) = (c, next, 0),
                None => return Ok(Ok(Verdict::Accept)),
            }
            continue;
        };
        if r.expr == 0 {
            r.regs = [0; REG_BYTES];
            r.random.clear();
        }
        let mut flow = Flow::Next;
        while let Some(e) = rule.exprs.get(r.expr) {
            flow = exec(table, r, e)?;
            match flow {
                Flow::Next => r.expr += 1,
                _ => break,
            }
        }
        let ran = |r: &mut Run| r.steps.push(Step::Rule { chain: r.chain.clone(), text: rule.text.clone() });
        match flow {
            Flow::Fork(runs) => return Ok(Err(runs)),
            Flow::Break => (r.rule, r.expr) = (r.rule + 1, 0),
            Flow::Next => {
                ran(r);
                (r.rule, r.expr) = (r.rule + 1, 0);
            }
            Flow::Done(v) => {
                ran(r);
                return Ok(Ok(v));
            }
            Flow::Jump(target, goto) => {
                ran(r);
                if !goto {
                    r.stack.push((r.chain.clone(), r.rule + 1));
                }
                (r.chain, r.rule, r.expr) = (target, 0, 0);
            }
            Flow::Return => {
                ran(r);
                match r.stack.pop() {
                    Some((c, next)) => (r.chain, r.rule, r.expr) = (c, next, 0),
                    None => return Ok(Ok(Verdict::Accept)),
                }
            }
        }
    }
}

fn exec(table: &Table, r: &mut Run, e: &Expr) -> Result<Flow, String> {
    Ok(match e {
        // Marking a packet for tracing changes no path it takes.
        Expr::MetaSet { key: NFT_META_NFTRACE, .. } => Flow::Next,
        Expr::Payload { .. } | Expr::Meta { .. } | Expr::MetaSet { .. } | Expr::Ct { .. } | Expr::Fib { .. } => {
            packet_field(r, e)?
        }
        Expr::Bitwise { .. } | Expr::Byteorder { .. } | Expr::Numgen { .. } | Expr::Hash { .. } => compute(r, e)?,
        Expr::Cmp { sreg, op, data } => cmp(r, *sreg, *op, data)?,
        Expr::Lookup { sreg, set, set_id, dreg, invert } => lookup(table, r, *sreg, set, *set_id, *dreg, *invert)?,
        Expr::Immediate { dreg, data: Data::Value(v) } => write(r, *dreg, v).map(|()| Flow::Next)?,
        Expr::Immediate { data: Data::Verdict(code, chain), .. } => verdict(*code, chain.as_deref())?,
        Expr::Dnat { addr, proto, .. } => dnat(r, *addr, *proto)?,
        Expr::Masq { .. } => {
            r.packet.masquerade = true;
            Flow::Done(Verdict::Accept)
        }
        Expr::Reject { .. } => Flow::Done(Verdict::Drop { reject: true }),
        // The client is remembered (the set is taken to have room: it holds 65,535).
        Expr::DynsetUpdate { set, .. } => {
            r.packet.remembered.push(set.clone());
            Flow::Next
        }
        // This model has no rate: it follows one packet and keeps no time, so a rate limit
        // lets the packet go on (as within the rate).
        Expr::Limit { .. } => Flow::Next,
    })
}

/// Loads (and the one store, the mark) of what the packet carries.
fn packet_field(r: &mut Run, e: &Expr) -> Result<Flow, String> {
    let (bytes, dreg) = match e {
        Expr::Payload { base, offset: at, len, dreg } => {
            let header = r.packet.header(*base);
            let (at, len) = (*at as usize, *len as usize);
            (header.get(at..at + len).ok_or("a load past the packet's headers")?.to_vec(), *dreg)
        }
        Expr::Meta { key: NFT_META_IIFNAME, dreg } => {
            // A packet the node sends has no input interface; its name reads as empty.
            let mut b = r.packet.iif.clone().unwrap_or_default().into_bytes();
            b.resize(16, 0);
            (b, *dreg)
        }
        Expr::Meta { key: NFT_META_MARK, dreg } => (r.packet.mark.to_ne_bytes().to_vec(), *dreg),
        Expr::Meta { key: NFT_META_L4PROTO, dreg } => (vec![r.packet.proto], *dreg),
        Expr::MetaSet { key: NFT_META_MARK, sreg } => {
            let b = read(r, *sreg, 4)?;
            r.packet.mark = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            r.steps.push(Step::Marked { chain: r.chain.clone() });
            return Ok(Flow::Next);
        }
        Expr::Ct { key, dreg } => {
            let v = match *key {
                NFT_CT_STATE => NF_CT_STATE_NEW,
                NFT_CT_STATUS => r.packet.ct_status,
                other => return Err(format!("conntrack key {other}")),
            };
            (v.to_ne_bytes().to_vec(), *dreg)
        }
        // Only the address type of the source or destination: any other lookup is an error.
        Expr::Fib { flags, result, .. } if *result != NFT_FIB_RESULT_ADDRTYPE || *flags & !FIB_ADDRS != 0 => {
            return Err(format!("fib lookup {flags:#x} result {result}"));
        }
        Expr::Fib { flags, dreg, .. } => {
            let addr = if *flags & NFTA_FIB_F_SADDR != 0 { r.packet.saddr } else { r.packet.daddr };
            let t = if r.packet.is_local(addr) { RTN_LOCAL } else { RTN_UNICAST };
            (t.to_ne_bytes().to_vec(), *dreg)
        }
        other => return Err(format!("expression {other}")),
    };
    write(r, dreg, &bytes).map(|()| Flow::Next)
}

/// Arithmetic on registers, hashes, and random numbers.
fn compute(r: &mut Run, e: &Expr) -> Result<Flow, String> {
    let (sreg, len) = match e {
        Expr::Bitwise { sreg, mask, .. } => (*sreg, mask.len()),
        Expr::Byteorder { sreg, len, .. } | Expr::Hash { sreg, len, .. } => (*sreg, *len as usize),
        Expr::Numgen { dreg, modulus, offset: base, .. } => {
            let values: Vec<u32> = (0..*modulus).map(|v| v.wrapping_add(*base)).collect();
            let first = values.first().copied().ok_or("numgen modulus 0")?;
            write(r, *dreg, &first.to_ne_bytes())?;
            if values.len() > 1 {
                r.random.push(Random { at: offset(*dreg)?, values });
            }
            return Ok(Flow::Next);
        }
        other => return Err(format!("expression {other}")),
    };
    if let Some(forks) = settle(r, span(sreg, len)?) {
        return Ok(Flow::Fork(forks));
    }
    let mut b = read(r, sreg, len)?;
    let dreg = match e {
        Expr::Bitwise { dreg, mask, xor, .. } => {
            b = b.iter().zip(mask).zip(xor).map(|((b, m), x)| (b & m) ^ x).collect();
            *dreg
        }
        Expr::Byteorder { dreg, size, .. } => {
            // Host and network order differ on a little-endian host only; both ways swap.
            if cfg!(target_endian = "little") && *size > 1 {
                b.chunks_mut(*size as usize).for_each(<[u8]>::reverse);
            }
            *dreg
        }
        Expr::Hash { dreg, modulus, seed, offset, .. } => {
            let h = hash::scale(hash::jhash(&b, *seed), *modulus).wrapping_add(*offset);
            b = h.to_ne_bytes().to_vec();
            *dreg
        }
        other => return Err(format!("expression {other}")),
    };
    write(r, dreg, &b).map(|()| Flow::Next)
}

/// Destination NAT to the address (and port) in registers `addr` (and `proto`).
fn dnat(r: &mut Run, addr: u32, proto: u32) -> Result<Flow, String> {
    let len = if r.packet.saddr.is_ipv4() { 4 } else { 16 };
    let regs = std::iter::once(span(addr, len)).chain((proto != 0).then(|| span(proto, 2)));
    for s in regs {
        if let Some(forks) = settle(r, s?) {
            return Ok(Flow::Fork(forks));
        }
    }
    let ip = read(r, addr, len)?;
    let port = if proto == 0 { None } else { Some(read(r, proto, 2)?) };
    r.packet.dnat(&ip, port.map(|p| u16::from_be_bytes([p[0], p[1]])))?;
    Ok(Flow::Done(Verdict::Accept))
}

fn verdict(code: i32, chain: Option<&str>) -> Result<Flow, String> {
    Ok(match (code, chain) {
        (NF_ACCEPT, _) => Flow::Done(Verdict::Accept),
        (NF_DROP, _) => Flow::Done(Verdict::Drop { reject: false }),
        (NFT_JUMP, Some(c)) => Flow::Jump(c.to_string(), false),
        (NFT_GOTO, Some(c)) => Flow::Jump(c.to_string(), true),
        (NFT_RETURN, _) => Flow::Return,
        (code, _) => return Err(format!("verdict {code}")),
    })
}

/// `cmp`: a random value compared whole forks in two, the values equal to the constant and
/// the others; anything else about randomness settles it first.
fn cmp(r: &mut Run, sreg: u32, op: u32, data: &[u8]) -> Result<Flow, String> {
    // The compiler writes equal (0) and not equal (1) only; an order is not followed.
    if op > 1 {
        return Err(format!("cmp operation {op}"));
    }
    let s = span(sreg, data.len())?;
    if let Some(i) = r.random.iter().position(|x| x.at == s.start && data.len() == 4 && x.values.len() > 1) {
        let values = &r.random[i].values;
        let (eq, ne): (Vec<u32>, Vec<u32>) = values.iter().partition(|v| v.to_ne_bytes() == data);
        if !eq.is_empty() && !ne.is_empty() {
            return Ok(Flow::Fork(vec![narrow(r, i, eq, values.len()), narrow(r, i, ne, values.len())]));
        }
    } else if let Some(forks) = settle(r, s.clone()) {
        return Ok(Flow::Fork(forks));
    }
    let equal = r.regs[s] == *data;
    Ok(if equal == (op == 0) { Flow::Next } else { Flow::Break })
}

fn lookup(
    table: &Table,
    r: &mut Run,
    sreg: u32,
    name: &str,
    id: Option<u32>,
    dreg: Option<u32>,
    invert: bool,
) -> Result<Flow, String> {
    let set = match (table.sets.get(name), id) {
        (Some(s), _) => s,
        (None, Some(id)) => table.anon.get(&id).ok_or_else(|| format!("no set {name} ({id})"))?,
        (None, None) => return Err(format!("no set {name}")),
    };
    let s = span(sreg, set.spec.key.1 as usize)?;
    if let Some(forks) = settle(r, s.clone()) {
        return Ok(Flow::Fork(forks));
    }
    let key = r.regs[s].to_vec();
    let Some((found, owner)) = set.find(&key) else {
        return Ok(if invert { Flow::Next } else { Flow::Break });
    };
    if invert {
        return Ok(Flow::Break);
    }
    if table.sets.contains_key(name) {
        r.steps.push(Step::Element { set: name.to_string(), owner: owner.clone() });
    }
    Ok(match (dreg, &found.data) {
        (Some(0), Some(Data::Verdict(code, chain))) => verdict(*code, chain.as_deref())?,
        (Some(d), Some(Data::Value(v))) => write(r, d, v).map(|()| Flow::Next)?,
        (None, _) => Flow::Next,
        _ => return Err(format!("a lookup in {name} whose data does not fit")),
    })
}

#[cfg(test)]
mod tests;
