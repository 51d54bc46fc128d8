//! The `kube-nftproxy` command: parses flags, loads the cluster and prints or applies the ruleset.

use anyhow::Context;
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::{manifests, model::Model, render};
use std::io::Write;
use std::process::ExitCode;

/// Exit status for bad input files and flags.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let flags = Flags::parse();
    match run(&flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn run(flags: &Flags) -> anyhow::Result<()> {
    let cfg = Config::from_flags(flags)?;
    let path = flags.manifests.as_ref().context("--manifests is required")?;
    let loaded = manifests::load(path)?;
    for bad in &loaded.bad {
        log::warn!("skipping {} in {}: {}", bad.what, bad.path.display(), bad.reason);
    }
    let mut model = Model::default();
    model.host_addresses = kube_nftproxy::host::interface_addresses().context("reading interface addresses")?;
    for obj in &loaded.objects {
        if let Err(e) = model.apply(obj, &cfg.node_name) {
            log::warn!("{e}");
        }
    }
    let ruleset = render::render(&model, &cfg)?;
    let script = render::full_sync_script(&ruleset, &cfg.node_name)?;
    if !flags.dry_run {
        anyhow::bail!("only --dry-run is implemented so far");
    }
    std::io::stdout().lock().write_all(script.as_bytes()).context("writing the ruleset")?;
    Ok(())
}
