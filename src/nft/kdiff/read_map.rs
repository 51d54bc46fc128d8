//! The kernel's elements read back into the desired state's terms (`Key`, `Value`), each
//! checked by laying it out again as a sync would (`element`): an element that does not come
//! back byte for byte stays raw, so what is compared is exactly what the kernel holds.

use crate::model::{Family, Protocol};
use crate::netlink::abi::{NF_DROP, NFT_GOTO, NFT_SET_ELEM_INTERVAL_END};
use crate::netlink::elements::Element;
use crate::nft::compile::Data;
use crate::nft::element;
use crate::render::{Key, MapName, Value};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// One map's elements as read: those in the desired state's terms, and the rest.
#[derive(Debug, Default)]
pub(crate) struct ReadMap {
    /// Elements that read back exactly, in key order.
    pub known: Vec<(Key, Value)>,
    /// Elements no sync writes in this form.
    pub raw: Vec<Element>,
}

/// Reads `elements` of `map` in a table of `family`.
pub(crate) fn read_map(family: Family, map: MapName, elements: Vec<Element>) -> ReadMap {
    let mut out =
        if map == MapName::ServiceCidrs { read_ranges(family, elements) } else { read_each(family, map, elements) };
    // In key order, as the desired state holds them: the comparison and a restart's first
    // render take them so, and the reader is often a thread of its own.
    out.known.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out
}

fn read_each(family: Family, map: MapName, elements: Vec<Element>) -> ReadMap {
    let mut out = ReadMap { known: Vec::with_capacity(elements.len()), raw: Vec::new() };
    let mut scratch = Vec::with_capacity(64);
    for e in elements {
        match read_one(family, map, &e, &mut scratch) {
            Some(kv) => out.known.push(kv),
            None => out.raw.push(e),
        }
    }
    out
}

fn read_one(family: Family, map: MapName, e: &Element, scratch: &mut Vec<u8>) -> Option<(Key, Value)> {
    let key = key(family, map, &e.key, e.key_end.as_deref())?;
    let value = value(e)?;
    // Laid out again and compared field by field in place, the timeout aside, rather than
    // against a copy: a refresh reads every element of the table this way.
    let (mut laid, mut same) = (0, false);
    element::lay_out(&key, Some(&value), scratch, |l| {
        laid += 1;
        same = l.key == e.key.as_slice()
            && l.key_end == e.key_end.as_deref()
            && l.flags == e.flags
            && l.data == e.data.as_ref().map(|d| d.as_data_ref())
            && l.comment == e.comment.as_deref();
    });
    (same && laid == 1).then_some((key, value))
}

/// The value of a map element (or none, for a set's), in the form a sync writes.
fn value(e: &Element) -> Option<Value> {
    let owner = || e.comment.as_deref().map(Arc::<str>::from);
    Some(match (&e.data, owner()) {
        (None, None) => Value::None,
        (Some(Data::Value(v)), owner) => {
            let (ip, port) = endpoint(v)?;
            Value::Endpoint(ip, port, owner)
        }
        (Some(Data::Verdict(NFT_GOTO, Some(c))), None) => Value::Goto(c.clone()),
        (Some(Data::Verdict(NFT_GOTO, Some(c))), Some(o)) if c == crate::render::chain::REJECT => Value::Reject(o),
        (Some(Data::Verdict(NFT_GOTO, Some(c))), Some(o)) => Value::Dispatch(Arc::from(c.as_str()), o),
        (Some(Data::Verdict(NF_DROP, None)), Some(o)) => Value::Drop(o),
        _ => return None,
    })
}

fn endpoint(v: &[u8]) -> Option<(IpAddr, u16)> {
    let (ip, rest) = match v.len() {
        8 => (ip(&v[..4])?, &v[4..]),
        20 => (ip(&v[..16])?, &v[16..]),
        _ => return None,
    };
    Some((ip, u16::from_be_bytes([rest[0], rest[1]])))
}

fn ip(b: &[u8]) -> Option<IpAddr> {
    crate::netlink::attr::address(b)
}

/// Splits key bytes into 4-byte-register fields of the given byte lengths.
fn fields(b: &[u8], lens: &[usize]) -> Option<Vec<Vec<u8>>> {
    let mut at = 0;
    let mut out = Vec::new();
    for len in lens {
        out.push(b.get(at..at + len)?.to_vec());
        at += len.next_multiple_of(4);
    }
    (at == b.len()).then_some(out)
}

fn protocol(b: &[u8]) -> Option<Protocol> {
    element::proto_of(b[0])
}

