//! Label and field selectors: parsing the query syntax and matching an object's extracted facts.

use crate::resources::{Catalog, Resource};
use serde_json::Value;
use std::collections::BTreeMap;

/// Why a selector was refused; the text becomes a 400 Status message.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    /// The label selector does not parse.
    #[error("unable to parse requirement: {0}")]
    Label(String),
    /// The field selector does not parse.
    #[error("invalid field selector: {0}")]
    Field(String),
    /// The field is not selectable for this resource (or on this server version).
    #[error("field label not supported: {0}")]
    Unsupported(String),
}

/// What selectors look at in an object, extracted once when the object is stored.
#[derive(Debug, Default, Clone)]
pub struct Facts {
    /// `metadata.namespace`, empty for cluster-scoped objects.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Selectable spec fields present in the object (e.g. `spec.clusterIP`).
    pub fields: Vec<(&'static str, String)>,
}

impl Facts {
    /// Extracts the facts of `obj`, a `res` object.
    pub fn of(res: &Resource, obj: &Value) -> Facts {
        let meta = &obj["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let labels = meta["labels"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
            .unwrap_or_default();
        let fields = res
            .spec_fields
            .iter()
            .map(|f| (*f, f.split('.').fold(obj, |v, part| &v[part])))
            .filter_map(|(f, v)| v.as_str().map(|s| (f, s.to_string())))
            .collect();
        Facts { namespace: text(&meta["namespace"]), name: text(&meta["name"]), labels, fields }
    }

    fn field(&self, field: &str) -> &str {
        match field {
            "metadata.name" => &self.name,
            "metadata.namespace" => &self.namespace,
            _ => self.fields.iter().find(|(f, _)| *f == field).map(|(_, v)| v.as_str()).unwrap_or_default(),
        }
    }
}

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
enum Label {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// One field requirement: field, wanted value, and whether it must equal (or differ).
#[derive(Debug, Clone, PartialEq)]
struct Field {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed `labelSelector` plus `fieldSelector`; all requirements must hold.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    labels: Vec<Label>,
    fields: Vec<Field>,
}

impl Selector {
    /// Parses both query parameters for resource `res`.
    pub fn parse(label: &str, field: &str, res: &Resource, catalog: &Catalog) -> Result<Selector, SelectorError> {
        let labels = parse_labels(label)?;
        let fields = parse_fields(field)?;
        if let Some(f) = fields.iter().find(|f| !catalog.field_supported(res, &f.field)) {
            return Err(SelectorError::Unsupported(f.field.clone()));
        }
        Ok(Selector { labels, fields })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether an object with these facts is selected.
    pub fn matches(&self, facts: &Facts) -> bool {
        self.fields.iter().all(|f| (facts.field(&f.field) == f.value) == f.equal)
            && self.labels.iter().all(|l| match l {
                Label::In(k, vs) => facts.labels.get(k).is_some_and(|v| vs.contains(v)),
                Label::NotIn(k, vs) => facts.labels.get(k).is_none_or(|v| !vs.contains(v)),
                Label::Exists(k) => facts.labels.contains_key(k),
                Label::Absent(k) => !facts.labels.contains_key(k),
            })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && k.matches('/').count() <= 1
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63 && v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn parse_labels(s: &str) -> Result<Vec<Label>, SelectorError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_top(s).into_iter().map(|part| parse_label(part.trim())).collect()
}

fn parse_label(part: &str) -> Result<Label, SelectorError> {
    let bad = || SelectorError::Label(part.to_string());
    let checked = |k: &str, vs: Vec<String>| {
        if valid_key(k) && vs.iter().all(|v| valid_value(v)) { Ok((k.to_string(), vs)) } else { Err(bad()) }
    };
    if let Some(k) = part.strip_prefix('!') {
        return checked(k.trim(), vec![]).map(|(k, _)| Label::Absent(k));
    }
    for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, vs) = checked(k.trim(), vec![v.trim().to_string()])?;
            return Ok(if equal { Label::In(k, vs) } else { Label::NotIn(k, vs) });
        }
    }
    if let Some(open) = part.find('(') {
        let head = part[..open].trim();
        let list = part[open + 1..].strip_suffix(')').ok_or_else(bad)?;
        let vs: Vec<String> = list.split(',').map(|v| v.trim().to_string()).collect();
        let (key, notin) = if let Some(k) = head.strip_suffix(" notin") {
            (k, true)
        } else if let Some(k) = head.strip_suffix(" in") {
            (k, false)
        } else {
            return Err(bad());
        };
        let (k, vs) = checked(key.trim(), vs)?;
        return Ok(if notin { Label::NotIn(k, vs) } else { Label::In(k, vs) });
    }
    if part.contains(char::is_whitespace) {
        return Err(bad());
    }
    checked(part, vec![]).map(|(k, _)| Label::Exists(k))
}

fn parse_fields(s: &str) -> Result<Vec<Field>, SelectorError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|part| {
            let part = part.trim();
            for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
                if let Some((f, v)) = part.split_once(op) {
                    let field = f.trim().to_string();
                    if field.is_empty() {
                        break;
                    }
                    return Ok(Field { field, value: v.trim().to_string(), equal });
                }
            }
            Err(SelectorError::Field(part.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(labels: &[(&str, &str)]) -> Facts {
        Facts { labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Facts::default() }
    }

    fn sel(label: &str) -> Selector {
        Selector { labels: parse_labels(label).expect("parses"), fields: vec![] }
    }

    #[test]
    fn label_operators() {
        let f = facts(&[("app", "web"), ("tier", "front")]);
        assert!(sel("app=web,tier").matches(&f));
        assert!(sel("app==web,!missing").matches(&f));
        assert!(!sel("app!=web").matches(&f));
        assert!(sel("app in (web, db),tier notin (back)").matches(&f));
        assert!(!sel("app notin (web)").matches(&f));
        assert!(
            !sel("!service.kubernetes.io/service-proxy-name")
                .matches(&facts(&[("service.kubernetes.io/service-proxy-name", "x")]))
        );
    }

    #[test]
    fn bad_labels_refused() {
        for s in ["app in web", "a b", "=x", "app=(", "x in (a"] {
            assert!(parse_labels(s).is_err(), "{s}");
        }
    }
}
