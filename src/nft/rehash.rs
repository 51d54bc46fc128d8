//! A map that outgrows the hash table it was built with (past four times the size it was
//! built for, past a size nobody noted, or on a kernel that cannot raise a limit) given a
//! table built anew, without holding the kernel's commit mutex long and without any packet
//! seeing a change. The map is copied under another name (`service-ips-copy`) some thousands
//! of elements to a transaction; the rules that read it are replaced, one chain to a
//! transaction, by the same rules reading the copy; the map is deleted. Then the same the
//! other way, into the map declared anew with its larger table. The kernel walks every
//! element of a map (a vmap, a `dnat … map`) when a rule of a chain not yet reading it starts
//! to, which is why each chain moves alone. Both hold the same elements throughout, so
//! whichever a packet meets answers the same. A rehash cut short (a refused transaction, a
//! crash) leaves a copy so named, which the next full sync finishes the same way before it
//! reads the tables.

use super::compile::{self, ListedAnon};
use super::sizes::{Growth, declared_for};
use super::staged::counting;
use super::wire::Batch;
use super::{Applier, NftError, STAGE_ELEMENTS};
use crate::model::Family;
use crate::netlink::abi::NFT_SET_ANONYMOUS;
use crate::netlink::elements::Element;
use crate::netlink::{self, NfFamily, RuleListing, SetSpec};
use crate::render::{TABLE_NAME, copied_map, copy_of, words};
use std::collections::BTreeMap;
use std::time::Instant;

/// How the log says a map was rehashed (the benchmark counts these lines).
pub const REHASHED: &str = "rehashed the ";

/// How a rehash's transaction is logged, at debug level, with what it did and its time.
pub const REHASH_STEP: &str = "rehash: ";

impl Applier {
    /// Rehashes the maps of `maps`, each into a table built for its new size, with the
    /// guard's notifications paused (the kernel would describe every element copied to it);
    /// returns the transactions sent, and whether another process committed meanwhile
    /// (`counting`, as for a full sync). The tables hold what they held before, but for the
    /// maps' sizes.
    pub(super) fn rehash(&mut self, maps: &[Growth]) -> Result<(u32, bool), NftError> {
        if maps.is_empty() {
            return Ok((0, false));
        }
        let mut sock = netlink::Socket::open()?;
        let quiet = self.quiet.clone();
        let mut sent = 0;
        let unsure = counting(quiet.as_deref(), || {
            sent = self.rehash_each(&mut sock, maps)?;
            Ok(sent)
        })?;
        Ok((sent, unsure))
    }

    fn rehash_each(&mut self, sock: &mut netlink::Socket, maps: &[Growth]) -> Result<u32, NftError> {
        let mut sent = 0;
        for (family, map, size) in maps {
            let started = Instant::now();
            let name = map.to_string();
            let fam = NfFamily::from(*family);
            let fam_word = words(*family).fam;
            let sets = sock.set_listings(fam, TABLE_NAME)?;
            let copy_name = copy_of(&name);
            // Left by someone else (ours are finished before a refresh reads the tables): the
            // full sync that follows a failed one finishes it first.
            if sets.iter().any(|s| s.name == copy_name) {
                return Err(cannot(format!("the {fam_word} {name} map has a copy left, {copy_name}")));
            }
            let Some(listed) = sets.iter().find(|s| s.name == name) else {
                return Err(cannot(format!("the {fam_word} {name} map is missing")));
            };
            let Some(spec) = declared_for(listed, &name, *size) else {
                return Err(cannot(format!("the {fam_word} {name} map's user data cannot be read")));
            };
            let copy = SetSpec { name: copy_name, ..spec.clone() };
            // Read once: the copy holds the same.
            let elements = sock.elements(fam, TABLE_NAME, &name)?;
            let steps = self.move_map(sock, *family, (&name, &elements), &copy)?
                + self.move_map(sock, *family, (&copy.name, &elements), &spec)?;
            log::info!(
                "{REHASHED}{fam_word} {name} map into a table for {size} elements: {steps} transactions in {:?}",
                started.elapsed()
            );
            self.sizes.rehashed(*family, *map, *size);
            self.schema.redeclared(*family, spec);
            sent += steps;
        }
        Ok(sent)
    }

    /// Finishes the rehashes cut short in the tables of `scope`: what reads a copy is moved
    /// back to its map (declared as the copy is, if the map is gone). True when there was one.
    pub(super) fn finish_rehashes(&mut self, scope: &[Family]) -> Result<bool, NftError> {
        match self.quiet.clone() {
            Some(quiet) => quiet.during(|| self.finish_each(scope)),
            None => self.finish_each(scope),
        }
    }

