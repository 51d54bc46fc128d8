//! IP protocol numbers (linux/in.h), as `inet_proto` fields and conntrack tuples hold them.

/// TCP.
pub const IPPROTO_TCP: u8 = 6;
/// UDP.
pub const IPPROTO_UDP: u8 = 17;
/// SCTP.
pub const IPPROTO_SCTP: u8 = 132;
