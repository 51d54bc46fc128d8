//! The Kubernetes API client side: where the API server is and how to authenticate to it
//! (kubeconfig files and in-cluster configuration). The watch itself follows.

mod kubeconfig;

pub use kubeconfig::{ClientConfig, KubeConfigError, Pem, SERVICE_ACCOUNT_DIR, Token, from_kubeconfig, in_cluster};
