//! `/flagz`: the command line's flags and their values (defaults for those not given), as
//! upstream lists every flag of its flag sets; read from any clap command and its matches.
//! A URL's user info (`--master=https://admin:PASSWORD@host`) is left out, as everywhere
//! the proxy shows a server's URL.

use crate::kube::without_userinfo;
use clap::{ArgAction, ArgMatches, Command};

/// Every long flag of `cmd` with its value in `matches` (several joined by `,`; empty when
/// it has none), sorted by name. `--help` and `--version` are left out, and positional
/// arguments, which are no flags.
pub fn from_matches(cmd: &Command, matches: &ArgMatches) -> Vec<(String, String)> {
    let mut flags: Vec<(String, String)> = cmd
        .get_arguments()
        .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong))
        .filter(|a| !matches!(a.get_action(), ArgAction::Version))
        .filter_map(|a| {
            let name = a.get_long()?;
            let value = match matches.try_get_raw(a.get_id().as_str()) {
                Ok(Some(values)) => {
                    values.map(|v| without_userinfo(&v.to_string_lossy())).collect::<Vec<_>>().join(",")
                }
                Ok(None) => String::new(),
                // A count (`-vvv`) keeps no raw value; any other error is a flag not parsed.
                Err(_) => matches.try_get_one::<u8>(a.get_id().as_str()).ok().flatten()?.to_string(),
            };
            Some((name.to_string(), value))
        })
        .collect();
    flags.sort();
    flags
}

/// The plain-text page: upstream's header for `component`, then `name{delim}value` a line.
pub fn text(component: &str, flags: &[(String, String)], delim: &str) -> String {
    let mut out = format!("\n{component} flags\n{}\n\n", super::WARNING);
    for (name, value) in flags {
        out.push_str(&format!("{name}{delim}{value}\n"));
    }
    out
}

/// The `config.k8s.io/v1beta1` `Flagz` object.
pub fn json(component: &str, flags: &[(String, String)]) -> serde_json::Value {
    let flags: serde_json::Map<String, serde_json::Value> =
        flags.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    serde_json::json!({
        "kind": "Flagz",
        "apiVersion": format!("{}/{}", super::negotiate::GROUP, super::negotiate::VERSION),
        "metadata": {"name": component},
        "flags": flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Arg;

    fn command() -> Command {
        Command::new("proxy")
            .version("1")
            .arg(Arg::new("bind").long("bind-address").default_value("0.0.0.0"))
            .arg(Arg::new("addresses").long("nodeport-addresses").value_delimiter(',').num_args(1..))
            .arg(Arg::new("master").long("master"))
            .arg(Arg::new("cleanup").long("cleanup").action(ArgAction::SetTrue))
            .arg(Arg::new("loud").short('l').long("loud").action(ArgAction::Count))
            .arg(Arg::new("what").index(1))
    }

    #[test]
    fn every_flag_with_its_value_or_default_and_no_positional() {
        let argv = ["proxy", "--nodeport-addresses=10.0.0.0/8,fd00::/8", "--cleanup", "-ll", "explain", "--master"];
        let argv = [&argv[..], &["https://admin:s3cr@t@api:6443"]].concat();
        let cmd = command();
        let matches = cmd.clone().try_get_matches_from(argv).expect("parsed");
        let got = from_matches(&cmd, &matches);
        let want = [
            ("bind-address", "0.0.0.0"),
            ("cleanup", "true"),
            ("loud", "2"),
            ("master", "https://api:6443"),
            ("nodeport-addresses", "10.0.0.0/8,fd00::/8"),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(got, want);
        let page = text("kube-nftproxy", &got, "=");
        assert!(page.starts_with("\nkube-nftproxy flags\nWarning: This endpoint is not meant to be machine parseable"));
        let lines = "bind-address=0.0.0.0\ncleanup=true\nloud=2\nmaster=https://api:6443\nnodeport-addresses=10.0.0.0/8,fd00::/8\n";
        assert!(page.ends_with(&format!("for debugging purposes only.\n\n{lines}")), "{page}");
        let doc = json("kube-nftproxy", &got);
        assert_eq!(doc["apiVersion"], "config.k8s.io/v1beta1");
        assert_eq!(doc["flags"]["cleanup"], "true");
        let unset = command().try_get_matches_from(["proxy"]).expect("parsed");
        let unset = from_matches(&cmd, &unset);
        assert!(unset.contains(&("master".into(), String::new())), "a flag not given, with no default: {unset:?}");
    }
}
