//! netlink.h's numbers: the protocols (netlink families) sockets open, the message header's
//! types and flags, the attribute header's flags.

/// rtnetlink: interfaces and addresses.
pub(crate) const NETLINK_ROUTE: i32 = 0;
/// nfnetlink: nf_tables, ctnetlink and ipset.
pub(crate) const NETLINK_NETFILTER: i32 = 12;
/// Generic netlink: IPVS.
pub(crate) const NETLINK_GENERIC: i32 = 16;

/// `nlmsg_type` of an error or acknowledgement.
pub(crate) const NLMSG_ERROR: u16 = 2;
/// `nlmsg_type` ending a multipart reply.
pub(crate) const NLMSG_DONE: u16 = 3;
/// A request.
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
/// A reply that is one part of several (a dump's), ended by `NLMSG_DONE`.
pub(crate) const NLM_F_MULTI: u16 = 0x2;
/// Ask for an acknowledgement.
pub(crate) const NLM_F_ACK: u16 = 0x4;
/// A dump whose contents changed while it ran.
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
/// Replace the object (a rule, named by its handle).
pub(crate) const NLM_F_REPLACE: u16 = 0x100;
/// Fail if the object exists.
pub(crate) const NLM_F_EXCL: u16 = 0x200;
/// Create the object if it does not exist.
pub(crate) const NLM_F_CREATE: u16 = 0x400;
/// Add at the end (a rule after a chain's last).
pub(crate) const NLM_F_APPEND: u16 = 0x800;
/// Dump every object (`NLM_F_ROOT | NLM_F_MATCH`).
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// An attribute holding nested attributes.
pub(crate) const NLA_F_NESTED: u16 = 0x8000;
/// The attribute type without the nested and byte-order flags.
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;
