//! nf_tables batches: the messages of one transaction (what `compile` writes, map and set
//! elements straight from the desired state as `element` lays them out or copied from a
//! dump, deletions of foreign stateful objects and of a rehashed map), and which script line
//! each message came from; `netlink::send` sends them.

use super::element::{self, Laid};
use crate::model::Family;
use crate::netlink::NfFamily;
use crate::netlink::abi::{
    NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, NFNL_SUBSYS_NFTABLES, NFT_MSG_DELOBJ, NFT_MSG_DELSET, NFT_MSG_DELSETELEM,
    NFT_MSG_NEWSETELEM, NFTA_LIST_ELEM, NFTA_OBJ_HANDLE, NFTA_OBJ_TABLE, NFTA_OBJ_TYPE, NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_FLAGS, NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_KEY_END, NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_USERDATA, NFTA_SET_NAME, NFTA_SET_TABLE, NFTNL_UDATA_SET_ELEM_COMMENT,
    NLA_F_NESTED, NLM_F_ACK, NLM_F_CREATE,
};
use crate::netlink::attr::{put_be32, put_str, put_with};
use crate::netlink::data::DataRef;
use crate::netlink::elements::Element;
use crate::netlink::{msg, udata};
use crate::render::{Key, MapName, Value};
use std::io;

/// Bytes of elements per message: the element list is one attribute, whose length is 16
/// bits, and one element (key, data, chain name, comment) takes well under 1 KiB.
pub(crate) const ELEMENT_LIST_BUDGET: usize = 48 * 1024;

/// One batch: the messages of one nf_tables transaction.
pub struct Batch {
    buf: Vec<u8>,
    seq: u32,
    /// Messages written from a script's line, by sequence number: (sequence, line).
    lines: Vec<(u32, u32)>,
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

impl Batch {
    /// An empty batch (begin marker written).
    pub fn new() -> Batch {
        let mut b = Batch { buf: Vec::new(), seq: 0, lines: Vec::new() };
        b.message(NFNL_MSG_BATCH_BEGIN, 0, 0, |_| {});
        b
    }

    /// Appends one nf_tables message of type `kind` (`NLM_F_REQUEST` added to `flags`) for
    /// `family`, whose attributes `f` writes.
    pub(crate) fn message(&mut self, kind: u16, flags: u16, family: u8, f: impl FnOnce(&mut Vec<u8>)) {
        self.seq += 1;
        // Batch markers are nfnetlink's own messages; the rest belong to nf_tables.
        let batch_marker = kind == NFNL_MSG_BATCH_BEGIN || kind == NFNL_MSG_BATCH_END;
        let full = if batch_marker { kind } else { (NFNL_SUBSYS_NFTABLES << 8) | kind };
        let start = msg::start(&mut self.buf, full, flags, self.seq);
        // The resource id names the subsystem (which batch markers need).
        msg::nfgen(&mut self.buf, family, NFNL_SUBSYS_NFTABLES);
        f(&mut self.buf);
        msg::finish(&mut self.buf, start);
    }

    /// Adds (`add`) or deletes elements of `map` in `family`'s table `table`.
    pub fn elements<'e>(
        &mut self,
        family: Family,
        table: &str,
        map: &MapName,
        add: bool,
        elems: impl IntoIterator<Item = (&'e Key, &'e Value)>,
    ) {
        let fam = NfFamily::from(family) as u8;
        let (kind, flags) = if add { (NFT_MSG_NEWSETELEM, NLM_F_CREATE) } else { (NFT_MSG_DELSETELEM, 0) };
        let name = map.to_string();
        let mut scratch = Vec::new();
        let mut elems = elems.into_iter().peekable();
        while elems.peek().is_some() {
            self.message(kind, flags | NLM_F_ACK, fam, |b| {
                put_str(b, NFTA_SET_ELEM_LIST_TABLE, table);
                put_str(b, NFTA_SET_ELEM_LIST_SET, &name);
                put_with(b, NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| {
                    let start = b.len();
                    while b.len() - start < ELEMENT_LIST_BUDGET {
                        let Some((key, value)) = elems.next() else { break };
                        element::lay_out(key, add.then_some(value), &mut scratch, |e| {
                            put_with(b, NFTA_LIST_ELEM | NLA_F_NESTED, |b| element(b, e))
                        });
                    }
                });
            });
        }
    }

