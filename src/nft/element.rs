//! How an element of the desired state lies in the kernel: its key, a range's ends, its data
//! and comment, as nftables lays them out and as a listing reads them back. Batches encode
//! these (`wire`); `--dry-run --diff` compares the kernel's with them; `explain` looks
//! packets up in them.
//!
//! The layout is nftables' own: concatenated keys are fields padded to 4-byte registers,
//! addresses and ports in network order, `numgen` slots as host-order 32-bit integers,
//! verdicts as code plus chain, element comments as userdata, a range of a concatenation as
//! its first and last key, a range of a single address as a start element and an
//! interval-end element past it. The real-kernel tests compare what `nft` lists after this
//! path with what it lists after the same change sent as text.

use crate::model::Protocol;
use crate::netlink::abi::{IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, NF_DROP, NFT_GOTO, NFT_SET_ELEM_INTERVAL_END};
use crate::netlink::data::DataRef;
use crate::netlink::elements::Element;
use crate::render::{Key, Value};
use std::net::IpAddr;

/// One kernel element as borrowed pieces: its key (and a range's last key) as the set's key
/// register holds them, `NFT_SET_ELEM_*` flags, data and comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Laid<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The last key a range covers, in a set of concatenated ranges.
    pub key_end: Option<&'a [u8]>,
    /// Flags (a range end of an interval set carries `NFT_SET_ELEM_INTERVAL_END`).
    pub flags: u32,
    /// A map element's data.
    pub data: Option<DataRef<'a>>,
    /// Its comment.
    pub comment: Option<&'a str>,
}

/// Lays out the kernel's elements for `key` with `value` (`None` when deleting, which needs
/// keys only) in `scratch`, handing each to `each`: one, but for a range of a single-field
/// interval set (`service-cidrs`), which is a start and, unless it runs to the top, an end
/// one past it; a range in a concatenation (`firewall-allow`) is one element with its first
/// and last key. Nothing is allocated once `scratch` has grown, so a batch of 700,000
/// elements costs no allocation per element.
pub fn lay_out(key: &Key, value: Option<&Value>, scratch: &mut Vec<u8>, mut each: impl FnMut(&Laid)) {
    scratch.clear();
    let (key_len, end_len) = match key {
        Key::Allow(a) => {
            let (ip, proto, port, net) = &**a;
            key_bytes(scratch, &Key::IpProtoPort(*ip, *proto, *port));
            let prefix = scratch.len();
            ip_bytes(scratch, &net.network());
            let key_len = scratch.len();
            scratch.extend_from_within(..prefix);
            ip_bytes(scratch, &net.broadcast());
            (key_len, scratch.len() - key_len)
        }
        Key::Cidr(net) => {
            ip_bytes(scratch, &net.network());
            let key_len = scratch.len();
            if let Some(end) = after(&net.broadcast()) {
                ip_bytes(scratch, &end);
            }
            (key_len, 0)
        }
        other => {
            key_bytes(scratch, other);
            (scratch.len(), 0)
        }
    };
    let past_key = scratch.len();
    if let Some(Value::Endpoint(ip, port, _)) = value {
        ip_bytes(scratch, ip);
        field(scratch, &port.to_be_bytes());
    }
    let bytes = &scratch[..];
    let (data, comment) = value.map(|v| data(v, &bytes[past_key..])).unwrap_or_default();
    let key_end = (end_len > 0).then(|| &bytes[key_len..key_len + end_len]);
    each(&Laid { key: &bytes[..key_len], key_end, flags: 0, data, comment });
    if matches!(key, Key::Cidr(_)) && past_key > key_len {
        let end = &bytes[key_len..past_key];
        each(&Laid { key: end, key_end: None, flags: NFT_SET_ELEM_INTERVAL_END, data: None, comment: None });
    }
}

/// The kernel's elements for `key` with `value`, owned (see `lay_out`).
pub fn elements(key: &Key, value: Option<&Value>) -> Vec<Element> {
    let mut out = Vec::new();
    lay_out(key, value, &mut Vec::with_capacity(64), |e| {
        out.push(Element {
            key: e.key.to_vec(),
            key_end: e.key_end.map(<[u8]>::to_vec),
            flags: e.flags,
            data: e.data.map(DataRef::to_data),
            comment: e.comment.map(str::to_string),
            ..Element::default()
        })
    });
    out
}

/// A value's data and comment; an endpoint's bytes are `endpoint`.
fn data<'a>(value: &'a Value, endpoint: &'a [u8]) -> (Option<DataRef<'a>>, Option<&'a str>) {
    let goto = |chain: &'a str| Some(DataRef::Verdict(NFT_GOTO, Some(chain)));
    match value {
        Value::None => (None, None),
        Value::Goto(chain) => (goto(chain), None),
        Value::Dispatch(chain, owner) => (goto(chain), Some(crate::render::comment(owner))),
        Value::Drop(owner) => (Some(DataRef::Verdict(NF_DROP, None)), Some(crate::render::comment(owner))),
        Value::Reject(owner) => (goto(crate::render::chain::REJECT), Some(crate::render::comment(owner))),
        Value::Endpoint(_, _, owner) => (Some(DataRef::Value(endpoint)), owner.as_deref().map(crate::render::comment)),
    }
}

/// The address after `ip`, if there is one.
fn after(ip: &IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(v4) => u32::from(*v4).checked_add(1).map(|n| std::net::Ipv4Addr::from(n).into()),
        IpAddr::V6(v6) => u128::from(*v6).checked_add(1).map(|n| std::net::Ipv6Addr::from(n).into()),
    }
}

/// One concatenation field, padded to a 4-byte register.
fn field(b: &mut Vec<u8>, bytes: &[u8]) {
    b.extend_from_slice(bytes);
    b.resize(b.len().next_multiple_of(4), 0);
}

fn ip_bytes(b: &mut Vec<u8>, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => field(b, &v4.octets()),
        IpAddr::V6(v6) => field(b, &v6.octets()),
    }
}

/// The protocol an IP protocol number names, if it is one a Service can have.
pub fn proto_of(byte: u8) -> Option<Protocol> {
    Protocol::ALL.into_iter().find(|p| proto_byte(*p) == byte)
}

/// The protocol's number in `inet_proto` fields.
pub fn proto_byte(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => IPPROTO_TCP,
        Protocol::Udp => IPPROTO_UDP,
        Protocol::Sctp => IPPROTO_SCTP,
    }
}

fn key_bytes(b: &mut Vec<u8>, key: &Key) {
    match key {
        Key::IpProtoPort(ip, proto, port) => {
            ip_bytes(b, ip);
            field(b, &[proto_byte(*proto)]);
            field(b, &port.to_be_bytes());
        }
        Key::ProtoPort(proto, port) => {
            field(b, &[proto_byte(*proto)]);
            field(b, &port.to_be_bytes());
        }
        Key::Ip(ip) => ip_bytes(b, ip),
        Key::SamePair(ip) => {
            ip_bytes(b, ip);
            ip_bytes(b, ip);
        }
        Key::IpSlot(ip, port, slot) => {
            ip_bytes(b, ip);
            field(b, &port.to_be_bytes());
            field(b, &slot.to_ne_bytes());
        }
        Key::PortSlot(port, slot) => {
            field(b, &port.to_be_bytes());
            field(b, &slot.to_ne_bytes());
        }
        Key::Turn(slot) => field(b, &slot.to_ne_bytes()),
        // Ranges are laid out by `lay_out`.
        Key::Allow(..) | Key::Cidr(..) => {}
    }
}
