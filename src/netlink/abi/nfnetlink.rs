//! nfnetlink.h's subsystems, groups and batch markers, and netfilter.h's families
//! (`nfgenmsg.nfgen_family`).

// nfnetlink.h: subsystems, groups, batches.

/// The ctnetlink subsystem (conntrack).
pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
/// The ipset subsystem: the high byte of its message types.
pub(crate) const NFNL_SUBSYS_IPSET: u16 = 6;
/// The nf_tables subsystem: the high byte of its message types.
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// The multicast group of nftables change notifications.
pub(crate) const NFNLGRP_NFTABLES: u32 = 7;
/// The multicast group of nftables packet traces (`meta nftrace set 1`).
pub(crate) const NFNLGRP_NFTRACE: u32 = 9;
/// Begins a batch (transaction).
pub(crate) const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
/// Ends (commits) a batch.
pub(crate) const NFNL_MSG_BATCH_END: u16 = 0x11;

// netfilter.h: families (`nfgenmsg.nfgen_family`).

/// Any family: a dump of this family lists every family's tables.
pub(crate) const NFPROTO_UNSPEC: u8 = 0;
/// `inet`: IPv4 and IPv6 together.
pub(crate) const NFPROTO_INET: u8 = 1;
/// `ip`.
pub(crate) const NFPROTO_IPV4: u8 = 2;
/// `arp`.
pub(crate) const NFPROTO_ARP: u8 = 3;
/// `netdev`.
pub(crate) const NFPROTO_NETDEV: u8 = 5;
/// `bridge`.
pub(crate) const NFPROTO_BRIDGE: u8 = 7;
/// `ip6`.
pub(crate) const NFPROTO_IPV6: u8 = 10;

// netfilter.h: the inet hooks (`NF_INET_*`), and nft's names for them, by number.

/// Before routing.
pub(crate) const NF_INET_PRE_ROUTING: u32 = 0;
/// For this host.
pub(crate) const NF_INET_LOCAL_IN: u32 = 1;
/// From this host.
pub(crate) const NF_INET_LOCAL_OUT: u32 = 3;
/// After routing.
pub(crate) const NF_INET_POST_ROUTING: u32 = 4;
/// The hooks' names in nft's syntax, indexed by number.
pub(crate) const NF_INET_HOOK_NAMES: [&str; 5] = ["prerouting", "input", "forward", "output", "postrouting"];
