//! The conntrack sysctls kube-proxy sets when it starts, with its flags and defaults: the
//! table's size (`nf_conntrack_max` = max(per-core × CPUs, minimum), only ever raised, and
//! the hash size with it where the kernel lets this namespace change it) and the TCP and UDP
//! timeouts. A zero leaves its sysctl alone; a read-only `/proc/sys` (a container) is a
//! warning for the daemon, never fatal, and an error for `--init-only`, which exists to set
//! them from a privileged init container.

use std::path::{Path, PathBuf};

/// Where the conntrack sysctls are (the timeouts are per network namespace).
pub const PROC_DIR: &str = "/proc/sys/net/netfilter";
/// The conntrack hash size module parameter (global; the kernel takes it only from the
/// initial network namespace).
pub const HASHSIZE: &str = "/sys/module/nf_conntrack/parameters/hashsize";
/// Which CPUs exist, as upstream counts them for the per-core maximum.
const CPUS_ONLINE: &str = "/sys/devices/system/cpu/online";

use crate::config::ConntrackSettings;

impl ConntrackSettings {
    /// The table size to ensure on a node with `cpus` CPUs: max(per-core × CPUs, minimum);
    /// none when the per-core figure is zero (as upstream: the minimum alone sets nothing).
    pub fn table_size(&self, cpus: u32) -> Option<u64> {
        (self.max_per_core > 0).then(|| (u64::from(self.max_per_core) * u64::from(cpus)).max(u64::from(self.min)))
    }

    /// The sysctls to set outright (name under `PROC_DIR`, value); a zero is left out.
    pub fn timeouts(&self) -> Vec<(&'static str, u64)> {
        let mut out = vec![
            ("nf_conntrack_tcp_timeout_established", self.tcp_established.as_secs()),
            ("nf_conntrack_tcp_timeout_close_wait", self.tcp_close_wait.as_secs()),
            ("nf_conntrack_udp_timeout", self.udp.as_secs()),
            ("nf_conntrack_udp_timeout_stream", self.udp_stream.as_secs()),
        ];
        if self.tcp_be_liberal {
            out.push(("nf_conntrack_tcp_be_liberal", 1));
        }
        out.retain(|(_, v)| *v > 0);
        out
    }
}

/// What happened to one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Changed from the first value to the second.
    Changed(PathBuf, u64, u64),
    /// Already as asked (or, for a size, larger).
    Kept(PathBuf, u64),
    /// Could not be read or written; why.
    Failed(PathBuf, String),
}

/// Where the settings are written: the real `/proc` and `/sys`, or a directory in tests.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The directory of the `nf_conntrack_*` sysctls.
    pub proc_dir: PathBuf,
    /// The hash size parameter.
    pub hashsize: PathBuf,
}

impl Default for Paths {
    fn default() -> Paths {
        Paths { proc_dir: PROC_DIR.into(), hashsize: HASHSIZE.into() }
    }
}

/// Applies `settings` on a node with `cpus` CPUs; returns what happened to each setting.
pub fn apply(settings: &ConntrackSettings, cpus: u32, paths: &Paths) -> Vec<Outcome> {
    let mut out = Vec::new();
    if let Some(size) = settings.table_size(cpus) {
        let max = raise(&paths.proc_dir.join("nf_conntrack_max"), size);
        // The hash grows with the table only when the table could be set: a namespace that
        // may not change the one may not change the other.
        let grown = !matches!(max, Outcome::Failed(..));
        out.push(max);
        if grown {
            out.push(raise(&paths.hashsize, size / 4));
        }
    }
    for (name, value) in settings.timeouts() {
        out.push(set(&paths.proc_dir.join(name), value, |current| current == value));
    }
    out
}

/// Raises the integer in `path` to `value` if it is below.
fn raise(path: &Path, value: u64) -> Outcome {
    set(path, value, |current| current >= value)
}

/// Writes `value` to `path` unless `enough` says its current value will do.
fn set(path: &Path, value: u64, enough: impl Fn(u64) -> bool) -> Outcome {
    let current = match read(path) {
        Ok(v) => v,
        Err(e) => return Outcome::Failed(path.into(), e),
    };
    if enough(current) {
        return Outcome::Kept(path.into(), current);
    }
    match std::fs::write(path, format!("{value}\n")) {
        Ok(()) => Outcome::Changed(path.into(), current, value),
        Err(e) => Outcome::Failed(path.into(), format!("cannot write {value}: {e}")),
    }
}

fn read(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    text.trim().parse().map_err(|_| format!("it holds {:?}, not a number", text.trim()))
}

/// How many CPUs a CPU list such as `0-3,8,10-11` names (the format of `CPUS_ONLINE`).
pub fn count_cpus(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
            None => (part.parse().ok()?, part.parse().ok()?),
        };
        n = n.checked_add(hi.checked_sub(lo)?.checked_add(1)?)?;
    }
    Some(n)
}

/// The node's CPUs: every online one, as upstream counts them (not only those this process
/// may run on), or what the process may use when the list cannot be read.
pub fn cpus() -> u32 {
    let listed = std::fs::read_to_string(CPUS_ONLINE).ok().and_then(|s| count_cpus(&s));
    let usable = || std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    listed.filter(|n| *n > 0).unwrap_or_else(usable)
}

/// Settings that could not be set (`--init-only`, whose whole task they are, fails on them).
#[derive(Debug, thiserror::Error)]
#[error("conntrack settings not set: {}", .0.join("; "))]
pub struct NotSet(pub Vec<String>);

/// What [`apply_to_node`] could not set, each as `path: why`.
#[derive(Debug, Default)]
pub struct Applied {
    /// The failures.
    pub failed: Vec<String>,
}

