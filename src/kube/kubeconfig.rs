//! Kubeconfig files and in-cluster configuration, read as kube-proxy reads them: one explicit
//! file (no `$KUBECONFIG` merging), its current context's cluster and user, relative paths
//! against the file's directory; `--master` overrides the server. Plugins that run programs
//! (exec, auth-provider) are refused: a node daemon authenticates with a service-account
//! token or a client certificate.

use crate::input::{self, ReadError};
use base64::Engine;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The API server's address and the credentials to use, not yet loaded from disk (files are
/// read when the client is built, and token files again as they rotate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `https://host:port` (or `http://` for a test server).
    pub server: String,
    /// The CA bundle to verify the server with; `None` means the system's roots.
    pub ca: Option<Pem>,
    /// Skip verifying the server's certificate (logged as a warning).
    pub insecure: bool,
    /// The name to verify the server's certificate against, if not the server's host.
    pub tls_server_name: Option<String>,
    /// A client certificate and its key.
    pub client_cert: Option<(Pem, Pem)>,
    /// A bearer token.
    pub token: Option<Token>,
}

/// PEM data, inline or in a file.
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    /// The bytes themselves (from a `*-data` field).
    Data(Vec<u8>),
    /// A file to read.
    File(PathBuf),
}

/// A bearer token, inline or in a file that is re-read as it rotates.
#[derive(Clone, PartialEq, Eq)]
pub enum Token {
    /// The token itself.
    Inline(String),
    /// A file holding it (bound service-account tokens rotate).
    File(PathBuf),
}

// Inline keys and tokens are credentials: a debug print (an assertion, a trace) shows their
// size only.
impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::Data(bytes) => write!(f, "Data({} bytes)", bytes.len()),
            Pem::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Inline(token) => write!(f, "Inline({} bytes)", token.len()),
            Token::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// `url` as it may be shown: without user info (`https://admin:PASSWORD@host` is shown as
/// `https://host`).
pub fn without_userinfo(url: &str) -> String {
    hide_userinfo(url, url)
}

/// `text` with the user info of `url` taken out wherever it is quoted (an HTTP library's
/// error may quote the whole URL).
pub fn hide_userinfo(text: &str, url: &str) -> String {
    // Everything up to the last `@` after the scheme is user info, since a password may hold
    // `/`, `?` or `#` unescaped; a path holding `@` is then shown shortened, which a server
    // URL never needs.
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].rfind('@') {
        Some(at) => text.replace(&url[start..start + at + 1], ""),
        None => text.to_string(),
    }
}

/// Why no client configuration could be made; each names what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum KubeConfigError {
    /// The file could not be read.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (a field not named `source`: the message holds it, and is not repeated as
        /// its cause).
        cause: ReadError,
    },
    /// The file is not a kubeconfig.
    #[error("{path}: not a kubeconfig: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where it is wrong (line, column, field) and how, without the text there.
        message: String,
    },
    /// Something the configuration needs is missing or wrong.
    #[error("{path}: {what}")]
    Invalid {
        /// The file (or `in-cluster`).
        path: PathBuf,
        /// What is wrong, naming the entry.
        what: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct KubeConfig {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default)]
    current_context: String,
}

#[derive(Debug, Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    user: User,
}

#[derive(Debug, Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    #[serde(default)]
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    exec: Option<serde_json::Value>,
    auth_provider: Option<serde_json::Value>,
    username: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Context {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

/// Reads the kubeconfig at `path` for its current context; `master` overrides its server.
pub fn from_kubeconfig(path: &Path, master: Option<&str>) -> Result<ClientConfig, KubeConfigError> {
    let text =
        input::read_text(path, input::KUBECONFIG).map_err(|cause| KubeConfigError::Io { path: path.into(), cause })?;
    let kc = parse(&text).map_err(|message| KubeConfigError::Parse { path: path.into(), message })?;
    let invalid = |what: String| KubeConfigError::Invalid { path: path.into(), what };
    if kc.current_context.is_empty() {
        return Err(invalid("no current-context".into()));
    }
    let context = kc.contexts.iter().find(|c| c.name == kc.current_context).map(|c| &c.context);
    let context = context
        .ok_or_else(|| invalid(format!("current-context {:?} is not among the contexts", kc.current_context)))?;
    let cluster = kc.clusters.iter().find(|c| c.name == context.cluster).map(|c| &c.cluster);
    let cluster = cluster.ok_or_else(|| {
        invalid(format!("context {:?} names cluster {:?}, which is not there", kc.current_context, context.cluster))
    })?;
    let empty = User::default();
    let user: &User = if context.user.is_empty() {
        &empty
    } else {
        kc.users.iter().find(|u| u.name == context.user).map(|u| &u.user).ok_or_else(|| {
            invalid(format!("context {:?} names user {:?}, which is not there", kc.current_context, context.user))
        })?
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let server = master.map(str::to_string).unwrap_or_else(|| cluster.server.clone());
    if server.is_empty() {
        return Err(invalid(format!("cluster {:?} has no server (and no --master was given)", context.cluster)));
    }
    Ok(ClientConfig {
        server,
        ca: pem(dir, &cluster.certificate_authority, &cluster.certificate_authority_data, "certificate-authority")
            .map_err(invalid)?,
        insecure: cluster.insecure_skip_tls_verify,
        tls_server_name: cluster.tls_server_name.clone(),
        client_cert: client_cert(dir, user).map_err(|e| invalid(format!("user {:?}: {e}", context.user)))?,
        token: token(dir, user).map_err(|e| invalid(format!("user {:?}: {e}", context.user)))?,
    })
}

/// The kubeconfig in `text`, or where and how it is wrong: the parser's own message quotes
/// the offending line or value, which is often the token, so it is never shown.
fn parse(text: &str) -> Result<KubeConfig, String> {
    let mut field = String::new();
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            field = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let at = input::yaml_error(&e);
        // `?` stands for a key not yet read (a syntax error where a key was due).
        let field = field.trim_end_matches(".?");
        if field.is_empty() || field == "." || field == "?" { at } else { format!("{at} (in {field})") }
    })
}

