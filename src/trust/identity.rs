//! The runner's identity document: its signing key and its age recipient, bound together by a
//! signature of that signing key (DSSE, payloadType [`IDENTITY_PAYLOAD_TYPE`], RFC 8785 JSON).
//! Data owners encrypt inputs to the recipient it names; hardware attestation places its digest
//! in the enclave's report, so the binding reaches the hardware.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::primitives::canonical::{parse_strict, to_canonical_from};
use crate::primitives::dsse::{DsseError, Envelope};
use crate::primitives::keys::{PublicKey, SecretKey};
use crate::sealing::parse_recipient;

/// DSSE payloadType of the identity document.
pub const IDENTITY_PAYLOAD_TYPE: &str = "application/vnd.runner.identity+json; version=1";
/// `schema` of its payload.
pub const IDENTITY_SCHEMA: &str = "runner-identity/1";

/// What the identity document says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// Always [`IDENTITY_SCHEMA`].
    pub schema: String,
    /// The Ed25519 signing key that signs receipts (and this document), standard base64.
    pub signing_key: String,
    /// Its key id (BLAKE3 of the raw key, 64 hex digits).
    pub signing_key_id: String,
    /// The age X25519 recipient inputs are encrypted to.
    pub age_recipient: String,
}

/// Why an identity document was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The envelope is malformed or its signature does not verify.
    #[error(transparent)]
    Envelope(#[from] DsseError),
    /// Not an identity document, or one that contradicts itself.
    #[error("not a runner identity document: {0}")]
    Payload(String),
}

impl crate::error::Diagnose for IdentityError {
    fn exit(&self) -> crate::error::Exit {
        crate::error::Exit::Refused
    }
}

/// The document for `key` and `recipient`, signed by `key`.
pub fn sign_identity(key: &SecretKey, recipient: &str) -> Result<Vec<u8>, IdentityError> {
    let public = key.public_key();
    let doc = Identity {
        schema: IDENTITY_SCHEMA.into(),
        signing_key: B64.encode(public.as_bytes()),
        signing_key_id: public.key_id().to_hex(),
        age_recipient: recipient.to_owned(),
    };
    let payload = to_canonical_from(&doc).map_err(|e| IdentityError::Payload(e.to_string()))?;
    let mut envelope = Envelope::new(IDENTITY_PAYLOAD_TYPE, payload);
    envelope.sign(key)?;
    Ok(envelope.to_bytes())
}

/// Parse an identity document and check it is signed by the key it names.
pub fn verify_identity(bytes: &[u8]) -> Result<(Identity, PublicKey), IdentityError> {
    let bad = |why: &str| IdentityError::Payload(why.to_owned());
    let envelope = Envelope::parse(bytes)?;
    if envelope.payload_type != IDENTITY_PAYLOAD_TYPE {
        return Err(bad("its payloadType is not the identity document's"));
    }
    let value = parse_strict(&envelope.payload).map_err(|e| bad(&e.to_string()))?;
    let doc: Identity = serde_json::from_value(value).map_err(|e| bad(&e.to_string()))?;
    if doc.schema != IDENTITY_SCHEMA {
        return Err(bad("field `schema` is not runner-identity/1"));
    }
    let raw: [u8; 32] = B64
        .decode(&doc.signing_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("field `signing_key` is not 32 bytes of base64"))?;
    let key = PublicKey::from_bytes(raw);
    if key.key_id().to_hex() != doc.signing_key_id {
        return Err(bad("field `signing_key_id` is not the key's id"));
    }
    parse_recipient(&doc.age_recipient).map_err(|e| bad(&e.to_string()))?;
    let signed = envelope.signed_bytes();
    let good = envelope.signatures.len() == 1
        && envelope.signatures[0].keyid == key.key_id()
        && key.verify(&signed, &envelope.signatures[0].sig);
    if !good {
        return Err(bad("it is not signed (once) by the signing key it names"));
    }
    Ok((doc, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealing::SealKey;

    #[test]
    fn binds_the_recipient_to_the_signing_key() {
        let key = SecretKey::generate().unwrap();
        let recipient = SealKey::generate().recipient();
        let bytes = sign_identity(&key, &recipient).unwrap();
        let (doc, public) = verify_identity(&bytes).unwrap();
        assert_eq!(doc.age_recipient, recipient);
        assert_eq!(public, key.public_key());
        // Another recipient under the same signature does not verify.
        let mut envelope = Envelope::parse(&bytes).unwrap();
        let other = SealKey::generate().recipient();
        envelope.payload = String::from_utf8(envelope.payload)
            .unwrap()
            .replace(&recipient, &other)
            .into_bytes();
        assert!(verify_identity(&envelope.to_bytes()).is_err());
    }
}
