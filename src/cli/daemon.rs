//! The daemon: the threads it starts (signals, the configuration file's watch, the sources,
//! the HTTP endpoints, sync), the node lock, and how it ends.

use super::api_source;
use super::error::{OrInput, RunError};
use kube_nftproxy::config::{self, Config, ConfigError, Flags, Run};
use kube_nftproxy::health::Health;
use kube_nftproxy::http::{self, Route};
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::metrics::Metrics;
use kube_nftproxy::nft::{Applier, OwnPorts, exec, guard};
use kube_nftproxy::observe::Observers;
use kube_nftproxy::sync::Syncer;
use kube_nftproxy::{conntrack, kube, localhost, lock, manifests, requirements, serve, takeover, zpages};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

/// How often the manifests are checked for changes.
const MANIFEST_POLL: Duration = Duration::from_secs(1);

/// How often a second instance checks whether the first has let go of the node.
const LOCK_POLL: Duration = Duration::from_millis(200);

/// How long a stop may take before the process ends without the sync thread.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs the daemon until a stop signal (or a change to its configuration file); `flags` only
/// for the pages that show them (`/configz`, `/flagz`).
pub fn daemon(run: &Run, cfg: Config, flags: &Flags) -> Result<(), RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    prepare(run, &stop)?;
    let inbox = Arc::new(Inbox::default());
    let (events, main_events) = channel::<Event>();
    spawn_signal_thread(inbox.clone(), stop.clone(), events.clone())?;
    let config_changed = watch_config(run, &inbox, &stop, &events)?;
    let Some(_owner) = lock::own(LOCK_POLL, || stop.load(Ordering::SeqCst)).doing("taking the node lock")? else {
        log::info!("stopped while waiting for the other instance");
        return config_outcome(&config_changed);
    };
    // Beside kube-proxy (--service-proxy-name) the node's conntrack settings are its.
    if cfg.service_proxy_name.is_none() {
        conntrack::sysctl::apply_to_node(&run.node.conntrack);
    }
    set_oom_score_adj(run.node.oom_score_adj);
    let own = Arc::new(OwnPorts::default());
    let alarms = inbox.clone();
    let (_guard, quiet) = guard::spawn(own.clone(), stop.clone(), move |alarm| match alarm {
        guard::Alarm::Tampered(why) => alarms.request(|r| r.tampered = Some(why)),
        guard::Alarm::Unsure => alarms.request(|r| r.unsure = true),
    })
    .doing("watching nftables notifications")?;
    let (sources, api, observe) = sources(run, &cfg, flags, &inbox, &stop)?;
    let applier = Applier::new(&cfg.node_name, own)
        .with_quiet(Arc::new(quiet))
        .growing_maps(requirements::kernel_has(requirements::SET_SIZE_UPDATE))
        .reading_ahead();
    // A node of kube-proxy's IPVS mode is told if NodePorts move to the primary IPs.
    let nodeport_addresses_set = !cfg.nodeport_addresses.is_primary();
    let proxy_name = cfg.service_proxy_name.clone();
    let mut syncer = Syncer::new(cfg, run.periods, applier, &sources).with_observers(observe);
    if api.is_some() {
        syncer = syncer.wait_for_node(run.node.node_wait);
    }
    // And, as kube-proxy, a Starting Event on this node's Node.
    let takeover = takeover(run, proxy_name.as_deref(), nodeport_addresses_set, &inbox, &stop);
    syncer = syncer.after_first_sync(kube::events::and_starting(api.clone(), takeover));
    std::thread::Builder::new()
        .name("sync".into())
        .spawn(move || {
            syncer.run(&inbox);
            let _ = events.send(Event::SyncEnded);
        })
        .input()?;
    // The sync thread ends on a stop signal; if it is stuck (a kernel that does not answer),
    // the process ends anyway after a grace period: the rules stay in place either way.
    if let Ok(Event::Stopping) = main_events.recv()
        && main_events.recv_timeout(SHUTDOWN_GRACE).is_err()
    {
        log::error!("the sync thread did not stop within {SHUTDOWN_GRACE:?}; exiting anyway, the rules stay in place");
    }
    exec::end_all();
    config_outcome(&config_changed)
}

