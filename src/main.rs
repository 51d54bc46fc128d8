//! The `kube-nftproxy` command: parses flags, then prints the ruleset (`--dry-run`),
//! removes rules (`--cleanup`), or runs the proxy daemon.

use anyhow::Context;
use kube_nftproxy::config::{self, Config, ConfigError, Flags};
use kube_nftproxy::health::Health;
use kube_nftproxy::http::{self, Route};
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::metrics::Metrics;
use kube_nftproxy::model::Model;
use kube_nftproxy::nft::{Applier, OwnPorts, cleanup, exec, guard, kdiff};
use kube_nftproxy::observe::Observers;
use kube_nftproxy::sync::{Periods, Syncer};
use kube_nftproxy::{conntrack, kube, lock, manifests, render, requirements, takeover};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

/// The static build's allocator: musl's own (mallocng) made the 30k first sync 1.2 to 1.4
/// times as slow as the glibc build (its CPU time up to the sync 1.4 times); jemalloc brings
/// both to glibc's (0.94 to 0.99 times) at the same peak (211 MB against glibc's 213).
/// Measured with `cargo bench --bench scale -- --musl-only`; mimalloc (v3 and v2) stayed 1.1
/// to 1.3 times as slow and peaked 20 MB higher. The glibc build keeps glibc's malloc.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit status for bad input files and flags.
const EXIT_BAD_INPUT: u8 = 2;

/// How often the manifests are checked for changes.
const MANIFEST_POLL: Duration = Duration::from_secs(1);

/// How often a second instance checks whether the first has let go of the node.
const LOCK_POLL: Duration = Duration::from_millis(200);

/// How long a stop may take before the process ends without the sync thread.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let flags = match config::load_from(std::env::args_os()) {
        Ok((flags, unknown)) => {
            init_logging(flags.log_level());
            for field in unknown {
                log::warn!("--config: unknown field {field:?} ignored");
            }
            flags
        }
        Err(ConfigError::Usage(e)) => e.exit(),
        Err(e) => {
            init_logging(None);
            log::error!("{e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let result = if flags.command.is_some() {
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
        daemon(&flags)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            // The API server or its credentials are at fault, or the node, not the input.
            let not_input = e.downcast_ref::<kube::ClientError>().is_some()
                || e.downcast_ref::<kube::ApiError>().is_some()
                || e.downcast_ref::<kube::KubeConfigError>().is_some()
                || e.downcast_ref::<requirements::RequirementError>().is_some()
                || e.downcast_ref::<conntrack::sysctl::NotSet>().is_some();
            if not_input { ExitCode::FAILURE } else { ExitCode::from(EXIT_BAD_INPUT) }
        }
    }
}

/// Logs at `level` (from `-v`) for this crate, else as RUST_LOG says, else at info; one
/// line a message, as env_logger writes it, with control characters escaped: a message may
/// carry names read from the kernel or the API server, and logs reach terminals and
/// aggregators that split on line breaks.
fn init_logging(level: Option<log::LevelFilter>) {
    let mut builder = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(level) = level {
        builder.filter_module("kube_nftproxy", level);
    }
    // ureq_proto logs only below info, and its trace dumps every byte a request sends, the
    // Authorization header too: never at all, whatever RUST_LOG asks.
    builder.filter_module("ureq_proto", log::LevelFilter::Info);
    builder.format(|buf, record| {
        // A more specific RUST_LOG directive (`ureq_proto::util=trace`) wins over the filter
        // above: such records are dropped here whatever let them through.
        if record.target().starts_with("ureq_proto") && record.level() > log::Level::Info {
            return Ok(());
        }
        let style = buf.default_level_style(record.level());
        let message = record.args().to_string();
        let message = kube_nftproxy::text::printable(&message);
        writeln!(buf, "[{} {style}{:<5}{style:#} {}] {message}", buf.timestamp(), record.level(), record.target())
    });
    builder.init();
}

