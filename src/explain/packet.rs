//! The packet `explain` follows: the first packet of a new connection, its headers as the
//! rules load them, and what the rules did to it (DNAT, mark, masquerade, affinity).

use crate::netlink::abi::IPS_DST_NAT;
use crate::nft::compile::SetSpec;
use crate::nft::compile::expr::Base;
use std::net::IpAddr;
use std::sync::Arc;

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Source address.
    pub saddr: IpAddr,
    /// Destination address (the endpoint's, once DNAT happened).
    pub daddr: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The interface it came in on; `None` for a packet this node sends.
    pub iif: Option<String>,
    /// The packet mark.
    pub mark: u32,
    /// Conntrack status bits.
    pub ct_status: u32,
    /// The node's own addresses (where `fib … type local` holds).
    pub local: Arc<Vec<IpAddr>>,
    /// Whether DNAT happened.
    pub dnat: bool,
    /// Whether it was masqueraded.
    pub masquerade: bool,
    /// Affinity sets the client was remembered in.
    pub remembered: Vec<String>,
}

impl Packet {
    /// The bytes of `base`'s header that rules read (addresses, protocol, ports).
    pub fn header(&self, base: Base) -> Vec<u8> {
        match base {
            Base::Transport => {
                let mut h = vec![0u8; 20];
                h[0..2].copy_from_slice(&self.sport.to_be_bytes());
                h[2..4].copy_from_slice(&self.dport.to_be_bytes());
                h
            }
            Base::Network => match (self.saddr, self.daddr) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    let mut h = vec![0u8; 20];
                    h[0] = 0x45;
                    h[9] = self.proto;
                    h[12..16].copy_from_slice(&s.octets());
                    h[16..20].copy_from_slice(&d.octets());
                    h
                }
                (s, d) => {
                    let mut h = vec![0u8; 40];
                    h[0] = 0x60;
                    h[6] = self.proto;
                    h[8..24].copy_from_slice(&v6(s));
                    h[24..40].copy_from_slice(&v6(d));
                    h
                }
            },
        }
    }

    /// Whether `addr` is one of this node's (or loopback).
    pub fn is_local(&self, addr: IpAddr) -> bool {
        addr.is_loopback() || self.local.contains(&addr)
    }

    /// Destination NAT to `ip` (register bytes) and `port`.
    pub fn dnat(&mut self, ip: &[u8], port: Option<u16>) -> Result<(), String> {
        self.daddr = match ip.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(ip).map_err(|_| "a DNAT address")?),
            _ => IpAddr::from(<[u8; 16]>::try_from(ip).map_err(|_| "a DNAT address")?),
        };
        if let Some(p) = port {
            self.dport = p;
        }
        self.dnat = true;
        self.ct_status |= IPS_DST_NAT;
        Ok(())
    }
}

fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V6(v) => v.octets(),
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
    }
}

/// The register bytes each field of a set's key takes (one field unless it is a
/// concatenation whose lengths the declaration gives).
pub fn field_widths(spec: &SetSpec) -> Vec<usize> {
    match spec.concat.as_slice() {
        [] => vec![spec.key.1 as usize],
        lens => lens.iter().map(|l| (*l as usize).next_multiple_of(4)).collect(),
    }
}
