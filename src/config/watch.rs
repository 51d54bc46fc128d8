//! The `--config` file watched while the daemon runs: as kube-proxy, a change to it ends the
//! daemon (with an error, so that its supervisor starts it again with the new file).

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the file is looked at.
pub const POLL: Duration = Duration::from_secs(1);

/// The configuration file changed on disk; the daemon ends with it.
#[derive(Debug, thiserror::Error)]
#[error("content of the proxy server's configuration file was updated ({0:?}); exiting, as kube-proxy")]
pub struct Changed(pub PathBuf);

/// What tells one version of the file from the next: its device and inode (an atomic
/// replacement, as a ConfigMap update does), size and modification time (a write in place).
fn identity(path: &PathBuf) -> Option<(u64, u64, u64, i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// Starts the `config-watch` thread: it looks at `path` every `period` until `stop`, and
/// calls `changed` once (then ends) when the file is not what it was at the start. A file
/// that cannot be read for a moment (being replaced) is looked at again.
pub fn spawn(
    path: PathBuf,
    period: Duration,
    stop: Arc<AtomicBool>,
    changed: impl FnOnce(Changed) + Send + 'static,
) -> std::io::Result<()> {
    let first = identity(&path);
    std::thread::Builder::new().name("config-watch".into()).spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(period);
            match identity(&path) {
                Some(now) if Some(now) != first => {
                    changed(Changed(path));
                    return;
                }
                _ => {}
            }
        }
    })?;
    Ok(())
}
