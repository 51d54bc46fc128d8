//! The numbers of the other netlink families kube-proxy's leftovers need: ipsets over
//! nfnetlink, the generic netlink controller, and IPVS over generic netlink.

// linux/netfilter/ipset/ip_set.h: ipsets over nfnetlink.

/// The oldest protocol version kernels accept for `DESTROY` and `HEADER` (version 7 kernels
/// take 6 too; a version 6 kernel refuses 7).
pub(crate) const IPSET_PROTOCOL_MIN: u8 = 6;
/// Destroy a set by name.
pub(crate) const IPSET_CMD_DESTROY: u16 = 3;
/// A set's header: whether it exists, without its members.
pub(crate) const IPSET_CMD_HEADER: u16 = 12;
/// The protocol version (u8), required in every request.
pub(crate) const IPSET_ATTR_PROTOCOL: u16 = 1;
/// The set's name (NUL-terminated, at most `IPSET_MAXNAMELEN` with the NUL).
pub(crate) const IPSET_ATTR_SETNAME: u16 = 2;
/// Longest set name with its NUL.
pub(crate) const IPSET_MAXNAMELEN: usize = 32;
/// The error of a set something (an iptables rule, a list:set) still references
/// (`IPSET_ERR_PRIVATE + 4`).
pub(crate) const IPSET_ERR_BUSY: i32 = 4100;

// linux/genetlink.h: the generic netlink controller.

/// The controller's message type (`GENL_ID_CTRL`, `NLMSG_MIN_TYPE`).
pub(crate) const GENL_ID_CTRL: u16 = 0x10;
/// Ask the controller for a family by name.
pub(crate) const CTRL_CMD_GETFAMILY: u8 = 3;
/// The controller's version, as libnl sends it.
pub(crate) const CTRL_VERSION: u8 = 1;
/// A family's id (u16): the message type its requests use.
pub(crate) const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// A family's name.
pub(crate) const CTRL_ATTR_FAMILY_NAME: u16 = 2;

// linux/ip_vs.h: IPVS over generic netlink.

/// IPVS's generic netlink family name (`IPVS_GENL_NAME`).
pub(crate) const IPVS_GENL_NAME: &str = "IPVS";
/// `IPVS_GENL_VERSION`.
pub(crate) const IPVS_GENL_VERSION: u8 = 1;
/// Delete every virtual server with its real servers (`ipvsadm --clear`).
pub(crate) const IPVS_CMD_FLUSH: u8 = 17;
