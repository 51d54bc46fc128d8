//! `kube-apiserver-emulator`: a small Kubernetes API server speaking the real list/watch protocol
//! over services, endpointslices, nodes, namespaces, servicecidrs and (events.k8s.io) events,
//! with fault injection, for testing and benchmarking kube-nftproxy.

mod api;
mod conn;
mod control;
mod discovery;
mod events;
mod faults;
mod history;
mod http;
mod list;
mod manifests;
mod openapi;
mod proto;
mod resources;
mod selectors;
mod server;
mod stats;
mod store;
mod tls;
mod watch;
mod watchers;
mod watchlist;

use anyhow::Context;
use clap::Parser;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(version, about = "A Kubernetes API-server emulator for list/watch testing")]
struct Flags {
    /// API listen address; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Create the API listener inside network namespace /run/netns/NAME.
    #[arg(long, value_name = "NAME")]
    netns: Option<String>,
    /// Plain-HTTP, unauthenticated listener (host namespace) with the API and /emulator/*.
    #[arg(long, value_name = "ADDR:PORT")]
    control: Option<SocketAddr>,
    /// Directory of CA, certificates, token and kubeconfigs; missing files are generated.
    #[arg(long, value_name = "DIR", required_unless_present = "plain")]
    tls_dir: Option<PathBuf>,
    /// Extra subject alternative names for the server certificate.
    #[arg(long)]
    san: Vec<String>,
    /// Bearer tokens, one per line, re-read on every check (default: TLS_DIR/token).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Serve the API over plain HTTP without authentication.
    #[arg(long)]
    plain: bool,
    /// Initial objects: a YAML/JSON file or a directory of them.
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// Events kept for watches and paged lists; older ones are compacted away.
    #[arg(long, default_value_t = 200_000)]
    history: usize,
    /// Interval between watch bookmarks (e.g. 60s, 500ms).
    #[arg(long, default_value = "60s", value_parser = duration)]
    bookmark_interval: Duration,
    /// Watches without timeoutSeconds last this times a random factor in [1, 2).
    #[arg(long, default_value = "1800s", value_parser = duration)]
    min_request_timeout: Duration,
    /// Refuse spec.clusterIP/spec.type field selectors (a server before 1.31).
    #[arg(long)]
    no_service_field_selectors: bool,
    /// Do not serve servicecidrs (no MultiCIDRServiceAllocator).
    #[arg(long)]
    no_servicecidrs: bool,
    /// Page resourceVersion=0 lists by their limit, as a server with `--watch-cache=false`
    /// does; by default such a list is answered whole, as the watch cache answers it.
    #[arg(long)]
    no_watch_cache: bool,
    /// Refuse WatchList (`sendInitialEvents`) with 422, as a server with its `WatchList` gate
    /// off, or one before 1.27, does (the `watch_list` fault switch turns it on and off later).
    #[arg(long)]
    no_watch_list: bool,
    /// The resourceVersion before the first write.
    #[arg(long, default_value_t = 1000)]
    start_resource_version: u64,
}

/// Parses `90`, `90s`, `500ms` or `2m`.
fn duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num.parse().map_err(|_| format!("not a duration: {s}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("unknown unit in {s}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let flags = Flags::parse();
    let catalog = resources::Catalog {
        servicecidrs: !flags.no_servicecidrs,
        service_field_selectors: !flags.no_service_field_selectors,
        watch_cache: !flags.no_watch_cache,
    };
    let store = store::Store::new(flags.start_resource_version, flags.history);
    if let Some(path) = &flags.manifests {
        let n = manifests::load(path, &catalog, &store).context("loading manifests")?;
        log::info!("loaded {n} objects from {}", path.display());
    }
    let faults = faults::Faults::default();
    faults.serve_watch_list(!flags.no_watch_list);
    let app = Arc::new(api::App {
        store,
        catalog,
        faults,
        stats: stats::Stats::default(),
        bookmark_interval: flags.bookmark_interval,
        min_request_timeout: flags.min_request_timeout,
    });
    let api = server::bind(flags.listen, flags.netns.as_deref())
        .with_context(|| format!("binding {} (netns {:?})", flags.listen, flags.netns))?;
    let api_addr = api.local_addr()?;
    let control = match flags.control {
        Some(addr) => Some(server::bind(addr, None).with_context(|| format!("binding control {addr}"))?),
        None => None,
    };
    let mode = match (&flags.tls_dir, flags.plain) {
        (Some(dir), false) => {
            tls::ensure_dir(dir, api_addr, &flags.san).context("preparing the TLS directory")?;
            let config = tls::server_config(dir).context("TLS configuration")?;
            let path = flags.token_file.clone().unwrap_or_else(|| dir.join("token"));
            server::Mode::Tls { config, tokens: Arc::new(tls::Tokens { path }) }
        }
        _ => server::Mode::Plain,
    };
    let scheme = if matches!(mode, server::Mode::Plain) { "http" } else { "https" };
    server::serve(api, app.clone(), mode)?;
    let mut ready = format!("ready api={scheme}://{}", tls::url_host(api_addr));
    if let Some(listener) = control {
        ready.push_str(&format!(" control=http://{}", tls::url_host(listener.local_addr()?)));
        server::serve(listener, app.clone(), server::Mode::Control)?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{ready}")?;
    out.flush()?;
    drop(out);
    loop {
        std::thread::park();
    }
}
