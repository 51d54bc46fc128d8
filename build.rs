//! Records how the binary was built, for `--version` and the build-info metric.

use std::process::Command;

fn main() {
    // In UTC: the commit's date below is written in the local zone, and nothing else reads it.
    let output = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .env("TZ", "UTC")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = output("git", &["describe", "--always", "--dirty", "--abbrev=12"]).unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc = output(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    // The commit's date (UTC) stands for the build date: the same source builds the same binary.
    let date = output("git", &["show", "-s", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "HEAD"])
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into());
    println!("cargo:rustc-env=KUBE_NFTPROXY_COMMIT={commit}");
    println!("cargo:rustc-env=KUBE_NFTPROXY_BUILD_DATE={date}");
    println!("cargo:rustc-env=KUBE_NFTPROXY_RUSTC={rustc}");
    println!("cargo:rustc-env=KUBE_NFTPROXY_TARGET={}", std::env::var("TARGET").unwrap_or_default());
    println!("cargo:rustc-env=KUBE_NFTPROXY_PROFILE={}", std::env::var("PROFILE").unwrap_or_default());
    // A new commit changes what --version says; the index changes with every staged edit.
    for path in ["HEAD", "index"] {
        if let Some(p) = output("git", &["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
