//! The proxy's side of a test node: its model, what was rendered from it and the applier,
//! synced the way the sync loop does it (only what changed is rendered again).

use super::cluster::Cluster;
use kube_nftproxy::config::Config;
use kube_nftproxy::model::{ApiObject, Model};
use kube_nftproxy::nft::{Applier, OwnPorts, Resync, SyncReport};
use kube_nftproxy::render::{Rendered, Ruleset, Update};
use kube_nftproxy::sync::Kernel;
use std::sync::Arc;

/// The configuration of node `node-a` with the test clusters' pod ranges.
#[allow(dead_code)] // Not every test binary that includes `common` uses it.
pub fn node_a_config() -> Config {
    let args = ["kube-nftproxy", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/32"];
    Config::from_flags(&<kube_nftproxy::config::Flags as clap::Parser>::parse_from(args)).expect("test configuration")
}

/// A proxy for node `node-a`, fed by changing its model.
pub struct Proxy {
    /// The model; change it (`apply`, `replace`), then sync.
    pub model: Model,
    /// What was rendered last.
    pub rendered: Option<Rendered>,
    /// The applier.
    pub applier: Applier,
    cfg: Config,
    /// Whether `sync` first reads the host's addresses, as the daemon does.
    reads_addresses: bool,
}

impl Proxy {
    /// A proxy with an empty model.
    pub fn new(cfg: Config) -> Proxy {
        Proxy::with_model(cfg, Model::default())
    }

    /// A proxy starting from `model`.
    pub fn with_model(cfg: Config, model: Model) -> Proxy {
        Proxy {
            model,
            rendered: None,
            applier: Applier::new("node-a", Arc::new(OwnPorts::default())),
            cfg,
            reads_addresses: false,
        }
    }

    /// Makes every `sync` hand the namespace's interface addresses to the model before
    /// rendering, as the daemon's sync loop does: on a node they are never empty.
    pub fn reading_host_addresses(mut self) -> Proxy {
        self.reads_addresses = true;
        self
    }

    /// Hands the interface addresses of the calling thread's network namespace to the model,
    /// read as the sync loop reads them (through the applier).
    pub fn read_host_addresses(&mut self) {
        let addrs = Kernel::host_addresses(&mut self.applier).expect("interface addresses");
        self.model.set_host_addresses(addrs);
    }

    /// Renders what changed since the last render (everything the first time).
    pub fn render(&mut self) -> Update {
        let changes = self.model.take_changes();
        match &mut self.rendered {
            Some(r) => r.update(&self.model, &self.cfg, &changes).expect("render"),
            None => {
                // As the sync loop's first render: the endpoint slots of tables read ahead.
                let held = self.applier.held_slots();
                self.rendered = Some(Rendered::build(&self.model, &self.cfg, held.as_ref()).expect("render"));
                Update::Replaced
            }
        }
    }

    /// The desired state rendered last.
    pub fn ruleset(&self) -> &Ruleset {
        self.rendered.as_ref().expect("rendered").ruleset()
    }

    /// Applies `update` inside namespace `ns`.
    pub fn apply(&mut self, ns: &str, update: &Update, resync: Resync) -> Result<SyncReport, String> {
        let desired = self.rendered.as_ref().expect("rendered").ruleset();
        let applier = &mut self.applier;
        super::net::in_netns(ns, || applier.sync(desired, update, resync).map_err(|e| e.to_string()))
    }

    /// Renders and applies inside namespace `ns` (reading its addresses first if asked to).
    pub fn sync(&mut self, ns: &str, resync: Resync) -> Result<SyncReport, String> {
        if self.reads_addresses {
            super::net::in_netns(ns, || self.read_host_addresses());
        }
        let update = self.render();
        let report = self.apply(ns, &update, resync)?;
        // A test cluster's probes are checked against explain over what was synced.
        if super::explained::cluster_known() {
            let made = Box::new((self.model.clone(), self.cfg.clone()));
            super::explained::rules(Some(super::explained::Rules::InProcess(made)));
        }
        Ok(report)
    }
}

/// The model of `objects` plus this node's Node object, every object accepted.
pub fn model_of(objects: &[serde_json::Value]) -> Model {
    let all: Vec<ApiObject> = std::iter::once(Cluster::node_object())
        .chain(objects.iter().cloned())
        .map(|v| ApiObject::from_json(v).unwrap().expect("a kind the proxy uses"))
        .collect();
    let (model, refused) = Model::from_objects(&all, "node-a");
    assert!(refused.is_empty(), "{refused:?}");
    model
}
