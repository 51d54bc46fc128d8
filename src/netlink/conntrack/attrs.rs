//! ctnetlink's wire format, the part the cleanup reads and writes: an entry's tuples decoded
//! with every length checked, and messages and tuples encoded.

use super::super::attr::{iter, put};
use super::super::{NfFamily, msg};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::netlink::abi::{
    CTA_IP_V4_DST, CTA_IP_V4_SRC, CTA_IP_V6_DST, CTA_IP_V6_SRC, CTA_PROTO_DST_PORT, CTA_PROTO_NUM, CTA_PROTO_SRC_PORT,
    CTA_TUPLE_IP, CTA_TUPLE_ORIG, CTA_TUPLE_PROTO, CTA_TUPLE_REPLY, CTA_ZONE, NFNL_SUBSYS_CTNETLINK, NLA_F_NESTED,
};
use crate::netlink::attr::Malformed;

/// One conntrack entry as a dump shows it: what the cleanup reads, and its original tuple as
/// the kernel sent it, which is what deleting it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The IP protocol (`IPPROTO_UDP`…).
    pub proto: u8,
    /// The original direction's destination (a service address, before DNAT); port 0 for
    /// protocols without ports.
    pub orig_dst: SocketAddr,
    /// The reply direction's source (the endpoint the flow was sent to).
    pub reply_src: SocketAddr,
    /// The conntrack zone (0 for the default).
    pub zone: u16,
    /// The original tuple attribute's payload.
    pub(super) orig: &'a [u8],
}

