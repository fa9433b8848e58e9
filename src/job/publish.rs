//! Publishing a run's files as one directory, all at once.
//!
//! Every file is written, fsynced, into a sibling staging directory
//! (`.<output_dir>.partial-<pid>`) with the one atomic-write helper
//! ([`write_atomic`](crate::primitives::atomic_file::write_atomic)), and the staging directory is
//! then renamed to `output_dir`. After a crash either the complete set exists or `output_dir`
//! does not; a stale staging directory from a crashed run is removed by the next run. An
//! existing non-empty `output_dir` is never overwritten.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Diagnose, Exit};
use crate::primitives::atomic_file::{write_atomic, Overwrite, WriteError};

/// Why the outputs were not published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The output directory exists and is not empty.
    #[error("output directory {0} already exists and is not empty")]
    OutputExists(PathBuf),
    /// A file of the set could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The staging directory could not be made, synced or moved into place.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Diagnose for PublishError {
    fn exit(&self) -> Exit {
        match self {
            PublishError::OutputExists(_) => Exit::BadInput,
            PublishError::Write(_) | PublishError::Io { .. } => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            PublishError::OutputExists(_) => {
                Some("choose a new output_dir in the job, or move the old results away".into())
            }
            PublishError::Write(_) | PublishError::Io { .. } => {
                Some("check that the output directory's parent is writable and has space".into())
            }
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Whether `dir` cannot take a job's outputs: a file, or a directory with entries.
pub fn output_dir_in_use(dir: &Path) -> bool {
    let non_empty = fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    non_empty || dir.is_file()
}

/// Refuse if the outputs could not be published (admission checks this before hashing the
/// model; a run checks again in case the directory was filled since).
pub fn check_output_dir(dir: &Path) -> Result<(), PublishError> {
    if output_dir_in_use(dir) {
        return Err(PublishError::OutputExists(dir.to_owned()));
    }
    Ok(())
}

/// Write `files` into a staging directory beside `dir`, fsync, and rename it to `dir`.
pub fn publish(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), PublishError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "outputs".into());
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io(&parent))?;
    remove_stale_staging(&parent, &name);
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir(&staging).map_err(io(&staging))?;
    let staged = (|| {
        for (file, bytes) in files {
            write_atomic(&staging.join(file), bytes, 0o644, Overwrite::Refuse)?;
        }
        // An empty output_dir (made by the operator) is replaced; a non-empty one was refused.
        if dir.is_dir() {
            fs::remove_dir(dir).map_err(|_| PublishError::OutputExists(dir.to_owned()))?;
        }
        fs::rename(&staging, dir).map_err(io(dir))
    })();
    if let Err(e) = staged {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    fs::File::open(&parent)
        .and_then(|d| d.sync_all())
        .map_err(io(&parent))?;
    Ok(())
}

/// Staging directories left by crashed runs of the same output directory.
fn remove_stale_staging(parent: &Path, name: &str) {
    let prefix = format!(".{name}.partial-");
    if let Ok(entries) = fs::read_dir(parent) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}
