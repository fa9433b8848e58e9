//! Rollback protection: which certificates this runner has seen replaced, and the highest
//! version of each lineage it has admitted. Both live in the state directory as append-only
//! registries ([`super::registry`]).
//!
//! - `superseded.jsonl`, one `{"new":..,"old":..,"seen_at":..}` per certificate replaced: once
//!   a certificate that names `supersedes` is admitted, the old one is refused naming its
//!   replacement.
//! - `versions.jsonl`, one `{"certificate":..,"lineage":..,"seen_at":..,"version":..}` per
//!   certificate admitted: a certificate whose version is below the highest admitted for its
//!   lineage is refused, whichever certificates in between ever ran here (TUF's rule). A
//!   `[min_version]` table in trust.toml protects a fresh runner the same way.
//!
//! Both are recorded only after the new certificate was fully admitted (signatures and
//! threshold included), so replacing a certificate takes exactly what approving takes.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::registry::JsonLines;
pub use super::registry::RegistryError;
use crate::primitives::digest::Digest;
use crate::primitives::time::Timestamp;

/// File name of the superseded registry inside the state directory.
pub const SUPERSEDED_FILE: &str = "superseded.jsonl";
/// File name of the admitted versions inside the state directory.
pub const VERSIONS_FILE: &str = "versions.jsonl";

/// One line of the superseded registry.
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

/// One line of the versions registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmittedVersion {
    /// The certificate's lineage.
    pub lineage: String,
    /// Its version in that lineage.
    pub version: u64,
    /// Its digest.
    pub certificate: Digest,
    /// When this runner admitted it.
    pub seen_at: Timestamp,
}

/// What the registries say about past certificates, read once per exec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// (old, new) pairs, in order.
    pub superseded: Vec<(Digest, Digest)>,
    /// The highest version admitted per lineage.
    pub highest: BTreeMap<String, u64>,
}

impl History {
    /// The certificate that replaced `digest`, if any.
    pub fn replacement_of(&self, digest: Digest) -> Option<Digest> {
        self.superseded
            .iter()
            .find(|(old, _)| *old == digest)
            .map(|(_, new)| *new)
    }
}

/// The registries of one state directory.
#[derive(Debug, Clone)]
pub struct Registry {
    superseded: JsonLines<Superseded>,
    versions: JsonLines<AdmittedVersion>,
}

impl Registry {
    /// The registries in `state_dir` (nothing is created until [`Registry::record`]).
    pub fn open(state_dir: &Path) -> Registry {
        Registry {
            superseded: JsonLines::new(state_dir, SUPERSEDED_FILE, "superseded registry"),
            versions: JsonLines::new(state_dir, VERSIONS_FILE, "versions registry"),
        }
    }

    /// The superseded registry's file.
    pub fn path(&self) -> &Path {
        self.superseded.path()
    }

    /// Every (old, new) pair recorded, in order; empty when the file does not exist yet.
    pub fn pairs(&self) -> Result<Vec<(Digest, Digest)>, RegistryError> {
        Ok(self
            .superseded
            .read()?
            .into_iter()
            .map(|e| (e.old, e.new))
            .collect())
    }

    /// Both registries.
    pub fn history(&self) -> Result<History, RegistryError> {
        let mut highest: BTreeMap<String, u64> = BTreeMap::new();
        for v in self.versions.read()? {
            let h = highest.entry(v.lineage).or_insert(0);
            *h = (*h).max(v.version);
        }
        Ok(History {
            superseded: self.pairs()?,
            highest,
        })
    }

    /// Record an admitted certificate: its lineage and version, and the certificate it
    /// replaces, if any. Facts already recorded are not written again.
    pub fn record(
        &self,
        certificate: Digest,
        lineage: &str,
        version: u64,
        supersedes: Option<Digest>,
    ) -> Result<(), RegistryError> {
        let history = self.history()?;
        if let Some(old) = supersedes {
            if !history.superseded.contains(&(old, certificate)) {
                self.superseded.append(&Superseded {
                    old,
                    new: certificate,
                    seen_at: Timestamp::now(),
                })?;
            }
        }
        if history.highest.get(lineage).is_none_or(|&h| h < version) {
            self.versions.append(&AdmittedVersion {
                lineage: lineage.to_owned(),
                version,
                certificate,
                seen_at: Timestamp::now(),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_pairs_and_versions_once() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(dir.path());
        assert_eq!(reg.history().unwrap(), History::default());
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        reg.record(b, "gemma3", 2, Some(a)).unwrap();
        reg.record(b, "gemma3", 2, Some(a)).unwrap();
        assert_eq!(reg.pairs().unwrap(), vec![(a, b)]);
        let h = reg.history().unwrap();
        assert_eq!(h.highest.get("gemma3"), Some(&2));
        assert_eq!(h.replacement_of(a), Some(b));
        let text = std::fs::read_to_string(reg.path()).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(text.contains("\"seen_at\""));
        // Recording a lower version never lowers the highest.
        reg.record(a, "gemma3", 1, None).unwrap();
        assert_eq!(reg.history().unwrap().highest.get("gemma3"), Some(&2));
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
        reg.record(Digest::of(b"b"), "l", 1, Some(Digest::of(b"a")))
            .unwrap();
        let mut text = std::fs::read(reg.path()).unwrap();
        text.pop();
        std::fs::write(reg.path(), &text).unwrap();
        assert!(matches!(reg.pairs(), Err(RegistryError::Damaged { .. })));
    }
}
