//! Kubeconfig files and in-cluster configuration: what the client is told to use, and a
//! clear error naming the entry for everything it cannot use; every input file (these, the
//! files they name, and the `--config` file) read only when regular and bounded, and no
//! credential in any error.

use crate::common::emulator::Emulator;
use crate::common::{Scratch, inputs};
use kube_nftproxy::kube::{ClientConfig, Pem, Token, from_kubeconfig, in_cluster};
use std::path::Path;
use std::time::Duration;

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

/// A kubeconfig for `server` whose cluster and user hold the lines `cluster` and `user` (the
/// user's first line is line 14).
fn closed_port(server: &str, cluster: &str, user: &str) -> String {
    let user = if user.is_empty() { " {}\n".to_string() } else { format!("\n{user}") };
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
         clusters:\n- name: one\n  cluster:\n    server: {server}\n{cluster}\
         contexts:\n- name: a\n  context: {{cluster: one, user: u}}\n\
         users:\n- name: u\n  user:{user}"
    )
}

#[test]
fn the_kubeconfig_and_the_files_it_names_are_read_only_when_regular_and_bounded() {
    use kube_nftproxy::input::{KUBECONFIG, PEM, TOKEN};
    let dir = Scratch::new("hostile-kubeconfig");
    let pair = rcgen::generate_simple_self_signed(vec!["a.example".to_string()]).unwrap();
    dir.write("cert.pem", &pair.cert.pem());
    let cert = dir.0.join("cert.pem");
    let (http, https) = ("http://127.0.0.1:1", "https://127.0.0.1:1");
    // Each place a file is named: how the kubeconfig names it, and the most it may hold.
    type Slot<'a> = (&'a str, u64, &'a dyn Fn(&Path) -> Option<String>);
    let slots: [Slot; 5] = [
        ("--kubeconfig", KUBECONFIG.max, &|_| None),
        ("tokenFile", TOKEN.max, &|p| Some(closed_port(http, "", &format!("    tokenFile: {}\n", p.display())))),
        ("certificate-authority", PEM.max, &|p| {
            Some(closed_port(https, &format!("    certificate-authority: {}\n", p.display()), ""))
        }),
        ("client-certificate", PEM.max, &|p| {
            let user = format!("    client-certificate: {}\n    client-key: {}\n", p.display(), cert.display());
            Some(closed_port(https, "", &user))
        }),
        ("client-key", PEM.max, &|p| {
            let user = format!("    client-certificate: {}\n    client-key: {}\n", cert.display(), p.display());
            Some(closed_port(https, "", &user))
        }),
    ];
    let mut complaints = Vec::new();
    for (what, max, kubeconfig) in slots {
        for planted in inputs::hostile(&dir.0, what, max) {
            let path = match kubeconfig(&planted.path) {
                Some(text) => {
                    dir.write("kubeconfig", &text);
                    dir.0.join("kubeconfig")
                }
                None => planted.path.clone(),
            };
            let ran = inputs::dry_run(&dir.0, &["--kubeconfig", path.to_str().unwrap()]);
            complaints.extend(inputs::complaint(&ran, &planted, what));
        }
    }
    inputs::assert_none(&complaints);
}

#[test]
fn the_config_file_and_the_kubeconfig_it_names_are_read_only_when_regular_and_bounded() {
    use kube_nftproxy::input::{CONFIG, KUBECONFIG};
    let dir = Scratch::new("hostile-config");
    let mut complaints = Vec::new();
    for planted in inputs::hostile(&dir.0, "config", CONFIG.max) {
        let ran = inputs::dry_run(&dir.0, &["--config", planted.path.to_str().unwrap()]);
        complaints.extend(inputs::complaint(&ran, &planted, "--config"));
    }
    for planted in inputs::hostile(&dir.0, "kubeconfig", KUBECONFIG.max) {
        let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
        dir.write("config.yaml", &format!("{head}clientConnection: {{kubeconfig: {}}}\n", planted.path.display()));
        let ran = inputs::dry_run(&dir.0, &["--config", dir.0.join("config.yaml").to_str().unwrap()]);
        complaints.extend(inputs::complaint(&ran, &planted, "clientConnection.kubeconfig"));
    }
    inputs::assert_none(&complaints);
}