    /// Deletes the elements of set or map `set` whose keys are `keys`, as register bytes (as
    /// a dump lists them).
    pub fn delete_keys<'k>(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) {
        let fam = NfFamily::from(family) as u8;
        let mut keys = keys.into_iter().peekable();
        while keys.peek().is_some() {
            self.message(NFT_MSG_DELSETELEM, NLM_F_ACK, fam, |b| {
                put_str(b, NFTA_SET_ELEM_LIST_TABLE, table);
                put_str(b, NFTA_SET_ELEM_LIST_SET, set);
                put_with(b, NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| {
                    let start = b.len();
                    while b.len() - start < ELEMENT_LIST_BUDGET {
                        let Some(key) = keys.next() else { break };
                        put_with(b, NFTA_LIST_ELEM | NLA_F_NESTED, |b| DataRef::Value(key).put(b, NFTA_SET_ELEM_KEY));
                    }
                });
            });
        }
    }

    /// Adds `elems`, as a dump lists them, to set or map `set` of `family`'s table `table`:
    /// a copy of another map's elements (`rehash`).
    pub fn copied_elements(&mut self, family: Family, table: &str, set: &str, elems: &[Element]) {
        let fam = NfFamily::from(family) as u8;
        let mut elems = elems.iter().peekable();
        while elems.peek().is_some() {
            self.message(NFT_MSG_NEWSETELEM, NLM_F_CREATE | NLM_F_ACK, fam, |b| {
                put_str(b, NFTA_SET_ELEM_LIST_TABLE, table);
                put_str(b, NFTA_SET_ELEM_LIST_SET, set);
                put_with(b, NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| {
                    let start = b.len();
                    while b.len() - start < ELEMENT_LIST_BUDGET {
                        let Some(e) = elems.next() else { break };
                        let data = e.data.as_ref().map(|d| d.as_data_ref());
                        let (key, key_end, comment) = (&e.key[..], e.key_end.as_deref(), e.comment.as_deref());
                        let laid = Laid { key, key_end, flags: e.flags, data, comment };
                        put_with(b, NFTA_LIST_ELEM | NLA_F_NESTED, |b| element(b, &laid));
                    }
                });
            });
        }
    }

    /// Deletes set or map `set` of `family`'s table `table`, with its elements.
    pub fn delete_set(&mut self, family: Family, table: &str, set: &str) {
        let fam = NfFamily::from(family) as u8;
        self.message(NFT_MSG_DELSET, NLM_F_ACK, fam, |b| {
            put_str(b, NFTA_SET_TABLE, table);
            put_str(b, NFTA_SET_NAME, set);
        });
    }

    /// Deletes the stateful object of `NFT_OBJECT_*` type `kind` with handle `handle` from
    /// `family`'s table `table`.
    pub fn delete_object(&mut self, family: Family, table: &str, kind: u32, handle: u64) {
        let fam = NfFamily::from(family) as u8;
        self.message(NFT_MSG_DELOBJ, NLM_F_ACK, fam, |b| {
            put_str(b, NFTA_OBJ_TABLE, table);
            put_with(b, NFTA_OBJ_TYPE, |b| b.extend_from_slice(&kind.to_be_bytes()));
            put_with(b, NFTA_OBJ_HANDLE, |b| b.extend_from_slice(&handle.to_be_bytes()));
        });
    }

    /// The batch with its end marker.
    pub fn finish(self) -> Vec<u8> {
        self.finish_with_lines().0
    }

    /// Notes that the last message came from line `line` of the script being compiled.
    pub fn label(&mut self, line: usize) {
        self.lines.push((self.seq, line as u32));
    }

    /// The batch with its end marker, and the script line of each message that has one.
    pub fn finish_with_lines(mut self) -> (Vec<u8>, Lines) {
        self.message(NFNL_MSG_BATCH_END, 0, 0, |_| {});
        (self.buf, Lines(self.lines))
    }
}

