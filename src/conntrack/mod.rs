//! Conntrack, as kube-proxy handles it: after a sync that changed a UDP service port, UDP
//! flows still bound to an endpoint that no longer serves that port are deleted, so the
//! client's next datagram is balanced again (`reconcile.rs` decides which, `clear` deletes
//! them over ctnetlink); and the conntrack sysctls set at start (`sysctl.rs`). TCP and SCTP
//! flows are never touched: their connections end on their own.

mod reconcile;
pub mod sysctl;

pub use reconcile::{Reconciler, Totals};

use crate::model::Family;
use crate::netlink::NfFamily;
use crate::netlink::abi::IPPROTO_UDP;
use crate::netlink::conntrack::{self, Entry};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Errors of a conntrack cleanup; the sync it follows stands.
#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    /// Talking to ctnetlink failed for one family.
    #[error("conntrack cleanup ({family:?}): {source}")]
    Netlink {
        /// The family whose table was being swept.
        family: Family,
        /// Cause.
        source: std::io::Error,
    },
}

/// Where a UDP service port receives traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Frontend {
    /// A ClusterIP, external IP or load-balancer IP with the service port.
    Address(SocketAddr),
    /// A NodePort of one family, on whatever node address: matched by destination port alone.
    NodePort(Family, u16),
}

impl Frontend {
    /// The family of the flows it matches.
    pub fn family(&self) -> Family {
        match self {
            Frontend::Address(a) => Family::of(&a.ip()),
            Frontend::NodePort(f, _) => *f,
        }
    }
}

/// What one cleanup deletes: UDP flows whose original destination is one of these frontends
/// and whose reply comes from none of its allowed sources (its serving endpoints; none for a
/// port without endpoints or deleted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each frontend with the endpoints (`IP:port`) its flows may still lead to.
    pub frontends: BTreeMap<Frontend, BTreeSet<SocketAddr>>,
}

impl Plan {
    /// Whether there is nothing to clean.
    pub fn is_empty(&self) -> bool {
        self.frontends.is_empty()
    }

    /// The families whose tables hold flows to clean.
    pub fn families(&self) -> BTreeSet<Family> {
        self.frontends.keys().map(Frontend::family).collect()
    }

    /// Whether a UDP flow sent to `orig_dst` and answered from `reply_src` is stale.
    pub fn is_stale(&self, orig_dst: SocketAddr, reply_src: SocketAddr) -> bool {
        let family = Family::of(&orig_dst.ip());
        [Frontend::Address(orig_dst), Frontend::NodePort(family, orig_dst.port())]
            .iter()
            .any(|f| self.frontends.get(f).is_some_and(|allowed| !allowed.contains(&reply_src)))
    }

    fn picks(&self, e: &Entry<'_>) -> bool {
        e.proto == IPPROTO_UDP && self.is_stale(e.orig_dst, e.reply_src)
    }
}

/// One family's sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyReport {
    /// The family.
    pub family: Family,
    /// Entries deleted.
    pub deleted: u64,
    /// Entries the dump delivered.
    pub scanned: u64,
    /// The dump was interrupted: some flows may have been missed.
    pub partial: bool,
    /// How long the sweep took.
    pub took: Duration,
}

/// What running a plan did, per family swept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// One entry per family swept.
    pub families: Vec<FamilyReport>,
}

impl Report {
    /// Entries deleted in all families.
    pub fn deleted(&self) -> u64 {
        self.families.iter().map(|f| f.deleted).sum()
    }
}

/// Runs `plan` on the calling thread's network namespace: each family's table is swept once.
pub fn clear(plan: &Plan) -> Result<Report, ConntrackError> {
    let mut report = Report::default();
    for family in plan.families() {
        let start = Instant::now();
        let swept = conntrack::sweep(NfFamily::from(family), |e| plan.picks(e))
            .map_err(|source| ConntrackError::Netlink { family, source })?;
        report.families.push(FamilyReport {
            family,
            deleted: swept.deleted,
            scanned: swept.scanned,
            partial: swept.partial,
            took: start.elapsed(),
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_flow_is_stale_when_a_matching_frontend_does_not_allow_its_endpoint() {
        let mut plan = Plan::default();
        plan.frontends.insert(Frontend::Address(addr("172.30.0.10:53")), [addr("10.1.1.2:8080")].into());
        plan.frontends.insert(Frontend::NodePort(Family::V4, 30053), [addr("10.1.1.2:8080")].into());
        plan.frontends.insert(Frontend::Address(addr("[fd00:30::10]:53")), BTreeSet::new());
        assert!(!plan.is_stale(addr("172.30.0.10:53"), addr("10.1.1.2:8080")), "a serving endpoint stays");
        assert!(plan.is_stale(addr("172.30.0.10:53"), addr("10.1.9.2:8080")), "a gone endpoint goes");
        assert!(!plan.is_stale(addr("172.30.0.10:54"), addr("10.1.9.2:8080")), "another port is not ours");
        assert!(plan.is_stale(addr("192.168.1.1:30053"), addr("10.1.9.2:8080")), "NodePorts match any address");
        assert!(!plan.is_stale(addr("[fd00::1]:30053"), addr("[fd00::9]:8080")), "a NodePort has a family");
        assert!(plan.is_stale(addr("[fd00:30::10]:53"), addr("[fd00:10::2]:8080")), "no endpoint: every flow goes");
        assert_eq!(plan.families(), [Family::V4, Family::V6].into());
    }
}