impl Applied {
    /// An error naming every setting not set, if any.
    pub fn result(self) -> Result<(), NotSet> {
        if self.failed.is_empty() { Ok(()) } else { Err(NotSet(self.failed)) }
    }
}

/// Applies `settings` to this node, logging each change (old → new) and each failure as a
/// warning. If the conntrack module is not loaded yet, asking ctnetlink loads it first.
pub fn apply_to_node(settings: &ConntrackSettings) -> Applied {
    let paths = Paths::default();
    if !paths.proc_dir.join("nf_conntrack_max").exists() {
        // The kernel loads nf_conntrack (with ctnetlink) for the first request to it.
        let _ = crate::netlink::Socket::open().and_then(|mut s| s.conntrack_count());
    }
    let mut applied = Applied::default();
    for outcome in apply(settings, cpus(), &paths) {
        match outcome {
            Outcome::Changed(path, old, new) => log::info!("set {}: {old} -> {new}", path.display()),
            Outcome::Kept(path, v) => log::debug!("{} is {v}; left as it is", path.display()),
            Outcome::Failed(path, why) => {
                log::warn!(
                    "conntrack setting {} left as it is: {why} (read-only in a container? --init-only in a \
                     privileged init container sets it)",
                    path.display()
                );
                applied.failed.push(format!("{}: {why}", path.display()));
            }
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn defaults() -> ConntrackSettings {
        ConntrackSettings {
            max_per_core: 32768,
            min: 131072,
            tcp_established: Duration::from_secs(24 * 3600),
            tcp_close_wait: Duration::from_secs(3600),
            tcp_be_liberal: false,
            udp: Duration::ZERO,
            udp_stream: Duration::ZERO,
        }
    }

    #[test]
    fn the_table_size_is_per_core_times_cpus_at_least_the_minimum() {
        let s = defaults();
        assert_eq!(s.table_size(2), Some(131072), "2 × 32768 is below the minimum");
        assert_eq!(s.table_size(8), Some(262144));
        assert_eq!(ConntrackSettings { max_per_core: 0, ..s }.table_size(64), None, "zero per core sets nothing");
        assert_eq!(ConntrackSettings { min: 0, ..s }.table_size(1), Some(32768));
        assert_eq!(
            ConntrackSettings { max_per_core: u32::MAX, ..s }.table_size(u32::MAX),
            Some(u64::from(u32::MAX).pow(2))
        );
    }

    #[test]
    fn timeouts_in_seconds_and_zero_left_alone() {
        assert_eq!(
            defaults().timeouts(),
            [("nf_conntrack_tcp_timeout_established", 86400), ("nf_conntrack_tcp_timeout_close_wait", 3600)]
        );
        let s = ConntrackSettings {
            tcp_established: Duration::ZERO,
            tcp_be_liberal: true,
            udp: Duration::from_secs(45),
            udp_stream: Duration::from_millis(500),
            ..defaults()
        };
        assert_eq!(
            s.timeouts(),
            [
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
                ("nf_conntrack_udp_timeout", 45),
                ("nf_conntrack_tcp_be_liberal", 1)
            ]
        );
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpus("0-1\n"), Some(2));
        assert_eq!(count_cpus("0"), Some(1));
        assert_eq!(count_cpus("0-3,8,10-11"), Some(7));
        for bad in ["", "3-1", "a", "0-", "1,,2"] {
            assert_eq!(count_cpus(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn raises_sizes_sets_timeouts_and_reports_what_it_cannot() {
        let dir = crate::test_support::TempDir::new("sysctl");
        let paths = Paths { proc_dir: dir.path().to_path_buf(), hashsize: dir.join("hashsize") };
        let write = |name: &str, v: &str| std::fs::write(dir.join(name), v).unwrap();
        write("nf_conntrack_max", "65536\n");
        write("hashsize", "65536\n");
        write("nf_conntrack_tcp_timeout_established", "432000\n");
        write("nf_conntrack_tcp_timeout_close_wait", "3600\n");
        write("nf_conntrack_udp_timeout", "junk\n");
        let s = ConntrackSettings { udp: Duration::from_secs(45), ..defaults() };
        let out = apply(&s, 2, &paths);
        let p = |name: &str| dir.join(name);
        assert_eq!(out[0], Outcome::Changed(p("nf_conntrack_max"), 65536, 131072));
        assert_eq!(out[1], Outcome::Kept(p("hashsize"), 65536), "131072 / 4 is below the hash size already there");
        assert_eq!(out[2], Outcome::Changed(p("nf_conntrack_tcp_timeout_established"), 432000, 86400));
        assert_eq!(out[3], Outcome::Kept(p("nf_conntrack_tcp_timeout_close_wait"), 3600));
        assert!(
            matches!(&out[4], Outcome::Failed(path, why) if path == &p("nf_conntrack_udp_timeout") && why.contains("junk"))
        );
        assert_eq!(std::fs::read_to_string(p("nf_conntrack_max")).unwrap(), "131072\n");

        // A bigger table is never lowered; a missing table (no module) skips the hash size.
        write("nf_conntrack_max", "1000000\n");
        assert_eq!(apply(&s, 2, &paths)[0], Outcome::Kept(p("nf_conntrack_max"), 1000000));
        std::fs::remove_file(p("nf_conntrack_max")).unwrap();
        let out = apply(&ConntrackSettings { min: 4_000_000, ..s }, 2, &paths);
        assert!(matches!(&out[0], Outcome::Failed(..)));
        assert_eq!(out[1], Outcome::Kept(p("nf_conntrack_tcp_timeout_established"), 86400), "no hash size step");
    }
}
