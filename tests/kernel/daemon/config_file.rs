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
