//! Whose `KUBE-*` chain is it: upstream kube-proxy's (its iptables, IPVS and old userspace
//! modes, in the iptables-nft tables they use) or someone else's, judged by table and name.
//!
//! The names are upstream's (`pkg/proxy/iptables`, `pkg/proxy/ipvs`, the removed
//! `pkg/proxy/userspace`, and `pkg/kubelet/kubelet_network_linux.go` for what kubelet makes).
//! A chain kubelet may own is never kube-proxy's unless the table proves otherwise.

use crate::netlink::NfFamily;

/// Why a `KUBE-*` object is left in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Keep {
    /// kubelet creates it: `KUBE-FIREWALL` in `filter` (kube-proxy only mirrors its one rule),
    /// `KUBE-KUBELET-CANARY`, `KUBE-IPTABLES-HINT`.
    Kubelet,
    /// `KUBE-MARK-DROP` in `nat`: kubelets before 1.28 create it, and kube-proxy of that era
    /// only made sure it existed.
    MarkDrop,
    /// `KUBE-MARK-MASQ` or `KUBE-POSTROUTING` in a `nat` table that also holds
    /// `KUBE-MARK-DROP`: kubelets before 1.28 create those three together, so kubelet may
    /// own them.
    OldKubelet,
    /// kube-router's network-policy chains.
    KubeRouter,
    /// Not in a table kube-proxy uses (iptables-nft's `ip`/`ip6` `nat`, `filter`, `mangle`),
    /// or a `kube-proxy` table of another family.
    OtherTable,
    /// A name kube-proxy never gave a chain in that table.
    UnknownName,
}

impl Keep {
    /// Says why, for the log.
    pub fn reason(self) -> &'static str {
        match self {
            Keep::Kubelet => "kubelet's",
            Keep::MarkDrop => "kubelets before 1.28 create it too",
            Keep::OldKubelet => "kubelets before 1.28 create it too, and KUBE-MARK-DROP here shows one ran",
            Keep::KubeRouter => "kube-router's",
            Keep::OtherTable => "not a table kube-proxy uses",
            Keep::UnknownName => "not a chain kube-proxy creates in this table",
        }
    }
}

/// The verdict on one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// kube-proxy created it; `--cleanup-kube-proxy` removes it.
    KubeProxy,
    /// Someone else's, or possibly so.
    Keep(Keep),
}

/// kube-proxy's fixed chains in `nat`, by mode.
const NAT: &[&str] = &[
    // iptables mode.
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-PROXY-CANARY",
    // IPVS mode; `KUBE-FIREWALL` was its source-range chain here before it moved to
    // `filter` (kubelet's `KUBE-FIREWALL` has always been in `filter`), `KUBE-FIRE-WALL` its
    // first spelling.
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-FIREWALL",
    "KUBE-FIRE-WALL",
    // userspace mode (removed in 1.26).
    "KUBE-PORTALS-CONTAINER",
    "KUBE-PORTALS-HOST",
    "KUBE-NODEPORT-CONTAINER",
    "KUBE-NODEPORT-HOST",
];

/// Chains in `nat` that kube-proxy and kubelets before 1.28 both create.
const NAT_SHARED: &[&str] = &["KUBE-MARK-MASQ", "KUBE-POSTROUTING"];

/// Only kubelets before 1.28 (and kube-proxy beside them) create it; its presence says such
/// a kubelet ran on this node.
pub const MARK_DROP: &str = "KUBE-MARK-DROP";

/// Prefixes of iptables mode's per-service chains in `nat` (`KUBE-XLB-` before 1.24).
pub const SERVICE_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-", "KUBE-XLB-"];

/// kube-proxy's chains in `filter`.
const FILTER: &[&str] = &[
    // iptables mode.
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-FORWARD",
    "KUBE-NODEPORTS",
    "KUBE-PROXY-FIREWALL",
    "KUBE-PROXY-CANARY",
    // IPVS mode (also KUBE-FORWARD and KUBE-PROXY-FIREWALL).
    "KUBE-NODE-PORT",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
    // userspace mode.
    "KUBE-NODEPORT-NON-LOCAL",
];

/// kube-proxy's chains in `mangle`: only the canary that tells it iptables was flushed.
const MANGLE: &[&str] = &["KUBE-PROXY-CANARY"];

/// kubelet's chains wherever they are.
const KUBELET: &[&str] = &["KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"];

/// kube-router's network-policy chains.
const KUBE_ROUTER_PREFIXES: &[&str] = &["KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"];

/// The ipsets kube-proxy's IPVS mode creates, by their IPv4 names (`ipsetInfo` in
/// `pkg/proxy/ipvs/proxier.go`, the names in `ipset.go`); `KUBE-IPVS-IPS` since 1.26. Older
/// releases named the SCTP sets without `-HASH` (as bitmaps). No other component uses these.
pub const IPVS_SETS: &[&str] = &[
    "KUBE-LOOP-BACK",
    "KUBE-CLUSTER-IP",
    "KUBE-EXTERNAL-IP",
    "KUBE-EXTERNAL-IP-LOCAL",
    "KUBE-LOAD-BALANCER",
    "KUBE-LOAD-BALANCER-FW",
    "KUBE-LOAD-BALANCER-LOCAL",
    "KUBE-LOAD-BALANCER-SOURCE-IP",
    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
    "KUBE-NODE-PORT-TCP",
    "KUBE-NODE-PORT-LOCAL-TCP",
    "KUBE-NODE-PORT-UDP",
    "KUBE-NODE-PORT-LOCAL-UDP",
    "KUBE-NODE-PORT-SCTP-HASH",
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
    "KUBE-HEALTH-CHECK-NODE-PORT",
    "KUBE-IPVS-IPS",
    "KUBE-NODE-PORT-SCTP",
    "KUBE-NODE-PORT-LOCAL-SCTP",
];

