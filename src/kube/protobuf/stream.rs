//! A protobuf list body read as it arrives: the envelope and the list around the items are
//! walked field by field off the stream, and each item is handed on as soon as its bytes are
//! in, so decoding a first listing of 100,000 objects runs while the rest of it still comes
//! and the body is never held whole (nor copied out of its envelope and list).

use super::ProtoError;
use super::meta;
use prost::Message;
use std::io::{ErrorKind, Read};

/// The envelope's fields: what it holds (`runtime.Unknown.typeMeta`) and the list's message
/// (`runtime.Unknown.raw`).
const ENVELOPE_TYPE_META: u64 = 1;
const ENVELOPE_RAW: u64 = 2;

/// The most of an envelope's type or of a Status read: both are a few dozen bytes.
const SMALL_MESSAGE: u64 = 64 << 10;
/// The list's fields: its metadata and each item.
const LIST_METADATA: u64 = 1;
const LIST_ITEMS: u64 = 2;

/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// Why a streamed list could not be read: the stream failed, or its bytes are not a list.
#[derive(Debug)]
pub(crate) enum StreamError {
    /// Reading failed (a timeout, a broken connection, a body over its bound).
    Io(std::io::Error),
    /// The bytes are not an enveloped list.
    Malformed(ProtoError),
    /// The envelope holds another kind than the list asked for (a `Status`, …): that kind,
    /// and its message when it is small enough to read.
    NotTheList { kind: String, raw: Vec<u8> },
}

impl From<std::io::Error> for StreamError {
    fn from(e: std::io::Error) -> StreamError {
        StreamError::Io(e)
    }
}

fn malformed(what: &str) -> StreamError {
    StreamError::Malformed(ProtoError::Malformed(what.to_string()))
}

/// A list's metadata, read with its items.
#[derive(Debug, Default)]
pub(crate) struct ListTail {
    /// The list's resourceVersion.
    pub resource_version: String,
    /// The continue token; empty on the last page.
    pub continue_: String,
}

/// Reads an enveloped list of kind `want` (`ServiceList`) off `reader`, calling `item` with
/// each item's message in order. An envelope naming another kind is not read as a list: a
/// `Status` answered with 200 would read as an empty one. An envelope naming no kind is taken
/// as `want`, as client-go's decoder defaults it.
pub(crate) fn read_list(
    reader: &mut impl Read,
    want: &str,
    mut item: impl FnMut(&[u8]),
) -> Result<ListTail, StreamError> {
    let mut magic = [0u8; 4];
    reader.read_exact(&mut magic).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => StreamError::Malformed(ProtoError::NoMagic),
        _ => StreamError::Io(e),
    })?;
    if magic != super::MAGIC {
        return Err(StreamError::Malformed(ProtoError::NoMagic));
    }
    let mut tail = ListTail::default();
    let mut buf = Vec::new();
    let mut kind = String::new();
    // The envelope runs to the end of the body.
    while let Some((field, wire)) = key(reader, None)? {
        match (field, wire) {
            (ENVELOPE_TYPE_META, LEN) => {
                small(reader, &mut buf)?;
                let type_meta = meta::TypeMeta::decode(buf.as_slice()).map_err(|e| StreamError::Malformed(e.into()))?;
                kind = type_meta.kind.unwrap_or_default();
            }
            (ENVELOPE_RAW, LEN) if !kind.is_empty() && kind != want => {
                small(reader, &mut buf)?;
                return Err(StreamError::NotTheList { kind, raw: std::mem::take(&mut buf) });
            }
            (ENVELOPE_RAW, LEN) => {
                let len = varint(reader)?;
                tail = list(reader, len, &mut buf, &mut item)?;
            }
            _ => skip(reader, wire, &mut { u64::MAX })?,
        }
    }
    // A kind written after the message (no server does) is checked all the same.
    if !kind.is_empty() && kind != want {
        return Err(StreamError::NotTheList { kind, raw: Vec::new() });
    }
    Ok(tail)
}

/// Reads a small length-delimited field of the envelope into `buf`; a longer one is not
/// what it says it is.
fn small(reader: &mut impl Read, buf: &mut Vec<u8>) -> Result<(), StreamError> {
    let n = varint(reader)?;
    if n > SMALL_MESSAGE {
        return Err(malformed("an envelope's type or Status longer than 64 KiB"));
    }
    fill(reader, buf, bounded(n, &mut { u64::MAX })?)
}

