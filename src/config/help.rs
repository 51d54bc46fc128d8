//! The command line as help, the man page and the shell completions show it: the daemon's
//! flags, and `explain`, `trace` and `help` as commands, each with its own flags and the
//! flags that say where the cluster comes from. Parsing stays `Flags`' (a command's flags may
//! come anywhere on the line, as before); this only shows it, built from `Flags`' own
//! arguments so that help, man page and completions never drift from what is parsed.

use super::Flags;
use clap::{Arg, Command, CommandFactory};
use std::ffi::OsString;

/// The flags a command shares with the daemon: where the cluster and this node come from.
const SOURCES: &[&str] = &["config", "kubeconfig", "master", "manifests", "hostname_override"];

/// One command: its name, what it does in a line, its own flags (clap ids of `Flags`), and
/// what its exit status says.
struct CommandInfo {
    name: &'static str,
    about: &'static str,
    own: &'static [&'static str],
    exit: &'static str,
}

/// The commands, in the order help lists them.
const COMMANDS: &[CommandInfo] = &[
    CommandInfo {
        name: "explain",
        about: "Say where a connection would go through this node's rules, and why, then exit",
        own: &["from", "to", "protocol", "output"],
        exit: "0 an answer (whatever it is); 1 the API server or the kubeconfig failed; 2 a bad question, flag or input",
    },
    CommandInfo {
        name: "trace",
        about: "Follow new connections through the rules the kernel holds, as they happen",
        own: &["from", "to", "protocol", "count", "timeout", "output"],
        exit: "0 stopped by Ctrl-C, --count or --timeout; 1 the node refused the tracer's table, or the API server \
               failed; 2 a bad selector, flag or input",
    },
];

/// What the exit status says for each way of running, as help's and the man page's last
/// section: the commands' and the daemon's own modes'.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "the daemon",
        "runs until stopped (SIGTERM or SIGINT: 0, the rules left in place); 1 when the kernel lacks what it \
         needs, the credentials are refused, or --config's file changed (the supervisor restarts it); 2 bad \
         flags, configuration or input",
    ),
    ("--dry-run", "0 the script printed; 1 the API server failed; 2 bad flags or input"),
    ("--dry-run --diff", "0 no difference; 1 differences; 2 trouble (bad input, the tables unreadable), as diff"),
    (
        "--cleanup",
        "0 done; 1 the kernel refused (or the xtables lock was held); 2 bad flags, or a running daemon owns the \
         node's tables (stop it first)",
    ),
    ("--write-config-to", "0 written; 2 bad flags or configuration, or the file could not be written"),
    ("--init-only", "0 the conntrack settings in place; 1 one could not be set; 2 bad flags or configuration"),
    ("explain", COMMANDS[0].exit),
    ("trace", COMMANDS[1].exit),
];

/// `EXIT_STATUS` as help prints it.
fn exit_status_text() -> String {
    let lines: Vec<String> = EXIT_STATUS.iter().map(|(what, says)| format!("  {what}: {says}")).collect();
    format!("Exit status:\n{}", lines.join("\n"))
}

/// The commands' names.
pub fn command_names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|c| c.name)
}

/// The flags only commands take, hidden from the daemon's help.
fn commands_only() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().flat_map(|c| c.own.iter().copied()).filter(|id| *id != "output").chain(["command"])
}

