//! The Kubernetes API as a source: where the API server is and how to authenticate to it
//! (kubeconfig files and in-cluster configuration), the client, and one reflector thread per
//! resource kube-proxy follows, each delivering per-object changes to the sync thread; and
//! the one Event the daemon writes, `Starting` on its Node.

mod client;
mod content;
mod decode;
mod dial;
pub mod events;
mod gate;
mod kubeconfig;
mod list;
pub mod protobuf;
mod ratelimit;
mod reflector;
mod retry;
mod watch;
mod watchlist;

pub use client::{ApiError, Client, ClientError};
pub use kubeconfig::{
    ClientConfig, KubeConfigError, Pem, SERVICE_ACCOUNT_DIR, Token, from_kubeconfig, in_cluster, without_userinfo,
};
pub use ratelimit::{DEFAULT_BURST, DEFAULT_QPS};
pub use reflector::{Reflector, Resource, Settings, Shared};
pub use retry::{Backoff, LogOnce};

use crate::model::{HEADLESS_LABEL, ObjectKind, SERVICE_PROXY_NAME_LABEL};

/// Trouble on the API server's side, or with reaching it: its kubeconfig, the client, or a
/// request. The caller tells it from bad input (the binary exits 1 on it, 2 on bad input).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig or in-cluster configuration could not be read.
    #[error(transparent)]
    Config(#[from] KubeConfigError),
    /// The client could not be built (its TLS settings, its address).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A request failed.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// The annotation of the bookmark that ends a WatchList's initial events, `"true"` there
/// (apimachinery's `InitialEventsAnnotationKey`).
pub const INITIAL_EVENTS_ANNOTATION_KEY: &str = "k8s.io/initial-events-end";

/// Source names (for the inbox's first-listing rule) of the resources the proxy must have
/// listed before it applies anything.
pub const REQUIRED: [&str; 2] = ["services", "endpointslices"];

/// What the daemon writes to the API server, as `(collection path, verb)`: the ClusterRole
/// grants these and the watches of [`resources`], nothing more (tests/kernel/packaging.rs checks).
pub const WRITES: [(&str, &str); 1] = [(events::PATH, events::VERB)];

/// What kube-proxy watches, for node `node_name`: Services not claimed by another proxy and
/// not headless, EndpointSlices not of headless Services, this node's Node, and the
/// ServiceCIDRs (where the server has them). With `proxy_name` (`--service-proxy-name`), the
/// Services labelled with it instead, and no ServiceCIDRs: beside kube-proxy, the rule that
/// drops unallocated service addresses is left to it. EndpointSlices are not narrowed: the
/// EndpointSlice controller copies a Service's labels onto its slices, but slices made by
/// others (the Endpoints mirroring controller's) need not carry them; the model joins slices
/// to the Services it serves, so other slices make no rules.
pub fn resources(node_name: &str, proxy_name: Option<&str>) -> Vec<Resource> {
    let claimed = match proxy_name {
        Some(name) => format!("{SERVICE_PROXY_NAME_LABEL}={name}"),
        None => format!("!{SERVICE_PROXY_NAME_LABEL}"),
    };
    let mut all = vec![
        Resource {
            name: "services",
            kind: ObjectKind::Service,
            path: "/api/v1/services",
            label_selector: Some(format!("{claimed},!{HEADLESS_LABEL}")),
            field_selector: Some("spec.clusterIP!=None".into()),
            field_selector_optional: true,
            optional: false,
        },
        Resource {
            name: "endpointslices",
            kind: ObjectKind::EndpointSlice,
            path: "/apis/discovery.k8s.io/v1/endpointslices",
            label_selector: Some(format!("!{HEADLESS_LABEL}")),
            field_selector: None,
            field_selector_optional: false,
            optional: false,
        },
        Resource {
            name: "nodes",
            kind: ObjectKind::Node,
            path: "/api/v1/nodes",
            label_selector: None,
            field_selector: Some(format!("metadata.name={node_name}")),
            field_selector_optional: false,
            optional: false,
        },
        // Servers without MultiCIDRServiceAllocator have none: the drop rule is left out then.
        Resource {
            name: "servicecidrs",
            kind: ObjectKind::ServiceCidr,
            path: "/apis/networking.k8s.io/v1/servicecidrs",
            label_selector: None,
            field_selector: None,
            field_selector_optional: false,
            optional: true,
        },
    ];
    if proxy_name.is_some() {
        all.retain(|r| r.kind != ObjectKind::ServiceCidr);
    }
    all
}

/// Where the API server is, from the flags as kube-proxy reads them: `--kubeconfig` (with
/// `--master` overriding its server), else `--master` alone (no credentials), else, when no
/// other source is given, the in-cluster configuration; `None` when only manifests are used.
pub fn client_config(
    kubeconfig: Option<&std::path::Path>,
    master: Option<&str>,
    have_manifests: bool,
) -> Result<Option<ClientConfig>, KubeConfigError> {
    if let Some(path) = kubeconfig {
        return from_kubeconfig(path, master).map(Some);
    }
    if let Some(server) = master {
        return Ok(Some(ClientConfig {
            server: server.to_string(),
            ca: None,
            insecure: false,
            tls_server_name: None,
            client_cert: None,
            token: None,
        }));
    }
    if have_manifests {
        return Ok(None);
    }
    in_cluster(&|name| std::env::var(name).ok(), std::path::Path::new(SERVICE_ACCOUNT_DIR)).map(Some).map_err(|e| {
        let e = match e {
            KubeConfigError::Invalid { what, .. } => what,
            other => other.to_string(),
        };
        KubeConfigError::Invalid {
            path: "in-cluster".into(),
            what: format!("{e}; give --kubeconfig, --master or --manifests, or run in a pod"),
        }
    })
}

/// Starts one reflector thread per resource.
pub fn start(shared: &std::sync::Arc<Shared>) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    resources(&shared.node_name, shared.proxy_name.as_deref())
        .into_iter()
        .map(|r| Reflector::new(shared.clone(), r).spawn())
        .collect()
}

/// Lists every resource once into the shared inbox (for a dry run).
pub fn list_once(shared: &std::sync::Arc<Shared>) -> Result<(), ApiError> {
    for r in resources(&shared.node_name, shared.proxy_name.as_deref()) {
        Reflector::new(shared.clone(), r).list_once()?;
    }
    Ok(())
}