/// A PEM field pair (`X` as a file, `X-data` inline in base64); the data wins, as in client-go.
fn pem(dir: &Path, file: &Option<PathBuf>, data: &Option<String>, field: &str) -> Result<Option<Pem>, String> {
    if let Some(data) = data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("{field}-data is not base64 ({})", base64_fault(&e)))?;
        return Ok(Some(Pem::Data(bytes)));
    }
    Ok(file.as_ref().map(|f| Pem::File(dir.join(f))))
}

/// What is wrong with base64 data, without the byte at fault (the data may be a key).
fn base64_fault(e: &base64::DecodeError) -> String {
    use base64::DecodeError as D;
    match e {
        D::InvalidByte(at, _) => format!("an invalid character at offset {at}"),
        D::InvalidLastSymbol(at, _) => format!("an invalid last character at offset {at}"),
        D::InvalidLength(len) => format!("a length of {len}, not one base64 has"),
        D::InvalidPadding => "wrong padding".into(),
    }
}

fn client_cert(dir: &Path, user: &User) -> Result<Option<(Pem, Pem)>, String> {
    if user.exec.is_some() {
        return Err(
            "exec credential plugins are not supported: use a service-account token or a client certificate".into()
        );
    }
    if user.auth_provider.is_some() {
        return Err(
            "auth-provider plugins are not supported: use a service-account token or a client certificate".into()
        );
    }
    if user.username.is_some() {
        return Err("basic authentication (username/password) is not supported".into());
    }
    let cert = pem(dir, &user.client_certificate, &user.client_certificate_data, "client-certificate")?;
    let key = pem(dir, &user.client_key, &user.client_key_data, "client-key")?;
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        (Some(_), None) => Err("has a client certificate but no client key".into()),
        (None, Some(_)) => Err("has a client key but no client certificate".into()),
    }
}

fn token(dir: &Path, user: &User) -> Result<Option<Token>, String> {
    Ok(match (&user.token, &user.token_file) {
        (Some(t), _) if !t.is_empty() => Some(Token::Inline(t.clone())),
        (_, Some(f)) => Some(Token::File(dir.join(f))),
        _ => None,
    })
}

/// The service account's files inside a pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// In-cluster configuration: `KUBERNETES_SERVICE_HOST`/`_PORT` (looked up through `env`) and
/// the service account's token and CA under `dir`. (A node proxy should rather be given a
/// kubeconfig naming the control-plane endpoint: that address is the `kubernetes` Service's
/// ClusterIP, which works only once some proxy has programmed it.)
pub fn in_cluster(env: &dyn Fn(&str) -> Option<String>, dir: &Path) -> Result<ClientConfig, KubeConfigError> {
    let invalid = |what: String| KubeConfigError::Invalid { path: "in-cluster".into(), what };
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).ok_or_else(|| invalid(format!("{name} is not set")));
    let host = var("KUBERNETES_SERVICE_HOST")?;
    let port = var("KUBERNETES_SERVICE_PORT")?;
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    let token = dir.join("token");
    if !token.exists() {
        return Err(invalid(format!("{} does not exist", token.display())));
    }
    Ok(ClientConfig {
        server: format!("https://{host}:{port}"),
        ca: Some(Pem::File(dir.join("ca.crt"))),
        insecure: false,
        tls_server_name: None,
        client_cert: None,
        token: Some(Token::File(token)),
    })
}
