//! The HTTP client for the API server: one ureq agent (HTTP/1.1 over rustls) built from a
//! [`ClientConfig`], with the certificate and key checked before ureq sees them, bearer
//! tokens re-read as they rotate, and every answer that is not a success turned into an
//! [`ApiError`] carrying the server's `Status`.

use super::gate::Gate;
use super::kubeconfig::{ClientConfig, Pem, Token, hide_userinfo, without_userinfo};
use crate::config::ContentType;
use crate::input::{self, ReadError};
use serde::Deserialize;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{Connector, RustlsConnector};

/// How long a connection (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the server may take to send the response's headers.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a token read from a file is used before the file is read again (bound
/// service-account tokens rotate; client-go re-reads every minute too).
const TOKEN_TTL: Duration = Duration::from_secs(60);

/// The most of an error response's body that is read, for its `Status`.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

/// Why no client could be built; each names the file or setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A CA, certificate or key file could not be read.
    #[error("reading {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (a field not named `source`: the message holds it, and is not repeated as
        /// its cause).
        cause: ReadError,
    },
    /// A CA, certificate or key is not usable.
    #[error("{0}")]
    Tls(String),
    /// The configuration asks for something this client does not do.
    #[error("{0}")]
    Unsupported(String),
}

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The server answered with an error status.
    #[error("{}", describe_status(*code, reason, message))]
    Status {
        /// The HTTP status (or, in a watch's ERROR event, the Status's `code`).
        code: u16,
        /// The Status's `reason` (`Expired`, `Gone`, `Unauthorized`, …), if any.
        reason: String,
        /// The Status's `message`, or the start of the body.
        message: String,
        /// The `Retry-After` header, if any.
        retry_after: Option<Duration>,
    },
    /// No usable answer: refused, reset, TLS failure, timed out.
    #[error("{0}")]
    Transport(String),
    /// The credentials could not be read.
    #[error("{0}")]
    Credentials(String),
    /// The answer could not be decoded.
    #[error("{0}")]
    Decode(String),
    /// The daemon stopped while the request waited for the client-side rate limit.
    #[error("stopped while waiting for the client-side rate limit")]
    Stopped,
}

fn describe_status(code: u16, reason: &str, message: &str) -> String {
    match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("HTTP {code} {reason}: {message}"),
        (true, false) => format!("HTTP {code}: {message}"),
        (false, true) => format!("HTTP {code} {reason}"),
        (true, true) => format!("HTTP {code}"),
    }
}

impl ApiError {
    /// The HTTP status, if the server answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the server says what was asked for is too old (410, as an HTTP status or in a
    /// watch's ERROR event; also an expired `continue` token): only a fresh list helps.
    pub fn is_gone(&self) -> bool {
        matches!(self, ApiError::Status { code: 410, .. })
            || matches!(self, ApiError::Status { reason, .. } if reason == "Expired" || reason == "Gone")
    }
}

/// The fields of a `metav1.Status` this client reads.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Status {
    #[serde(default)]
    pub(super) code: u16,
    #[serde(default)]
    pub(super) reason: String,
    #[serde(default)]
    pub(super) message: String,
}

impl Status {
    /// The error this Status reports.
    pub(super) fn into_error(self, retry_after: Option<Duration>) -> ApiError {
        ApiError::Status { code: self.code, reason: self.reason, message: self.message, retry_after }
    }
}

/// A client of one API server; cheap to share between threads.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    server: String,
    token: Option<Arc<TokenSource>>,
    /// The rate limit and metrics every request passes through.
    gate: Arc<Gate>,
    content: ContentType,
}