/// What an IPv6 proxier puts in place of the first `KUBE-` of a set's name.
const IPV6_SET_PREFIX: &str = "KUBE-6-";

/// The longest ipset name upstream writes (the kernel's limit, without the NUL).
const SET_NAME_MAX: usize = 31;

/// Every name of kube-proxy's IPVS-mode ipsets: [`IPVS_SETS`], then the IPv6 proxier's
/// form of each (`KUBE-6-…`, cut to 31 characters as upstream cuts it).
pub fn ipvs_set_names() -> Vec<String> {
    let v6 = IPVS_SETS.iter().filter_map(|n| n.strip_prefix("KUBE-")).map(|rest| {
        let mut name = format!("{IPV6_SET_PREFIX}{rest}");
        name.truncate(SET_NAME_MAX);
        name
    });
    IPVS_SETS.iter().map(|n| n.to_string()).chain(v6).collect()
}

/// Whether `(family, table)` is an iptables-nft table kube-proxy writes to.
fn is_kube_proxy_iptables_table(family: NfFamily, table: &str) -> bool {
    matches!(family, NfFamily::Ip | NfFamily::Ip6) && matches!(table, "nat" | "filter" | "mangle")
}

/// Judges the `KUBE-*` chain `name` in `family table`. `mark_drop_here`: the same table
/// holds `KUBE-MARK-DROP`, the trace of a kubelet before 1.28.
pub fn classify(family: NfFamily, table: &str, name: &str, mark_drop_here: bool) -> Verdict {
    if KUBELET.contains(&name) || (table == "filter" && name == "KUBE-FIREWALL") {
        return Verdict::Keep(Keep::Kubelet);
    }
    if KUBE_ROUTER_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Verdict::Keep(Keep::KubeRouter);
    }
    if !is_kube_proxy_iptables_table(family, table) {
        return Verdict::Keep(Keep::OtherTable);
    }
    let ours = match table {
        "nat" if name == MARK_DROP => return Verdict::Keep(Keep::MarkDrop),
        "nat" if NAT_SHARED.contains(&name) => {
            if mark_drop_here {
                return Verdict::Keep(Keep::OldKubelet);
            }
            true
        }
        "nat" => NAT.contains(&name) || SERVICE_PREFIXES.iter().any(|p| name.starts_with(p)),
        "filter" => FILTER.contains(&name),
        _ => MANGLE.contains(&name),
    };
    if ours { Verdict::KubeProxy } else { Verdict::Keep(Keep::UnknownName) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(table: &str, name: &str) -> Verdict {
        classify(NfFamily::Ip, table, name, false)
    }

    #[test]
    fn kubelet_chains_are_kept_in_every_table() {
        for table in ["nat", "filter", "mangle"] {
            assert_eq!(ip(table, "KUBE-KUBELET-CANARY"), Verdict::Keep(Keep::Kubelet));
        }
        assert_eq!(ip("mangle", "KUBE-IPTABLES-HINT"), Verdict::Keep(Keep::Kubelet));
        assert_eq!(ip("filter", "KUBE-FIREWALL"), Verdict::Keep(Keep::Kubelet));
        assert_eq!(classify(NfFamily::Ip6, "filter", "KUBE-FIREWALL", true), Verdict::Keep(Keep::Kubelet));
    }

    #[test]
    fn the_same_name_depends_on_the_table() {
        assert_eq!(ip("nat", "KUBE-FIREWALL"), Verdict::KubeProxy, "IPVS mode's old nat chain");
        assert_eq!(ip("nat", "KUBE-SVC-NPX46M4PTMTKRN6Y"), Verdict::KubeProxy);
        assert_eq!(ip("filter", "KUBE-SVC-NPX46M4PTMTKRN6Y"), Verdict::Keep(Keep::UnknownName));
        assert_eq!(ip("mangle", "KUBE-SERVICES"), Verdict::Keep(Keep::UnknownName));
        assert_eq!(ip("mangle", "KUBE-PROXY-CANARY"), Verdict::KubeProxy);
        assert_eq!(ip("raw", "KUBE-SERVICES"), Verdict::Keep(Keep::OtherTable));
        assert_eq!(classify(NfFamily::Inet, "nat", "KUBE-SERVICES", false), Verdict::Keep(Keep::OtherTable));
    }

    #[test]
    fn shared_nat_chains_follow_the_trace_of_an_old_kubelet() {
        for name in NAT_SHARED {
            assert_eq!(classify(NfFamily::Ip, "nat", name, false), Verdict::KubeProxy);
            assert_eq!(classify(NfFamily::Ip, "nat", name, true), Verdict::Keep(Keep::OldKubelet));
        }
        assert_eq!(ip("nat", MARK_DROP), Verdict::Keep(Keep::MarkDrop));
    }

    #[test]
    fn ipv6_set_names_are_cut_as_upstream_cuts_them() {
        let names = ipvs_set_names();
        assert_eq!(names.len(), 2 * IPVS_SETS.len());
        for want in ["KUBE-6-CLUSTER-IP", "KUBE-6-LOAD-BALANCER-SOURCE-CID", "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        assert!(names.iter().all(|n| n.len() <= SET_NAME_MAX && n.starts_with("KUBE-")));
    }

    #[test]
    fn other_components_and_unknown_names_are_kept() {
        for name in ["KUBE-ROUTER-INPUT", "KUBE-NWPLCY-DEFAULT", "KUBE-POD-FW-ABC"] {
            assert_eq!(ip("filter", name), Verdict::Keep(Keep::KubeRouter));
        }
        assert_eq!(ip("nat", "KUBE-BACKUP"), Verdict::Keep(Keep::UnknownName));
    }
}