    fn finish_each(&mut self, scope: &[Family]) -> Result<bool, NftError> {
        let mut sock = netlink::Socket::open()?;
        let mut found = false;
        for family in scope {
            for copy in sock.set_listings(NfFamily::from(*family), TABLE_NAME)? {
                let Some(map) = copied_map(&copy.name) else { continue };
                log::info!("finishing the rehash of the {} {map} map, cut short", words(*family).fam);
                let spec = SetSpec { name: map.to_string(), ..copy.as_sent() };
                let elements = sock.elements(NfFamily::from(*family), TABLE_NAME, &copy.name)?;
                self.move_map(&mut sock, *family, (&copy.name, &elements), &spec)?;
                found = true;
            }
        }
        Ok(found)
    }

    /// Moves what reads set `from` of `family`'s table to the set `to` declares (declared so
    /// unless it exists): `from`'s elements (`elements`, as a dump lists them) are added to
    /// it, the rules reading `from` read it instead, and `from` is deleted. Returns the
    /// transactions sent.
    fn move_map(
        &mut self,
        sock: &mut netlink::Socket,
        family: Family,
        (from, elements): (&str, &[Element]),
        to: &SetSpec,
    ) -> Result<u32, NftError> {
        let fam = NfFamily::from(family);
        let sets = sock.set_listings(fam, TABLE_NAME)?;
        let mut sent = 0;
        if !sets.iter().any(|s| s.name == to.name) {
            let mut batch = Batch::new();
            compile::declare(&mut batch, family, to);
            sent += self.step(batch, || format!("declaring {}", to.name))?;
        }
        // Elements added again as they are change nothing: a move cut short is finished so.
        for chunk in elements.chunks(STAGE_ELEMENTS) {
            let mut batch = Batch::new();
            batch.copied_elements(family, TABLE_NAME, &to.name, chunk);
            sent += self.step(batch, || format!("copying {from}'s elements to {}", to.name))?;
        }
        let rules = sock.rule_listings(fam, TABLE_NAME)?;
        let mut chains: BTreeMap<&str, Vec<&RuleListing>> = BTreeMap::new();
        for rule in rules.iter().filter(|r| compile::lookups(r).iter().any(|s| s == from)) {
            chains.entry(&rule.chain).or_default().push(rule);
        }
        for (chain, rules) in chains {
            let anon = anonymous_sets(sock, fam, &sets, &rules)?;
            let mut batch = Batch::new();
            for rule in rules {
                compile::reread(&mut batch, family, rule, (from, &to.name), &anon)?;
            }
            sent += self.step(batch, || format!("moving chain {chain}'s rules from {from} to {}", to.name))?;
        }
        let mut batch = Batch::new();
        batch.delete_set(family, TABLE_NAME, from);
        sent += self.step(batch, || format!("deleting {from}"))?;
        Ok(sent)
    }

    /// Sends one step of a rehash as a transaction of its own; a refusal names the step.
    fn step(&mut self, batch: Batch, what: impl Fn() -> String) -> Result<u32, NftError> {
        self.own.add(self.sender.port()?);
        let started = Instant::now();
        match self.sender.send(&batch.finish()) {
            Ok(()) => {
                log::debug!("{REHASH_STEP}{} in {:?}", what(), started.elapsed());
                Ok(1)
            }
            Err(e) => match NftError::from(e) {
                NftError::Kernel { errno, .. } => Err(NftError::Rejected {
                    message: std::io::Error::from_raw_os_error(errno).to_string(),
                    line: Some(format!("(rehashing a map: {})", what())),
                }),
                other => Err(other),
            },
        }
    }
}

/// The anonymous sets `rules` read, with their elements, by name.
fn anonymous_sets(
    sock: &mut netlink::Socket,
    fam: NfFamily,
    sets: &[SetSpec],
    rules: &[&RuleListing],
) -> Result<BTreeMap<String, ListedAnon>, NftError> {
    let mut anon = BTreeMap::new();
    for name in rules.iter().flat_map(|r| compile::lookups(r)) {
        let Some(spec) = sets.iter().find(|s| s.name == name && s.flags & NFT_SET_ANONYMOUS != 0) else { continue };
        let elements = sock.elements(fam, TABLE_NAME, &name)?;
        anon.insert(name, ListedAnon { spec: spec.clone(), elements });
    }
    Ok(anon)
}

/// A rehash that cannot go on for what the tables hold.
fn cannot(why: String) -> NftError {
    NftError::Io(std::io::Error::other(format!("cannot rehash: {why}")))
}
