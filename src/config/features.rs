//! `--feature-gates` and the file's `featureGates`: the gates kube-proxy knows, parsed and
//! checked as its feature gate does (locked gates set away from their default are refused;
//! unknown names, which upstream refuses, are warned about and ignored), with `AllAlpha` and
//! `AllBeta` setting every alpha or beta gate not set by name, as upstream's.
//!
//! The list (`gates.list`) is generated, never edited: `tools/gen-gates` takes each gate's
//! newest spec at or below Kubernetes 1.37 from upstream's versioned specs as kept in
//! `tools/gates/upstream-specs.txt` (which says where each was read), and a test fails when the
//! list is not what the specs give (`generate.rs`). Its comments name each section's source.
//! Of the gates the proxy code reads, AllowServiceExternalIPs can be changed (off: Services'
//! `externalIPs` are not served, `Config::external_ips`), KubeProxyIPVS off refuses `mode: ipvs`
//! as kube-proxy does, ComponentStatusz and ComponentFlagz serve `/statusz` and `/flagz`; the
//! others (`PreferSameTrafficDistribution`, `NFTablesProxyMode`, ...) are GA and locked on,
//! which is what this proxy implements. NFTablesNetlink (beta, on in 1.37) is taken either way
//! and changes nothing: this proxy always reads its nftables state over netlink.

use std::collections::BTreeMap;

/// Every known gate, `Name stage default [locked]` a line.
const LIST: &str = include_str!("gates.list");

/// The gates that set every alpha or every beta gate not set by name.
const ALL_ALPHA: &str = "AllAlpha";
/// See [`ALL_ALPHA`].
const ALL_BETA: &str = "AllBeta";

/// The gate that keeps Services' `externalIPs` served (deprecated in 1.36, on by default; off,
/// kube-proxy programs none).
pub const ALLOW_SERVICE_EXTERNAL_IPS: &str = "AllowServiceExternalIPs";

/// The gate that allows `mode: ipvs` (deprecated in 1.37, on by default).
pub const KUBE_PROXY_IPVS: &str = "KubeProxyIPVS";

/// The gate that serves `/statusz` (beta, on since 1.36).
pub const COMPONENT_STATUSZ: &str = "ComponentStatusz";

/// The gate that serves `/flagz` (beta, on since 1.36).
pub const COMPONENT_FLAGZ: &str = "ComponentFlagz";

/// The gate of client-go's WatchList (beta, on since 1.35): each reflector's first state comes
/// from a watch streaming it (`sendInitialEvents=true`) instead of a list.
pub const WATCH_LIST_CLIENT: &str = "WatchListClient";

/// The gate the alpha logging options (`--log-*-split-stream`, `--log-*-info-buffer-size`) need.
pub const LOGGING_ALPHA_OPTIONS: &str = "LoggingAlphaOptions";

/// The gate that serves NodePorts on `127.0.0.1` and `::1` when `nodePortAddresses` names
/// loopback (alpha in 1.37, off).
pub const LOCALHOST_NODE_PORTS: &str = "KubeProxyNFTablesLocalhostNodePorts";

/// A gate's maturity, upstream's `PreRelease`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Set by `AllAlpha` when not set by name.
    Alpha,
    /// Set by `AllBeta` when not set by name.
    Beta,
    /// Graduated; setting it only warns upstream.
    Ga,
    /// On its way out; setting it only warns upstream.
    Deprecated,
}

/// One known gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Its name.
    pub name: &'static str,
    /// Its maturity.
    pub stage: Stage,
    /// Whether it is on when nothing sets it.
    pub default: bool,
    /// Whether it cannot be set away from its default.
    pub locked: bool,
}

/// Every gate kube-proxy knows, `AllAlpha` and `AllBeta` included.
pub fn known() -> impl Iterator<Item = Gate> {
    // Upstream registers these two as an alpha and a beta gate, off.
    let special = [(ALL_ALPHA, Stage::Alpha), (ALL_BETA, Stage::Beta)].map(|(name, stage)| Gate {
        name,
        stage,
        default: false,
        locked: false,
    });
    let listed = LIST.lines().filter(|l| !l.starts_with('#')).filter_map(|line| {
        let mut words = line.split_whitespace();
        let (name, stage, default) = (words.next()?, words.next()?, words.next()?);
        let stage = match stage {
            "alpha" => Stage::Alpha,
            "beta" => Stage::Beta,
            "ga" => Stage::Ga,
            _ => Stage::Deprecated,
        };
        Some(Gate { name, stage, default: default == "true", locked: words.next() == Some("locked") })
    });
    special.into_iter().chain(listed)
}