/// The command line as shown: the daemon's flags (those only commands take hidden) and each
/// command with its own flags and the sources it reads.
pub fn command_line() -> Command {
    let flags = Flags::command();
    let hidden: Vec<&str> = commands_only().collect();
    let after =
        format!("{}\n\n{}", flags.get_after_help().map(|h| h.to_string()).unwrap_or_default(), exit_status_text());
    let mut top = flags.clone().after_help(after).mut_args(|a| {
        let hide = hidden.contains(&a.get_id().as_str());
        if hide { a.hide(true) } else { a }
    });
    // The commands are the subcommands below; completions offer them once, as such.
    top = top.mut_arg("command", |a| a.value_parser(clap::builder::NonEmptyStringValueParser::new()));
    for info in COMMANDS {
        // The flags keep their requirement of a command: a hidden one is there to meet it.
        let exit = format!("Exit status: {}", info.exit);
        let mut sub = Command::new(info.name).about(info.about).after_help(exit).arg(Arg::new("command").hide(true));
        for id in info.own.iter().chain(SOURCES) {
            if let Some(arg) = flags.get_arguments().find(|a| a.get_id() == id) {
                let heading =
                    if info.own.contains(id) { None } else { Some("Where the cluster and this node come from") };
                sub = sub.arg(arg.clone().help_heading(heading));
            }
        }
        top = top.subcommand(sub);
    }
    top
}

/// The name bash's completions are generated for (see `generate`).
const BASH_NAME: &str = "kubenftproxy";

/// What `--generate` prints: the man page kube-nftproxy(8) as roff, or a shell's completions.
pub fn generate(what: &str) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut cmd = command_line();
    let shell = match what {
        "man" => return man_page(&mut out).map(|()| out),
        "bash" => clap_complete::Shell::Bash,
        "zsh" => clap_complete::Shell::Zsh,
        "fish" => clap_complete::Shell::Fish,
        other => return Err(std::io::Error::other(format!("nothing to generate for {other:?}"))),
    };
    if shell != clap_complete::Shell::Bash {
        clap_complete::generate(shell, &mut cmd, "kube-nftproxy", &mut out);
        return Ok(out);
    }
    // clap_complete's bash script (4.6) spells a subcommand's state two ways when the binary's
    // name holds a `-` (`kube__nftproxy__subcmd__explain` where it is set, and
    // `kube__subcmd__nftproxy__subcmd__explain` where it is read), so no command's flags
    // would complete: generated for a name without one, then bound to the real name.
    clap_complete::generate(shell, &mut cmd, BASH_NAME, &mut out);
    let script = String::from_utf8_lossy(&out).replace(&format!(" {BASH_NAME}\n"), " kube-nftproxy\n");
    Ok(script.into_bytes())
}

/// The man page: clap's sections for the daemon and each command, then the exit statuses.
fn man_page(out: &mut Vec<u8>) -> std::io::Result<()> {
    let cmd = command_line();
    let man = clap_mangen::Man::new(cmd.clone()).section("8").manual("System Administration");
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    let mut roff = roff::Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("kube-nftproxy {}", sub.get_name());
        roff.control("SS", [name.as_str()]);
        roff.text([roff::roman(sub.get_about().map(|a| a.to_string()).unwrap_or_default())]);
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(long) = arg.get_long() else { continue };
            let value = arg.get_value_names().and_then(|v| v.first()).map(|v| format!(" <{v}>")).unwrap_or_default();
            roff.control("TP", []);
            roff.text([roff::bold(format!("--{long}")), roff::roman(value)]);
            roff.text([roff::roman(arg.get_help().map(|h| h.to_string()).unwrap_or_default())]);
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (what, says) in EXIT_STATUS {
        roff.control("TP", []);
        roff.text([roff::bold(*what)]);
        roff.text([roff::roman(*says)]);
    }
    roff.to_writer(out)?;
    man.render_version_section(out)
}

