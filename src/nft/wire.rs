//! Element-only transactions over netlink: the commonest partial sync (endpoints changed, the
//! service's chains did not) sent straight to nf_tables as one batch, without running `nft`,
//! whose cost grows with the table (it reads its cache of the table first). Also the deletion
//! of foreign stateful objects that `nft` 1.0.6 cannot delete by handle.
//!
//! The encoding is nftables' own: concatenated keys are fields padded to 4-byte registers,
//! addresses and ports in network order, `numgen` slots as host-order 32-bit integers,
//! verdicts as code plus chain, element comments as userdata. The real-kernel tests compare
//! what `nft` lists after this path with what it lists after the same change sent as text.

use super::netlink::sock;
use super::netlink::{NFTA_OBJ_HANDLE, NFTA_OBJ_TABLE, NFTA_OBJ_TYPE, NfFamily};
use crate::model::Family;
use crate::render::{Key, MapName, Value};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFT_MSG_DELOBJ: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_CREATE: u16 = 0x400;
const NLA_F_NESTED: u16 = 0x8000;
const NLMSG_ERROR: u16 = 2;
/// Elements per message: the element list is one attribute, whose length is 16 bits.
const ELEMENTS_PER_MESSAGE: usize = 256;

/// Whether a map's elements can go over this path (interval sets need ranges; they go via `nft`).
pub fn encodable(map: &MapName) -> bool {
    !map.is_interval()
}

/// One batch of element additions and deletions.
pub struct Batch {
    buf: Vec<u8>,
    seq: u32,
}

fn put_u16(buf: &mut Vec<u8>, v: u16) {
    buf.extend_from_slice(&v.to_ne_bytes());
}

