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
