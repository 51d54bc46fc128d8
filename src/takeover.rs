//! Taking a node over from upstream kube-proxy: what `--cleanup --cleanup-kube-proxy` does,
//! and what the daemon does once its own rules are in (after its first sync, unless
//! `--cleanup-kube-proxy-at-start=false`). kube-proxy's nftables tables and iptables-nft
//! chains go in one transaction (`nft::cleanup`), then its chains in iptables-legacy tables
//! (`legacy.rs`), then what its IPVS mode leaves: the `kube-ipvs0` dummy interface, which
//! holds every service IP and so makes the node answer them itself, the IPVS virtual
//! servers, and last its ipsets, which cannot go while a rule still matches on them
//! (`ipvs.rs`).
//!
//! The daemon's takeover runs on a thread of its own: listing a big iptables ruleset must not
//! hold up syncs, and a failure is retried a few times, never fatal.

use crate::netlink::link;
use crate::nft::NftError;
use crate::nft::cleanup::{self, Leftovers, Removed, Takeover};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub mod ipvs;
pub mod legacy;

pub use ipvs::{Sets, VirtualServers};
pub use legacy::Legacy;

/// The dummy interface kube-proxy's IPVS mode binds every service IP to.
pub const IPVS_INTERFACE: &str = "kube-ipvs0";

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
    /// Its chains in iptables-legacy tables, per family.
    pub legacy: Vec<legacy::FamilyOutcome>,
    /// Its IPVS interface.
    pub interface: std::io::Result<Interface>,
    /// IPVS virtual servers in this namespace.
    pub virtual_servers: std::io::Result<VirtualServers>,
    /// Its IPVS-mode ipsets.
    pub ipsets: std::io::Result<Sets>,
}

impl Outcome {
    /// Whether every part went through (a set still referenced is a warning, not a failure).
    pub fn ok(&self) -> bool {
        self.rules.is_ok()
            && self.legacy.iter().all(|l| l.result.is_ok())
            && self.interface.is_ok()
            && self.virtual_servers.is_ok()
            && self.ipsets.is_ok()
    }

    /// Whether IPVS mode's traces were found: its interface, virtual servers or ipsets.
    pub fn ipvs_found(&self) -> bool {
        matches!(self.interface, Ok(Interface::Removed { .. }))
            || matches!(self.virtual_servers, Ok(VirtualServers::Flushed { count }) if count > 0)
            || matches!(&self.ipsets, Ok(s) if !s.destroyed.is_empty() || !s.busy.is_empty())
    }
}

/// Removes what upstream kube-proxy left: its rules first (nftables in one transaction, then
/// legacy tables), then its IPVS interface and virtual servers, then its ipsets, which rules
/// may have held busy. Each part runs also when an earlier one failed: each is safe alone
/// once our rules are in.
pub fn take_over() -> Outcome {
    let rules = cleanup::take_over_kube_proxy();
    let legacy = legacy::take_over(true);
    Outcome {
        rules,
        legacy,
        interface: remove_ipvs_interface(),
        virtual_servers: ipvs::flush_virtual_servers(),
        ipsets: ipvs::ipsets(true),
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
    for l in &o.legacy {
        legacy::log(l, "");
    }
    ipvs::log_virtual_servers(&o.virtual_servers);
    ipvs::log_sets(&o.ipsets);
}

fn log_removed(r: &Removed) {
    if r.tables.is_empty() && r.chains.is_empty() {
        log::info!("no nftables or iptables-nft rules of upstream kube-proxy on this node");
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
    let n = ipvs::virtual_servers();
    if n > 0 {
        log::warn!("IPVS holds {n} virtual servers (kube-proxy IPVS mode); {hint}");
    }
    for l in legacy::take_over(false) {
        legacy::log(&l, hint);
    }
    ipvs::report_sets(&ipvs::ipsets(false), hint);
    Ok(found)
}

/// What the daemon runs after its first sync: on a thread of its own, the takeover (retried
/// after each wait of [`RETRIES`] while it fails) or, when `enabled` is false, a report.
/// `then(interface_removed)` runs after a takeover that went through.
/// `nodeport_addresses_set`: whether `nodePortAddresses` chose addresses other than the
/// primary ones; if not, a node of IPVS mode is warned that NodePorts moved.
pub fn at_start(
    enabled: bool,
    nodeport_addresses_set: bool,
    stop: Arc<AtomicBool>,
    then: impl FnOnce(bool) + Send + 'static,
) -> Box<dyn FnOnce() + Send> {
    Box::new(move || {
        let spawned = std::thread::Builder::new().name("takeover".into()).spawn(move || {
            if enabled {
                retrying(&stop, nodeport_addresses_set, then);
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
/// removed nor reported as leftovers (nor are the conntrack sysctls set: main.rs). Says so
/// at once, and that `--cleanup-kube-proxy-at-start` is off when `cleanup_asked` (its default) would have had it on.
pub fn beside_kube_proxy(proxy_name: &str, cleanup_asked: bool) -> Box<dyn FnOnce() + Send> {
    let off = if cleanup_asked { "; --cleanup-kube-proxy-at-start is off" } else { "" };
    log::info!(
        "--service-proxy-name={proxy_name}: serving only Services labelled {}={proxy_name}, beside kube-proxy; its rules and the conntrack sysctls stay{off}",
        crate::model::SERVICE_PROXY_NAME_LABEL
    );
    Box::new(|| log::info!("this proxy's rules are in; kube-proxy's are left as they are (--service-proxy-name)"))
}

fn retrying(stop: &AtomicBool, nodeport_addresses_set: bool, then: impl FnOnce(bool)) {
    log::info!("this proxy's rules are in; removing upstream kube-proxy's");
    let mut waits = RETRIES.iter();
    loop {
        let outcome = take_over();
        log_outcome(&outcome);
        if outcome.ok() {
            ipvs::warn_nodeports(outcome.ipvs_found(), nodeport_addresses_set);
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
    fn a_stop_ends_the_wait_between_attempts() {
        let stop = AtomicBool::new(true);
        let start = Instant::now();
        assert!(!sleep_unless_stopped(&stop, Duration::from_secs(60)));
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(sleep_unless_stopped(&AtomicBool::new(false), Duration::from_millis(10)));
    }
}
