//! Schedulers: how a service port picks an endpoint for a new connection, named as IPVS names
//! them, asked for per Service by annotation or node-wide by `--ipvs-scheduler`.

use std::fmt;

/// The annotation a Service asks for its scheduler with (`random`, `rr`, `sh`, `mh`, or an
/// IPVS scheduler nftables cannot serve, which is served as `random`).
pub const SCHEDULER_ANNOTATION: &str = "kube-nftproxy.io/scheduler";

/// The annotation with the scheduler's flags, as IPVS names them, separated by commas:
/// `sh-port` and `mh-port` hash the client's port with its address.
pub const SCHEDULER_FLAGS_ANNOTATION: &str = "kube-nftproxy.io/scheduler-flags";

/// How a service port picks among the endpoints topology and traffic policy left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scheduler {
    /// Any endpoint, at random (`numgen random`): upstream's nftables mode.
    #[default]
    Random,
    /// Each endpoint in turn, per service port (`numgen inc`).
    RoundRobin,
    /// A hash of the client's address (and port, with `port`) modulo the endpoint count:
    /// stable while the endpoints stay the same.
    SourceHash {
        /// Whether the client's port is hashed too (IPVS's `sh-port`).
        port: bool,
    },
    /// A lookup table of the client's hash, computed by the proxy so that losing one of N
    /// endpoints moves little more than its own 1/N of the clients.
    Maglev {
        /// Whether the client's port is hashed too (IPVS's `mh-port`).
        port: bool,
    },
    /// An IPVS scheduler that needs what nftables cannot see (connection counts, or a
    /// destination worth hashing): served as [`Scheduler::Random`].
    Unserved(Unserved),
}

/// The IPVS schedulers served as a random choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unserved {
    /// Least connections.
    Lc,
    /// Weighted least connections.
    Wlc,
    /// Locality-based least connections.
    Lblc,
    /// Locality-based least connections with replication.
    Lblcr,
    /// Shortest expected delay.
    Sed,
    /// Never queue.
    Nq,
    /// Destination hashing.
    Dh,
}

impl Unserved {
    const ALL: [(Unserved, &'static str); 7] = [
        (Unserved::Lc, "lc"),
        (Unserved::Wlc, "wlc"),
        (Unserved::Lblc, "lblc"),
        (Unserved::Lblcr, "lblcr"),
        (Unserved::Sed, "sed"),
        (Unserved::Nq, "nq"),
        (Unserved::Dh, "dh"),
    ];

    /// The scheduler's IPVS name.
    pub fn as_str(self) -> &'static str {
        Unserved::ALL.iter().find(|(u, _)| *u == self).map_or("?", |(_, n)| n)
    }

    /// Why nftables cannot serve it.
    pub fn why(self) -> &'static str {
        match self {
            Unserved::Dh => "a service's destination is the same for every client, so hashing it picks one endpoint",
            _ => "nftables sees no connection counts",
        }
    }
}

impl Scheduler {
    /// Reads a scheduler's name and its flags: `sh-port` or `mh-port` (one flag in IPVS,
    /// under two names) hashes the client's port too with `sh` or `mh`; the `*-fallback`
    /// flags are what this proxy always does, as an endpoint that is not serving is never in
    /// the table. `wrr` is `rr`: kube-proxy gives every endpoint the same weight. An empty
    /// name is the default. Returns the scheduler and the flags it left unread (unknown, or
    /// of no effect with it).
    pub fn parse(name: &str, flags: &str) -> Result<(Scheduler, Vec<String>), String> {
        let flags: Vec<&str> = flags.split(',').map(str::trim).filter(|f| !f.is_empty()).collect();
        let port = flags.iter().any(|f| *f == "sh-port" || *f == "mh-port");
        let scheduler = match name.trim() {
            "" | "random" => Scheduler::Random,
            "rr" | "wrr" => Scheduler::RoundRobin,
            "sh" => Scheduler::SourceHash { port },
            "mh" => Scheduler::Maglev { port },
            other => match Unserved::ALL.iter().find(|(_, n)| *n == other) {
                Some((u, _)) => Scheduler::Unserved(*u),
                None => return Err(format!("{other:?} is not a scheduler (random, rr, sh, mh)")),
            },
        };
        let known = ["sh-port", "sh-fallback", "mh-port", "mh-fallback"];
        let read = |f: &&str| scheduler.hashes() && known.contains(f);
        Ok((scheduler, flags.iter().filter(|f| !read(f)).map(|f| f.to_string()).collect()))
    }

    /// The scheduler rules are written for: an unserved one is random.
    pub fn served(self) -> Scheduler {
        match self {
            Scheduler::Unserved(_) => Scheduler::Random,
            s => s,
        }
    }

    /// The scheduler's name, as IPVS and the annotation name it.
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Random => "random",
            Scheduler::RoundRobin => "rr",
            Scheduler::SourceHash { .. } => "sh",
            Scheduler::Maglev { .. } => "mh",
            Scheduler::Unserved(u) => u.as_str(),
        }
    }

    /// The flags it is served with (the ones that change what it does).
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Scheduler::SourceHash { port: true } => &["sh-port"],
            Scheduler::Maglev { port: true } => &["mh-port"],
            _ => &[],
        }
    }

    /// Whether the client's hash picks the endpoint (the same client, the same endpoint).
    pub fn hashes(self) -> bool {
        matches!(self, Scheduler::SourceHash { .. } | Scheduler::Maglev { .. })
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match (self, self.flags()) {
            (Scheduler::Unserved(u), _) => write!(f, " (served as random: {})", u.why()),
            (_, []) => Ok(()),
            (_, flags) => write!(f, " ({})", flags.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flags_read_as_ipvs_writes_them() {
        let parse = |n: &str, f: &str| Scheduler::parse(n, f).map(|(s, _)| s);
        assert_eq!(parse("", ""), Ok(Scheduler::Random));
        assert_eq!(parse(" rr ", ""), Ok(Scheduler::RoundRobin));
        assert_eq!(parse("wrr", ""), Ok(Scheduler::RoundRobin));
        assert_eq!(parse("sh", "sh-fallback, sh-port"), Ok(Scheduler::SourceHash { port: true }));
        assert_eq!(parse("mh", "sh-port"), Ok(Scheduler::Maglev { port: true }), "one flag in IPVS, two names");
        assert_eq!(Scheduler::parse("rr", "sh-port").map(|(_, u)| u), Ok(vec!["sh-port".to_string()]), "no effect");
        assert_eq!(parse("lc", ""), Ok(Scheduler::Unserved(Unserved::Lc)));
        assert_eq!(parse("lc", "").map(Scheduler::served), Ok(Scheduler::Random));
        assert!(parse("maglev", "").unwrap_err().contains("\"maglev\""));
        assert_eq!(Scheduler::parse("mh", "mh-port,bogus").map(|(_, u)| u), Ok(vec!["bogus".to_string()]));
        for (u, name) in Unserved::ALL {
            assert_eq!(u.as_str(), name);
            assert!(Scheduler::Unserved(u).to_string().starts_with(&format!("{name} (served as random")));
        }
    }
}
