//! What the binary itself says and writes: the file's faults as printed, `--help` and
//! `--version`, `--write-config-to` read back and to a FIFO, JSON logs, a content type refused
//! at start.

use super::*;

#[test]
fn the_binary_takes_the_file_and_says_what_is_wrong_with_it() {
    let cluster = crate::common::root().join("examples/cluster");
    let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: node-a\n\
                mode: nftables\nnftables: {masqueradeBit: 3}\nfrobnicate: 1\n";
    let good = file("binary", text);
    let out = binary(&["--config", good.to_str().unwrap(), "--dry-run", "--manifests", cluster.to_str().unwrap()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("meta mark set meta mark or 0x8"),
        "the file's masquerade bit is not in the ruleset:\n{stdout}"
    );
    assert!(
        stderr.contains("WARN") && stderr.contains("\"frobnicate\""),
        "the unknown field is not warned about: {stderr}"
    );
    let bad = file(
        "binary-bad",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nnftables: {masqueradeBit: 99}\n",
    );
    let out = binary(&["--config", bad.to_str().unwrap(), "--dry-run", "--manifests", cluster.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "an invalid file is bad input");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nftables.masqueradeBit"));
}

#[test]
fn help_is_grouped_and_version_says_how_it_was_built() {
    let help = String::from_utf8(binary(&["--help"]).stdout).unwrap();
    for heading in [
        "Where Services and Endpoints come from:",
        "This node:",
        "Rules and syncing:",
        "Health and metrics:",
        "Conntrack:",
        "Start, stop and clean up:",
        "Logging:",
    ] {
        assert!(help.contains(heading), "--help lacks {heading:?}:\n{help}");
    }
    for flag in [
        "--config",
        "--hostname-override",
        "--detect-local-mode",
        "--masquerade-all",
        "--conntrack-min",
        "--oom-score-adj",
        "--proxy-mode",
        "--v <N>",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
    let version = String::from_utf8(binary(&["--version"]).stdout).unwrap();
    let want = format!("kube-nftproxy {}\ncommit: ", env!("CARGO_PKG_VERSION"));
    assert!(
        version.starts_with(&want) && version.contains("built by: rustc ") && version.contains("target: x86_64"),
        "{version}"
    );
}

#[test]
fn each_command_has_its_own_help_and_commands_that_are_not_the_daemon_say_nothing_of_it() {
    for command in ["explain", "trace"] {
        for args in [vec![command, "--help"], vec!["help", command]] {
            let out = binary(&args);
            let help = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{args:?}: {out:?}");
            assert!(help.contains(&format!("Usage: kube-nftproxy {command} [OPTIONS]")), "{args:?}:\n{help}");
            assert!(help.contains("--from <SRC>") && help.contains("--manifests <PATH>"), "{args:?}:\n{help}");
            assert!(!help.contains("--masquerade-all") && !help.contains("--conntrack-min"), "{args:?}:\n{help}");
        }
    }
    let top = String::from_utf8(binary(&["help"]).stdout).unwrap();
    assert!(top.contains("Commands:\n  explain  ") && top.contains("\n  trace    "), "{top}");
    // Not the daemon: no note on how it would serve (the mode left unset), before or
    // instead of what the command says.
    let out = binary(&["explain"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("explain needs --from") && !said.contains("proxy mode"), "{said}");
    let out = binary(&["--dry-run", "--manifests", "examples/cluster", "--hostname-override", "node-a"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("proxy mode"), "{said}");
}

#[test]
fn write_config_to_writes_what_reads_back_the_same() {
    let dir = Scratch::new("config-write");
    let written = dir.path("written.yaml");
    let cluster = crate::common::root().join("examples/cluster");
    let mut args = vec![
        "--proxy-mode=nftables",
        "--iptables-masquerade-bit=5",
        "--masquerade-all",
        "--iptables-sync-period=45s",
        "--cluster-cidr=10.0.0.0/8,fd00:10::/48",
        "--feature-gates=ComponentFlagz=true",
        "--kube-api-qps=7.5",
        "--hostname-override=node-a",
        "--conntrack-min=7",
        "--full-sync-period=2h",
        "-v=4",
        "--ipvs-scheduler=sh",
    ];
    let mut first = args.clone();
    first.push(format!("--write-config-to={}", written.display()).leak());
    let out = binary(&first);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.contains("kind: KubeProxyConfiguration") && text.contains("kubeNftproxy:"), "{text}");
    let (direct, _) = config::load_from(argv(&args)).unwrap();
    let (read_back, notes) = load_notes(&written, &[]).unwrap();
    assert!(notes.unknown_fields.is_empty() && notes.warnings.is_empty(), "{notes:?}");
    assert_eq!(config::effective(&read_back), config::effective(&direct));
    // And the same dry run.
    args.extend(["--dry-run", "--manifests", cluster.to_str().unwrap()]);
    let config = format!("--config={}", written.display());
    let from_file = ["--dry-run", "--manifests", cluster.to_str().unwrap(), config.as_str()];
    let (a, b) = (binary(&args), binary(&from_file));
    assert!(a.status.success() && b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert!(String::from_utf8_lossy(&a.stdout).contains("0x20"), "the masquerade bit 5 is in the ruleset");
    assert_eq!(String::from_utf8_lossy(&a.stdout), String::from_utf8_lossy(&b.stdout));
}

#[test]
fn logging_format_json_writes_one_object_a_line_fatal_errors_too() {
    let cluster = crate::common::root().join("examples/cluster");
    let parsed = |out: &std::process::Output| -> Vec<serde_json::Value> {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> =
            stderr.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
        assert!(!lines.is_empty(), "nothing logged");
        lines
    };
    // --profiling: a flag that logs (it has no effect here).
    let args = ["--dry-run", "--hostname-override=node-a", "--logging-format=json", "--v=4", "--profiling"];
    let run = binary(&[&args[..], &["--manifests", cluster.to_str().unwrap()]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    for line in parsed(&run) {
        assert!(line["ts"].is_f64() && line["msg"].is_string() && line["v"].is_u64(), "klog's keys: {line}");
    }
    // In the file too, and the error the binary ends with is a line of its own.
    let file = with("json-logs", "logging: {format: json}\nclusterCIDR: 10.0.0.0/8");
    let config = format!("--config={}", file.display());
    let failed = binary(&["--dry-run", "--hostname-override=node-a", &config, "--manifests", "/nonexistent/manifests"]);
    assert_eq!(failed.status.code(), Some(2), "{}", String::from_utf8_lossy(&failed.stderr));
    let last = parsed(&failed).pop().expect("a line");
    assert!(
        last["msg"].as_str().is_some_and(|m| m.contains("/nonexistent/manifests")) && last.get("v").is_none(),
        "{last}"
    );
}

#[test]
fn an_unknown_api_content_type_is_refused_at_start_with_no_api_server_to_ask() {
    let cluster = crate::common::root().join("examples/cluster");
    let base = ["--dry-run", "--hostname-override=node-a", "--manifests", cluster.to_str().unwrap()];
    let file = with("content-type", "clientConnection: {contentType: application/yaml}");
    let config = format!("--config={}", file.display());
    for extra in [&["--kube-api-content-type=application/yaml"][..], &[&config]] {
        let out = binary(&[&base[..], extra].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("--kube-api-content-type: content type \"application/yaml\" is not supported"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{extra:?}: a script was printed before the refusal");
    }
    let json = binary(&[&base[..], &["--kube-api-content-type=application/json; charset=utf-8"]].concat());
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
}

/// Runs the binary with `args`, its output kept; `None` (and killed) when it is still running
/// after `within`.
fn binary_within(args: &[&str], within: Duration) -> Option<std::process::Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child.wait_with_output().unwrap())
}

/// Issue 34: `--write-config-to` a FIFO no one reads is an error naming it within seconds,
/// not a hang; a reader that opens it a moment late gets the configuration, and so does
/// `/dev/stdout`.
#[test]
fn write_config_to_a_fifo_without_a_reader_fails_within_seconds() {
    let dir = Scratch::new("config-fifo");
    let fifo = dir.path("config.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let to = format!("--write-config-to={}", fifo.display());
    let args = ["--hostname-override=node-a", to.as_str()];
    let out = binary_within(&args, Duration::from_secs(15)).expect("exits rather than waits for a reader");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&fifo.display().to_string()) && err.contains("no reader opened the FIFO"), "{err}");
    // A reader that comes while the binary waits; `timeout` ends it should no writer come.
    let owned = args.map(String::from);
    let late =
        std::thread::spawn(move || binary_within(&owned.each_ref().map(String::as_str), Duration::from_secs(15)));
    std::thread::sleep(Duration::from_millis(300));
    let reader = Command::new("timeout").arg("10").arg("cat").arg(&fifo).output().unwrap();
    let out = late.join().unwrap().expect("exits once read");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&reader.stdout).contains("kind: KubeProxyConfiguration"), "{reader:?}");
    let out = binary_within(&["--hostname-override=node-a", "--write-config-to=/dev/stdout"], Duration::from_secs(15));
    let out = out.expect("exits");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("kind: KubeProxyConfiguration"));
}

#[test]
fn trace_refuses_a_bad_selection_naming_the_flag_before_touching_the_kernel() {
    for (args, flag) in [
        (&["--to", "web:80"][..], "--to"),
        (&["--from", "10.0.0.1:0"][..], "--from"),
        (&["--from", "10.0.0.1", "--to", "[fd00::1]:80"][..], "different address families"),
    ] {
        let out = binary(&[&["trace", "--hostname-override=node-a"][..], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag) && !stderr.contains("tracing"), "{args:?}: {stderr}");
    }
    let out = binary(&["trace", "--protocol", "icmp"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses the protocol");
    let out = binary(&["explain", "--from", "node", "--to", "10.0.0.1:80", "--count", "3"]);
    assert_eq!(out.status.code(), Some(2), "--count is trace's");
}
