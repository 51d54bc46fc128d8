//! Taking a node over from upstream kube-proxy: what `--cleanup --cleanup-kube-proxy` does,
//! and what the daemon does once its own rules are in (after its first sync, unless
//! `--cleanup-kube-proxy-at-start=false`). kube-proxy's nftables tables and iptables-nft
//! chains go in one transaction (`nft::cleanup`), then the `kube-ipvs0` dummy interface of
//! its IPVS mode, which holds every service IP and so makes the node answer them itself.
//! IPVS virtual servers are reported, not removed (that needs generic netlink IPVS).
//!
//! The daemon's takeover runs on a thread of its own: listing a big iptables ruleset must not
//! hold up syncs, and a failure is retried a few times, never fatal.

use crate::nft::NftError;
use crate::nft::cleanup::{self, Leftovers, Removed, Takeover};
use crate::nft::netlink::NfFamily;
use crate::nft::netlink::link;
use crate::nft::owners::{self, Verdict};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The dummy interface kube-proxy's IPVS mode binds every service IP to.
pub const IPVS_INTERFACE: &str = "kube-ipvs0";

/// Where the kernel lists IPVS virtual servers (absent without IPVS in this namespace).
const IPVS_PROC: &str = "/proc/net/ip_vs";

/// Where the kernel lists the iptables-legacy (x_tables) tables of this namespace, with what
/// lists their rules. iptables-nft's rules are nftables and never appear there; legacy ones
/// are invisible to nftables, so the takeover cannot remove them.
const LEGACY: [(&str, &str, NfFamily); 2] = [
    ("/proc/net/ip_tables_names", "iptables-legacy-save", NfFamily::Ip),
    ("/proc/net/ip6_tables_names", "ip6tables-legacy-save", NfFamily::Ip6),
];

/// Waits before each retry of a failed takeover at start.
pub const RETRIES: [Duration; 3] = [Duration::from_secs(2), Duration::from_secs(10), Duration::from_secs(60)];

/// What became of `kube-ipvs0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interface {
    /// There was none.
    Absent,
    /// It was a dummy and is gone, with the service addresses it held.
    Removed {
        /// How many addresses it held.
        addresses: usize,
    },
    /// Something else has that name (not what kube-proxy creates); it stays.
    Kept {
        /// Its kind, if it has one.
        kind: Option<String>,
    },
}

/// What one takeover did; each part may fail on its own.
#[derive(Debug)]
pub struct Outcome {
    /// kube-proxy's tables, chains and the rules leading to them.
    pub rules: Result<Takeover, NftError>,
    /// Its IPVS interface.
    pub interface: std::io::Result<Interface>,
    /// IPVS virtual servers in this namespace (left in place).
    pub virtual_servers: usize,
}

impl Outcome {
    /// Whether every part went through.
    pub fn ok(&self) -> bool {
        self.rules.is_ok() && self.interface.is_ok()
    }
}

/// Removes what upstream kube-proxy left: its rules first, in one transaction, then its IPVS
/// interface (also when the rules failed: each is safe alone once our rules are in).
pub fn take_over() -> Outcome {
    Outcome {
        rules: cleanup::take_over_kube_proxy(),
        interface: remove_ipvs_interface(),
        virtual_servers: virtual_servers(),
    }
}

/// Deletes `kube-ipvs0` if it is a dummy interface, as kube-proxy creates it; an interface
/// of another kind with that name is someone else's and stays.
pub fn remove_ipvs_interface() -> std::io::Result<Interface> {
    let Some(found) = link::find(IPVS_INTERFACE)? else { return Ok(Interface::Absent) };
    if found.kind.as_deref() != Some("dummy") {
        return Ok(Interface::Kept { kind: found.kind });
    }
    let addresses = crate::host::addresses_of(IPVS_INTERFACE)?.len();
    link::delete(found.index)?;
    Ok(Interface::Removed { addresses })
}

/// How many virtual servers `/proc/net/ip_vs` lists (0 when IPVS is not loaded here).
pub fn virtual_servers() -> usize {
    std::fs::read_to_string(IPVS_PROC).map(|t| count_virtual_servers(&t)).unwrap_or(0)
}

/// Counts the service lines of `/proc/net/ip_vs` (a protocol first; real servers start with `->`).
pub fn count_virtual_servers(text: &str) -> usize {
    text.lines().filter(|l| matches!(l.split_whitespace().next(), Some("TCP" | "UDP" | "SCTP" | "FWM"))).count()
}

