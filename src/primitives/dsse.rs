//! DSSE envelopes (Dead Simple Signing Envelope, secure-systems-lab/dsse v1): a payload, its
//! type, and Ed25519 signatures over the pre-authentication encoding [`pae`] of both.
//!
//! Generic over `payloadType`: certificates and receipts use the same envelope with different
//! types, and a signature over one kind can never be replayed as the other because the type is
//! signed.
//!
//! The file form is stricter than the DSSE spec requires, so that an envelope file has exactly
//! one accepted byte sequence (any edit is either a parse error or a failed signature):
//! - the JSON is RFC 8785 canonical, optionally followed by one `\n`, and duplicate keys, unknown
//!   fields and missing fields are refused;
//! - `payload` and `sig` are standard base64 with canonical padding (DSSE also allows URL-safe
//!   base64; we write and read only the standard alphabet);
//! - every signature carries `keyid`, the 64-hex BLAKE3 digest of the signer's raw public key
//!   (see [`super::keys`]); keyids are only used to pick the key to try, never trusted alone;
//! - there is at least one signature and each `sig` is 64 bytes.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::canonical::{parse_strict, to_canonical};
use super::digest::Digest;
use super::keys::{KeyId, PublicKey, SecretKey, SIGNATURE_LEN};
use crate::error::{Diagnose, Exit};

/// One signature in an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Which key claims to have signed (unauthenticated; used only to find the key).
    pub keyid: KeyId,
    /// The Ed25519 signature over `pae(payloadType, payload)`.
    pub sig: [u8; SIGNATURE_LEN],
}

/// A parsed (not yet verified) envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The `payloadType`, naming what the payload is.
    pub payload_type: String,
    /// The payload bytes exactly as signed.
    pub payload: Vec<u8>,
    /// Signatures in file order.
    pub signatures: Vec<Signature>,
}

/// Why an envelope was not read, or not signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DsseError {
    /// Not JSON, truncated, or a duplicate key.
    #[error("the envelope is not valid JSON: {0}")]
    NotJson(String),
    /// Valid JSON, but a field is unknown, missing or of the wrong type.
    #[error("the envelope has a bad field: {0}")]
    Field(String),
    /// A base64 field does not decode under standard padded base64.
    #[error("envelope field `{0}` is not standard padded base64")]
    Base64(String),
    /// A `keyid` is not 64 lowercase hex digits.
    #[error("envelope field `signatures[{0}].keyid` is not a key id (64 lowercase hex digits)")]
    KeyId(usize),
    /// A `sig` does not have the length of an Ed25519 signature.
    #[error("envelope field `signatures[{index}].sig` is {len} bytes; an Ed25519 signature is 64")]
    SigLength {
        /// Position in `signatures`.
        index: usize,
        /// Decoded length.
        len: usize,
    },
    /// `signatures` is empty.
    #[error("the envelope has no signatures")]
    NoSignatures,
    /// The JSON parses but is not byte-for-byte the canonical form this runner writes.
    #[error(
        "the envelope is not in canonical form (RFC 8785 JSON with at most one trailing newline)"
    )]
    NotCanonical,
    /// The key being added has already signed this envelope.
    #[error("key {} has already signed this envelope", .0.short())]
    AlreadySigned(KeyId),
}

impl Diagnose for DsseError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            DsseError::AlreadySigned(_) => {
                "a key counts once; co-sign with a different owner's key".into()
            }
            DsseError::NotCanonical => "the file was edited after signing; use the file exactly \
                as `runner approve` or `runner cosign` wrote it"
                .into(),
            _ => "the file is damaged or not an envelope; get a fresh copy from its signer".into(),
        })
    }
}

