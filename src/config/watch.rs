//! The `--config` file watched while the daemon runs: as kube-proxy, a change to it ends the
//! daemon (with an error, so that its supervisor starts it again with the new file). A
//! change is one of content: kubelet swapping a ConfigMap's `..data` link to an identical
//! file (another key of the ConfigMap changed) is no change.

use super::ConfigError;
use crate::input;
use std::hash::{DefaultHasher, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the file is looked at.
pub const POLL: Duration = Duration::from_secs(1);

/// What tells one content of the file from another (a fixed-key SipHash: the same in every
/// run, and a file is its owner's, so no one picks collisions).
pub fn digest(content: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(content);
    hasher.finish()
}

/// Starts the `config-watch` thread: it reads `path` every `period` until `stop`, and calls
/// `changed` once (then ends) when its content's digest is not `read`, that of the content
/// the configuration was loaded from (`Flags::config_digest`), so a change made while the
/// daemon started counts. A file that cannot be read for a moment (being replaced) is read
/// again.
pub fn spawn(
    path: PathBuf,
    read: u64,
    period: Duration,
    stop: Arc<AtomicBool>,
    changed: impl FnOnce(ConfigError) + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new().name("config-watch".into()).spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(period);
            match input::read(&path, input::CONFIG) {
                Ok(now) if digest(&now) != read => {
                    changed(ConfigError::Changed(path));
                    return;
                }
                _ => {}
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline is the content the configuration was loaded from: a change made before
    /// the watch starts still ends the daemon, and the same content does not.
    #[test]
    fn a_change_is_told_from_the_content_loaded_not_from_the_file_at_the_start() {
        let dir = crate::test_support::TempDir::new("watch");
        let path = dir.join("config.yaml");
        std::fs::write(&path, "mode: nftables\n").unwrap();
        let loaded = digest(b"mode: nftables\n");
        let watch = |read: u64| {
            let (tx, rx) = std::sync::mpsc::channel();
            let stop = Arc::new(AtomicBool::new(false));
            spawn(path.clone(), read, Duration::from_millis(10), stop.clone(), move |c| tx.send(c).unwrap()).unwrap();
            let got = rx.recv_timeout(Duration::from_millis(300)).ok();
            stop.store(true, Ordering::SeqCst);
            got
        };
        assert!(watch(loaded).is_none(), "the content it was loaded from is no change");
        std::fs::write(&path, "mode: nftables\n").unwrap();
        assert!(watch(loaded).is_none(), "rewritten with the same content is no change");
        let before_the_watch = digest(b"mode: iptables\n");
        let changed = watch(before_the_watch).expect("changed between the load and the watch");
        assert!(matches!(&changed, ConfigError::Changed(p) if *p == path), "{changed}");
    }
}
