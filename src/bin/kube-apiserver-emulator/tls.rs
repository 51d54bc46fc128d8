//! The TLS directory: a CA, server and client certificates, a bearer token and two kubeconfigs,
//! generated when missing and reused when present; and the rustls server configuration.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The CA's common name; a CA found on disk is re-described with it to sign missing files.
const CA_NAME: &str = "kube-apiserver-emulator-ca";

/// Why the TLS directory or configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// Certificate generation.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// Loading PEM.
    #[error("{0}: {1}")]
    Pem(PathBuf, rustls::pki_types::pem::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// Makes sure `dir` holds every file, creating the missing ones.
pub fn ensure_dir(dir: &Path, listen: SocketAddr, sans: &[String]) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| TlsError::Io(dir.to_path_buf(), e))?;
    let ca_key = key(dir, "ca.key")?;
    let ca_params = ca_params();
    if !dir.join("ca.crt").exists() {
        write(dir, "ca.crt", &ca_params.self_signed(&ca_key)?.pem())?;
    }
    let issuer = Issuer::new(ca_params, ca_key);
    if !dir.join("server.crt").exists() {
        let mut names: Vec<String> =
            vec![listen.ip().to_string(), "127.0.0.1".into(), "::1".into(), "localhost".into()];
        names.extend(sans.iter().cloned());
        names.dedup();
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = names.iter().map(|n| san(n)).collect::<Result<_, _>>()?;
        params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = key(dir, "server.key")?;
        write(dir, "server.crt", &params.signed_by(&server_key, &issuer)?.pem())?;
    }
    if !dir.join("client.crt").exists() {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "system:kube-proxy");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = key(dir, "client.key")?;
        write(dir, "client.crt", &params.signed_by(&client_key, &issuer)?.pem())?;
    }
    if !dir.join("token").exists() {
        let token: String = std::iter::repeat_with(fastrand::alphanumeric).take(32).collect();
        write(dir, "token", &format!("{token}\n"))?;
    }
    let server = url_host(listen);
    for (file, user) in [
        ("kubeconfig", "    client-certificate: client.crt\n    client-key: client.key\n"),
        ("kubeconfig-token", "    tokenFile: token\n"),
    ] {
        if !dir.join(file).exists() {
            write(dir, file, &kubeconfig(&server, user))?;
        }
    }
    Ok(())
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

fn san(name: &str) -> Result<SanType, rcgen::Error> {
    match name.parse() {
        Ok(ip) => Ok(SanType::IpAddress(ip)),
        Err(_) => Ok(SanType::DnsName(name.to_string().try_into()?)),
    }
}

/// `host:port` for a URL, IPv6 bracketed.
pub fn url_host(addr: SocketAddr) -> String {
    addr.to_string()
}

fn kubeconfig(server: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: https://{server}\n    certificate-authority: ca.crt\nusers:\n- name: emulator\n  user:\n{user}contexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: emulator\ncurrent-context: emulator\n"
    )
}

/// Loads `dir/name` as a key pair, generating and writing it first if missing.
fn key(dir: &Path, name: &str) -> Result<KeyPair, TlsError> {
    let path = dir.join(name);
    if path.exists() {
        let text = std::fs::read_to_string(&path).map_err(|e| TlsError::Io(path.clone(), e))?;
        return Ok(KeyPair::from_pem(&text)?);
    }
    let pair = KeyPair::generate()?;
    write(dir, name, &pair.serialize_pem())?;
    Ok(pair)
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), TlsError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| TlsError::Io(path, e))
}

/// The server configuration: our certificate, client certificates optional but verified
/// against `ca.crt`, ALPN `http/1.1` only so Go clients do not try HTTP/2.
pub fn server_config(dir: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let pem_err = |p: &Path| {
        let p = p.to_path_buf();
        move |e| TlsError::Pem(p, e)
    };
    let (ca, crt, key) = (dir.join("ca.crt"), dir.join("server.crt"), dir.join("server.key"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&ca).map_err(pem_err(&ca))? {
        roots.add(cert.map_err(pem_err(&ca))?).map_err(|e| TlsError::Rustls(e.to_string()))?;
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(&crt).map_err(pem_err(&crt))?.collect::<Result<_, _>>().map_err(pem_err(&crt))?;
    let private = PrivateKeyDer::from_pem_file(&key).map_err(pem_err(&key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, private)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Bearer tokens, one per line of a file that is re-read on every check (tests rotate it).
pub struct Tokens {
    /// The token file.
    pub path: PathBuf,
}

impl Tokens {
    /// Whether `token` is a line of the file now.
    pub fn accepts(&self, token: &str) -> bool {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        !token.is_empty() && text.lines().any(|l| l.trim() == token)
    }
}
