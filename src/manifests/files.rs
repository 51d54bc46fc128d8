//! Which files the manifests source reads: regular YAML/JSON files below a path, each once,
//! found without following any link twice, and a fingerprint that notices every rewrite.

use super::ManifestError;
use crate::input::{self, ReadError};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The manifest files below a path, and what was passed over (with why).
#[derive(Debug, Default)]
pub struct Found {
    /// Regular files ending in `.yaml`, `.yml` or `.json`, sorted by path.
    pub files: Vec<PathBuf>,
    /// Entries with a manifest's name that are not regular files (a FIFO, a socket, a device).
    pub skipped: Vec<String>,
}

fn is_manifest(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
}

/// Finds the manifest files below `path` (or `path` itself). Hidden entries (a ConfigMap
/// volume's `..data` and timestamped copies) are left out; a directory or file reached twice
/// through links is read once, so link loops end.
pub fn find(path: &Path) -> Result<Found, ManifestError> {
    let io = |cause| ManifestError::Io { path: path.to_path_buf(), cause };
    let meta = std::fs::metadata(path).map_err(io)?;
    let mut found = Found::default();
    let mut seen = BTreeSet::new();
    if meta.is_dir() {
        walk(path, &mut seen, &mut found)?;
        found.files.sort();
    } else if meta.is_file() {
        found.files.push(path.to_path_buf());
    } else {
        found.skipped.push(format!("{}: not a regular file", path.display()));
    }
    Ok(found)
}

fn walk(dir: &Path, seen: &mut BTreeSet<(u64, u64)>, found: &mut Found) -> Result<(), ManifestError> {
    let io = |cause| ManifestError::Io { path: dir.to_path_buf(), cause };
    let meta = std::fs::metadata(dir).map_err(io)?;
    if !seen.insert((meta.dev(), meta.ino())) {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = entry.path();
        // A dangling link or one we may not follow is passed over like any other stranger.
        let Ok(meta) = std::fs::metadata(&p) else { continue };
        if meta.is_dir() {
            walk(&p, seen, found)?;
        } else if is_manifest(&p) {
            if !meta.is_file() {
                found.skipped.push(format!("{}: not a regular file", p.display()));
            } else if seen.insert((meta.dev(), meta.ino())) {
                found.files.push(p);
            }
        }
    }
    Ok(())
}

/// Reads a manifest file whole, as every input file is read (`crate::input`): a FIFO
/// swapped in after `find` cannot hang the reader, nor a file grown without end fill memory.
pub fn read(path: &Path) -> Result<String, ManifestError> {
    input::read_text(path, input::MANIFEST).map_err(|e| ManifestError::Io {
        path: path.to_path_buf(),
        cause: match e {
            ReadError::Io(e) => e,
            other => std::io::Error::other(other.to_string()),
        },
    })
}

/// What identifies one version of a file: its path, device, inode, size, and modification
/// and change times. The change time cannot be set back, so a same-size rewrite that keeps
/// the old modification time (`cp -p`, `rsync -a`, `tar`) is still noticed.
pub type Stamp = (PathBuf, u64, u64, u64, (i64, i64), (i64, i64));

/// A cheap fingerprint of the manifest files (no file is read); `None` while the path cannot
/// be read (so its appearing is a change).
pub fn fingerprint(path: &Path) -> Option<Vec<Stamp>> {
    let files = find(path).ok()?.files;
    let stamp = |p: PathBuf| {
        let m = std::fs::metadata(&p).ok()?;
        Some((p, m.dev(), m.ino(), m.len(), (m.mtime(), m.mtime_nsec()), (m.ctime(), m.ctime_nsec())))
    };
    Some(files.into_iter().filter_map(stamp).collect())
}

/// How close to now a file's change time must be for a rewrite within the same tick of the
/// file system's clock to be possible (older kernels keep coarse change times).
const RACY: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether no file in `stamps` changed so recently that a same-size rewrite could leave its
/// stamp as it is.
pub fn settled(stamps: &Option<Vec<Stamp>>) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let recent = |ctime: (i64, i64)| {
        let at = std::time::Duration::new(ctime.0.max(0) as u64, ctime.1.clamp(0, 999_999_999) as u32);
        now.saturating_sub(at) < RACY
    };
    stamps.iter().flatten().all(|s| !recent(s.5))
}
