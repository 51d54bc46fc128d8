//! Writing netlink attributes: the one writer every family's messages use (a closure for
//! nested and composed payloads, thin wrappers for bytes, strings and big-endian numbers).

/// Writes an attribute of type `kind` whose payload `f` appends, padded to 4 bytes; nested
/// attributes set `NLA_F_NESTED` in `kind`.
pub(crate) fn put_with(buf: &mut Vec<u8>, kind: u16, f: impl FnOnce(&mut Vec<u8>)) {
    let start = buf.len();
    buf.extend_from_slice(&[0, 0, 0, 0]);
    f(buf);
    // Callers keep attributes short (element lists are split by `wire::ELEMENT_LIST_BUDGET`).
    debug_assert!(buf.len() - start <= usize::from(u16::MAX), "a netlink attribute over 64 KiB");
    let len = (buf.len() - start) as u16;
    buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    buf[start + 2..start + 4].copy_from_slice(&kind.to_ne_bytes());
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// Writes a NUL-terminated string attribute.
pub(crate) fn put_str(buf: &mut Vec<u8>, kind: u16, s: &str) {
    put_with(buf, kind, |b| {
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    });
}

/// Writes an attribute holding `payload`.
pub(crate) fn put(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    put_with(buf, kind, |b| b.extend_from_slice(payload));
}

/// Writes a big-endian 32-bit attribute (nf_tables' numbers are in network order).
pub(crate) fn put_be32(buf: &mut Vec<u8>, kind: u16, v: u32) {
    put(buf, kind, &v.to_be_bytes());
}

/// Writes a big-endian 64-bit attribute.
pub(crate) fn put_be64(buf: &mut Vec<u8>, kind: u16, v: u64) {
    put(buf, kind, &v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attribute_is_its_length_type_payload_and_padding() {
        let mut buf = Vec::new();
        put_str(&mut buf, 3, "ab");
        put_be32(&mut buf, 0x8001, 7);
        put_with(&mut buf, 5, |b| put(b, 1, &[9]));
        #[rustfmt::skip]
        let want = [
            7, 0, 3, 0, b'a', b'b', 0, 0,
            8, 0, 1, 0x80, 0, 0, 0, 7,
            12, 0, 5, 0, 5, 0, 1, 0, 9, 0, 0, 0,
        ];
        assert_eq!(buf, want);
    }
}
