//! rtnetlink's numbers (linux/rtnetlink.h, linux/if_link.h): link messages and attributes,
//! and the route types `fib` answers with.

/// Delete a link.
pub(crate) const RTM_DELLINK: u16 = 17;
/// Get a link.
pub(crate) const RTM_GETLINK: u16 = 18;
/// A link's name.
pub(crate) const IFLA_IFNAME: u16 = 3;
/// A link's nested kind information.
pub(crate) const IFLA_LINKINFO: u16 = 18;
/// Inside `IFLA_LINKINFO`: the kind (`dummy`, `veth`…).
pub(crate) const IFLA_INFO_KIND: u16 = 1;
/// `struct ifinfomsg`: family, padding, type, index, flags, change.
pub(crate) const IFINFOMSG_LEN: usize = 16;

/// A route type: an ordinary address.
pub(crate) const RTN_UNICAST: u32 = 1;
/// A route type: an address of this host.
pub(crate) const RTN_LOCAL: u32 = 2;
