//! The proxy's side of a test node: its model, what was rendered from it and the applier,
//! synced the way the sync loop does it (only what changed is rendered again).

use kube_nftproxy::config::Config;
use kube_nftproxy::model::Model;
use kube_nftproxy::nft::{Applier, OwnPids, Resync, SyncReport};
use kube_nftproxy::render::{Rendered, Ruleset, Update};
use std::sync::Arc;

/// A proxy for node `node-a`, fed by changing its model.
pub struct Proxy {
    /// The model; change it (`apply`, `replace`), then sync.
    pub model: Model,
    /// What was rendered last.
    pub rendered: Option<Rendered>,
    /// The applier.
    pub applier: Applier,
    cfg: Config,
}

impl Proxy {
    /// A proxy with an empty model.
    pub fn new(cfg: Config) -> Proxy {
        Proxy::with_model(cfg, Model::default())
    }

    /// A proxy starting from `model`.
    pub fn with_model(cfg: Config, model: Model) -> Proxy {
        Proxy { model, rendered: None, applier: Applier::new("node-a", Arc::new(OwnPids::default())), cfg }
    }

    /// Renders what changed since the last render (everything the first time).
    pub fn render(&mut self) -> Update {
        let changes = self.model.take_changes();
        match &mut self.rendered {
            Some(r) => r.update(&self.model, &self.cfg, &changes).expect("render"),
            None => {
                self.rendered = Some(Rendered::build(&self.model, &self.cfg, None).expect("render"));
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

    /// Renders and applies inside namespace `ns`.
    pub fn sync(&mut self, ns: &str, resync: Resync) -> Result<SyncReport, String> {
        let update = self.render();
        self.apply(ns, &update, resync)
    }
}
