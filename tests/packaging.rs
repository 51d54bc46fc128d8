//! The systemd unit in `packaging/` starts the binary with flags it accepts.

mod common;

use std::process::Command;

#[test]
fn the_unit_execstart_flags_are_accepted() {
    let unit = std::fs::read_to_string(common::root().join("packaging/kube-nftproxy.service")).unwrap();
    let exec = unit.replace("\\\n", " ");
    let line = exec.lines().find(|l| l.starts_with("ExecStart=")).expect("ExecStart");
    let argv: Vec<String> = line["ExecStart=".len()..]
        .split_whitespace()
        .skip(1)
        .map(|a| a.replace("${NODE_NAME}", "node-a").replace("${CLUSTER_CIDR}", "10.0.0.0/8"))
        .map(|a| {
            if a == "/etc/kube-nftproxy/manifests" {
                common::root().join("examples/cluster").display().to_string()
            } else {
                a
            }
        })
        .collect();
    assert!(argv.iter().any(|a| a == "--manifests"), "{argv:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-nftproxy")).args(&argv).arg("--dry-run").output().unwrap();
    assert!(out.status.success(), "the unit's flags are rejected: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("table ip kube-nftproxy"));
    assert!(
        unit.contains("KillSignal=SIGTERM") && !unit.contains("--cleanup"),
        "restarts must keep the rules in place"
    );
}
