//! The `kube-nftproxy` command: parses flags, then prints the ruleset (`--dry-run`),
//! removes rules (`--cleanup`), or runs the proxy daemon.

use error::{OnNode, OrInput, RunError};
use kube_nftproxy::config::{self, Command, Config, ConfigError, Flags, Run};
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::model::Model;
use kube_nftproxy::nft::{cleanup, kdiff};
use kube_nftproxy::{conntrack, kube, lock, logging, manifests, render, requirements, skips, takeover};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[path = "cli/daemon.rs"]
mod daemon;
#[path = "cli/error.rs"]
mod error;
#[path = "cli/trace.rs"]
mod trace;

/// The allocator, jemalloc in every build. In the static build musl's own (mallocng) made the
/// 30k first sync 1.2 to 1.4 times as slow as the glibc build (its CPU time up to the sync 1.4
/// times); jemalloc brings both to glibc's (0.94 to 0.99 times) at the same peak (211 MB
/// against glibc's 213). Measured with `cargo bench --bench scale -- --musl-only`; mimalloc
/// (v3 and v2) stayed 1.1 to 1.3 times as slow and peaked 20 MB higher. glibc's malloc, in
/// turn, kept 100 to 165 MB free but resident under churn (a heap fragmented between the
/// model's objects and each read's parse), which `malloc_trim` could not give back; jemalloc
/// returns what a large sync freed within a second (`.cargo/config.toml`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let flags = match config::load_from(std::env::args_os()) {
        Ok((flags, notes)) => {
            // Checked when the flags were read: text or json.
            let format = flags.logging_format.parse().unwrap_or(logging::Format::Text);
            logging::init(format, flags.log_level());
            notes.log(flags.runs_daemon());
            flags
        }
        Err(ConfigError::Usage(e)) => e.exit(),
        Err(e) => {
            logging::init(logging::Format::Text, None);
            log::error!("{e}");
            return RunError::Config(e).exit_code();
        }
    };
    if let Some(what) = &flags.generate {
        return match config::help::generate(what).and_then(|text| std::io::stdout().write_all(&text)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log::error!("--generate {what}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (command, run) = match config::Run::from_flags(&flags) {
        Ok(parts) => parts,
        Err(e) => {
            log::error!("{e}");
            return RunError::Config(e).exit_code();
        }
    };
    let result = match command {
        Command::WriteConfig(path) => write_config(&flags, &path),
        Command::Explain { config, from, to, protocol, json } => explain(&run, &config, (&from, &to, &protocol), json),
        Command::Trace { config, from, to, protocol, count, timeout, json } => {
            trace::trace(&run, *config, trace::TraceFlags { from, to, protocol, count, timeout, json })
        }
        Command::Cleanup { kube_proxy } => run_cleanup(kube_proxy),
        Command::DryRun { config, diff: true, json } => return dry_run_diff(&run, &config, json),
        Command::DryRun { config, diff: false, .. } => dry_run(&run, &config),
        Command::InitOnly(config) => init_only(&run, &config),
        Command::Daemon(config) => daemon::daemon(&run, *config, &flags),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            e.exit_code()
        }
    }
}

/// `--write-config-to`: the effective configuration written as kube-proxy writes it, then exit.
fn write_config(flags: &Flags, path: &std::path::Path) -> Result<(), RunError> {
    config::write_config(flags, path)?;
    log::info!("wrote the configuration to {}", path.display());
    Ok(())
}

