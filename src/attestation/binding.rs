//! The 64 bytes of user data a hardware report carries: what binds the report to this runner's
//! keys and binary, and to the verifier's nonce.
//!
//! They are SHA-512 of the RFC 8785 bytes of a [`Binding`] object. The `schema` member is the
//! domain separation (no other document of ours has it), and a verifier with any JSON library
//! can recompute the value: `sha512(json.dumps(binding, sort_keys=True, separators=(",", ":")))`
//! in Python gives the same bytes, since every member is an ASCII string.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::digest::{digest, SHA512};
use serde::{Deserialize, Serialize};

use crate::primitives::canonical::to_canonical_from;
use crate::primitives::digest::Digest;
use crate::primitives::keys::PublicKey;

/// `schema` of the binding object.
pub const BINDING_SCHEMA: &str = "runner-attestation-binding/1";
/// The most nonce bytes a verifier may supply (the report data is only a hash of it).
pub const MAX_NONCE_BYTES: usize = 64;

/// What the report's user data commits to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// Always [`BINDING_SCHEMA`].
    pub schema: String,
    /// The runner's Ed25519 signing key (receipts, evidence), standard base64.
    pub signing_key: String,
    /// The runner's age X25519 recipient: what owners encrypt inputs to.
    pub age_recipient: String,
    /// BLAKE3 of the runner executable's bytes.
    pub runner_digest: Digest,
    /// The verifier's nonce, lowercase hex.
    pub nonce: String,
}

impl Binding {
    /// The binding of these keys, binary and nonce.
    pub fn new(
        signing_key: &PublicKey,
        age_recipient: &str,
        runner_digest: Digest,
        nonce: &[u8],
    ) -> Binding {
        Binding {
            schema: BINDING_SCHEMA.into(),
            signing_key: B64.encode(signing_key.as_bytes()),
            age_recipient: age_recipient.to_owned(),
            runner_digest,
            nonce: hex::encode(nonce),
        }
    }

    /// The 64 bytes that go into the report.
    pub fn report_data(&self) -> [u8; 64] {
        // Strings and a digest only: there is always a canonical form.
        let bytes = to_canonical_from(self).unwrap_or_default();
        let mut out = [0u8; 64];
        out.copy_from_slice(digest(&SHA512, &bytes).as_ref());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::keys::SecretKey;

    #[test]
    fn every_bound_value_changes_the_report_data() {
        let key = SecretKey::generate().unwrap().public_key();
        let other = SecretKey::generate().unwrap().public_key();
        let base = Binding::new(&key, "age1a", Digest([1; 32]), b"n");
        let changed = [
            Binding::new(&other, "age1a", Digest([1; 32]), b"n"),
            Binding::new(&key, "age1b", Digest([1; 32]), b"n"),
            Binding::new(&key, "age1a", Digest([2; 32]), b"n"),
            Binding::new(&key, "age1a", Digest([1; 32]), b"m"),
        ];
        for c in changed {
            assert_ne!(c.report_data(), base.report_data());
        }
    }

    #[test]
    fn is_sha512_of_the_sorted_compact_json() {
        // The recipe docs/attestation.md gives verifiers, spelled out by hand.
        let key = PublicKey::from_bytes([7; 32]);
        let b = Binding::new(&key, "age1xyz", Digest([3; 32]), &[0xab, 0xcd]);
        let text = format!(
            "{{\"age_recipient\":\"age1xyz\",\"nonce\":\"abcd\",\"runner_digest\":\"{}\",\
             \"schema\":\"runner-attestation-binding/1\",\"signing_key\":\"{}\"}}",
            "03".repeat(32),
            B64.encode([7u8; 32])
        );
        assert_eq!(
            b.report_data().as_slice(),
            digest(&SHA512, text.as_bytes()).as_ref()
        );
    }
}
