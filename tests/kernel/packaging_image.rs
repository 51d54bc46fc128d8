//! What is shipped, as built here: the static binary (`packaging/build-static.sh`) has no
//! interpreter and needs no library, and prints what this build prints; the image's one file
//! (`packaging/Containerfile`: that binary, no `nft`, no shell) runs the daemon, chrooted,
//! through a takeover from kube-proxy;
//! the daemon works with the capabilities the DaemonSet and the unit grant (CAP_NET_ADMIN,
//! and in a pod CAP_SYS_RESOURCE for its OOM score) and no more; the rollback DaemonSet's
//! `--cleanup` removes only kube-nftproxy's tables. Docker cannot build here (no engine), so
//! the Containerfile is checked by content: what it copies exists and covers what the build reads.

use crate::common::daemon::{Daemon, wait_for};
use crate::common::layouts::{iptables_available, load, state};
use crate::common::packaging::{daemonset_containers, setpriv_caps, static_build_lock, unit, unit_values};
use crate::common::{Netns, Scratch, root};
use k8s_openapi::api::apps::v1::DaemonSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_kube-nftproxy");

/// The static binary, built once per test run by the script the Containerfile runs. The dev
/// profile: the same target and linking as the release build, in a fraction of the time
/// (the release build's LTO takes minutes; see README "Install").
fn static_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let _building = static_build_lock();
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("static");
        let status = Command::new(root().join("packaging/build-static.sh"))
            .arg(&out)
            .env("PROFILE", "dev")
            // One build per run: incremental state would only take disk.
            .env("CARGO_INCREMENTAL", "0")
            .status()
            .expect("run packaging/build-static.sh");
        assert!(status.success(), "packaging/build-static.sh failed: {status}");
        out.join("kube-nftproxy")
    })
}

/// What an ELF file asks of the system to start: its interpreter (`PT_INTERP`) and the
/// libraries its dynamic section needs (`DT_NEEDED` entries, as string-table offsets).
fn elf_needs(path: &Path) -> (Option<String>, usize) {
    let b = std::fs::read(path).expect("read binary");
    assert!(b.starts_with(b"\x7fELF") && b[4] == 2 && b[5] == 1, "not a 64-bit little-endian ELF file");
    let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes")) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let (mut interp, mut needed) = (None, 0);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let p_type = u32::from_le_bytes(b[ph..ph + 4].try_into().expect("4 bytes"));
        let (offset, size) = (u64_at(ph + 8), u64_at(ph + 32));
        let body = &b[offset..offset + size];
        match p_type {
            3 => interp = Some(String::from_utf8_lossy(body).trim_end_matches('\0').to_string()),
            // A static PIE keeps a dynamic section to relocate itself, without DT_NEEDED (1).
            2 => {
                needed += body
                    .chunks_exact(16)
                    .take_while(|e| e[..8] != [0; 8])
                    .filter(|e| e[..8] == 1u64.to_le_bytes())
                    .count()
            }
            _ => {}
        }
    }
    (interp, needed)
}

#[test]
fn the_static_binary_has_no_interpreter_and_needs_no_library() {
    // This build's binary links glibc dynamically: the check sees that.
    let (interp, needed) = elf_needs(Path::new(BIN));
    assert!(interp.is_some_and(|i| i.contains("ld-linux")) && needed > 0, "the check cannot tell");
    assert_eq!(elf_needs(static_binary()), (None, 0), "{} is not static", static_binary().display());
}

#[test]
fn the_static_binary_prints_what_this_build_prints() {
    let args = ["--dry-run", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/48", "--manifests"];
    let run = |bin: &Path| {
        let out = Command::new(bin).args(args).arg(root().join("examples/cluster")).env("RUST_LOG", "warn").output();
        let out = out.expect("run the dry run");
        assert!(out.status.success(), "{}: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let script = run(static_binary());
    assert!(script.contains("table ip kube-nftproxy") && script.contains("table ip6 kube-nftproxy"));
    assert_eq!(script, run(Path::new(BIN)));
}

/// The Containerfile's instructions, continuation lines joined, comments left out.
fn instructions() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("packaging/Containerfile")).expect("Containerfile");
    let joined = text.replace("\\\n", " ");
    joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace().map(str::to_string);
            (words.next().expect("an instruction").to_uppercase(), words.collect())
        })
        .collect()
}

