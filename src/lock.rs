//! One owner per node: only one kube-nftproxy may keep a network namespace's tables, or two
//! would take each other's commits for tampering and fight forever (a DaemonSet rolling
//! update with surge starts exactly that). The lock is an abstract Unix socket name: it
//! exists once per network namespace, needs no file or mount shared between instances, and
//! the kernel releases it when its holder exits, however it exits.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
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

/// Takes ownership if no other instance holds it; `Ok(None)` when one does.
pub fn try_own() -> io::Result<Option<Owner>> {
    let addr = SocketAddr::from_abstract_name(LOCK_NAME.as_bytes())?;
    match UnixListener::bind_addr(&addr) {
        Ok(socket) => Ok(Some(Owner { _socket: socket })),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits until this instance owns the tables, checking every `poll`; gives up (`Ok(None)`)
/// when `give_up` says so. The handover needs nothing else: the previous owner leaves its
/// rules in place when it stops, and the new one replaces them in one transaction.
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
            log::warn!(
                "another kube-nftproxy owns this node's tables (abstract socket @{LOCK_NAME} in this network \
                 namespace); waiting for it to exit"
            );
            said = Some(Instant::now());
        }
        if give_up() {
            return Ok(None);
        }
        std::thread::sleep(poll);
    }
}
