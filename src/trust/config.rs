//! The operator's trust configuration (`trust.toml`): whose signatures count, how many are
//! needed, and which certificates are revoked.
//!
//! ```toml
//! required_signatures = 2
//! owners = ["keys/owner-a.key.pub", "keys/owner-b.key.pub"]   # relative to this file
//! revoked = ["<certificate digest: 64 hex, or the 16-hex short form>"]   # optional
//!
//! [min_version]          # optional: the lowest version admitted per lineage
//! gemma3 = 3
//! ```
//!
//! A `revoked` entry is a certificate digest in full (64 hex digits) or a prefix of it of at
//! least [`MIN_REVOKED_PREFIX`] digits: the short form every message prints. A certificate is
//! revoked when its digest starts with an entry. A shorter prefix could name many certificates
//! and is refused as ambiguous, as is anything that is not hex.
//!
//! Unknown keys are refused. Owners are counted by key id, so listing the same key twice (under
//! two paths) does not raise the number of distinct owners; `required_signatures` must be at
//! least 1 and at most that number.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded_text, ReadError, MAX_TEXT_BYTES};
use crate::primitives::digest::Digest;
use crate::primitives::keys::{KeyError, KeyId, PublicKey};

/// The fewest hex digits a `revoked` entry may have: the short form of a digest.
pub const MIN_REVOKED_PREFIX: usize = 16;

/// Default location of the trust configuration.
pub const DEFAULT_TRUST_FILE: &str = "trust.toml";

/// The validated trust configuration.
#[derive(Debug, Clone)]
pub struct TrustConfig {
    required: usize,
    owners: BTreeMap<KeyId, PublicKey>,
    /// Revoked certificate digests, as lowercase hex prefixes (full digests included).
    revoked: BTreeSet<String>,
    min_version: BTreeMap<String, u64>,
}