/// The list's message, `len` bytes of `reader`.
fn list(
    reader: &mut impl Read,
    len: u64,
    buf: &mut Vec<u8>,
    item: &mut impl FnMut(&[u8]),
) -> Result<ListTail, StreamError> {
    let mut tail = ListTail::default();
    let mut left = len;
    while let Some((field, wire)) = key(reader, Some(&mut left))? {
        match (field, wire) {
            (LIST_METADATA, LEN) | (LIST_ITEMS, LEN) => {
                let n = bounded(varint_in(reader, &mut left)?, &mut left)?;
                fill(reader, buf, n)?;
                if field == LIST_ITEMS {
                    // Every server writes the metadata first; items before a resourceVersion
                    // would be filed from an answer that may turn out not to be a list.
                    if tail.resource_version.is_empty() {
                        return Err(malformed("a list whose items come before its resourceVersion"));
                    }
                    item(buf);
                } else {
                    let m = meta::ListMeta::decode(buf.as_slice()).map_err(|e| StreamError::Malformed(e.into()))?;
                    tail.resource_version = m.resource_version.unwrap_or_default();
                    tail.continue_ = m.r#continue.unwrap_or_default();
                }
            }
            _ => skip(reader, wire, &mut left)?,
        }
    }
    Ok(tail)
}

/// Reads exactly `n` bytes into `buf` (replaced), growing it as they arrive.
fn fill(reader: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> Result<(), StreamError> {
    super::frames::read_growing(reader, buf, n).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => malformed("the list ends inside a field"),
        _ => StreamError::Io(e),
    })
}

/// `n` taken from what is `left` of the enclosing message, as a length to read.
fn bounded(n: u64, left: &mut u64) -> Result<usize, StreamError> {
    if n > *left {
        return Err(malformed("a field runs past the end of its message"));
    }
    *left -= n;
    usize::try_from(n).map_err(|_| malformed("a field longer than memory"))
}

/// The next field's number and wire type, or `None` at the end of the message: the stream's
/// end when `left` is `None` (the envelope), else when nothing of the message is left.
fn key(reader: &mut impl Read, left: Option<&mut u64>) -> Result<Option<(u64, u64)>, StreamError> {
    let k = match left {
        Some(left) if *left == 0 => return Ok(None),
        Some(left) => varint_in(reader, left)?,
        None => match first_byte(reader)? {
            None => return Ok(None),
            Some(b) => rest_of_varint(reader, b, &mut None)?,
        },
    };
    Ok(Some((k >> 3, k & 7)))
}

/// Skips one field's value of wire type `wire`, taking it from `left`.
fn skip(reader: &mut impl Read, wire: u64, left: &mut u64) -> Result<(), StreamError> {
    let n = match wire {
        VARINT => {
            varint_in(reader, left)?;
            return Ok(());
        }
        FIXED64 => 8,
        FIXED32 => 4,
        LEN => varint_in(reader, left)?,
        _ => return Err(malformed("a field of an unknown wire type")),
    };
    let n = bounded(n, left)?;
    let copied = std::io::copy(&mut reader.take(n as u64), &mut std::io::sink())?;
    if copied < n as u64 {
        return Err(malformed("the list ends inside a field"));
    }
    Ok(())
}

/// A varint of the envelope (which runs to the end of the body).
fn varint(reader: &mut impl Read) -> Result<u64, StreamError> {
    varint_in(reader, &mut { u64::MAX })
}

/// A varint taken from what is `left` of its message.
fn varint_in(reader: &mut impl Read, left: &mut u64) -> Result<u64, StreamError> {
    let Some(b) = first_byte(reader)? else { return Err(malformed("the list ends inside a field")) };
    bounded(1, left)?;
    let mut left = Some(left);
    rest_of_varint(reader, b, &mut left)
}

/// The rest of a varint whose first byte is `first` (at most ten bytes in all).
fn rest_of_varint(reader: &mut impl Read, first: u8, left: &mut Option<&mut u64>) -> Result<u64, StreamError> {
    let mut value = u64::from(first & 0x7f);
    let mut byte = first;
    let mut shift = 7;
    while byte & 0x80 != 0 {
        if shift >= 64 {
            return Err(malformed("a varint longer than ten bytes"));
        }
        byte = first_byte(reader)?.ok_or_else(|| malformed("the list ends inside a varint"))?;
        if let Some(left) = left.as_deref_mut() {
            bounded(1, left)?;
        }
        value |= u64::from(byte & 0x7f) << shift;
        shift += 7;
    }
    Ok(value)
}

