//! ipsets over nfnetlink (the `IPSET` subsystem), without the `ipset` program: whether a set
//! exists (`ipset list -n NAME`) and destroying one by name (`ipset destroy NAME`). The
//! takeover destroys upstream kube-proxy's IPVS-mode sets with it.

use super::abi::{
    IPSET_ATTR_PROTOCOL, IPSET_ATTR_SETNAME, IPSET_CMD_DESTROY, IPSET_CMD_HEADER, IPSET_ERR_BUSY, IPSET_MAXNAMELEN,
    IPSET_PROTOCOL_MIN, NFNL_SUBSYS_IPSET, NFPROTO_IPV4, NLM_F_ACK, NLM_F_EXCL,
};
use super::{Socket, attr, msg};
use std::io;

/// What became of one set a destruction named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destroyed {
    /// It existed and is gone.
    Gone,
    /// There was no such set.
    Absent,
    /// Something still references it (an iptables rule's `-m set`, a `list:set`); it stays.
    Busy,
}

/// A socket for ipset requests.
pub struct Sets {
    sock: Socket,
}

impl Sets {
    /// Opens one; every answer is awaited at most [`super::RECV_TIMEOUT`].
    pub fn open() -> io::Result<Sets> {
        Ok(Sets { sock: Socket::open()? })
    }

    /// Whether set `name` exists. A kernel without ipset answers `EINVAL` (no such
    /// nfnetlink subsystem), returned as it is.
    pub fn exists(&mut self, name: &str) -> io::Result<bool> {
        match self.request(IPSET_CMD_HEADER, name) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Destroys set `name`; a set that is absent or still referenced is said so, not an error.
    pub fn destroy(&mut self, name: &str) -> io::Result<Destroyed> {
        match self.request(IPSET_CMD_DESTROY, name) {
            Ok(()) => Ok(Destroyed::Gone),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Destroyed::Absent),
            Err(e) if e.raw_os_error() == Some(IPSET_ERR_BUSY) => Ok(Destroyed::Busy),
            Err(e) => Err(e),
        }
    }

    fn request(&mut self, cmd: u16, name: &str) -> io::Result<()> {
        check_name(name)?;
        self.sock.seq = self.sock.seq.wrapping_add(1);
        self.sock.send(&message(cmd, name, self.sock.seq))?;
        self.sock.collect_replies(self.sock.seq).map(|_| ())
    }
}

/// Refuses, before any request, a name the kernel could not hold: one of
/// `IPSET_MAXNAMELEN` bytes or more (its NUL included, it must fit), or with a NUL inside,
/// which would cut it to another set's name, or an empty one.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= IPSET_MAXNAMELEN || name.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not an ipset name: {name:?}")));
    }
    Ok(())
}

/// An acknowledged ipset request `cmd` about set `name`: the protocol version and the name.
/// `NLM_F_EXCL` makes an absent set an error (`ENOENT`) rather than a silent success (the
/// kernel reads its absence as ipset's `-exist`). The name is always sent: a `DESTROY`
/// without one destroys every set.
fn message(cmd: u16, name: &str, seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    let start = msg::start(&mut buf, (NFNL_SUBSYS_IPSET << 8) | cmd, NLM_F_ACK | NLM_F_EXCL, seq);
    // nfgenmsg: the family ipset(8) sends; resource id 0.
    msg::nfgen(&mut buf, NFPROTO_IPV4, 0);
    attr::put_with(&mut buf, IPSET_ATTR_PROTOCOL, |b| b.push(IPSET_PROTOCOL_MIN));
    attr::put_str(&mut buf, IPSET_ATTR_SETNAME, name);
    msg::finish(&mut buf, start);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destroy_request_is_what_ipset_destroy_sends() {
        // `ipset destroy KUBE-CLUSTER-IP` (ipset 7.17, Linux 6.18) as strace shows it: a
        // 48-byte message of type 0x0603 (subsystem 6, command 3), an nfgenmsg for AF_INET,
        // then PROTOCOL (len 5, u8, 3 bytes padding) and SETNAME (len 20, the name and its
        // NUL); flags REQUEST|ACK|EXCL (0x205). One byte differs from ipset's: it sends
        // protocol 7, which a kernel of protocol 6 refuses, where 6 is the minimum every
        // kernel takes for DESTROY and HEADER.
        let mut want: Vec<u8> = Vec::new();
        want.extend_from_slice(&48u32.to_ne_bytes());
        want.extend_from_slice(&0x0603u16.to_ne_bytes());
        want.extend_from_slice(&0x0205u16.to_ne_bytes());
        want.extend_from_slice(&9u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[2, 0, 0, 0]);
        want.extend_from_slice(&5u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&[6, 0, 0, 0]);
        want.extend_from_slice(&20u16.to_ne_bytes());
        want.extend_from_slice(&2u16.to_ne_bytes());
        want.extend_from_slice(b"KUBE-CLUSTER-IP\0");
        assert_eq!(message(IPSET_CMD_DESTROY, "KUBE-CLUSTER-IP", 9), want);
    }

    #[test]
    fn names_too_long_or_with_a_nul_are_refused_before_any_request() {
        let kind = |name: &str| check_name(name).map_err(|e| e.kind());
        assert_eq!(kind(&"K".repeat(IPSET_MAXNAMELEN - 1)), Ok(()), "31 bytes and the NUL fit");
        assert_eq!(kind(&"K".repeat(IPSET_MAXNAMELEN)), Err(io::ErrorKind::InvalidInput));
        assert_eq!(kind("KUBE-CLUSTER-IP\0x"), Err(io::ErrorKind::InvalidInput), "would name KUBE-CLUSTER-IP");
        assert_eq!(kind(""), Err(io::ErrorKind::InvalidInput));
    }
}
