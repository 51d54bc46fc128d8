//! The machine's registers: where each lies in the register space, reads and writes as the
//! kernel's expressions do them, and random values narrowed as paths fork.

use super::{REG_BYTES, Run};

/// A random value in the registers: where, and the values it may still take (the registers
/// hold the first).
#[derive(Debug, Clone)]
pub(super) struct Random {
    pub(super) at: usize,
    pub(super) values: Vec<u32>,
}

/// A register's first byte.
pub(super) fn offset(reg: u32) -> Result<usize, String> {
    match reg {
        1..=4 => Ok((reg as usize - 1) * 16),
        8..=23 => Ok((reg as usize - 8) * 4),
        _ => Err(format!("register {reg}")),
    }
}

/// The bytes `len` long at register `reg`.
pub(super) fn span(reg: u32, len: usize) -> Result<std::ops::Range<usize>, String> {
    let at = offset(reg)?;
    if at + len > REG_BYTES {
        return Err(format!("{len} bytes at register {reg}"));
    }
    Ok(at..at + len)
}

pub(super) fn read(r: &Run, reg: u32, len: usize) -> Result<Vec<u8>, String> {
    Ok(r.regs[span(reg, len)?].to_vec())
}

/// Writes `bytes` at `reg`, zeroing the rest of the last 32-bit word as the kernel's loads
/// do; a random value there is gone.
pub(super) fn write(r: &mut Run, reg: u32, bytes: &[u8]) -> Result<(), String> {
    let s = span(reg, bytes.len().next_multiple_of(4))?;
    r.random.retain(|x| x.at + 4 <= s.start || x.at >= s.end);
    r.regs[s.clone()].fill(0);
    r.regs[s.start..s.start + bytes.len()].copy_from_slice(bytes);
    Ok(())
}

/// Forks `r` once per value of the first random value in `s` that may still take several
/// (`None` when `s` holds none: the registers are exact).
pub(super) fn settle(r: &Run, s: std::ops::Range<usize>) -> Option<Vec<Run>> {
    let i = r.random.iter().position(|x| x.at < s.end && x.at + 4 > s.start && x.values.len() > 1)?;
    let values = &r.random[i].values;
    Some(values.iter().map(|v| narrow(r, i, vec![*v], values.len())).collect())
}

/// `r` with random value `i` narrowed to `keep` of `of` values.
pub(super) fn narrow(r: &Run, i: usize, keep: Vec<u32>, of: usize) -> Run {
    let mut n = r.clone();
    n.chance *= keep.len() as f64 / of as f64;
    let at = n.random[i].at;
    n.regs[at..at + 4].copy_from_slice(&keep[0].to_ne_bytes());
    n.random[i].values = keep;
    n
}
