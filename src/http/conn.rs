//! One client connection of the `http` thread: reading its request head, and writing its
//! answer out piece by piece as the socket takes it.

use super::{Head, Route, request};
use crate::model::Family;
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

/// The longest request head read: longer is answered 431, as Go's server answers a head
/// over its limit (Go's is 1 MiB; a connection here holds at most this much).
const MAX_REQUEST: usize = 8192;

/// How long an answer to a request not read whole (400, 431) waits for the client to stop
/// sending before the connection closes, as Go's server waits: closing with unread input
/// resets the connection, and a reset can destroy the answer before the client reads it.
pub(super) const LINGER: Duration = Duration::from_millis(500);

/// One client connection.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    /// What the listener it came to serves.
    pub(super) route: Route,
    /// That listener's port.
    pub(super) port: u16,
    /// The family the client connected over (an IPv4 client of a `[::]` listener: IPv4).
    pub(super) family: Family,
    /// When it was accepted: the oldest silent one makes room first.
    pub(super) since: Instant,
    /// When it is dropped (or, waiting for a later answer, told to try again).
    pub(super) deadline: Instant,
    /// The request head read so far.
    pub(super) read: Vec<u8>,
    /// The answer's pieces still to write, once the request is in, and how much of the
    /// first is written.
    pub(super) out: Option<(VecDeque<Vec<u8>>, usize)>,
    /// Whether, once answered, the connection lingers ([`LINGER`]) reading what the client
    /// still sends; `draining` once it does.
    pub(super) linger: bool,
    pub(super) draining: bool,
}

/// Reads what the socket holds and looks for the request head in it. A client that closes
/// its side right after its request is answered; one that closes before is done with.
pub(super) fn read_request(c: &mut Conn) -> std::io::Result<Head> {
    // Asked again past the limit (a client sending on while its later answer is made): done.
    if c.read.len() > MAX_REQUEST {
        return Err(ErrorKind::InvalidData.into());
    }
    let mut buf = [0u8; 2048];
    let mut ended = false;
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => c.read.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if c.read.len() > MAX_REQUEST {
            break;
        }
    }
    // A head must end within the first MAX_REQUEST bytes, however much came at once.
    match request(&c.read[..c.read.len().min(MAX_REQUEST)]) {
        Head::Partial if c.read.len() > MAX_REQUEST => Ok(Head::TooLarge),
        Head::Partial if ended => Err(ErrorKind::UnexpectedEof.into()),
        head => Ok(head),
    }
}

/// The most a lingering client's bytes are read in one turn of the loop: one that keeps
/// sending must not hold the `http` thread (its linger time ends it).
const DRAIN_AT_ONCE: usize = 64 * 1024;

/// Reads and drops what a lingering client still sends, its answer written and the
/// sending side shut; true once it has closed its side (or failed, or lingered its time).
pub(super) fn drain(c: &mut Conn) -> bool {
    if !c.draining {
        c.draining = true;
        c.deadline = Instant::now() + LINGER;
        let _ = c.stream.shutdown(Shutdown::Write);
    }
    let mut buf = [0u8; 2048];
    let mut drained = 0;
    loop {
        if drained >= DRAIN_AT_ONCE {
            return Instant::now() >= c.deadline;
        }
        match c.stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => drained += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// The most pieces handed to one `writev`.
const MAX_SLICES: usize = 16;

/// Writes as much of the answer as the socket takes, all pieces at once where it can (a
/// small answer goes in one write); a piece is freed as soon as it is written. True when
/// all of it is written.
pub(super) fn write_out(c: &mut Conn) -> std::io::Result<bool> {
    let Some((out, written)) = &mut c.out else { return Ok(true) };
    while !out.is_empty() {
        let slices: Vec<IoSlice> = out
            .iter()
            .enumerate()
            .take(MAX_SLICES)
            .map(|(i, piece)| IoSlice::new(if i == 0 { &piece[*written..] } else { piece }))
            .collect();
        let mut n = match c.stream.write_vectored(&slices) {
            Ok(0) if slices.iter().any(|s| !s.is_empty()) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while let Some(front) = out.front() {
            let left = front.len() - *written;
            if n < left {
                *written += n;
                break;
            }
            n -= left;
            *written = 0;
            out.pop_front();
        }
    }
    Ok(true)
}
