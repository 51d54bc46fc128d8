//! Real distributions' kube-proxy invocations, each with exactly its arguments
//! (`tests/distros/`): it starts, syncs, answers `/healthz` and says what it serves
//! differently or ignores.

use super::kernel_available;
use crate::common::distros;

/// Runs invocation `name`; asserts it serves, with `/healthz` at `healthz`, and logged each of `logged`.
fn check(name: &str, healthz: &str, logged: &[&str]) {
    if !kernel_available() {
        return;
    }
    let run = distros::start(name);
    run.assert_serves(healthz, logged);
    run.daemon.stop();
}

#[test]
fn kubeadm() {
    check("kubeadm", "127.0.0.1:10256", &[]);
}

#[test]
fn kubeadm_in_ipvs_mode() {
    check(
        "kubeadm-ipvs",
        "127.0.0.1:10256",
        &[
            "proxy mode \"ipvs\": kube-nftproxy serves",
            "IPVS scheduler \"rr\": served as rr with nftables",
            "ipvs.strictARP",
        ],
    );
}

#[test]
fn gke() {
    // Its IPVS periods, for the mode it does not run in, do nothing (as upstream).
    let ignored = "flags taken with no effect in kube-nftproxy: --ipvs-sync-period, --ipvs-min-sync-period";
    check("gke", "127.0.0.1:10256", &[ignored, "proxy mode unset: served with nftables"]);
}

#[test]
fn eks() {
    let removed = ["unknown field \"udpIdleTimeout\"", "unknown field \"resourceContainer\""];
    check(
        "eks",
        "127.0.0.1:10256",
        &[&removed[..], &["proxy mode \"iptables\"", "no effect in kube-nftproxy: configSyncPeriod"]].concat(),
    );
}

#[test]
fn k3s() {
    check("k3s", "127.0.0.1:10256", &["proxy mode \"iptables\": kube-nftproxy serves"]);
}

#[test]
fn rke2() {
    check("rke2", "127.0.0.1:10256", &["proxy mode \"iptables\": kube-nftproxy serves"]);
}

#[test]
fn kops() {
    check("kops", "127.0.0.1:10256", &[]);
}
