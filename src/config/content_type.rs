//! Which encoding the API client asks for (kube-proxy's `clientConnection.contentType`), read
//! from the flags or the file when the configuration is validated; `kube` encodes with it.

/// The JSON media type.
pub const JSON: &str = "application/json";

/// The Kubernetes protobuf media type, as a literal for `concat!` (`accept` builds on it).
macro_rules! protobuf_media_type {
    () => {
        "application/vnd.kubernetes.protobuf"
    };
}

/// The Kubernetes protobuf media type.
pub const PROTOBUF: &str = protobuf_media_type!();

/// The encoding asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentType {
    /// `application/json`.
    Json,
    /// `application/vnd.kubernetes.protobuf`, kube-proxy's default.
    #[default]
    Protobuf,
}

impl ContentType {
    /// Reads a media type as kube-proxy's `contentType` setting gives it (parameters after
    /// `;` ignored); an empty one is the default.
    pub fn parse(text: &str) -> Result<ContentType, String> {
        let media = text.split(';').next().unwrap_or_default().trim();
        if media.is_empty() {
            return Ok(ContentType::default());
        }
        if media.eq_ignore_ascii_case(JSON) {
            return Ok(ContentType::Json);
        }
        if media.eq_ignore_ascii_case(PROTOBUF) {
            return Ok(ContentType::Protobuf);
        }
        Err(format!("content type {text:?} is not supported: use {JSON} or {}", PROTOBUF))
    }

    /// The `Accept` header, as client-go sends it when only the content type is set: the
    /// type, then anything (a kind the server cannot encode so comes back as JSON).
    pub fn accept(self) -> &'static str {
        match self {
            ContentType::Json => JSON,
            ContentType::Protobuf => concat!(protobuf_media_type!(), ", */*"),
        }
    }
}
