//! Shared test helpers: running the binary, the golden cases, and network namespaces for real-kernel tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The crate root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `kube-nftproxy --dry-run` for node `node-a` over `manifests` with extra flags.
pub fn dry_run(manifests: &Path, args: &[String]) -> Output {
    dry_run_command(Command::new(env!("CARGO_BIN_EXE_kube-nftproxy")), manifests, args)
}

/// The dry run inside namespace `ns`, so it sees that namespace's interface addresses.
pub fn dry_run_in(ns: &Netns, manifests: &Path, args: &[String]) -> String {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_kube-nftproxy")]);
    let out = dry_run_command(cmd, manifests, args);
    assert!(out.status.success(), "dry run in {} failed: {}", ns.name, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 ruleset")
}

fn dry_run_command(mut cmd: Command, manifests: &Path, args: &[String]) -> Output {
    cmd.arg("--dry-run")
        .arg("--manifests")
        .arg(manifests)
        .arg("--hostname-override=node-a")
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("NODE_NAME")
        .output()
        .expect("run kube-nftproxy")
}

/// The dry run's stdout, asserting it succeeded.
pub fn dry_run_ok(manifests: &Path, args: &[String]) -> String {
    let out = dry_run(manifests, args);
    assert!(
        out.status.success(),
        "dry run over {} failed: {}",
        manifests.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 ruleset")
}

/// The schedulers' endpoint picks, put in place of `numgen random mod N` in every dnat rule
/// of a golden case (the `schedulers` cases render them in IPv4 only, without an offset),
/// with `{ip}`, `{proto}` and `{n}` the rule's family word, protocol and N.
pub const SCHEDULER_PICKS: [&str; 5] = [
    "jhash {ip} saddr mod {n} seed 0x6b6e7078",
    "jhash {ip} saddr . {proto} sport mod {n} seed 0x6b6e7078",
    "numgen inc mod {n}",
    "jhash {ip} saddr . {proto} sport mod {n} seed 0x6b6e7078 offset 3",
    "numgen inc mod {n} offset 2",
];

/// `rules` with every dnat rule's `numgen random mod N` pick (with no offset) replaced by
/// `pick` (one of [`SCHEDULER_PICKS`]).
pub fn with_pick(rules: &str, pick: &str) -> String {
    let mut out = String::new();
    for line in rules.split_inclusive('\n') {
        let picked = line.split_once(" . numgen random mod ").filter(|_| line.contains("dnat ip"));
        let Some((head, (n, tail))) =
            picked.and_then(|(h, r)| Some((h, r.split_once(' ')?))).filter(|(_, (_, t))| t.starts_with("map "))
        else {
            out.push_str(line);
            continue;
        };
        let ip = if line.contains("dnat ip6 ") { "ip6" } else { "ip" };
        let proto = head.strip_suffix(" dport").and_then(|h| h.rsplit(' ').next()).expect("a dport before the pick");
        let pick = pick.replace("{ip}", ip).replace("{proto}", proto).replace("{n}", n);
        out.push_str(&format!("{head} . {pick} {tail}"));
    }
    out
}

/// One golden case: `tests/golden/<name>/{manifests.yaml,args,expected.nft[,warnings.txt]}`.
pub struct Case {
    /// Directory name.
    pub name: String,
    /// Case directory.
    pub dir: PathBuf,
    /// Extra flags, from `args`.
    pub args: Vec<String>,
}

/// All golden cases, sorted by name.
pub fn golden_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = std::fs::read_dir(root().join("tests/golden"))
        .expect("tests/golden")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .map(|dir| {
            let args = std::fs::read_to_string(dir.join("args")).unwrap_or_default();
            Case {
                name: dir.file_name().unwrap().to_string_lossy().into_owned(),
                args: args.split_whitespace().map(str::to_string).collect(),
                dir,
            }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// Whether real-kernel tests can run here: root, `ip netns` and `nft`. In CI (`CI` set) a
/// missing piece fails the test run instead of skipping, so CI can never pass silently.
pub fn kernel_available() -> bool {
    let probe = || -> Result<(), String> {
        let uid = Command::new("id").arg("-u").output().map_err(|e| format!("id: {e}"))?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not running as root".into());
        }
        for (cmd, args) in [("nft", &["--version"][..]), ("ip", &["netns", "list"][..])] {
            let ok = Command::new(cmd).args(args).stdout(Stdio::null()).status().map(|s| s.success());
            if !matches!(ok, Ok(true)) {
                return Err(format!("`{cmd} {}` does not work", args.join(" ")));
            }
        }
        Ok(())
    };
    match probe() {
        Ok(()) => true,
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("real-kernel tests cannot run in CI: {why}; install nftables and iproute2 and run as root")
        }
        Err(why) => {
            eprintln!("SKIPPING real-kernel test: {why}");
            false
        }
    }
}

/// A scratch directory for one test, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh, empty directory named after `tag`, this process and a sequence number (tests
    /// run in parallel).
    pub fn new(tag: &str) -> Scratch {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("knp-{tag}-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    /// Entry `name` in it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to file `name` in it.
    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).expect("write scratch file");
    }

    /// Removes file `name` from it.
    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.0.join(name)).expect("remove scratch file");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static NETNS_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A network namespace that is deleted when dropped, also when the test fails.
pub struct Netns {
    /// Its name under `/run/netns`.
    pub name: String,
    /// Namespaces that must live as long as this one (a node's uplink peer: deleting it
    /// would take the uplink with it). Deleted after this one.
    attached: Vec<Netns>,
}

impl Netns {
    /// Creates a fresh, empty namespace.
    pub fn new(tag: &str) -> Netns {
        let seq = NETNS_SEQ.fetch_add(1, Ordering::SeqCst);
        let name = format!("knp-{tag}-{}-{seq}", std::process::id());
        let st = Command::new("ip").args(["netns", "add", &name]).status().expect("ip netns add");
        assert!(st.success(), "ip netns add {name} failed");
        Netns { name, attached: Vec::new() }
    }

    /// A fresh namespace with its loopback up, for what listens on 127.0.0.1 in it.
    pub fn with_loopback(tag: &str) -> Netns {
        let ns = Netns::new(tag);
        assert!(ns.run(&["ip", "link", "set", "lo", "up"], "").status.success(), "lo up in {}", ns.name);
        ns
    }

    /// Runs a command inside the namespace, feeding `stdin`.
    pub fn run(&self, cmd: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ip netns exec");
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(stdin.as_bytes()).expect("write stdin");
        drop(pipe);
        child.wait_with_output().expect("wait")
    }

    /// `nft -f -` with `script`; Err carries nft's message.
    pub fn nft_apply(&self, script: &str) -> Result<(), String> {
        let out = self.run(&["nft", "-f", "-"], script);
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    }

    /// `nft <args>`, asserting success, returning stdout.
    pub fn nft(&self, args: &[&str]) -> String {
        let mut cmd = vec!["nft"];
        cmd.extend_from_slice(args);
        let out = self.run(&cmd, "");
        assert!(out.status.success(), "nft {args:?} in {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `nft list map` of every part of endpoint map `base` (`cluster-endpoints-tcp`) in
    /// `family`'s table, one after another.
    pub fn endpoint_map(&self, family: &str, base: &str) -> String {
        (0..kube_nftproxy::render::PARTS)
            .map(|part| self.nft(&["list", "map", family, "kube-nftproxy", &format!("{base}-{part}")]))
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

pub mod check;
pub mod checker;
pub mod cluster;
pub mod daemon;
pub mod distros;
pub mod emulator;
pub mod explained;
pub mod follower;
pub mod inputs;
pub mod layouts;
pub mod monitor;
pub mod net;
pub mod node;
pub mod owner;
pub mod packaging;
pub mod proxy;
pub mod synth;
pub mod tables;
pub mod traced;
pub mod verify;

/// `man`'s text without its overstrikes (bold and underline come as `N\x08N` off a
/// terminal): the letters alone.
pub fn without_overstrikes(page: &str) -> String {
    let mut out = String::new();
    for c in page.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}
