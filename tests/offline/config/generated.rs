//! What packages install beside the binary, generated from its own command line: the man
//! page, rendered by `man`, and the shells' completions, bash's loaded and asked.

use super::*;

/// `kube-nftproxy --generate WHAT`'s output, which must succeed.
fn generated(what: &str) -> String {
    let out = binary(&["--generate", what]);
    assert!(out.status.success(), "--generate {what}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_man_page_renders_with_each_command_and_the_exit_statuses() {
    let dir = std::env::temp_dir().join(format!("knp-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("kube-nftproxy.8");
    std::fs::write(&page, generated("man")).unwrap();
    let out = Command::new("man").arg("-l").arg(&page).env("MANWIDTH", "100").env("MAN_KEEP_FORMATTING", "0").output();
    std::fs::remove_dir_all(&dir).ok();
    let out = out.expect("man (man-db) is installed by tests/run");
    let text = crate::common::without_overstrikes(&String::from_utf8_lossy(&out.stdout));
    for section in ["NAME", "SYNOPSIS", "OPTIONS", "COMMANDS", "EXIT STATUS"] {
        assert!(text.lines().any(|l| l == section), "no {section} section:\n{text}");
    }
    for said in ["kube-nftproxy explain", "kube-nftproxy trace", "--cluster-cidr", "--dry-run --diff", "no difference"]
    {
        assert!(text.contains(said), "the page lacks {said:?}:\n{text}");
    }
}

#[test]
fn bash_completes_commands_and_their_flags_and_the_other_shells_name_them() {
    let script = generated("bash");
    let complete = |words: &[&str]| {
        let words = words.join(" ");
        let run = format!(
            "{script}\nCOMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             f=$(complete -p kube-nftproxy | sed 's/.*-F \\([^ ]*\\).*/\\1/'); \
             $f kube-nftproxy \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; echo \"${{COMPREPLY[@]}}\""
        );
        let out = Command::new("bash").arg("-c").arg(run).output().expect("bash");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(complete(&["kube-nftproxy", "ex"]), "explain");
    assert_eq!(complete(&["kube-nftproxy", "explain", "--fr"]), "--from");
    assert_eq!(complete(&["kube-nftproxy", "trace", "--protocol", "u"]), "udp");
    assert!(complete(&["kube-nftproxy", "--cluster-c"]).contains("--cluster-cidr"));
    for shell in ["zsh", "fish"] {
        let text = generated(shell);
        assert!(text.contains("explain") && text.contains("trace") && text.contains("cluster-cidr"), "{shell}");
    }
}
