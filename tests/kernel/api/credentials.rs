//! Authentication against the API server: credentials that work, ones that fail with one clear
//! line, and a token rotated on disk picked up.

use super::*;

/// Runs the dry run with `kc`; returns (exit code, stderr).
fn dry_run_status(c: &Cluster, kc: &Path) -> (i32, String) {
    let out = dry_run(&c.node, kc);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn credentials_work_or_fail_with_one_clear_line() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(1, 0);
    let dir = &emu.tls_dir;
    let ca = dir.join("ca.crt");
    // Another emulator: another CA, another client key.
    let foreign = Emulator::start(None, "127.0.0.1:0", None, &[]);
    let foreign_ca = foreign.tls_dir.join("ca.crt");
    // An X.509 version 1 certificate (what `openssl x509 -req` makes without extensions):
    // rustls refuses it, and ureq would panic on it if it were not checked first.
    let (v1_cert, v1_key) = (dir.join("v1.crt"), dir.join("v1.key"));
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let csr = dir.join("v1.csr");
    let (csr_s, key_s, cert_s) = (csr.to_str().unwrap(), v1_key.to_str().unwrap(), v1_cert.to_str().unwrap());
    openssl(&["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key_s, "-subj", "/CN=v1", "-out", csr_s]);
    openssl(&["x509", "-req", "-in", csr_s, "-signkey", key_s, "-out", cert_s, "-days", "2"]);
    let cases: Vec<(&str, Value, &Path, Option<&str>)> = vec![
        (
            "client certificate",
            json!({"client-certificate": dir.join("client.crt"), "client-key": dir.join("client.key")}),
            &ca,
            None,
        ),
        ("token file", json!({"tokenFile": dir.join("token")}), &ca, None),
        ("wrong CA", json!({"tokenFile": dir.join("token")}), &foreign_ca, Some("certificate")),
        ("missing token file", json!({"tokenFile": dir.join("no-such-token")}), &ca, Some("no-such-token")),
        ("wrong token", json!({"token": "not-the-token"}), &ca, Some("Unauthorized")),
        ("no credentials", json!({}), &ca, Some("401")),
        (
            "certificate and key that do not match",
            json!({"client-certificate": dir.join("client.crt"), "client-key": foreign.tls_dir.join("client.key")}),
            &ca,
            Some("do not make a pair"),
        ),
        (
            "an X.509 v1 client certificate",
            json!({"client-certificate": v1_cert, "client-key": v1_key}),
            &ca,
            Some("client-certificate is not usable"),
        ),
        (
            "an unreadable client key",
            json!({"client-certificate": dir.join("client.crt"), "client-key": dir.join("nope.key")}),
            &ca,
            Some("nope.key"),
        ),
    ];
    for (what, user, ca, error) in cases {
        let kc = kubeconfig(dir, &emu, ca, user);
        let (code, stderr) = dry_run_status(&c, &kc);
        match error {
            None => assert_eq!(code, 0, "{what}: {stderr}"),
            Some(needle) => {
                assert_eq!(code, 1, "{what}: exit status {code}: {stderr}");
                let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
                assert_eq!(lines.len(), 1, "{what}: one line expected: {stderr}");
                assert!(stderr.contains(needle), "{what}: {needle:?} not in {stderr}");
            }
        }
    }
    drop(foreign);
}

#[test]
fn a_token_rotated_on_disk_is_picked_up() {
    if !kernel_available() {
        return;
    }
    let (c, emu) = serving_web(2, 0);
    let kc = emu.tls_dir.join("kubeconfig-token");
    let d = Daemon::start_api(&c.node, &kc, &[], &[]);
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());
    // The token rotates: the server accepts only the new one, the file holds it, and the
    // open watches end; the daemon's next requests must use the new token.
    std::fs::write(emu.tls_dir.join("token"), "rotated-token-0123456789\n").unwrap();
    emu.fault(&json!({"drop": "reset"}));
    emu.apply(&Value::Array(web(&c, &["pod-2"])));
    let moved = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-2");
    assert!(moved.is_some(), "the rotated token was not picked up:\n{}", d.logged());
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}