/// What building the binary reads from the repository, relative to it: every file the
/// compiler read for the static build (its dep-info: sources, templates, askama.toml), the
/// manifest and lock file, and the lib, bin and build-script roots cargo names.
fn build_inputs() -> Vec<PathBuf> {
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let dep_info = target_dir.join("x86_64-unknown-linux-musl/debug/kube-nftproxy.d");
    let _ = static_binary();
    let read = {
        let _building = static_build_lock();
        std::fs::read_to_string(&dep_info)
    };
    let text = read.unwrap_or_else(|e| panic!("{}: {e}", dep_info.display()));
    let mut inputs: Vec<PathBuf> = text
        .lines()
        .next()
        .and_then(|l| l.split_once(": "))
        .map(|(_, deps)| deps.split_whitespace().map(PathBuf::from).collect())
        .unwrap_or_default();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo).args(["metadata", "--no-deps", "--offline", "--format-version=1"]).output();
    let meta: serde_json::Value = serde_json::from_slice(&out.expect("cargo metadata").stdout).expect("metadata");
    for t in meta["packages"][0]["targets"].as_array().expect("targets") {
        let kind = t["kind"][0].as_str().unwrap_or_default();
        if matches!(kind, "lib" | "custom-build") || (kind == "bin" && t["name"] == "kube-nftproxy") {
            inputs.push(PathBuf::from(t["src_path"].as_str().expect("src_path")));
        }
    }
    inputs.extend([root().join("Cargo.toml"), root().join("Cargo.lock")]);
    // `.git` only tells `--version` the commit (build.rs watches it); an image built from a
    // source tree without it says "unknown".
    let inputs: Vec<PathBuf> = inputs
        .iter()
        .filter_map(|p| p.strip_prefix(root()).ok())
        .filter(|p| !p.starts_with(".git"))
        .map(PathBuf::from)
        .collect();
    assert!(inputs.iter().any(|p| p.starts_with("nft-templates")) && inputs.contains(&"build.rs".into()));
    inputs
}

