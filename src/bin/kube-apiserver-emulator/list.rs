//! Paged lists: continue tokens and pages consistent with the first page's snapshot.

use crate::history::{Key, Obj, TooOld};
use crate::resources::Resource;
use crate::selectors::Selector;
use crate::store::Store;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

/// Where a page starts: the snapshot resourceVersion and the last key already returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Continue {
    /// The snapshot every page shows.
    pub rv: u64,
    /// The last key of the previous page.
    pub after: Key,
}

impl Continue {
    /// The opaque token: base64 of a small JSON document.
    pub fn encode(&self) -> String {
        let doc = json!({"rv": self.rv, "ns": self.after.0, "name": self.after.1});
        URL_SAFE_NO_PAD.encode(doc.to_string())
    }

    /// Reads a token back; `None` if it is not one of ours.
    pub fn decode(token: &str) -> Option<Continue> {
        let bytes = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
        let doc: Value = serde_json::from_slice(&bytes).ok()?;
        let after = (doc["ns"].as_str()?.to_string(), doc["name"].as_str()?.to_string());
        Some(Continue { rv: doc["rv"].as_u64()?, after })
    }
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    /// The snapshot resourceVersion.
    pub rv: u64,
    /// The objects, sorted by key.
    pub items: Vec<Obj>,
    /// Where the next page starts, if there is one.
    pub next: Option<Continue>,
    /// How many selected objects follow this page (only counted without selectors).
    pub remaining: Option<usize>,
}

/// What to list.
pub struct Query<'a> {
    /// Restrict to one namespace.
    pub namespace: Option<&'a str>,
    /// Filter.
    pub selector: &'a Selector,
    /// Page size; 0 = everything.
    pub limit: usize,
    /// Continue from a previous page.
    pub from: Option<Continue>,
}

/// Lists `res` objects per `q`, at the continue token's snapshot or the current state.
pub fn list(store: &Store, res: &Resource, q: &Query) -> Result<Page, TooOld> {
    let g = store.lock();
    let rv = q.from.as_ref().map_or(g.rv, |c| c.rv.min(g.rv));
    let overlay = if rv < g.rv || q.from.is_some() { g.history.undo(res.plural, rv)? } else { BTreeMap::new() };
    let empty = BTreeMap::new();
    let current = g.objects.get(res.plural).unwrap_or(&empty);
    let start = match (&q.from, q.namespace) {
        (Some(c), _) => Bound::Excluded(c.after.clone()),
        (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
        (None, None) => Bound::Unbounded,
    };
    let now = current.range((start.clone(), Bound::Unbounded)).filter(|(k, _)| !overlay.contains_key(*k));
    let then = overlay.range((start, Bound::Unbounded)).filter_map(|(k, o)| o.as_ref().map(|o| (k, o)));
    let mut merged = Merge { a: now.peekable(), b: then.peekable() }
        .take_while(|(k, _)| q.namespace.is_none_or(|ns| k.0 == ns))
        .filter(|(_, o)| q.selector.matches(&o.facts));
    let limit = if q.limit == 0 { usize::MAX } else { q.limit };
    let items: Vec<Obj> = merged.by_ref().take(limit).map(|(_, o)| o.clone()).collect();
    let mut rest = merged.peekable();
    let next = match (rest.peek(), items.last()) {
        (Some(_), Some(last)) => Some(Continue { rv, after: (last.facts.namespace.clone(), last.facts.name.clone()) }),
        _ => None,
    };
    let remaining = match (&next, q.selector.is_empty()) {
        // Without an overlay the map alone is the snapshot: counting its keys is much cheaper.
        (Some(c), true) if overlay.is_empty() => Some(
            current
                .range((Bound::Excluded(c.after.clone()), Bound::Unbounded))
                .take_while(|(k, _)| q.namespace.is_none_or(|ns| k.0 == ns))
                .count(),
        ),
        (Some(_), true) => Some(rest.count()),
        _ => None,
    };
    Ok(Page { rv, items, next, remaining })
}

/// Merges two key-sorted iterators with disjoint keys.
struct Merge<'m, A: Iterator<Item = (&'m Key, &'m Obj)>, B: Iterator<Item = (&'m Key, &'m Obj)>> {
    a: Peekable<A>,
    b: Peekable<B>,
}

impl<'m, A: Iterator<Item = (&'m Key, &'m Obj)>, B: Iterator<Item = (&'m Key, &'m Obj)>> Iterator for Merge<'m, A, B> {
    type Item = (&'m Key, &'m Obj);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.a.peek(), self.b.peek()) {
            (Some(x), Some(y)) if y.0 < x.0 => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

/// Writes the list response body: items without kind/apiVersion, as the real server does.
pub fn render(res: &Resource, page: &Page) -> Vec<u8> {
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(next) = &page.next {
        meta["continue"] = Value::String(next.encode());
    }
    if let Some(n) = page.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    let size: usize = page.items.iter().map(|o| o.body.len() + 1).sum();
    let head =
        format!(r#"{{"kind":"{}","apiVersion":"{}","metadata":{},"items":["#, res.list_kind(), res.api_version(), meta);
    let mut out = Vec::with_capacity(head.len() + size + 4);
    out.extend_from_slice(head.as_bytes());
    for (i, o) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&o.body);
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trip() {
        let c = Continue { rv: 1234, after: ("default".into(), "svc-9".into()) };
        assert_eq!(Continue::decode(&c.encode()), Some(c));
        assert_eq!(Continue::decode("not a token"), None);
    }
}