/// Why the trust configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustConfigError {
    /// The file could not be read.
    #[error(transparent)]
    File(ReadError),
    /// Not TOML, or an unknown, missing or mistyped key.
    #[error("trust configuration {} is malformed: {detail}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The TOML parser's message (with line and column).
        detail: String,
    },
    /// An owner's public key file could not be loaded.
    #[error("trust configuration {}: field `owners`: {source}", path.display())]
    Owner {
        /// The trust file.
        path: PathBuf,
        /// Why the key was refused.
        source: KeyError,
    },
    /// `required_signatures` is 0 or more than the distinct owners.
    #[error("trust configuration {}: field `required_signatures` is {required}, but it must be between 1 and the number of distinct owners ({distinct})", path.display())]
    Threshold {
        /// The file.
        path: PathBuf,
        /// The value given.
        required: u64,
        /// Distinct owner keys.
        distinct: usize,
    },
    /// A `revoked` entry is not a certificate digest or an unambiguous prefix of one.
    #[error("trust configuration {}: field `revoked` has {entry:?}, which {why}", path.display())]
    Revoked {
        /// The file.
        path: PathBuf,
        /// The entry.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl Diagnose for TrustConfigError {
    fn exit(&self) -> Exit {
        match self {
            TrustConfigError::File(e) => e.exit(),
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            TrustConfigError::File(_) => "create trust.toml (see examples/trust.toml) or pass \
                --trust FILE"
                .into(),
            TrustConfigError::Malformed { .. } => "trust.toml has the keys required_signatures \
                and owners, and optionally revoked and a [min_version] table; see \
                examples/trust.toml"
                .into(),
            TrustConfigError::Owner { .. } => {
                "owner paths are relative to the trust file's directory \
                and name KEY.pub files written by `runner keygen`"
                    .into()
            }
            TrustConfigError::Threshold { .. } => {
                "list more distinct owner keys, or lower required_signatures".into()
            }
            TrustConfigError::Revoked { .. } => format!(
                "give the certificate digest `runner inspect CERT` prints, in full (64 hex \
                 digits) or its first {MIN_REVOKED_PREFIX} or more"
            ),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustFile {
    required_signatures: u64,
    owners: Vec<PathBuf>,
    #[serde(default)]
    revoked: Vec<String>,
    #[serde(default)]
    min_version: BTreeMap<String, u64>,
}

impl TrustConfig {
    /// Build a configuration from keys directly. `origin` names it in errors.
    pub fn new(
        owners: Vec<PublicKey>,
        required_signatures: u64,
        revoked: Vec<Digest>,
        origin: &Path,
    ) -> Result<TrustConfig, TrustConfigError> {
        let owners: BTreeMap<KeyId, PublicKey> =
            owners.into_iter().map(|k| (k.key_id(), k)).collect();
        let required = usize::try_from(required_signatures).unwrap_or(usize::MAX);
        if required == 0 || required > owners.len() {
            return Err(TrustConfigError::Threshold {
                path: origin.to_owned(),
                required: required_signatures,
                distinct: owners.len(),
            });
        }
        Ok(TrustConfig {
            required,
            owners,
            revoked: revoked.iter().map(Digest::to_hex).collect(),
            min_version: BTreeMap::new(),
        })
    }

    /// Read and validate a trust file; owner paths are relative to its directory.
    pub fn load(path: &Path) -> Result<TrustConfig, TrustConfigError> {
        let text = read_bounded_text(path, MAX_TEXT_BYTES, "trust configuration")
            .map_err(TrustConfigError::File)?;
        let file: TrustFile = toml::from_str(&text).map_err(|e| TrustConfigError::Malformed {
            path: path.to_owned(),
            detail: e.to_string().trim_end().to_owned(),
        })?;
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut owners = Vec::with_capacity(file.owners.len());
        for owner in &file.owners {
            let key =
                PublicKey::load(&base.join(owner)).map_err(|source| TrustConfigError::Owner {
                    path: path.to_owned(),
                    source,
                })?;
            owners.push(key);
        }
        let mut revoked = BTreeSet::new();
        for entry in file.revoked {
            match revoked_prefix(&entry) {
                Ok(prefix) => revoked.insert(prefix),
                Err(why) => {
                    return Err(TrustConfigError::Revoked {
                        path: path.to_owned(),
                        entry,
                        why,
                    })
                }
            };
        }
        let mut config = TrustConfig::new(owners, file.required_signatures, Vec::new(), path)?;
        config.revoked = revoked;
        config.min_version = file.min_version;
        Ok(config)
    }

    /// The same configuration, also pinning `lineage` to at least `version`.
    pub fn with_min_version(mut self, lineage: &str, version: u64) -> TrustConfig {
        self.min_version.insert(lineage.to_owned(), version);
        self
    }

    /// The lowest version of `lineage` this configuration admits (0: no pin).
    pub fn min_version(&self, lineage: &str) -> u64 {
        self.min_version.get(lineage).copied().unwrap_or(0)
    }

    /// How many distinct owners must sign.
    pub fn required_signatures(&self) -> usize {
        self.required
    }

    /// The owner key with this id, if it is trusted.
    pub fn owner(&self, key_id: &KeyId) -> Option<&PublicKey> {
        self.owners.get(key_id)
    }

    /// Distinct owner key ids.
    pub fn owner_ids(&self) -> impl Iterator<Item = &KeyId> {
        self.owners.keys()
    }

    /// Whether a certificate digest is revoked: it starts with a `revoked` entry.
    pub fn is_revoked(&self, digest: &Digest) -> bool {
        let hex = digest.to_hex();
        self.revoked.iter().any(|prefix| hex.starts_with(prefix))
    }
}

/// A `revoked` entry as a lowercase hex prefix of a certificate digest, or why it is not one.
fn revoked_prefix(entry: &str) -> Result<String, &'static str> {
    if entry.is_empty() || !entry.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("is not a certificate digest (hex digits)");
    }
    if entry.len() > 64 {
        return Err("is longer than a certificate digest (64 hex digits)");
    }
    if entry.len() < MIN_REVOKED_PREFIX {
        return Err("is too short to name one certificate unambiguously (at least 16 hex digits)");
    }
    Ok(entry.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::keys::SecretKey;
    use std::fs;

    fn setup(n: usize) -> (tempfile::TempDir, Vec<PublicKey>) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("keys")).unwrap();
        let keys: Vec<PublicKey> = (0..n)
            .map(|i| {
                let k = SecretKey::generate().unwrap().public_key();
                fs::write(
                    dir.path().join(format!("keys/o{i}.key.pub")),
                    k.to_file_bytes(),
                )
                .unwrap();
                k
            })
            .collect();
        (dir, keys)
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("trust.toml");
        fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn loads_owners_relative_to_the_file() {
        let (dir, keys) = setup(2);
        let revoked = Digest::of(b"old").to_hex();
        let p = write(
            dir.path(),
            &format!("required_signatures = 2\nowners = [\"keys/o0.key.pub\", \"keys/o1.key.pub\"]\nrevoked = [\"{revoked}\"]\n"),
        );
        let cfg = TrustConfig::load(&p).unwrap();
        assert_eq!(cfg.required_signatures(), 2);
        assert!(cfg.owner(&keys[0].key_id()).is_some());
        assert!(cfg.owner(&keys[1].key_id()).is_some());
        assert!(cfg.is_revoked(&Digest::of(b"old")));
        assert!(!cfg.is_revoked(&Digest::of(b"new")));
    }

    #[test]
    fn revokes_by_the_short_form_as_a_prefix() {
        let (dir, _) = setup(1);
        let old = Digest::of(b"old");
        let p = write(
            dir.path(),
            &format!(
                "required_signatures = 1\nowners = [\"keys/o0.key.pub\"]\nrevoked = [\"{}\"]\n",
                old.short().to_uppercase()
            ),
        );
        let cfg = TrustConfig::load(&p).unwrap();
        assert!(cfg.is_revoked(&old));
        assert!(!cfg.is_revoked(&Digest::of(b"new")));
    }

    #[test]
    fn rejects_unknown_keys() {
        let (dir, _) = setup(1);
        let p = write(
            dir.path(),
            "required_signatures = 1\nowners = [\"keys/o0.key.pub\"]\nthreshold = 1\n",
        );
        let err = TrustConfig::load(&p).unwrap_err();
        assert!(matches!(err, TrustConfigError::Malformed { .. }));
        assert!(
            err.to_string().contains("unknown field `threshold`"),
            "{err}"
        );
    }

    #[test]
    fn rejects_zero_threshold() {
        let (dir, _) = setup(1);
        let p = write(
            dir.path(),
            "required_signatures = 0\nowners = [\"keys/o0.key.pub\"]\n",
        );
        assert!(matches!(
            TrustConfig::load(&p),
            Err(TrustConfigError::Threshold {
                required: 0,
                distinct: 1,
                ..
            })
        ));
    }

    #[test]
    fn rejects_threshold_above_distinct_owners() {
        let (dir, _) = setup(1);
        // The same key under two paths is one owner.
        fs::copy(
            dir.path().join("keys/o0.key.pub"),
            dir.path().join("keys/copy.pub"),
        )
        .unwrap();
        let p = write(
            dir.path(),
            "required_signatures = 2\nowners = [\"keys/o0.key.pub\", \"keys/copy.pub\"]\n",
        );
        let err = TrustConfig::load(&p).unwrap_err();
        assert!(
            matches!(
                err,
                TrustConfigError::Threshold {
                    required: 2,
                    distinct: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("required_signatures"), "{err}");
    }

    #[test]
    fn rejects_bad_revoked_entry_and_missing_owner_file() {
        let (dir, _) = setup(1);
        let p = write(
            dir.path(),
            "required_signatures = 1\nowners = [\"keys/o0.key.pub\"]\nrevoked = [\"abc\"]\n",
        );
        assert!(
            matches!(TrustConfig::load(&p), Err(TrustConfigError::Revoked { entry, .. }) if entry == "abc")
        );
        for (entry, why) in [
            (
                "0123456789abcde",
                "too short to name one certificate unambiguously",
            ),
            ("0123456789abcdeg", "is not a certificate digest"),
            (&"a".repeat(65), "longer than a certificate digest"),
        ] {
            let p = write(
                dir.path(),
                &format!("required_signatures = 1\nowners = [\"keys/o0.key.pub\"]\nrevoked = [\"{entry}\"]\n"),
            );
            let err = TrustConfig::load(&p).unwrap_err();
            assert!(err.to_string().contains(why), "{entry}: {err}");
        }
        let p = write(
            dir.path(),
            "required_signatures = 1\nowners = [\"keys/none.pub\"]\n",
        );
        let err = TrustConfig::load(&p).unwrap_err();
        assert!(matches!(err, TrustConfigError::Owner { .. }));
        assert!(err.to_string().contains("none.pub"), "{err}");
    }

    #[test]
    fn rejects_missing_file_and_duplicate_keys() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            TrustConfig::load(&dir.path().join("trust.toml")),
            Err(TrustConfigError::File(_))
        ));
        let p = write(
            dir.path(),
            "required_signatures = 1\nrequired_signatures = 2\nowners = []\n",
        );
        assert!(matches!(
            TrustConfig::load(&p),
            Err(TrustConfigError::Malformed { .. })
        ));
    }
}
