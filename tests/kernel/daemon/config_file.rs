//! The configuration file as kubelet's ConfigMap volume updates it: a change ends the daemon as
//! kube-proxy's does, another key's change does not.

use super::*;

/// Puts `content` in ConfigMap volume `dir` as kubelet does: a new timestamped directory,
/// then `..data` pointed at it by renaming a new link over it, then the old one removed.
fn kubelet_update(dir: &std::path::Path, stamp: &str, content: &str) {
    let data = dir.join(format!("..{stamp}"));
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("config.conf"), content).unwrap();
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::os::unix::fs::symlink(format!("..{stamp}"), dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

#[test]
fn a_change_to_the_config_file_ends_the_daemon_as_kube_proxys_does() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let configmap = Scratch::new("kube-proxy-configmap");
    let dir = configmap.0.clone();
    let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n";
    let first = format!("{head}clusterCIDR: 10.0.0.0/8\n");
    kubelet_update(&dir, "2026_01", &first);
    std::os::unix::fs::symlink("..data/config.conf", dir.join("config.conf")).unwrap();
    let config = format!("--config={}", dir.join("config.conf").display());
    let mut d = Daemon::start(&c.node, &manifests, &[&config], &[]);
    assert!(
        wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some(),
        "daemon never served:\n{}",
        d.logged()
    );
    // Another key of the ConfigMap changed: the same config.conf in a new directory.
    kubelet_update(&dir, "2026_02", &first);
    std::thread::sleep(Duration::from_millis(2500));
    let ended = |log: &str| log.contains("content of the proxy server's configuration file was updated");
    assert!(!ended(&d.logged()) && d.wait_exit(Duration::ZERO).is_none(), "ended unchanged:\n{}", d.logged());
    kubelet_update(&dir, "2026_03", &format!("{head}clusterCIDR: 10.0.0.0/8,fd00:10::/32\n"));
    let status = d.wait_exit(Duration::from_secs(5)).expect("the daemon did not end when its config file changed");
    let log = d.logged();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(ended(&log), "{log}");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1", "the rules stay in place");
}

/// Issue 34: a `--config` file deleted, replaced by a FIFO or grown too large is logged once a
/// state, not once a look, and the daemon goes on; fine again, it says so, and a later trouble
/// is logged again.
#[test]
fn a_config_file_that_cannot_be_read_is_told_once_a_state() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let dir = Scratch::new("cfgtrouble");
    let path = dir.path("config.conf");
    let content = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nclusterCIDR: 10.0.0.0/8\n";
    std::fs::write(&path, content).unwrap();
    let config = format!("--config={}", path.display());
    let mut d = Daemon::start(&c.node, &manifests, &[&config], &[]);
    let served = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(served.is_some(), "daemon never served:\n{}", d.logged());
    // Replaced whole, by a rename: a file written in place is empty for a moment, a change.
    let put = |text: &str| {
        std::fs::write(dir.path("next"), text).unwrap();
        std::fs::rename(dir.path("next"), &path).unwrap();
    };
    let told = |log: &str, why: &str| {
        log.lines().filter(|l| l.contains("cannot read the configuration file") && l.contains(why)).count()
    };
    // Each state for 2.5 looks of the watch's 1 s.
    let hold = || std::thread::sleep(Duration::from_millis(2500));
    std::fs::remove_file(&path).unwrap();
    hold();
    assert_eq!(told(&d.logged(), "No such file"), 1, "{}", d.logged());
    assert!(Command::new("mkfifo").arg(&path).status().unwrap().success());
    hold();
    assert_eq!(told(&d.logged(), "not a regular file"), 1, "{}", d.logged());
    put(content);
    hold();
    assert!(d.logged().contains("can be read again"), "{}", d.logged());
    put(&"#".repeat(2 << 20));
    hold();
    let log = d.logged();
    assert_eq!(told(&log, "larger than"), 1, "{log}");
    std::fs::remove_file(&path).unwrap();
    hold();
    let log = d.logged();
    assert_eq!(told(&log, "No such file"), 2, "deleted again after it was fine: told again\n{log}");
    assert!(d.wait_exit(Duration::ZERO).is_none(), "the daemon ended:\n{log}");
}
