//! The `kube-nftproxy` command: parses flags, then prints the ruleset (`--dry-run`),
//! removes rules (`--cleanup`), or runs the proxy daemon.

use anyhow::Context;
use error::{OrInput, RunError};
use kube_nftproxy::config::{self, Config, ConfigError, Flags};
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::model::Model;
use kube_nftproxy::nft::{cleanup, kdiff};
use kube_nftproxy::{conntrack, kube, lock, logging, manifests, render, requirements, takeover};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[path = "cli/daemon.rs"]
mod daemon;
#[path = "cli/error.rs"]
mod error;

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
            notes.log();
            flags
        }
        Err(ConfigError::Usage(e)) => e.exit(),
        Err(e) => {
            logging::init(logging::Format::Text, None);
            log::error!("{e}");
            return RunError::Config(e).exit_code();
        }
    };
    let result = if let Some(path) = &flags.write_config_to {
        write_config(&flags, path)
    } else if flags.command.is_some() {
        explain(&flags)
    } else if flags.cleanup {
        run_cleanup(&flags)
    } else if flags.dry_run && flags.diff {
        return dry_run_diff(&flags);
    } else if flags.dry_run {
        dry_run(&flags)
    } else if flags.init_only {
        init_only(&flags)
    } else {
        daemon::daemon(&flags)
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

/// The API source's shared state for the flags, if an API server is to be followed.
fn api_source(
    flags: &Flags,
    node_name: &str,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<Arc<kube::Shared>>, RunError> {
    let Some(cfg) =
        kube::client_config(flags.kubeconfig.as_deref(), flags.master.as_deref(), flags.manifests.is_some())?
    else {
        return Ok(None);
    };
    let client = kube::Client::new(&cfg)?;
    let settings = kube::Settings {
        page_size: flags.list_page_size.max(1),
        watch_timeout: flags.watch_timeout,
        qps: flags.kube_api_qps,
        // Never negative: refused when the flags were read, as upstream refuses it.
        burst: u32::try_from(flags.kube_api_burst).unwrap_or_default(),
        content_type: kube::ContentType::parse(&flags.kube_api_content_type)
            .map_err(|e| RunError::Input(anyhow::anyhow!("--kube-api-content-type: {e}")))?,
    };
    let shared = kube::Shared::new(client, settings, node_name, inbox.clone(), stop.clone());
    Ok(Some(Arc::new(shared.with_proxy_name(flags.service_proxy_name.clone()))))
}

fn dry_run(flags: &Flags) -> Result<(), RunError> {
    let cfg = Config::from_flags(flags)?;
    let model = load_model(flags, &cfg)?;
    let ruleset = render::render(&model, &cfg).input()?;
    for w in ruleset.warnings() {
        log::warn!("{w}");
    }
    let script = render::full_sync_script(&ruleset, &cfg.node_name).input()?;
    std::io::stdout().lock().write_all(script.as_bytes()).context("writing the ruleset")?;
    Ok(())
}

/// `explain`: where a connection goes through the rules a full sync would apply, and why.
fn explain(flags: &Flags) -> Result<(), RunError> {
    let (Some(from), Some(to)) = (&flags.from, &flags.to) else {
        return Err(RunError::Input(anyhow::anyhow!(
            "explain needs --from SRC (a pod IP, `node`, or an outside address) and --to IP:PORT"
        )));
    };
    let query = kube_nftproxy::explain::Query::parse(from, to, &flags.protocol).input()?.seen_from_this_host();
    let cfg = Config::from_flags(flags)?;
    let model = load_model(flags, &cfg)?;
    let answer = kube_nftproxy::explain::explain(&model, &cfg, &query).input()?;
    let out = match flags.output.as_str() {
        "json" => format!("{:#}\n", kube_nftproxy::explain::json(&answer)),
        _ => kube_nftproxy::explain::text(&answer),
    };
    std::io::stdout().lock().write_all(out.as_bytes()).context("writing the answer")?;
    Ok(())
}

/// `--dry-run --diff`: exits as `diff` does, 0 when a sync would change nothing, 1 when it
/// would change something, 2 on trouble of any kind (1 being taken).
fn dry_run_diff(flags: &Flags) -> ExitCode {
    let run = || -> Result<bool, RunError> {
        let cfg = Config::from_flags(flags)?;
        let ruleset = render::render(&load_model(flags, &cfg)?, &cfg).input()?;
        for w in ruleset.warnings() {
            log::warn!("{w}");
        }
        let report = kdiff::against_kernel(&ruleset, &cfg.node_name).input()?;
        let out = if flags.output == "json" { report.to_json() } else { report.to_text() };
        std::io::stdout().lock().write_all(out.as_bytes()).context("writing the differences")?;
        Ok(report.differences)
    };
    match run() {
        Ok(differences) => ExitCode::from(u8::from(differences)),
        Err(e) => {
            log::error!("{e}");
            ExitCode::from(error::EXIT_BAD_INPUT)
        }
    }
}

/// The model a one-shot command (`--dry-run`, `explain`) works from: the manifests and a
/// listing from the API server, as far as given, and this host's addresses.
fn load_model(flags: &Flags, cfg: &Config) -> Result<Model, RunError> {
    let mut model = Model::default();
    if let Some(path) = &flags.manifests {
        let (loaded, warnings) =
            manifests::load_model_for(path, &cfg.node_name, cfg.service_proxy_name.as_deref()).input()?;
        for w in warnings {
            log::warn!("{w}");
        }
        model = loaded;
    }
    let inbox = Arc::new(Inbox::default());
    if let Some(api) = api_source(flags, &cfg.node_name, &inbox, &Arc::new(AtomicBool::new(false)))? {
        kube::list_once(&api).map_err(RunError::api("listing from the API server"))?;
        for change in inbox.wait(std::time::Instant::now()).changes {
            model.file(change);
        }
    }
    model.set_external_ips(cfg.external_ips);
    model.set_host_addresses(kube_nftproxy::host::interface_addresses().context("reading interface addresses")?);
    Ok(model)
}

fn run_cleanup(flags: &Flags) -> Result<(), RunError> {
    requirements::check()?;
    // A running daemon would put back at once what this removes.
    let _owner = lock::try_own()
        .context("taking the node lock")?
        .context("a kube-nftproxy daemon owns this node's tables; stop it before --cleanup")?;
    cleanup::remove_own_tables().context("removing kube-nftproxy's tables")?;
    log::info!("removed kube-nftproxy's tables (ip and ip6 {})", render::TABLE_NAME);
    if flags.cleanup_kube_proxy {
        let outcome = takeover::take_over();
        takeover::log_outcome(&outcome);
        let all_went = outcome.ok();
        outcome.rules.context("removing kube-proxy's rules")?;
        outcome.interface.with_context(|| format!("removing interface {}", takeover::IPVS_INTERFACE))?;
        if !all_went {
            return Err(RunError::Input(anyhow::anyhow!(
                "removing what kube-proxy left failed in part (logged above)"
            )));
        }
    } else {
        let found =
            takeover::report("--cleanup --cleanup-kube-proxy removes it").context("looking for kube-proxy's rules")?;
        for what in cleanup::describe_kept(&found.kept) {
            log::info!("left {what}");
        }
    }
    Ok(())
}

/// `--init-only`: what needs more than CAP_NET_ADMIN, done once; each setting must take.
fn init_only(flags: &Flags) -> Result<(), RunError> {
    Config::from_flags(flags)?;
    if flags.service_proxy_name.is_some() {
        log::info!("--init-only: beside kube-proxy (--service-proxy-name) the conntrack settings are its; none set");
        return Ok(());
    }
    conntrack::sysctl::apply_to_node(&conntrack::sysctl::Settings::from_flags(flags)).result()?;
    log::info!("--init-only: conntrack settings in place");
    Ok(())
}
