//! The netlink floor, below everything that talks to the kernel, importing nothing of the
//! crate: sockets (`sock`, the crate's only `unsafe`), the kernel's numbers (`abi`), message
//! headers (`msg`) and attributes (`attr`) written and read, nf_tables' data values and
//! verdicts (`data`), nftables' user data records (`udata`), and the families. nf_tables:
//! the cheap questions the proxy asks without `nft` (the ruleset generation, whether a table or chain holds what
//! it should, what a table holds and which tables and chains exist (`dump`), where rules jump
//! (`rules`), the stream of change events with the process that committed each generation),
//! packet traces (`trace`) and sending a batch (`send`); rtnetlink, finding and deleting a network interface (`link`);
//! ctnetlink, the conntrack table (`conntrack`); ipset and IPVS, what kube-proxy left (`ipset`,
//! `ipvs`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

pub(crate) mod abi;
pub(crate) mod attr;
pub mod conntrack;
pub(crate) mod data;
mod dump;
pub mod elements;
pub mod ipset;
pub mod ipvs;
pub mod link;
pub(crate) mod msg;
mod rules;
pub mod send;
#[allow(unsafe_code)]
pub mod sock;
mod state;
pub mod trace;
pub(crate) mod udata;

pub use dump::{Listed, TableObject};
pub use rules::RuleJumps;
pub use state::{ChainListing, Hook, ListedExpr, RuleListing, SetSpec};

use abi::{
    NFNL_SUBSYS_NFTABLES, NFNLGRP_NFTABLES, NFT_MSG_DELTABLE, NFT_MSG_GETGEN, NFT_MSG_GETRULE, NFT_MSG_GETTABLE,
    NFT_MSG_NEWGEN, NFT_MSG_TRACE, NFTA_GEN_ID, NFTA_GEN_PROC_PID, NFTA_RULE_CHAIN, NFTA_TABLE_NAME, NLM_F_ACK,
    NLM_F_DUMP, NLM_F_MULTI, NLMSG_DONE, NLMSG_ERROR,
};

/// Address family of a table, as nfnetlink numbers it (`NFPROTO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NfFamily {
    /// `inet`: IPv4 and IPv6 together.
    Inet = abi::NFPROTO_INET as isize,
    /// `ip`.
    Ip = abi::NFPROTO_IPV4 as isize,
    /// `arp`.
    Arp = abi::NFPROTO_ARP as isize,
    /// `netdev`.
    Netdev = abi::NFPROTO_NETDEV as isize,
    /// `bridge`.
    Bridge = abi::NFPROTO_BRIDGE as isize,
    /// `ip6`.
    Ip6 = abi::NFPROTO_IPV6 as isize,
}

impl NfFamily {
    /// The family of a table the kernel reported; `None` for a number this proxy does not know.
    pub fn from_number(n: u8) -> Option<NfFamily> {
        [NfFamily::Inet, NfFamily::Ip, NfFamily::Arp, NfFamily::Netdev, NfFamily::Bridge, NfFamily::Ip6]
            .into_iter()
            .find(|f| *f as u8 == n)
    }

    /// The family as nft writes it (`ip`, `ip6`…).
    pub fn word(self) -> &'static str {
        match self {
            NfFamily::Inet => "inet",
            NfFamily::Ip => "ip",
            NfFamily::Arp => "arp",
            NfFamily::Netdev => "netdev",
            NfFamily::Bridge => "bridge",
            NfFamily::Ip6 => "ip6",
        }
    }
}

impl std::fmt::Display for NfFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// One nftables change notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An object (table, chain, rule, set, element…) of `table` changed; `deleted_table`
    /// says the table itself went.
    Object {
        /// Table family.
        family: u8,
        /// Table name.
        table: String,
        /// The table itself was deleted.
        deleted_table: bool,
    },
    /// A transaction committed as generation `id` by process `pid` over the netlink socket
    /// with port id `port`.
    Generation {
        /// Generation id.
        id: u32,
        /// Committing process (thread), as the kernel's initial PID namespace numbers it.
        pid: u32,
        /// The committing socket's port id.
        port: u32,
    },
    /// The kernel dropped notifications (receive buffer overrun): anything may have changed.
    Overrun,
}

