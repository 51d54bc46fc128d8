//! Loading the configuration as kube-proxy does: from the flags, or with `--config` from the
//! file in their place (kube-proxy's flags given anyway are ignored, each named in a
//! warning); then the deprecated flags, and the checks of upstream's validation.

use super::values::{BindAddress, IPVS_SCHEDULERS};
use super::{ConfigError, Flags, compat, default_bind_addresses, features, file};
use clap::parser::{ArgMatches, ValueSource};
use clap::{CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;

/// What loading had to say besides the flags, logged once logging is set up.
#[derive(Debug, Default)]
pub struct Notes {
    /// Fields of the file this proxy does not know (paths like `nftables.foo`).
    pub unknown_fields: Vec<String>,
    /// Flags ignored, modes served differently, deprecated flags.
    pub warnings: Vec<String>,
    /// Flags and fields taken with no effect.
    pub infos: Vec<String>,
}

impl Notes {
    /// Logs each note at its level; for a command that is not the daemon (`daemon` false),
    /// the notes on how the daemon would serve (flags with no effect, the mode unset) only
    /// at debug: they say nothing of the command's answer.
    pub fn log(&self, daemon: bool) {
        for field in &self.unknown_fields {
            log::warn!("--config: unknown field {field:?} ignored");
        }
        for w in &self.warnings {
            log::warn!("{w}");
        }
        let level = if daemon { log::Level::Info } else { log::Level::Debug };
        for i in &self.infos {
            log::log!(level, "{i}");
        }
    }
}

/// kube-proxy's flags of `Flags` itself whose values `--config` replaces (all but
/// `--hostname-override`, the logging flags, and what is not configuration: `--master`,
/// `--cleanup`, ...), by clap id; the no-effect ones it replaces are `compat::ids`' own.
pub const CONFIG_BOUND: &[&str] = &[
    "kubeconfig",
    "kube_api_content_type",
    "kube_api_qps",
    "kube_api_burst",
    "bind_address",
    "healthz_bind_address",
    "metrics_bind_address",
    "healthz_port",
    "metrics_port",
    "proxy_mode",
    "masquerade_bit",
    "masquerade_all",
    "sync_period",
    "min_sync_period",
    "ipvs_sync_period",
    "ipvs_min_sync_period",
    "ipvs_scheduler",
    "feature_gates_given",
    "detect_local_mode",
    "pod_bridge_interface",
    "pod_interface_name_prefix",
    "cluster_cidr",
    "nodeport_addresses",
    "oom_score_adj",
    "conntrack_max_per_core",
    "conntrack_min",
    "conntrack_tcp_timeout_established",
    "conntrack_tcp_timeout_close_wait",
    "conntrack_tcp_be_liberal",
    "conntrack_udp_timeout",
    "conntrack_udp_timeout_stream",
];

/// The clap ids of every flag `--config` replaces: `CONFIG_BOUND` and the no-effect ones.
fn config_bound() -> Vec<String> {
    let no_effect = compat::ids().into_iter().filter_map(|(id, bound)| bound.then_some(id));
    CONFIG_BOUND.iter().map(|id| id.to_string()).chain(no_effect).collect()
}

/// The logging flags with no effect here (they win over `--config` all the same).
const LOGGING_NO_EFFECT: [&str; 2] = ["log_flush_frequency", "vmodule"];

/// The flags of a command line, or with `--config` the file's settings in their place, as
/// kube-proxy takes them; with what to log about them.
pub fn load_from<I, T>(args: I) -> Result<(Flags, Notes), ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(help) = super::help::help_asked(&args) {
        return Err(help.into());
    }
    let matches = Flags::command().try_get_matches_from(args)?;
    let mut flags = Flags::from_arg_matches(&matches)?;
    // Fields only the file sets (`#[arg(skip)]`) have no source to ask about.
    let given = |id: &str| {
        matches.try_contains_id(id).is_ok()
            && matches!(matches.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable))
    };
    let mut notes = Notes::default();
    let with_file = flags.config.is_some();
    let bound = config_bound();
    let is_bound = |id: &str| bound.iter().any(|b| b == id);
    let filed = match flags.config.clone() {
        Some(path) => {
            // The flags as if those --config replaces had not been given.
            let mut kept = matches.clone();
            for id in bound.iter().filter(|id| given(id)) {
                kept.try_clear_id(id)
                    .map_err(|e| ConfigError::Invalid { what: long_name(id), message: e.to_string() })?;
                notes.warnings.push(format!("{} is ignored: --config is given (as kube-proxy)", long_name(id)));
            }
            flags = defaults()?;
            flags.update_from_arg_matches(&kept)?;
            let settings = file::read(&path)?;
            flags.config_digest = Some(settings.digest);
            notes.unknown_fields.clone_from(&settings.unknown_fields);
            let unused = settings.no_effect_fields();
            if !unused.is_empty() {
                notes.infos.push(format!("--config: taken with no effect in kube-nftproxy: {}", unused.join(", ")));
            }
            // An empty --hostname-override is none, and the file's stands (as upstream).
            let empty_hostname = flags.hostname_override.as_deref() == Some("");
            let keep = |id: &str| given(id) && !is_bound(id) && !(empty_hostname && id == "hostname_override");
            settings.apply(&mut flags, keep)?
        }
        None => {
            for gates in std::mem::take(&mut flags.feature_gates_given) {
                flags.feature_gates.merge(gates);
            }
            ipvs_periods(&mut flags)?;
            Vec::new()
        }
    };
    let set = |id: &str| (given(id) && !(with_file && is_bound(id))) || filed.contains(&id);
    default_serving(&mut flags, set);
    if !with_file && flags.write_config_to.is_none() {
        deprecated_ports(&mut flags, &matches, &mut notes)?;
    }
    notes.warnings.extend(validate(&flags, with_file)?);
    mode_notes(&flags, &mut notes);
    let no_effect = compat::ids().into_iter().map(|(id, _)| id);
    let unused: Vec<String> = no_effect
        .chain(LOGGING_NO_EFFECT.iter().chain(other_modes_flags(&flags)).map(|id| id.to_string()))
        .filter(|id| given(id) && !(with_file && is_bound(id)))
        .map(|id| long_name(&id))
        .collect();
    if !unused.is_empty() {
        notes.infos.push(format!("kube-proxy flags taken with no effect in kube-nftproxy: {}", unused.join(", ")));
    }
    Ok((flags, notes))
}

