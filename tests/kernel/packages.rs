//! The packages for bare-metal nodes (`packaging/build-deb.sh`, `packaging/build-rpm.sh`,
//! built from the static binary as `PROFILE=dev` builds it): what each holds against the list
//! it must hold, the .deb installed on this machine (its unit verified by `systemd-analyze`,
//! its man page rendered by `man`, its bash completion loaded and asked), an upgrade over an
//! edited configuration keeping the edit (the RPM's in a root of its own), and the .deb's
//! removal saying the rules stay.

use crate::common::packaging::static_build_lock;
use crate::common::{Scratch, kernel_available, root, without_overstrikes};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The files every package installs, its unit under `unit_dir` and zsh's function under
/// `zsh_dir`.
fn files(unit_dir: &str, zsh_dir: &str) -> BTreeSet<String> {
    [
        "/usr/bin/kube-nftproxy",
        &format!("{unit_dir}/kube-nftproxy.service"),
        "/etc/kube-nftproxy/config.conf",
        "/etc/default/kube-nftproxy",
        "/usr/share/man/man8/kube-nftproxy.8.gz",
        "/usr/share/bash-completion/completions/kube-nftproxy",
        &format!("{zsh_dir}/_kube-nftproxy"),
        "/usr/share/fish/vendor_completions.d/kube-nftproxy.fish",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// Runs `argv`, which must succeed; its output.
fn run(argv: &[&str], env: &[(&str, &str)]) -> Output {
    let out = Command::new(argv[0]).args(&argv[1..]).envs(env.iter().copied()).output().expect(argv[0]);
    assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds a package with `script` into `out` at `version`; its path.
fn build(script: &str, out: &Path, version: &str) -> PathBuf {
    let script = root().join("packaging").join(script);
    let out_dir = out.to_str().expect("utf-8 path");
    // Without incremental state, as `packaging_image` builds it: the same artifacts, built once.
    let env = [("PROFILE", "dev"), ("CARGO_INCREMENTAL", "0"), ("VERSION", version), ("DEB_COMPRESSION", "none")];
    let built = {
        let _building = static_build_lock();
        run(&[script.to_str().expect("utf-8 path"), out_dir], &env)
    };
    PathBuf::from(text(&built).lines().last().expect("the package's path").trim())
}

/// Purges the package from this machine when dropped, however the test ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "kube-nftproxy"]).output();
    }
}

#[test]
fn the_deb_installs_its_files_and_an_upgrade_keeps_an_edited_configuration() {
    if !kernel_available() {
        return;
    }
    let dir = Scratch::new("pkg-deb");
    let (first, second) = (build("build-deb.sh", &dir.0, "0.1.0~t1"), build("build-deb.sh", &dir.0, "0.1.0~t2"));
    let deb = first.to_str().expect("utf-8 path");
    assert!(deb.ends_with("kube-nftproxy_0.1.0~t1_amd64.deb"), "{deb}");
    let listed: BTreeSet<String> = text(&run(&["dpkg-deb", "--contents", deb], &[]))
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('.').to_string())
        .collect();
    assert_eq!(listed, files("/lib/systemd/system", "/usr/share/zsh/vendor-completions"));
    let conffiles = text(&run(&["dpkg-deb", "--info", deb, "conffiles"], &[]));
    assert_eq!(conffiles, "/etc/kube-nftproxy/config.conf\n/etc/default/kube-nftproxy\n");

    let _installed = Installed;
    run(&["dpkg", "--install", deb], &[]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata("/etc/kube-nftproxy").expect("/etc/kube-nftproxy").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the kubeconfig's directory is root's alone");
    let version = text(&run(&["/usr/bin/kube-nftproxy", "--version"], &[]));
    assert!(version.starts_with("kube-nftproxy "), "{version}");
    let unit = "/lib/systemd/system/kube-nftproxy.service";
    assert!(std::fs::read_to_string(unit).expect("unit").contains("ExecStart=/usr/bin/kube-nftproxy --config="));
    let verified = run(&["systemd-analyze", "verify", unit], &[]);
    let said = format!("{}{}", text(&verified), String::from_utf8_lossy(&verified.stderr));
    assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");
    let page = without_overstrikes(&text(&run(&["man", "8", "kube-nftproxy"], &[("MANWIDTH", "100")])));
    assert!(page.lines().any(|l| l == "EXIT STATUS") && page.contains("kube-nftproxy explain"), "{page}");
    let completion = "source /usr/share/bash-completion/completions/kube-nftproxy; \
         COMP_WORDS=(kube-nftproxy ex); COMP_CWORD=1; f=$(complete -p kube-nftproxy | sed 's/.*-F \\([^ ]*\\).*/\\1/'); \
         $f kube-nftproxy ex kube-nftproxy; echo \"${COMPREPLY[@]}\"";
    assert_eq!(text(&run(&["bash", "-c", completion], &[])).trim(), "explain");

    // An upgrade over an edited configuration keeps the edit.
    let config = "/etc/kube-nftproxy/config.conf";
    let edited = std::fs::read_to_string(config).expect("config").replace("10.244.0.0/16", "10.42.0.0/16");
    std::fs::write(config, &edited).expect("edit config");
    run(&["dpkg", "--install", second.to_str().expect("utf-8 path")], &[]);
    assert!(text(&run(&["dpkg-query", "-W", "kube-nftproxy"], &[])).contains("0.1.0~t2"));
    assert_eq!(std::fs::read_to_string(config).expect("config"), edited, "the upgrade lost the edit");

    // Removing says the rules stay, and keeps the configuration until a purge.
    let removed = run(&["dpkg", "--remove", "kube-nftproxy"], &[]);
    let said = String::from_utf8_lossy(&removed.stderr);
    assert!(said.contains("kube-nftproxy --cleanup"), "{said}");
    assert!(!Path::new("/usr/bin/kube-nftproxy").exists() && Path::new(config).exists());
    run(&["dpkg", "--purge", "kube-nftproxy"], &[]);
    assert!(!Path::new(config).exists());
}

#[test]
fn the_rpm_holds_the_same_files_and_an_upgrade_in_a_scratch_root_keeps_an_edited_configuration() {
    if !kernel_available() {
        return;
    }
    let dir = Scratch::new("pkg-rpm");
    let built = build("build-rpm.sh", &dir.0, "0.1.0");
    let newer = build("build-rpm.sh", &dir.0, "0.1.1");
    let rpm = built.to_str().expect("utf-8 path");
    assert!(rpm.ends_with("kube-nftproxy-0.1.0-1.x86_64.rpm"), "{rpm}");
    let query = |format: &str| text(&run(&["rpm", "-qp", "--qf", format, rpm], &[]));
    let listed: BTreeSet<String> = query("[%{FILENAMES}\n]").lines().map(String::from).collect();
    let mut want = files("/usr/lib/systemd/system", "/usr/share/zsh/site-functions");
    want.insert("/etc/kube-nftproxy".into());
    assert_eq!(listed, want);
    // %config(noreplace): flags c and n.
    let config: BTreeSet<String> = query("[%{FILEFLAGS:fflags} %{FILENAMES}\n]")
        .lines()
        .filter(|l| l.starts_with("cn "))
        .map(|l| l[3..].to_string())
        .collect();
    assert_eq!(config, ["/etc/default/kube-nftproxy", "/etc/kube-nftproxy/config.conf"].map(String::from).into());
    let scripts = text(&run(&["rpm", "-qp", "--scripts", rpm], &[]));
    assert!(scripts.contains("knp_installed") && scripts.contains("knp_removing"), "{scripts}");

    // Installed and upgraded in a root of its own (its scripts need the node's systemd; the
    // .deb's run above): the edit to config.conf stays.
    let scratch = dir.0.join("root");
    let root_dir = scratch.to_str().expect("utf-8 path");
    run(&["rpm", "--root", root_dir, "--initdb"], &[]);
    run(&["rpm", "--root", root_dir, "-i", "--nodeps", "--noscripts", rpm], &[]);
    let config = scratch.join("etc/kube-nftproxy/config.conf");
    let edited = std::fs::read_to_string(&config).expect("config").replace("10.244.0.0/16", "10.42.0.0/16");
    std::fs::write(&config, &edited).expect("edit config");
    let upgrade = newer.to_str().expect("utf-8 path");
    run(&["rpm", "--root", root_dir, "-U", "--nodeps", "--noscripts", upgrade], &[]);
    assert_eq!(
        text(&run(&["rpm", "--root", root_dir, "-q", "kube-nftproxy"], &[])).trim(),
        "kube-nftproxy-0.1.1-1.x86_64"
    );
    assert_eq!(std::fs::read_to_string(&config).expect("config"), edited, "the upgrade lost the edit");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(scratch.join("etc/kube-nftproxy")).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}
