//! The kernel's `jhash` (Bob Jenkins' lookup3, as `include/linux/jhash.h` writes it) and how
//! `nft_hash` scales it to a modulus, so the proxy, `explain` and the tests can say which slot
//! a client's packets take without asking the kernel.

/// The seed every hashing rule carries (`jhash … seed`): fixed, so that every node and every
/// restart sends the same client to the same slot. Without one the kernel picks a random
/// seed per rule.
pub const HASH_SEED: u32 = 0x6b6e_7078;

/// lookup3's starting value (`JHASH_INITVAL`).
const INITVAL: u32 = 0xdead_beef;

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// Little-endian word of up to four bytes, zero-padded: how lookup3 reads both whole words
/// (on the little-endian hosts this runs on) and the tail.
fn word(bytes: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w[..bytes.len()].copy_from_slice(bytes);
    u32::from_le_bytes(w)
}

/// The kernel's `jhash(key, length, initval)`.
pub fn jhash(key: &[u8], seed: u32) -> u32 {
    let init = INITVAL.wrapping_add(key.len() as u32).wrapping_add(seed);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut rest = key;
    while rest.len() > 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    if rest.is_empty() {
        return c;
    }
    let part = |from: usize| rest.get(from..rest.len().min(from + 4)).map_or(0, word);
    a = a.wrapping_add(part(0));
    b = b.wrapping_add(part(4));
    c = c.wrapping_add(part(8));
    finish(&mut a, &mut b, &mut c);
    c
}

/// `reciprocal_scale`: a 32-bit hash to `0..modulus`, as `nft_hash` does (not `h % modulus`).
pub fn scale(hash: u32, modulus: u32) -> u32 {
    ((u64::from(hash) * u64::from(modulus)) >> 32) as u32
}

/// The slot `jhash <key> mod <modulus> seed HASH_SEED` gives a packet whose hashed fields
/// hold `key` as the kernel's registers do (each field padded with zeros to 4 bytes).
pub fn slot(key: &[u8], modulus: u32) -> u32 {
    scale(jhash(key, HASH_SEED), modulus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup3_matches_its_published_values() {
        // Bob Jenkins' lookup3.c driver: hashlittle("", 0) and the "Four score…" strings.
        assert_eq!(jhash(b"", 0), INITVAL);
        assert_eq!(jhash(b"Four score and seven years ago", 0), 0x1777_0551);
        assert_eq!(jhash(b"Four score and seven years ago", 1), 0xcd62_8161);
    }

    #[test]
    fn scaling_divides_the_hash_range_evenly() {
        assert_eq!(scale(0, 7), 0);
        assert_eq!(scale(u32::MAX, 7), 6);
        assert_eq!(scale(1 << 31, 10), 5);
    }
}
