//! ServiceCIDRs (`networking.k8s.io/v1`): the ranges ClusterIPs are allocated from. Traffic to
//! an address in one of them that no Service holds is dropped, as upstream's nftables mode does.

use super::endpoints::object_key;
use super::services::ObjectError;
use super::{Family, Model};
use ipnet::IpNet;
use k8s_openapi::api::networking::v1::ServiceCIDR;

/// The API's kind name, used in errors.
const KIND: &str = "ServiceCIDR";

/// Validates a ServiceCIDR object: it has a name, and `spec.cidrs` holds one or two CIDRs in
/// canonical form (no host bits), at most one per family, as the API server requires.
///
/// An object being deleted (`metadata.deletionTimestamp` set; the allocator's finalizer keeps
/// it while Services still hold addresses in its range) counts until it is gone: upstream's
/// proxy takes a ServiceCIDR's ranges out only on the object's deletion event, and so does
/// this one.
pub fn service_cidrs_from_api(obj: &ServiceCIDR) -> Result<(String, Vec<IpNet>), ObjectError> {
    let (_, name) = object_key(KIND, &obj.metadata)?;
    let err = |reason: String| ObjectError::new(KIND, "", &name, reason);
    let listed: Vec<&String> = obj.spec.iter().flat_map(|s| s.cidrs.iter().flatten()).collect();
    if listed.is_empty() || listed.len() > 2 {
        return Err(err(format!("spec.cidrs has {} entries; a ServiceCIDR has one or two", listed.len())));
    }
    let mut cidrs = Vec::with_capacity(listed.len());
    for s in listed {
        let cidr: IpNet = s.parse().map_err(|_| err(format!("spec.cidrs entry {s:?} is not a CIDR")))?;
        if cidr.trunc() != cidr {
            return Err(err(format!("spec.cidrs entry {s:?} has host bits set (the network is {})", cidr.trunc())));
        }
        cidrs.push(cidr);
    }
    if cidrs.len() == 2 && Family::of(&cidrs[0].addr()) == Family::of(&cidrs[1].addr()) {
        return Err(err("spec.cidrs has two CIDRs of the same family; at most one per family".into()));
    }
    // Their order means nothing to the rules: listing them the other way round is no change.
    cidrs.sort_unstable();
    Ok((name, cidrs))
}

impl Model {
    /// The service ranges of one family over every ServiceCIDR object, sorted, each range
    /// once: a range inside another (objects may overlap) is covered by the wider one, and
    /// an interval set refuses overlapping elements. A range two objects list stays while
    /// either of them does (upstream keeps one set of range strings, which loses it when
    /// the first of the two goes).
    pub fn service_cidrs(&self, family: Family) -> Vec<IpNet> {
        let mut all: Vec<IpNet> =
            self.service_cidrs.values().flatten().filter(|c| Family::of(&c.addr()) == family).copied().collect();
        all.sort_unstable();
        all.dedup();
        // CIDRs either nest or are disjoint; keep those no other one contains.
        all.iter().filter(|c| !all.iter().any(|o| o != *c && o.contains(*c))).copied().collect()
    }

    /// The CIDRs filed for ServiceCIDR `name`.
    pub fn service_cidr(&self, name: &str) -> Option<&Vec<IpNet>> {
        self.service_cidrs.get(name)
    }

    /// Files ServiceCIDR `name`'s CIDRs (`None`: deleted); false when nothing changed.
    pub(super) fn file_service_cidr(&mut self, name: String, cidrs: Option<Vec<IpNet>>) -> bool {
        if self.service_cidrs.get(&name) == cidrs.as_ref() {
            return false;
        }
        match cidrs {
            Some(cidrs) => self.service_cidrs.insert(name, cidrs),
            None => self.service_cidrs.remove(&name),
        };
        self.changes.service_cidrs = true;
        true
    }
}
