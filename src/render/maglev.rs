//! The `mh` scheduler's lookup table: which endpoint each of a service port's slots sends
//! clients to, a function of the endpoint set alone (every node, in any order, after any
//! history, computes the same table), moving few clients when an endpoint goes.
//!
//! Maglev's own fill (the endpoints take turns, each claiming the next free slot of its
//! permutation of them) keeps shares even but needs about a hundred slots per endpoint to
//! keep what moves near 1/N: at the size a node can hold for thousands of services (101
//! slots) it moved a mean 9 % and up to 26 % of the clients of the endpoints that stayed,
//! when one of ten went. Small tables are filled by rendezvous hashing with a bounded load
//! instead: every slot ranks the endpoints by a hash of (slot, endpoint), and slots take
//! their best-ranked endpoint in order of rank, an endpoint taking at most 1.2 times its
//! share (rounded up to whole slots). An endpoint that goes frees only its own slots, which
//! fall to their next choices, except where the bound moves a few more: a mean of 1.1 % and
//! at most 4.5 % over 500 sets of ten endpoints on 101 slots. The price is balance below the
//! bound: an endpoint's share of slots is only as even as chance makes it, so every
//! endpoint first claims its own best-ranked slots up to a floor (a tenth of its share, at
//! least one), and tables give each endpoint ten slots: with four, one set in sixteen of
//! twenty endpoints on 101 slots left an endpoint with none. Large tables (more than 43
//! endpoints), where ranking every slot against every endpoint would cost seconds, are
//! filled as Maglev fills them.

use super::hash::jhash;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;

/// Table sizes (primes, as Maglev's), each about twice the last; a service uses the smallest
/// that gives each endpoint at least [`MIN_SLOTS`]. The first is what most services use:
/// 101 slots cost a node 101 elements a frontend.
pub const TABLE_SIZES: [u32; 10] = [101, 211, 431, 863, 1733, 3467, 6947, 13901, 27803, 55609];

/// The largest table filled by ranking; larger ones are filled as Maglev fills them.
const RANKED_UP_TO: u32 = 431;

/// Fewest slots an endpoint should have on average: with fewer, chance leaves some endpoints
/// with next to none, and the bound's whole slots move more clients when one goes.
const MIN_SLOTS: usize = 10;

/// The floor every endpoint claims first, in tenths of its share (at least one slot), so
/// that none is left out by chance.
const FLOOR_TENTHS: usize = 1;

/// How far over its share an endpoint may be filled, in tenths: the bound that keeps the
/// table balanced; a looser one moves fewer clients when an endpoint goes, a tighter one
/// more.
const LOAD_BOUND_TENTHS: usize = 12;

/// The seed of the ranking hash (not the packet hash's: the two are unrelated), and of
/// Maglev's two permutation hashes after it.
const RANK_SEED: u32 = 0x6d68_7462;

/// The table size for `n` endpoints. A service whose endpoint count crosses a step (10, 21,
/// 43, …) gets a new table, and its clients move as they would under `sh`.
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

/// The table for `endpoints` (in any order; repeats count once): for each of
/// `table_size(n)` slots, the endpoint it sends clients to. Empty for none.
pub fn table(endpoints: &[(IpAddr, u16)]) -> Vec<(IpAddr, u16)> {
    let mut eps: Vec<(IpAddr, u16)> = endpoints.to_vec();
    // Sorted, so that ties fall the same way on every node.
    eps.sort_unstable();
    eps.dedup();
    if eps.is_empty() {
        return Vec::new();
    }
    let size = table_size(eps.len());
    let keys: Vec<RankKey> = eps.iter().map(|(ip, port)| RankKey::new(*ip, *port)).collect();
    let owners = if size <= RANKED_UP_TO { ranked(&keys, size) } else { maglev(&keys, size) };
    owners.into_iter().map(|e| eps[e]).collect()
}

