//! What the node must have for this proxy: a kernel and an `nft` new enough for the rules it
//! writes. Checked at start by the daemon and `--cleanup` (both run `nft`), never by
//! `--dry-run`, which touches nothing.
//!
//! Each need names the feature it is for, so a refusal says what would break. The kernel
//! features are from the templates (`nft-templates/`); the last line of each list is
//! upstream kube-proxy's own minimum (kernel 5.13, `nft` 1.0.1), kept because this proxy is
//! its drop-in replacement and writes rules of the same kind: an older node `nft` cannot
//! read such rules back, and before 1.0.1 `nft` read every table on each run and failed on
//! ones it did not understand (kubernetes/kubernetes#122743).

use crate::nft::NftError;
use crate::nft::exec::Limits;
use std::fmt;
use std::time::Duration;

/// A dotted version, compared field by field (`5.13` < `5.13.1` < `6.1`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub Vec<u32>);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

impl Default for Version {
    fn default() -> Version {
        Version(vec![0])
    }
}

impl Version {
    /// The leading dotted numbers of `text` (`6.18.44-fc-v782` → 6.18.44; `v1.0.6` → 1.0.6).
    pub fn parse_prefix(text: &str) -> Option<Version> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = Vec::new();
        for field in text.split('.') {
            let digits: String = field.chars().take_while(char::is_ascii_digit).collect();
            let Ok(n) = digits.parse() else { break };
            parts.push(n);
            if digits.len() != field.len() {
                break;
            }
        }
        (!parts.is_empty()).then_some(Version(parts))
    }
}

/// One thing the proxy needs, from some version on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// The first version that has it, as dotted numbers.
    pub since: &'static [u32],
    /// What it is for.
    pub what: &'static str,
}

/// What the kernel must support, oldest first.
pub const KERNEL: &[Need] = &[
    Need { since: &[5, 6], what: "sets of concatenated ranges (firewall-allow: loadBalancerSourceRanges)" },
    Need {
        since: &[5, 9],
        what: "reject in the prerouting hook (refusing traffic to services without endpoints before routing)",
    },
    Need { since: &[5, 10], what: "comments on tables" },
    Need {
        since: &[5, 13],
        what: "upstream kube-proxy's nftables minimum, which stands for a node nft that can read these rules (kubernetes#122743)",
    },
];

/// What `nft` must support, oldest first.
pub const NFT: &[Need] = &[
    Need { since: &[0, 9, 4], what: "typeof map keys (numgen in the endpoint maps' keys) and concatenated ranges" },
    Need { since: &[0, 9, 7], what: "comments on tables and sets" },
    Need {
        since: &[1, 0, 1],
        what: "upstream kube-proxy's nftables minimum: an older nft reads every table on each run and can fail on others' (kubernetes#122743)",
    },
];

/// The environment variable upstream kube-proxy reads to skip its kernel check; honoured
/// the same way (non-empty skips the kernel check, never the `nft` one).
pub const SKIP_KERNEL_CHECK: &str = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK";

/// Why the node cannot run the proxy.
#[derive(Debug, thiserror::Error)]
pub enum RequirementError {
    /// The kernel is older than something needs.
    #[error("this node's kernel {found} is too old: kube-nftproxy needs {} or later for {}", newest(.missing), list(.missing))]
    Kernel {
        /// The running kernel.
        found: Version,
        /// What it lacks.
        missing: Vec<Need>,
    },
    /// `nft` is older than something needs.
    #[error("`{nft}` is nft {found}, too old: kube-nftproxy needs nft {} or later for {}", newest(.missing), list(.missing))]
    Nft {
        /// The binary run.
        nft: String,
        /// Its version.
        found: Version,
        /// What it lacks.
        missing: Vec<Need>,
    },
    /// `nft` could not be run or did not say its version.
    #[error("cannot tell the version of `{nft}` (nftables {} or later is needed): {why}", newest(NFT))]
    NftUnknown {
        /// The binary run.
        nft: String,
        /// What went wrong.
        why: String,
    },
    /// The kernel release could not be read.
    #[error("cannot read the kernel release from /proc/sys/kernel/osrelease: {0}")]
    KernelUnknown(String),
}

fn version_of(since: &[u32]) -> Version {
    Version(since.to_vec())
}

fn newest(needs: &[Need]) -> Version {
    needs.iter().map(|n| version_of(n.since)).max().unwrap_or_default()
}

fn list(needs: &[Need]) -> String {
    let each: Vec<String> = needs.iter().map(|n| format!("{} (since {})", n.what, version_of(n.since))).collect();
    each.join("; ")
}

/// The needs `found` does not meet.
pub fn missing(found: &Version, needs: &[Need]) -> Vec<Need> {
    needs.iter().filter(|n| *found < version_of(n.since)).copied().collect()
}

/// The version in `nft --version`'s output (`nftables v1.0.6 (Lester Gooch #5)`).
pub fn parse_nft_version(output: &str) -> Option<Version> {
    output.split_whitespace().find(|w| w.starts_with('v')).and_then(Version::parse_prefix)
}

/// Checks the running kernel against [`KERNEL`]; returns its version.
pub fn check_kernel() -> Result<Version, RequirementError> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| RequirementError::KernelUnknown(e.to_string()))?;
    let found = Version::parse_prefix(release.trim())
        .ok_or_else(|| RequirementError::KernelUnknown(format!("{:?} is not a version", release.trim())))?;
    let missing = missing(&found, KERNEL);
    if missing.is_empty() { Ok(found) } else { Err(RequirementError::Kernel { found, missing }) }
}

