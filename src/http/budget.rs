//! Descriptors: the open-files limit raised at start, as Go's runtime raises kube-proxy's,
//! and how the `http` thread shares what the limit allows between health-check listeners
//! and connections, so that neither many Local Services nor a crowd of connections leaves
//! `/healthz` without a descriptor to answer with.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors left to the rest of the daemon: netlink sockets, the API server's
/// connections, the pipes of `nft` children, the files it reads.
const OTHERS: usize = 64;

/// Connections open at once whatever the limit allows: each holds up to 8 KiB of request.
pub const MAX_CONNECTIONS: usize = 1024;

/// Raises the soft open-files limit (`RLIMIT_NOFILE`) to the hard one, as Go's runtime does
/// for kube-proxy at start (systemd's default soft limit is 1,024, its hard 524,288; a
/// container runtime sets both). Logs the limit before and after.
pub fn raise_open_files_limit() {
    let before = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |n| n.to_string());
    let (soft, hard) = (show(before.current), show(before.maximum));
    // An unlimited hard limit cannot be the soft one: the kernel caps it at fs.nr_open.
    let (Some(current), Some(maximum)) = (before.current, before.maximum) else {
        return log::info!("open files limit (RLIMIT_NOFILE): {soft}, hard {hard}");
    };
    if current >= maximum {
        return log::info!("open files limit (RLIMIT_NOFILE): {soft}, its hard limit");
    }
    match setrlimit(Resource::Nofile, Rlimit { current: Some(maximum), maximum: Some(maximum) }) {
        Ok(()) => log::info!("open files limit (RLIMIT_NOFILE) raised from {soft} to its hard limit {hard}"),
        Err(e) => log::warn!("open files limit (RLIMIT_NOFILE) stays {soft} (hard {hard}): raising it: {e}"),
    }
}

/// How the `http` thread shares the descriptors the soft limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft open-files limit.
    limit: usize,
}

impl Budget {
    /// The budget under the soft limit in force now.
    pub fn current() -> Budget {
        let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
        Budget::of(usize::try_from(soft).unwrap_or(usize::MAX))
    }

    /// The budget under a soft limit of `limit` descriptors.
    pub fn of(limit: usize) -> Budget {
        Budget { limit }
    }

    /// The soft limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// What the `http` thread may hold: listeners, connections and the reserve.
    fn usable(&self) -> usize {
        self.limit.saturating_sub(OTHERS)
    }

    /// The most health-check node port listeners open at once: three quarters of what the
    /// thread may hold, so connections always have a quarter.
    pub fn listeners(&self) -> usize {
        self.usable() - self.usable() / 4
    }

    /// The most connections open at once while `listeners` listeners (of any kind) and the
    /// reserve are open.
    pub fn connections(&self, listeners: usize) -> usize {
        self.usable().saturating_sub(listeners + 1).clamp(1, MAX_CONNECTIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_leave_connections_a_quarter_and_connections_stay_bounded() {
        let small = Budget::of(1024);
        assert_eq!(small.listeners(), 720);
        assert_eq!(small.connections(2), 957);
        assert_eq!(small.connections(720 + 2), 237, "a full set of listeners leaves a quarter");
        let large = Budget::of(1 << 20);
        assert_eq!(large.connections(2000), MAX_CONNECTIONS);
        assert_eq!(Budget::of(10).connections(0), 1, "never none");
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        // Lowered by one first, so that the raise has something to do where the test
        // runner's soft limit is its hard one already (harmless to the other tests).
        if let Rlimit { current: Some(soft), maximum: Some(hard) } = getrlimit(Resource::Nofile)
            && soft == hard
        {
            let lowered = Rlimit { current: Some(hard - 1), maximum: Some(hard) };
            setrlimit(Resource::Nofile, lowered).expect("lower the soft limit");
        }
        let before = getrlimit(Resource::Nofile);
        assert!(before.maximum.is_none() || before.current < before.maximum, "{before:?}");
        raise_open_files_limit();
        let after = getrlimit(Resource::Nofile);
        assert_eq!(after.maximum, before.maximum, "the hard limit stays");
        if before.maximum.is_some() {
            assert_eq!(after.current, after.maximum);
        }
        assert_eq!(Budget::current().limit() as u64, after.current.unwrap_or(u64::MAX).min(usize::MAX as u64));
    }
}