/// Rendezvous with a bounded load, after every endpoint's floor: each slot's endpoint, by
/// index into `keys`.
fn ranked(keys: &[RankKey], size: u32) -> Vec<usize> {
    let bound = (size as usize * LOAD_BOUND_TENTHS).div_ceil(keys.len() * 10).max(1);
    let mut load = vec![0usize; keys.len()];
    let mut owner: Vec<Option<usize>> = vec![None; size as usize];
    floor(keys, size, &mut owner, &mut load);
    // Each slot's best endpoint with room, best ranks first: the same as taking every
    // (slot, endpoint) pair in rank order, as an endpoint that is full stays full.
    let best = |slot: u32, load: &[usize]| {
        (0..keys.len()).filter(|e| load[*e] < bound).map(|e| (keys[e].rank(slot), Reverse(e))).max()
    };
    let mut heap: BinaryHeap<(u32, Reverse<usize>, u32)> = BinaryHeap::with_capacity(size as usize);
    for slot in (0..size).filter(|s| owner[*s as usize].is_none()) {
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
    owner.into_iter().map(|o| o.unwrap_or(0)).collect()
}

/// Every endpoint's floor: its own best-ranked slots, a slot two endpoints want going to the
/// one that ranks it higher (the other goes on down its list). An endpoint that goes frees
/// its floor, and one it had beaten to a slot takes that slot back.
fn floor(keys: &[RankKey], size: u32, owner: &mut [Option<usize>], load: &mut [usize]) {
    let floor = (size as usize * FLOOR_TENTHS / (keys.len() * 10)).max(1);
    // Each endpoint's slots, best-ranked last (popped first).
    let mut wants: Vec<Vec<(u32, u32)>> = keys
        .iter()
        .map(|k| {
            let mut v: Vec<(u32, u32)> = (0..size).map(|s| (k.rank(s), s)).collect();
            v.sort_unstable();
            v
        })
        .collect();
    let mut heap: BinaryHeap<(u32, Reverse<usize>, u32)> = BinaryHeap::with_capacity(keys.len());
    for (e, w) in wants.iter_mut().enumerate() {
        if let Some((r, s)) = w.pop() {
            heap.push((r, Reverse(e), s));
        }
    }
    while let Some((_, Reverse(e), slot)) = heap.pop() {
        if owner[slot as usize].is_none() {
            owner[slot as usize] = Some(e);
            load[e] += 1;
        }
        if load[e] < floor {
            let next = std::iter::from_fn(|| wants[e].pop()).find(|(_, s)| owner[*s as usize].is_none());
            if let Some((r, s)) = next {
                heap.push((r, Reverse(e), s));
            }
        }
    }
}

/// Maglev's fill: each endpoint's permutation of the slots (an offset and a step from two
/// hashes of it; `size` is prime, so every step visits every slot), the endpoints taking
/// turns to claim their next free slot until none is left.
fn maglev(keys: &[RankKey], size: u32) -> Vec<usize> {
    let perm: Vec<(u32, u32)> =
        keys.iter().map(|k| (k.rank(u32::MAX) % size, k.rank(u32::MAX - 1) % (size - 1) + 1)).collect();
    let mut next = vec![0u32; keys.len()];
    let mut owner: Vec<Option<usize>> = vec![None; size as usize];
    let mut filled = 0;
    while filled < size {
        for (e, (offset, skip)) in perm.iter().enumerate() {
            let mut slot = ((u64::from(*offset) + u64::from(next[e]) * u64::from(*skip)) % u64::from(size)) as usize;
            while owner[slot].is_some() {
                next[e] += 1;
                slot = ((u64::from(*offset) + u64::from(next[e]) * u64::from(*skip)) % u64::from(size)) as usize;
            }
            owner[slot] = Some(e);
            next[e] += 1;
            filled += 1;
            if filled == size {
                break;
            }
        }
    }
    owner.into_iter().map(|o| o.unwrap_or(0)).collect()
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
            // The bound, whole slots: ceil(1.2 x 101 / 10) and ceil(1.2 x 101 / 5).
            assert!(shares(&before).values().all(|s| *s <= 13), "{:?}", shares(&before));
            assert!(shares(&table(&eps[..5])).values().all(|s| *s <= 25));
            assert_eq!(shares(&before).len(), 10, "every endpoint serves");
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
    fn every_endpoint_serves_at_every_count() {
        for n in 1..=43u32 {
            for base in (0..20u32).map(|i| 0x0a00_0000 + i * 4099) {
                let t = table(&endpoints(base, n));
                let s = shares(&t);
                assert_eq!(s.len(), n as usize, "{n} endpoints from {base:#x}: {s:?}");
                let bound = (t.len() * 12).div_ceil(n as usize * 10);
                assert!(s.values().all(|k| *k <= bound), "{n} endpoints from {base:#x}: over {bound}: {s:?}");
            }
        }
    }

    #[test]
    fn the_floor_keeps_every_endpoint_in_a_tight_table() {
        // Twenty endpoints on 101 slots (five each): by chance alone, one set in sixteen left
        // an endpoint without a slot, as tables of four slots an endpoint did.
        for base in (0..200u32).map(|i| 0x0a00_0000 + i * 4099) {
            let mut eps = endpoints(base, 20);
            eps.sort_unstable();
            let keys: Vec<RankKey> = eps.iter().map(|(ip, port)| RankKey::new(*ip, *port)).collect();
            let owners = ranked(&keys, 101);
            assert!((0..20).all(|e| owners.contains(&e)), "from {base:#x}: {owners:?}");
        }
    }

    #[test]
    fn sizes_grow_with_the_endpoints() {
        assert_eq!(table_size(1), 101);
        assert_eq!(table_size(10), 101);
        assert_eq!(table_size(11), 211);
        assert_eq!(table_size(43), 431);
        assert_eq!(table_size(44), 863);
        assert_eq!(table_size(100_000), 55609);
        // Past the ranked sizes, Maglev's fill: every endpoint serves, shares even within a slot
        // or two, and fast (ranking 5,000 endpoints on 27,803 slots would take seconds).
        for n in [300, 5000] {
            let big = endpoints(0x0a00_0000, n);
            let started = std::time::Instant::now();
            let t = table(&big);
            let s = shares(&t);
            assert_eq!((t.len() as u32, s.len()), (table_size(n as usize), n as usize));
            let (lo, hi) = (s.values().min().copied().unwrap_or(0), s.values().max().copied().unwrap_or(0));
            assert!(hi - lo <= 2, "{n} endpoints: shares from {lo} to {hi}");
            assert!(started.elapsed() < std::time::Duration::from_secs(2), "{n}: {:?}", started.elapsed());
        }
    }
}
