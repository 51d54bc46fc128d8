//! `nft`'s merge of adjacent header matches (`stmt_reduce` in nftables' `rule.c`): matches
//! of a header field against a single value, equal or all not equal, whose fields lie side by
//! side in one header, are compared in one load when together they fit a 32-bit register (or
//! one of them is already longer, and they fit a 16-byte one): `th sport 40000 th dport 80` is
//! one 4-byte load and one comparison. The merged match takes the place of the one at the
//! lower offset. A run of matches ends at a statement that is not a match, which merges it if
//! it holds two or more; a lone match stays in the run (as `nft` 1.0.6 keeps it), so it may
//! still merge with one after that statement.

use super::super::expr::{Base, Expr};
use super::Rule;

/// One merge candidate: a header field loaded at `at` and compared right after it.
#[derive(Debug, Clone)]
pub(super) struct Match {
    at: usize,
    base: Base,
    offset: u32,
    len: u32,
    dreg: u32,
    op: u32,
    data: Vec<u8>,
}

/// Bytes of a 32-bit register, which the kernel loads on its fast path.
const REG32: u32 = 4;
/// Bytes of a 16-byte register, the most one load fills.
const REG128: u32 = 16;

/// Whether `b` may be merged into `a` (`payload_can_merge` and `relational_ops_match`).
fn can_merge(a: &Match, b: &Match) -> bool {
    let total = a.len + b.len;
    a.base == b.base
        && a.offset + a.len == b.offset
        && a.op == b.op
        && total <= REG128
        && (total <= REG32 || a.len > REG32 || b.len > REG32)
}

impl Rule<'_> {
    /// Notes the match just compiled at `at`, a header field's load then its comparison with
    /// a value, as a candidate for merging.
    pub(super) fn note(&mut self, at: usize) {
        let exprs = &self.out.exprs;
        if let (Some(Expr::Payload { base, offset, len, dreg }), Some(Expr::Cmp { op, data, .. })) =
            (exprs.get(at), exprs.get(at + 1))
        {
            let (base, offset, len, dreg, op) = (*base, *offset, *len, *dreg, *op);
            self.run.push(Match { at, base, offset, len, dreg, op, data: data.clone() });
        }
    }

    /// A statement that is not a match: the run so far is merged if it holds two matches or
    /// more, and ends; a lone match stays (see the module's note).
    pub(super) fn boundary(&mut self) {
        if self.run.len() >= 2 {
            self.merge();
        }
    }

    /// Merges the run's adjacent matches, in the order of their fields in the headers, each
    /// into the match before it while they may merge; the run ends.
    pub(super) fn merge(&mut self) {
        let mut run = std::mem::take(&mut self.run);
        run.sort_by_key(|m| (m.base as u32, m.offset));
        let mut gone = Vec::new();
        let mut last = 0;
        for i in 1..run.len() {
            if !can_merge(&run[last], &run[i]) {
                last = i;
                continue;
            }
            let this = run[i].clone();
            gone.extend([this.at, this.at + 1]);
            let m = &mut run[last];
            m.len += this.len;
            m.data.extend_from_slice(&this.data);
            self.out.exprs[m.at] = Expr::Payload { base: m.base, offset: m.offset, len: m.len, dreg: m.dreg };
            self.out.exprs[m.at + 1] = Expr::Cmp { sreg: m.dreg, op: m.op, data: m.data.clone() };
        }
        gone.sort_unstable();
        for at in gone.into_iter().rev() {
            self.out.exprs.remove(at);
        }
    }
}
