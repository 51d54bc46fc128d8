//! Runs the installed `nft` with a script on stdin: one `nft -f -` is one atomic transaction.

use super::NftError;
use std::io::Write;
use std::process::{Command, Stdio};

/// The `nft` binary to run (`NFT` in the environment overrides it, e.g. for a bundled nft).
pub fn nft_binary() -> String {
    std::env::var("NFT").unwrap_or_else(|_| "nft".to_string())
}

/// Applies `script` in one transaction; `on_spawn` learns the child's pid before it commits,
/// so change notifications from this commit can be told apart from other programs'.
pub fn apply(script: &str, on_spawn: &dyn Fn(u32)) -> Result<(), NftError> {
    let mut child = Command::new(nft_binary())
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NftError::Spawn { nft: nft_binary(), source })?;
    on_spawn(child.id());
    let mut stdin = child.stdin.take().ok_or_else(|| NftError::Io(std::io::Error::other("nft stdin")))?;
    // A failed write means nft exited early; its status and stderr tell why.
    let _ = stdin.write_all(script.as_bytes());
    drop(stdin);
    let out = child.wait_with_output().map_err(NftError::Io)?;
    if out.status.success() {
        return Ok(());
    }
    let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let line = failing_line(&message).and_then(|n| script.lines().nth(n.saturating_sub(1))).map(str::to_string);
    Err(NftError::Rejected { message, line })
}

/// The script line nft's first error points at (`/dev/stdin:LINE:COL…: Error: …`).
fn failing_line(message: &str) -> Option<usize> {
    message.lines().find_map(|l| {
        let (location, _) = l.split_once(": Error")?;
        let mut parts = location.rsplitn(3, ':');
        let _cols = parts.next()?;
        let line: usize = parts.next()?.parse().ok()?;
        (line > 0).then_some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::failing_line;

    #[test]
    fn finds_the_line_an_error_points_at() {
        assert_eq!(failing_line("/dev/stdin:12:5-9: Error: syntax error"), Some(12));
        assert_eq!(failing_line("internal:0:0-0: Error: Could not process rule"), None);
        assert_eq!(failing_line("no location here"), None);
    }
}
