//! The daemon under faults a hostile test round found: a hung child (`nft`), syncs that fail, a
//! second instance on the same node, manifests rewritten behind its back, chains left
//! flushed, signals, and an API server (the emulator) that refuses every watch, redirects,
//! streams an endless line, trickles a list or whose connection dies silently. Each runs the
//! real binary in a network namespace.

use crate::common::check::{probe_during, web_on as web, who};
use crate::common::cluster::Cluster;
use crate::common::daemon::{Daemon, fake_nft, wait_for, write_manifests};
use crate::common::emulator::Emulator;
use crate::common::owner::TableOwner;
use crate::common::{Netns, Scratch, kernel_available};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod api;

/// This node and (if `nodeport`) one NodePort service with an endpoint elsewhere, which gets
/// chains of its own, as a JSON list in `dir`.
fn nodeport_manifests(dir: &Path, nodeport: bool) -> PathBuf {
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "NodePort", "clusterIP": "172.30.0.40", "ports": [{"port": 80, "nodePort": 30080}]}});
    let mut items = vec![Cluster::node_object()];
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "web-a", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "ports": [{"port": 8080}], "endpoints": [{"addresses": ["10.2.1.2"], "nodeName": "node-b"}]});
    if nodeport {
        items.extend([svc, slice]);
    }
    let path = dir.join("cluster.json");
    std::fs::write(&path, json!({"kind": "List", "items": items}).to_string()).unwrap();
    path
}

#[test]
fn a_hung_nft_is_killed_at_its_time_limit_and_holds_nothing_up() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("hung");
    let dir = Scratch::new("hung");
    // The daemon needs no nft; it only logs the version of one on the node, in the background,
    // and this one hangs. (Not for ever: should the daemon not kill it, it ends on its own in
    // 30 s rather than outlive the test for long.)
    let nft = fake_nft(&dir.0, "exec sleep 30");
    let manifests = nodeport_manifests(&dir.0, true);
    let d = Daemon::start(&ns, &manifests, &["--nft-timeout=3s"], &[("NFT", nft.to_str().unwrap())]);
    let killed = " --version` did not answer within 3s and was killed";
    let synced = wait_for(Duration::from_secs(10), || ns.nft(&["list", "tables"]).contains("kube-nftproxy"));
    assert!(synced.is_some() && !d.logged().contains(killed), "the start waited for nft: {}", d.logged());
    assert!(d.logs_within(killed, Duration::from_secs(8)), "{}", d.logged());
    d.stop();
}

/// The signals ignored in process `pid`, as the bits of `/proc/PID/status`'s `SigIgn` (signal
/// n is bit n-1).
fn ignored_signals(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:\t")).unwrap_or_default();
    u64::from_str_radix(mask, 16).unwrap_or_else(|e| panic!("SigIgn of {pid}: {e}:\n{status}"))
}

/// Issue 34: a daemon started as a script's background job (SIGINT and SIGQUIT ignored, as a
/// non-interactive shell starts one; SIGHUP too, as nohup does) keeps what it inherited, but
/// the `nft` it runs starts with every standard signal at its default, and ends on SIGQUIT.
#[test]
fn a_helper_starts_with_no_signal_ignored_whatever_the_daemon_inherited() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("sigign");
    let dir = Scratch::new("sigign");
    let pid_file = dir.0.join("pid");
    let nft = fake_nft(&dir.0, &format!("echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 30", pid_file.display()));
    let manifests = nodeport_manifests(&dir.0, true);
    let ignoring = ["bash", "-c", "trap '' QUIT INT HUP; exec \"$@\"", "bash", env!("CARGO_BIN_EXE_kube-nftproxy")];
    let argv: Vec<std::ffi::OsString> = ignoring
        .iter()
        .chain(crate::common::daemon::BASE)
        .map(Into::into)
        .chain([std::ffi::OsString::from("--manifests"), manifests.clone().into()])
        .collect();
    let d = Daemon::start_argv(&ns, &argv, &manifests, &[("NFT", nft.to_str().unwrap())]);
    assert!(wait_for(Duration::from_secs(5), || pid_file.exists()).is_some(), "nft never ran: {}", d.logged());
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert!(wait_for(Duration::from_secs(5), || comm().trim() == "sleep").is_some(), "nft never hung");
    const SIGQUIT_BIT: u64 = 1 << (libc::SIGQUIT - 1);
    assert_ne!(ignored_signals(&d.pid().to_string()) & SIGQUIT_BIT, 0, "the daemon keeps SIGQUIT ignored");
    // glibc keeps its own two signals (32, 33) as it likes; no standard one may be ignored.
    let ignored = ignored_signals(&pid);
    assert_eq!(ignored & 0x7fff_ffff, 0, "nft started ignoring signals {ignored:#x}");
    // SAFETY: signalling the stand-in this test started.
    unsafe { libc::kill(pid.parse().unwrap(), libc::SIGQUIT) };
    let gone = wait_for(Duration::from_secs(2), || !Path::new(&format!("/proc/{pid}")).exists());
    let log = d.stop();
    if gone.is_none() {
        // SAFETY: as above, so it does not outlive the test.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    assert!(gone.is_some(), "SIGQUIT did not end nft (pid {pid}):\n{log}");
}

