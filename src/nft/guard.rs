//! Keeps the proxy's tables in place: watches nftables change notifications and raises an
//! alarm when another process changes (edits, flushes, deletes) a kube-nftproxy table.
//!
//! Notifications name the table each change touched, and every committed transaction ends
//! with a generation message naming the committing socket (and process). Commits from the
//! sockets the proxy syncs on are ignored. When the kernel drops notifications (a burst overran the buffer) the guard
//! cannot tell, and asks for a cheap check instead. Nothing here lists the table.

use super::OwnPorts;
use crate::netlink::{Event, NfFamily, Socket};
use crate::render::{TABLE_NAME, chain};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the guard reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alarm {
    /// Another process changed a kube-nftproxy table; the reason names it.
    Tampered(String),
    /// Notifications were lost; the tables should be checked.
    Unsure,
}

/// Lets the sync thread silence the guard's subscription around its own big transactions:
/// with a listener, the kernel builds a notification per object, which triples the time of
/// a full sync of 30k services. Valid while the guard thread runs (it owns the socket).
#[derive(Debug)]
pub struct Quiet {
    fd: std::os::fd::RawFd,
}

impl Quiet {
    /// Runs `f` with notifications off, then turns them back on.
    pub fn during<T>(&self, f: impl FnOnce() -> T) -> T {
        if let Err(e) = crate::netlink::set_notifications(self.fd, false) {
            log::warn!("cannot pause nftables notifications: {e}");
        }
        let result = f();
        if let Err(e) = crate::netlink::set_notifications(self.fd, true) {
            log::error!("cannot resume nftables notifications, tampering goes unnoticed: {e}");
        }
        result
    }
}

/// Starts the `nft-guard` thread; it runs until `stop` is set.
pub fn spawn(
    own: Arc<OwnPorts>,
    stop: Arc<AtomicBool>,
    alarm: impl Fn(Alarm) + Send + 'static,
) -> std::io::Result<(JoinHandle<()>, Quiet)> {
    let sock = Socket::monitor()?;
    let quiet = Quiet { fd: sock.raw_fd() };
    let handle = std::thread::Builder::new().name("nft-guard".into()).spawn(move || {
        let mut touched: Option<&'static str> = None;
        while !stop.load(Ordering::SeqCst) {
            let events = match sock.events(Duration::from_millis(200)) {
                Ok(events) => events,
                Err(e) => {
                    log::warn!("nftables notifications failed: {e}");
                    alarm(Alarm::Unsure);
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            };
            for event in events {
                log::trace!("nftables notification: {event:?}");
                match event {
                    Event::Object { family, table, deleted_table } if is_ours(family, &table) => {
                        touched = Some(if deleted_table { "deleted" } else { "changed" });
                    }
                    Event::Object { .. } => {}
                    Event::Generation { pid, port, .. } => {
                        if let Some(what) = touched.take()
                            && !own.contains(port)
                        {
                            alarm(Alarm::Tampered(format!(
                                "process {pid} ({}) {what} a {TABLE_NAME} table",
                                comm(pid)
                            )));
                        }
                    }
                    Event::Overrun => alarm(Alarm::Unsure),
                }
            }
        }
    })?;
    Ok((handle, quiet))
}

/// Whether a notification's table is one of ours.
pub(super) fn is_ours(family: u8, table: &str) -> bool {
    table == TABLE_NAME && (family == NfFamily::Ip as u8 || family == NfFamily::Ip6 as u8)
}

/// The process's command name, if it still runs.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "exited".into())
}

/// The cheap check after lost notifications: both tables exist and their entry chains still
/// hold rules (a flushed table has none). Reads three small things, never the whole table.
pub fn tables_look_intact() -> std::io::Result<bool> {
    let mut sock = Socket::open()?;
    for family in [NfFamily::Ip, NfFamily::Ip6] {
        for name in [chain::NAT_PREROUTING, chain::SERVICES] {
            if sock.rule_count(family, TABLE_NAME, name)?.unwrap_or(0) == 0 {
                return Ok(false);
            }
        }
    }
    Ok(true)
}
