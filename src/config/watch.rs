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
/// daemon started counts. A file that cannot be read (deleted, unreadable, too large, not a
/// regular file) is read again; each such state is logged once, when it is first seen.
pub fn spawn(
    path: PathBuf,
    read: u64,
    period: Duration,
    stop: Arc<AtomicBool>,
    changed: impl FnOnce(ConfigError) + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new().name("config-watch".into()).spawn(move || {
        let mut trouble = Trouble::default();
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(period);
            let now = input::read(&path, input::CONFIG);
            if let Some(news) = trouble.news(&now) {
                news.log(&path, period);
            }
            if now.is_ok_and(|now| digest(&now) != read) {
                changed(ConfigError::Changed(path));
                return;
            }
        }
    })?;
    Ok(())
}

/// What the watch has said of the file's trouble: a file that stays deleted (or too large)
/// is told once, not every look, and told again only after it was fine in between or its
/// trouble changed.
#[derive(Debug, Default)]
struct Trouble {
    /// The error last told, while it lasts.
    told: Option<String>,
}

/// A change in whether the file can be read, to be logged.
#[derive(Debug, PartialEq, Eq)]
enum News {
    /// It cannot be read, for this reason (new, or another than before).
    Unreadable(String),
    /// It can be read again.
    Readable,
}

impl Trouble {
    /// What `read`, the latest look, changes in what was told; `None` when nothing.
    fn news(&mut self, read: &Result<Vec<u8>, input::ReadError>) -> Option<News> {
        match read {
            Ok(_) => self.told.take().map(|_| News::Readable),
            Err(e) => {
                let why = e.to_string();
                (self.told.as_deref() != Some(why.as_str())).then(|| {
                    self.told = Some(why.clone());
                    News::Unreadable(why)
                })
            }
        }
    }
}

impl News {
    /// Logs it, a warning for trouble.
    fn log(&self, path: &std::path::Path, period: Duration) {
        match self {
            News::Unreadable(why) => log::warn!(
                "cannot read the configuration file {}: {why}; keeping the configuration read at the start, looking again every {period:?}",
                path.display()
            ),
            News::Readable => log::info!("the configuration file {} can be read again", path.display()),
        }
    }
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
            spawn(path.clone(), read, Duration::from_millis(10), stop.clone(), move |c| {
                // The test stops listening after its first answer; a later one has no reader.
                let _ = tx.send(c);
            })
            .unwrap();
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

    /// Issue 34: a file deleted, too large or not a regular file is told once a state, and
    /// again after it was fine in between.
    #[test]
    fn each_trouble_is_told_once_until_the_file_is_fine_again() {
        let dir = crate::test_support::TempDir::new("trouble");
        let path = dir.join("config.yaml");
        let mut trouble = Trouble::default();
        let mut look = || trouble.news(&input::read(&path, input::CONFIG));
        std::fs::write(&path, "mode: nftables\n").unwrap();
        assert_eq!(look(), None, "fine from the start");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(look(), Some(News::Unreadable(why)) if why.contains("No such file")));
        assert_eq!(look(), None, "still deleted: told already");
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(look(), Some(News::Unreadable(why)) if why.contains("not a regular file")));
        assert_eq!(look(), None);
        std::fs::remove_dir(&path).unwrap();
        std::fs::write(&path, "#".repeat(usize::try_from(input::CONFIG.max).unwrap() + 1)).unwrap();
        assert!(matches!(look(), Some(News::Unreadable(why)) if why.contains("larger than")));
        std::fs::write(&path, "mode: nftables\n").unwrap();
        assert_eq!(look(), Some(News::Readable));
        assert_eq!(look(), None);
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(look(), Some(News::Unreadable(_))), "deleted again: told again");
    }
}
