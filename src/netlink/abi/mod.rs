//! The kernel's numbers, each named once as its header names it, by subsystem: netlink's
//! header, nfnetlink's subsystems and netfilter's families and hooks, nf_tables' messages and
//! attributes, its expressions', ctnetlink's, rtnetlink's, IP protocols, the ipset and IPVS
//! families' (`genl`), and nftables' user data records (`udata`). Re-exported here, so users
//! write `abi::NAME`.

mod ctnetlink;
mod expr;
mod genl;
mod inet;
mod netlink;
mod nfnetlink;
mod nftables;
mod rtnetlink;
mod udata;
pub(crate) use ctnetlink::*;
pub(crate) use expr::*;
pub(crate) use genl::*;
pub use inet::*;
pub(crate) use netlink::*;
pub(crate) use nfnetlink::*;
pub(crate) use nftables::*;
pub(crate) use rtnetlink::*;
pub(crate) use udata::*;
