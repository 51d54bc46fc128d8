//! One localhost NodePort connection: dialled to its endpoint, then carried both ways by two
//! threads until both sides have ended, either fails, or its listener closes. An end of one
//! direction is passed on as a half close, as a kernel NAT would leave it.

use super::workers;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a connection waits for its endpoint to answer (upstream's dial timeout).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a read or write blocks before it looks again whether the listener closed.
const WAKE_EVERY: Duration = Duration::from_secs(1);
/// Bytes carried per read: enough for a full-speed loopback connection.
const BUFFER: usize = 128 * 1024;
/// The most connections carried at once (two threads each): past it a new one is closed at
/// once, so that a local client opening connections without end cannot exhaust the unit's
/// tasks or descriptors, which the proxy needs for its own work.
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections carried now.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// One of [`ACTIVE`], given back when the connection ends however it ends.
struct Slot;

impl Slot {
    fn take() -> Option<Slot> {
        let taken = ACTIVE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < MAX_CONNECTIONS).then_some(n + 1));
        taken.ok().map(|_| Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What an accepted connection is carried to.
pub struct Carry {
    /// The endpoint picked for it.
    pub endpoint: SocketAddr,
    /// The service port, for logs.
    pub service: String,
    /// Set when its listener closes.
    pub closed: Arc<AtomicBool>,
}

/// Carries `client` to its endpoint on two threads ([`super::workers`]); past
/// [`MAX_CONNECTIONS`], or when no thread can start, the connection is dropped, which the
/// client sees closed. Whether it was taken.
pub fn spawn(client: TcpStream, carry: Carry) -> bool {
    let Some(slot) = Slot::take() else { return false };
    let job = move || {
        if let Err(e) = run(client, &carry, Arc::new(slot)) {
            log::debug!("localhost NodePort connection of {} to {}: {e}", carry.service, carry.endpoint);
        }
    };
    let started = workers::run(Box::new(job));
    if let Err(e) = &started {
        log::warn!("localhost NodePort connection dropped: no thread for it: {e}");
    }
    started.is_ok()
}

/// Dials the endpoint and carries the connection, one direction here and the other on a
/// second thread; `slot` is given back when both have ended.
fn run(client: TcpStream, carry: &Carry, slot: Arc<Slot>) -> io::Result<()> {
    // Accepted from a poll, the socket is non-blocking; its threads block, bounded.
    client.set_nonblocking(false)?;
    let backend = TcpStream::connect_timeout(&carry.endpoint, DIAL_TIMEOUT)?;
    for s in [&client, &backend] {
        // Small writes go out at once, as through the kernel's NAT (and Go's default).
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(WAKE_EVERY))?;
        s.set_write_timeout(Some(WAKE_EVERY))?;
    }
    let (back_from, back_to) = (backend.try_clone()?, client.try_clone()?);
    let (closed, back_slot) = (carry.closed.clone(), slot.clone());
    workers::run(Box::new(move || {
        pump(back_from, back_to, &closed);
        drop(back_slot);
    }))?;
    pump(client, backend, &carry.closed);
    drop(slot);
    Ok(())
}

/// Copies `from` into `to` until `from` ends, passing the end on; on a failure or a closed
/// listener both sockets are shut, which ends the other direction too.
fn pump(mut from: TcpStream, mut to: TcpStream, closed: &AtomicBool) {
    let mut buf = vec![0u8; BUFFER];
    loop {
        if closed.load(Ordering::Relaxed) {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) if send(&mut to, &buf[..n], closed) => {}
            Ok(_) => break,
            Err(e) if again(&e) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Writes all of `data`, unless the peer fails or the listener closes first.
fn send(to: &mut TcpStream, mut data: &[u8], closed: &AtomicBool) -> bool {
    while !data.is_empty() {
        if closed.load(Ordering::Relaxed) {
            return false;
        }
        match to.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if again(&e) => {}
            Err(_) => return false,
        }
    }
    true
}

/// A timed-out or interrupted call: look at the listener and try again.
fn again(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}
