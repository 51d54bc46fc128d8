//! ctnetlink, the kernel's conntrack table over netlink: a dump of one family, streamed and
//! filtered buffer by buffer (a node may track millions of flows, and a dump held whole once
//! cost upstream 12 GB), deletion of entries by their original tuple in acknowledged batches
//! on a second socket while the dump goes on, creation (tests and the benchmark fill tables
//! with it) and the entry count.

mod attrs;

pub use attrs::{Entry, decode};

use super::abi::{
    CTA_STATS_GLOBAL_ENTRIES, CTA_STATUS, CTA_TIMEOUT, CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_ZONE, IPCTNL_MSG_CT_DELETE,
    IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_GET_STATS, IPCTNL_MSG_CT_NEW, IPS_ASSURED, IPS_CONFIRMED, IPS_SEEN_REPLY,
    NLA_F_NESTED, NLM_F_CREATE, NLM_F_DUMP_INTR, NLM_F_EXCL,
};
use super::attr::put;
use super::{NLM_F_ACK, NLM_F_DUMP, NLMSG_DONE, NLMSG_ERROR, NfFamily, Socket, attr, msg};
use attrs::{begin, encode_tuple};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

// The only public path to these numbers (`abi` is the crate's): tests/kernel and the
// benchmark create flows with them.
pub use super::abi::{IPPROTO_TCP, IPPROTO_UDP};

/// How long one receive may wait for the kernel: the sync thread runs the cleanup, and a
/// kernel that does not answer must not freeze it.
pub const CONNTRACK_RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests per batch on the deleting socket: each is acknowledged, and the acknowledgements
/// must fit its receive buffer, or they would be dropped and the batch never answered.
const BATCH: u32 = 64;

/// One receive buffer: the kernel fills a dump's datagrams up to 32 KiB.
const RECV_BUFFER: usize = 64 << 10;

/// A flow to create: its original and reply directions, and how long it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewFlow {
    /// The IP protocol.
    pub proto: u8,
    /// Original direction: from.
    pub orig_src: SocketAddr,
    /// Original direction: to (a service address).
    pub orig_dst: SocketAddr,
    /// Reply direction: from (the endpoint).
    pub reply_src: SocketAddr,
    /// Reply direction: to.
    pub reply_dst: SocketAddr,
    /// Seconds until it expires.
    pub timeout: u32,
}

/// How a sweep went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Entries the dump delivered.
    pub scanned: u64,
    /// Entries deleted.
    pub deleted: u64,
    /// Entries picked that were gone by the time they were deleted (expired meanwhile).
    pub gone: u64,
    /// Entries that could not be decoded (skipped).
    pub malformed: u64,
    /// The dump was interrupted (the table changed under it): some entries may have been missed.
    pub partial: bool,
}

/// Requests sent in acknowledged batches on a socket of their own.
struct Batch {
    sock: Socket,
    buf: Vec<u8>,
    rx: Vec<u8>,
    queued: u32,
    first_seq: u32,
    /// Requests that succeeded.
    done: u64,
    /// Requests answered ENOENT.
    absent: u64,
}