/// When `args` ask for help (`--help` or `-h` anywhere, or `help` first), the help
/// asked for, as clap's own "display help" error (which prints it and exits 0), or clap's
/// error for a command it does not know; `None` otherwise.
pub fn help_asked(args: &[OsString]) -> Option<clap::Error> {
    let words: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    let long = words.contains(&"--help");
    let short = words.contains(&"-h");
    let command = words.iter().copied().find(|w| command_names().any(|c| c == *w));
    let program = args.first().cloned().unwrap_or_else(|| OsString::from("kube-nftproxy"));
    let mut asked = vec![program];
    match words.first() {
        // `help [COMMAND]`: what follows names the command (or is clap's to refuse).
        Some(&"help") => asked.extend(words.iter().take(2).map(OsString::from)),
        _ if long || short => {
            asked.extend(command.map(OsString::from));
            asked.push(OsString::from(if long { "--help" } else { "-h" }));
        }
        _ => return None,
    }
    command_line().try_get_matches_from(asked).err()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(args: &[&str]) -> (clap::error::ErrorKind, String) {
        let args: Vec<OsString> =
            std::iter::once("kube-nftproxy").chain(args.iter().copied()).map(OsString::from).collect();
        let e = help_asked(&args).expect("a help request");
        (e.kind(), e.render().to_string())
    }

    #[test]
    fn the_readme_s_exit_statuses_are_these() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
        let rows: Vec<(String, String)> = readme
            .lines()
            .skip_while(|l| !l.starts_with("| run | exit status |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.trim_matches('|').split_once(" | "))
            .map(|(run, says)| (run.trim().replace('`', ""), says.trim().replace('`', "")))
            .collect();
        let want: Vec<(String, String)> =
            EXIT_STATUS.iter().map(|(run, says)| (run.to_string(), says.to_string())).collect();
        assert_eq!(rows, want);
    }

    #[test]
    fn the_command_line_as_shown_passes_clap_s_own_checks() {
        command_line().debug_assert();
    }

    #[test]
    fn each_command_s_help_names_its_own_flags_and_sources_and_not_the_daemon_s() {
        use clap::error::ErrorKind::DisplayHelp;
        for info in COMMANDS {
            for asked in [vec![info.name, "--help"], vec!["help", info.name], vec!["--manifests", "x", info.name, "-h"]]
            {
                let (kind, text) = help(&asked);
                assert_eq!(kind, DisplayHelp, "{asked:?}");
                assert!(text.contains(&format!("kube-nftproxy {}", info.name)), "{asked:?}: {text}");
                for id in info.own {
                    assert!(text.contains(&format!("--{}", id.replace('_', "-"))), "{asked:?} lacks --{id}: {text}");
                }
                for flag in ["--manifests", "--kubeconfig", "--config"] {
                    assert!(text.contains(flag), "{asked:?} lacks {flag}: {text}");
                }
                let flags: Vec<&str> = text.lines().map(str::trim_start).filter(|l| l.starts_with("--")).collect();
                for daemon in ["--cluster-cidr", "--healthz-bind-address", "--sync-period", "--dry-run"] {
                    assert!(
                        !flags.iter().any(|l| l.starts_with(daemon)),
                        "{asked:?} shows the daemon's {daemon}: {text}"
                    );
                }
                assert!(text.contains("Exit status: 0 "), "{asked:?}: {text}");
            }
        }
    }

    #[test]
    fn the_top_level_help_lists_the_commands_and_leaves_their_flags_to_them() {
        for asked in [vec!["--help"], vec!["help"], vec!["-h"]] {
            let (_, text) = help(&asked);
            for info in COMMANDS {
                assert!(text.contains(info.name) && text.contains(info.about), "{asked:?}: {text}");
            }
            assert!(text.contains("--cluster-cidr") && !text.contains("--from "), "{asked:?}: {text}");
            assert!(text.contains("Exit status:") && text.contains("--dry-run --diff: 0 no difference"), "{text}");
        }
        let args: Vec<OsString> = ["kube-nftproxy", "help", "bogus"].iter().map(OsString::from).collect();
        assert_eq!(help_asked(&args).map(|e| e.kind()), Some(clap::error::ErrorKind::InvalidSubcommand));
        let args: Vec<OsString> =
            ["kube-nftproxy", "explain", "--from", "1.2.3.4"].iter().map(OsString::from).collect();
        assert!(help_asked(&args).is_none(), "no help asked");
    }
}
