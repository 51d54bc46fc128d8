//! IPVS over generic netlink, without `ipvsadm`: the `IPVS` family resolved through the
//! generic netlink controller, and every virtual server flushed as `ipvsadm --clear` does
//! (libipvs's `ipvs_flush`). The takeover flushes what upstream kube-proxy's IPVS mode left.

use super::abi::{
    CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_CMD_GETFAMILY, CTRL_VERSION, GENL_ID_CTRL, IPVS_CMD_FLUSH,
    IPVS_GENL_NAME, IPVS_GENL_VERSION, NETLINK_GENERIC, NLM_F_ACK,
};
use super::{RECV_TIMEOUT, attr, exchange, msg, sock};
use std::io;
use std::os::fd::OwnedFd;

/// What a flush found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// The kernel has no IPVS family (no `ip_vs`, and none could be loaded): nothing to flush.
    NoIpvs,
    /// Every virtual server of this network namespace is gone.
    Flushed,
}

/// A generic netlink socket with its own sequence numbers.
struct Genl {
    fd: OwnedFd,
    seq: u32,
}

impl Genl {
    fn open() -> io::Result<Genl> {
        Ok(Genl { fd: sock::open(NETLINK_GENERIC, RECV_TIMEOUT)?, seq: 0 })
    }

    fn ask(&mut self, msg: impl FnOnce(u32) -> Vec<u8>) -> io::Result<Option<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        exchange(&self.fd, &msg(self.seq), self.seq)
    }

    /// The id of family `IPVS`, `None` when the kernel has none. The controller loads the
    /// `ip_vs` module by its family alias where modules can load, as upstream's `modprobe`.
    fn ipvs_family(&mut self) -> io::Result<Option<u16>> {
        match self.ask(getfamily_message) {
            Ok(Some(reply)) => family_id(&reply).map(Some),
            Ok(None) => Err(io::Error::other("the controller acknowledged CTRL_CMD_GETFAMILY without the family")),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The id of IPVS's generic netlink family, `None` when the kernel has none.
pub fn family() -> io::Result<Option<u16>> {
    Genl::open()?.ipvs_family()
}

/// Deletes every IPVS virtual server (with its real servers) of this network namespace.
pub fn flush() -> io::Result<Flush> {
    let mut genl = Genl::open()?;
    let Some(family) = genl.ipvs_family()? else { return Ok(Flush::NoIpvs) };
    genl.ask(|seq| flush_message(family, seq))?;
    Ok(Flush::Flushed)
}

/// `CTRL_CMD_GETFAMILY` for `IPVS`, as libnl's `genl_ctrl_resolve` sends it.
fn getfamily_message(seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(32);
    let start = msg::start(&mut buf, GENL_ID_CTRL, NLM_F_ACK, seq);
    buf.extend_from_slice(&[CTRL_CMD_GETFAMILY, CTRL_VERSION, 0, 0]);
    attr::put_str(&mut buf, CTRL_ATTR_FAMILY_NAME, IPVS_GENL_NAME);
    msg::finish(&mut buf, start);
    buf
}

/// `IPVS_CMD_FLUSH` to family `family`: a generic netlink header and nothing else.
fn flush_message(family: u16, seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(20);
    let start = msg::start(&mut buf, family, NLM_F_ACK, seq);
    buf.extend_from_slice(&[IPVS_CMD_FLUSH, IPVS_GENL_VERSION, 0, 0]);
    msg::finish(&mut buf, start);
    buf
}

/// The family id in the controller's `CTRL_CMD_NEWFAMILY` reply (after its genlmsghdr).
fn family_id(reply: &[u8]) -> io::Result<u16> {
    let attrs = attr::all(reply.get(4..).unwrap_or_default())?;
    match attr::get(&attrs, CTRL_ATTR_FAMILY_ID) {
        Some(&[a, b]) => Ok(u16::from_ne_bytes([a, b])),
        _ => Err(io::Error::other("the controller's reply lacks the family id")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A netlink header as the kernel reads it: length, type, flags, sequence, port.
    fn header(len: u32, kind: u16, flags: u16, seq: u32) -> Vec<u8> {
        [&len.to_ne_bytes()[..], &kind.to_ne_bytes(), &flags.to_ne_bytes(), &seq.to_ne_bytes(), &[0; 4]].concat()
    }

    #[test]
    fn the_flush_is_what_ipvsadm_clear_sends() {
        // libipvs's ipvs_flush: genlmsg_put(msg, NL_AUTO_PID, NL_AUTO_SEQ, family, 0, 0,
        // IPVS_CMD_FLUSH, IPVS_GENL_VERSION), sent by nl_send_auto_complete, which adds
        // NLM_F_REQUEST and NLM_F_ACK: 20 bytes, the header with the family id as its type,
        // then cmd 17, version 1, two reserved bytes, no attribute. libnl writes its socket's
        // port id where this leaves 0, which the kernel fills in (it ignores the field).
        let want = [header(20, 0x24, 0x0005, 7), vec![17, 1, 0, 0]].concat();
        assert_eq!(flush_message(0x24, 7), want);
    }

    #[test]
    fn the_family_lookup_is_what_libnl_sends() {
        // genl_ctrl_resolve(sock, "IPVS"): type GENL_ID_CTRL (0x10), REQUEST|ACK, cmd
        // CTRL_CMD_GETFAMILY (3), version 1, then CTRL_ATTR_FAMILY_NAME (2): len 9, "IPVS\0",
        // 3 bytes padding; 32 bytes in all.
        let mut want = [header(32, 0x10, 0x0005, 3), vec![3, 1, 0, 0]].concat();
        want.extend_from_slice(&9u16.to_ne_bytes());
        want.extend_from_slice(&2u16.to_ne_bytes());
        want.extend_from_slice(b"IPVS\0\0\0\0");
        assert_eq!(getfamily_message(3), want);
    }

    #[test]
    fn reads_the_family_id_from_the_controllers_reply() {
        let mut reply = vec![1, 2, 0, 0];
        attr::put_str(&mut reply, CTRL_ATTR_FAMILY_NAME, "IPVS");
        attr::put_with(&mut reply, CTRL_ATTR_FAMILY_ID, |b| b.extend_from_slice(&0x24u16.to_ne_bytes()));
        assert_eq!(family_id(&reply).unwrap(), 0x24);
        assert!(family_id(&[1, 2, 0, 0]).is_err());
        assert!(family_id(&[1, 2, 0, 0, 200, 0, 1, 0]).is_err(), "an attribute overrunning the reply");
    }

    #[test]
    fn a_known_family_resolves_through_the_same_lookup() {
        // The controller itself is always there: asking for it proves the lookup's bytes
        // and the reply's parsing against the real kernel, IPVS or not.
        let mut genl = Genl::open().expect("generic netlink socket");
        let reply = genl
            .ask(|seq| {
                let mut buf = Vec::new();
                let start = msg::start(&mut buf, GENL_ID_CTRL, NLM_F_ACK, seq);
                buf.extend_from_slice(&[CTRL_CMD_GETFAMILY, CTRL_VERSION, 0, 0]);
                attr::put_str(&mut buf, CTRL_ATTR_FAMILY_NAME, "nlctrl");
                msg::finish(&mut buf, start);
                buf
            })
            .expect("CTRL_CMD_GETFAMILY nlctrl")
            .expect("a reply");
        assert_eq!(family_id(&reply).unwrap(), GENL_ID_CTRL);
    }
}
