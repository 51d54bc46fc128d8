//! Netlink attributes: the one writer every family's messages use (a closure for nested and
//! composed payloads, thin wrappers for bytes, strings and big-endian numbers) and the one
//! reader (a strict iterator, with lookups and typed getters on top).

use super::abi::NLA_TYPE_MASK;
use std::io;

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

/// Why a reply's attributes, or what they encode (a listed object's handle, a verdict, a
/// conntrack entry's tuples), could not be read: the one error of a malformed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl From<Malformed> for io::Error {
    fn from(m: Malformed) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("a malformed netlink reply: {}", m.0))
    }
}

/// The attributes of a payload, each `(type, payload)` with the type's flags cleared, every
/// length checked; a cut header or an overrun ends the walk with an error. Allocation-free, so
/// a streamed dump reads entries without collecting them.
pub(crate) struct Iter<'a>(&'a [u8]);

impl<'a> Iterator for Iter<'a> {
    type Item = Result<(u16, &'a [u8]), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.0;
        if rest.is_empty() {
            return None;
        }
        let len = match rest {
            [a, b, _, _, ..] => usize::from(u16::from_ne_bytes([*a, *b])),
            _ => 0,
        };
        if len < 4 || len > rest.len() {
            self.0 = &[];
            return Some(Err(Malformed("an attribute overruns its message")));
        }
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        self.0 = &rest[len.next_multiple_of(4).min(rest.len())..];
        Some(Ok((kind, &rest[4..len])))
    }
}

/// The attributes of `data`, read one at a time.
pub(crate) fn iter(data: &[u8]) -> Iter<'_> {
    Iter(data)
}

/// Every attribute of `data`; an error if one is malformed.
pub(crate) fn all(data: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    Ok(iter(data).collect::<Result<_, _>>()?)
}

/// The payload of the first attribute of type `t` in `data`, looking no further than the
/// first malformed one.
pub(crate) fn find(data: &[u8], t: u16) -> Option<&[u8]> {
    iter(data).map_while(Result::ok).find(|(kind, _)| *kind == t).map(|(_, payload)| payload)
}

/// The payload of top-level attribute `t` of an nfnetlink message body (after its 4-byte
/// nfgenmsg), as [`find`] finds it.
pub(crate) fn top(body: &[u8], t: u16) -> Option<&[u8]> {
    find(body.get(4..)?, t)
}

/// The first payload of each of `types` in `data`, in one walk and without collecting the
/// attributes (a dump reads hundreds of thousands of elements this way); an error if one is
/// malformed.
pub(crate) fn pick<const N: usize>(data: &[u8], types: [u16; N]) -> io::Result<[Option<&[u8]>; N]> {
    let mut out = [None; N];
    for a in iter(data) {
        let (kind, payload) = a?;
        if let Some(i) = types.iter().position(|t| *t == kind) {
            out[i].get_or_insert(payload);
        }
    }
    Ok(out)
}

/// The payload of the first attribute of type `t` among `attrs`.
pub(crate) fn get<'a>(attrs: &[(u16, &'a [u8])], t: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(kind, _)| *kind == t).map(|(_, payload)| *payload)
}

/// A big-endian 32-bit payload; `None` unless it is exactly 4 bytes.
pub(crate) fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// A big-endian 64-bit payload; `None` unless it is exactly 8 bytes.
pub(crate) fn be64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

/// An address payload (or key field) of 4 or 16 bytes; `None` for any other length.
pub(crate) fn address(b: &[u8]) -> Option<std::net::IpAddr> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b).ok().map(std::net::IpAddr::from),
        16 => <[u8; 16]>::try_from(b).ok().map(std::net::IpAddr::from),
        _ => None,
    }
}

/// A NUL-terminated string payload as text; `None` if it is not UTF-8.
pub(crate) fn utf8(s: &[u8]) -> Option<String> {
    String::from_utf8(s.strip_suffix(&[0]).unwrap_or(s).to_vec()).ok()
}

/// A NUL-terminated string payload as text, bytes that are not UTF-8 replaced.
pub(crate) fn lossy(s: &[u8]) -> String {
    String::from_utf8_lossy(s.strip_suffix(&[0]).unwrap_or(s)).into_owned()
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

    #[test]
    fn reading_checks_every_length_and_clears_the_flags() {
        let mut buf = Vec::new();
        put_str(&mut buf, 3, "ab");
        put_be32(&mut buf, 0x8001, 7);
        assert_eq!(all(&buf).unwrap(), [(3, &b"ab\0"[..]), (1, &[0, 0, 0, 7][..])]);
        assert_eq!(find(&buf, 1).and_then(be32), Some(7));
        assert_eq!(find(&buf, 3).and_then(utf8).as_deref(), Some("ab"));
        for cut in [2, 6, buf.len() - 1] {
            assert!(all(&buf[..cut]).is_err(), "attributes cut at {cut} bytes read");
        }
        // A lookup stops at the first malformed attribute, a strict walk fails there.
        assert_eq!(find(&buf[..buf.len() - 1], 1), None);
        assert_eq!(find(&buf[..buf.len() - 1], 3), Some(&b"ab\0"[..]));
        assert_eq!((be32(&[0, 0, 7]), be64(&[0; 7]), lossy(b"a\xff\0")), (None, None, "a\u{fffd}".to_string()));
    }

    #[test]
    fn picking_takes_the_first_of_each_type_and_checks_every_length() {
        let mut buf = Vec::new();
        put_str(&mut buf, 3, "ab");
        put_be32(&mut buf, 1, 7);
        put_be32(&mut buf, 3, 8);
        let [one, two, three] = pick(&buf, [1, 2, 3]).unwrap();
        assert_eq!((one.and_then(be32), two, three), (Some(7), None, Some(&b"ab\0"[..])));
        assert!(pick(&buf[..buf.len() - 1], [3]).is_err(), "a cut attribute is an error even past the one asked for");
    }
}