/// Cuts finished `batch` into several, the messages in order, each with begin and end
/// markers of its own: a message `alone` picks (by its type and body) goes in a batch of its
/// own, the messages between two such together. Messages keep their sequence numbers, so the
/// batch's `Lines` still name the script line of a refused one.
pub fn split(batch: &[u8], alone: impl Fn(u16, &[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    let mut rest = batch;
    while rest.len() >= 16 {
        let len = (u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize).clamp(16, rest.len());
        messages.push(&rest[..len]);
        rest = &rest[len..];
    }
    let (Some(begin), Some(end)) = (messages.first().copied(), messages.last().copied()) else {
        return vec![batch.to_vec()];
    };
    let inner = &messages[1..messages.len().saturating_sub(1).max(1)];
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    for m in inner {
        let kind = u16::from_ne_bytes([m[4], m[5]]);
        if alone(kind, &m[16..]) {
            out.extend(open.take());
            out.push([begin, m].concat());
        } else {
            open.get_or_insert_with(|| begin.to_vec()).extend_from_slice(m);
        }
    }
    out.extend(open);
    for b in &mut out {
        b.extend_from_slice(end);
    }
    out
}

/// Which script line each message of a batch came from.
#[derive(Debug, Default, Clone)]
pub struct Lines(Vec<(u32, u32)>);

impl Lines {
    /// Turns the kernel's refusal of message `seq` into an error naming the line of `script`
    /// it came from (an element message has none); other errors pass.
    pub fn explain(&self, e: impl Into<super::NftError>, script: &str) -> super::NftError {
        let e = e.into();
        let super::NftError::Kernel { errno, seq } = e else { return e };
        let line = match self.0.binary_search_by_key(&seq, |(s, _)| *s) {
            Ok(i) => script.lines().nth(self.0[i].1.saturating_sub(1) as usize).map(|l| l.trim().to_string()),
            // The batch's begin marker stands for the transaction as a whole (its commit).
            Err(_) if seq <= 1 => Some("(the transaction as a whole)".into()),
            Err(_) => Some("(map or set elements, or the deletion of a foreign object)".into()),
        };
        super::NftError::Rejected { message: io::Error::from_raw_os_error(errno).to_string(), line }
    }
}

/// One element's attributes, a named set's or an anonymous one's: flags, key, a range's last
/// key, data, and the comment.
pub(crate) fn element(b: &mut Vec<u8>, e: &Laid) {
    if e.flags != 0 {
        put_be32(b, NFTA_SET_ELEM_FLAGS, e.flags);
    }
    DataRef::Value(e.key).put(b, NFTA_SET_ELEM_KEY);
    if let Some(end) = e.key_end {
        DataRef::Value(end).put(b, NFTA_SET_ELEM_KEY_END);
    }
    if let Some(data) = e.data {
        data.put(b, NFTA_SET_ELEM_DATA);
    }
    if let Some(text) = e.comment {
        put_with(b, NFTA_SET_ELEM_USERDATA, |b| udata::put_comment(b, NFTNL_UDATA_SET_ELEM_COMMENT, text));
    }
}

/// The elements a finished batch adds, and the messages they are in.
#[cfg(test)]
pub(crate) fn element_count(bytes: &[u8]) -> (usize, usize) {
    use crate::netlink::attr;
    let (mut rest, mut elements, mut messages) = (bytes, 0, 0);
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if kind == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM {
            messages += 1;
            let body = &rest[16..len];
            // A length field that wrapped would end the list early and read its elements as
            // attributes of the message: the strict reader refuses that or counts too few.
            let attrs = attr::all(&body[4..]).expect("every length field holds its attribute's whole size");
            let list = attr::get(&attrs, NFTA_SET_ELEM_LIST_ELEMENTS).expect("an element list");
            elements += attr::all(list).expect("elements").len();
        }
        rest = &rest[len..];
    }
    (elements, messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use std::sync::Arc;

    #[test]
    fn long_elements_are_split_so_no_element_list_outgrows_its_16_bit_length() {
        let chain: Arc<str> = Arc::from("c".repeat(250));
        let owner: Arc<str> = Arc::from("o".repeat(200));
        let entries: Vec<(Key, Value)> = (0..300u16)
            .map(|i| {
                let ip = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i));
                (Key::IpProtoPort(ip, Protocol::Tcp, 80), Value::Dispatch(chain.clone(), owner.clone()))
            })
            .collect();
        let mut batch = Batch::new();
        batch.elements(Family::V6, "t", &MapName::ServiceIps, true, entries.iter().map(|(k, v)| (k, v)));
        let bytes = batch.finish();
        assert!(bytes.len() > 2 * usize::from(u16::MAX), "the test needs elements worth several lists");
        let (elements, messages) = element_count(&bytes);
        assert_eq!(elements, 300);
        assert!(messages >= 3, "{messages} messages");
    }
}
