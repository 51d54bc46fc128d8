//! Hosts laid out as upstream components leave them (`tests/kube-proxy-layouts/`): loading
//! a layout with or without kube-proxy's lines, and reading back everything in a namespace
//! so two hosts can be compared rule for rule.

use super::{Netns, kernel_available, root};
use std::process::{Command, Stdio};

/// Whether `iptables-nft` is here too (`tests/run` installs it); in CI its absence fails.
pub fn iptables_available() -> bool {
    if !kernel_available() {
        return false;
    }
    let ok = Command::new("iptables-nft-restore").arg("--version").stdout(Stdio::null()).status();
    if matches!(ok, Ok(s) if s.success()) {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "kube-proxy layout tests cannot run in CI: iptables-nft is missing");
    eprintln!("SKIPPING kube-proxy layout test: iptables-nft is missing (apt-get install iptables)");
    false
}

/// Whether `ipset` and `iptables-legacy` are here too (`tests/run` installs them), for the
/// IPVS layouts; in CI their absence fails.
pub fn ipvs_tools_available() -> bool {
    if !iptables_available() {
        return false;
    }
    let ok = |tool: &str| {
        let status = Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
        matches!(status, Ok(s) if s.success())
    };
    if ok("ipset") && ok("iptables-legacy-restore") {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "IPVS layout tests cannot run in CI: ipset or iptables-legacy is missing"
    );
    eprintln!("SKIPPING IPVS layout test: ipset or iptables-legacy is missing (apt-get install ipset iptables)");
    false
}

/// A layout file's text: kube-proxy's lines (prefix `P `) with the prefix cut, or left out.
pub fn layout(file: &str, with_kube_proxy: bool) -> String {
    let path = root().join("tests/kube-proxy-layouts").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = String::new();
    for line in text.lines() {
        match line.strip_prefix("P ") {
            Some(rest) if with_kube_proxy => out.push_str(rest),
            Some(_) => continue,
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Loads the layout files into `ns`, in order: `.rules` with `iptables-nft-restore --noflush`
/// (the `ip6` one for names with a `6`, the legacy one for names with `legacy`), `.nft` with
/// `nft -f`, `.ipset` with `ipset restore`.
pub fn load(ns: &Netns, files: &[&str], with_kube_proxy: bool) {
    for file in files {
        let text = layout(file, with_kube_proxy);
        let tool = match file {
            f if f.ends_with(".nft") => "nft",
            f if f.ends_with(".ipset") => "ipset",
            f if f.contains("legacy") => "iptables-legacy-restore",
            f if f.contains('6') => "ip6tables-nft-restore",
            _ => "iptables-nft-restore",
        };
        let out = match tool {
            "nft" => ns.run(&["nft", "-f", "-"], &text),
            "ipset" => ns.run(&["ipset", "restore"], &text),
            _ => ns.run(&[tool, "--noflush"], &text),
        };
        assert!(out.status.success(), "{tool} < {file} in {}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
    }
}

/// Everything in the namespace but kube-nftproxy's own tables: both iptables-nft saves
/// (exact, with comments and matches nft cannot print), nft's listing of every other
/// table, without counter values (traffic may have moved them), and, where the tools are
/// installed, the iptables-legacy saves and the ipsets' names.
pub fn state(ns: &Netns) -> String {
    let mut all = String::new();
    for tool in ["iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"] {
        let out = ns.run(&[tool], "");
        if tool.contains("legacy") && !out.status.success() {
            continue;
        }
        assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
        for line in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.starts_with('#')) {
            // A chain's policy counters (`:INPUT ACCEPT [3:180]`) move with traffic.
            let line = if line.starts_with(':') { line.split(" [").next().unwrap_or(line) } else { line };
            all.push_str(line);
            all.push('\n');
        }
    }
    for table in ns.nft(&["list", "tables"]).lines() {
        let words: Vec<&str> = table.split_whitespace().collect();
        if let ["table", family, name] = words.as_slice()
            && *name != "kube-nftproxy"
        {
            all += &ns.nft(&["-s", "list", "table", family, name]);
        }
    }
    if let Some(names) = ipset_names(ns) {
        all += &format!("ipsets: {}\n", names.join(" "));
    }
    all
}

/// The ipsets of `ns` (`ipset list -n`), sorted; `None` without `ipset`.
fn ipset_names(ns: &Netns) -> Option<Vec<String>> {
    let out = ns.run(&["ipset", "list", "-n"], "");
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    names.sort();
    out.status.success().then_some(names)
}

/// The ipsets of `ns`, sorted.
pub fn ipsets(ns: &Netns) -> Vec<String> {
    ipset_names(ns).expect("ipset list -n")
}