/// The gate called `name`, if kube-proxy knows it.
pub fn gate(name: &str) -> Option<Gate> {
    known().find(|g| g.name == name)
}

/// Gates set explicitly (by `--feature-gates` or the file's `featureGates`), by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates(pub BTreeMap<String, bool>);

impl FeatureGates {
    /// Parses `--feature-gates`: `Name=bool` pairs separated by commas, spaces around each
    /// trimmed, booleans as Go's `strconv.ParseBool` takes them. Names are checked later
    /// (`check`), as upstream sets the gates after reading the flags.
    pub fn parse(text: &str) -> Result<FeatureGates, String> {
        let mut gates = BTreeMap::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("malformed pair {pair:?}, expected Name=true or Name=false"));
            };
            let value = super::values::parse_go_bool(value.trim())
                .map_err(|_| format!("invalid value of {}={}: not a boolean", name.trim(), value.trim()))?;
            gates.insert(name.trim().to_string(), value);
        }
        Ok(FeatureGates(gates))
    }

    /// Adds `other`'s settings over these (a later `--feature-gates` wins per gate).
    pub fn merge(&mut self, other: FeatureGates) {
        self.0.extend(other.0);
    }

    /// Refuses what kube-proxy's feature gate refuses of a gate this binary knows: a locked
    /// gate set away from its default. A deprecated gate is accepted, as upstream (it only
    /// warns). Unlike upstream, a name it does not know is not refused: a drop-in trails the
    /// cluster's newest kube-proxy, and a gate of the next release must not stop every node;
    /// each such name is returned, to be warned about, and has no effect.
    pub fn check(&self) -> Result<Vec<String>, String> {
        let mut unknown = Vec::new();
        for (name, value) in &self.0 {
            match gate(name) {
                None => unknown.push(format!(
                    "unrecognized feature gate {name} (a newer kube-proxy's?): ignored; kube-proxy would refuse it"
                )),
                Some(g) if g.locked && g.default != *value => {
                    return Err(format!(
                        "cannot set feature gate {name} to {value}, feature is locked to {}",
                        g.default
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(unknown)
    }

    /// Whether gate `name` is on: its explicit setting, else `AllAlpha` for an alpha gate or
    /// `AllBeta` for a beta one (when set), else its default. Unknown gates are off.
    pub fn enabled(&self, name: &str) -> bool {
        let Some(g) = gate(name) else { return false };
        let all = match g.stage {
            Stage::Alpha => self.0.get(ALL_ALPHA),
            Stage::Beta => self.0.get(ALL_BETA),
            _ => None,
        };
        self.0.get(name).or(all).copied().unwrap_or(g.default)
    }

    /// Refuses `mode: ipvs` with KubeProxyIPVS off, as kube-proxy's validation: only the
    /// modes left are valid then.
    pub fn check_mode(&self, mode: Option<&str>) -> Result<(), String> {
        match mode {
            Some("ipvs") if !self.enabled(KUBE_PROXY_IPVS) => Err(format!(
                "\"ipvs\" is disabled by the {KUBE_PROXY_IPVS} feature gate; valid modes are \"iptables\" and \"nftables\""
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod generate;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_and_are_checked_as_upstream() {
        let g = FeatureGates::parse(" ComponentFlagz=false , LoggingAlphaOptions = t,").unwrap();
        assert_eq!(g.0.len(), 2);
        assert!(
            g.check().is_ok_and(|u| u.is_empty()) && !g.enabled(COMPONENT_FLAGZ) && g.enabled(LOGGING_ALPHA_OPTIONS)
        );
        assert!(FeatureGates::default().enabled("WatchListClient"), "a default-on gate");
        assert!(FeatureGates::parse("NoValue").is_err());
        assert!(FeatureGates::parse("ComponentFlagz=maybe").unwrap_err().contains("ComponentFlagz"));
        let unknown = FeatureGates::parse("Frobnicate=true,ComponentFlagz=true").unwrap().check().unwrap();
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert!(unknown[0].contains("unrecognized feature gate Frobnicate") && unknown[0].contains("ignored"));
        assert!(!FeatureGates::parse("Frobnicate=true").unwrap().enabled("Frobnicate"), "and it has no effect");
        let locked = FeatureGates::parse("NFTablesProxyMode=false").unwrap().check().unwrap_err();
        assert!(locked.contains("locked to true"), "{locked}");
        assert!(FeatureGates::parse("NFTablesProxyMode=true").unwrap().check().is_ok());
    }

    #[test]
    fn the_list_is_the_newest_registry_once_each() {
        let mut names: Vec<_> = known().map(|g| g.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a gate listed twice");
        assert!(count > 200, "the whole list");
        // 1.37's: the z-pages went beta and on in 1.36, KubeProxyIPVS and NativeHistograms are
        // 1.37's, ContextualLogging is component-base's.
        let want = [
            (COMPONENT_STATUSZ, Stage::Beta, true),
            (COMPONENT_FLAGZ, Stage::Beta, true),
            (KUBE_PROXY_IPVS, Stage::Deprecated, true),
            (ALLOW_SERVICE_EXTERNAL_IPS, Stage::Deprecated, true),
            ("NativeHistograms", Stage::Beta, true),
            ("ContextualLogging", Stage::Beta, true),
            (LOGGING_ALPHA_OPTIONS, Stage::Alpha, false),
            ("CoordinatedLeaderElection", Stage::Beta, false),
            ("KubeProxyNFTablesLocalhostNodePorts", Stage::Alpha, false),
            // Beta and on in 1.37 (k/k#137536); its documented opt-out must be taken.
            ("NFTablesNetlink", Stage::Beta, true),
            // Beta and on since 1.36.
            ("StrictIPCIDRValidation", Stage::Beta, true),
            // client-go's: on since 1.35; the API server's 429 instead of an etcd read, 1.37.
            ("WatchListClient", Stage::Beta, true),
            ("ConsistentListFromCacheSkipTimeoutFallback", Stage::Alpha, false),
        ];
        for (name, stage, default) in want {
            let g = gate(name).unwrap_or_else(|| panic!("{name} unknown"));
            assert_eq!((g.stage, g.default), (stage, default), "{name}");
        }
        assert!(gate("APIServerTracing").is_none(), "removed from the apiserver's gates in 1.37");
        assert!(gate("ServiceTrafficDistribution").is_none(), "removed in 1.36");
    }

    #[test]
    fn all_alpha_and_all_beta_set_their_stage_unless_set_by_name() {
        let gates = |text: &str| FeatureGates::parse(text).unwrap();
        let alpha = gates("AllAlpha=true");
        assert!(alpha.enabled(LOGGING_ALPHA_OPTIONS), "an alpha gate");
        assert!(!alpha.enabled("CoordinatedLeaderElection"), "a beta gate off by default");
        assert!(!gates("AllAlpha=true,LoggingAlphaOptions=false").enabled(LOGGING_ALPHA_OPTIONS));
        let beta_on = gates("AllBeta=true");
        assert!(beta_on.enabled("CoordinatedLeaderElection") && !beta_on.enabled(LOGGING_ALPHA_OPTIONS));
        let beta_off = gates("AllBeta=false");
        assert!(!beta_off.enabled(COMPONENT_STATUSZ), "AllBeta=false turns a default-on beta gate off");
        assert!(beta_off.enabled(KUBE_PROXY_IPVS), "a deprecated gate is neither alpha nor beta");
        assert!(beta_off.enabled("NFTablesProxyMode"), "nor is a GA one");
        assert!(gates("AllBeta=false,ComponentStatusz=true").enabled(COMPONENT_STATUSZ));
    }

    #[test]
    fn ipvs_mode_needs_its_gate_as_upstream() {
        let off = FeatureGates::parse("KubeProxyIPVS=false").unwrap();
        let err = off.check_mode(Some("ipvs")).unwrap_err();
        assert!(err.contains(KUBE_PROXY_IPVS) && err.contains("nftables"), "{err}");
        assert!(off.check_mode(Some("nftables")).is_ok() && off.check_mode(None).is_ok());
        assert!(FeatureGates::default().check_mode(Some("ipvs")).is_ok(), "on by default");
    }
}
