//! Ed25519 keys: generating, storing and loading owner (and runner) key pairs, signing, and
//! checking signatures.
//!
//! - Private key file: two text lines, [`PRIVATE_KEY_HEADER`] and the standard base64 of the
//!   PKCS#8 v2 DER document `ring` generates. Written with mode 0600 from the start.
//! - Public key file (`KEY.pub`): RFC 8785 JSON `{"algorithm": "ed25519", "key_id": hex,
//!   "public_key": base64 of the 32 raw bytes, "schema": "runner-public-key/1"}`.
//! - Key id: plain BLAKE3 of the 32 raw public key bytes, 64 hex digits (16 in short form).
//!
//! Secret bytes we hold ([`SecretKey`]'s PKCS#8 copy, the file text) are zeroized on drop, and
//! `Debug` prints only the key id. `ring`'s own expanded copy inside its key pair is outside our
//! control; it lives exactly as long as the `SecretKey`.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::canonical::{parse_strict, to_canonical_from};
use super::digest::Digest;
use crate::error::{Diagnose, Exit};
use crate::primitives::atomic_file::{write_atomic, Overwrite, WriteError};
use crate::primitives::bounded_read::{read_bounded, ReadError, MAX_KEY_BYTES};

/// First line of a private key file.
pub const PRIVATE_KEY_HEADER: &str = "runner-ed25519-private-key/1 pkcs8-base64";

/// `schema` of a public key file.
pub const PUBLIC_KEY_SCHEMA: &str = "runner-public-key/1";

/// The only signature algorithm.
pub const ALGORITHM: &str = "ed25519";

/// Length of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// A key id: BLAKE3 of the raw public key.
pub type KeyId = Digest;

/// Why a key could not be made, read or written. Messages never include key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key file could not be read.
    #[error(transparent)]
    File(ReadError),
    /// A private key file that group or others may read.
    #[error("private key {} is accessible by group or others (mode {mode:03o})", path.display())]
    NotPrivate {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not a private key in our format.
    #[error("{} is not a runner private key: {why}", path.display())]
    NotPrivateKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong (never the key bytes).
        why: &'static str,
    },
    /// The file is not a public key in our format.
    #[error("{} is not a runner public key: {detail}", path.display())]
    NotPublicKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong, naming the field.
        detail: String,
    },
    /// The operating system's random number generator failed.
    #[error("cannot generate a key: the system random number generator failed")]
    Random,
    /// Writing a key file failed or would overwrite one.
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl Diagnose for KeyError {
    fn exit(&self) -> Exit {
        match self {
            KeyError::Random => Exit::Failure,
            KeyError::File(e) => e.exit(),
            KeyError::NotPrivate { .. } => Exit::Refused,
            KeyError::Write(e) => e.exit(),
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            KeyError::File(e) if e.is_missing() => Some(format!(
                "nothing is at {}: `runner keygen --out KEY` writes a key pair, KEY and KEY.pub",
                e.path().display()
            )),
            KeyError::File(e) => e.hint(),
            KeyError::NotPrivate { path, .. } => Some(format!(
                "a private key must be readable by its owner only: chmod 600 {}",
                path.display()
            )),
            KeyError::NotPrivateKey { .. } => Some(
                "pass the private key file written by `runner keygen` (not the .pub file)".into(),
            ),
            KeyError::NotPublicKey { .. } => {
                Some("pass the KEY.pub file written by `runner keygen`".into())
            }
            KeyError::Random => None,
            KeyError::Write(e) => e.hint(),
        }
    }
}

/// An Ed25519 private key.
pub struct SecretKey {
    pkcs8: Zeroizing<Vec<u8>>,
    pair: Ed25519KeyPair,
    key_id: KeyId,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SecretKey(key_id {}, secret redacted)",
            self.key_id.short()
        )
    }
}