/// A tuple's protocol and its source and destination.
fn tuple(payload: &[u8], v6: bool) -> Result<(u8, SocketAddr, SocketAddr), Malformed> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, 0, 0);
    for a in iter(payload) {
        match a? {
            (CTA_TUPLE_IP, ips) => {
                for ip in iter(ips) {
                    match (ip?, v6) {
                        ((CTA_IP_V4_SRC, b), false) => src = Some(ipv4(b)?),
                        ((CTA_IP_V4_DST, b), false) => dst = Some(ipv4(b)?),
                        ((CTA_IP_V6_SRC, b), true) => src = Some(ipv6(b)?),
                        ((CTA_IP_V6_DST, b), true) => dst = Some(ipv6(b)?),
                        _ => {}
                    }
                }
            }
            (CTA_TUPLE_PROTO, p) => {
                for a in iter(p) {
                    match a? {
                        (CTA_PROTO_NUM, [n]) => proto = Some(*n),
                        (CTA_PROTO_NUM, _) => return Err(Malformed("a protocol number is not one byte")),
                        (CTA_PROTO_SRC_PORT, b) => sport = port(b)?,
                        (CTA_PROTO_DST_PORT, b) => dport = port(b)?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let (Some(src), Some(dst), Some(proto)) = (src, dst, proto) else {
        return Err(Malformed("a tuple lacks an address or the protocol"));
    };
    Ok((proto, SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
}

fn ipv4(b: &[u8]) -> Result<IpAddr, Malformed> {
    let b: [u8; 4] = b.try_into().map_err(|_| Malformed("an IPv4 address is not 4 bytes"))?;
    Ok(Ipv4Addr::from(b).into())
}

fn ipv6(b: &[u8]) -> Result<IpAddr, Malformed> {
    let b: [u8; 16] = b.try_into().map_err(|_| Malformed("an IPv6 address is not 16 bytes"))?;
    Ok(Ipv6Addr::from(b).into())
}

fn port(b: &[u8]) -> Result<u16, Malformed> {
    let b: [u8; 2] = b.try_into().map_err(|_| Malformed("a port is not 2 bytes"))?;
    Ok(u16::from_be_bytes(b))
}

/// Decodes one entry of a dump (the message body: the nfgenmsg, then attributes).
pub fn decode(body: &[u8]) -> Result<Entry<'_>, Malformed> {
    let v6 = match body.first() {
        Some(&f) if f == NfFamily::Ip as u8 => false,
        Some(&f) if f == NfFamily::Ip6 as u8 => true,
        _ => return Err(Malformed("not an IPv4 or IPv6 entry")),
    };
    let (mut orig, mut reply, mut zone) = (None, None, 0);
    for a in iter(body.get(4..).unwrap_or_default()) {
        match a? {
            (CTA_TUPLE_ORIG, t) => orig = Some(t),
            (CTA_TUPLE_REPLY, t) => reply = Some(t),
            (CTA_ZONE, z) => zone = port(z).map_err(|_| Malformed("a zone is not 2 bytes"))?,
            _ => {}
        }
    }
    let (Some(orig), Some(reply)) = (orig, reply) else {
        return Err(Malformed("an entry lacks a tuple"));
    };
    let (proto, _, orig_dst) = tuple(orig, v6)?;
    let (_, reply_src, _) = tuple(reply, v6)?;
    Ok(Entry { proto, orig_dst, reply_src, zone, orig })
}

/// Appends a netlink header and nfgenmsg for a ctnetlink message; `msg::finish` fills in the
/// length.
pub(super) fn begin(buf: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, family: NfFamily) -> usize {
    let start = msg::start(buf, (NFNL_SUBSYS_CTNETLINK << 8) | kind, flags, seq);
    msg::nfgen(buf, family as u8, 0);
    start
}

/// A tuple's attributes (without the enclosing one).
pub(super) fn encode_tuple(proto: u8, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut ips = Vec::new();
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            put(&mut ips, CTA_IP_V4_SRC, &s.octets());
            put(&mut ips, CTA_IP_V4_DST, &d.octets());
        }
        (s, d) => {
            put(&mut ips, CTA_IP_V6_SRC, &ipv6_octets(s));
            put(&mut ips, CTA_IP_V6_DST, &ipv6_octets(d));
        }
    }
    let mut l4 = Vec::new();
    put(&mut l4, CTA_PROTO_NUM, &[proto]);
    put(&mut l4, CTA_PROTO_SRC_PORT, &src.port().to_be_bytes());
    put(&mut l4, CTA_PROTO_DST_PORT, &dst.port().to_be_bytes());
    let mut t = Vec::new();
    put(&mut t, CTA_TUPLE_IP | NLA_F_NESTED, &ips);
    put(&mut t, CTA_TUPLE_PROTO | NLA_F_NESTED, &l4);
    t
}

fn ipv6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
    }
}
#[cfg(test)]
mod tests {
    use super::super::super::abi::NLM_F_REQUEST;
    use super::super::super::{NLM_F_ACK, attr, msg::messages};
    use super::super::NewFlow;
    use super::*;
    use crate::netlink::abi::{CTA_STATUS, IPCTNL_MSG_CT_DELETE, IPPROTO_UDP, IPS_ASSURED};

    /// A dump reply's body for `flow` (as the kernel writes one), with `zone`.
    fn reply_body(f: &NewFlow, zone: u16) -> Vec<u8> {
        let family = if f.orig_dst.is_ipv6() { NfFamily::Ip6 } else { NfFamily::Ip };
        let mut body = vec![family as u8, 0, 0, 0];
        put(&mut body, CTA_TUPLE_ORIG | NLA_F_NESTED, &encode_tuple(f.proto, f.orig_src, f.orig_dst));
        put(&mut body, CTA_TUPLE_REPLY | NLA_F_NESTED, &encode_tuple(f.proto, f.reply_src, f.reply_dst));
        put(&mut body, CTA_STATUS, &IPS_ASSURED.to_be_bytes());
        if zone != 0 {
            put(&mut body, CTA_ZONE, &zone.to_be_bytes());
        }
        body
    }

    fn flow(orig_dst: &str, reply_src: &str) -> NewFlow {
        let client: SocketAddr =
            if orig_dst.starts_with('[') { "[fd00::2]:40000" } else { "10.0.0.2:40000" }.parse().unwrap();
        NewFlow {
            proto: IPPROTO_UDP,
            orig_src: client,
            orig_dst: orig_dst.parse().unwrap(),
            reply_src: reply_src.parse().unwrap(),
            reply_dst: client,
            timeout: 30,
        }
    }

    #[test]
    fn decodes_what_a_dump_holds_in_both_families() {
        for f in [flow("172.30.0.10:53", "10.1.1.2:8080"), flow("[fd00:30::10]:53", "[fd00:10:1:1::2]:8080")] {
            let body = reply_body(&f, 7);
            let e = decode(&body).expect("a well-formed entry");
            assert_eq!((e.proto, e.orig_dst, e.reply_src, e.zone), (IPPROTO_UDP, f.orig_dst, f.reply_src, 7));
            assert_eq!(
                e.orig,
                &encode_tuple(f.proto, f.orig_src, f.orig_dst)[..],
                "the original tuple is kept as sent"
            );
        }
    }

    #[test]
    fn refuses_truncated_and_mis_sized_attributes() {
        let body = reply_body(&flow("172.30.0.10:53", "10.1.1.2:8080"), 0);
        for cut in [5, 9, 20, body.len() - 3] {
            assert!(decode(&body[..cut]).is_err(), "a body cut at {cut} bytes decoded");
        }
        // An IPv4 entry whose address attributes carry 16 bytes.
        let f = flow("[fd00:30::10]:53", "[fd00:10:1:1::2]:8080");
        let mut v6_as_v4 = reply_body(&f, 0);
        v6_as_v4[0] = NfFamily::Ip as u8;
        assert_eq!(decode(&v6_as_v4).err(), Some(Malformed("a tuple lacks an address or the protocol")));
        let mut bad_port = vec![NfFamily::Ip as u8, 0, 0, 0];
        let mut l4 = Vec::new();
        put(&mut l4, CTA_PROTO_NUM, &[IPPROTO_UDP]);
        put(&mut l4, CTA_PROTO_DST_PORT, &[0, 0, 53]);
        let mut t = Vec::new();
        put(&mut t, CTA_TUPLE_PROTO | NLA_F_NESTED, &l4);
        put(&mut bad_port, CTA_TUPLE_ORIG | NLA_F_NESTED, &t);
        put(&mut bad_port, CTA_TUPLE_REPLY | NLA_F_NESTED, &t);
        assert_eq!(decode(&bad_port).err(), Some(Malformed("a port is not 2 bytes")));
    }

    #[test]
    fn a_message_is_its_length_and_attributes_padded() {
        let mut buf = Vec::new();
        let start = begin(&mut buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK, 9, NfFamily::Ip6);
        put(&mut buf, CTA_ZONE, &3u16.to_be_bytes());
        msg::finish(&mut buf, start);
        assert_eq!(buf.len(), 16 + 4 + 8);
        let msg::Msg { kind, flags, body, seq, .. } = messages(&buf).next().expect("one message");
        assert_eq!((kind, flags, seq), ((1 << 8) | 2, NLM_F_REQUEST | NLM_F_ACK, 9));
        assert_eq!(attr::top(body, CTA_ZONE), Some(&[0u8, 3][..]));
    }
}
