//! Kubeconfig files and in-cluster configuration: what the client is told to use, and a
//! clear error naming the entry for everything it cannot use.

mod common;

use common::Scratch;
use kube_nftproxy::kube::{ClientConfig, Pem, Token, from_kubeconfig, in_cluster};

/// A kubeconfig with contexts `a` (cluster `one`, user `certs`) and `b` (cluster `two`, user
/// given by `user_b`), current context `current`.
fn kubeconfig(current: &str, user_b: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {current}\n\
         clusters:\n\
         - name: one\n  cluster: {{server: 'https://10.0.0.1:6443', certificate-authority: pki/ca.crt}}\n\
         - name: two\n  cluster: {{server: 'https://cp.example:6443', certificate-authority-data: aGVsbG8=, tls-server-name: kubernetes}}\n\
         - name: three\n  cluster: {{server: 'https://10.0.0.3:6443', insecure-skip-tls-verify: true}}\n\
         users:\n\
         - name: certs\n  user: {{client-certificate: pki/proxy.crt, client-key: /abs/proxy.key}}\n\
         - name: token-file\n  user: {{tokenFile: /var/run/secrets/tok}}\n\
         - name: plugin\n  user: {{exec: {{command: aws, apiVersion: client.authentication.k8s.io/v1}}}}\n\
         - name: provider\n  user: {{auth-provider: {{name: gcp}}}}\n\
         - name: half\n  user: {{client-certificate-data: aGVsbG8=}}\n\
         contexts:\n\
         - name: a\n  context: {{cluster: one, user: certs}}\n\
         - name: b\n  context: {{cluster: two, user: {user_b}}}\n\
         - name: c\n  context: {{cluster: three, user: token-file}}\n"
    )
}

fn load(text: &str, master: Option<&str>) -> Result<ClientConfig, String> {
    let dir = Scratch::new("kubeconfig");
    dir.write("kubeconfig", text);
    from_kubeconfig(&dir.0.join("kubeconfig"), master)
        .map_err(|e| e.to_string().replace(&dir.0.display().to_string(), "DIR"))
}

#[test]
fn the_current_context_picks_cluster_and_user_and_paths_resolve_against_the_file() {
    let dir = Scratch::new("kubeconfig-paths");
    dir.write("kubeconfig", &kubeconfig("a", "token-file"));
    let cfg = from_kubeconfig(&dir.0.join("kubeconfig"), None).unwrap();
    assert_eq!(cfg.server, "https://10.0.0.1:6443");
    assert_eq!(cfg.ca, Some(Pem::File(dir.0.join("pki/ca.crt"))));
    assert_eq!(cfg.client_cert, Some((Pem::File(dir.0.join("pki/proxy.crt")), Pem::File("/abs/proxy.key".into()))));
    assert_eq!(cfg.token, None);
    assert!(!cfg.insecure);
}

#[test]
fn inline_data_token_files_and_master() {
    let cfg = load(&kubeconfig("b", "token-file"), Some("https://192.168.1.10:6443")).unwrap();
    assert_eq!(cfg.server, "https://192.168.1.10:6443", "--master overrides the server");
    assert_eq!(cfg.ca, Some(Pem::Data(b"hello".to_vec())));
    assert_eq!(cfg.tls_server_name.as_deref(), Some("kubernetes"));
    assert_eq!(cfg.token, Some(Token::File("/var/run/secrets/tok".into())));
    let cfg = load(&kubeconfig("c", "token-file"), None).unwrap();
    assert!(cfg.insecure);
}

#[test]
fn what_cannot_be_used_is_an_error_naming_it() {
    let cases = [
        (kubeconfig("b", "plugin"), "user \"plugin\": exec credential plugins are not supported"),
        (kubeconfig("b", "provider"), "user \"provider\": auth-provider plugins are not supported"),
        (kubeconfig("b", "half"), "user \"half\": has a client certificate but no client key"),
        (kubeconfig("b", "nobody"), "names user \"nobody\", which is not there"),
        (kubeconfig("z", "certs"), "current-context \"z\" is not among the contexts"),
        (kubeconfig("a", "certs").replace("current-context: a\n", ""), "no current-context"),
        (kubeconfig("b", "certs").replace("aGVsbG8=", "not*base64"), "certificate-authority-data is not base64"),
        ("clusters: 5\n".to_string(), "not a kubeconfig"),
    ];
    for (text, want) in cases {
        let err = load(&text, None).expect_err(want);
        assert!(err.starts_with("DIR/kubeconfig: ") && err.contains(want), "{want}: {err}");
    }
    let missing = from_kubeconfig(std::path::Path::new("/nonexistent/kubeconfig"), None).unwrap_err();
    assert!(missing.to_string().starts_with("/nonexistent/kubeconfig: "), "{missing}");
}

#[test]
fn in_cluster_configuration_comes_from_the_environment_and_the_service_account() {
    let dir = Scratch::new("in-cluster");
    dir.write("token", "t0");
    let env = |v4: bool| {
        move |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some(if v4 { "10.96.0.1" } else { "fd00::1" }.to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        }
    };
    let cfg = in_cluster(&env(true), &dir.0).unwrap();
    assert_eq!(cfg.server, "https://10.96.0.1:443");
    assert_eq!(cfg.ca, Some(Pem::File(dir.0.join("ca.crt"))));
    assert_eq!(cfg.token, Some(Token::File(dir.0.join("token"))));
    assert_eq!(in_cluster(&env(false), &dir.0).unwrap().server, "https://[fd00::1]:443");
    let err = in_cluster(&|_| None, &dir.0).unwrap_err().to_string();
    assert!(err.contains("KUBERNETES_SERVICE_HOST is not set"), "{err}");
    dir.remove("token");
    let err = in_cluster(&env(true), &dir.0).unwrap_err().to_string();
    assert!(err.contains("token does not exist"), "{err}");
}
