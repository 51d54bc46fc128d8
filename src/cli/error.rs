//! The binary's one error: what a command failed on, sorted where it failed into whose fault
//! it is, which sets the exit status (1: the API server or the node; 2: the input).

use kube_nftproxy::config::ConfigError;
use kube_nftproxy::{conntrack, kube, requirements};
use std::fmt;
use std::process::ExitCode;

/// Exit status for bad input files and flags.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Why a command failed.
#[derive(Debug)]
pub enum RunError {
    /// The flags or the configuration file (or the file changed while the daemon ran).
    Config(ConfigError),
    /// The API server or its credentials, with what was being done when said.
    Api {
        /// What was being done (`listing from the API server`), if the message says it.
        doing: Option<&'static str>,
        /// What went wrong.
        source: kube::Error,
    },
    /// The node: what the proxy needs of it, settings it would not take, or what was done on
    /// it failing there.
    Node(NodeError),
    /// Anything else: the input, or what was done with it, said with its causes ([`OrInput`]
    /// turns an error into one; a failure of the binary's own is its text).
    Input(String),
}

/// What the node lacks or refused.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The kernel lacks what the proxy needs.
    #[error(transparent)]
    Requirement(#[from] requirements::RequirementError),
    /// Conntrack settings `--init-only` had to set were not set.
    #[error(transparent)]
    Conntrack(#[from] conntrack::sysctl::NotSet),
    /// What was done on the node failed there (a held xtables lock, a refused transaction),
    /// said with its causes ([`OnNode`] turns an error into one).
    #[error("{0}")]
    Failed(String),
}

impl RunError {
    /// The exit status: 1 when the API server or the node is at fault (or the configuration
    /// file changed, as kube-proxy), clap's for a usage error, 2 for bad input.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            RunError::Config(ConfigError::Changed(_)) | RunError::Api { .. } | RunError::Node(_) => ExitCode::FAILURE,
            RunError::Config(ConfigError::Usage(e)) => ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2)),
            RunError::Config(_) | RunError::Input(_) => ExitCode::from(EXIT_BAD_INPUT),
        }
    }

    /// An API error with what was being done, as the message says it.
    pub fn api(doing: &'static str) -> impl FnOnce(kube::ApiError) -> RunError {
        move |e| RunError::Api { doing: Some(doing), source: e.into() }
    }
}

/// Each error with its causes, `: ` between them (as the log has always said it).
impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(e) => Causes(e).fmt(f),
            RunError::Api { doing, source } => {
                if let Some(doing) = doing {
                    write!(f, "{doing}: ")?;
                }
                Causes(source).fmt(f)
            }
            RunError::Node(e) => Causes(e).fmt(f),
            RunError::Input(said) => f.write_str(said),
        }
    }
}

/// An error and its sources, `: ` between them.
struct Causes<'a>(&'a dyn std::error::Error);

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            write!(f, ": {cause}")?;
            next = cause.source();
        }
        Ok(())
    }
}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

impl From<kube::Error> for RunError {
    fn from(e: kube::Error) -> Self {
        RunError::Api { doing: None, source: e }
    }
}

impl From<kube::KubeConfigError> for RunError {
    fn from(e: kube::KubeConfigError) -> Self {
        kube::Error::from(e).into()
    }
}

impl From<kube::ClientError> for RunError {
    fn from(e: kube::ClientError) -> Self {
        kube::Error::from(e).into()
    }
}

impl From<requirements::RequirementError> for RunError {
    fn from(e: requirements::RequirementError) -> Self {
        RunError::Node(e.into())
    }
}

impl From<conntrack::sysctl::NotSet> for RunError {
    fn from(e: conntrack::sysctl::NotSet) -> Self {
        RunError::Node(e.into())
    }
}

/// Any other failure as bad input, where it happens (`.input()?`, `.doing("reading x")?`):
/// the one way an error becomes a [`RunError::Input`].
pub trait OrInput<T> {
    /// The error, with its causes, as [`RunError::Input`].
    fn input(self) -> Result<T, RunError>;

    /// The same after what was being done (`doing: error: cause`).
    fn doing(self, what: impl fmt::Display) -> Result<T, RunError>;
}

impl<T, E: std::error::Error> OrInput<T> for Result<T, E> {
    fn input(self) -> Result<T, RunError> {
        self.map_err(|e| RunError::Input(Causes(&e).to_string()))
    }

    fn doing(self, what: impl fmt::Display) -> Result<T, RunError> {
        self.map_err(|e| RunError::Input(format!("{what}: {}", Causes(&e))))
    }
}

/// A failure of the node, not of the input, where it happens (`.on_node("removing x")?`):
/// an error made a [`NodeError::Failed`], which exits 1 where bad input
/// exits 2.
pub trait OnNode<T> {
    /// The error, with its causes, after what was being done (`doing: error: cause`).
    fn on_node(self, what: impl fmt::Display) -> Result<T, RunError>;
}

impl<T, E: std::error::Error> OnNode<T> for Result<T, E> {
    fn on_node(self, what: impl fmt::Display) -> Result<T, RunError> {
        self.map_err(|e| RunError::Node(NodeError::Failed(format!("{what}: {}", Causes(&e)))))
    }
}
