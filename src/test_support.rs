//! Unit tests' scratch files: each in its own directory under the system's temp directory,
//! removed when the test ends, passed or failed.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory, removed with everything in it when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Named after `tag`, this process and a sequence number (tests run in parallel).
    pub(crate) fn new(tag: &str) -> TempDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("knp-unit-{tag}-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        TempDir(dir)
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Entry `name` in it.
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One file alone in its own [`TempDir`]; it stands for its path.
pub(crate) struct TempFile {
    path: PathBuf,
    _dir: TempDir,
}

impl TempFile {
    /// File `name` holding `text`, in a directory named after `tag`.
    pub(crate) fn new(tag: &str, name: &str, text: &str) -> TempFile {
        let dir = TempDir::new(tag);
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write scratch file");
        TempFile { path, _dir: dir }
    }
}

impl Deref for TempFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}
