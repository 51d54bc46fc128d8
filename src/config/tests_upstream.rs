//! Where this proxy follows upstream kube-proxy's parsing, defaulting and validation to the
//! letter: Go's durations, the IPVS schedulers, the IPVS minimum sync period, the notes on
//! modes and on flags a mode does not read; and the canary's refusal of kube-proxy's cleanup.

use super::tests::{load_notes, with};
use super::{ConfigError, Flags, Notes, load_from};
use std::time::Duration;

fn flags(args: &[&str]) -> Result<(Flags, Notes), ConfigError> {
    load_from(["kube-nftproxy"].iter().chain(args))
}

fn refusal(args: &[&str]) -> String {
    flags(args).map(|_| ()).expect_err(&format!("{args:?} must be refused")).to_string()
}

#[test]
fn a_duration_without_a_unit_is_refused_as_go_refuses_it_but_zero() {
    for flag in ["--iptables-sync-period", "--ipvs-min-sync-period", "--conntrack-udp-timeout", "--config-sync-period"]
    {
        let message = refusal(&[&format!("{flag}=30")]);
        assert!(message.contains(flag), "{flag}: {message}");
        assert!(message.contains("time: missing unit in duration \"30\""), "{flag}: {message}");
    }
    let (f, _) = flags(&["--iptables-min-sync-period=0", "--conntrack-udp-timeout=0"]).unwrap();
    assert_eq!((f.min_sync_period, f.conntrack_udp_timeout), (Duration::ZERO, Duration::ZERO));
    let path = with("unitless", "mode: iptables\niptables: {syncPeriod: \"30\"}");
    let message = load_notes(&path, &[]).unwrap_err().to_string();
    assert!(message.contains("iptables.syncPeriod") && message.contains("missing unit"), "{message}");
}

#[test]
fn the_ipvs_schedulers_are_upstreams_list() {
    for scheduler in ["", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq"] {
        let (f, _) = flags(&["--proxy-mode=ipvs", &format!("--ipvs-scheduler={scheduler}")]).unwrap();
        assert_eq!(f.ipvs_scheduler, scheduler);
    }
    let message = refusal(&["--proxy-mode=ipvs", "--ipvs-scheduler=mh"]);
    assert!(message.contains("--ipvs-scheduler") && message.contains("\"mh\""), "{message}");
    let message = load_notes(&with("mh", "mode: ipvs\nipvs: {scheduler: mh}"), &[]).unwrap_err().to_string();
    assert!(message.contains("ipvs.scheduler"), "{message}");
}

#[test]
fn the_files_ipvs_min_sync_period_of_zero_is_zero_as_upstreams_defaulting_leaves_it() {
    let periods = |body: &str| {
        let (f, _) = load_notes(&with("periods", body), &[]).unwrap();
        (f.sync_period, f.min_sync_period)
    };
    let (thirty, one) = (Duration::from_secs(30), Duration::from_secs(1));
    assert_eq!(periods("mode: ipvs\nipvs: {syncPeriod: 0s, minSyncPeriod: 0s}"), (thirty, Duration::ZERO));
    assert_eq!(periods("mode: ipvs"), (thirty, Duration::ZERO));
    assert_eq!(periods("mode: ipvs\nipvs: {minSyncPeriod: 5s}"), (thirty, Duration::from_secs(5)));
    assert_eq!(periods("mode: nftables\nnftables: {minSyncPeriod: 0s}"), (thirty, one));
    assert_eq!(periods("mode: iptables\niptables: {minSyncPeriod: 0s}"), (thirty, one));
    // What --write-config-to writes of an ipvs node without a minimum reads back the same.
    let (f, _) = flags(&["--proxy-mode=ipvs", "--ipvs-min-sync-period=0s"]).unwrap();
    let written = super::tests::file("ipvs-written.json", &super::effective(&f).to_string());
    assert_eq!(load_notes(&written, &[]).unwrap().0.min_sync_period, Duration::ZERO);
}

