//! The takeover's part in what IPVS mode leaves besides rules and `kube-ipvs0`: its virtual
//! servers, flushed over generic netlink as upstream's cleanup flushes them, and its ipsets,
//! destroyed over nfnetlink by upstream's names (`owners::ipvs_set_names`), after the rules
//! that match on them are gone. A set still referenced stays, named in a warning.
//!
//! Neither request is sent to a kernel whose subsystem is not there: asking for IPVS's
//! generic netlink family, or sending an ipset request, makes the kernel load `ip_vs` or
//! `ip_set` on every node, even one that never ran IPVS mode. A subsystem that is not
//! loaded holds nothing to remove.

use crate::netlink::ipset::{Destroyed, Sets as SetSocket};
use crate::netlink::ipvs::{self, Flush};
use crate::nft::owners;
use std::io;
use std::path::Path;
use std::time::Duration;

/// Where the kernel lists IPVS virtual servers (absent while `ip_vs` is not loaded).
const IPVS_PROC: &str = "/proc/net/ip_vs";

/// Present while ip_set is in the kernel, built in or loaded: its `max_sets` parameter gives
/// a built-in one a directory too. Absent otherwise (`/proc/net` has no ip_set entry).
const IPSET_SYSFS: &str = "/sys/module/ip_set";

/// Where sysfs lists modules: without it nothing can be told, and the kernel is asked.
const SYSFS_MODULES: &str = "/sys/module";

/// How many more times a busy set's destruction is tried, and how far apart: nf_tables
/// drops a removed rule's reference to a set (`-m set`, xt_set) in work deferred past the
/// commit, so a set whose last rule the takeover just removed can be busy for a moment.
const BUSY_RETRIES: usize = 5;
const BUSY_WAIT: Duration = Duration::from_millis(50);

/// What became of IPVS's virtual servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtualServers {
    /// The kernel has no IPVS, or `ip_vs` is not loaded: no virtual server exists.
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
    /// The kernel has no ipset support, or `ip_set` is not loaded (nothing to do).
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

/// Flushes every IPVS virtual server, as upstream's cleanup does, where IPVS is loaded.
pub fn flush_virtual_servers() -> io::Result<VirtualServers> {
    flush_where(Path::new(IPVS_PROC), ipvs::flush)
}

/// Runs `flush` unless `proc` (`/proc/net/ip_vs`) is absent, which means `ip_vs` is not
/// loaded and no virtual server exists.
fn flush_where(proc: &Path, flush: impl FnOnce() -> io::Result<Flush>) -> io::Result<VirtualServers> {
    let count = match std::fs::read_to_string(proc) {
        Ok(text) => count_virtual_servers(&text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(VirtualServers::NoIpvs),
        // Unreadable, not absent: the flush itself tells.
        Err(_) => 0,
    };
    Ok(match flush()? {
        Flush::NoIpvs => VirtualServers::NoIpvs,
        Flush::Flushed => VirtualServers::Flushed { count },
    })
}

/// Whether ip_set may hold sets: `module` (`/sys/module/ip_set`) is there, or `modules`
/// (`/sys/module`) is not, so nothing can be told without asking.
fn ipset_present(module: &Path, modules: &Path) -> bool {
    module.exists() || !modules.is_dir()
}

/// Destroys kube-proxy's IPVS-mode ipsets (`destroy`), or only finds them. A set still busy
/// is tried [`BUSY_RETRIES`] more times, [`BUSY_WAIT`] apart, before it is left.
pub fn ipsets(destroy: bool) -> io::Result<Sets> {
    if !ipset_present(Path::new(IPSET_SYSFS), Path::new(SYSFS_MODULES)) {
        return Ok(Sets { unsupported: true, ..Sets::default() });
    }
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
    for _ in 0..BUSY_RETRIES {
        if !destroy || sets.busy.is_empty() {
            break;
        }
        std::thread::sleep(BUSY_WAIT);
        retry_busy(&mut sock, &mut sets)?;
    }
    Ok(sets)
}

/// Tries once more to destroy each of `sets.busy`, moving those that went to `destroyed`.
fn retry_busy(sock: &mut SetSocket, sets: &mut Sets) -> io::Result<()> {
    for name in std::mem::take(&mut sets.busy) {
        match sock.destroy(&name) {
            Ok(Destroyed::Gone) => sets.destroyed.push(name),
            Ok(Destroyed::Busy) => sets.busy.push(name),
            // Someone else destroyed it meanwhile.
            Ok(Destroyed::Absent) => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("ipset {name}: {e}"))),
        }
    }
    Ok(())
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

    #[test]
    fn without_proc_net_ip_vs_the_kernel_is_not_asked() {
        let absent = Path::new("/proc/net/no-such-ip_vs");
        let asked = || -> io::Result<Flush> { panic!("the IPVS family was looked up, which loads ip_vs") };
        assert_eq!(flush_where(absent, asked).unwrap(), VirtualServers::NoIpvs);
        let listed = "Prot LocalAddress:Port Scheduler Flags\nTCP  0A600001:01BB rr\n";
        let file = crate::test_support::TempFile::new("ipvs-proc", "ip_vs", listed);
        let got = flush_where(&file, || Ok(Flush::Flushed));
        assert_eq!(got.unwrap(), VirtualServers::Flushed { count: 1 });
    }

    #[test]
    fn ipset_is_asked_only_where_its_module_directory_is() {
        let (none, sys) = (Path::new("/sys/module/no-such-ip_set"), Path::new("/sys/module"));
        if sys.is_dir() {
            assert!(!ipset_present(none, sys), "an absent ip_set under a sysfs that lists modules");
        }
        assert!(ipset_present(none, Path::new("/no-sysfs/module")), "without sysfs the kernel is asked");
    }
}
