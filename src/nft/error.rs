//! The one error type of applying rulesets: helper commands, the kernel's refusals, rendering
//! and compiling.

use super::compile;
use crate::netlink::send::SendError;
use crate::render::RenderError;
use std::time::Duration;

/// Errors talking to nftables.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// A helper command (`exec`) could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The binary.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A helper command (`exec`) ended with a failure.
    #[error("`{program}` failed ({status}): {message}")]
    Failed {
        /// The binary.
        program: String,
        /// How it ended.
        status: std::process::ExitStatus,
        /// What it said on stderr.
        message: String,
    },
    /// The kernel refused the transaction; nothing of it was applied.
    #[error("the transaction was rejected: {message}{}", line.as_ref().map(|l| format!("\\n  failing line: {l}")).unwrap_or_default())]
    Rejected {
        /// The kernel's message.
        message: String,
        /// The script line (or removal step) of the refused message, when there is one.
        line: Option<String>,
    },
    /// A helper command ran past its time limit and was killed.
    #[error("the command did not finish within {0:?} and was killed")]
    TimedOut(Duration),
    /// The kernel refused message `seq` of a batch with `errno`; nothing of it was applied
    /// (`wire::Lines::explain` names the script line).
    #[error("the kernel rejected the transaction: {}", std::io::Error::from_raw_os_error(*errno))]
    Kernel {
        /// The error.
        errno: i32,
        /// The refused message's sequence number in the batch.
        seq: u32,
    },
    /// Another process kept changing our tables while a refresh read them.
    #[error("our tables changed while they were read, {0} times in a row")]
    Unsettled(u32),
    /// The daemon is stopping; the run was ended.
    #[error("stopped: the daemon is shutting down")]
    Stopped,
    /// I/O with netlink or a helper command failed.
    #[error("nft I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The script could not be rendered.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The script could not be compiled.
    #[error(transparent)]
    Compile(#[from] compile::CompileError),
}

impl From<SendError> for NftError {
    fn from(e: SendError) -> NftError {
        match e {
            SendError::Refused { errno, seq } => NftError::Kernel { errno, seq },
            SendError::Io(e) => NftError::Io(e),
        }
    }
}
