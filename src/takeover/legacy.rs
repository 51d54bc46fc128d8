//! The takeover's part in iptables-legacy (x_tables) tables: kube-proxy's chains there, which
//! nftables cannot see, listed with `iptables-legacy-save` and removed with one
//! `iptables-legacy-restore --noflush` run per family (`ip6tables-…` for IPv6), both bounded
//! helper commands. Only families whose legacy `nat`, `filter` or `mangle` tables exist are
//! looked at, so a node that never used legacy iptables runs nothing. The restore takes the
//! xtables lock (`/run/xtables.lock`) as kube-proxy's does, waiting for it a bounded while:
//! without `-w` it would fail at once whenever kubelet or another agent holds it. The save
//! only reads, and `iptables-legacy-save` takes no lock.

use crate::netlink::NfFamily;
use crate::nft::NftError;
use crate::nft::cleanup::legacy;
use crate::nft::exec::{self, Limits};
use std::time::Duration;

/// The longest the restore waits for the xtables lock: upstream kube-proxy's 5 s, or less
/// so that the wait ends well inside the helper command's own bound.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How often the restore retries the lock while it waits, in microseconds (upstream's).
const LOCK_INTERVAL_US: &str = "100000";

/// Per family: where the kernel lists its legacy tables, the tools, the family.
const FAMILIES: [(&str, &str, &str, NfFamily); 2] = [
    ("/proc/net/ip_tables_names", "iptables-legacy-save", "iptables-legacy-restore", NfFamily::Ip),
    ("/proc/net/ip6_tables_names", "ip6tables-legacy-save", "ip6tables-legacy-restore", NfFamily::Ip6),
];

/// What became of one family's legacy tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Legacy {
    /// No legacy table kube-proxy uses is there.
    Unused,
    /// Listed: nothing of kube-proxy's.
    Clean,
    /// kube-proxy's chains (`table/chain`) are gone, with `jumps` rules that led to them.
    Removed {
        /// The chains.
        chains: Vec<String>,
        /// Rules of other chains that jumped or went to them.
        jumps: usize,
    },
    /// kube-proxy's chains found but left (a report).
    Found(Vec<String>),
    /// The tables are in use but `save` could not run (not installed): they were not searched.
    Unsearched {
        /// The tables in use.
        tables: Vec<String>,
        /// Why.
        why: String,
    },
}

/// One family's outcome.
#[derive(Debug)]
pub struct FamilyOutcome {
    /// The family.
    pub family: NfFamily,
    /// What was done, or why it failed.
    pub result: Result<Legacy, NftError>,
}

/// Removes kube-proxy's chains from every family's legacy tables (`remove`), or only
/// finds them.
pub fn take_over(remove: bool) -> Vec<FamilyOutcome> {
    FAMILIES
        .iter()
        .map(|&(proc, save, restore, family)| FamilyOutcome {
            family,
            result: one_family(proc, save, if remove { Some(restore) } else { None }, family),
        })
        .collect()
}

fn one_family(proc: &str, save: &str, restore: Option<&str>, family: NfFamily) -> Result<Legacy, NftError> {
    let Ok(names) = std::fs::read_to_string(proc) else { return Ok(Legacy::Unused) };
    let tables: Vec<String> =
        names.lines().filter(|t| matches!(*t, "nat" | "filter" | "mangle")).map(str::to_string).collect();
    if tables.is_empty() {
        return Ok(Legacy::Unused);
    }
    let limits = Limits::default();
    let text = match exec::run_binary(save, &[], &limits) {
        Ok(text) => text,
        // Not installed: nothing here can list or change them, and retrying will not help.
        Err(e @ NftError::Spawn { .. }) => return Ok(Legacy::Unsearched { tables, why: e.to_string() }),
        Err(e) => return Err(e),
    };
    let plan = legacy::plan(&text, family);
    if plan.chains.is_empty() {
        return Ok(Legacy::Clean);
    }
    let Some(restore) = restore else { return Ok(Legacy::Found(plan.chains)) };
    let wait = lock_wait(limits.timeout).to_string();
    let args = ["--noflush", "-w", wait.as_str(), "-W", LOCK_INTERVAL_US];
    exec::run_with_input(restore, &args, Some(plan.script), &limits)?;
    Ok(Legacy::Removed { chains: plan.chains, jumps: plan.jumps })
}

/// The seconds `-w` gives the restore: [`LOCK_WAIT`], cut to half the helper's bound (at
/// least 1 s) so that a lock held throughout fails as the restore's error, not a kill.
fn lock_wait(helper_timeout: Duration) -> u64 {
    LOCK_WAIT.as_secs().min(helper_timeout.as_secs() / 2).max(1)
}

/// Logs one family's outcome; `hint` ends a report's warning.
pub fn log(o: &FamilyOutcome, hint: &str) {
    let f = o.family;
    match &o.result {
        Ok(Legacy::Unused | Legacy::Clean) => {}
        Ok(Legacy::Removed { chains, jumps }) => log::info!(
            "removed upstream kube-proxy's chains from `{f}` iptables-legacy tables: {}, with {jumps} rules that led to them",
            chains.join(", ")
        ),
        Ok(Legacy::Found(chains)) => log::warn!(
            "upstream kube-proxy left chains in `{f}` iptables-legacy tables, whose rules may still catch service traffic: {}; {hint}",
            chains.join(", ")
        ),
        Ok(Legacy::Unsearched { tables, why }) => log::warn!(
            "`{f}` iptables-legacy tables {} are in use and cannot be searched for upstream kube-proxy's chains: {why}",
            tables.join(", ")
        ),
        Err(e) => log::error!("removing upstream kube-proxy's chains from `{f}` iptables-legacy tables failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_wait_ends_inside_the_helpers_bound() {
        assert_eq!(lock_wait(Duration::from_secs(60)), 5, "upstream's wait under the default bound");
        assert_eq!(lock_wait(Duration::from_secs(6)), 3);
        assert_eq!(lock_wait(Duration::from_millis(1500)), 1, "-w takes whole seconds, at least one");
    }
}