fn port(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// The key of `map`'s layout in `family`; the caller checks it by encoding it again.
fn key(family: Family, map: MapName, b: &[u8], end: Option<&[u8]>) -> Option<Key> {
    // A slot in another part of the endpoint maps than the one it was read from is not where
    // a sync writes it: it stays raw, named by the map that holds it.
    laid_out(family, map, b, end).filter(|k| map.holding(k) == map)
}

fn laid_out(family: Family, map: MapName, b: &[u8], end: Option<&[u8]>) -> Option<Key> {
    let a = if family == Family::V4 { 4 } else { 16 };
    Some(match map {
        MapName::ServiceIps | MapName::NoEndpointServices | MapName::FirewallIps => {
            let f = fields(b, &[a, 1, 2])?;
            Key::IpProtoPort(ip(&f[0])?, protocol(&f[1])?, port(&f[2]))
        }
        MapName::ServiceNodeports | MapName::NoEndpointNodeports => {
            let f = fields(b, &[1, 2])?;
            Key::ProtoPort(protocol(&f[0])?, port(&f[1]))
        }
        MapName::ClusterIps | MapName::NodeportIps => Key::Ip(ip(&fields(b, &[a])?[0])?),
        MapName::HairpinConnections => Key::SamePair(ip(&fields(b, &[a, a])?[0])?),
        MapName::Endpoints(..) => {
            let f = fields(b, &[a, 2, 4])?;
            Key::IpSlot(ip(&f[0])?, port(&f[1]), u32::from_ne_bytes(f[2].clone().try_into().ok()?))
        }
        MapName::NodeportEndpoints(..) => {
            let f = fields(b, &[2, 4])?;
            Key::PortSlot(port(&f[0]), u32::from_ne_bytes(f[1].clone().try_into().ok()?))
        }
        MapName::Turns(_) => Key::Turn(u32::from_ne_bytes(fields(b, &[4])?[0].clone().try_into().ok()?)),
        MapName::FirewallAllow => {
            let (f, e) = (fields(b, &[a, 1, 2, a])?, fields(end?, &[a, 1, 2, a])?);
            let net = prefix(ip(&f[3])?, ip(&e[3])?)?;
            Key::Allow(Box::new((ip(&f[0])?, protocol(&f[1])?, port(&f[2]), net)))
        }
        MapName::ServiceCidrs => return None,
    })
}

/// The prefix whose first and last addresses are `first` and `last`, if there is one.
fn prefix(first: IpAddr, last: IpAddr) -> Option<IpNet> {
    (0..=if first.is_ipv4() { 32 } else { 128 })
        .filter_map(|len| IpNet::new(first, len).ok())
        .find(|net| net.network() == first && net.broadcast() == last)
}

/// An interval set of single addresses: each range a start element and, unless it runs to
/// the top, an end element one past it.
fn read_ranges(family: Family, mut elements: Vec<Element>) -> ReadMap {
    // Where one range ends the next begins, at the same key: the end goes first.
    elements.sort_by_key(|e| (e.key.clone(), e.flags & NFT_SET_ELEM_INTERVAL_END == 0));
    let mut out = ReadMap::default();
    let mut rest = elements.into_iter().peekable();
    // `nft -f` writes an end at address zero before the first range; it matches nothing.
    rest.next_if(|e| e.flags == NFT_SET_ELEM_INTERVAL_END && e.key.iter().all(|b| *b == 0) && e.data.is_none());
    while let Some(start) = rest.next() {
        let end = rest.next_if(|e| e.flags & NFT_SET_ELEM_INTERVAL_END != 0 && start.flags == 0);
        match range(family, &start, end.as_ref()) {
            Some(net) => out.known.push((Key::Cidr(net), Value::None)),
            None => out.raw.extend(std::iter::once(start).chain(end)),
        }
    }
    out
}

fn range(family: Family, start: &Element, end: Option<&Element>) -> Option<IpNet> {
    let first = ip(&fields(&start.key, &[if family == Family::V4 { 4 } else { 16 }])?[0])?;
    let last = match end.map(|e| ip(&e.key)) {
        Some(past) => before(past?)?,
        None => top(family),
    };
    let net = prefix(first, last)?;
    let listed: Vec<Element> =
        std::iter::once(start).chain(end).map(|e| Element { expires_ms: None, ..e.clone() }).collect();
    (element::elements(&Key::Cidr(net), Some(&Value::None)) == listed).then_some(net)
}

fn before(ip: IpAddr) -> Option<IpAddr> {
    Some(match ip {
        IpAddr::V4(v4) => IpAddr::V4(u32::from(v4).checked_sub(1)?.into()),
        IpAddr::V6(v6) => IpAddr::V6(u128::from(v6).checked_sub(1)?.into()),
    })
}

fn top(family: Family) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(u32::MAX)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(u128::MAX)),
    }
}
