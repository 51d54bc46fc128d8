//! The daemon as a test runs it: started inside a namespace over a manifests path, logging to
//! a file, signalled and stopped like systemd would, and killed if the test fails first.

use super::Netns;
use super::cluster::Cluster;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The flags every test daemon starts with.
pub const BASE: &[&str] = &["--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/32"];

/// systemd's default open-files limits for a service, soft 1,024 and hard 524,288, as
/// `prlimit` takes them; the hard one no higher than this process' (raising a hard limit
/// takes CAP_SYS_RESOURCE, which a sandbox may lack).
pub fn systemd_nofile() -> String {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    format!("1024:{}", hard.unwrap_or(u64::MAX).min(524_288))
}

/// A running daemon, killed if the test fails before stopping it.
pub struct Daemon {
    child: Option<Child>,
    /// Where it logs.
    pub log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Daemon {
    /// Starts the daemon for `node-a` in `ns` over `manifests` with `extra` flags and
    /// environment, logging to a file of its own next to the manifests.
    pub fn start(ns: &Netns, manifests: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let source = [std::ffi::OsStr::new("--manifests"), manifests.as_os_str()];
        Daemon::start_with(ns, &source, manifests, extra, env)
    }

    /// Starts the daemon for `node-a` in `ns` following the API server of `kubeconfig`.
    pub fn start_api(ns: &Netns, kubeconfig: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let source = [std::ffi::OsStr::new("--kubeconfig"), kubeconfig.as_os_str()];
        Daemon::start_with(ns, &source, kubeconfig, extra, env)
    }

    /// Starts the daemon for `node-a` in `ns` over `manifests` with `extra` flags, under the
    /// open-files limits `nofile` (`soft:hard`, as `prlimit` takes them).
    pub fn start_limited(ns: &Netns, manifests: &Path, nofile: &str, extra: &[&str]) -> Daemon {
        let limit = format!("--nofile={nofile}");
        let source = [["prlimit", &limit, "--", env!("CARGO_BIN_EXE_kube-nftproxy")].as_slice(), BASE].concat();
        let mut argv: Vec<std::ffi::OsString> = source.into_iter().map(Into::into).collect();
        argv.extend([std::ffi::OsStr::new("--manifests"), manifests.as_os_str()].map(Into::into));
        argv.extend(extra.iter().map(Into::into));
        Daemon::start_argv(ns, &argv, manifests, &[])
    }

    /// The soft open-files limit in force in the daemon, and the hard one, as it runs.
    pub fn nofile(&self) -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid())).unwrap_or_default();
        let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default();
        let mut values = line.split_whitespace().skip(3).map(String::from);
        (values.next().unwrap_or_default(), values.next().unwrap_or_default())
    }

    /// Starts the daemon with `source` flags, logging next to `near`.
    fn start_with(
        ns: &Netns,
        source: &[&std::ffi::OsStr],
        near: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut argv: Vec<std::ffi::OsString> =
            [env!("CARGO_BIN_EXE_kube-nftproxy")].into_iter().chain(BASE.iter().copied()).map(Into::into).collect();
        argv.extend(source.iter().map(|s| s.to_os_string()));
        argv.extend(extra.iter().map(Into::into));
        Daemon::start_argv(ns, &argv, near, env)
    }

    /// Starts `argv` (a program and its arguments, all given) in `ns`, logging next to
    /// `near`: the daemon behind something that execs it (`setpriv`, `chroot`), so the
    /// child's process id stays the daemon's.
    pub fn start_argv(ns: &Netns, argv: &[std::ffi::OsString], near: &Path, env: &[(&str, &str)]) -> Daemon {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let log = near.with_extension(format!("{seq}.log"));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("daemon log");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .args(argv)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start daemon");
        Daemon { child: Some(child), log }
    }

    /// The daemon's process id (`ip netns exec` execs it, so it is the child's).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running daemon").id() as i32
    }

    /// Whether its log shows `text` within `limit`.
    pub fn logs_within(&self, text: &str, limit: Duration) -> bool {
        wait_for(limit, || self.logged().contains(text)).is_some()
    }

    /// Sends `sig`.
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends SIGTERM and waits up to `limit` for it to exit; returns its status and how long
    /// it took, or `None` if it did not exit in time (it is killed then).
    pub fn stop_within(&mut self, limit: Duration) -> Option<(ExitStatus, Duration)> {
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().expect("running daemon");
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = child.try_wait() {
                return Some((status, start.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Waits up to `limit` for it to exit on its own; its status, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Stops it with SIGTERM, asserting a clean exit; returns what it logged.
    pub fn stop(mut self) -> String {
        let (status, _) = self.stop_within(Duration::from_secs(10)).expect("the daemon did not stop within 10 s");
        let logged = self.logged();
        assert!(status.success(), "the daemon must exit cleanly on SIGTERM: {status}\n{logged}");
        logged
    }

    /// What it logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Writes `objects` and this node's Node object as one JSON list for cluster `c`, with
/// `write_list` in the cluster's scratch directory; returns its path (the same path for the
/// same cluster, so writing again changes the manifests).
pub fn write_manifests(c: &Cluster, objects: Vec<Value>) -> PathBuf {
    let mut items = vec![Cluster::node_object()];
    items.extend(objects);
    write_list(&c.scratch.0, &json!({"apiVersion": "v1", "kind": "List", "items": items}))
}

/// Writes `list` as `cluster.json` in `dir` at once (written aside, then renamed: the daemon
/// never reads half a file); its path.
pub fn write_list(dir: &Path, list: &serde_json::Value) -> PathBuf {
    let (path, tmp) = (dir.join("cluster.json"), dir.join("cluster.tmp"));
    std::fs::write(&tmp, list.to_string()).expect("write the manifests");
    std::fs::rename(&tmp, &path).expect("rename the manifests");
    path
}

/// Polls `cond` every 20 ms for up to `limit`; returns how long it took.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A stand-in for `nft` in `dir`: a shell script running `body` however it is called (set `NFT`
/// to its path). The daemon runs only `nft --version`, in the background, to log it.
pub fn fake_nft(dir: &Path, body: &str) -> PathBuf {
    stand_in(dir, &format!("#!/bin/sh\n{body}\n"))
}

/// A stand-in for `nft` that answers `--version` with `version` and runs `body` otherwise.
pub fn fake_nft_reporting(dir: &Path, version: &str, body: &str) -> PathBuf {
    stand_in(dir, &format!("#!/bin/sh\nif [ \"$1\" = --version ]; then echo '{version}'; exit 0; fi\n{body}\n"))
}

fn stand_in(dir: &Path, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("nft");
    std::fs::write(&path, script).expect("write the stand-in");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod the stand-in");
    path
}