/// Every flag at its default.
fn defaults() -> Result<Flags, ConfigError> {
    Ok(Flags::try_parse_from(["kube-nftproxy"])?)
}

/// `--name` of the flag with clap id `id`.
fn long_name(id: &str) -> String {
    let command = Flags::command();
    let long = command.get_arguments().find(|a| a.get_id() == id).and_then(|a| a.get_long());
    format!("--{}", long.unwrap_or(id))
}

/// In ipvs mode the periods are `--ipvs-*sync-period`'s and the `--iptables-*` ones are
/// ignored; in the other modes the reverse (upstream's `processV1Alpha1Flags`).
fn ipvs_periods(flags: &mut Flags) -> Result<(), ConfigError> {
    if flags.proxy_mode.as_deref() == Some("ipvs") {
        let d = defaults()?;
        flags.sync_period = flags.ipvs_sync_period.unwrap_or(d.sync_period);
        flags.min_sync_period = flags.ipvs_min_sync_period.unwrap_or(d.min_sync_period);
    }
    Ok(())
}

/// Health and metrics addresses nobody set take the defaults of `--bind-address`'s family.
fn default_serving(flags: &mut Flags, set: impl Fn(&str) -> bool) {
    let (healthz, metrics) = default_bind_addresses(&flags.bind_address);
    if !set("healthz_bind_address") {
        flags.healthz_bind_address = BindAddress(Some(healthz));
    }
    if !set("metrics_bind_address") {
        flags.metrics_bind_address = BindAddress(Some(metrics));
    }
}

/// The deprecated `--healthz-port` and `--metrics-port` (without `--config`, as upstream): 0
/// turns the server off; another port replaces the address's when the address flag named an
/// IP alone.
fn deprecated_ports(flags: &mut Flags, matches: &ArgMatches, notes: &mut Notes) -> Result<(), ConfigError> {
    let ports = [
        (flags.healthz_port, "healthz_bind_address", &mut flags.healthz_bind_address),
        (flags.metrics_port, "metrics_bind_address", &mut flags.metrics_bind_address),
    ];
    for (port, addr_id, addr) in ports {
        let Some(port) = port else { continue };
        let flag = long_name(addr_id).replace("-bind-address", "-port");
        notes.warnings.push(format!("{flag} is deprecated (as in kube-proxy): use {}", long_name(addr_id)));
        let port = match u16::try_from(port) {
            Ok(0) => {
                *addr = BindAddress(None);
                continue;
            }
            Ok(p) => p,
            Err(_) => return Err(ConfigError::Invalid { what: flag, message: format!("{port} is not a port") }),
        };
        let raw = matches.get_raw(addr_id).and_then(|mut v| v.next()).and_then(|v| v.to_str());
        let ip_alone = raw.is_some_and(|r| r.trim().parse::<std::net::SocketAddr>().is_err());
        if let (true, Some(a)) = (ip_alone, addr.0.as_mut()) {
            a.set_port(port);
        }
    }
    Ok(())
}

