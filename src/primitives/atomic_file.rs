//! Atomic file writes: a reader sees either the old file or the complete new one, never a
//! half-written file, and a refused or failed write leaves nothing behind.
//!
//! The bytes go to a temporary file in the destination's directory (same filesystem, so the final
//! step is a rename), created with its final permission bits from the start, synced to disk, then
//! moved into place. When overwriting is not allowed the move is a hard link, which fails if the
//! destination appeared in the meantime, so two writers cannot clobber each other.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Diagnose, Exit};

/// Why a file was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The destination exists and overwriting was not asked for.
    #[error("{} already exists; not overwriting it", path.display())]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// The operating system refused (permissions, disk full, missing directory).
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The destination.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

impl Diagnose for WriteError {
    fn exit(&self) -> Exit {
        match self {
            WriteError::Exists { .. } => Exit::BadInput,
            WriteError::Io { .. } => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            WriteError::Exists { .. } => {
                Some("pass --force to replace it, or choose another path".into())
            }
            WriteError::Io { .. } => Some("check that the directory exists and is writable".into()),
        }
    }
}

/// Whether an existing destination may be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    /// Fail with [`WriteError::Exists`] if the destination exists.
    Refuse,
    /// Replace the destination atomically.
    Replace,
}

/// Write `bytes` to `path` atomically, the new file having permission bits `mode` (Unix).
pub fn write_atomic(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    overwrite: Overwrite,
) -> Result<(), WriteError> {
    let io_err = |source| WriteError::Io {
        path: path.to_owned(),
        source,
    };
    if overwrite == Overwrite::Refuse && fs::symlink_metadata(path).is_ok() {
        return Err(WriteError::Exists {
            path: path.to_owned(),
        });
    }
    let (tmp_path, mut file) = create_temp(path, mode).map_err(io_err)?;
    let tmp = TempGuard(tmp_path);
    file.write_all(bytes).map_err(io_err)?;
    file.sync_all().map_err(io_err)?;
    drop(file);
    match overwrite {
        Overwrite::Replace => fs::rename(&tmp.0, path).map_err(io_err)?,
        Overwrite::Refuse => match fs::hard_link(&tmp.0, path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(WriteError::Exists {
                    path: path.to_owned(),
                })
            }
            // Filesystems without hard links: check, then rename (a narrow race, but the
            // common case keeps working).
            Err(_) if fs::symlink_metadata(path).is_err() => {
                fs::rename(&tmp.0, path).map_err(io_err)?
            }
            Err(_) => {
                return Err(WriteError::Exists {
                    path: path.to_owned(),
                })
            }
        },
    }
    drop(tmp);
    sync_dir(path);
    Ok(())
}

/// Deletes the temporary file when the write fails or after it was linked into place.
struct TempGuard(PathBuf);

impl Drop for TempGuard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn create_temp(path: &Path, mode: u32) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
    let dir = parent_dir(path);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}-{n}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        set_mode(&mut options, mode);
        match options.open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < u64::MAX => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(unix)]
fn set_mode(options: &mut OpenOptions, mode: u32) {
    use std::os::unix::fs::OpenOptionsExt;
    options.mode(mode);
}

#[cfg(not(unix))]
fn set_mode(_: &mut OpenOptions, _: u32) {}

/// Make the rename itself durable. Some filesystems refuse to sync a directory; the file's own
/// contents are already synced, so that refusal is not worth failing the write for.
fn sync_dir(path: &Path) {
    if let Ok(dir) = File::open(parent_dir(path)) {
        let _ = dir.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn writes_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"one", 0o644, Overwrite::Refuse).unwrap();
        write_atomic(&p, b"two", 0o644, Overwrite::Replace).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(leftovers(dir.path()), vec!["a.json".to_string()]);
    }

    #[test]
    fn rejects_overwrite_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        fs::write(&p, b"old").unwrap();
        let err = write_atomic(&p, b"new", 0o644, Overwrite::Refuse).unwrap_err();
        assert!(matches!(err, WriteError::Exists { .. }), "{err}");
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(leftovers(dir.path()), vec!["a.json".to_string()]);
    }

    #[cfg(unix)]
    #[test]
    fn creates_with_the_requested_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        write_atomic(&p, b"x", 0o600, Overwrite::Refuse).unwrap();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
