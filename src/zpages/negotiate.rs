//! What a z-page answers in: plain text unless the client asks for the structured JSON, and
//! then only with the version, group and kind named (`application/json;v=v1beta1;
//! g=config.k8s.io;as=Statusz`), as upstream's component-base negotiates; a bare
//! `application/json` is refused (406) so that no client comes to rely on an unnamed shape.
//! Types, subtypes and parameter names are compared ignoring case (RFC 9110 8.3.1, 5.6.6);
//! the parameters' values (a group, a version, a kind) are Kubernetes names, compared exactly.

/// The structured responses' group.
pub const GROUP: &str = "config.k8s.io";

/// The structured responses' version (Kubernetes 1.36's; 1.35's `v1alpha1` is not served).
pub const VERSION: &str = "v1beta1";

/// What to answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// `text/plain`, for people.
    Text,
    /// The `config.k8s.io/v1beta1` object.
    Json,
}

/// One clause of an `Accept` header.
struct Clause<'a> {
    kind: &'a str,
    sub: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

fn clauses(accept: &str) -> Vec<Clause<'_>> {
    let mut out: Vec<Clause> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';').map(str::trim);
            let (kind, sub) = parts.next()?.split_once('/')?;
            let mut c = Clause { kind, sub, q: 1.0, params: Vec::new() };
            for p in parts {
                let Some((k, v)) = p.split_once('=') else { continue };
                match k.trim() {
                    k if k.eq_ignore_ascii_case("q") => c.q = v.trim().parse().unwrap_or(0.0),
                    k => c.params.push((k, v.trim())),
                }
            }
            Some(c)
        })
        .filter(|c| c.q > 0.0)
        .collect();
    // Most wanted first; among equals, as sent.
    out.sort_by(|a, b| b.q.total_cmp(&a.q));
    out
}

/// What to answer a request for kind `kind` (`Statusz`, `Flagz`) with `accept`: `None` when
/// nothing offered is acceptable (a 406).
pub fn negotiate(accept: Option<&str>, kind: &str) -> Option<Media> {
    let accept = accept.map(str::trim).filter(|a| !a.is_empty() && *a != "*/*");
    let Some(accept) = accept else { return Some(Media::Text) };
    let offered = [("text", "plain", Media::Text), ("application", "json", Media::Json)];
    let list = clauses(accept);
    let is = |got: &str, want: &str| got.eq_ignore_ascii_case(want);
    let chosen = list.iter().find_map(|c| {
        offered.iter().find(|(t, s, _)| (is(c.kind, t) || c.kind == "*") && (is(c.sub, s) || c.sub == "*")).map(|o| o.2)
    })?;
    if chosen == Media::Text {
        return Some(Media::Text);
    }
    let json = list.iter().find(|c| is(c.kind, "application") && is(c.sub, "json"))?;
    let param = |name: &str| json.params.iter().find(|(k, _)| is(k, name)).map(|(_, v)| *v);
    (param("v") == Some(VERSION) && param("g") == Some(GROUP) && param("as") == Some(kind)).then_some(Media::Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_unless_the_structured_kind_is_named_in_full() {
        for accept in [None, Some(""), Some("*/*"), Some("text/plain"), Some("text/*;q=0.5, application/xml")] {
            assert_eq!(negotiate(accept, "Statusz"), Some(Media::Text), "{accept:?}");
        }
        let full = "application/json;v=v1beta1;g=config.k8s.io;as=Statusz";
        assert_eq!(negotiate(Some(full), "Statusz"), Some(Media::Json));
        assert_eq!(negotiate(Some(full), "Flagz"), None, "another kind");
        assert_eq!(negotiate(Some("application/json"), "Statusz"), None, "a bare application/json");
        assert_eq!(negotiate(Some("application/json;v=v1alpha1;g=config.k8s.io;as=Statusz"), "Statusz"), None);
        assert_eq!(negotiate(Some("application/xml"), "Statusz"), None);
        let preferred = format!("text/plain;q=0.2, {full}");
        assert_eq!(negotiate(Some(&preferred), "Statusz"), Some(Media::Json), "by q");
        assert_eq!(negotiate(Some(&format!("text/plain;q=0, {full};q=0.1")), "Statusz"), Some(Media::Json));
    }

    /// Issue 34: an upper-case media type or parameter name is the same media type.
    #[test]
    fn types_and_parameter_names_ignore_case_values_do_not() {
        let upper = "APPLICATION/JSON;AS=Statusz;V=v1beta1;G=config.k8s.io";
        assert_eq!(negotiate(Some(upper), "Statusz"), Some(Media::Json));
        assert_eq!(negotiate(Some("Application/Json;v=v1beta1;g=config.k8s.io;As=Flagz"), "Flagz"), Some(Media::Json));
        assert_eq!(negotiate(Some("TEXT/PLAIN"), "Statusz"), Some(Media::Text));
        let preferred = format!("text/plain;Q=0.2, {upper}");
        assert_eq!(negotiate(Some(&preferred), "Statusz"), Some(Media::Json), "by Q");
        assert_eq!(negotiate(Some("application/json;as=STATUSZ;v=v1beta1;g=config.k8s.io"), "Statusz"), None);
        assert_eq!(negotiate(Some("application/json;as=Statusz;v=V1BETA1;g=config.k8s.io"), "Statusz"), None);
    }
}