/// Runs `f` on a thread and waits at most [`inputs::HUNG`] for its answer.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(inputs::HUNG).ok()
}

#[test]
fn the_in_cluster_token_and_ca_are_read_only_when_regular_and_bounded() {
    use kube_nftproxy::input::{PEM, TOKEN};
    use kube_nftproxy::kube::Client;
    let env = |name: &str| match name {
        "KUBERNETES_SERVICE_HOST" => Some("127.0.0.1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("1".to_string()),
        _ => None,
    };
    let pair = rcgen::generate_simple_self_signed(vec!["a.example".to_string()]).unwrap();
    let mut complaints = Vec::new();
    for (which, max) in [("token", TOKEN.max), ("ca.crt", PEM.max)] {
        let dir = Scratch::new("hostile-in-cluster");
        let hostile = Scratch::new("hostile-in-cluster-files");
        for planted in inputs::hostile(&hostile.0, which, max) {
            // The last round's link is replaced, not written through (to a FIFO nobody reads).
            for name in ["token", "ca.crt"] {
                let _ = std::fs::remove_file(dir.0.join(name));
            }
            dir.write("token", "t0");
            dir.write("ca.crt", &pair.cert.pem());
            dir.remove(which);
            std::os::unix::fs::symlink(&planted.path, dir.0.join(which)).unwrap();
            let cfg = in_cluster(&env, &dir.0).unwrap();
            let said = within(move || match Client::new(&cfg) {
                Err(e) => e.to_string(),
                Ok(client) => {
                    client.get("/api", Duration::from_secs(1), None).err().map(|e| e.to_string()).unwrap_or_default()
                }
            });
            let said = said.unwrap_or_else(|| format!("still reading after {:?}", inputs::HUNG));
            let named = said.contains(&dir.0.join(which).display().to_string());
            if !named || !said.contains(planted.expect) {
                complaints.push(format!("in-cluster {which} as {}: {said}", planted.label));
            }
        }
    }
    inputs::assert_none(&complaints);
}

#[test]
fn a_normal_kubeconfig_and_a_kubelet_projected_token_still_work() {
    let examples = crate::common::root().join("examples/cluster");
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&examples), &[]);
    let dir = Scratch::new("projected");
    // kubelet's projected volume: `token` links into `..data`, a link to a timestamped
    // directory of regular files, swapped atomically as the token rotates.
    let stamped = dir.0.join("..2026_11_26_15_00_00.123456789");
    std::fs::create_dir(&stamped).unwrap();
    std::fs::copy(emu.tls_dir.join("token"), stamped.join("token")).unwrap();
    std::os::unix::fs::symlink(stamped.file_name().unwrap(), dir.0.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/token", dir.0.join("token")).unwrap();
    let ca = format!("    certificate-authority: {}\n", emu.tls_dir.join("ca.crt").display());
    dir.write(
        "kubeconfig",
        &closed_port(&emu.api, &ca, &format!("    tokenFile: {}\n", dir.0.join("token").display())),
    );
    let ran = inputs::dry_run(&dir.0, &["--kubeconfig", dir.0.join("kubeconfig").to_str().unwrap()]);
    assert!(ran.status.is_some_and(|s| s.success()), "{}", ran.output);
    assert!(ran.output.contains("service-ips"), "no ruleset: {}", ran.output);
}

