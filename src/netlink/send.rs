//! Sending a finished nf_tables batch: one socket kept open (closing one waits for the
//! previous commit's cleanup, an RCU grace period), buffers sized for the batch and its
//! acknowledgements, and the kernel's verdict read back: the first refused message's error
//! and sequence number, which `wire::Lines` turns into the script line it came from. A batch
//! may also go on a `Socket` of the caller's, which then owns the tables it creates with
//! `flags owner` (they go when it closes).

use super::abi::{NETLINK_NETFILTER, NLM_F_ACK, NLMSG_ERROR};
use super::sock;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Why a batch did not go through.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The kernel refused message `seq` of the batch with `errno`; nothing of it was applied.
    #[error("the kernel rejected the transaction: {}", io::Error::from_raw_os_error(*errno))]
    Refused {
        /// The error.
        errno: i32,
        /// The refused message's sequence number in the batch.
        seq: u32,
    },
    /// The socket failed.
    #[error("netlink I/O: {0}")]
    Io(#[from] io::Error),
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
    pub fn send(&self, batch: &[u8]) -> Result<(), SendError> {
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

    /// The port id the next batch is sent from (the socket is opened if it is not): what the
    /// kernel's notification of the commit will name.
    pub fn port(&self) -> io::Result<u32> {
        let mut slot = self.fd.borrow_mut();
        if slot.is_none() {
            *slot = Some(open()?);
        }
        match slot.as_ref() {
            Some(fd) => sock::port_id(fd),
            None => Err(io::Error::other("no socket")),
        }
    }
}

impl super::Socket {
    /// Sends a finished batch on this socket as one transaction and waits for the kernel's
    /// verdict, as [`Sender::send`] does. A table the batch creates with `flags owner` belongs
    /// to this socket: only it may change the table, and the kernel removes the table when the
    /// socket closes (the `Socket` dropped, or the process gone), so what a short-lived tool
    /// loads cannot outlive it. Replies other than acknowledgements that arrive meanwhile (on
    /// a socket subscribed to a group) are read and dropped.
    pub fn send_batch(&self, batch: &[u8]) -> Result<(), SendError> {
        send_on(&self.fd, batch)
    }
}

fn open() -> io::Result<OwnedFd> {
    let fd = sock::open(NETLINK_NETFILTER, super::RECV_TIMEOUT)?;
    // Bound now, so its port id is known before the first commit.
    sock::bind_groups(&fd, 0)?;
    Ok(fd)
}

/// Sends a batch on `fd` and reads its acknowledgements.
fn send_on(fd: &OwnedFd, batch: &[u8]) -> Result<(), SendError> {
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
fn acks(fd: &OwnedFd, mut expected: usize) -> Result<(), SendError> {
    let mut buf = vec![0u8; 1 << 16];
    // The first refusal: its errno and the sequence number of the message refused.
    let mut first_error: Option<(i32, u32)> = None;
    while expected > 0 {
        let n = sock::recv(fd, &mut buf)?;
        let mut rest = &buf[..n];
        while rest.len() >= 20 {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if u16::from_ne_bytes([rest[4], rest[5]]) == NLMSG_ERROR {
                let code = super::msg::error_code(&rest[16..]);
                // The refused message's own header follows the code: its sequence number.
                let seq = rest.get(28..32).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                if code != 0 && first_error.is_none() {
                    first_error = Some((-code, seq));
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
        Some((errno, seq)) => Err(SendError::Refused { errno, seq }),
    }
}
