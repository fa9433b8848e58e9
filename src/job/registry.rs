//! The runner's append-only registries in its state directory: one canonical JSON line per fact,
//! read whole on every exec, appended under an exclusive lock with an fsync.
//!
//! A damaged line is an error, never skipped: these registries exist to refuse old
//! certificates, and skipping a line would silently re-admit one.

use std::io::Write as _;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::state::open_for_append;
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded, ReadError};
use crate::primitives::canonical::to_canonical_from;

/// The most bytes a registry may hold (millions of entries).
const MAX_REGISTRY_BYTES: u64 = 256 << 20;

/// Why a registry could not be read or extended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Reading, creating or appending failed.
    #[error("cannot {action} the {what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// Which registry.
        what: &'static str,
        /// The registry file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a registry the runner wrote.
    #[error(transparent)]
    Read(ReadError),
    /// A line does not parse.
    #[error("{what} {} line {line} is damaged: {problem}", path.display())]
    Damaged {
        /// Which registry.
        what: &'static str,
        /// The registry file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
}

impl Diagnose for RegistryError {
    fn exit(&self) -> Exit {
        Exit::Failure
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            RegistryError::Io { .. } | RegistryError::Read(_) => {
                "check the state directory's permissions (--state-dir)".into()
            }
            RegistryError::Damaged { .. } => {
                "the registry is append-only: restore it from a backup; do not delete lines, \
                 that would re-admit certificates it refuses"
                    .into()
            }
        })
    }
}

/// One registry file of `T` lines.
#[derive(Debug, Clone)]
pub struct JsonLines<T> {
    what: &'static str,
    path: PathBuf,
    entry: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> JsonLines<T> {
    /// The registry `file` in `state_dir`, named `what` in errors (nothing is created until
    /// [`JsonLines::append`]).
    pub fn new(state_dir: &Path, file: &str, what: &'static str) -> JsonLines<T> {
        JsonLines {
            what,
            path: state_dir.join(file),
            entry: PhantomData,
        }
    }

    /// The registry file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every entry, in order; empty when the file does not exist yet.
    pub fn read(&self) -> Result<Vec<T>, RegistryError> {
        if !self.path.exists() {
            return Ok(Vec::new());
        }
        let bytes =
            read_bounded(&self.path, MAX_REGISTRY_BYTES, self.what).map_err(RegistryError::Read)?;
        let damaged = |line: usize, problem: String| RegistryError::Damaged {
            what: self.what,
            path: self.path.clone(),
            line,
            problem,
        };
        let mut entries = Vec::new();
        let mut lines = bytes.split(|&b| b == b'\n').enumerate().peekable();
        while let Some((i, line)) = lines.next() {
            if line.is_empty() {
                // Only the final newline may leave an empty piece.
                if lines.peek().is_none() {
                    break;
                }
                return Err(damaged(i + 1, "empty line".into()));
            }
            if lines.peek().is_none() {
                return Err(damaged(i + 1, "the last line is not terminated".into()));
            }
            let entry: T =
                serde_json::from_slice(line).map_err(|e| damaged(i + 1, e.to_string()))?;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Append `entry` as one line.
    pub fn append(&self, entry: &T) -> Result<(), RegistryError> {
        let io = |action| {
            let (what, path) = (self.what, self.path.clone());
            move |source| RegistryError::Io {
                action,
                what,
                path,
                source,
            }
        };
        let mut line = to_canonical_from(entry).map_err(|e| RegistryError::Damaged {
            what: self.what,
            path: self.path.clone(),
            line: 0,
            problem: e.to_string(),
        })?;
        line.push(b'\n');
        let mut file = open_for_append(&self.path).map_err(io("open"))?;
        file.lock().map_err(io("lock"))?;
        file.write_all(&line).map_err(io("append to"))?;
        file.sync_all().map_err(io("sync"))?;
        Ok(())
    }
}