/// Logs what a takeover did: a line per table and kind of object removed, each object at
/// debug level, every `KUBE-*` chain left with the reason, and errors loudly.
pub fn log_outcome(o: &Outcome) {
    match &o.rules {
        Ok(done) => {
            log_removed(&done.removed);
            for what in cleanup::describe_kept(&done.kept) {
                log::info!("left {what}");
            }
        }
        Err(e) => log::error!("removing upstream kube-proxy's rules failed, they stay in place: {e}"),
    }
    match &o.interface {
        Ok(Interface::Absent) => {}
        Ok(Interface::Removed { addresses }) => log::info!(
            "removed interface {IPVS_INTERFACE} (kube-proxy IPVS mode) and the {addresses} service addresses it held"
        ),
        Ok(Interface::Kept { kind }) => log::warn!(
            "left interface {IPVS_INTERFACE}: a {} rather than the dummy kube-proxy creates",
            kind.as_deref().unwrap_or("device without a kind")
        ),
        Err(e) => log::error!("removing interface {IPVS_INTERFACE} failed: {e}"),
    }
    warn_virtual_servers(o.virtual_servers);
    warn_legacy();
}

fn log_removed(r: &Removed) {
    if r.tables.is_empty() && r.chains.is_empty() {
        log::info!("no rules of upstream kube-proxy on this node");
        return;
    }
    for what in cleanup::describe(&r.tables, &r.chains).into_iter().chain(cleanup::describe_rules(&r.rules)) {
        log::info!("removed {what}");
    }
    for c in &r.chains {
        log::debug!("removed chain {c}");
    }
    for j in &r.rules {
        log::debug!("removed rule {} of {} (it led to {})", j.handle, j.chain, j.target);
    }
}

fn warn_virtual_servers(n: usize) {
    if n > 0 {
        log::warn!(
            "IPVS holds {n} virtual servers (kube-proxy IPVS mode); they stay: this proxy's DNAT comes first for the services it serves, but a NodePort it does not serve still reaches IPVS; `ipvsadm --clear` removes them"
        );
    }
}

/// Warns of upstream kube-proxy's chains in iptables-legacy tables, which nftables cannot
/// see: a node whose `iptables` was the legacy one keeps them after the takeover, and their
/// DNAT can still catch service traffic. Found with `iptables-legacy-save` where installed;
/// otherwise only that legacy tables are in use is said.
pub fn warn_legacy() {
    for (proc, save, family) in LEGACY {
        let Ok(names) = std::fs::read_to_string(proc) else { continue };
        let tables: Vec<&str> = names.lines().filter(|t| matches!(*t, "nat" | "filter" | "mangle")).collect();
        if tables.is_empty() {
            continue;
        }
        match crate::nft::exec::run_binary(save, &[], &crate::nft::exec::Limits::default()) {
            Ok(text) => {
                let chains = legacy_kube_proxy_chains(&text, family);
                if !chains.is_empty() {
                    log::warn!(
                        "upstream kube-proxy's chains are in iptables-legacy tables, which this proxy cannot remove and whose rules may still catch service traffic: {}; remove them with `kube-proxy --cleanup` run with legacy iptables, or by hand with {save} and {}",
                        chains.join(", "),
                        save.replace("-save", "-restore")
                    );
                }
            }
            Err(e) => log::warn!(
                "iptables-legacy tables {} are in use ({proc}) and cannot be searched for upstream kube-proxy's chains: {e}",
                tables.join(", ")
            ),
        }
    }
}

/// kube-proxy's chains (`table/chain`) in `iptables-save` output of `family`, judged as in
/// nftables' iptables tables.
pub fn legacy_kube_proxy_chains(save: &str, family: NfFamily) -> Vec<String> {
    let mut table = "";
    let mut chains: Vec<(&str, &str)> = Vec::new();
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim();
        } else if let Some(chain) = line.strip_prefix(':').and_then(|l| l.split_whitespace().next()) {
            chains.push((table, chain));
        }
    }
    let mark_drop = |t: &str| chains.iter().any(|&(ct, c)| ct == t && c == owners::MARK_DROP);
    chains
        .iter()
        .filter(|(t, c)| c.starts_with("KUBE-") && owners::classify(family, t, c, mark_drop(t)) == Verdict::KubeProxy)
        .map(|(t, c)| format!("{t}/{c}"))
        .collect()
}

/// Reports, without touching anything, what upstream kube-proxy left; `hint` says how to
/// remove it.
pub fn report(hint: &str) -> Result<Leftovers, NftError> {
    let found = cleanup::find_kube_proxy()?;
    for what in cleanup::describe(&found.tables, &found.chains) {
        log::warn!("upstream kube-proxy left {what}; {hint}");
    }
    match link::find(IPVS_INTERFACE) {
        Ok(Some(l)) if l.kind.as_deref() == Some("dummy") => {
            log::warn!(
                "upstream kube-proxy left interface {IPVS_INTERFACE}, which makes this node answer service IPs itself; {hint}"
            );
        }
        Ok(_) => {}
        Err(e) => log::warn!("cannot look for interface {IPVS_INTERFACE}: {e}"),
    }
    warn_virtual_servers(virtual_servers());
    warn_legacy();
    Ok(found)
}

