//! The key of a set or map element, and its order: the derived order, compared as integers.

use crate::model::Protocol;
use ipnet::IpNet;
use std::net::IpAddr;

/// The key of a set or map element. Ordered as the derived order would be (variant, then
/// fields in turn), but compared as integers: the derived order compares addresses as byte
/// slices through `memcmp`, which was a fifth of rendering's time at 30k Services.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// `ip . proto . port`.
    IpProtoPort(IpAddr, Protocol, u16),
    /// `proto . port`.
    ProtoPort(Protocol, u16),
    /// `ip`.
    Ip(IpAddr),
    /// `ip . proto . port . source-range` (boxed: rare, and inline it would make every key
    /// bigger).
    Allow(Box<(IpAddr, Protocol, u16, IpNet)>),
    /// `ip . ip` with both the same: a local endpoint reaching itself.
    SamePair(IpAddr),
    /// `ip . port . slot` (an IP frontend's endpoint slot).
    IpSlot(IpAddr, u16, u32),
    /// `port . slot` (a NodePort's endpoint slot).
    PortSlot(u16, u32),
    /// `slot`: a round-robin turn, in a map from turn to the chain that takes that slot.
    Turn(u32),
    /// A range (`10.96.0.0/16`), in an interval set.
    Cidr(IpNet),
}

/// An address as two integers ordered as `IpAddr` orders: every IPv4 before every IPv6.
fn ip_rank(ip: &IpAddr) -> (bool, u128) {
    match ip {
        IpAddr::V4(v4) => (false, u128::from(u32::from(*v4))),
        IpAddr::V6(v6) => (true, u128::from(*v6)),
    }
}

impl Key {
    /// The variant's place in declaration order.
    fn variant(&self) -> u8 {
        match self {
            Key::IpProtoPort(..) => 0,
            Key::ProtoPort(..) => 1,
            Key::Ip(_) => 2,
            Key::Allow(_) => 3,
            Key::SamePair(_) => 4,
            Key::IpSlot(..) => 5,
            Key::PortSlot(..) => 6,
            Key::Turn(_) => 7,
            Key::Cidr(_) => 8,
        }
    }

    /// The key as integers in field order, for the variants every Service has; `None` for the
    /// rare ones, compared field by field.
    fn packed(&self) -> Option<((bool, u128), u64)> {
        let none = (false, 0);
        Some(match self {
            Key::IpProtoPort(ip, proto, port) => (ip_rank(ip), (*proto as u64) << 16 | u64::from(*port)),
            Key::ProtoPort(proto, port) => (none, (*proto as u64) << 16 | u64::from(*port)),
            Key::Ip(ip) | Key::SamePair(ip) => (ip_rank(ip), 0),
            Key::IpSlot(ip, port, slot) => (ip_rank(ip), u64::from(*port) << 32 | u64::from(*slot)),
            Key::PortSlot(port, slot) => (none, u64::from(*port) << 32 | u64::from(*slot)),
            Key::Turn(slot) => (none, u64::from(*slot)),
            Key::Allow(_) | Key::Cidr(_) => return None,
        })
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        let by_variant = self.variant().cmp(&other.variant());
        if by_variant.is_ne() {
            return by_variant;
        }
        match (self.packed(), other.packed()) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => match (self, other) {
                (Key::Allow(a), Key::Allow(b)) => a.cmp(b),
                (Key::Cidr(a), Key::Cidr(b)) => a.cmp(b),
                // Same variant, so both packed or neither.
                _ => std::cmp::Ordering::Equal,
            },
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Key {
    /// The same frontend's slot (or the turn) `n` further on, for slot and turn keys.
    pub fn slot_plus(&self, n: u32) -> Option<Key> {
        match self {
            Key::IpSlot(ip, port, slot) => Some(Key::IpSlot(*ip, *port, slot.checked_add(n)?)),
            Key::PortSlot(port, slot) => Some(Key::PortSlot(*port, slot.checked_add(n)?)),
            Key::Turn(slot) => Some(Key::Turn(slot.checked_add(n)?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// `Key` with the derived order, to check the hand-written one against.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Derived {
        IpProtoPort(IpAddr, Protocol, u16),
        ProtoPort(Protocol, u16),
        Ip(IpAddr),
        Allow(Box<(IpAddr, Protocol, u16, IpNet)>),
        SamePair(IpAddr),
        IpSlot(IpAddr, u16, u32),
        PortSlot(u16, u32),
        Turn(u32),
        Cidr(IpNet),
    }

    fn derived(k: &Key) -> Derived {
        match k.clone() {
            Key::IpProtoPort(a, b, c) => Derived::IpProtoPort(a, b, c),
            Key::ProtoPort(a, b) => Derived::ProtoPort(a, b),
            Key::Ip(a) => Derived::Ip(a),
            Key::Allow(a) => Derived::Allow(a),
            Key::SamePair(a) => Derived::SamePair(a),
            Key::IpSlot(a, b, c) => Derived::IpSlot(a, b, c),
            Key::PortSlot(a, b) => Derived::PortSlot(a, b),
            Key::Turn(a) => Derived::Turn(a),
            Key::Cidr(a) => Derived::Cidr(a),
        }
    }

    #[test]
    fn keys_order_as_the_derived_order_would() {
        let ips: Vec<IpAddr> = vec![
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 1, 0).into(),
            Ipv4Addr::new(172, 20, 0, 9).into(),
            Ipv4Addr::new(255, 0, 0, 0).into(),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100).into(),
            Ipv6Addr::LOCALHOST.into(),
        ];
        let protos = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];
        let mut keys = Vec::new();
        for ip in &ips {
            keys.push(Key::Ip(*ip));
            keys.push(Key::SamePair(*ip));
            keys.push(Key::Cidr(IpNet::from(*ip)));
            for proto in protos {
                for port in [1u16, 80, 256, 65535] {
                    keys.push(Key::IpProtoPort(*ip, proto, port));
                    keys.push(Key::ProtoPort(proto, port));
                    keys.push(Key::Allow(Box::new((*ip, proto, port, IpNet::from(ips[0])))));
                    for slot in [0u32, 1, 70_000, u32::MAX] {
                        keys.push(Key::IpSlot(*ip, port, slot));
                        keys.push(Key::PortSlot(port, slot));
                        keys.push(Key::Turn(slot ^ u32::from(port)));
                    }
                }
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(a.cmp(b), derived(a).cmp(&derived(b)), "{a:?} against {b:?}");
            }
        }
    }
}
