//! The superseded registry: `STATE_DIR/superseded.jsonl`, append-only, one JSON line
//! `{"new":..,"old":..,"seen_at":..}` per certificate this runner has seen replaced.
//!
//! `runner exec` records old→new only after the new certificate was fully admitted (signatures
//! and threshold included), so superseding takes exactly what approving takes; from then on the
//! old certificate is refused by [`crate::job::admit`] naming its replacement. The registry is
//! read whole on every exec: a damaged line is an error, never skipped, because skipping it
//! would silently re-admit a superseded certificate.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::{create_private_dir, open_for_append};
use crate::error::{Diagnose, Exit};
use crate::primitives::canonical::to_canonical_from;
use crate::primitives::digest::Digest;
use crate::primitives::time::Timestamp;

/// File name of the registry inside the state directory.
pub const SUPERSEDED_FILE: &str = "superseded.jsonl";

/// One line of the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Superseded {
    /// Digest of the replaced certificate.
    pub old: Digest,
    /// Digest of the certificate that replaced it.
    pub new: Digest,
    /// When this runner first admitted the replacement.
    pub seen_at: Timestamp,
}

/// Why the registry could not be read or extended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Reading, creating or appending failed.
    #[error("cannot {action} the superseded registry {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The registry file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line does not parse.
    #[error("superseded registry {path} line {line} is damaged: {problem}")]
    Damaged {
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
            RegistryError::Io { .. } => {
                "check the state directory's permissions (--state-dir)".into()
            }
            RegistryError::Damaged { .. } => {
                "the registry is append-only: restore it from a backup; do not delete lines, \
                 that would re-admit superseded certificates"
                    .into()
            }
        })
    }
}

/// The registry of one state directory.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
    path: PathBuf,
}

impl Registry {
    /// The registry in `state_dir` (nothing is created until [`Registry::record`]).
    pub fn open(state_dir: &Path) -> Registry {
        Registry {
            dir: state_dir.to_owned(),
            path: state_dir.join(SUPERSEDED_FILE),
        }
    }

    /// The registry file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every (old, new) pair recorded, in order; empty when the file does not exist yet.
    pub fn pairs(&self) -> Result<Vec<(Digest, Digest)>, RegistryError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(RegistryError::Io {
                    action: "read",
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let damaged = |line: usize, problem: String| RegistryError::Damaged {
            path: self.path.clone(),
            line,
            problem,
        };
        let mut pairs = Vec::new();
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
            let entry: Superseded =
                serde_json::from_slice(line).map_err(|e| damaged(i + 1, e.to_string()))?;
            pairs.push((entry.old, entry.new));
        }
        Ok(pairs)
    }

    /// Record that `new` replaces `old`, unless that pair is already recorded.
    pub fn record(&self, old: Digest, new: Digest) -> Result<(), RegistryError> {
        if self.pairs()?.contains(&(old, new)) {
            return Ok(());
        }
        let io = |action| {
            let path = self.path.clone();
            move |source| RegistryError::Io {
                action,
                path,
                source,
            }
        };
        create_private_dir(&self.dir).map_err(io("create the directory of"))?;
        let mut file = open_for_append(&self.path).map_err(io("open"))?;
        let entry = Superseded {
            old,
            new,
            seen_at: Timestamp::now(),
        };
        let mut line = to_canonical_from(&entry).map_err(|e| RegistryError::Damaged {
            path: self.path.clone(),
            line: 0,
            problem: e.to_string(),
        })?;
        line.push(b'\n');
        file.write_all(&line).map_err(io("append to"))?;
        file.sync_all().map_err(io("sync"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_reads_pairs_once() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(&dir.path().join("state"));
        assert!(reg.pairs().unwrap().is_empty());
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        reg.record(a, b).unwrap();
        reg.record(a, b).unwrap();
        assert_eq!(reg.pairs().unwrap(), vec![(a, b)]);
        let text = std::fs::read_to_string(reg.path()).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(text.contains("\"seen_at\""));
    }

    #[test]
    fn rejects_a_damaged_line() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(dir.path());
        std::fs::write(reg.path(), b"{\"old\":1}\n").unwrap();
        assert!(matches!(
            reg.pairs(),
            Err(RegistryError::Damaged { line: 1, .. })
        ));
        std::fs::write(reg.path(), b"").unwrap();
        reg.record(Digest::of(b"a"), Digest::of(b"b")).unwrap();
        let mut text = std::fs::read(reg.path()).unwrap();
        text.pop();
        std::fs::write(reg.path(), &text).unwrap();
        assert!(matches!(reg.pairs(), Err(RegistryError::Damaged { .. })));
    }
}
