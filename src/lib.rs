//! kube-nftproxy: a Kubernetes service proxy that programs nftables.
#![deny(missing_docs)]

pub mod config;
pub mod host;
pub mod manifests;
pub mod model;
pub mod render;
pub mod topology;
