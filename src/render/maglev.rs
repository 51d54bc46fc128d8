//! The `mh` scheduler's lookup table: which endpoint each of a service port's slots sends
//! clients to, a function of the endpoint set alone (every node, in any order, after any
//! history, computes the same table), balanced, and moving few clients when an endpoint goes.
//!
//! Maglev's own fill (each endpoint walks its permutation of the slots in turns) needs about
//! a hundred slots per endpoint to keep what moves near 1/N; at the sizes a node can hold
//! for thousands of services (around a hundred slots a service) it moved a mean 9 % and up
//! to 26 % of the clients of the endpoints that stayed, when one of ten went. The table here
//! is filled by rendezvous hashing with a bounded load instead: every slot ranks the
//! endpoints by a hash of (slot, endpoint), and slots take their best-ranked endpoint in
//! order of rank, an endpoint taking no more than 1.2 times its share. An endpoint that goes
//! frees only its own slots, which fall to their next choices, except where a bound moves a
//! few more (a mean of about 1 %, at most about 5 %, at 101 slots and ten endpoints).

use super::hash::jhash;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;

/// Table sizes (primes, as Maglev's), the smallest that gives each endpoint at least
/// [`MIN_SLOTS`] serving. The first is what nearly every service uses: 101 slots cost a
/// node 101 elements a frontend (a thousand `mh` services fit the 30k-service benchmark's
/// budget) and keep every endpoint of ten within 25 % of its share.
pub const TABLE_SIZES: [u32; 4] = [101, 1009, 10007, 65521];

/// Fewest slots an endpoint should have: fewer make shares coarse (one slot in four is 25 %).
const MIN_SLOTS: usize = 4;

/// How far over its share an endpoint may be filled, in tenths: the bound that keeps the
/// table balanced; a looser one moves fewer clients when an endpoint goes, a tighter one
/// more.
const LOAD_BOUND_TENTHS: usize = 12;

/// The seed of the ranking hash (not the packet hash's: the two are unrelated).
const RANK_SEED: u32 = 0x6d68_7462;

/// The table size for `n` endpoints. A service whose endpoint count crosses a step (25, 252,
/// 2,501) gets a new table, and its clients move as they would under `sh`.
pub fn table_size(n: usize) -> u32 {
    let fits = |m: &&u32| **m as usize >= MIN_SLOTS * n;
    TABLE_SIZES.iter().find(fits).copied().unwrap_or(TABLE_SIZES[TABLE_SIZES.len() - 1])
}

/// What a slot ranks an endpoint by: its address, its port and the slot, in network order.
#[derive(Clone, Copy)]
struct RankKey {
    bytes: [u8; 22],
    len: usize,
}

impl RankKey {
    fn new(ip: IpAddr, port: u16) -> RankKey {
        let mut bytes = [0u8; 22];
        let len = match ip {
            IpAddr::V4(v4) => {
                bytes[..4].copy_from_slice(&v4.octets());
                4
            }
            IpAddr::V6(v6) => {
                bytes[..16].copy_from_slice(&v6.octets());
                16
            }
        };
        bytes[len..len + 2].copy_from_slice(&port.to_be_bytes());
        RankKey { bytes, len: len + 6 }
    }

    /// Slot `slot`'s rank of the endpoint.
    fn rank(mut self, slot: u32) -> u32 {
        self.bytes[self.len - 4..self.len].copy_from_slice(&slot.to_be_bytes());
        jhash(&self.bytes[..self.len], RANK_SEED)
    }
}

