//! ctnetlink's numbers (linux/netfilter/nfnetlink_conntrack.h) and conntrack's status and
//! state bits (nf_conntrack_common.h).

/// Create an entry.
pub(crate) const IPCTNL_MSG_CT_NEW: u16 = 0;
/// Get (or dump) entries.
pub(crate) const IPCTNL_MSG_CT_GET: u16 = 1;
/// Delete an entry.
pub(crate) const IPCTNL_MSG_CT_DELETE: u16 = 2;
/// The table's counters.
pub(crate) const IPCTNL_MSG_CT_GET_STATS: u16 = 5;
/// The reply to `IPCTNL_MSG_CT_GET_STATS`: how many entries the table holds.
pub(crate) const CTA_STATS_GLOBAL_ENTRIES: u16 = 1;

/// An entry's original-direction tuple.
pub(crate) const CTA_TUPLE_ORIG: u16 = 1;
/// An entry's reply-direction tuple.
pub(crate) const CTA_TUPLE_REPLY: u16 = 2;
/// An entry's status bits (`IPS_*`).
pub(crate) const CTA_STATUS: u16 = 3;
/// An entry's timeout, in seconds.
pub(crate) const CTA_TIMEOUT: u16 = 7;
/// An entry's conntrack zone.
pub(crate) const CTA_ZONE: u16 = 18;
/// Inside a tuple: its addresses.
pub(crate) const CTA_TUPLE_IP: u16 = 1;
/// Inside a tuple: its transport part.
pub(crate) const CTA_TUPLE_PROTO: u16 = 2;
/// Inside a tuple's addresses: IPv4 source.
pub(crate) const CTA_IP_V4_SRC: u16 = 1;
/// IPv4 destination.
pub(crate) const CTA_IP_V4_DST: u16 = 2;
/// IPv6 source.
pub(crate) const CTA_IP_V6_SRC: u16 = 3;
/// IPv6 destination.
pub(crate) const CTA_IP_V6_DST: u16 = 4;
/// Inside a tuple's transport part: the IP protocol.
pub(crate) const CTA_PROTO_NUM: u16 = 1;
/// The source port.
pub(crate) const CTA_PROTO_SRC_PORT: u16 = 2;
/// The destination port.
pub(crate) const CTA_PROTO_DST_PORT: u16 = 3;

/// Status: the entry has seen replies.
pub(crate) const IPS_SEEN_REPLY: u32 = 1 << 1;
/// Status: the entry is assured (not dropped early under pressure).
pub(crate) const IPS_ASSURED: u32 = 1 << 2;
/// Status: the entry is confirmed (in the table).
pub(crate) const IPS_CONFIRMED: u32 = 1 << 3;
/// Status: the destination was translated (DNAT).
pub(crate) const IPS_DST_NAT: u32 = 1 << 5;

/// `ct state new`'s bit (`NF_CT_STATE_BIT(IP_CT_NEW)`).
pub(crate) const NF_CT_STATE_NEW: u32 = 1 << 3;