/// One byte, or `None` at the end of the stream.
fn first_byte(reader: &mut impl Read) -> Result<Option<u8>, StreamError> {
    let mut b = [0u8; 1];
    loop {
        return match reader.read(&mut b) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(b[0])),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => Err(StreamError::Io(e)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(body: &[u8]) -> Result<(ListTail, Vec<Vec<u8>>), StreamError> {
        let mut items = Vec::new();
        let tail = read_list(&mut &body[..], "ServiceList", |i| items.push(i.to_vec()))?;
        Ok((tail, items))
    }

    /// Items of every size around a varint's byte boundaries, read one byte at a time too.
    #[test]
    fn a_streamed_list_reads_as_the_whole_body_does() {
        let items: Vec<Vec<u8>> = [0usize, 1, 127, 128, 300, 16_384, 70_000].iter().map(|n| vec![7u8; *n]).collect();
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let body = super::super::seal("v1", "ServiceList", super::super::list_message("42", Some("next"), None, &refs));
        let whole = super::super::list_page(&super::super::open(&body).expect("open").raw).expect("list");
        let (tail, got) = streamed(&body).expect("streamed");
        assert_eq!((tail.resource_version.as_str(), tail.continue_.as_str()), ("42", "next"));
        assert_eq!(got, whole.items);
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(1);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut slow = Vec::new();
        read_list(&mut Trickle(&body), "ServiceList", |i| slow.push(i.to_vec())).expect("trickled");
        assert_eq!(slow, whole.items);
    }

    /// A body cut anywhere reads as it did whole-body (prost): an error inside the list, and
    /// never a list the whole-body reading would not give.
    #[test]
    fn a_cut_body_reads_as_the_whole_body_reading_does() {
        let body = super::super::seal("v1", "ServiceList", super::super::list_message("1", None, None, &[b"abc"]));
        let inside = body.windows(3).position(|w| w == b"abc").expect("item");
        for cut in 0..body.len() {
            let whole = super::super::open(&body[..cut]).and_then(|e| super::super::list_page(&e.raw));
            match (streamed(&body[..cut]), whole) {
                (Ok((_, got)), Ok(whole)) => assert_eq!(got, whole.items, "cut at {cut}"),
                (Err(_), Err(_)) => {}
                (got, whole) => {
                    panic!("cut at {cut}: streamed {:?}, whole {:?}", got.map(|g| g.1), whole.map(|w| w.items))
                }
            }
        }
        assert!(streamed(&body[..inside + 1]).is_err());
        assert!(matches!(streamed(b"{\"kind\":1}"), Err(StreamError::Malformed(ProtoError::NoMagic))));
        assert!(matches!(streamed(b""), Err(StreamError::Malformed(ProtoError::NoMagic))));
    }

    /// A 200 whose body is a Status (or any other kind) is not an empty list, nor is a list
    /// whose items come before its resourceVersion.
    #[test]
    fn only_the_list_asked_for_is_read_as_one() {
        let status = super::super::status_body(500, "InternalError", "etcd is down");
        match streamed(&status) {
            Err(StreamError::NotTheList { kind, raw }) => {
                assert_eq!(kind, "Status");
                let (code, _, message) = super::super::status(&raw).expect("the Status's message");
                assert_eq!((code, message.as_str()), (500, "etcd is down"));
            }
            other => panic!("a Status read as {other:?}"),
        }
        let other = super::super::seal("v1", "NodeList", super::super::list_message("1", None, None, &[b"n"]));
        assert!(matches!(streamed(&other), Err(StreamError::NotTheList { kind, .. }) if kind == "NodeList"));
        let unnamed = super::super::seal("", "", super::super::list_message("3", None, None, &[b"s"]));
        assert_eq!(streamed(&unnamed).expect("no kind is the kind asked for").1, [b"s".to_vec()]);
        // The envelope's type after its message.
        let status = super::super::status_body(500, "InternalError", "down");
        let mut raw_first = status[..4].to_vec();
        let envelope = super::super::open(&status).expect("a Status");
        prost::encoding::bytes::encode(2, &envelope.raw, &mut raw_first);
        let type_meta = super::meta::TypeMeta { api_version: Some("v1".into()), kind: Some("Status".into()) };
        prost::encoding::message::encode(1, &type_meta, &mut raw_first);
        assert!(streamed(&raw_first).is_err(), "a Status before its type is no list either");
        let list = super::super::list_message("5", None, None, &[]);
        let mut list_first = status[..4].to_vec();
        prost::encoding::bytes::encode(2, &list, &mut list_first);
        prost::encoding::message::encode(1, &type_meta, &mut list_first);
        assert!(matches!(streamed(&list_first), Err(StreamError::NotTheList { kind, .. }) if kind == "Status"));
        let no_rv = super::super::seal("v1", "ServiceList", super::super::list_message("", None, None, &[b"s"]));
        assert!(matches!(streamed(&no_rv), Err(StreamError::Malformed(_))), "items before a resourceVersion");
    }
}