impl Batch {
    fn new() -> io::Result<Batch> {
        let sock = Socket::open()?;
        super::set_receive_timeout(&sock.fd, CONNTRACK_RECV_TIMEOUT)?;
        // Acknowledge failures without echoing the request: smaller answers.
        sock.setsockopt(libc::SOL_NETLINK, libc::NETLINK_CAP_ACK, 1)?;
        let size = 1 << 20;
        if sock.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
            sock.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, size)?;
        }
        let rx = vec![0u8; RECV_BUFFER];
        Ok(Batch { sock, buf: Vec::with_capacity(16 << 10), rx, queued: 0, first_seq: 0, done: 0, absent: 0 })
    }

    /// Queues one request that `write` appends given its sequence number; sends the batch
    /// when it is full.
    fn push(&mut self, write: impl FnOnce(&mut Vec<u8>, u32)) -> io::Result<()> {
        self.sock.seq = self.sock.seq.wrapping_add(1);
        if self.queued == 0 {
            self.first_seq = self.sock.seq;
        }
        write(&mut self.buf, self.sock.seq);
        self.queued += 1;
        if self.queued >= BATCH { self.flush() } else { Ok(()) }
    }

    /// Sends what is queued and reads one answer per request; ENOENT is counted, any other
    /// failure is returned once every answer is in.
    fn flush(&mut self) -> io::Result<()> {
        if self.queued == 0 {
            return Ok(());
        }
        self.sock.send(&self.buf)?;
        let (first, queued) = (self.first_seq, self.queued);
        self.buf.clear();
        self.queued = 0;
        let mut answered = 0;
        let mut failure = None;
        while answered < queued {
            let n = receive(&self.sock, &mut self.rx)?;
            for msg::Msg { kind, body, seq, .. } in msg::messages(&self.rx[..n]) {
                if kind != NLMSG_ERROR || seq.wrapping_sub(first) >= queued {
                    continue;
                }
                answered += 1;
                match msg::error_code(body) {
                    0 => self.done += 1,
                    code if code == -libc::ENOENT => self.absent += 1,
                    code => failure = failure.or(Some(io::Error::from_raw_os_error(-code))),
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// One receive, repeated when a signal interrupted it (a receive with a timeout is not
/// restarted by the kernel); the timeout is reported as one.
fn receive(sock: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match sock.recv(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let why = format!("ctnetlink did not answer within {CONNTRACK_RECV_TIMEOUT:?}");
                return Err(io::Error::new(io::ErrorKind::TimedOut, why));
            }
            other => return other,
        }
    }
}

/// Deletes, from the calling thread's network namespace's conntrack table of `family`, every
/// entry `stale` picks. The table is dumped on one socket and each received buffer is
/// filtered as it arrives; deletions go over a second socket in batches meanwhile, so memory
/// stays a few buffers whatever the table's size.
pub fn sweep(family: NfFamily, mut stale: impl FnMut(&Entry<'_>) -> bool) -> io::Result<Swept> {
    let mut dump = Socket::open()?;
    super::set_receive_timeout(&dump.fd, CONNTRACK_RECV_TIMEOUT)?;
    let mut deletes = Batch::new()?;
    let mut swept = Swept::default();
    let (scanned, malformed, partial) = dump.dump_conntrack(family, |e| {
        if !stale(e) {
            return Ok(());
        }
        deletes.push(|buf, seq| {
            let start = begin(buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK, seq, family);
            put(buf, CTA_TUPLE_ORIG | NLA_F_NESTED, e.orig);
            if e.zone != 0 {
                put(buf, CTA_ZONE, &e.zone.to_be_bytes());
            }
            msg::finish(buf, start);
        })
    })?;
    deletes.flush()?;
    (swept.scanned, swept.malformed, swept.partial) = (scanned, malformed, partial);
    (swept.deleted, swept.gone) = (deletes.done, deletes.absent);
    Ok(swept)
}

/// Creates `flows` in the calling thread's network namespace, in batches; returns how many
/// were created. For tests and the benchmark, which need tables of a given shape.
pub fn create(flows: impl IntoIterator<Item = NewFlow>) -> io::Result<u64> {
    let mut batch = Batch::new()?;
    for f in flows {
        let family = if f.orig_dst.is_ipv6() { NfFamily::Ip6 } else { NfFamily::Ip };
        batch.push(|buf, seq| {
            let start = begin(buf, IPCTNL_MSG_CT_NEW, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, seq, family);
            put(buf, CTA_TUPLE_ORIG | NLA_F_NESTED, &encode_tuple(f.proto, f.orig_src, f.orig_dst));
            put(buf, CTA_TUPLE_REPLY | NLA_F_NESTED, &encode_tuple(f.proto, f.reply_src, f.reply_dst));
            // Seen replies and assured; and confirmed, which the kernel sets on entries it creates
            // for ctnetlink (a status that differs in that bit is refused with EBUSY).
            put(buf, CTA_STATUS, &(IPS_SEEN_REPLY | IPS_ASSURED | IPS_CONFIRMED).to_be_bytes());
            put(buf, CTA_TIMEOUT, &f.timeout.to_be_bytes());
            msg::finish(buf, start);
        })?;
    }
    batch.flush()?;
    Ok(batch.done)
}

impl Socket {
    /// Dumps the conntrack table of `family`, handing each entry to `each` as its buffer
    /// arrives; returns the entries seen, those that did not decode, and whether the dump was
    /// interrupted (partial: what came is still used). An error from `each` ends the dump.
    pub fn dump_conntrack(
        &mut self,
        family: NfFamily,
        mut each: impl FnMut(&Entry<'_>) -> io::Result<()>,
    ) -> io::Result<(u64, u64, bool)> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut req = Vec::with_capacity(20);
        let start = begin(&mut req, IPCTNL_MSG_CT_GET, NLM_F_DUMP, seq, family);
        msg::finish(&mut req, start);
        self.send(&req)?;
        let mut buf = vec![0u8; RECV_BUFFER];
        let (mut scanned, mut malformed, mut partial) = (0, 0, false);
        loop {
            let n = receive(self, &mut buf)?;
            for msg::Msg { kind, flags, body, seq: s, .. } in msg::messages(&buf[..n]) {
                if s != seq {
                    continue;
                }
                partial |= flags & NLM_F_DUMP_INTR != 0;
                match kind {
                    NLMSG_DONE => return Ok((scanned, malformed, partial)),
                    NLMSG_ERROR => match msg::error_code(body) {
                        code if code == -libc::EINTR => return Ok((scanned, malformed, true)),
                        code if code != 0 => return Err(io::Error::from_raw_os_error(-code)),
                        _ => return Ok((scanned, malformed, partial)),
                    },
                    _ => {
                        scanned += 1;
                        match decode(body) {
                            Ok(entry) => each(&entry)?,
                            Err(_) => malformed += 1,
                        }
                    }
                }
            }
        }
    }

    /// How many entries the conntrack table of this network namespace holds.
    pub fn conntrack_count(&mut self) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = Vec::with_capacity(20);
        let start = begin(&mut req, IPCTNL_MSG_CT_GET_STATS, NLM_F_ACK, self.seq, NfFamily::Ip);
        msg::finish(&mut req, start);
        self.send(&req)?;
        let replies = self.collect_replies(self.seq)?;
        let count = replies.iter().find_map(|m| attr::top(m, CTA_STATS_GLOBAL_ENTRIES).and_then(attr::be32));
        count.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no entry count in the reply"))
    }
}
