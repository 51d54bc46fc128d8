//! nftables' user data records (type, one-byte length, value), which the kernel keeps unread
//! in a table's, set's or element's user data attribute and `nft` reads back: the one writer
//! (records, numbers, comments), and the readers of a comment and of every record.

use super::attr;

/// A record's type and length; a length over 255 bytes cannot be written.
fn header(b: &mut Vec<u8>, kind: u8, len: usize) {
    // Values are the templates' own (types, short comments): nft caps a comment at 128 bytes.
    debug_assert!(len <= usize::from(u8::MAX), "a user data record over 255 bytes");
    b.push(kind);
    b.push(len as u8);
}

/// Writes record `kind` holding `value`.
pub(crate) fn put(b: &mut Vec<u8>, kind: u8, value: &[u8]) {
    header(b, kind, value.len());
    b.extend_from_slice(value);
}

/// Writes record `kind` holding a 32-bit number in host order, as libnftnl does.
pub(crate) fn put_u32(b: &mut Vec<u8>, kind: u8, v: u32) {
    put(b, kind, &v.to_ne_bytes());
}

/// Writes record `kind` holding `text`, NUL-terminated: a comment. Nothing is allocated, as a
/// batch writes one per element.
pub(crate) fn put_comment(b: &mut Vec<u8>, kind: u8, text: &str) {
    header(b, kind, text.len() + 1);
    b.extend_from_slice(text.as_bytes());
    b.push(0);
}

/// The text of the first record `kind` of `udata` (a comment), lossily shown if not UTF-8;
/// `None` if there is none or a record overruns the rest.
pub(crate) fn comment(mut udata: &[u8], kind: u8) -> Option<String> {
    while let [k, len, rest @ ..] = udata {
        let text = rest.get(..usize::from(*len))?;
        if *k == kind {
            return Some(attr::lossy(text));
        }
        udata = &rest[usize::from(*len)..];
    }
    None
}

/// Every record of `udata`, as type and value; `None` if a record overruns the rest.
pub(crate) fn records(mut udata: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while let [k, len, rest @ ..] = udata {
        out.push((*k, rest.get(..usize::from(*len))?));
        udata = &rest[usize::from(*len)..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_type_length_value_and_a_comment_is_found_among_them() {
        let mut b = Vec::new();
        put_u32(&mut b, 1, 2);
        put_comment(&mut b, 7, "a/b");
        put(&mut b, 3, &[]);
        let mut want = vec![1, 4];
        want.extend_from_slice(&2u32.to_ne_bytes());
        want.extend_from_slice(&[7, 4, b'a', b'/', b'b', 0, 3, 0]);
        assert_eq!(b, want);
        assert_eq!(comment(&b, 7).as_deref(), Some("a/b"));
        assert_eq!(comment(&b, 9), None);
        assert_eq!(comment(&b[..8], 7), None, "a record cut short");
    }
}
