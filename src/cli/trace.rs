//! `kube-nftproxy trace` from the command line: the flags read into a selection, Ctrl-C (and
//! SIGTERM, SIGHUP) made a stop, the objects `explain` needs read as a one-shot command reads
//! them, and the command's errors given their exit status (2 for a flag, 1 for the node).

use crate::error::{NodeError, RunError};
use kube_nftproxy::config::{Config, Run};
use kube_nftproxy::trace::{self, Options, Selector, TraceError};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The flags of `trace`.
pub struct TraceFlags {
    /// `--from`.
    pub from: Option<String>,
    /// `--to`.
    pub to: Option<String>,
    /// `--protocol`.
    pub protocol: Option<String>,
    /// `--count`.
    pub count: Option<u64>,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    /// `--output json`.
    pub json: bool,
}

/// Runs the tracer until it is stopped or done.
pub fn trace(run: &Run, cfg: Config, flags: TraceFlags) -> Result<(), RunError> {
    let select = Selector::parse(flags.from.as_deref(), flags.to.as_deref(), flags.protocol.as_deref())
        .map_err(|e| RunError::Input(e.to_string()))?;
    let opts = Options { select, count: flags.count, timeout: flags.timeout, json: flags.json };
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        let registered = signal_hook::flag::register(signal, stop.clone());
        registered.map_err(|e| RunError::Node(NodeError::Failed(format!("handling signals: {e}"))))?;
    }
    let (run, model_cfg) = (run.clone(), cfg.clone());
    let manifests = run.sources.manifests.is_some();
    let api = kube_nftproxy::kube::client_config(run.api.kubeconfig.as_deref(), run.api.master.as_deref(), manifests);
    let given = manifests || api.ok().flatten().is_some();
    let objects: trace::Objects =
        std::sync::Arc::new(move || crate::load_model(&run, &model_cfg).map(|m| (m, given)).map_err(|e| e.to_string()));
    let traced = trace::run(&opts, objects, cfg, &stop, &mut std::io::stdout().lock()).map_err(|e| match e {
        TraceError::Flag(f) => RunError::Input(f),
        other => RunError::Node(NodeError::Failed(other.to_string())),
    })?;
    log::info!("traced {traced} connection(s)");
    Ok(())
}