impl Client {
    /// Builds the client, reading the CA, certificate and key now: a file that is missing or
    /// unusable, or a certificate that does not match its key, is an error here, not a panic
    /// later inside the TLS stack.
    pub fn new(cfg: &ClientConfig) -> Result<Client, ClientError> {
        if cfg.tls_server_name.is_some() {
            return Err(ClientError::Unsupported(
                "tls-server-name is not supported: name the server by an address its certificate covers".into(),
            ));
        }
        if cfg.insecure {
            log::warn!("insecure-skip-tls-verify is set: the API server's certificate is not verified");
        }
        let tls = tls_config(cfg)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // The API server never redirects a list or watch: a redirect is an error, not a
            // new source of truth (see `answer`).
            .max_redirects(0)
            .proxy(None)
            .user_agent(concat!("kube-nftproxy/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_resolve(Some(CONNECT_TIMEOUT))
            .timeout_send_request(Some(RESPONSE_TIMEOUT))
            .timeout_recv_response(Some(RESPONSE_TIMEOUT))
            .tls_config(tls)
            .build();
        let connector = ().chain(super::dial::KeepaliveConnector).chain(RustlsConnector::default());
        let agent = ureq::Agent::with_parts(config, connector, DefaultResolver::default());
        let token = cfg.token.clone().map(|t| Arc::new(TokenSource::new(t)));
        let server = cfg.server.trim_end_matches('/').to_string();
        // client-go's default limit until `limited` says otherwise.
        let gate = Arc::new(Gate::new(&server, 0.0, 0, Arc::new(AtomicBool::new(false))));
        Ok(Client { agent, server, token, gate, content: ContentType::Json })
    }

    /// The client asking for (and writing) `content` from now on; JSON until then.
    pub fn with_content_type(self, content: ContentType) -> Client {
        Client { content, ..self }
    }
    /// This client with the client-side rate limit of `qps` requests a second and bursts of
    /// `burst`, read as client-go reads them (0: its default, 5 and 10; a negative `qps`: no
    /// limit); a request waiting for its turn gives up with [`ApiError::Stopped`] once `stop`
    /// is set. Clones made after share the limit, as client-go's clientset shares one.
    pub fn limited(mut self, qps: f32, burst: u32, stop: Arc<AtomicBool>) -> Client {
        self.gate = Arc::new(Gate::new(&self.server, qps, burst, stop));
        self
    }

    /// Records every request in client-go's `rest_client_*` metrics of `metrics` from now on.
    pub fn set_metrics(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.gate.set_metrics(metrics);
    }

    /// The server's base URL as it may be shown (without user info).
    pub fn server(&self) -> String {
        without_userinfo(&self.server)
    }

    /// `GET path` (with its query); a reply that stays silent for `idle`, or that takes longer
    /// than `total` in all (connecting, headers and body), ends with a timeout. Statuses other than 2xx are
    /// returned as [`ApiError::Status`]. Each takes a token of the rate limit first.
    pub fn get(&self, path: &str, idle: Duration, total: Option<Duration>) -> Result<ureq::Body, ApiError> {
        let began = self.gate.admit("GET", path)?;
        self.send_get(path, idle, total, Some(began))
    }

    /// Opens the watch `path` (its query asks for `watch=true`): a [`get`](Client::get) without a
    /// total bound, that takes no token of the rate limit and is not timed, as client-go's.
    pub fn watch(&self, path: &str, idle: Duration) -> Result<ureq::Body, ApiError> {
        self.send_get(path, idle, None, None)
    }

    fn send_get(
        &self,
        path: &str,
        idle: Duration,
        total: Option<Duration>,
        began: Option<Instant>,
    ) -> Result<ureq::Body, ApiError> {
        let url = format!("{}{path}", self.server);
        let mut req = self.agent.get(&url).header("Accept", self.content.accept());
        if let Some(token) = &self.token {
            req = req.header("Authorization", format!("Bearer {}", token.get()?));
        }
        let sent = req.config().timeout_per_read(Some(idle)).timeout_per_call(total).build().call();
        self.gate.record("GET", sent.as_ref().ok().map(|r| r.status().as_u16()), began);
        self.answer(sent)
    }

    /// `POST path` with `body` (in the client's content type where the kind has a protobuf
    /// form, else JSON); the reply's body, which must come within the response timeout,
    /// after a token of the rate limit. Statuses other than 2xx are returned as
    /// [`ApiError::Status`].
    pub fn post(&self, path: &str, body: &serde_json::Value) -> Result<ureq::Body, ApiError> {
        let began = self.gate.admit("POST", path)?;
        let url = format!("{}{path}", self.server);
        let (bytes, media) = super::content::body(self.content, body);
        let mut req = self.agent.post(&url).header("Accept", self.content.accept()).header("Content-Type", media);
        if let Some(token) = &self.token {
            req = req.header("Authorization", format!("Bearer {}", token.get()?));
        }
        let req = req.config().timeout_recv_body(Some(RESPONSE_TIMEOUT)).build();
        let sent = req.send(bytes);
        self.gate.record("POST", sent.as_ref().ok().map(|r| r.status().as_u16()), Some(began));
        self.answer(sent)
    }

    /// The body of a 2xx answer, or the error the answer (or its absence) means.
    fn answer(&self, sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<ureq::Body, ApiError> {
        let resp =
            sent.map_err(|e| ApiError::Transport(hide_userinfo(&format!("{}: {e}", self.server), &self.server)))?;
        let code = resp.status().as_u16();
        if (200..300).contains(&code) {
            return Ok(resp.into_body());
        }
        if (300..400).contains(&code) {
            let message = "the API server answered with a redirect, which is not followed".to_string();
            return Err(ApiError::Status { code, reason: String::new(), message, retry_after: None });
        }
        let retry_after =
            resp.headers().get("Retry-After").and_then(|v| v.to_str().ok()).and_then(super::retry::retry_after);
        let body = resp.into_body();
        let mime = body.mime_type().map(str::to_string);
        let mut bytes = Vec::new();
        let _ = body.into_reader().take(ERROR_BODY_LIMIT).read_to_end(&mut bytes);
        let status = super::content::status(mime.as_deref(), &bytes);
        let text = String::from_utf8_lossy(&bytes);
        if code == 401
            && let Some(token) = &self.token
        {
            token.expire();
        }
        let message = if status.message.is_empty() { text.trim().chars().take(200).collect() } else { status.message };
        Err(Status { code, message, ..status }.into_error(retry_after))
    }
}

/// The agent's TLS settings: the cluster's CA (Mozilla's roots when none is given), and the
/// client certificate, checked against its key with the same provider ureq uses.
fn tls_config(cfg: &ClientConfig) -> Result<TlsConfig, ClientError> {
    let mut tls = TlsConfig::builder().disable_verification(cfg.insecure);
    if let Some(ca) = &cfg.ca {
        let certs = certificates(ca, "certificate-authority")?;
        tls = tls.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let Some((cert, key)) = &cfg.client_cert {
        let chain = certificates(cert, "client-certificate")?;
        let (bytes, origin) = read_pem(key)?;
        let key = PrivateKey::from_pem(&bytes).map_err(|e| ClientError::Tls(format!("client-key ({origin}): {e}")))?;
        check_pair(&chain, &bytes)?;
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(tls.build())
}

fn read_pem(pem: &Pem) -> Result<(Vec<u8>, String), ClientError> {
    match pem {
        Pem::Data(bytes) => Ok((bytes.clone(), "inline data".into())),
        Pem::File(path) => input::read(path, input::PEM)
            .map(|b| (b, path.display().to_string()))
            .map_err(|cause| ClientError::Io { path: path.clone(), cause }),
    }
}

fn certificates(pem: &Pem, field: &str) -> Result<Vec<Certificate<'static>>, ClientError> {
    let (bytes, origin) = read_pem(pem)?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(ClientError::Tls(format!("{field} ({origin}): {e}"))),
        }
    }
    if certs.is_empty() {
        return Err(ClientError::Tls(format!("{field} ({origin}) holds no PEM certificate")));
    }
    Ok(certs)
}

/// Builds the rustls client configuration ureq will build, so that a certificate rustls
/// refuses (or one that does not belong to the key) is an error now.
fn check_pair(chain: &[Certificate<'static>], key_pem: &[u8]) -> Result<(), ClientError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let key_der = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| ClientError::Tls(format!("client-key: {e}")))?;
    let chain: Vec<CertificateDer<'static>> = chain.iter().map(|c| CertificateDer::from(c.der().to_vec())).collect();
    // The end-entity certificate must parse as X.509 v3 for rustls; ureq would panic on it.
    let end = chain.first().ok_or_else(|| ClientError::Tls("client-certificate is empty".into()))?;
    rustls::server::ParsedCertificate::try_from(end)
        .map_err(|e| ClientError::Tls(format!("client-certificate is not usable: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key_der)
        .map_err(|e| ClientError::Tls(format!("client-certificate and client-key do not make a pair: {e}")))?;
    Ok(())
}

/// A bearer token; one from a file is re-read every [`TOKEN_TTL`] and after a 401.
struct TokenSource {
    token: Token,
    cached: Mutex<Option<(String, Instant)>>,
}

impl TokenSource {
    fn new(token: Token) -> TokenSource {
        TokenSource { token, cached: Mutex::new(None) }
    }

    fn get(&self) -> Result<String, ApiError> {
        let path = match &self.token {
            Token::Inline(t) => return Ok(t.clone()),
            Token::File(path) => path,
        };
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((token, read)) = cached.as_ref()
            && read.elapsed() < TOKEN_TTL
        {
            return Ok(token.clone());
        }
        let text = input::read_text(path, input::TOKEN)
            .map_err(|e| ApiError::Credentials(format!("reading token file {}: {e}", path.display())))?;
        let token = text.trim().to_string();
        if token.is_empty() {
            return Err(ApiError::Credentials(format!("token file {} is empty", path.display())));
        }
        *cached = Some((token.clone(), Instant::now()));
        Ok(token)
    }

    /// Forgets the cached token, so the next request reads the file again.
    fn expire(&self) {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