fn pad(buf: &mut Vec<u8>) {
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// Writes an attribute whose payload `f` appends; nested attributes set `NLA_F_NESTED`.
pub(crate) fn attr(buf: &mut Vec<u8>, kind: u16, f: impl FnOnce(&mut Vec<u8>)) {
    let start = buf.len();
    buf.extend_from_slice(&[0, 0, 0, 0]);
    f(buf);
    let len = (buf.len() - start) as u16;
    buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    buf[start + 2..start + 4].copy_from_slice(&kind.to_ne_bytes());
    pad(buf);
}

/// Writes a NUL-terminated string attribute.
pub(crate) fn str_attr(buf: &mut Vec<u8>, kind: u16, s: &str) {
    attr(buf, kind, |b| {
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    });
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

impl Batch {
    /// An empty batch (begin marker written).
    pub fn new() -> Batch {
        let mut b = Batch { buf: Vec::new(), seq: 0 };
        b.message(NFNL_MSG_BATCH_BEGIN, 0, 0, |_| {});
        b
    }

    /// Appends one nf_tables message of type `kind` (`NLM_F_REQUEST` added to `flags`) for
    /// `family`, whose attributes `f` writes.
    pub(crate) fn message(&mut self, kind: u16, flags: u16, family: u8, f: impl FnOnce(&mut Vec<u8>)) {
        self.seq += 1;
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        // Batch markers are nfnetlink's own messages; the rest belong to nf_tables.
        let batch_marker = kind == NFNL_MSG_BATCH_BEGIN || kind == NFNL_MSG_BATCH_END;
        let full = if batch_marker { kind } else { (NFNL_SUBSYS_NFTABLES << 8) | kind };
        put_u16(&mut self.buf, full);
        put_u16(&mut self.buf, NLM_F_REQUEST | flags);
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        // nfgenmsg: family, version, res_id (the subsystem, for batch markers).
        self.buf.extend_from_slice(&[family, 0]);
        self.buf.extend_from_slice(&NFNL_SUBSYS_NFTABLES.to_be_bytes());
        f(&mut self.buf);
        let len = (self.buf.len() - start) as u32;
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    /// Adds (`add`) or deletes elements of `map` in `family`'s table `table`.
    pub fn elements<'e>(
        &mut self,
        family: Family,
        table: &str,
        map: &MapName,
        add: bool,
        elems: impl IntoIterator<Item = (&'e Key, &'e Value)>,
    ) {
        let fam = NfFamily::from(family) as u8;
        let (kind, flags) = if add { (NFT_MSG_NEWSETELEM, NLM_F_CREATE) } else { (NFT_MSG_DELSETELEM, 0) };
        let name = map.to_string();
        let mut elems = elems.into_iter().peekable();
        while elems.peek().is_some() {
            self.message(kind, flags | NLM_F_ACK, fam, |b| {
                str_attr(b, 1, table);
                str_attr(b, 2, &name);
                attr(b, 3 | NLA_F_NESTED, |b| {
                    for (key, value) in elems.by_ref().take(ELEMENTS_PER_MESSAGE) {
                        attr(b, 1 | NLA_F_NESTED, |b| element(b, map, key, if add { Some(value) } else { None }));
                    }
                });
            });
        }
    }

    /// Removes every element of `map` in `family`'s table `table`.
    pub fn flush(&mut self, family: Family, table: &str, map: &MapName) {
        let fam = NfFamily::from(family) as u8;
        let name = map.to_string();
        // A deletion naming no elements flushes the set.
        self.message(NFT_MSG_DELSETELEM, NLM_F_ACK, fam, |b| {
            str_attr(b, 1, table);
            str_attr(b, 2, &name);
        });
    }

    /// Deletes the stateful object of `NFT_OBJECT_*` type `kind` with handle `handle` from
    /// `family`'s table `table`.
    pub fn delete_object(&mut self, family: Family, table: &str, kind: u32, handle: u64) {
        let fam = NfFamily::from(family) as u8;
        self.message(NFT_MSG_DELOBJ, NLM_F_ACK, fam, |b| {
            str_attr(b, NFTA_OBJ_TABLE, table);
            attr(b, NFTA_OBJ_TYPE, |b| b.extend_from_slice(&kind.to_be_bytes()));
            attr(b, NFTA_OBJ_HANDLE, |b| b.extend_from_slice(&handle.to_be_bytes()));
        });
    }

    /// Whether anything but the begin marker was written.
    pub fn is_empty(&self) -> bool {
        self.seq <= 1
    }

    /// The batch with its end marker.
    pub fn finish(mut self) -> Vec<u8> {
        self.message(NFNL_MSG_BATCH_END, 0, 0, |_| {});
        self.buf
    }
}

fn element(b: &mut Vec<u8>, map: &MapName, key: &Key, value: Option<&Value>) {
    attr(b, 1 | NLA_F_NESTED, |b| attr(b, 1, |b| key_bytes(b, map, key)));
    let Some(value) = value else { return };
    let comment = match value {
        Value::None => return,
        Value::Goto(chain) => {
            attr(b, 2 | NLA_F_NESTED, |b| verdict(b, -4, Some(chain)));
            None
        }
        Value::Dispatch(chain, owner) => {
            attr(b, 2 | NLA_F_NESTED, |b| verdict(b, -4, Some(chain)));
            Some(owner)
        }
        Value::Drop(owner) => {
            attr(b, 2 | NLA_F_NESTED, |b| verdict(b, 0, None));
            Some(owner)
        }
        Value::Reject(owner) => {
            attr(b, 2 | NLA_F_NESTED, |b| verdict(b, -4, Some("reject-chain")));
            Some(owner)
        }
        Value::Endpoint(ip, port) => {
            attr(b, 2 | NLA_F_NESTED, |b| {
                attr(b, 1, |b| {
                    ip_bytes(b, ip);
                    field(b, &port.to_be_bytes());
                })
            });
            None
        }
    };
    if let Some(text) = comment.map(|o| crate::render::comment(o)) {
        // Userdata TLV: type 0 (comment), length, NUL-terminated text.
        attr(b, 6, |b| {
            b.push(0);
            b.push((text.len() + 1) as u8);
            b.extend_from_slice(text.as_bytes());
            b.push(0);
        });
    }
}

fn verdict(b: &mut Vec<u8>, code: i32, chain: Option<&str>) {
    attr(b, 2 | NLA_F_NESTED, |b| {
        attr(b, 1, |b| b.extend_from_slice(&code.to_be_bytes()));
        if let Some(chain) = chain {
            str_attr(b, 2, chain);
        }
    });
}

/// One concatenation field, padded to a 4-byte register.
fn field(b: &mut Vec<u8>, bytes: &[u8]) {
    b.extend_from_slice(bytes);
    pad(b);
}

fn ip_bytes(b: &mut Vec<u8>, ip: &std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => field(b, &v4.octets()),
        std::net::IpAddr::V6(v6) => field(b, &v6.octets()),
    }
}

fn proto_byte(p: &crate::model::Protocol) -> u8 {
    match p {
        crate::model::Protocol::Tcp => 6,
        crate::model::Protocol::Udp => 17,
        crate::model::Protocol::Sctp => 132,
    }
}

fn key_bytes(b: &mut Vec<u8>, _map: &MapName, key: &Key) {
    match key {
        Key::IpProtoPort(ip, proto, port) => {
            ip_bytes(b, ip);
            field(b, &[proto_byte(proto)]);
            field(b, &port.to_be_bytes());
        }
        Key::ProtoPort(proto, port) => {
            field(b, &[proto_byte(proto)]);
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
        // Not encodable here (see `encodable`); never reached.
        Key::Allow(..) | Key::Cidr(..) => {}
    }
}

/// A netlink socket kept open for element batches.
///
/// Closing a nf_tables socket makes the kernel wait for the previous commit's cleanup (an RCU
/// grace period, milliseconds in a VM), so a socket per batch would put that wait into every
/// partial sync. It is opened on first use, in the network namespace of the calling thread.
#[derive(Debug, Default)]
pub struct Sender {
    fd: std::cell::RefCell<Option<OwnedFd>>,
}

impl Sender {
    /// Sends a finished batch as one transaction and waits for the kernel's verdict. After an
    /// error the socket is dropped (unread answers may be left on it) and reopened next time.
    pub fn send(&self, batch: &[u8]) -> Result<(), super::NftError> {
        let mut slot = self.fd.borrow_mut();
        let fd = match slot.take() {
            Some(fd) => fd,
            None => open()?,
        };
        let result = send_on(&fd, batch);
        if result.is_ok() {
            *slot = Some(fd);
        }
        result
    }
}

fn open() -> Result<OwnedFd, super::NftError> {
    Ok(sock::open(sock::NETLINK_NETFILTER, super::netlink::RECV_TIMEOUT)?)
}

/// Sends a batch on `fd` and reads its acknowledgements.
fn send_on(fd: &OwnedFd, batch: &[u8]) -> Result<(), super::NftError> {
    // A big batch needs a big send buffer, and its acknowledgements a big receive buffer: each
    // is charged at several hundred bytes however small, and an overrun loses them.
    let acked = count_acked(batch);
    set_buffer(fd, libc::SO_SNDBUFFORCE, batch.len() + 4096);
    set_buffer(fd, libc::SO_RCVBUFFORCE, (acked * 2048).max(1 << 20));
    sock::send(fd, batch)?;
    acks(fd, acked)
}

fn set_buffer(fd: &OwnedFd, option: libc::c_int, size: usize) {
    // Without the privilege the default stays, which fits all but huge batches.
    let _ = sock::set_option(fd.as_raw_fd(), libc::SOL_SOCKET, option, size.min(i32::MAX as usize) as libc::c_int);
}

/// How many messages in the batch asked for an acknowledgement.
fn count_acked(batch: &[u8]) -> usize {
    let mut rest = batch;
    let mut n = 0;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if u16::from_ne_bytes([rest[6], rest[7]]) & NLM_F_ACK != 0 {
            n += 1;
        }
        rest = &rest[len.max(16).min(rest.len())..];
    }
    n
}

/// Reads acknowledgements until every acked message answered; the first error fails the batch
/// (the kernel then aborts the whole transaction).
fn acks(fd: &OwnedFd, mut expected: usize) -> Result<(), super::NftError> {
    let mut buf = vec![0u8; 1 << 16];
    let mut first_error: Option<i32> = None;
    while expected > 0 {
        let n = sock::recv(fd, &mut buf)?;
        let mut rest = &buf[..n];
        while rest.len() >= 20 {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if u16::from_ne_bytes([rest[4], rest[5]]) == NLMSG_ERROR {
                let code = i32::from_ne_bytes([rest[16], rest[17], rest[18], rest[19]]);
                if code != 0 && first_error.is_none() {
                    first_error = Some(-code);
                }
                expected = expected.saturating_sub(1);
            }
            rest = &rest[len.max(16).min(rest.len())..];
        }
        if first_error.is_some() && expected > 0 {
            // An aborted batch may not answer every message; the first error decides.
            break;
        }
    }
    match first_error {
        None => Ok(()),
        Some(errno) => Err(super::NftError::Rejected {
            message: format!("netlink element batch: {}", io::Error::from_raw_os_error(errno)),
            line: None,
        }),
    }
}