/// What the process needs before anything else: descriptors, bounded children, and a node
/// this proxy can run on.
fn prepare(run: &Run, stop: &Arc<AtomicBool>) -> Result<(), RunError> {
    // As Go's runtime for kube-proxy: a listener and a connection per Local Service and
    // checker would not fit systemd's or a runtime's soft limit of 1,024.
    http::raise_open_files_limit();
    // Every child run (the look at the node's nft, iptables-legacy-save) is bounded by
    // --nft-timeout and ended at shutdown.
    let limits = exec::Limits { timeout: run.node.nft_timeout, stop: stop.clone() };
    limits.clone().configure();
    requirements::check()?;
    // In the background: a hung nft must not hold up the start, and nothing needs its answer.
    std::thread::Builder::new()
        .name("nft-version".into())
        .spawn(move || requirements::log_node_nft(&requirements::node_nft(&limits)))
        .input()?;
    Ok(())
}

/// The sources the daemon follows (manifests, the API server), started, their names (for
/// the inbox's first-listing rule), the API source, and the HTTP endpoints.
type Sources = (Vec<&'static str>, Option<Arc<kube::Shared>>, Observers);

/// Starts the sources and the HTTP endpoints; the metrics are set before the reflectors
/// start, so their first requests count.
fn sources(
    run: &Run,
    cfg: &Config,
    flags: &Flags,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
) -> Result<Sources, RunError> {
    let mut sources = Vec::new();
    if let Some(path) = run.sources.manifests.clone() {
        let name = cfg.service_proxy_name.clone();
        manifests::watch_for(path, cfg.node_name.clone(), name, MANIFEST_POLL, stop.clone(), inbox.clone()).input()?;
        sources.push(manifests::SOURCE);
    }
    let api = api_source(run, cfg, inbox, stop)?;
    let observe = observers(run, cfg, flags, api.as_deref(), inbox, stop)?;
    if let Some(api) = &api {
        log::info!("following the API server at {}", api.client.server());
        kube::start(api).input()?;
        sources.extend(kube::REQUIRED);
    }
    Ok((sources, api, observe))
}

/// What runs once this proxy's rules are in: kube-proxy's go (removing kube-ipvs0 takes the
/// service IPs off the host's addresses, which a refresh reads again), unless this proxy
/// runs beside it (`--service-proxy-name`).
fn takeover(
    run: &Run,
    proxy_name: Option<&str>,
    nodeport_addresses_set: bool,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
) -> Box<dyn FnOnce() + Send> {
    let at_start = run.node.cleanup_kube_proxy_at_start;
    if let Some(name) = proxy_name {
        return takeover::beside_kube_proxy(name, at_start);
    }
    let requests = inbox.clone();
    takeover::at_start(at_start, nodeport_addresses_set, stop.clone(), move |gone| {
        if gone {
            requests.request(|r| r.refresh = true);
        }
    })
}

/// The daemon's end: an error when it stopped because its configuration file changed.
fn config_outcome(changed: &std::sync::Mutex<Option<ConfigError>>) -> Result<(), RunError> {
    match changed.lock().map(|mut c| c.take()) {
        Ok(Some(changed)) => Err(changed.into()),
        _ => Ok(()),
    }
}

/// As kube-proxy: a change to the `--config` file stops the daemon, which then ends with an
/// error saying so (its supervisor restarts it with the new file). Returns where the change is
/// left for the end.
fn watch_config(
    run: &Run,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
    events: &Sender<Event>,
) -> Result<Arc<std::sync::Mutex<Option<ConfigError>>>, RunError> {
    let found = Arc::new(std::sync::Mutex::new(None));
    if let Some((path, read)) = run.sources.config_file.clone() {
        let (inbox, stop_now, events, slot) = (inbox.clone(), stop.clone(), events.clone(), found.clone());
        config::watch::spawn(path, read, config::watch::POLL, stop.clone(), move |changed| {
            log::error!("{changed}");
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(changed);
            }
            stop_now.store(true, Ordering::SeqCst);
            inbox.request(|r| r.shutdown = true);
            let _ = events.send(Event::Stopping);
        })
        .doing("watching the configuration file")?;
    }
    Ok(found)
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
fn observers(
    run: &Run,
    cfg: &Config,
    flags: &Flags,
    api: Option<&kube::Shared>,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
) -> Result<Observers, RunError> {
    let metrics = match run.serve.metrics {
        Some(_) => Some(Arc::new(Metrics::new().input()?)),
        None => None,
    };
    if let (Some(api), Some(m)) = (api, &metrics) {
        api.set_metrics(m.clone());
    }
    // As kube-proxy: a change may wait up to twice the sync period before it is unhealthy.
    let health = Arc::new(Health::new(run.periods.sync.saturating_mul(2)).watching(inbox.clone()));
    let fixed = [(run.serve.healthz, Route::Health), (run.serve.metrics, Route::Metrics)];
    let fixed: Vec<_> = fixed.into_iter().filter_map(|(addr, route)| addr.map(|a| (a, route))).collect();
    if cfg.service_proxy_name.is_some() {
        check_free(run)?;
    }
    let endpoints = serve::Endpoints::new(health.clone(), metrics.clone(), inbox.clone(), Some(z_pages(run, flags)));
    let server = http::Server::start(fixed, endpoints).input()?;
    let mut observe = Observers::default().with_health(health).with_service_health(server);
    let families = localhost::families(cfg);
    if !families.is_empty() {
        let proxy =
            localhost::proxy::Proxy::start(metrics.clone(), stop.clone()).doing("serving localhost NodePorts")?;
        observe = observe.with_localhost(localhost::LocalhostView::new(families), proxy);
    }
    Ok(match metrics {
        Some(m) => observe.with_metrics(m),
        None => observe,
    })
}

/// Binds the health and metrics addresses once and lets them go, beside kube-proxy
/// (`--service-proxy-name`): there an address in use is most likely kube-proxy's own (it
/// listens on the same default ports), and retrying it for ever, as a restart's overlap calls
/// for, would leave this proxy's health unanswered. The error names the flag to change.
fn check_free(run: &Run) -> Result<(), RunError> {
    let fixed = [
        (run.serve.healthz, Route::Health, "--healthz-bind-address"),
        (run.serve.metrics, Route::Metrics, "--metrics-bind-address"),
    ];
    for (addr, route, flag) in fixed.into_iter().filter_map(|(a, r, f)| Some((a?, r, f))) {
        if let Err(e) = http::check_free(addr, route) {
            return Err(RunError::Input(format!(
                "--service-proxy-name: {e}; beside kube-proxy, which listens on the same ports, give {flag} another"
            )));
        }
    }
    Ok(())
}

/// `/configz` (kube-proxy's internal configuration type), `/statusz` and `/flagz` (each while
/// its gate is on): the command line read again for its flags' values.
fn z_pages(run: &Run, config: &Flags) -> Arc<zpages::ZPages> {
    use clap::CommandFactory;
    let flags = Flags::command()
        .try_get_matches_from(std::env::args_os())
        .map(|m| zpages::flagz::from_matches(&Flags::command(), &m))
        .unwrap_or_default();
    let pages = zpages::ZPages::new(std::time::SystemTime::now(), Some(config::internal(config)), flags);
    Arc::new(pages.gated(run.serve.statusz, run.serve.flagz))
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
/// - SIGHUP: a refresh now (the tables compared with the kernel's, what differs sent);
/// - SIGUSR1: log a summary of the state;
/// - SIGUSR2, SIGALRM: logged and ignored (their default would end the daemon silently).
fn spawn_signal_thread(inbox: Arc<Inbox>, stop: Arc<AtomicBool>, events: Sender<Event>) -> Result<(), RunError> {
    use signal_hook::consts::{SIGALRM, SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM])
        .doing("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                match sig {
                    SIGTERM | SIGINT => {
                        log::info!("received signal {sig}; stopping, the rules stay in place");
                        stop.store(true, Ordering::SeqCst);
                        inbox.request(|r| r.shutdown = true);
                        let _ = events.send(Event::Stopping);
                    }
                    SIGHUP => {
                        log::info!(
                            "received SIGHUP; refreshing the tables (compared with the kernel's, what differs sent)"
                        );
                        inbox.request(|r| r.refresh = true);
                    }
                    SIGUSR1 => inbox.request(|r| r.summary = true),
                    other => log::info!("received signal {other}; ignored"),
                }
            }
        })
        .input()?;
    Ok(())
}