#[test]
fn not_even_a_trace_log_dumps_a_request_with_its_token() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &[]);
    let dir = Scratch::new("trace");
    let token = std::fs::read_to_string(emu.tls_dir.join("token")).unwrap();
    // A directive naming the module itself wins over a general one in env_logger.
    for asked in ["trace", "trace,ureq_proto=trace,ureq_proto::util=trace"] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"));
        cmd.args(["--dry-run", "--hostname-override", "node-a", "--kubeconfig"]);
        cmd.arg(emu.tls_dir.join("kubeconfig-token")).env("RUST_LOG", asked);
        let ran = inputs::run_within(cmd, &dir.0);
        assert!(ran.status.is_some_and(|s| s.success()), "{}", ran.output);
        assert!(ran.output.contains("TRACE"), "not a trace log: {}", ran.output);
        // ureq_proto's trace shows each byte sent, sixteen to a line.
        let dumped = ran.output.lines().filter(|l| l.contains("ureq_proto")).count();
        let leaked = dumped > 0 || ran.output.contains(token.trim());
        assert!(!leaked, "RUST_LOG={asked}: {dumped} lines of ureq_proto: {}", ran.output);
    }
}

/// Kubeconfigs whose token sits where the parser stops, and the line it stops on.
fn leaky_kubeconfigs() -> Vec<(&'static str, String, usize)> {
    const T: &str = "SECRET-0123456789";
    let user = |lines: &str| closed_port("http://127.0.0.1:1", "", lines);
    vec![
        ("a token of the wrong type", user(&format!("    token: [{T}]\n")), 14),
        ("a user that is a string", user("").replace("  user: {}\n", &format!("  user: \"{T}\"\n")), 13),
        ("a syntax error on the token line", user(&format!("    token: {T}: x\n")), 14),
        ("a duplicate token key", user(&format!("    token: {T}\n    token: {T}\n")), 15),
        ("an unterminated quote", user(&format!("    token: \"{T}\n")), 14),
    ]
}

#[test]
fn a_kubeconfig_that_does_not_parse_is_told_by_place_never_by_its_text() {
    let dir = Scratch::new("leaky");
    let mut complaints = Vec::new();
    for (what, text, line) in leaky_kubeconfigs() {
        dir.write("kubeconfig", &text);
        let path = dir.0.join("kubeconfig");
        let ran = inputs::dry_run(&dir.0, &["--kubeconfig", path.to_str().unwrap()]);
        let place = format!("{}: not a kubeconfig: line {line}, column ", path.display());
        let leaked = ran.output.contains("SECRET") || ran.output.contains("0123456789");
        if ran.status.is_none_or(|s| s.success()) || leaked || !ran.output.contains(&place) {
            complaints.push(format!("{what}: not only {place:?}: {}", ran.output));
        }
    }
    inputs::assert_none(&complaints);
}

#[test]
fn a_server_url_is_never_shown_with_its_user_info() {
    let dir = Scratch::new("userinfo");
    let server = "https://admin:PASSWORD-0123456789@127.0.0.1:1";
    dir.write("kubeconfig", &closed_port(server, "", "    token: t0\n"));
    let kubeconfig = dir.0.join("kubeconfig");
    // A URL the HTTP library refuses is quoted whole in its error.
    let unschemed = "//admin:PASSWORD-0123456789@127.0.0.1:1";
    for args in
        [vec!["--kubeconfig", kubeconfig.to_str().unwrap()], vec!["--master", server], vec!["--master", unschemed]]
    {
        let ran = inputs::dry_run(&dir.0, &args);
        assert!(ran.status.is_some_and(|s| !s.success()), "{args:?}: {}", ran.output);
        assert!(!ran.output.contains("PASSWORD") && !ran.output.contains("admin"), "{args:?}: {}", ran.output);
        assert!(ran.output.contains("127.0.0.1:1: "), "{args:?}: the server is not named: {}", ran.output);
    }
    let cfg = from_kubeconfig(&kubeconfig, None).unwrap();
    assert_eq!(kube_nftproxy::kube::Client::new(&cfg).unwrap().server(), "https://127.0.0.1:1");
    for (url, shown) in [
        ("https://admin:p/a?s#s@10.0.0.1:6443/", "https://10.0.0.1:6443/"),
        ("http://u@[fd00::1]:8080", "http://[fd00::1]:8080"),
        ("admin:pw@cp.example:6443", "cp.example:6443"),
        ("https://cp.example:6443", "https://cp.example:6443"),
    ] {
        assert_eq!(kube_nftproxy::kube::without_userinfo(url), shown);
    }
}