/// The longest `nft --version` may take: a hung `nft` must not hold up the start forever.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `nft --version` (the binary the proxy runs) and checks it against [`NFT`].
pub fn check_nft() -> Result<Version, RequirementError> {
    let nft = crate::nft::exec::nft_binary();
    let text = nft_version_output(&nft, VERSION_TIMEOUT)
        .map_err(|why| RequirementError::NftUnknown { nft: nft.clone(), why })?;
    let found = parse_nft_version(&text).ok_or_else(|| RequirementError::NftUnknown {
        nft: nft.clone(),
        why: format!("`{nft} --version` answered {:?}", text.trim()),
    })?;
    let missing = missing(&found, NFT);
    if missing.is_empty() { Ok(found) } else { Err(RequirementError::Nft { nft, found, missing }) }
}

/// What `nft --version` prints, within `timeout` (then it is killed with its process group).
fn nft_version_output(nft: &str, timeout: Duration) -> Result<String, String> {
    let limits = Limits { timeout, ..Limits::default() };
    crate::nft::exec::run_binary(nft, &["--version"], &limits).map_err(|e| match e {
        NftError::TimedOut(_) => format!("`{nft} --version` did not answer within {timeout:?}"),
        other => format!("`{nft} --version` failed: {other}"),
    })
}

/// Checks both, logging what was found; the kernel check is skipped (with a warning) when
/// [`SKIP_KERNEL_CHECK`] is set, as upstream allows.
pub fn check() -> Result<(), RequirementError> {
    let kernel = if std::env::var_os(SKIP_KERNEL_CHECK).is_some_and(|v| !v.is_empty()) {
        log::warn!("{SKIP_KERNEL_CHECK} is set: not checking the kernel version");
        None
    } else {
        Some(check_kernel()?)
    };
    let nft = check_nft()?;
    let kernel = kernel.map_or_else(|| "unchecked".to_string(), |k| k.to_string());
    log::info!("kernel {kernel}, nft {nft}: as needed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse_prefix(text).expect(text)
    }

    #[test]
    fn parses_kernel_releases_and_nft_answers() {
        assert_eq!(v("6.18.44-fc-v782"), Version(vec![6, 18, 44]));
        assert_eq!(v("5.15.0-91-generic"), Version(vec![5, 15, 0]));
        assert_eq!(v("5.13"), Version(vec![5, 13]));
        assert_eq!(v("4.19.0+"), Version(vec![4, 19, 0]));
        assert_eq!(v("6.1rc3"), Version(vec![6, 1]));
        assert_eq!(Version::parse_prefix("linux"), None);
        assert_eq!(parse_nft_version("nftables v1.0.6 (Lester Gooch #5)\n"), Some(Version(vec![1, 0, 6])));
        assert_eq!(parse_nft_version("nftables v1.1.1 (Commodore Bullmoose #2)"), Some(Version(vec![1, 1, 1])));
        assert_eq!(parse_nft_version("nftables v0.9.8 (E.D.S.)"), Some(Version(vec![0, 9, 8])));
        assert_eq!(parse_nft_version("command not found"), None);
    }

    #[test]
    fn versions_compare_field_by_field() {
        assert!(v("5.9") < v("5.13"), "not as strings");
        assert!(v("5.13") < v("5.13.1"));
        assert!(v("5.13.0") >= v("5.13"));
        assert!(v("6.1") > v("5.19.17"));
        assert!(v("1.0.1") > v("0.9.10"));
    }

    #[test]
    fn a_hung_or_failing_nft_is_an_answer_within_the_time_limit() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("knp-req-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path.to_str().unwrap().to_string()
        };
        let start = std::time::Instant::now();
        let hung = nft_version_output(&script("hung", "sleep 1000"), Duration::from_millis(200)).unwrap_err();
        assert!(hung.contains("did not answer within 200ms"), "{hung}");
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        let failed = nft_version_output(&script("failing", "echo broken >&2; exit 3"), VERSION_TIMEOUT).unwrap_err();
        assert!(failed.contains("failed") && failed.contains("broken"), "{failed}");
        assert!(nft_version_output("/nonexistent/nft", VERSION_TIMEOUT).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_exactly_what_is_missing() {
        assert!(missing(&v("6.18.44"), KERNEL).is_empty());
        assert!(missing(&v("5.13.0"), KERNEL).is_empty());
        let old = missing(&v("5.10.0"), KERNEL);
        assert_eq!(old.len(), 1, "{old:?}");
        assert_eq!(old[0].since, &[5, 13]);
        let older = missing(&v("5.4.0"), KERNEL);
        assert_eq!(older.len(), 4);
        assert!(missing(&v("1.0.1"), NFT).is_empty());
        assert_eq!(missing(&v("0.9.8"), NFT).iter().map(|n| n.since).collect::<Vec<_>>(), vec![&[1u32, 0, 1][..]]);
    }

    #[test]
    fn the_messages_say_what_was_found_what_is_needed_and_for_what() {
        let found = v("5.4.0");
        let text = RequirementError::Kernel { missing: missing(&found, KERNEL), found }.to_string();
        assert!(
            text.starts_with("this node's kernel 5.4.0 is too old: kube-nftproxy needs 5.13 or later for "),
            "{text}"
        );
        assert!(text.contains("reject in the prerouting hook") && text.contains("(since 5.9)"), "{text}");
        let found = v("0.9.8");
        let text = RequirementError::Nft { nft: "nft".into(), missing: missing(&found, NFT), found }.to_string();
        assert!(text.starts_with("`nft` is nft 0.9.8, too old: kube-nftproxy needs nft 1.0.1 or later for "), "{text}");
    }
}