#[test]
fn the_containerfile_copies_what_exists_and_runs_the_tested_script_into_an_image_of_the_binary_alone() {
    let mut stages = Vec::new();
    let (mut runs, mut from_stages, mut build_sources) = (Vec::new(), Vec::new(), Vec::new());
    for (op, words) in instructions() {
        match op.as_str() {
            "FROM" => stages.push(words.last().cloned().expect("FROM IMAGE [AS NAME]")),
            "COPY" if words[0].starts_with("--from=") => {
                let stage = &words[0]["--from=".len()..];
                assert!(stages[..stages.len() - 1].iter().any(|s| s == stage), "COPY from unknown stage {stage}");
                from_stages.push(words[1..].join(" "));
            }
            "COPY" => {
                // Everything but the destination comes from the context (the repository).
                for source in &words[..words.len() - 1] {
                    assert!(root().join(source).exists(), "COPY {source}: not in the build context");
                    if stages.last().is_some_and(|s| s == "build") {
                        build_sources.push(PathBuf::from(source));
                    }
                }
            }
            "RUN" => runs.push(words.join(" ")),
            _ => {}
        }
    }
    assert_eq!(stages.last().map(String::as_str), Some("scratch"), "the image holds only what is copied in");
    // The build stage gets every file the build reads.
    for input in build_inputs() {
        assert!(build_sources.iter().any(|s| input.starts_with(s)), "the build stage lacks {}", input.display());
    }
    // The script this test file runs is the one the build stage runs, and its binary is all
    // the image holds (twice: at kube-proxy's path too, for kube-proxy's own DaemonSets).
    assert_eq!(runs, ["packaging/build-static.sh /out"]);
    assert_eq!(from_stages, ["/out/kube-nftproxy /kube-nftproxy", "/out/kube-nftproxy /usr/local/bin/kube-proxy"]);
    // The entry point is the program the DaemonSet's containers run.
    let entry = instructions().into_iter().find(|(op, _)| op == "ENTRYPOINT").map(|(_, w)| w.join(" "));
    assert_eq!(entry.as_deref(), Some(r#"["/kube-nftproxy"]"#));
    let (init, proxy) = daemonset_containers();
    for c in [init, proxy] {
        assert_eq!(c.command.unwrap_or_default().first().map(String::as_str), Some("/kube-nftproxy"));
    }
}

/// A node-like namespace that also holds the example Node's InternalIPs, so that it is the
/// example cluster's `node-a` (health-check node ports bind to them).
fn example_node(tag: &str) -> Netns {
    let node = Netns::node_like(tag);
    let text = std::fs::read_to_string(root().join("examples/cluster/node.json")).expect("node.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("node.json");
    for a in json["status"]["addresses"].as_array().expect("addresses") {
        if a["type"] == "InternalIP" {
            let ip = a["address"].as_str().expect("address");
            let cidr = if ip.contains(':') { format!("{ip}/64") } else { format!("{ip}/24") };
            let out = node.run(&["ip", "addr", "add", &cidr, "dev", crate::common::node::UPLINK], "");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    node
}

#[test]
fn the_image_files_run_the_daemon_through_a_takeover() {
    if !iptables_available() {
        return;
    }
    // The image's root: the Containerfile's last stage, the binary alone.
    let image = Scratch::new("pkg-image");
    std::fs::copy(static_binary(), image.0.join("kube-nftproxy")).expect("copy the binary in");
    std::fs::create_dir_all(image.0.join("usr/local/bin")).expect("mkdir");
    std::fs::copy(static_binary(), image.0.join("usr/local/bin/kube-proxy")).expect("copy the binary in");
    // What a container runtime adds (/proc, /dev) and the test's manifests.
    for dir in ["proc", "dev", "manifests"] {
        std::fs::create_dir_all(image.0.join(dir)).expect("mkdir");
    }
    for file in std::fs::read_dir(root().join("examples/cluster")).expect("examples").flatten() {
        std::fs::copy(file.path(), image.0.join("manifests").join(file.file_name())).expect("copy manifests");
    }

    let node = example_node("pkg-img");
    let files = ["iptables.rules", "iptables6.rules", "iptables.nft", "iptables-web.rules"];
    load(&node, &files, true);
    let expected = Netns::new("pkg-img-exp");
    load(&expected, &files, false);
    let chrooted = "mount -t proc proc \"$0/proc\" && mount --rbind /dev \"$0/dev\" && exec chroot \"$0\" \"$@\"";
    let argv: Vec<OsString> = ["unshare", "--mount", "sh", "-c", chrooted]
        .into_iter()
        .map(OsString::from)
        .chain([image.0.clone().into_os_string()])
        // As kube-proxy's own DaemonSet runs it, at kube-proxy's path.
        .chain(
            ["/usr/local/bin/kube-proxy", "--manifests=/manifests", "--hostname-override=node-a"].map(OsString::from),
        )
        .chain(["--cluster-cidr=10.0.0.0/8", "--conntrack-max-per-core=0"].map(OsString::from))
        .chain([OsString::from(format!("--oom-score-adj={}", own_oom_score_adj()))])
        .collect();
    let d = Daemon::start_argv(&node, &argv, &image.0.join("daemon"), &[]);
    let line = "left `inet user KUBE-SERVICES`";
    assert!(d.logs_within(line, Duration::from_secs(20)), "the daemon never logged {line:?}:\n{}", d.logged());
    let log = d.stop();
    assert!(!log.contains(" ERROR ") && !log.contains(" WARN "), "{log}");
    assert!(log.contains("no nft on this node"), "the image holds an nft:\n{log}");
    assert!(node.nft(&["list", "tables"]).contains("table ip kube-nftproxy"));
    assert_eq!(state(&node), state(&expected), "kube-proxy's rules are not gone as they should be\n{log}");
}

/// `program args…` run with only `caps` (setpriv's names) and no new privileges, as the
/// kubelet runs a container with `capabilities: {drop: [ALL], add: …}` and
/// `allowPrivilegeEscalation: false`, or systemd a unit with `CapabilityBoundingSet=` and
/// `NoNewPrivileges=yes`: root, whose every exec gets the bounding set.
fn with_only(caps: &[String], program: &str, args: &[&str]) -> Vec<OsString> {
    let set: String = caps.iter().map(|c| format!(",+{c}")).collect();
    let setpriv = ["setpriv", &format!("--bounding-set=-all{set}"), "--inh-caps=-all", "--no-new-privs", program];
    setpriv.into_iter().chain(args.iter().copied()).map(OsString::from).collect()
}

/// Runs the daemon in a node-like namespace over a kube-proxy nftables-mode table with only
/// `caps` (setpriv's names) and no new privileges; with `oom`, from that OOM score
/// adjustment (as the kubelet or systemd set one) to its default -999, else keeping its
/// own. Whether it synced and took over within 10 s, and its log.
fn daemon_with_caps(caps: &[String], oom: Option<i32>) -> (bool, String) {
    let node = example_node("pkg-caps");
    load(&node, &["nftables-web.nft"], true);
    let dir = Scratch::new("pkg-caps");
    let manifests = root().join("examples/cluster").display().to_string();
    let keep = format!("--oom-score-adj={}", own_oom_score_adj());
    let mut args = vec!["--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8", "--conntrack-max-per-core=0"];
    if oom.is_none() {
        args.push(&keep);
    }
    args.extend(["--manifests", &manifests]);
    let choom: Vec<String> =
        oom.map(|n| vec!["choom".into(), "-n".into(), n.to_string(), "--".into()]).unwrap_or_default();
    let argv: Vec<OsString> = choom.into_iter().map(OsString::from).chain(with_only(caps, BIN, &args)).collect();
    let d = Daemon::start_argv(&node, &argv, &dir.0.join("daemon"), &[]);
    let done = wait_for(Duration::from_secs(10), || d.logged().contains("removed nftables table `ip kube-proxy`"));
    let log = d.logged();
    drop(d);
    (done.is_some() && node.nft(&["list", "tables"]).contains("table ip kube-nftproxy"), log)
}

/// This process's OOM score adjustment (which a child may keep without a capability).
fn own_oom_score_adj() -> i32 {
    let text = std::fs::read_to_string("/proc/self/oom_score_adj").expect("oom_score_adj");
    text.trim().parse().expect("a number")
}

/// Whether this process may lower OOM score adjustments (CAP_SYS_RESOURCE, bit 24): some
/// sandboxes withhold it even from root.
fn can_lower_oom_scores() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("CapEff");
    u64::from_str_radix(eff.trim(), 16).expect("hex") & (1 << 24) != 0
}

/// The OOM score adjustment the kubelet gives a pod of a critical priority class.
const KUBELET_CRITICAL_OOM: i32 = -997;

#[test]
fn the_daemon_needs_the_capabilities_it_is_granted_and_no_more() {
    if !crate::common::kernel_available() {
        return;
    }
    let (_, proxy) = daemonset_containers();
    let granted = proxy.security_context.and_then(|s| s.capabilities).and_then(|c| c.add).expect("capabilities.add");
    let text = unit();
    let unit_set: Vec<String> = unit_values(&text, "CapabilityBoundingSet")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .map(String::from)
        .collect();
    let unit_oom: i32 = unit_values(&text, "OOMScoreAdjust")[0].parse().expect("OOMScoreAdjust");
    let (pod_caps, unit_caps) = (setpriv_caps(&granted), setpriv_caps(&unit_set));
    assert_eq!(pod_caps, ["net_admin", "sys_resource"]);
    assert_eq!(unit_caps, ["net_admin"]);
    let lower = can_lower_oom_scores();
    if !lower {
        eprintln!("SKIPPING the OOM score part: root here lacks CAP_SYS_RESOURCE, so nothing can lower one");
    }
    // Syncs (nft and netlink), conntrack cleanup of the example's UDP services, the sysctls
    // it may set in its namespace, its OOM score, the takeover: all without a warning.
    for (caps, oom) in [(&pod_caps, KUBELET_CRITICAL_OOM), (&unit_caps, unit_oom)] {
        let (ok, log) = daemon_with_caps(caps, lower.then_some(oom));
        assert!(ok, "the daemon did not sync and take over with {caps:?}:\n{log}");
        assert!(!log.contains(" ERROR ") && !log.contains(" WARN "), "{caps:?}: {log}");
    }
    if lower {
        // Without CAP_SYS_RESOURCE, the OOM score stays where the kubelet put it.
        let (ok, log) = daemon_with_caps(&unit_caps, Some(KUBELET_CRITICAL_OOM));
        assert!(ok && log.contains("could not set oom_score_adj to -999"), "{log}");
    }
    let (ok, log) = daemon_with_caps(&[], None);
    assert!(!ok && log.contains("ERROR"), "without CAP_NET_ADMIN the daemon cannot work:\n{log}");
}

#[test]
fn the_rollback_daemonset_removes_only_kube_nftproxys_tables_with_net_admin_alone() {
    let docs = crate::common::packaging::documents_in(&crate::common::packaging::manifests_dir().join("rollback"));
    let [(_, doc)] = docs.as_slice() else { panic!("one object in packaging/kubernetes/rollback") };
    let ds: DaemonSet = serde_json::from_value(doc.clone()).expect("a DaemonSet");
    let pod = ds.spec.and_then(|s| s.template.spec).expect("pod spec");
    assert_eq!(pod.host_network, Some(true), "the tables are in the host's network namespace");
    assert!(pod.tolerations.iter().flatten().any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()));
    let cleanup = &pod.init_containers.expect("init containers")[0];
    let (_, proxy) = daemonset_containers();
    assert_eq!(cleanup.image, proxy.image, "the same image as the proxy's");
    let command = cleanup.command.clone().expect("command");
    assert_eq!(command, ["/kube-nftproxy", "--cleanup"]);
    let caps = cleanup.security_context.clone().and_then(|s| s.capabilities).and_then(|c| c.add).expect("caps");
    if !crate::common::kernel_available() {
        return;
    }
    // A node after the rollback's first step: kube-proxy's rules back next to ours.
    let node = Netns::new("pkg-rollback");
    let script = crate::common::dry_run_ok(&root().join("examples/cluster"), &["--cluster-cidr=10.0.0.0/8".into()]);
    node.nft_apply(&script).expect("our tables");
    load(&node, &["nftables-web.nft"], true);
    let argv = with_only(&setpriv_caps(&caps), BIN, &["--cleanup"]);
    let argv: Vec<&str> = argv.iter().map(|a| a.to_str().expect("utf-8")).collect();
    let out = node.run(&argv, "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tables = node.nft(&["list", "tables"]);
    assert!(!tables.contains("kube-nftproxy"), "{tables}");
    assert!(tables.contains("table ip kube-proxy"), "kube-proxy's rules must stay: {tables}");
}