impl SecretKey {
    /// A fresh key from the operating system's random number generator.
    pub fn generate() -> Result<SecretKey, KeyError> {
        let doc =
            Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).map_err(|_| KeyError::Random)?;
        let der = Zeroizing::new(doc.as_ref().to_vec());
        SecretKey::from_pkcs8(der).map_err(|_| KeyError::Random)
    }

    fn from_pkcs8(der: Zeroizing<Vec<u8>>) -> Result<SecretKey, &'static str> {
        let pair = Ed25519KeyPair::from_pkcs8(&der)
            .map_err(|_| "the PKCS#8 document is not a valid Ed25519 key (v2, with public key)")?;
        let key_id = Digest::of(pair.public_key().as_ref());
        Ok(SecretKey {
            pkcs8: der,
            pair,
            key_id,
        })
    }

    /// Read a private key file.
    pub fn load(path: &Path) -> Result<SecretKey, KeyError> {
        let text =
            Zeroizing::new(read_bounded(path, MAX_KEY_BYTES, "key file").map_err(KeyError::File)?);
        let key = SecretKey::from_file_bytes(&text).map_err(|why| KeyError::NotPrivateKey {
            path: path.to_owned(),
            why,
        })?;
        // After parsing, so a public key passed by mistake is named as such.
        check_private_mode(path)?;
        Ok(key)
    }

    fn from_file_bytes(text: &[u8]) -> Result<SecretKey, &'static str> {
        let text = std::str::from_utf8(text).map_err(|_| "the file is not text")?;
        let mut lines = text.lines();
        if lines.next() != Some(PRIVATE_KEY_HEADER) {
            return Err("the first line is not the runner private key header");
        }
        let body = lines.next().ok_or("the base64 line is missing")?;
        if lines.next().is_some() {
            return Err("there is text after the base64 line");
        }
        let der = Zeroizing::new(
            B64.decode(body.trim())
                .map_err(|_| "the second line is not base64")?,
        );
        SecretKey::from_pkcs8(der)
    }

    /// The private key file's contents.
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::with_capacity(
            PRIVATE_KEY_HEADER.len() + 2 * self.pkcs8.len(),
        ));
        text.push_str(PRIVATE_KEY_HEADER);
        text.push('\n');
        let b64 = Zeroizing::new(B64.encode(self.pkcs8.as_slice()));
        text.push_str(&b64);
        text.push('\n');
        text
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(self.pair.public_key().as_ref());
        PublicKey { bytes }
    }

    /// BLAKE3 of the raw public key.
    pub fn key_id(&self) -> KeyId {
        self.key_id
    }

    /// Sign `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; SIGNATURE_LEN] {
        let mut sig = [0u8; SIGNATURE_LEN];
        sig.copy_from_slice(self.pair.sign(message).as_ref());
        sig
    }
}

/// An Ed25519 public key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PublicKey {
    bytes: [u8; 32],
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey(key_id {})", self.key_id().short())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublicKeyFile {
    schema: String,
    algorithm: String,
    public_key: String,
    key_id: String,
}

impl PublicKey {
    /// A public key from its 32 raw bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> PublicKey {
        PublicKey { bytes }
    }

    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// BLAKE3 of the raw key.
    pub fn key_id(&self) -> KeyId {
        Digest::of(&self.bytes)
    }

    /// Whether `sig` is this key's signature over `message`.
    pub fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.bytes)
            .verify(message, sig)
            .is_ok()
    }

    /// The public key file's contents (RFC 8785 JSON and a newline).
    pub fn to_file_bytes(&self) -> Vec<u8> {
        let file = PublicKeyFile {
            schema: PUBLIC_KEY_SCHEMA.into(),
            algorithm: ALGORITHM.into(),
            public_key: B64.encode(self.bytes),
            key_id: self.key_id().to_hex(),
        };
        // Four short strings always have a canonical form.
        let mut bytes = to_canonical_from(&file).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// Read a public key file.
    pub fn load(path: &Path) -> Result<PublicKey, KeyError> {
        let bytes = read_bounded(path, MAX_KEY_BYTES, "key file").map_err(KeyError::File)?;
        PublicKey::from_file_bytes(&bytes).map_err(|detail| KeyError::NotPublicKey {
            path: path.to_owned(),
            detail,
        })
    }

    /// Parse a public key file's contents; the error names the offending field.
    pub fn from_file_bytes(bytes: &[u8]) -> Result<PublicKey, String> {
        parse_strict(bytes).map_err(|e| e.to_string())?;
        let file: PublicKeyFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if file.schema != PUBLIC_KEY_SCHEMA {
            return Err(format!(
                "field `schema` is {:?}, expected {PUBLIC_KEY_SCHEMA:?}",
                file.schema
            ));
        }
        if file.algorithm != ALGORITHM {
            return Err(format!(
                "field `algorithm` is {:?}, expected {ALGORITHM:?}",
                file.algorithm
            ));
        }
        let raw = B64
            .decode(&file.public_key)
            .map_err(|_| "field `public_key` is not standard padded base64".to_string())?;
        let bytes: [u8; 32] = raw
            .try_into()
            .map_err(|_| "field `public_key` is not 32 bytes".to_string())?;
        let key = PublicKey { bytes };
        if Digest::from_hex(&file.key_id) != Some(key.key_id()) {
            return Err("field `key_id` is not the BLAKE3 digest of `public_key`".into());
        }
        Ok(key)
    }
}

/// Refuse a private key file that group or others may access, as ssh does.
fn check_private_mode(path: &Path) -> Result<(), KeyError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyError::NotPrivate {
                    path: path.to_owned(),
                    mode,
                });
            }
        }
    }
    let _ = path;
    Ok(())
}