/// Upstream's validation of what the flags and the file cannot check alone; errors name the
/// flag, or the file's field when `--config` gave it. Returns what is only warned about (gates
/// this binary does not know).
fn validate(flags: &Flags, with_file: bool) -> Result<Vec<String>, ConfigError> {
    let name = |flag: &str, field: &str| if with_file { field.to_string() } else { flag.to_string() };
    let invalid = |what: String, message: String| ConfigError::Invalid { what, message };
    let unknown = flags.feature_gates.check().map_err(|m| invalid(name("--feature-gates", "featureGates"), m))?;
    flags
        .feature_gates
        .check_mode(flags.proxy_mode.as_deref())
        .map_err(|m| invalid(name("--proxy-mode", "mode"), m))?;
    let ipvs = flags.proxy_mode.as_deref() == Some("ipvs");
    if flags.min_sync_period > flags.sync_period {
        let (flag, section) = match flags.proxy_mode.as_deref() {
            Some("ipvs") => ("--ipvs", "ipvs"),
            Some("nftables") if with_file => ("", "nftables"),
            _ => ("--iptables", "iptables"),
        };
        return Err(ConfigError::MinSyncPeriodAboveSyncPeriod {
            min_name: name(&format!("{flag}-min-sync-period"), &format!("{section}.minSyncPeriod")),
            min: flags.min_sync_period,
            sync_name: name(&format!("{flag}-sync-period"), &format!("{section}.syncPeriod")),
            sync: flags.sync_period,
        });
    }
    if let (true, true, Some(_)) = (flags.cleanup, flags.cleanup_kube_proxy, &flags.service_proxy_name) {
        let canary =
            if with_file { "--service-proxy-name (or kubeNftproxy.serviceProxyName)" } else { "--service-proxy-name" };
        let message = format!(
            "refused with {canary}: a canary serves beside a running kube-proxy, whose rules --cleanup-kube-proxy would remove"
        );
        return Err(invalid("--cleanup --cleanup-kube-proxy".into(), message));
    }
    if flags.kube_api_burst < 0 {
        return Err(invalid(name("--kube-api-burst", "clientConnection.burst"), "must not be negative".into()));
    }
    if ipvs && !IPVS_SCHEDULERS.contains(&flags.ipvs_scheduler.as_str()) {
        let message = format!("{:?} is not one of {}", flags.ipvs_scheduler, IPVS_SCHEDULERS[1..].join(", "));
        return Err(invalid(name("--ipvs-scheduler", "ipvs.scheduler"), message));
    }
    let bad_cidr = flags.no_effect.ipvs_exclude_cidrs.iter().find(|c| c.trim().parse::<ipnet::IpNet>().is_err());
    if let (true, Some(c)) = (ipvs, bad_cidr) {
        return Err(invalid(name("--ipvs-exclude-cidrs", "ipvs.excludeCIDRs"), format!("{c:?} is not a CIDR")));
    }
    if !flags.feature_gates.enabled(features::LOGGING_ALPHA_OPTIONS)
        && let Some(flag) = compat::alpha_logging_options(&flags.no_effect).first()
    {
        return Err(invalid(flag.to_string(), "needs the LoggingAlphaOptions feature gate (as kube-proxy)".into()));
    }
    Ok(unknown)
}

/// The flags the mode does not read (upstream's `processV1Alpha1Flags`): the IPVS periods
/// and scheduler outside ipvs mode, the iptables periods in it.
fn other_modes_flags(flags: &Flags) -> &'static [&'static str] {
    if flags.proxy_mode.as_deref() == Some("ipvs") {
        &["sync_period", "min_sync_period"]
    } else {
        &["ipvs_sync_period", "ipvs_min_sync_period", "ipvs_scheduler"]
    }
}

/// What is served differently from what the mode asks: warnings for the iptables and ipvs
/// modes and every IPVS scheduler (the empty one is upstream's `rr`), a note for the empty
/// mode (upstream warns that its default, iptables, will change).
fn mode_notes(flags: &Flags, notes: &mut Notes) {
    match flags.proxy_mode.as_deref() {
        Some(mode @ ("iptables" | "ipvs")) => notes
            .warnings
            .push(format!("proxy mode {mode:?}: kube-nftproxy serves the {mode} mode's configuration with nftables")),
        Some("nftables") => {}
        _ => notes.infos.push(
            "proxy mode unset: served with nftables (kube-proxy's default is iptables; set the mode to say which)"
                .into(),
        ),
    }
    if flags.proxy_mode.as_deref() == Some("ipvs") {
        scheduler_note(&flags.ipvs_scheduler, notes);
    }
}

/// How the IPVS scheduler is served: a warning where it is not what IPVS would do (the
/// empty name, IPVS's `rr`, is random; a scheduler nftables cannot serve), a note otherwise.
fn scheduler_note(name: &str, notes: &mut Notes) {
    use crate::model::Scheduler;
    match Scheduler::parse(name, "").map(|(s, _)| s) {
        Ok(Scheduler::Random) => notes.warnings.push(
            "IPVS scheduler \"\" (kube-proxy's default, rr): served as a random choice among the endpoints \
             (set rr for round robin)"
                .into(),
        ),
        Ok(Scheduler::Unserved(u)) => notes
            .warnings
            .push(format!("IPVS scheduler {name:?}: served as a random choice among the endpoints: {}", u.why())),
        Ok(s) => notes.infos.push(format!("IPVS scheduler {name:?}: served as {s} with nftables")),
        Err(e) => notes.warnings.push(format!("IPVS scheduler: {e}")),
    }
}
