//! The `kube-nftproxy` command: parses flags, then prints the ruleset (`--dry-run`),
//! removes rules (`--cleanup`), or runs the proxy daemon.

use anyhow::Context;
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::nft::{Applier, OwnPids, cleanup, guard};
use kube_nftproxy::sync::{self, Msg, Periods};
use kube_nftproxy::{manifests, render};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

/// Exit status for bad input files and flags.
const EXIT_BAD_INPUT: u8 = 2;

/// How often the manifests are checked for changes.
const MANIFEST_POLL: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let flags = Flags::parse();
    let result = if flags.cleanup {
        run_cleanup(&flags)
    } else if flags.dry_run {
        dry_run(&flags)
    } else {
        daemon(&flags)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn dry_run(flags: &Flags) -> anyhow::Result<()> {
    let cfg = Config::from_flags(flags)?;
    let path = flags.manifests.as_ref().context("--manifests is required")?;
    let (mut model, warnings) = manifests::load_model(path, &cfg.node_name)?;
    for w in warnings {
        log::warn!("{w}");
    }
    model.set_host_addresses(kube_nftproxy::host::interface_addresses().context("reading interface addresses")?);
    let ruleset = render::render(&model, &cfg)?;
    for w in ruleset.warnings() {
        log::warn!("{w}");
    }
    let script = render::full_sync_script(&ruleset, &cfg.node_name)?;
    std::io::stdout().lock().write_all(script.as_bytes()).context("writing the ruleset")?;
    Ok(())
}

fn run_cleanup(flags: &Flags) -> anyhow::Result<()> {
    cleanup::remove_own_tables().context("removing kube-nftproxy's tables")?;
    log::info!("removed kube-nftproxy's tables (ip and ip6 {})", render::TABLE_NAME);
    let kept = if flags.cleanup_kube_proxy {
        let done = cleanup::take_over_kube_proxy().context("removing kube-proxy's rules")?;
        let (tables, chains) = (&done.removed.tables, &done.removed.chains);
        for what in cleanup::describe(tables, chains).into_iter().chain(cleanup::describe_rules(&done.removed.rules)) {
            log::info!("removed {what}");
        }
        done.kept
    } else {
        let found = cleanup::find_kube_proxy().context("looking for kube-proxy's rules")?;
        for what in cleanup::describe(&found.tables, &found.chains) {
            log::warn!("upstream kube-proxy left {what}; --cleanup --cleanup-kube-proxy removes it");
        }
        found.kept
    };
    for what in cleanup::describe_kept(&kept) {
        log::info!("left {what}");
    }
    Ok(())
}

fn daemon(flags: &Flags) -> anyhow::Result<()> {
    let cfg = Config::from_flags(flags)?;
    let path = flags.manifests.clone().context("--manifests is required (the API server source is not built yet)")?;
    let periods =
        Periods { min_sync: flags.min_sync_period, sync: flags.sync_period, full_sync: flags.full_sync_period };
    block_signals();
    let (tx, rx) = channel::<Msg>();
    let stop = Arc::new(AtomicBool::new(false));
    let own = Arc::new(OwnPids::default());
    spawn_signal_thread(tx.clone())?;
    let alarms = tx.clone();
    let (guard, quiet) = guard::spawn(own.clone(), stop.clone(), move |alarm| {
        let _ = alarms.send(match alarm {
            guard::Alarm::Tampered(why) => Msg::Tampered(why),
            guard::Alarm::Unsure => Msg::Unsure,
        });
    })
    .context("watching nftables notifications")?;
    let snapshots = tx.clone();
    let source = manifests::watch(path, cfg.node_name.clone(), MANIFEST_POLL, stop.clone(), move |model| {
        let _ = snapshots.send(Msg::Snapshot(Box::new(model)));
    })?;
    drop(tx);
    let applier = Applier::new(&cfg.node_name, own).with_quiet(Arc::new(quiet));
    let sync_cfg = cfg.clone();
    let syncer =
        std::thread::Builder::new().name("sync".into()).spawn(move || sync::run(rx, &sync_cfg, periods, applier))?;
    let _ = syncer.join();
    stop.store(true, Ordering::SeqCst);
    let _ = guard.join();
    let _ = source.join();
    Ok(())
}

/// The signals the daemon stops on.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise a sigset_t we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks the stop signals in this thread and every thread spawned after, so that only the
/// signal thread receives them (with `sigwait`).
fn block_signals() {
    let set = stop_signals();
    // SAFETY: changes this thread's signal mask; inherited by threads spawned later.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

fn spawn_signal_thread(tx: Sender<Msg>) -> std::io::Result<()> {
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let set = stop_signals();
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals in `set`.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            log::info!("received signal {sig}");
        }
        let _ = tx.send(Msg::Shutdown);
    })?;
    Ok(())
}