/// The API source's shared state for the flags, if an API server is to be followed.
fn api_source(
    flags: &Flags,
    node_name: &str,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Option<Arc<kube::Shared>>> {
    let Some(cfg) =
        kube::client_config(flags.kubeconfig.as_deref(), flags.master.as_deref(), flags.manifests.is_some())?
    else {
        return Ok(None);
    };
    let client = kube::Client::new(&cfg)?;
    let settings = kube::Settings {
        page_size: flags.list_page_size.max(1),
        watch_timeout: flags.watch_timeout,
        ..kube::Settings::default()
    };
    Ok(Some(Arc::new(kube::Shared::new(client, settings, node_name, inbox.clone(), stop.clone()))))
}

fn dry_run(flags: &Flags) -> anyhow::Result<()> {
    let cfg = Config::from_flags(flags)?;
    let model = load_model(flags, &cfg)?;
    let ruleset = render::render(&model, &cfg)?;
    for w in ruleset.warnings() {
        log::warn!("{w}");
    }
    let script = render::full_sync_script(&ruleset, &cfg.node_name)?;
    std::io::stdout().lock().write_all(script.as_bytes()).context("writing the ruleset")?;
    Ok(())
}

/// `explain`: where a connection goes through the rules a full sync would apply, and why.
fn explain(flags: &Flags) -> anyhow::Result<()> {
    let (Some(from), Some(to)) = (&flags.from, &flags.to) else {
        anyhow::bail!("explain needs --from SRC (a pod IP, `node`, or an outside address) and --to IP:PORT");
    };
    let query = kube_nftproxy::explain::Query::parse(from, to, &flags.protocol)?.seen_from_this_host();
    let cfg = Config::from_flags(flags)?;
    let model = load_model(flags, &cfg)?;
    let answer = kube_nftproxy::explain::explain(&model, &cfg, &query)?;
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
    let run = || -> anyhow::Result<bool> {
        let cfg = Config::from_flags(flags)?;
        let ruleset = render::render(&load_model(flags, &cfg)?, &cfg)?;
        for w in ruleset.warnings() {
            log::warn!("{w}");
        }
        let report = kdiff::against_kernel(&ruleset, &cfg.node_name)?;
        let out = if flags.output == "json" { report.to_json() } else { report.to_text() };
        std::io::stdout().lock().write_all(out.as_bytes()).context("writing the differences")?;
        Ok(report.differences)
    };
    match run() {
        Ok(differences) => ExitCode::from(u8::from(differences)),
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The model a one-shot command (`--dry-run`, `explain`) works from: the manifests and a
/// listing from the API server, as far as given, and this host's addresses.
fn load_model(flags: &Flags, cfg: &Config) -> anyhow::Result<Model> {
    let mut model = Model::default();
    if let Some(path) = &flags.manifests {
        let (loaded, warnings) = manifests::load_model(path, &cfg.node_name)?;
        for w in warnings {
            log::warn!("{w}");
        }
        model = loaded;
    }
    let inbox = Arc::new(Inbox::default());
    if let Some(api) = api_source(flags, &cfg.node_name, &inbox, &Arc::new(AtomicBool::new(false)))? {
        kube::list_once(&api).context("listing from the API server")?;
        for change in inbox.wait(std::time::Instant::now()).changes {
            model.file(change);
        }
    }
    model.set_host_addresses(kube_nftproxy::host::interface_addresses().context("reading interface addresses")?);
    Ok(model)
}

fn run_cleanup(flags: &Flags) -> anyhow::Result<()> {
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
        outcome.rules.context("removing kube-proxy's rules")?;
        outcome.interface.with_context(|| format!("removing interface {}", takeover::IPVS_INTERFACE))?;
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
fn init_only(flags: &Flags) -> anyhow::Result<()> {
    Config::from_flags(flags)?;
    conntrack::sysctl::apply_to_node(&conntrack::sysctl::Settings::from_flags(flags)).result()?;
    log::info!("--init-only: conntrack settings in place");
    Ok(())
}

fn daemon(flags: &Flags) -> anyhow::Result<()> {
    let cfg = Config::from_flags(flags)?;
    // As Go's runtime for kube-proxy: a listener and a connection per Local Service and
    // checker would not fit systemd's or a runtime's soft limit of 1,024.
    http::raise_open_files_limit();
    let stop = Arc::new(AtomicBool::new(false));
    // Every child run (the look at the node's nft, iptables-legacy-save) is bounded by
    // --nft-timeout and ended at shutdown.
    let limits = exec::Limits { timeout: flags.nft_timeout, stop: stop.clone() };
    limits.clone().configure();
    requirements::check()?;
    // In the background: a hung nft must not hold up the start, and nothing needs its answer.
    std::thread::Builder::new()
        .name("nft-version".into())
        .spawn(move || requirements::log_node_nft(&requirements::node_nft(&limits)))?;
    let periods =
        Periods { min_sync: flags.min_sync_period, sync: flags.sync_period, full_sync: flags.full_sync_period };
    let inbox = Arc::new(Inbox::default());
    let (events, main_events) = channel::<Event>();
    spawn_signal_thread(inbox.clone(), stop.clone(), events.clone())?;
    let Some(_owner) = lock::own(LOCK_POLL, || stop.load(Ordering::SeqCst)).context("taking the node lock")? else {
        log::info!("stopped while waiting for the other instance");
        return Ok(());
    };
    conntrack::sysctl::apply_to_node(&conntrack::sysctl::Settings::from_flags(flags));
    set_oom_score_adj(flags.oom_score_adj);
    let own = Arc::new(OwnPorts::default());
    let alarms = inbox.clone();
    let (_guard, quiet) = guard::spawn(own.clone(), stop.clone(), move |alarm| match alarm {
        guard::Alarm::Tampered(why) => alarms.request(|r| r.tampered = Some(why)),
        guard::Alarm::Unsure => alarms.request(|r| r.unsure = true),
    })
    .context("watching nftables notifications")?;
    let mut sources = Vec::new();
    if let Some(path) = flags.manifests.clone() {
        manifests::watch(path, cfg.node_name.clone(), MANIFEST_POLL, stop.clone(), inbox.clone())?;
        sources.push(manifests::SOURCE);
    }
    let api = api_source(flags, &cfg.node_name, &inbox, &stop)?;
    if let Some(api) = &api {
        log::info!("following the API server at {}", api.client.server());
        kube::start(api)?;
        sources.extend(kube::REQUIRED);
    }
    let applier = Applier::new(&cfg.node_name, own).with_quiet(Arc::new(quiet));
    let observe = observers(flags, api.as_deref(), &inbox)?;
    let mut syncer = Syncer::new(cfg, periods, applier, &sources).with_observers(observe);
    if api.is_some() {
        syncer = syncer.wait_for_node(flags.node_wait);
    }
    // Once this proxy's rules are in, kube-proxy's go. Removing kube-ipvs0 takes the service
    // IPs off the host's addresses, which a refresh reads again.
    let requests = inbox.clone();
    let takeover = takeover::at_start(flags.cleanup_kube_proxy_at_start, stop.clone(), move |gone| {
        if gone {
            requests.request(|r| r.refresh = true);
        }
    });
    // And, as kube-proxy, a Starting Event on this node's Node.
    syncer = syncer.after_first_sync(kube::events::and_starting(api.clone(), takeover));
    std::thread::Builder::new().name("sync".into()).spawn(move || {
        syncer.run(&inbox);
        let _ = events.send(Event::SyncEnded);
    })?;
    // The sync thread ends on a stop signal; if it is stuck (a kernel that does not answer),
    // the process ends anyway after a grace period: the rules stay in place either way.
    if let Ok(Event::Stopping) = main_events.recv()
        && main_events.recv_timeout(SHUTDOWN_GRACE).is_err()
    {
        log::error!("the sync thread did not stop within {SHUTDOWN_GRACE:?}; exiting anyway, the rules stay in place");
    }
    exec::end_all();
    Ok(())
}

/// Asks the kernel's OOM killer to spare the proxy, as kube-proxy does. A failure is logged
/// as information, as kube-proxy logs it: lowering the score takes `CAP_SYS_RESOURCE`, which
/// a sandbox or a container without it lacks, and the proxy works the same without it.
fn set_oom_score_adj(score: i32) {
    match std::fs::write("/proc/self/oom_score_adj", score.to_string()) {
        Ok(()) => log::debug!("oom_score_adj set to {score}"),
        Err(e) => log::info!("could not set oom_score_adj to {score}: {e}"),
    }
}

/// The HTTP endpoints (health, metrics, health-check node ports) and what feeds them.
fn observers(flags: &Flags, api: Option<&kube::Shared>, inbox: &Arc<Inbox>) -> anyhow::Result<Observers> {
    let metrics = match flags.metrics_bind_address.0 {
        Some(_) => Some(Arc::new(Metrics::new()?)),
        None => None,
    };
    if let (Some(api), Some(m)) = (api, &metrics) {
        api.set_metrics(m.clone());
    }
    // As kube-proxy: a change may wait up to twice the sync period before it is unhealthy.
    let health = Arc::new(Health::new(flags.sync_period.saturating_mul(2)).watching(inbox.clone()));
    let fixed = [(flags.healthz_bind_address.0, Route::Health), (flags.metrics_bind_address.0, Route::Metrics)];
    let fixed = fixed.into_iter().filter_map(|(addr, route)| addr.map(|a| (a, route))).collect();
    let server = http::Server::start(fixed, health.clone(), metrics.clone(), inbox.clone())?;
    let observe = Observers::default().with_health(health).with_service_health(server);
    Ok(match metrics {
        Some(m) => observe.with_metrics(m),
        None => observe,
    })
}

/// What the main thread waits for.
enum Event {
    /// A stop signal arrived.
    Stopping,
    /// The sync thread ended.
    SyncEnded,
}

/// Starts the `signals` thread. Signals are handled, not blocked, so children start with
/// default dispositions and an empty mask.
/// - SIGTERM, SIGINT: stop (running children are ended), leaving the rules in place;
/// - SIGHUP: rewrite the tables in place now (a full sync);
/// - SIGUSR1: log a summary of the state;
/// - SIGUSR2, SIGALRM: logged and ignored (their default would end the daemon silently).
fn spawn_signal_thread(inbox: Arc<Inbox>, stop: Arc<AtomicBool>, events: Sender<Event>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGALRM, SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM])
        .context("installing signal handlers")?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for sig in signals.forever() {
            match sig {
                SIGTERM | SIGINT => {
                    log::info!("received signal {sig}; stopping, the rules stay in place");
                    stop.store(true, Ordering::SeqCst);
                    inbox.request(|r| r.shutdown = true);
                    let _ = events.send(Event::Stopping);
                }
                SIGHUP => {
                    log::info!("received SIGHUP; rewriting the tables in place");
                    inbox.request(|r| r.refresh = true);
                }
                SIGUSR1 => inbox.request(|r| r.summary = true),
                other => log::info!("received signal {other}; ignored"),
            }
        }
    })?;
    Ok(())
}