/// DSSE v1 pre-authentication encoding:
/// `"DSSEv1" SP len(type) SP type SP len(body) SP body`, lengths as ASCII decimal.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let type_len = payload_type.len().to_string();
    let body_len = payload.len().to_string();
    let mut out = Vec::with_capacity(
        10 + type_len.len() + payload_type.len() + body_len.len() + payload.len(),
    );
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(type_len.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(body_len.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeJson {
    payload: String,
    #[serde(rename = "payloadType")]
    payload_type: String,
    signatures: Vec<SignatureJson>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureJson {
    keyid: String,
    sig: String,
}

impl Envelope {
    /// An unsigned envelope.
    pub fn new(payload_type: &str, payload: Vec<u8>) -> Envelope {
        Envelope {
            payload_type: payload_type.to_owned(),
            payload,
            signatures: Vec::new(),
        }
    }

    /// The bytes every signature covers.
    pub fn signed_bytes(&self) -> Vec<u8> {
        pae(&self.payload_type, &self.payload)
    }

    /// Plain BLAKE3 of the payload bytes: independent of who signed, so co-signing keeps it.
    pub fn payload_digest(&self) -> Digest {
        Digest::of(&self.payload)
    }

    /// Whether a signature with this key id is present (valid or not).
    pub fn has_signature_by(&self, keyid: &KeyId) -> bool {
        self.signatures.iter().any(|s| &s.keyid == keyid)
    }

    /// Add `key`'s signature; refused if that key already has one here.
    pub fn sign(&mut self, key: &SecretKey) -> Result<(), DsseError> {
        let keyid = key.key_id();
        if self.has_signature_by(&keyid) {
            return Err(DsseError::AlreadySigned(keyid));
        }
        let sig = key.sign(&self.signed_bytes());
        self.signatures.push(Signature { keyid, sig });
        Ok(())
    }

    /// Whether `sig` is `key`'s valid signature over this envelope's payload and type.
    pub fn verify_signature(&self, sig: &Signature, key: &PublicKey) -> bool {
        key.verify(&self.signed_bytes(), &sig.sig)
    }

    /// The file form: RFC 8785 JSON and a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let json = EnvelopeJson {
            payload: B64.encode(&self.payload),
            payload_type: self.payload_type.clone(),
            signatures: self
                .signatures
                .iter()
                .map(|s| SignatureJson {
                    keyid: s.keyid.to_hex(),
                    sig: B64.encode(s.sig),
                })
                .collect(),
        };
        // Strings only: there is always a canonical form.
        let value = serde_json::to_value(&json).unwrap_or_default();
        let mut bytes = to_canonical(&value).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// Parse the file form strictly (see the module doc).
    pub fn parse(bytes: &[u8]) -> Result<Envelope, DsseError> {
        let value = parse_strict(bytes).map_err(|e| DsseError::NotJson(e.to_string()))?;
        let json: EnvelopeJson =
            serde_json::from_value(value.clone()).map_err(|e| DsseError::Field(e.to_string()))?;
        let payload = B64
            .decode(&json.payload)
            .map_err(|_| DsseError::Base64("payload".into()))?;
        if json.signatures.is_empty() {
            return Err(DsseError::NoSignatures);
        }
        let mut signatures = Vec::with_capacity(json.signatures.len());
        for (index, s) in json.signatures.iter().enumerate() {
            let keyid = Digest::from_hex(&s.keyid).ok_or(DsseError::KeyId(index))?;
            let raw = B64
                .decode(&s.sig)
                .map_err(|_| DsseError::Base64(format!("signatures[{index}].sig")))?;
            let len = raw.len();
            let sig: [u8; SIGNATURE_LEN] = raw
                .try_into()
                .map_err(|_| DsseError::SigLength { index, len })?;
            signatures.push(Signature { keyid, sig });
        }
        let canonical = to_canonical(&value).map_err(|_| DsseError::NotCanonical)?;
        let rest = bytes
            .strip_prefix(canonical.as_slice())
            .ok_or(DsseError::NotCanonical)?;
        if !(rest.is_empty() || rest == b"\n") {
            return Err(DsseError::NotCanonical);
        }
        Ok(Envelope {
            payload_type: json.payload_type,
            payload,
            signatures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_spec_test_vector() {
        // secure-systems-lab/dsse protocol.md, "Test Vectors".
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn spec_example_envelope_shape_parses_when_given_a_keyid() {
        // The spec's example envelope carries no keyid and an ECDSA signature; with a keyid and
        // a 64-byte sig the same shape is accepted, and the payload decodes to the test body.
        let sig = "A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAajabZKciJTfUiHqJPcIAriEGAHTVeCUjW2JIZA==";
        let keyid = Digest::of(b"k").to_hex();
        let text = format!(
            r#"{{"payload":"aGVsbG8gd29ybGQ=","payloadType":"http://example.com/HelloWorld","signatures":[{{"keyid":"{keyid}","sig":"{sig}"}}]}}"#
        );
        let env = Envelope::parse(text.as_bytes()).unwrap();
        assert_eq!(env.payload, b"hello world");
        assert_eq!(
            env.signed_bytes(),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(env.to_bytes(), format!("{text}\n").into_bytes());
    }

    fn signed() -> (Envelope, SecretKey) {
        let key = SecretKey::generate().unwrap();
        let mut env = Envelope::new("application/x-test", b"{\"a\":1}".to_vec());
        env.sign(&key).unwrap();
        (env, key)
    }

    #[test]
    fn round_trips_and_verifies() {
        let (env, key) = signed();
        let parsed = Envelope::parse(&env.to_bytes()).unwrap();
        assert_eq!(parsed, env);
        assert!(parsed.verify_signature(&parsed.signatures[0], &key.public_key()));
        let mut other_type = parsed.clone();
        other_type.payload_type = "application/x-other".into();
        assert!(!other_type.verify_signature(&parsed.signatures[0], &key.public_key()));
    }

    #[test]
    fn rejects_second_signature_by_same_key() {
        let (mut env, key) = signed();
        assert_eq!(env.sign(&key), Err(DsseError::AlreadySigned(key.key_id())));
        assert_eq!(env.signatures.len(), 1);
    }

    fn edit(env: &Envelope, f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut v: serde_json::Value = serde_json::from_slice(&env.to_bytes()).unwrap();
        f(&mut v);
        to_canonical(&v).unwrap()
    }

    #[test]
    fn rejects_unknown_and_missing_fields() {
        let (env, _) = signed();
        let extra = edit(&env, |v| v["extra"] = 1.into());
        assert!(
            matches!(Envelope::parse(&extra), Err(DsseError::Field(m)) if m.contains("unknown field `extra`"))
        );
        let extra = edit(&env, |v| v["signatures"][0]["note"] = "x".into());
        assert!(
            matches!(Envelope::parse(&extra), Err(DsseError::Field(m)) if m.contains("unknown field `note`"))
        );
        let missing = edit(&env, |v| {
            v.as_object_mut().unwrap().remove("payloadType");
        });
        assert!(
            matches!(Envelope::parse(&missing), Err(DsseError::Field(m)) if m.contains("payloadType"))
        );
    }

    #[test]
    fn rejects_duplicate_keys_truncation_and_garbage() {
        let (env, _) = signed();
        let text = String::from_utf8(env.to_bytes()).unwrap();
        let dup = text.replacen("{\"payload\"", "{\"payloadType\":\"x\",\"payload\"", 1);
        assert!(
            matches!(Envelope::parse(dup.as_bytes()), Err(DsseError::NotJson(m)) if m.contains("duplicate key"))
        );
        let bytes = env.to_bytes();
        assert!(matches!(
            Envelope::parse(&bytes[..bytes.len() / 2]),
            Err(DsseError::NotJson(_))
        ));
        assert!(matches!(
            Envelope::parse(b"\x00\xffgarbage"),
            Err(DsseError::NotJson(_))
        ));
        assert!(matches!(Envelope::parse(b""), Err(DsseError::NotJson(_))));
    }

    #[test]
    fn rejects_non_canonical_layout() {
        let (env, _) = signed();
        let v: serde_json::Value = serde_json::from_slice(&env.to_bytes()).unwrap();
        let pretty = serde_json::to_vec_pretty(&v).unwrap();
        assert_eq!(Envelope::parse(&pretty), Err(DsseError::NotCanonical));
        let mut two_newlines = env.to_bytes();
        two_newlines.push(b'\n');
        assert_eq!(Envelope::parse(&two_newlines), Err(DsseError::NotCanonical));
        let mut no_newline = env.to_bytes();
        no_newline.pop();
        assert!(Envelope::parse(&no_newline).is_ok());
    }

    #[test]
    fn rejects_non_standard_base64() {
        let (env, _) = signed();
        // URL-safe alphabet and missing padding are both refused.
        let unpadded = edit(&env, |v| {
            let p = v["payload"]
                .as_str()
                .unwrap()
                .trim_end_matches('=')
                .to_owned();
            v["payload"] = p.into();
        });
        assert_eq!(
            Envelope::parse(&unpadded),
            Err(DsseError::Base64("payload".into()))
        );
        let url = edit(&env, |v| v["payload"] = "-_-_".into());
        assert_eq!(
            Envelope::parse(&url),
            Err(DsseError::Base64("payload".into()))
        );
        // Non-zero trailing bits would give a second spelling of the same bytes.
        let sloppy = edit(&env, |v| v["payload"] = "aGVsbG9=".into());
        assert_eq!(
            Envelope::parse(&sloppy),
            Err(DsseError::Base64("payload".into()))
        );
        let sig = edit(&env, |v| v["signatures"][0]["sig"] = "***".into());
        assert_eq!(
            Envelope::parse(&sig),
            Err(DsseError::Base64("signatures[0].sig".into()))
        );
    }

    #[test]
    fn rejects_bad_keyid_short_sig_and_no_signatures() {
        let (env, _) = signed();
        let upper = edit(&env, |v| {
            let k = v["signatures"][0]["keyid"].as_str().unwrap().to_uppercase();
            v["signatures"][0]["keyid"] = k.into();
        });
        assert_eq!(Envelope::parse(&upper), Err(DsseError::KeyId(0)));
        let short = edit(&env, |v| v["signatures"][0]["sig"] = "AAAA".into());
        assert_eq!(
            Envelope::parse(&short),
            Err(DsseError::SigLength { index: 0, len: 3 })
        );
        let none = edit(&env, |v| v["signatures"] = serde_json::json!([]));
        assert_eq!(Envelope::parse(&none), Err(DsseError::NoSignatures));
    }
}
