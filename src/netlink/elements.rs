//! Reading the elements of one set or map (a dump), or one element by its key: each
//! element's key, as register bytes, the last key of a range, flags, a map element's data, its
//! comment, and when it times out. The sweep of session-affinity sets reads the keys;
//! `--dry-run --diff` reads the rest; `trace` asks for a frontend's first endpoint slot.

use super::abi::{
    NFNL_SUBSYS_NFTABLES, NFT_MSG_GETSETELEM, NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_EXPIRATION, NFTA_SET_ELEM_FLAGS, NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_KEY_END,
    NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_USERDATA,
    NFTNL_UDATA_SET_ELEM_COMMENT, NLA_F_NESTED, NLM_F_ACK, NLM_F_DUMP,
};
use super::attr::{self, Malformed, all, be32, be64, pick};
use super::data::{Data, read_data};
use super::{NfFamily, Socket, msg, udata};
use std::io;

/// One element of a set or map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// The key, as the set's key register holds it.
    pub key: Vec<u8>,
    /// The last key a range covers, in a set of concatenated ranges.
    pub key_end: Option<Vec<u8>>,
    /// `NFT_SET_ELEM_*` flags (an interval set's range ends carry `NFT_SET_ELEM_INTERVAL_END`).
    pub flags: u32,
    /// A map element's data: a value or a verdict.
    pub data: Option<Data>,
    /// Its comment (user data), lossily shown if not UTF-8.
    pub comment: Option<String>,
    /// Milliseconds until it times out, for an element with a timeout.
    pub expires_ms: Option<u64>,
}

impl Socket {
    /// The elements of set or map `set` of `family`'s table `table` (empty if it is missing).
    pub fn elements(&mut self, family: NfFamily, table: &str, set: &str) -> io::Result<Vec<Element>> {
        let attrs = [(NFTA_SET_ELEM_LIST_TABLE, table), (NFTA_SET_ELEM_LIST_SET, set)];
        let replies = match self.request(NFT_MSG_GETSETELEM, family as u8, NLM_F_DUMP, &attrs) {
            Ok(replies) => replies,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for reply in &replies {
            let Some(list) = attr::top(reply, NFTA_SET_ELEM_LIST_ELEMENTS) else { continue };
            for (kind, elem) in all(list)? {
                if kind == NFTA_LIST_ELEM {
                    out.push(element(elem)?);
                }
            }
        }
        Ok(out)
    }

    /// The element of set or map `set` whose key is `key` (as the set's key register holds
    /// it), asked for by its key rather than found in a dump: `None` if it, the set or the
    /// table is missing. One round trip, however big the set.
    pub fn element(&mut self, family: NfFamily, table: &str, set: &str, key: &[u8]) -> io::Result<Option<Element>> {
        self.seq = self.seq.wrapping_add(1);
        let mut buf = Vec::with_capacity(128);
        let start = msg::start(&mut buf, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSETELEM, NLM_F_ACK, self.seq);
        msg::nfgen(&mut buf, family as u8, 0);
        attr::put_str(&mut buf, NFTA_SET_ELEM_LIST_TABLE, table);
        attr::put_str(&mut buf, NFTA_SET_ELEM_LIST_SET, set);
        attr::put_with(&mut buf, NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| {
            attr::put_with(b, NFTA_LIST_ELEM | NLA_F_NESTED, |b| {
                attr::put_with(b, NFTA_SET_ELEM_KEY | NLA_F_NESTED, |b| attr::put(b, NFTA_DATA_VALUE, key));
            });
        });
        msg::finish(&mut buf, start);
        self.send(&buf)?;
        let replies = match self.collect_replies(self.seq) {
            Ok(replies) => replies,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        for reply in &replies {
            let Some(list) = attr::top(reply, NFTA_SET_ELEM_LIST_ELEMENTS) else { continue };
            if let Some((_, elem)) = all(list)?.into_iter().find(|(kind, _)| *kind == NFTA_LIST_ELEM) {
                return element(elem).map(Some);
            }
        }
        Ok(None)
    }
}

/// One `NFTA_LIST_ELEM`: its key (required), range end, flags, data, comment and timeout.
fn element(elem: &[u8]) -> io::Result<Element> {
    let [key, key_end, flags, data, comment, expires] = pick(
        elem,
        [
            NFTA_SET_ELEM_KEY,
            NFTA_SET_ELEM_KEY_END,
            NFTA_SET_ELEM_FLAGS,
            NFTA_SET_ELEM_DATA,
            NFTA_SET_ELEM_USERDATA,
            NFTA_SET_ELEM_EXPIRATION,
        ],
    )?;
    let key = value(key.ok_or(Malformed("no valid element key"))?)?.ok_or(Malformed("no valid key value"))?;
    let key_end = key_end.map(value).transpose()?.flatten();
    let flags = match flags {
        Some(f) => be32(f).ok_or(Malformed("no valid element flags"))?,
        None => 0,
    };
    let data = data.map(read_data).transpose()?;
    let comment = comment.and_then(|u| udata::comment(u, NFTNL_UDATA_SET_ELEM_COMMENT));
    let expires_ms = expires.and_then(be64);
    Ok(Element { key, key_end, flags, data, comment, expires_ms })
}

/// The bytes of a nested `NFTA_DATA_VALUE`.
fn value(wrapped: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let [v] = pick(wrapped, [NFTA_DATA_VALUE])?;
    Ok(v.map(<[u8]>::to_vec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::abi::{NFTA_SET_ELEM_DATA, NLA_F_NESTED};
    use crate::netlink::attr::put;

    #[test]
    fn reads_keys_and_data_and_refuses_overlong_attributes() {
        let (mut key, mut data, mut elem) = (Vec::new(), Vec::new(), Vec::new());
        put(&mut key, NFTA_DATA_VALUE, &[10, 0, 0, 1]);
        put(&mut data, NFTA_DATA_VALUE, &[10, 1, 0, 7]);
        put(&mut elem, NFTA_SET_ELEM_KEY | NLA_F_NESTED, &key);
        put(&mut elem, NFTA_SET_ELEM_DATA | NLA_F_NESTED, &data);
        put(&mut elem, NFTA_SET_ELEM_EXPIRATION, &9000u64.to_be_bytes());
        put(&mut elem, NFTA_SET_ELEM_USERDATA, &[0, 4, b'a', b'/', b'b', 0]);
        let found = element(&elem).expect("a well-formed element");
        let want = Element {
            key: vec![10, 0, 0, 1],
            key_end: None,
            flags: 0,
            data: Some(Data::Value(vec![10, 1, 0, 7])),
            comment: Some("a/b".into()),
            expires_ms: Some(9000),
        };
        assert_eq!(found, want);

        let mut keyless = Vec::new();
        put(&mut keyless, NFTA_SET_ELEM_DATA | NLA_F_NESTED, &data);
        assert!(element(&keyless).is_err(), "an element needs a key");
        let mut overlong = elem.clone();
        overlong[0] = 200;
        assert!(element(&overlong).is_err(), "a length past the message is malformed");
    }
}
