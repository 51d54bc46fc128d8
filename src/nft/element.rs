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

use super::compile::Data;
use super::netlink::abi::{NF_DROP, NFT_GOTO, NFT_SET_ELEM_INTERVAL_END};
pub use super::netlink::elements::Element;
use crate::model::Protocol;
use crate::render::{Key, Value};
use std::net::IpAddr;

/// The kernel's elements for `key` with `value` (`None` when deleting, which needs keys
/// only): one, but for a range of a single-field interval set (`service-cidrs`), which is a
/// start and, unless it runs to the top, an end one past it; a range in a concatenation
/// (`firewall-allow`) is one element with its first and last key.
pub fn elements(key: &Key, value: Option<&Value>) -> Vec<Element> {
    let (data, comment) = value.map(data).unwrap_or_default();
    let one =
        |key, key_end| Element { key, key_end, data: data.clone(), comment: comment.clone(), ..Element::default() };
    let mut bytes = Vec::new();
    match key {
        Key::Allow(a) => {
            let (ip, proto, port, net) = &**a;
            key_bytes(&mut bytes, &Key::IpProtoPort(*ip, *proto, *port));
            let mut end = bytes.clone();
            ip_bytes(&mut bytes, &net.network());
            ip_bytes(&mut end, &net.broadcast());
            vec![one(bytes, Some(end))]
        }
        Key::Cidr(net) => {
            ip_bytes(&mut bytes, &net.network());
            let mut out = vec![one(bytes, None)];
            if let Some(end) = after(&net.broadcast()) {
                let mut b = Vec::new();
                ip_bytes(&mut b, &end);
                out.push(Element { key: b, flags: NFT_SET_ELEM_INTERVAL_END, ..Element::default() });
            }
            out
        }
        other => {
            key_bytes(&mut bytes, other);
            vec![one(bytes, None)]
        }
    }
}

/// A value's data and comment.
fn data(value: &Value) -> (Option<Data>, Option<String>) {
    let goto = |chain: &str| Some(Data::Verdict(NFT_GOTO, Some(chain.to_string())));
    let comment = |owner: &str| Some(crate::render::comment(owner).to_string());
    match value {
        Value::None => (None, None),
        Value::Goto(chain) => (goto(chain), None),
        Value::Dispatch(chain, owner) => (goto(chain), comment(owner)),
        Value::Drop(owner) => (Some(Data::Verdict(NF_DROP, None)), comment(owner)),
        Value::Reject(owner) => (goto("reject-chain"), comment(owner)),
        Value::Endpoint(ip, port) => {
            let mut b = Vec::new();
            ip_bytes(&mut b, ip);
            field(&mut b, &port.to_be_bytes());
            (Some(Data::Value(b)), None)
        }
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

/// The protocol's number in `inet_proto` fields.
pub fn proto_byte(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
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
        // Ranges are laid out by `elements`.
        Key::Allow(..) | Key::Cidr(..) => {}
    }
}