/// The table for `endpoints` (in any order, without repeats): for each of
/// `table_size(endpoints.len())` slots, the endpoint it sends clients to. Empty for none.
pub fn table(endpoints: &[(IpAddr, u16)]) -> Vec<(IpAddr, u16)> {
    let mut eps: Vec<(IpAddr, u16)> = endpoints.to_vec();
    // Sorted, so that ties in rank fall the same way on every node.
    eps.sort_unstable();
    eps.dedup();
    if eps.is_empty() {
        return Vec::new();
    }
    let size = table_size(eps.len());
    let keys: Vec<RankKey> = eps.iter().map(|(ip, port)| RankKey::new(*ip, *port)).collect();
    let bound = (size as usize * LOAD_BOUND_TENTHS).div_ceil(eps.len() * 10).max(1);
    let mut load = vec![0usize; eps.len()];
    let mut owner: Vec<Option<usize>> = vec![None; size as usize];
    // Each slot's best endpoint with room, best ranks first: the same as taking every
    // (slot, endpoint) pair in rank order, as an endpoint that is full stays full.
    let best = |slot: u32, load: &[usize]| {
        (0..eps.len()).filter(|e| load[*e] < bound).map(|e| (keys[e].rank(slot), Reverse(e))).max()
    };
    let mut heap: BinaryHeap<(u32, Reverse<usize>, u32)> = BinaryHeap::with_capacity(size as usize);
    for slot in 0..size {
        if let Some((r, e)) = best(slot, &load) {
            heap.push((r, e, slot));
        }
    }
    while let Some((_, Reverse(e), slot)) = heap.pop() {
        if owner[slot as usize].is_some() {
            continue;
        }
        if load[e] < bound {
            owner[slot as usize] = Some(e);
            load[e] += 1;
        } else if let Some((r, next)) = best(slot, &load) {
            heap.push((r, next, slot));
        }
    }
    // Every slot finds an endpoint: the bounds add up to more than the table.
    owner.into_iter().map(|o| eps[o.unwrap_or(0)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn endpoints(base: u32, n: u32) -> Vec<(IpAddr, u16)> {
        (0..n).map(|i| (IpAddr::from(std::net::Ipv4Addr::from(base + i * 7)), 8080)).collect()
    }

    fn shares(t: &[(IpAddr, u16)]) -> HashMap<(IpAddr, u16), usize> {
        let mut s = HashMap::new();
        t.iter().for_each(|e| *s.entry(*e).or_insert(0) += 1);
        s
    }

    #[test]
    fn the_table_depends_on_the_endpoints_alone() {
        let eps = endpoints(0x0a00_0001, 10);
        let mut reversed = eps.clone();
        reversed.reverse();
        let t = table(&eps);
        assert_eq!(t.len(), 101);
        assert_eq!(t, table(&reversed));
        assert_eq!(shares(&t).len(), 10, "every endpoint serves");
        assert!(table(&[]).is_empty());
    }

    #[test]
    fn tables_are_balanced_and_move_few_clients_when_an_endpoint_goes() {
        let (mut moved_sum, mut worst, mut trials) = (0.0, 0.0f64, 0);
        for base in (0..200u32).map(|i| 0x0a00_0000 + i * 4099) {
            let eps = endpoints(base, 10);
            let before = table(&eps);
            for share in shares(&before).values().chain(shares(&table(&eps[..5])).values()) {
                assert!(*share <= 26, "{share} slots");
            }
            let gone = eps[(base % 10) as usize];
            let rest: Vec<_> = eps.iter().copied().filter(|e| *e != gone).collect();
            let after = table(&rest);
            assert!(shares(&after).values().all(|s| *s <= 14), "bounded at 1.2 x 101 / 9");
            let stayed: Vec<usize> = (0..before.len()).filter(|i| before[*i] != gone).collect();
            let moved = stayed.iter().filter(|i| before[**i] != after[**i]).count() as f64 / stayed.len() as f64;
            moved_sum += moved;
            worst = worst.max(moved);
            trials += 1;
        }
        let mean = moved_sum / f64::from(trials);
        assert!(mean < 0.02 && worst <= 0.06, "moved: mean {mean:.3}, worst {worst:.3}");
    }

    #[test]
    fn sizes_grow_with_the_endpoints() {
        assert_eq!(table_size(1), 101);
        assert_eq!(table_size(25), 101);
        assert_eq!(table_size(26), 1009);
        assert_eq!(table_size(100_000), 65521);
        let big = endpoints(0x0a00_0000, 300);
        assert_eq!(shares(&table(&big)).len(), 300);
    }
}
