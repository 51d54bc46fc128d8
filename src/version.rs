//! How this binary was built (version, commit, compiler, platform), in the shapes upstream's
//! `kubernetes_build_info` labels and `/statusz` give them; `build.rs` records the rest.

/// The version, as Cargo has it (`0.1.0`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Major and minor version, as upstream's `major` and `minor` labels.
pub const MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");

/// See [`MAJOR`].
pub const MINOR: &str = env!("CARGO_PKG_VERSION_MINOR");

/// `git describe --always --dirty` of the source built (`unknown` outside a checkout).
pub const DESCRIBE: &str = env!("KUBE_NFTPROXY_COMMIT");

/// The compiler's own `--version` line (`rustc 1.95.0 (…)`): what upstream's `go_version`
/// holds for Go.
pub const RUSTC: &str = env!("KUBE_NFTPROXY_RUSTC");

/// The commit's date in UTC, RFC 3339, standing for the build date (reproducible builds).
pub const BUILD_DATE: &str = env!("KUBE_NFTPROXY_BUILD_DATE");

/// The compiler, as upstream's `compiler` label names Go's (`gc`).
pub const COMPILER: &str = "rustc";

/// `v` and the version, as upstream's `git_version` (`v1.34.1`).
pub fn git_version() -> String {
    format!("v{VERSION}")
}

/// The commit without `-dirty`.
pub fn git_commit() -> &'static str {
    DESCRIBE.strip_suffix("-dirty").unwrap_or(DESCRIBE)
}

/// `dirty` when built from a tree with changes, `clean` when not, empty when unknown (no
/// checkout), as upstream's `git_tree_state`.
pub fn git_tree_state() -> &'static str {
    if DESCRIBE == "unknown" {
        ""
    } else if DESCRIBE.ends_with("-dirty") {
        "dirty"
    } else {
        "clean"
    }
}

/// `os/arch` in Go's names (`linux/amd64`), as upstream's `platform`.
pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        "arm" => "arm",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// Upstream's `kubernetes_build_info` labels, in its order, with this binary's values.
pub fn labels() -> [(&'static str, String); 9] {
    [
        ("major", MAJOR.into()),
        ("minor", MINOR.into()),
        ("git_version", git_version()),
        ("git_commit", git_commit().into()),
        ("git_tree_state", git_tree_state().into()),
        ("build_date", BUILD_DATE.into()),
        ("go_version", RUSTC.into()),
        ("compiler", COMPILER.into()),
        ("platform", platform()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_shapes() {
        assert_eq!(git_version(), format!("v{MAJOR}.{MINOR}.{}", env!("CARGO_PKG_VERSION_PATCH")));
        assert!(!git_commit().ends_with("-dirty"));
        assert!(["", "clean", "dirty"].contains(&git_tree_state()));
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        assert_eq!(platform(), "linux/amd64");
        assert!(BUILD_DATE.ends_with('Z') && BUILD_DATE.len() == 20, "{BUILD_DATE}");
        assert!(RUSTC.starts_with("rustc ") || RUSTC == "unknown", "{RUSTC}");
    }
}