/// A netlink socket to nf_tables.
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    /// Opens a socket for requests.
    pub fn open() -> io::Result<Socket> {
        Ok(Socket { fd: sock::open(abi::NETLINK_NETFILTER, RECV_TIMEOUT)?, seq: 1 })
    }

    /// Opens a socket subscribed to nftables change notifications, with a large receive
    /// buffer so a big transaction's burst of events is not lost.
    pub fn monitor() -> io::Result<Socket> {
        let s = Socket::open()?;
        sock::bind_groups(&s.fd, 1 << (NFNLGRP_NFTABLES - 1))?;
        // Root may exceed rmem_max; fall back to the ordinary limit when not allowed.
        let size = 64 << 20;
        if s.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
            s.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, size)?;
        }
        Ok(s)
    }

    /// The socket's descriptor, for `set_notifications` from another thread.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    fn setsockopt(&self, level: i32, name: i32, value: libc::c_int) -> io::Result<()> {
        sock::set_option(self.fd.as_raw_fd(), level, name, value)
    }

    /// The current ruleset generation; it changes with every committed transaction.
    pub fn generation(&mut self) -> io::Result<u32> {
        let replies = self.request(NFT_MSG_GETGEN, 0, 0, &[])?;
        replies
            .iter()
            .find_map(|m| attr::top(m, NFTA_GEN_ID).and_then(attr::be32))
            .ok_or_else(|| io::Error::other("no generation in reply"))
    }

    /// Whether table `name` of `family` exists.
    pub fn table_exists(&mut self, family: NfFamily, name: &str) -> io::Result<bool> {
        match self.request(NFT_MSG_GETTABLE, family as u8, 0, &[(NFTA_TABLE_NAME, name)]) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// How many rules chain `chain` of `table` holds; `None` if the table or chain is missing.
    pub fn rule_count(&mut self, family: NfFamily, table: &str, chain: &str) -> io::Result<Option<usize>> {
        let attrs = [(NFTA_TABLE_NAME, table), (NFTA_RULE_CHAIN, chain)];
        match self.request(NFT_MSG_GETRULE, family as u8, NLM_F_DUMP, &attrs) {
            Ok(rules) => Ok(Some(rules.len())),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends one request and collects the payloads of its replies (until ACK or DONE).
    fn request(&mut self, kind: u16, family: u8, flags: u16, attrs: &[(u16, &str)]) -> io::Result<Vec<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        let mut buf = Vec::with_capacity(64);
        let start = msg::start(&mut buf, (NFNL_SUBSYS_NFTABLES << 8) | kind, NLM_F_ACK | flags, self.seq);
        msg::nfgen(&mut buf, family, 0);
        for (t, value) in attrs {
            attr::put_str(&mut buf, *t, value);
        }
        msg::finish(&mut buf, start);
        self.send(&buf)?;
        self.collect_replies(self.seq)
    }

    fn send(&self, buf: &[u8]) -> io::Result<()> {
        sock::send(&self.fd, buf)
    }

    fn collect_replies(&self, seq: u32) -> io::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = self.recv(&mut buf)?;
            // Replies to an earlier request (a late ACK after a dump) carry another sequence number.
            for msg::Msg { kind, flags, body, .. } in msg::messages(&buf[..n]).filter(|m| m.seq == seq) {
                match kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let code = msg::error_code(body);
                        if code != 0 {
                            return Err(io::Error::from_raw_os_error(-code));
                        }
                        if flags & NLM_F_MULTI == 0 {
                            return Ok(out);
                        }
                    }
                    _ => out.push(body.to_vec()),
                }
            }
        }
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        sock::recv(&self.fd, buf)
    }

    /// Waits up to `timeout` for change notifications; empty when none arrived.
    pub fn events(&self, timeout: Duration) -> io::Result<Vec<Event>> {
        if !sock::readable(&self.fd, timeout) {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; 1 << 16];
        match self.recv(&mut buf) {
            Ok(n) => Ok(msg::messages(&buf[..n]).filter_map(|m| event(m.kind, m.port, m.body)).collect()),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(vec![Event::Overrun]),
            Err(e) => Err(e),
        }
    }
}

/// Turns nftables notifications on or off for the monitor socket `fd` (which must be open).
/// While no socket listens, the kernel does not build a notification per changed object,
/// which for a big transaction is most of its cost.
pub fn set_notifications(fd: std::os::fd::RawFd, on: bool) -> io::Result<()> {
    let opt = if on { libc::NETLINK_ADD_MEMBERSHIP } else { libc::NETLINK_DROP_MEMBERSHIP };
    sock::set_option(fd, libc::SOL_NETLINK, opt, NFNLGRP_NFTABLES as libc::c_int)
}

/// Sends the one request `msg` (sequence number `seq`) on `fd` and waits for its answer: the
/// first reply's payload (after the netlink header), `None` for a plain acknowledgement, or
/// the kernel's refusal as an error. Every receive is bounded by the socket's timeout.
fn exchange(fd: &OwnedFd, msg: &[u8], seq: u32) -> io::Result<Option<Vec<u8>>> {
    sock::send(fd, msg)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = sock::recv(fd, &mut buf)?;
        // Answers to an earlier request carry another sequence number.
        let Some(msg::Msg { kind, body, .. }) = msg::messages(&buf[..n]).find(|m| m.seq == seq) else { continue };
        if kind != NLMSG_ERROR {
            return Ok(Some(body.to_vec()));
        }
        let code = msg::error_code(body);
        return if code == 0 { Ok(None) } else { Err(io::Error::from_raw_os_error(-code)) };
    }
}

fn event(kind: u16, port: u32, body: &[u8]) -> Option<Event> {
    if kind >> 8 != NFNL_SUBSYS_NFTABLES {
        return None;
    }
    match kind & 0xff {
        NFT_MSG_NEWGEN => Some(Event::Generation {
            id: attr::top(body, NFTA_GEN_ID).and_then(attr::be32)?,
            pid: attr::top(body, NFTA_GEN_PROC_PID).and_then(attr::be32).unwrap_or(0),
            port,
        }),
        NFT_MSG_TRACE => None,
        msg => {
            // Every object message carries its table's name as attribute 1, as a table's does.
            let table = attr::lossy(attr::top(body, NFTA_TABLE_NAME)?);
            Some(Event::Object { family: *body.first()?, table, deleted_table: msg == NFT_MSG_DELTABLE })
        }
    }
}

/// The longest wait for the kernel's answer to a request: a reply that never comes fails the
/// sync (retried later) instead of freezing the sync thread.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(30);

pub use sock::set_receive_timeout;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_generation_notification() {
        let mut body = vec![0u8, 0, 0, 0];
        for (t, v) in [(NFTA_GEN_ID, 42u32), (NFTA_GEN_PROC_PID, 1234)] {
            body.extend_from_slice(&8u16.to_ne_bytes());
            body.extend_from_slice(&t.to_ne_bytes());
            body.extend_from_slice(&v.to_be_bytes());
        }
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN;
        assert_eq!(event(kind, 77, &body), Some(Event::Generation { id: 42, pid: 1234, port: 77 }));
    }
}
