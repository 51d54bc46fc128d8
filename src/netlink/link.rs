//! Network interfaces over rtnetlink: one found by name with its kind, and deleted by index.
//! The takeover uses it to remove the `kube-ipvs0` dummy interface that upstream
//! kube-proxy's IPVS mode leaves holding every service IP, without running `ip`.

use super::abi::{IFINFOMSG_LEN, IFLA_IFNAME, IFLA_INFO_KIND, IFLA_LINKINFO, NETLINK_ROUTE, RTM_DELLINK, RTM_GETLINK};
use super::attr::{self, put_str};
use super::{NLM_F_ACK, RECV_TIMEOUT, exchange, msg, sock};
use std::io;

/// An interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its index.
    pub index: i32,
    /// Its name.
    pub name: String,
    /// Its kind (`dummy`, `veth`, `bridge`…); `None` for a device without one (`lo`, a
    /// physical NIC).
    pub kind: Option<String>,
}

/// The interface called `name` in this network namespace, if there is one.
pub fn find(name: &str) -> io::Result<Option<Link>> {
    let mut attrs = Vec::new();
    put_str(&mut attrs, IFLA_IFNAME, name);
    match request(RTM_GETLINK, 0, 0, &attrs) {
        Ok(Some(reply)) => Ok(Some(parse_link(&reply)?)),
        Ok(None) => Err(io::Error::other("the kernel answered RTM_GETLINK without the link")),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The name of the interface with index `index`, if there is one (what a packet trace's
/// interface index means).
pub fn name_of(index: u32) -> io::Result<Option<String>> {
    let Ok(index) = i32::try_from(index) else { return Ok(None) };
    match request(RTM_GETLINK, index, 0, &[]) {
        Ok(Some(reply)) => Ok(Some(parse_link(&reply)?.name)),
        Ok(None) => Err(io::Error::other("the kernel answered RTM_GETLINK without the link")),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes the interface with index `index`; with it go its addresses and routes.
pub fn delete(index: i32) -> io::Result<()> {
    request(RTM_DELLINK, index, NLM_F_ACK, &[]).map(|_| ())
}

/// Sends one request about interface `index` and waits for its answer: the reply's payload
/// (after the netlink header), or `None` for a plain acknowledgement.
fn request(kind: u16, index: i32, flags: u16, attrs: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let fd = sock::open(NETLINK_ROUTE, RECV_TIMEOUT)?;
    const SEQ: u32 = 1;
    let mut msg = Vec::with_capacity(64);
    let start = msg::start(&mut msg, kind, flags, SEQ);
    let mut ifinfo = [0u8; IFINFOMSG_LEN];
    ifinfo[4..8].copy_from_slice(&index.to_ne_bytes());
    msg.extend_from_slice(&ifinfo);
    msg.extend_from_slice(attrs);
    msg::finish(&mut msg, start);
    exchange(&fd, &msg, SEQ)
}

/// A `RTM_NEWLINK` message's index and kind.
fn parse_link(body: &[u8]) -> io::Result<Link> {
    let (head, attrs) = match body.split_at_checked(IFINFOMSG_LEN) {
        Some(parts) => parts,
        None => return Err(io::Error::other("a link message shorter than its header")),
    };
    let index = i32::from_ne_bytes([head[4], head[5], head[6], head[7]]);
    // Looked up no further than a malformed attribute: what follows one is not trusted.
    let kind = attr::find(attrs, IFLA_LINKINFO).and_then(|info| attr::find(info, IFLA_INFO_KIND)).map(attr::lossy);
    let name = attr::find(attrs, IFLA_IFNAME).map(attr::lossy).unwrap_or_default();
    Ok(Link { index, name, kind })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::abi::NLA_F_NESTED;
    use crate::netlink::attr::put;

    #[test]
    fn parses_a_links_index_and_kind() {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body[4..8].copy_from_slice(&7i32.to_ne_bytes());
        put(&mut body, IFLA_IFNAME, b"kube-ipvs0\0");
        let mut info = Vec::new();
        put(&mut info, IFLA_INFO_KIND, b"dummy\0");
        put(&mut body, IFLA_LINKINFO | NLA_F_NESTED, &info);
        assert_eq!(
            parse_link(&body).unwrap(),
            Link { index: 7, name: "kube-ipvs0".into(), kind: Some("dummy".into()) }
        );
        body.truncate(IFINFOMSG_LEN);
        assert_eq!(parse_link(&body).unwrap(), Link { index: 7, name: String::new(), kind: None });
    }

    #[test]
    fn loopback_is_found_without_a_kind_and_a_missing_link_is_none() {
        let lo = find("lo").expect("RTM_GETLINK lo").expect("every namespace has lo");
        assert!(lo.index > 0 && lo.kind.is_none(), "{lo:?}");
        assert_eq!(find("no-such-link0").expect("RTM_GETLINK"), None);
    }
}
