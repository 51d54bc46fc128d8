//! Input files the operator points at (the `--config` file, kubeconfigs, token files, CA
//! bundles, client certificates and keys): read whole only when they are regular files of a
//! bounded size, opened so that a FIFO cannot hang the start, and described in errors by
//! where the fault is, never by what the file holds (a kubeconfig holds credentials).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What kind of file is read, and the most it may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// The kind of file, as an error names it.
    pub what: &'static str,
    /// The most bytes it may hold.
    pub max: u64,
}

/// kube-proxy's configuration file: kubeadm keeps it in a ConfigMap, and a ConfigMap holds at
/// most 1 MiB.
pub const CONFIG: Limit = Limit { what: "configuration file", max: 1 << 20 };

/// A kubeconfig: a generous multiple of the 1 MiB a Secret or ConfigMap that carries one
/// may hold, room for many clusters with their certificates inline.
pub const KUBECONFIG: Limit = Limit { what: "kubeconfig", max: 4 << 20 };

/// A bearer token file: a service-account token is a JWT of a few KiB, and a token kept in a
/// Secret is bounded by the Secret's 1 MiB.
pub const TOKEN: Limit = Limit { what: "token file", max: 1 << 20 };

/// A CA bundle, client certificate or key in PEM: a distribution's whole CA bundle is about
/// 200 KiB; this leaves room for any chain.
pub const PEM: Limit = Limit { what: "PEM file", max: 4 << 20 };

/// A manifest file (`--manifests`): a whole cluster may stand in one (30k Services with their
/// EndpointSlices are some 60 MB of JSON); a file past this has grown without end.
pub const MANIFEST: Limit = Limit { what: "manifest file", max: 1 << 30 };

/// Why a file could not be read; the caller names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is a device, FIFO, socket or directory (reading one could last forever).
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// It holds more than its kind may.
    #[error("larger than {} bytes, the most a {} may hold", .0.max, .0.what)]
    TooLarge(Limit),
    /// It is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotText,
}

/// Reads the file at `path` whole. Links are followed (a kubelet-projected token is a link
/// into a `..data` directory of regular files); the file is opened without blocking (a FIFO
/// nobody writes would otherwise block the open forever) and its type and size are checked
/// on the open descriptor, so a file swapped in after a check cannot slip past it.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    // O_NOCTTY: a terminal device opened by a daemon without a terminal would become its own.
    let file = File::options().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular(match () {
            _ if kind.is_dir() => "a directory",
            _ if kind.is_char_device() => "a character device",
            _ if kind.is_block_device() => "a block device",
            _ if kind.is_fifo() => "a FIFO",
            _ if kind.is_socket() => "a socket",
            _ => "not a file",
        }));
    }
    if meta.len() > limit.max {
        return Err(ReadError::TooLarge(limit));
    }
    // The size can grow after the check (and is 0 for some kernel files): read one byte past
    // the limit at most.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.max {
        return Err(ReadError::TooLarge(limit));
    }
    Ok(bytes)
}

/// Reads the file at `path` whole as UTF-8 text, as [`read`] does.
pub fn read_text(path: &Path, limit: Limit) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit)?).map_err(|_| ReadError::NotText)
}

/// Where a YAML parser's error is and what kind it is, without the text it quotes (the
/// parser's own message shows the offending line, which can be a token): `line 13, column
/// 12: a YAML syntax error`.
pub fn yaml_error(e: &serde_saphyr::Error) -> String {
    let at = e.location().filter(|l| l.line() > 0).map(|l| format!("line {}, column {}: ", l.line(), l.column()));
    format!("{}{}", at.unwrap_or_default(), yaml_fault(e))
}

fn yaml_fault(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error as E;
    // What each names is fixed by the type read (`expected`, `field`), never by the file.
    match e {
        E::WithSnippet { error, .. } | E::AliasError { error, .. } => yaml_fault(error),
        E::SerdeInvalidType { expected, .. } | E::SerdeInvalidValue { expected, .. } => {
            format!("a value where {expected} was expected")
        }
        E::Unexpected { expected, .. } => format!("a value where a {expected} was expected"),
        E::SerdeInvalidLength { expected, .. } => format!("not as many entries as {expected}"),
        E::SerdeUnknownVariant { expected, .. } => format!("not one of {}", expected.join(", ")),
        E::SerdeUnknownField { .. } => "an unknown field".into(),
        E::SerdeMissingField { field, .. } => format!("missing field {field}"),
        E::DuplicateMappingKey { .. } => "a key given twice in one mapping".into(),
        E::Eof { .. } => "no YAML document".into(),
        E::MultipleDocuments { .. } => "more than one YAML document".into(),
        E::Budget { .. } => "too large or too deeply nested".into(),
        E::IOError { .. } => "not readable as UTF-8 text".into(),
        E::ExternalMessage { .. } => "a YAML syntax error".into(),
        _ => "not valid YAML here".into(),
    }
}

/// serde's own message for a value it refused, without the value it quotes (`invalid type:
/// string "…", expected a sequence` becomes `a string where a sequence was expected`).
/// A message that is not serde's own (a type's check of its value) is returned as it is.
pub fn serde_message(message: &str) -> String {
    // serde writes what it expected last; a quoted value before it may hold anything.
    let expected = || message.rsplit_once(", expected ").map_or("something else", |(_, e)| e);
    if let Some(found) = message.strip_prefix("invalid type: ") {
        let kinds = [
            ("boolean", "a boolean"),
            ("integer", "an integer"),
            ("floating point", "a number"),
            ("character", "a character"),
            ("string", "a string"),
            ("byte array", "bytes"),
            ("unit", "null"),
            ("sequence", "a sequence"),
            ("map", "a mapping"),
        ];
        let kind = kinds.iter().find(|(k, _)| found.starts_with(k)).map_or("a value", |(_, said)| said);
        return format!("{kind} where {} was expected", expected());
    }
    if message.starts_with("invalid value: ") || message.starts_with("invalid length ") {
        return format!("a value where {} was expected", expected());
    }
    if message.starts_with("unknown variant ") {
        return format!("not {}", expected());
    }
    if message.starts_with("unknown field ") {
        return "an unknown field".into();
    }
    message.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_lose_the_value_they_quote() {
        let secret = "SECRET-0123456789, expected a map";
        let cases = [
            (format!("invalid type: string {secret:?}, expected a sequence"), "a string where a sequence was expected"),
            ("invalid type: integer `7`, expected a string".into(), "an integer where a string was expected"),
            (format!("invalid value: string {secret:?}, expected u8"), "a value where u8 was expected"),
            (format!("unknown variant `{secret}`, expected one of `a`, `b`"), "not one of `a`, `b`"),
        ];
        for (message, want) in cases {
            assert_eq!(serde_message(&message), want);
        }
        assert_eq!(serde_message("missing field `kind`"), "missing field `kind`");
    }

    #[test]
    fn yaml_errors_say_where_and_not_what() {
        let text = "a: 1\nb: [SECRET-0123456789\n";
        let e = serde_saphyr::from_str::<serde_json::Value>(text).unwrap_err();
        let said = yaml_error(&e);
        assert!(said.starts_with("line 2, column ") && !said.contains("SECRET"), "{said}");
    }
}