/// Where `runner keygen --out KEY` puts the public key: `KEY.pub`.
pub fn public_key_path(private: &Path) -> PathBuf {
    let mut name = private.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Write a key pair: the private key at `private` (mode 0600) and the public key beside it.
/// Without `Overwrite::Replace`, nothing is written if either file exists. Returns the public
/// key's path.
pub fn write_key_pair(
    key: &SecretKey,
    private: &Path,
    overwrite: Overwrite,
) -> Result<PathBuf, KeyError> {
    let public = public_key_path(private);
    if overwrite == Overwrite::Refuse {
        for path in [private, public.as_path()] {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(WriteError::Exists {
                    path: path.to_owned(),
                }
                .into());
            }
        }
    }
    let text = key.to_file_text();
    write_atomic(private, text.as_bytes(), 0o600, overwrite)?;
    if let Err(e) = write_atomic(&public, &key.public_key().to_file_bytes(), 0o644, overwrite) {
        // A private key without its public half is useless and confusing; take it back if it is
        // ours alone (with Replace, the old file is gone either way).
        if overwrite == Overwrite::Refuse {
            let _ = std::fs::remove_file(private);
        }
        return Err(e.into());
    }
    Ok(public)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_key_file_round_trips_and_signs() {
        let key = SecretKey::generate().unwrap();
        let again = SecretKey::from_file_bytes(key.to_file_text().as_bytes()).unwrap();
        assert_eq!(again.key_id(), key.key_id());
        let sig = again.sign(b"message");
        assert!(key.public_key().verify(b"message", &sig));
        assert!(!key.public_key().verify(b"messagE", &sig));
    }

    #[test]
    fn debug_prints_no_key_material() {
        let key = SecretKey::generate().unwrap();
        let debug = format!("{key:?}");
        let text = key.to_file_text();
        let b64 = text.lines().nth(1).unwrap();
        assert!(!debug.contains(b64), "{debug}");
        for window in key.pkcs8.windows(8) {
            let hex: String = window.iter().map(|b| format!("{b:02x}")).collect();
            assert!(!debug.contains(&hex));
        }
        assert!(debug.contains(&key.key_id().short()));
    }

    #[test]
    fn public_key_file_round_trips() {
        let key = SecretKey::generate().unwrap();
        let bytes = key.public_key().to_file_bytes();
        assert_eq!(
            PublicKey::from_file_bytes(&bytes).unwrap(),
            key.public_key()
        );
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["key_id"], key.key_id().to_hex());
        assert_eq!(v["algorithm"], "ed25519");
    }

    #[test]
    fn rejects_public_key_with_wrong_key_id() {
        let a = SecretKey::generate().unwrap().public_key();
        let b = SecretKey::generate().unwrap().public_key();
        let mut v: serde_json::Value = serde_json::from_slice(&a.to_file_bytes()).unwrap();
        v["key_id"] = b.key_id().to_hex().into();
        let err = PublicKey::from_file_bytes(v.to_string().as_bytes()).unwrap_err();
        assert!(err.contains("`key_id`"), "{err}");
    }

    #[test]
    fn rejects_public_key_with_unknown_field_or_duplicate_key() {
        let a = SecretKey::generate().unwrap().public_key();
        let mut v: serde_json::Value = serde_json::from_slice(&a.to_file_bytes()).unwrap();
        v["comment"] = "hi".into();
        let err = PublicKey::from_file_bytes(v.to_string().as_bytes()).unwrap_err();
        assert!(err.contains("unknown field `comment`"), "{err}");
        let text = String::from_utf8(a.to_file_bytes()).unwrap();
        let dup = text.replacen('{', "{\"schema\":\"x\",", 1);
        let err = PublicKey::from_file_bytes(dup.as_bytes()).unwrap_err();
        assert!(err.contains("duplicate key `schema`"), "{err}");
    }

    #[test]
    fn rejects_private_key_in_other_formats() {
        assert_eq!(
            SecretKey::from_file_bytes(b"hello\nAAAA\n").unwrap_err(),
            "the first line is not the runner private key header"
        );
        let bad = format!("{PRIVATE_KEY_HEADER}\n!!!\n");
        assert_eq!(
            SecretKey::from_file_bytes(bad.as_bytes()).unwrap_err(),
            "the second line is not base64"
        );
        let bad = format!("{PRIVATE_KEY_HEADER}\nAAAA\n");
        assert!(SecretKey::from_file_bytes(bad.as_bytes())
            .unwrap_err()
            .contains("PKCS#8"));
        let key = SecretKey::generate().unwrap();
        let public = key.public_key().to_file_bytes();
        assert!(SecretKey::from_file_bytes(&public).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn write_key_pair_makes_private_key_0600_and_refuses_overwrite() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("owner.key");
        let key = SecretKey::generate().unwrap();
        let public = write_key_pair(&key, &private, Overwrite::Refuse).unwrap();
        assert_eq!(public, dir.path().join("owner.key.pub"));
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(SecretKey::load(&private).unwrap().key_id(), key.key_id());
        assert_eq!(PublicKey::load(&public).unwrap(), key.public_key());

        let other = SecretKey::generate().unwrap();
        let err = write_key_pair(&other, &private, Overwrite::Refuse).unwrap_err();
        assert!(
            matches!(err, KeyError::Write(WriteError::Exists { .. })),
            "{err}"
        );
        assert_eq!(SecretKey::load(&private).unwrap().key_id(), key.key_id());

        // Only the public half present: still refused, and the private key is not created.
        let lone = dir.path().join("lone.key");
        std::fs::write(public_key_path(&lone), b"x").unwrap();
        let err = write_key_pair(&other, &lone, Overwrite::Refuse).unwrap_err();
        assert!(err.to_string().contains("lone.key.pub"), "{err}");
        assert!(!lone.exists());
    }
}
