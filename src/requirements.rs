//! What the node must have for this proxy: a kernel new enough for the rules it writes.
//! Checked at start by the daemon and `--cleanup`, never by `--dry-run`, which touches nothing.
//!
//! Each need names the feature it is for, so a refusal says what would break. The kernel
//! features are from the templates (`nft-templates/`); the last line of the list is upstream
//! kube-proxy's own minimum (kernel 5.13), kept because this proxy is its drop-in replacement
//! and writes rules of the same kind.
//!
//! No `nft` is needed: syncs, the takeover and `--cleanup` all speak netlink. Upstream requires
//! nft 1.0.1 only because it runs nft. An `nft` on the node is still what people list the
//! rules with, so the daemon looks at it in the background: its version is logged, with a
//! warning when it is older than 1.0.1, which may not read these rules back, and before which
//! nft read every table on each run and failed on ones it did not understand
//! (kubernetes/kubernetes#122743). Neither its absence nor its age stops anything.

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

/// The first kernel that raises a set's size in place (a partial sync grows a map so; before
/// it, a map past its size takes a full sync).
pub const SET_SIZE_UPDATE: &[u32] = &[6, 5];

/// Whether the running kernel is `since` or later (`false` when its release is unreadable).
pub fn kernel_has(since: &[u32]) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    Version::parse_prefix(release.trim()).is_some_and(|found| found >= Version(since.to_vec()))
}

/// What an `nft` on the node needs to list this proxy's rules, oldest first (warned about,
/// never required).
pub const NFT: &[Need] = &[
    Need { since: &[0, 9, 4], what: "typeof map keys (numgen in the endpoint maps' keys) and concatenated ranges" },
    Need { since: &[0, 9, 7], what: "comments on tables and sets" },
    Need {
        since: &[1, 0, 1],
        what: "upstream kube-proxy's nftables minimum: an older nft reads every table on each run and can fail on others' (kubernetes#122743)",
    },
];

/// The environment variable upstream kube-proxy reads to skip its kernel check; honoured
/// the same way (non-empty skips the kernel check).
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

/// The longest `nft --version` may take: a hung `nft` is killed and reported.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What an `nft` on the node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeNft {
    /// None on `PATH` (or at `NFT`).
    Absent,
    /// This version.
    Version(Version),
    /// It did not say its version: why.
    Unknown(String),
}

/// Runs `nft --version` (the `NFT` binary if set) within `limits`, at most [`VERSION_TIMEOUT`].
pub fn node_nft(limits: &Limits) -> NodeNft {
    let nft = crate::nft::exec::nft_binary();
    let limits = Limits { timeout: limits.timeout.min(VERSION_TIMEOUT), stop: limits.stop.clone() };
    match nft_version_output(&nft, &limits) {
        Ok(text) => parse_nft_version(&text).map_or_else(
            || NodeNft::Unknown(format!("`{nft} --version` answered {:?}", text.trim())),
            NodeNft::Version,
        ),
        Err(None) => NodeNft::Absent,
        Err(Some(why)) => NodeNft::Unknown(why),
    }
}

/// What `nft --version` prints, within `limits` (then it is killed with its process group);
/// `Err(None)` when there is no such binary.
fn nft_version_output(nft: &str, limits: &Limits) -> Result<String, Option<String>> {
    crate::nft::exec::run_binary(nft, &["--version"], limits).map_err(|e| match e {
        NftError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => None,
        NftError::TimedOut(t) => Some(format!("`{nft} --version` did not answer within {t:?} and was killed")),
        other => Some(format!("`{nft} --version` failed: {other}")),
    })
}

/// Logs what [`node_nft`] found: the version at info, or a warning when it is too old to
/// list these rules or did not say.
pub fn log_node_nft(found: &NodeNft) {
    let unneeded = "kube-nftproxy does not run it";
    match found {
        NodeNft::Absent => log::info!("no nft on this node; {unneeded}, it is only for listing the rules by hand"),
        NodeNft::Version(v) => match missing(v, NFT).as_slice() {
            [] => log::info!("nft {v} on this node can list these rules; {unneeded}"),
            lacks => log::warn!(
                "nft {v} on this node may not list these rules: nft {} or later has {}; {unneeded}",
                newest(lacks),
                list(lacks)
            ),
        },
        NodeNft::Unknown(why) => log::warn!("cannot tell which nft is on this node ({why}); {unneeded}"),
    }
}

/// Checks the kernel, logging what was found; skipped (with a warning) when
/// [`SKIP_KERNEL_CHECK`] is set, as upstream allows.
pub fn check() -> Result<(), RequirementError> {
    if std::env::var_os(SKIP_KERNEL_CHECK).is_some_and(|v| !v.is_empty()) {
        log::warn!("{SKIP_KERNEL_CHECK} is set: not checking the kernel version");
        return Ok(());
    }
    let kernel = check_kernel()?;
    log::info!("kernel {kernel}: as needed");
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
    fn a_hung_failing_or_missing_nft_is_an_answer_within_the_time_limit() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::test_support::TempDir::new("req");
        let script = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path.to_str().unwrap().to_string()
        };
        let start = std::time::Instant::now();
        let limits = |ms| Limits { timeout: Duration::from_millis(ms), ..Limits::default() };
        let hung = nft_version_output(&script("hung", "sleep 1000"), &limits(200)).unwrap_err().unwrap();
        assert!(hung.contains("did not answer within 200ms"), "{hung}");
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        let failed = nft_version_output(&script("failing", "echo broken >&2; exit 3"), &limits(10_000));
        let failed = failed.unwrap_err().unwrap();
        assert!(failed.contains("failed") && failed.contains("broken"), "{failed}");
        assert_eq!(nft_version_output("/nonexistent/nft", &limits(10_000)), Err(None), "absent is no error");
        let old = script("old", "echo 'nftables v0.9.8 (E.D.S.)'");
        let found = nft_version_output(&old, &limits(10_000)).map(|t| parse_nft_version(&t));
        assert_eq!(found, Ok(Some(v("0.9.8"))));
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
    }
}
