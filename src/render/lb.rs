//! The `lb-*` chains: how a frontend's endpoint slot is picked (at random, by the client's
//! hash, a fixed slot, or a round-robin turn), a rule per part of the endpoint maps.

use super::builder::{LbKey, Pick};
use super::maps::{self, MapName};
use super::templates::{FamilyWords, LbChain, LbStep};
use super::{RenderError, hash, names, render_template};

/// Renders an `lb-*` chain: the slot of a frontend of one scope and kind picked as
/// `key.pick` says, a step for each part of the endpoint maps the slots spread over; a
/// round-robin turn's goes through the `turns` map instead.
pub(super) fn lb_chain(words: FamilyWords, key: LbKey) -> Result<String, RenderError> {
    let LbKey { scope, nodeport, proto, n, pick } = key;
    let (how, port) = match pick {
        Pick::Random => ("random", false),
        Pick::Turn(_) => ("turn", false),
        Pick::Slot => ("slot", false),
        Pick::Hash { port } => ("hash", port),
    };
    let map = |slot: usize| MapName::endpoints(scope, proto, nodeport, slot).to_string();
    let own = usize::from(maps::PARTS - 1);
    let steps = match pick {
        Pick::Turn(_) => Vec::new(),
        Pick::Slot => vec![LbStep { slot: n, rest: 1, last: true, map: map(n) }],
        _ => (0..n)
            .take(own + 1)
            .map(|k| LbStep { slot: k, rest: n - k, last: k + 1 == n || k == own, map: map(k) })
            .collect(),
    };
    let turns = match pick {
        Pick::Turn(shard) => MapName::Turns(shard).to_string(),
        _ => String::new(),
    };
    let seed = format!("{:#x}", hash::HASH_SEED);
    let offset = names::turn_base(scope, nodeport, proto);
    let t = LbChain { fam: words.fam, proto: proto.as_str(), n, nodeport, map: turns, how, port, seed, offset, steps };
    render_template(&t, "lb.nft")
}

#[cfg(test)]
mod tests;
