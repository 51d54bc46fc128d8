//! One owner per node: only one kube-nftproxy may keep a network namespace's tables, or two
//! would take each other's commits for tampering and fight forever (a DaemonSet rolling
//! update with surge starts exactly that). The lock is an abstract Unix socket name: it
//! exists once per network namespace, needs no file or mount shared between instances, and
//! the kernel releases it when its holder exits, however it exits.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// The abstract socket name held by the instance that owns the tables.
pub const LOCK_NAME: &str = "kube-nftproxy";

/// How often a waiting instance says it is still waiting.
const WAITING_LOG: Duration = Duration::from_secs(30);

/// Ownership of this network namespace's tables, held until dropped (or the process ends).
#[derive(Debug)]
pub struct Owner {
    _socket: UnixListener,
}

/// Who holds the name: its process id and user id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
}

/// Takes ownership if no other instance holds it; `Ok(None)` when one does. Any process in
/// the namespace may bind the name, so a holder that is neither root nor this process's
/// user cannot be another kube-nftproxy: that is an error, not a reason to wait forever.
pub fn try_own() -> io::Result<Option<Owner>> {
    let addr = SocketAddr::from_abstract_name(LOCK_NAME.as_bytes())?;
    match UnixListener::bind_addr(&addr) {
        Ok(socket) => Ok(Some(Owner { _socket: socket })),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => match holder(&addr) {
            Some(h) if h.uid != 0 && h.uid != rustix::process::geteuid().as_raw() => Err(io::Error::other(format!(
                "@{LOCK_NAME} is held by process {} of user {}, not a kube-nftproxy of root or this user: refusing to wait for it",
                h.pid, h.uid
            ))),
            _ => Ok(None),
        },
        Err(e) => Err(e),
    }
}

/// The process holding the name, asked of the kernel through a connection to it.
pub fn holder(addr: &SocketAddr) -> Option<Holder> {
    let stream = UnixStream::connect_addr(addr).ok()?;
    let cred = rustix::net::sockopt::socket_peercred(&stream).ok()?;
    Some(Holder { pid: cred.pid.as_raw_nonzero().get(), uid: cred.uid.as_raw() })
}

/// Waits until this instance owns the tables, checking every `poll`; gives up (`Ok(None)`)
/// when `give_up` says so. The handover needs nothing else: the previous owner leaves its
/// rules in place when it stops, and the new one sends what differs from them in one transaction.
pub fn own(poll: Duration, give_up: impl Fn() -> bool) -> io::Result<Option<Owner>> {
    let mut said = None::<Instant>;
    loop {
        if let Some(owner) = try_own()? {
            if said.is_some() {
                log::info!("the other kube-nftproxy is gone; taking over this node's tables");
            }
            return Ok(Some(owner));
        }
        if said.is_none_or(|at| at.elapsed() >= WAITING_LOG) {
            let addr = SocketAddr::from_abstract_name(LOCK_NAME.as_bytes())?;
            let pid = holder(&addr).map_or_else(|| "?".into(), |h| h.pid.to_string());
            log::warn!(
                "another kube-nftproxy (process {pid}) owns this node's tables (abstract socket @{LOCK_NAME} in \
                 this network namespace); waiting for it to exit"
            );
            said = Some(Instant::now());
        }
        if give_up() {
            return Ok(None);
        }
        std::thread::sleep(poll);
    }
}