#[test]
fn a_stop_while_nft_hangs_ends_both_within_seconds() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("hungstop");
    let dir = Scratch::new("hungstop");
    let status = dir.0.join("status");
    // The stand-in records its pid, then becomes `sleep`, hanging: the daemon's look at the
    // node's nft version, the only `nft` it runs. Its signal mask is read once it is `sleep`:
    // a shell may block every signal for a moment around its own forks, so a shell reading its
    // own status could catch that instead.
    let nft = fake_nft(&dir.0, &format!("echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 30", status.display()));
    let manifests = nodeport_manifests(&dir.0, true);
    let mut d = Daemon::start(&ns, &manifests, &[], &[("NFT", nft.to_str().unwrap())]);
    assert!(wait_for(Duration::from_secs(5), || status.exists()).is_some(), "nft never ran: {}", d.logged());
    let pid = std::fs::read_to_string(&status).unwrap().trim().to_string();
    let proc_file = |name: &str| std::fs::read_to_string(format!("/proc/{pid}/{name}")).unwrap_or_default();
    assert!(wait_for(Duration::from_secs(5), || proc_file("comm").trim() == "sleep").is_some(), "nft never hung");
    let seen = proc_file("status");
    assert!(seen.contains("SigBlk:\t0000000000000000"), "nft must start with no signal blocked:\n{seen}");
    // glibc's posix_spawn leaves its own two internal signals (32, 33) ignored; no standard
    // signal may be.
    let ignored = seen.lines().find_map(|l| l.strip_prefix("SigIgn:\t")).unwrap();
    assert_eq!(
        u64::from_str_radix(ignored, 16).unwrap() & 0x7fff_ffff,
        0,
        "nft must start ignoring no signal:\n{seen}"
    );
    let (exit, took) = d.stop_within(Duration::from_secs(10)).expect("SIGTERM must stop the daemon while nft hangs");
    assert!(exit.success() && took < Duration::from_secs(3), "{exit} after {took:?}");
    let gone = wait_for(Duration::from_secs(2), || !Path::new(&format!("/proc/{pid}")).exists());
    if gone.is_none() {
        // SAFETY: signalling the stand-in this test started, so it does not outlive the test.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    assert!(gone.is_some(), "the hung nft (pid {pid}) must end with the daemon");
}

#[test]
fn a_lock_held_by_another_user_is_an_error_not_a_wait() {
    if !kernel_available() {
        return;
    }
    use std::io::BufRead;
    let ns = Netns::new("squat");
    let dir = Scratch::new("squat");
    let holder = "import socket, time; s = socket.socket(socket.AF_UNIX); s.bind('\\0kube-nftproxy'); s.listen(1); \
                  print('holding', flush=True); time.sleep(60)";
    let mut squatter = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", holder])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(squatter.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "holding");
    let manifests = nodeport_manifests(&dir.0, true);
    let mut d = Daemon::start(&ns, &manifests, &[], &[]);
    let exited = wait_for(Duration::from_secs(5), || !d.running());
    let _ = squatter.kill();
    let _ = squatter.wait();
    let log = d.logged();
    assert!(exited.is_some(), "the daemon waited for a squatter:\n{log}");
    assert!(log.contains(&format!("held by process {} of user 65534", squatter.id())), "{log}");
}

#[test]
fn a_failing_sync_is_retried_with_backoff_not_in_a_loop() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("failing");
    let dir = Scratch::new("failing");
    // Another process owns both tables from the start: every sync fails with EPERM, at once,
    // so nothing but the backoff keeps the retries apart (--min-sync-period=0 does not).
    let _owner = [TableOwner::take(&ns, "ip"), TableOwner::take(&ns, "ip6")];
    let manifests = nodeport_manifests(&dir.0, true);
    let d = Daemon::start(&ns, &manifests, &["--min-sync-period=0"], &[]);
    let failed = |log: &str| log.lines().filter(|l| l.contains("sync failed")).map(str::to_string).collect::<Vec<_>>();
    assert!(d.logs_within("sync failed", Duration::from_secs(10)), "no sync failed:\n{}", d.logged());
    std::thread::sleep(Duration::from_millis(3500));
    let log = d.logged();
    let failures = failed(&log);
    // Attempts at about 0, 1 and 3 s (the backoff's floor is 1 s, doubling), each one logged.
    assert!((2..=4).contains(&failures.len()), "{} failed syncs in 3.5 s:\n{log}", failures.len());
    for (line, wait) in failures.iter().zip(["1s", "2s", "4s"]) {
        assert!(line.contains(&format!("retrying in {wait} ")), "the retries do not double from 1 s:\n{log}");
    }
    assert!(failures[0].contains("Operation not permitted"), "not the fault this test makes:\n{log}");
    d.stop();
}