/// The API source's shared state, if an API server is to be followed.
fn api_source(
    run: &Run,
    cfg: &Config,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<Arc<kube::Shared>>, RunError> {
    let api = &run.api;
    let manifests = run.sources.manifests.is_some();
    let Some(client_cfg) = kube::client_config(api.kubeconfig.as_deref(), api.master.as_deref(), manifests)? else {
        return Ok(None);
    };
    let client = kube::Client::new(&client_cfg)?;
    let settings = kube::Settings::from(api);
    let shared = kube::Shared::new(client, settings, &cfg.node_name, inbox.clone(), stop.clone());
    Ok(Some(Arc::new(shared.with_proxy_name(cfg.service_proxy_name.clone()))))
}

fn dry_run(run: &Run, cfg: &Config) -> Result<(), RunError> {
    let model = load_model(run, cfg)?;
    let ruleset = render::render(&model, cfg).input()?;
    skips::warn_each("rendering", ruleset.warnings());
    let script = render::full_sync_script(&ruleset, &cfg.node_name).input()?;
    std::io::stdout().lock().write_all(script.as_bytes()).doing("writing the ruleset")?;
    Ok(())
}

/// `explain`: where a connection goes through the rules a full sync would apply, and why.
fn explain(run: &Run, cfg: &Config, (from, to, protocol): (&str, &str, &str), json: bool) -> Result<(), RunError> {
    let query = kube_nftproxy::explain::Query::parse(from, to, protocol).input()?.seen_from_this_host();
    let model = load_model(run, cfg)?;
    let answer = kube_nftproxy::explain::explain(&model, cfg, &query).input()?;
    let out = if json {
        format!("{:#}\n", kube_nftproxy::explain::json(&answer))
    } else {
        kube_nftproxy::explain::text(&answer)
    };
    std::io::stdout().lock().write_all(out.as_bytes()).doing("writing the answer")?;
    Ok(())
}

/// `--dry-run --diff`: exits as `diff` does, 0 when a sync would change nothing, 1 when it
/// would change something, 2 on trouble of any kind (1 being taken).
fn dry_run_diff(run: &Run, cfg: &Config, json: bool) -> ExitCode {
    let diff = || -> Result<bool, RunError> {
        let ruleset = render::render(&load_model(run, cfg)?, cfg).input()?;
        skips::warn_each("rendering", ruleset.warnings());
        let report = kdiff::against_kernel(&ruleset, &cfg.node_name).input()?;
        let out = if json { report.to_json() } else { report.to_text() };
        std::io::stdout().lock().write_all(out.as_bytes()).doing("writing the differences")?;
        Ok(report.differences)
    };
    match diff() {
        Ok(differences) => ExitCode::from(u8::from(differences)),
        Err(e) => {
            log::error!("{e}");
            ExitCode::from(error::EXIT_BAD_INPUT)
        }
    }
}

/// The model a one-shot command (`--dry-run`, `explain`) works from: the manifests and a
/// listing from the API server, as far as given, and this host's addresses.
fn load_model(run: &Run, cfg: &Config) -> Result<Model, RunError> {
    let mut model = Model::default();
    if let Some(path) = &run.sources.manifests {
        // The model's own warnings while filing count into the same pass.
        let _pass = skips::pass("reading the manifests");
        let (loaded, warnings) =
            manifests::load_model_for(path, &cfg.node_name, cfg.service_proxy_name.as_deref()).input()?;
        skips::warn_each("reading the manifests", warnings);
        model = loaded;
    }
    let inbox = Arc::new(Inbox::default());
    if let Some(api) = api_source(run, cfg, &inbox, &Arc::new(AtomicBool::new(false)))? {
        kube::list_once(&api).map_err(RunError::api("listing from the API server"))?;
        for change in inbox.wait(std::time::Instant::now()).changes {
            model.file(change);
        }
    }
    model.set_external_ips(cfg.external_ips);
    model.set_host_addresses(kube_nftproxy::host::interface_addresses().doing("reading interface addresses")?);
    Ok(model)
}

fn run_cleanup(kube_proxy: bool) -> Result<(), RunError> {
    requirements::check()?;
    // A running daemon would put back at once what this removes.
    let owns = "a kube-nftproxy daemon owns this node's tables; stop it before --cleanup";
    let _owner = lock::try_own().doing("taking the node lock")?.ok_or_else(|| RunError::Input(owns.into()))?;
    // What fails from here is the node's doing (a held xtables lock, a refused transaction),
    // not the input's: exit 1, as for the API server, so that a supervisor retries.
    cleanup::remove_own_tables().on_node("removing kube-nftproxy's tables")?;
    log::info!("removed kube-nftproxy's tables (ip and ip6 {})", render::TABLE_NAME);
    if kube_proxy {
        let outcome = takeover::take_over();
        takeover::log_outcome(&outcome);
        let all_went = outcome.ok();
        outcome.rules.on_node("removing kube-proxy's rules")?;
        outcome.interface.on_node(format_args!("removing interface {}", takeover::IPVS_INTERFACE))?;
        if !all_went {
            let failed = "removing what kube-proxy left failed in part (logged above)";
            return Err(RunError::Node(error::NodeError::Failed(failed.into())));
        }
    } else {
        let found =
            takeover::report("--cleanup --cleanup-kube-proxy removes it").on_node("looking for kube-proxy's rules")?;
        for what in cleanup::describe_kept(&found.kept) {
            log::info!("left {what}");
        }
    }
    Ok(())
}

/// `--init-only`: what needs more than CAP_NET_ADMIN, done once; each setting must take.
fn init_only(run: &Run, cfg: &Config) -> Result<(), RunError> {
    if cfg.service_proxy_name.is_some() {
        log::info!("--init-only: beside kube-proxy (--service-proxy-name) the conntrack settings are its; none set");
        return Ok(());
    }
    conntrack::sysctl::apply_to_node(&run.node.conntrack).result()?;
    log::info!("--init-only: conntrack settings in place");
    Ok(())
}