/// What the daemon runs after its first sync: on a thread of its own, the takeover (retried
/// after each wait of [`RETRIES`] while it fails) or, when `enabled` is false, a report.
/// `then(interface_removed)` runs after a takeover that went through.
pub fn at_start(
    enabled: bool,
    stop: Arc<AtomicBool>,
    then: impl FnOnce(bool) + Send + 'static,
) -> Box<dyn FnOnce() + Send> {
    Box::new(move || {
        let spawned = std::thread::Builder::new().name("takeover".into()).spawn(move || {
            if enabled {
                retrying(&stop, then);
            } else if let Err(e) =
                report("--cleanup-kube-proxy-at-start=false leaves it; its rules may still catch traffic")
            {
                log::warn!("cannot look for upstream kube-proxy's rules: {e}");
            }
        });
        if let Err(e) = spawned {
            log::error!("cannot start the takeover thread, upstream kube-proxy's rules stay: {e}");
        }
    })
}

/// What the daemon runs after its first sync with `--service-proxy-name`: nothing. Beside a
/// running kube-proxy, its rules, its interface and its IPVS servers are its own, neither
/// removed nor reported as leftovers (nor are the conntrack sysctls set: main.rs). Says so at once, and that `--cleanup-kube-proxy-at-start`
/// is off when `cleanup_asked` (its default) would have had it on.
pub fn beside_kube_proxy(proxy_name: &str, cleanup_asked: bool) -> Box<dyn FnOnce() + Send> {
    let off = if cleanup_asked { "; --cleanup-kube-proxy-at-start is off" } else { "" };
    log::info!(
        "--service-proxy-name={proxy_name}: serving only Services labelled {}={proxy_name}, beside kube-proxy; its rules and the conntrack sysctls stay{off}",
        crate::model::SERVICE_PROXY_NAME_LABEL
    );
    Box::new(|| log::info!("this proxy's rules are in; kube-proxy's are left as they are (--service-proxy-name)"))
}

fn retrying(stop: &AtomicBool, then: impl FnOnce(bool)) {
    log::info!("this proxy's rules are in; removing upstream kube-proxy's");
    let mut waits = RETRIES.iter();
    loop {
        let outcome = take_over();
        log_outcome(&outcome);
        if outcome.ok() {
            then(matches!(outcome.interface, Ok(Interface::Removed { .. })));
            return;
        }
        let Some(wait) = waits.next() else {
            log::error!(
                "gave up removing upstream kube-proxy's leftovers after {} attempts; restart the daemon to try again",
                RETRIES.len() + 1
            );
            return;
        };
        log::error!("retrying the takeover from upstream kube-proxy in {wait:?}");
        if !sleep_unless_stopped(stop, *wait) {
            return;
        }
    }
}

/// Sleeps `d`; false when `stop` was set meanwhile.
fn sleep_unless_stopped(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())));
    }
    !stop.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_kube_proxys_chains_in_iptables_legacy_save_output_and_nobody_elses() {
        let save = "# Generated by iptables-save v1.8.9 (legacy)\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-ABCDEF - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-ROUTER-X - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n*filter\n:KUBE-FIREWALL - [0:0]\n:KUBE-FORWARD - [0:0]\n:KUBE-NWPLCY-1 - [0:0]\nCOMMIT\n*raw\n:KUBE-SERVICES - [0:0]\nCOMMIT\n";
        let found = legacy_kube_proxy_chains(save, NfFamily::Ip);
        let want = ["nat/KUBE-SERVICES", "nat/KUBE-SVC-ABCDEF", "nat/KUBE-POSTROUTING", "filter/KUBE-FORWARD"];
        assert_eq!(found, want, "kubelet's, kube-router's and other tables' chains are not kube-proxy's");
        let old_kubelet = "*nat\n:KUBE-MARK-DROP - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\nCOMMIT\n";
        assert!(legacy_kube_proxy_chains(old_kubelet, NfFamily::Ip).is_empty(), "a kubelet before 1.28 made these");
    }

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
        assert_eq!(
            count_virtual_servers(
                "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n"
            ),
            0
        );
    }

    #[test]
    fn a_stop_ends_the_wait_between_attempts() {
        let stop = AtomicBool::new(true);
        let start = Instant::now();
        assert!(!sleep_unless_stopped(&stop, Duration::from_secs(60)));
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(sleep_unless_stopped(&AtomicBool::new(false), Duration::from_millis(10)));
    }
}
