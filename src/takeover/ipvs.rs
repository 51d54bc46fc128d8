//! The takeover's part in what IPVS mode leaves besides rules and `kube-ipvs0`: its virtual
//! servers, flushed over generic netlink as upstream's cleanup flushes them, and its ipsets,
//! destroyed over nfnetlink by upstream's names (`owners::ipvs_set_names`), after the rules
//! that match on them are gone. A set still referenced stays, named in a warning.

use crate::nft::netlink::ipset::{Destroyed, Sets as SetSocket};
use crate::nft::netlink::ipvs::{self, Flush};
use crate::nft::owners;
use std::io;

/// Where the kernel lists IPVS virtual servers (absent without IPVS).
const IPVS_PROC: &str = "/proc/net/ip_vs";

/// What became of IPVS's virtual servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtualServers {
    /// The kernel has no IPVS.
    NoIpvs,
    /// Flushed; `count` were listed before.
    Flushed {
        /// How many `/proc/net/ip_vs` listed.
        count: usize,
    },
}

/// What became of kube-proxy's ipsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sets {
    /// Destroyed (or, in a report, found).
    pub destroyed: Vec<String>,
    /// Still referenced by something, so left.
    pub busy: Vec<String>,
    /// The kernel has no ipset support (nothing to do).
    pub unsupported: bool,
}

/// How many virtual servers `/proc/net/ip_vs` lists (0 when IPVS is not loaded here).
pub fn virtual_servers() -> usize {
    std::fs::read_to_string(IPVS_PROC).map(|t| count_virtual_servers(&t)).unwrap_or(0)
}

/// Counts the service lines of `/proc/net/ip_vs` (a protocol first; real servers start with `->`).
pub fn count_virtual_servers(text: &str) -> usize {
    text.lines().filter(|l| matches!(l.split_whitespace().next(), Some("TCP" | "UDP" | "SCTP" | "FWM"))).count()
}

/// Flushes every IPVS virtual server, as upstream's cleanup does.
pub fn flush_virtual_servers() -> io::Result<VirtualServers> {
    let count = virtual_servers();
    Ok(match ipvs::flush()? {
        Flush::NoIpvs => VirtualServers::NoIpvs,
        Flush::Flushed => VirtualServers::Flushed { count },
    })
}

/// Destroys kube-proxy's IPVS-mode ipsets (`destroy`), or only finds them.
pub fn ipsets(destroy: bool) -> io::Result<Sets> {
    let mut sock = SetSocket::open()?;
    let mut sets = Sets::default();
    for name in owners::ipvs_set_names() {
        let outcome = if destroy {
            sock.destroy(&name)
        } else {
            sock.exists(&name).map(|e| if e { Destroyed::Gone } else { Destroyed::Absent })
        };
        match outcome {
            Ok(Destroyed::Gone) => sets.destroyed.push(name),
            Ok(Destroyed::Busy) => sets.busy.push(name),
            Ok(Destroyed::Absent) => {}
            // No such nfnetlink subsystem: a kernel without ipset holds no sets.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && sets.destroyed.is_empty() => {
                return Ok(Sets { unsupported: true, ..Sets::default() });
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("ipset {name}: {e}"))),
        }
    }
    Ok(sets)
}

/// Logs what became of the virtual servers.
pub fn log_virtual_servers(v: &io::Result<VirtualServers>) {
    match v {
        Ok(VirtualServers::NoIpvs) => log::info!("no IPVS in this kernel: no virtual servers to flush"),
        Ok(VirtualServers::Flushed { count: 0 }) => log::debug!("flushed IPVS, which held no virtual servers"),
        Ok(VirtualServers::Flushed { count }) => {
            log::info!("flushed IPVS: removed the {count} virtual servers of kube-proxy's IPVS mode")
        }
        Err(e) => log::error!("flushing IPVS virtual servers failed: {e}"),
    }
}

/// Logs what became of the ipsets.
pub fn log_sets(s: &io::Result<Sets>) {
    match s {
        Ok(s) if s.unsupported => log::debug!("no ipset in this kernel: no ipsets of kube-proxy's to destroy"),
        Ok(s) => {
            if !s.destroyed.is_empty() {
                log::info!(
                    "destroyed {} ipsets of kube-proxy's IPVS mode: {}",
                    s.destroyed.len(),
                    s.destroyed.join(", ")
                );
            }
            if !s.busy.is_empty() {
                log::warn!(
                    "left ipsets of kube-proxy's IPVS mode that something still references (an iptables rule, a list:set): {}; `ipset destroy` removes them once unreferenced",
                    s.busy.join(", ")
                );
            }
        }
        Err(e) => log::error!("destroying kube-proxy's ipsets failed: {e}"),
    }
}

/// Logs a report of sets found, with `hint`.
pub fn report_sets(s: &io::Result<Sets>, hint: &str) {
    match s {
        Ok(s) if !s.destroyed.is_empty() => {
            log::warn!("upstream kube-proxy left ipsets {}; {hint}", s.destroyed.join(", "))
        }
        Ok(_) => {}
        Err(e) => log::warn!("cannot look for kube-proxy's ipsets: {e}"),
    }
}

/// Warns, once IPVS mode's traces were found and `nodePortAddresses` is unset, that NodePorts
/// are now served on the primary node IPs only, where IPVS mode served every local IP.
pub fn warn_nodeports(found: bool, nodeport_addresses_set: bool) {
    if found && !nodeport_addresses_set {
        log::warn!(
            "this node ran kube-proxy's IPVS mode, which served NodePorts on every local IP; this proxy serves them on the node's primary IPs only (nodePortAddresses unset: `primary`); `nodePortAddresses: [\"all\"]` in the configuration file or `--nodeport-addresses=all` keeps the old behaviour"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_virtual_servers_not_real_servers() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A600001:01BB rr
  -> C0A80101:192B      Masq    1      0          0
UDP  0A60000A:0035 rr
  -> 0AF40002:0035      Masq    1      0          0
  -> 0AF40003:0035      Masq    1      0          0
FWM  00000001 rr
";
        assert_eq!(count_virtual_servers(text), 3);
        let empty = "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n";
        assert_eq!(count_virtual_servers(empty), 0);
    }
}