#[test]
fn flushed_chains_are_deleted_without_another_sync() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("stale");
    let dir = Scratch::new("stale");
    let manifests = nodeport_manifests(&dir.0, true);
    let d = Daemon::start(&ns, &manifests, &[], &[]);
    let chains = || ns.nft(&["list", "chains", "ip"]);
    assert!(wait_for(Duration::from_secs(5), || chains().contains("nodeport-shop/web")).is_some(), "{}", d.logged());
    nodeport_manifests(&dir.0, false);
    let gone = wait_for(Duration::from_secs(5), || !chains().contains("shop/web"));
    assert!(gone.is_some(), "chains of a removed service stayed:\n{}", chains());
    d.stop();
}

#[test]
fn signals_are_handled_and_logged() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("signals");
    let dir = Scratch::new("signals");
    let manifests = nodeport_manifests(&dir.0, true);
    let mut d = Daemon::start(&ns, &manifests, &[], &[]);
    assert!(d.logs_within("Full sync", Duration::from_secs(5)), "{}", d.logged());
    d.signal(libc::SIGHUP);
    assert!(d.logs_within("Refresh sync", Duration::from_secs(5)), "SIGHUP must rewrite the tables:\n{}", d.logged());
    d.signal(libc::SIGUSR1);
    assert!(
        d.logs_within("1 services with 1 ports", Duration::from_secs(5)),
        "SIGUSR1 logs a summary:\n{}",
        d.logged()
    );
    for sig in [libc::SIGUSR2, libc::SIGALRM] {
        d.signal(sig);
        assert!(d.logs_within(&format!("received signal {sig}; ignored"), Duration::from_secs(5)), "{}", d.logged());
    }
    assert!(d.running(), "the daemon must survive SIGHUP, SIGUSR1, SIGUSR2 and SIGALRM");
    d.stop();
}

#[test]
fn rewrites_that_keep_size_and_mtime_are_noticed_and_fifos_skipped() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let dir = Scratch::new("rewrite");
    let file = dir.0.join("web.json");
    let list = |pod: &str| {
        let items: Vec<_> = std::iter::once(Cluster::node_object()).chain(web(&c, &[pod])).collect();
        json!({"kind": "List", "items": items}).to_string()
    };
    std::fs::write(&file, list("pod-1")).unwrap();
    let fifo = dir.0.join("stuck.yaml");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let d = Daemon::start(&c.node, file.parent().unwrap(), &[], &[]);
    let served = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(served.is_some(), "a FIFO among the manifests must not stop the daemon:\n{}", d.logged());
    assert!(d.logged().contains("stuck.yaml: not a regular file"), "{}", d.logged());
    // `cp -p`: same size (pod-1 and pod-2 addresses are as long), the old modification time.
    let reference = dir.0.join("reference");
    std::fs::copy(&file, &reference).unwrap();
    assert!(std::process::Command::new("touch").arg("-r").arg(&file).arg(&reference).status().unwrap().success());
    let before = list("pod-1").len();
    std::fs::write(&file, list("pod-2")).unwrap();
    assert_eq!(before, std::fs::metadata(&file).unwrap().len() as usize);
    assert!(std::process::Command::new("touch").arg("-r").arg(&reference).arg(&file).status().unwrap().success());
    let took = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.40:80") == "pod-2");
    assert!(took.is_some(), "a same-size rewrite keeping the mtime was missed:\n{}", d.logged());
    d.stop();
}

#[test]
fn a_second_instance_waits_and_takes_over_without_a_gap() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let first = Daemon::start(&c.node, &manifests, &[], &[]);
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());
    let second = Daemon::start(&c.node, &manifests, &[], &[]);
    assert!(second.logs_within("owns this node's tables", Duration::from_secs(5)));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!first.logged().contains("restoring the tables"), "the instances fought:\n{}", first.logged());
    assert!(!second.logged().contains(" sync"), "the waiting instance synced:\n{}", second.logged());

    let prober = probe_during(&c.client, "172.30.0.40:80", Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(300));
    first.stop();
    assert!(second.logs_within("taking over", Duration::from_secs(3)), "{}", second.logged());
    // Its first sync compares the first instance's tables with what it would write and sends
    // the difference (a refresh): what logs it is the same for every kind of sync.
    assert!(second.logs_within(" endpoints; sent ", Duration::from_secs(3)), "{}", second.logged());
    let failures = prober.join().unwrap();
    assert!(failures.is_empty(), "connections failed during the handover: {failures:?}");
    let cleanup = std::process::Command::new("ip")
        .args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup"])
        .output()
        .unwrap();
    assert!(!cleanup.status.success(), "--cleanup must refuse while a daemon owns the node");
    assert!(String::from_utf8_lossy(&cleanup.stderr).contains("stop it before --cleanup"));
    second.stop();
}
