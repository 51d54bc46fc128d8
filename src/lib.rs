//! kube-nftproxy: a Kubernetes service proxy that programs nftables.
#![deny(missing_docs)]
// Only the netlink socket module (`netlink::sock`) may hold `unsafe`; it says so itself.
#![deny(unsafe_code)]

pub mod config;
pub mod conntrack;
pub mod debug;
pub mod explain;
pub mod health;
pub mod host;
pub mod http;
pub mod inbox;
pub mod input;
pub mod kube;
pub mod localhost;
pub mod lock;
pub mod logging;
pub mod manifests;
pub mod metrics;
pub mod model;
pub mod netlink;
pub mod nft;
pub mod observe;
pub mod render;
pub mod requirements;
pub mod serve;
pub mod skips;
pub mod slis;
pub mod sync;
pub mod takeover;
#[cfg(test)]
mod test_support;
pub mod text;
pub mod topology;
pub mod trace;
pub mod version;
pub mod zpages;