#[test]
fn the_empty_mode_and_every_ipvs_scheduler_are_said_once() {
    let unset = "proxy mode unset: served with nftables";
    for args in [&[][..], &["--proxy-mode="]] {
        let (_, notes) = flags(args).unwrap();
        assert_eq!(notes.infos.iter().filter(|i| i.contains(unset)).count(), 1, "{args:?}: {:?}", notes.infos);
    }
    let (_, notes) = flags(&["--proxy-mode=nftables"]).unwrap();
    assert!(notes.infos.is_empty() && notes.warnings.is_empty(), "{notes:?}");
    let (_, notes) = flags(&["--proxy-mode=ipvs"]).unwrap();
    let rr = "IPVS scheduler \"\" (kube-proxy's default, rr): served as a random choice";
    assert!(notes.warnings.iter().any(|w| w.contains(rr)), "{:?}", notes.warnings);
    let (_, notes) = flags(&["--proxy-mode=ipvs", "--ipvs-scheduler=lc"]).unwrap();
    let lc = "IPVS scheduler \"lc\": served as a random choice among the endpoints: nftables sees no connection counts";
    assert!(notes.warnings.iter().any(|w| w == lc), "{:?}", notes.warnings);
    let (_, notes) = flags(&["--proxy-mode=ipvs", "--ipvs-scheduler=sh"]).unwrap();
    assert!(notes.infos.iter().any(|i| i == "IPVS scheduler \"sh\": served as sh with nftables"), "{notes:?}");
    assert!(!notes.warnings.iter().any(|w| w.contains("scheduler")), "{:?}", notes.warnings);
}

#[test]
fn the_periods_and_scheduler_of_the_other_modes_are_named_as_having_no_effect() {
    let no_effect = |args: &[&str]| {
        let (_, notes) = flags(args).unwrap();
        notes.infos.into_iter().find(|i| i.starts_with("kube-proxy flags taken with no effect"))
    };
    let ipvs = ["--ipvs-sync-period=1m", "--ipvs-min-sync-period=10s", "--ipvs-scheduler=rr"];
    let iptables = ["--iptables-sync-period=1m", "--iptables-min-sync-period=10s"];
    let all = [&ipvs[..], &iptables[..]].concat();
    for mode in ["--proxy-mode=", "--proxy-mode=iptables", "--proxy-mode=nftables"] {
        let line = no_effect(&[&all[..], &[mode]].concat()).expect("a line");
        assert!(line.ends_with(": --ipvs-sync-period, --ipvs-min-sync-period, --ipvs-scheduler"), "{mode}: {line}");
    }
    let line = no_effect(&[&all[..], &["--proxy-mode=ipvs"]].concat()).expect("a line");
    assert!(line.ends_with(": --iptables-sync-period, --iptables-min-sync-period"), "{line}");
    assert_eq!(no_effect(&["--proxy-mode=ipvs", "--ipvs-sync-period=1m"]), None, "only the ones given");
    assert_eq!(no_effect(&iptables), None);
}

#[test]
fn a_canary_refuses_to_clean_up_kube_proxy() {
    for args in [
        &["--cleanup", "--cleanup-kube-proxy", "--service-proxy-name=canary"][..],
        &["--cleanup=true", "--service-proxy-name=canary", "--cleanup-kube-proxy"],
    ] {
        let message = refusal(args);
        assert!(message.contains("--cleanup-kube-proxy") && message.contains("--service-proxy-name"), "{message}");
    }
    let path = with("canary-cleanup", "mode: nftables\nkubeNftproxy: {serviceProxyName: canary}");
    let message = load_notes(&path, &["--cleanup", "--cleanup-kube-proxy"]).unwrap_err().to_string();
    assert!(message.contains("kubeNftproxy.serviceProxyName"), "{message}");
    for args in [&["--cleanup", "--service-proxy-name=canary"][..], &["--cleanup", "--cleanup-kube-proxy"]] {
        assert!(flags(args).is_ok(), "{args:?}");
    }
}

#[test]
fn every_no_effect_flag_is_named_and_with_config_ignored_unless_it_is_logging() {
    let path = with("no-effect-flags", "mode: nftables");
    let command = <super::compat::NoEffect as clap::Args>::augment_args(clap::Command::new("n"));
    let ids = super::compat::ids();
    assert_eq!(ids.len(), command.get_arguments().count());
    for (id, bound) in ids {
        let arg = command.get_arguments().find(|a| a.get_id() == id.as_str()).expect("an argument");
        let value = arg.get_default_values().first().and_then(|v| v.to_str()).unwrap_or("10.0.0.0/8");
        let flag = format!("--{}", arg.get_long().expect("a long name"));
        let (_, notes) = flags(&[&format!("{flag}={value}")]).unwrap();
        assert!(notes.infos.iter().any(|i| i.contains(&flag)), "{flag} named: {:?}", notes.infos);
        let (_, notes) = load_notes(&path, &[&format!("{flag}={value}")]).unwrap();
        let ignored = notes.warnings.iter().any(|w| w.starts_with(&format!("{flag} is ignored")));
        assert_eq!(ignored, bound, "{flag}: {:?}", notes.warnings);
        assert_eq!(bound, !flag.starts_with("--log-"), "{flag}: the logging options win over --config");
    }
}
