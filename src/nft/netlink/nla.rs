//! Reading nested netlink attributes out of a reply, every length checked: the one parser that
//! the element and rule listings share.

use super::abi::NLA_TYPE_MASK;
use super::dump::malformed;
use std::io;

/// The attributes in `data`, each `(type, payload)` with the type's flags cleared; an error if
/// one overruns it or a header is cut short.
pub(super) fn nested(mut data: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let header = data.get(..4).ok_or_else(|| malformed("attribute header"))?;
        let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        let kind = u16::from_ne_bytes([header[2], header[3]]) & NLA_TYPE_MASK;
        // A length under the header's own makes the range empty-backwards: `get` refuses it.
        let payload = data.get(4..len).ok_or_else(|| malformed("attribute length"))?;
        out.push((kind, payload));
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(out)
}

/// The payload of the first attribute of type `t`.
pub(super) fn get<'a>(attrs: &[(u16, &'a [u8])], t: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(kind, _)| *kind == t).map(|(_, payload)| *payload)
}
