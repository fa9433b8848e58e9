//! Certificates: what the data owners sign to approve one engine, under one policy, with one
//! model, for a window of time.
//!
//! A certificate is a DSSE envelope ([`crate::primitives::dsse`]) with payloadType
//! [`CERTIFICATE_PAYLOAD_TYPE`] around a [`CertificatePayload`] in RFC 8785 canonical JSON.
//! The payload is built in exactly one place, [`build_payload`], from the engine facts and the
//! approval terms. The certificate digest ([`certificate_digest`]) is plain BLAKE3 of the payload
//! bytes, so adding a co-signature does not change it; `supersedes` and `revoked` use it.
//!
//! Reading is strict: the payload must parse without duplicate keys or unknown fields, be
//! byte-for-byte the canonical serialisation of what it parses to (one spelling per meaning),
//! and agree with itself (policy_id and policy_digest recomputed from the embedded policy, the
//! validity window non-empty). Signatures are *not* checked here: that is [`super::verify`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::attestation::Requirement;
use crate::error::{Diagnose, Exit};
use crate::primitives::atomic_file::WriteError;
use crate::primitives::bounded_read::{read_bounded, ReadError, MAX_DOCUMENT_BYTES};
use crate::primitives::canonical::{parse_strict, to_canonical_from};
use crate::primitives::digest::Digest;
use crate::primitives::dsse::{DsseError, Envelope};
use crate::primitives::keys::{KeyId, SecretKey};
use crate::primitives::time::{TimeError, Timestamp};
use crate::restrict::policy::{Policy, SealRule};
use crate::restrict::{Checked, RegionKind, Report};
use crate::sealing::parse_recipient;

/// DSSE payloadType of a certificate.
pub const CERTIFICATE_PAYLOAD_TYPE: &str = "application/vnd.runner.certificate+json; version=1";

/// `schema` field of a certificate payload.
pub const CERTIFICATE_SCHEMA: &str = "runner-certificate/2";

/// Validity when `--expires` is not given: issued_at plus this many days.
pub const DEFAULT_VALIDITY_DAYS: i64 = 90;

/// Largest certificate file read, so a wrong path cannot make us read gigabytes.
pub const MAX_CERTIFICATE_BYTES: u64 = MAX_DOCUMENT_BYTES;

/// Longest `note`, in bytes.
pub const MAX_NOTE_LEN: usize = 4096;

/// Longest engine name, in bytes.
const MAX_ENGINE_NAME_LEN: usize = 255;

/// A private region of the engine source: its kind and 1-based, inclusive lines (markers
/// included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateRange {
    /// `obfuscate` or `hide`.
    pub kind: RegionKind,
    /// First line.
    pub start: u32,
    /// Last line.
    pub end: u32,
}

/// The restrict verifier's report on the engine, bound into the certificate once the verifier
/// runs as part of approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestrictReport {
    /// The private regions of the source.
    pub private_ranges: Vec<PrivateRange>,
    /// Built-in call sites checked against the policy (in private regions or reachable from
    /// them).
    pub calls_checked: u64,
    /// Built-in functions the engine calls.
    pub builtins_used: BTreeSet<String>,
    /// BLAKE3 of the redacted view the owners reviewed.
    pub view_digest: Digest,
}

impl RestrictReport {
    /// The part of a verifier report a certificate binds.
    pub fn from_report(report: &Report) -> Result<RestrictReport, CertError> {
        let view_digest = Digest::from_hex(&report.view_digest).ok_or_else(|| {
            CertError::Payload("the verifier's view digest is not 64 hex digits".into())
        })?;
        Ok(RestrictReport {
            private_ranges: report
                .private_ranges
                .iter()
                .map(|r| PrivateRange {
                    kind: r.kind,
                    start: r.start_line,
                    end: r.end_line,
                })
                .collect(),
            calls_checked: report.calls_checked as u64,
            builtins_used: report.builtins_used.clone(),
            view_digest,
        })
    }
}

/// Everything about the engine that a certificate binds; the input of [`build_payload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineFacts {
    /// The engine's name: its source file's stem (`gemma3` for `engines/gemma3.eng`).
    pub name: String,
    /// Plain BLAKE3 of the exact source bytes.
    pub source_digest: Digest,
    /// The restrict verifier's report; `None` until approval runs the verifier.
    pub restrict: Option<RestrictReport>,
}

impl EngineFacts {
    /// Read an engine source file (a regular file of at most
    /// [`MAX_SOURCE_BYTES`](crate::restrict::MAX_SOURCE_BYTES)); the verifier still has to run
    /// on the bytes.
    pub fn read_source(path: &Path) -> Result<Vec<u8>, ReadError> {
        read_bounded(path, crate::restrict::MAX_SOURCE_BYTES as u64, "engine")
    }

    /// Name, digest and verifier report of an engine the verifier accepted.
    pub fn from_checked(path: &Path, checked: &Checked) -> Result<EngineFacts, CertError> {
        let mut facts = EngineFacts::unchecked(path, checked.source().as_bytes())?;
        facts.restrict = Some(RestrictReport::from_report(checked.report())?);
        Ok(facts)
    }

    /// Name and digest alone, without a verifier report (tests of the payload format).
    pub fn unchecked(path: &Path, bytes: &[u8]) -> Result<EngineFacts, CertError> {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| check_engine_name(s).is_ok())
            .ok_or_else(|| CertError::EngineName {
                path: path.to_owned(),
            })?;
        Ok(EngineFacts {
            name: name.to_owned(),
            source_digest: Digest::of(bytes),
            restrict: None,
        })
    }
}

/// The approval terms: everything in a certificate that is not about the engine.
#[derive(Debug, Clone)]
pub struct Terms {
    /// The policy approved (its id is computed under the running verifier).
    pub policy: Policy,
    /// The model digest ([`crate::model::digest`]).
    pub model_digest: Digest,
    /// When the certificate is made.
    pub issued_at: Timestamp,
    /// Start of validity; `None` means `issued_at`.
    pub valid_from: Option<Timestamp>,
    /// End of validity (exclusive); `None` means `valid_from` + [`DEFAULT_VALIDITY_DAYS`].
    pub expires_at: Option<Timestamp>,
    /// Digest of the certificate this one replaces.
    pub supersedes: Option<Digest>,
    /// The line of certificates this one belongs to (rollback protection compares versions
    /// within a lineage).
    pub lineage: String,
    /// Its version in the lineage: 1 for the first, the replaced one's plus one after.
    pub version: u64,
    /// Who may read the outputs: age X25519 recipients (`age1...`); empty for plaintext
    /// outputs, where the policy allows them.
    pub recipients: Vec<String>,
    /// Free text for the other owners.
    pub note: Option<String>,
    /// The hardware and measurements a run must attest to; `None`: no attestation required.
    pub attestation: Option<Requirement>,
}

/// The engine section of a payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// Source file stem.
    pub name: String,
    /// Plain BLAKE3 of the exact source bytes.
    pub source_digest: Digest,
    /// The restrict report; absent (not `null`) when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restrict: Option<RestrictReport>,
}

/// What owners sign. Field order here is irrelevant: the bytes are RFC 8785.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificatePayload {
    /// Always [`CERTIFICATE_SCHEMA`].
    pub schema: String,
    /// The approved engine.
    pub engine: EngineSection,
    /// Full `policy_id` under `verifier_version`.
    pub policy_id: Digest,
    /// Digest of the policy alone.
    pub policy_digest: Digest,
    /// The policy itself, normalised.
    pub policy: Policy,
    /// The approved model checkpoint.
    pub model_digest: Digest,
    /// The restrict verifier version the policy_id was computed under.
    pub verifier_version: String,
    /// When it was signed.
    pub issued_at: Timestamp,
    /// Valid from this instant (inclusive).
    pub valid_from: Timestamp,
    /// Valid until this instant (exclusive).
    pub expires_at: Timestamp,
    /// Digest of the certificate replaced, or `null`.
    pub supersedes: Option<Digest>,
    /// The lineage this certificate belongs to.
    pub lineage: String,
    /// Its version in the lineage, from 1; a runner refuses a version below the highest it has
    /// admitted for the lineage.
    pub version: u64,
    /// The age recipients outputs are encrypted to, sorted, no repeats; empty: plaintext
    /// outputs.
    pub recipients: Vec<String>,
    /// Free text, or `null`.
    pub note: Option<String>,
    /// What the machine running the job must attest to (docs/attestation.md); absent (not
    /// `null`) when nothing is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Requirement>,
}

/// Why a certificate was not made, read, or accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// The certificate file could not be read.
    #[error(transparent)]
    File(ReadError),
    /// The DSSE envelope is malformed.
    #[error(transparent)]
    Envelope(#[from] DsseError),
    /// The envelope holds something other than a certificate.
    #[error("payloadType is {found:?}, not a runner certificate ({CERTIFICATE_PAYLOAD_TYPE:?})")]
    WrongPayloadType {
        /// The payloadType found.
        found: String,
    },
    /// The payload is of another certificate format (an older one has no lineage or version).
    #[error("the certificate is in format {found:?}; this runner reads {CERTIFICATE_SCHEMA:?}")]
    Schema {
        /// The payload's `schema`.
        found: String,
    },
    /// The payload is not a well-formed certificate payload.
    #[error("the certificate payload is malformed: {0}")]
    Payload(String),
    /// The payload contradicts itself.
    #[error("the certificate payload is inconsistent: field `{field}` {why}")]
    Inconsistent {
        /// The field.
        field: &'static str,
        /// How it disagrees.
        why: &'static str,
    },
    /// The policy requires sealed outputs and the certificate names no one to seal them to.
    #[error("the policy requires sealed outputs, but the certificate names no recipients")]
    NoRecipients,
    /// A trusted key's signature does not verify (deliberately without detail).
    #[error("signature by key {} does not verify", .key_id.to_hex())]
    BadSignature {
        /// The key named by the signature.
        key_id: KeyId,
    },
    /// A signature by a key the trust configuration does not list (refused when co-signing).
    #[error("the certificate carries a signature by key {}, which is not an owner in the trust configuration, so it cannot be checked", .key_id.to_hex())]
    UnknownSigner {
        /// The key named by the signature.
        key_id: KeyId,
    },
    /// Fewer distinct trusted owners signed than the trust configuration requires.
    #[error("not enough owner signatures: {valid} valid, {required} required by the trust configuration{}", untrusted_note(.untrusted))]
    ThresholdNotMet {
        /// Distinct trusted keys with a valid signature.
        valid: usize,
        /// `required_signatures`.
        required: usize,
        /// Keys that signed but are not owners in the trust configuration.
        untrusted: Vec<KeyId>,
    },
    /// The certificate digest is listed in `revoked`.
    #[error("certificate {} is revoked by the trust configuration", .digest.to_hex())]
    Revoked {
        /// The certificate digest.
        digest: Digest,
    },
    /// Before `valid_from`.
    #[error("the certificate is not valid yet: valid_from is {valid_from}, now is {now}")]
    NotYetValid {
        /// Start of validity.
        valid_from: Timestamp,
        /// The time of the check.
        now: Timestamp,
    },
    /// At or after `expires_at`.
    #[error("the certificate expired at {expires_at} (now is {now})")]
    Expired {
        /// End of validity.
        expires_at: Timestamp,
        /// The time of the check.
        now: Timestamp,
    },
    /// `expires_at` is not after `valid_from` (approval input).
    #[error("expires_at {expires_at} is not after valid_from {valid_from}")]
    EmptyWindow {
        /// Start of validity.
        valid_from: Timestamp,
        /// End of validity.
        expires_at: Timestamp,
    },
    /// A time could not be written.
    #[error("{0}")]
    Time(#[from] TimeError),
    /// The note is too long or has control characters.
    #[error("the note {0}")]
    BadNote(&'static str),
    /// The engine source could not be read.
    #[error("cannot read engine source {}: {source}", path.display())]
    ReadEngine {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The engine file's stem is not a usable name.
    #[error("engine file {} has no usable name (a UTF-8 file stem without control characters)", path.display())]
    EngineName {
        /// The file.
        path: PathBuf,
    },
    /// The key has already signed this certificate.
    #[error("key {} has already signed this certificate", .key_id.to_hex())]
    AlreadySigned {
        /// The key.
        key_id: KeyId,
    },
    /// Writing the certificate failed or would overwrite a file.
    #[error(transparent)]
    Write(#[from] WriteError),
}

fn untrusted_note(untrusted: &[KeyId]) -> String {
    if untrusted.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = untrusted.iter().map(|k| k.short()).collect();
    format!(
        " (ignored signatures by keys not in the trust configuration: {})",
        ids.join(", ")
    )
}

impl Diagnose for CertError {
    fn exit(&self) -> Exit {
        match self {
            CertError::File(e) => e.exit(),
            CertError::Envelope(e) => e.exit(),
            CertError::Write(e) => e.exit(),
            CertError::WrongPayloadType { .. }
            | CertError::Inconsistent { .. }
            | CertError::BadSignature { .. }
            | CertError::UnknownSigner { .. }
            | CertError::Schema { .. }
            | CertError::ThresholdNotMet { .. }
            | CertError::Revoked { .. }
            | CertError::NotYetValid { .. }
            | CertError::Expired { .. } => Exit::Refused,
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            CertError::File(e) if e.is_missing() => format!(
                "nothing is at {}: give the certificate file `runner approve --out` wrote",
                e.path().display()
            ),
            CertError::File(e) => return e.hint(),
            CertError::Envelope(e) => return e.hint(),
            CertError::WrongPayloadType { .. } => {
                "this file is another kind of signed document; pass a certificate".into()
            }
            CertError::Payload(_) | CertError::Inconsistent { .. } => {
                "the signer's tool wrote a bad certificate; owners must approve a new one".into()
            }
            CertError::BadSignature { .. } => "the certificate was altered after signing, or the \
                key file in trust.toml is not the one that signed; get an unmodified copy"
                .into(),
            CertError::NoRecipients => "name who may read the results: `runner approve ... \
                --recipient age1...` (or --recipients-file, as `age -R` reads)"
                .into(),
            CertError::Schema { .. } => "the owners must approve the engine again with this \
                runner (`runner approve`, `--supersedes` the old certificate)"
                .into(),
            CertError::UnknownSigner { .. } => "pass --trust with a configuration that lists \
                every owner who signed, or ask where the certificate came from"
                .into(),
            CertError::ThresholdNotMet { .. } => "more owners listed in trust.toml must sign: \
                `runner cosign CERT --key OWNER.key`"
                .into(),
            CertError::Revoked { .. } => {
                "use the certificate that superseded it, or have owners approve a new one".into()
            }
            CertError::NotYetValid { .. } => {
                "wait until valid_from, or check this machine's clock".into()
            }
            CertError::Expired { .. } => "owners must approve a new certificate \
                (`runner approve ... --supersedes` the expired one)"
                .into(),
            CertError::EmptyWindow { .. } => {
                "pass an --expires later than --valid-from (default expiry: 90 days after \
                 --valid-from)"
                    .into()
            }
            CertError::Time(_) => {
                "write times as RFC 3339 with whole seconds, like 2027-01-31T00:00:00Z".into()
            }
            CertError::BadNote(_) => {
                format!("keep --note to one line of at most {MAX_NOTE_LEN} bytes")
            }
            CertError::ReadEngine { .. } => "check the path given to --engine".into(),
            CertError::EngineName { .. } => "rename the engine file, e.g. gemma3.eng".into(),
            CertError::AlreadySigned { .. } => {
                "a key counts once; co-sign with another owner's key".into()
            }
            CertError::Write(e) => return e.hint(),
        })
    }
}

fn check_engine_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("is empty")
    } else if name.len() > MAX_ENGINE_NAME_LEN {
        Err("is longer than 255 bytes")
    } else if name.chars().any(char::is_control) {
        Err("contains control characters")
    } else {
        Ok(())
    }
}

/// Check a note: at most [`MAX_NOTE_LEN`] bytes, no control characters (it is printed to
/// terminals by `inspect`).
pub fn check_note(note: &str) -> Result<(), CertError> {
    if note.len() > MAX_NOTE_LEN {
        return Err(CertError::BadNote("is longer than 4096 bytes"));
    }
    if note.chars().any(char::is_control) {
        return Err(CertError::BadNote(
            "contains control characters (newlines, tabs, escapes)",
        ));
    }
    Ok(())
}

/// The validity window `(valid_from, expires_at)` after defaults: `valid_from` defaults to
/// `issued_at`, `expires_at` to `valid_from` + [`DEFAULT_VALIDITY_DAYS`]. Refused unless
/// `expires_at` is after `valid_from`.
pub fn resolve_window(
    issued_at: Timestamp,
    valid_from: Option<Timestamp>,
    expires_at: Option<Timestamp>,
) -> Result<(Timestamp, Timestamp), CertError> {
    let valid_from = valid_from.unwrap_or(issued_at);
    let expires_at = match expires_at {
        Some(t) => t,
        // Counted from the start of validity: `--valid-from` alone moves the whole window.
        None => valid_from
            .plus_days(DEFAULT_VALIDITY_DAYS)
            .ok_or(TimeError::OutOfRange)?,
    };
    if expires_at <= valid_from {
        return Err(CertError::EmptyWindow {
            valid_from,
            expires_at,
        });
    }
    for t in [issued_at, valid_from, expires_at] {
        t.to_rfc3339()?;
    }
    Ok((valid_from, expires_at))
}

/// Build the payload owners sign: the one place its contents are decided.
pub fn build_payload(engine: EngineFacts, terms: Terms) -> Result<CertificatePayload, CertError> {
    let (valid_from, expires_at) =
        resolve_window(terms.issued_at, terms.valid_from, terms.expires_at)?;
    if let Some(note) = &terms.note {
        check_note(note)?;
    }
    let verifier_version = crate::restrict::VERIFIER_VERSION.to_owned();
    let payload = CertificatePayload {
        schema: CERTIFICATE_SCHEMA.into(),
        engine: EngineSection {
            name: engine.name,
            source_digest: engine.source_digest,
            restrict: engine.restrict,
        },
        policy_id: Digest(terms.policy.policy_id_for(&verifier_version).0),
        policy_digest: Digest(terms.policy.digest().0),
        policy: terms.policy,
        model_digest: terms.model_digest,
        verifier_version,
        issued_at: terms.issued_at,
        valid_from,
        expires_at,
        supersedes: terms.supersedes,
        lineage: terms.lineage,
        version: terms.version,
        recipients: {
            let mut r = terms.recipients;
            r.sort();
            r.dedup();
            r
        },
        note: terms.note,
        attestation: terms.attestation,
    };
    payload.check()?;
    Ok(payload)
}

impl CertificatePayload {
    /// The RFC 8785 bytes that are signed and hashed.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CertError> {
        to_canonical_from(self).map_err(|e| CertError::Payload(e.to_string()))
    }

    /// Parse payload bytes strictly (see the module doc).
    pub fn from_bytes(bytes: &[u8]) -> Result<CertificatePayload, CertError> {
        let value = parse_strict(bytes).map_err(|e| CertError::Payload(e.to_string()))?;
        if let Some(schema) = value.get("schema").and_then(|s| s.as_str()) {
            if schema != CERTIFICATE_SCHEMA {
                return Err(CertError::Schema {
                    found: schema
                        .chars()
                        .filter(|c| !c.is_control())
                        .take(64)
                        .collect(),
                });
            }
        }
        let payload: CertificatePayload =
            serde_json::from_value(value).map_err(|e| CertError::Payload(e.to_string()))?;
        if payload.schema != CERTIFICATE_SCHEMA {
            return Err(CertError::Payload(format!(
                "field `schema` is {:?}, expected {CERTIFICATE_SCHEMA:?}",
                payload.schema
            )));
        }
        payload.check()?;
        if payload.to_bytes()? != bytes {
            return Err(CertError::Payload(
                "it is not in canonical form (RFC 8785, lists sorted, absent `engine.restrict` \
                 rather than null)"
                    .into(),
            ));
        }
        Ok(payload)
    }

    /// Invariants serde cannot express. Strings that `inspect` and `verify-cert` print are kept
    /// free of control characters, so a certificate cannot rewrite the owner's terminal.
    fn check(&self) -> Result<(), CertError> {
        check_engine_name(&self.engine.name)
            .map_err(|why| CertError::Payload(format!("field `engine.name` {why}")))?;
        check_engine_name(&self.verifier_version)
            .map_err(|why| CertError::Payload(format!("field `verifier_version` {why}")))?;
        check_engine_name(&self.lineage)
            .map_err(|why| CertError::Payload(format!("field `lineage` {why}")))?;
        if self.version == 0 {
            return Err(CertError::Payload(
                "field `version` is 0; versions start at 1".into(),
            ));
        }
        for r in &self.recipients {
            parse_recipient(r)
                .map_err(|e| CertError::Payload(format!("field `recipients`: {e}")))?;
        }
        if self.recipients.windows(2).any(|w| w[0] >= w[1]) {
            return Err(CertError::Payload(
                "field `recipients` is not sorted without repeats".into(),
            ));
        }
        if self.policy.sealing.outputs == SealRule::Required && self.recipients.is_empty() {
            return Err(CertError::NoRecipients);
        }
        if let Some(report) = &self.engine.restrict {
            if report
                .private_ranges
                .iter()
                .any(|r| r.start == 0 || r.end < r.start)
            {
                return Err(CertError::Payload(
                    "field `engine.restrict.private_ranges` has a range that is not 1-based \
                     with start <= end"
                        .into(),
                ));
            }
            for name in &report.builtins_used {
                check_engine_name(name).map_err(|why| {
                    CertError::Payload(format!(
                        "field `engine.restrict.builtins_used` has an entry that {why}"
                    ))
                })?;
            }
        }
        self.policy
            .validate("in the certificate payload")
            .map_err(|e| CertError::Payload(e.to_string()))?;
        if let Some(note) = &self.note {
            check_note(note).map_err(|e| CertError::Payload(format!("field `note`: {e}")))?;
        }
        if let Some(req) = &self.attestation {
            req.validate()
                .map_err(|e| CertError::Payload(format!("field `attestation`: {e}")))?;
        }
        if self.policy_id.0 != self.policy.policy_id_for(&self.verifier_version).0 {
            return Err(CertError::Inconsistent {
                field: "policy_id",
                why: "is not the policy_id of the embedded policy under verifier_version",
            });
        }
        if self.policy_digest.0 != self.policy.digest().0 {
            return Err(CertError::Inconsistent {
                field: "policy_digest",
                why: "is not the digest of the embedded policy",
            });
        }
        if self.expires_at <= self.valid_from {
            return Err(CertError::Inconsistent {
                field: "expires_at",
                why: "is not after valid_from",
            });
        }
        Ok(())
    }
}

/// The certificate digest: plain BLAKE3 of the payload bytes.
pub fn certificate_digest(payload_bytes: &[u8]) -> Digest {
    Digest::of(payload_bytes)
}

/// A well-formed certificate whose signatures have NOT been checked. Use it to make, co-sign and
/// inspect certificates; trust only a [`super::verify::VerifiedCertificate`].
#[derive(Debug, Clone)]
pub struct Certificate {
    envelope: Envelope,
    payload: CertificatePayload,
}

impl Certificate {
    /// Sign a payload into a new certificate.
    pub fn sign_new(
        payload: CertificatePayload,
        key: &SecretKey,
    ) -> Result<Certificate, CertError> {
        let mut envelope = Envelope::new(CERTIFICATE_PAYLOAD_TYPE, payload.to_bytes()?);
        envelope.sign(key)?;
        Ok(Certificate { envelope, payload })
    }

    /// Parse certificate file bytes: a well-formed envelope of the certificate payloadType
    /// holding a well-formed payload. Signatures are not checked.
    pub fn parse(bytes: &[u8]) -> Result<Certificate, CertError> {
        let envelope = Envelope::parse(bytes)?;
        if envelope.payload_type != CERTIFICATE_PAYLOAD_TYPE {
            return Err(CertError::WrongPayloadType {
                found: envelope.payload_type,
            });
        }
        let payload = CertificatePayload::from_bytes(&envelope.payload)?;
        Ok(Certificate { envelope, payload })
    }

    /// Read and parse a certificate file.
    pub fn load(path: &Path) -> Result<Certificate, CertError> {
        Certificate::parse(&read_certificate_file(path)?)
    }

    /// The envelope (payload bytes and signatures).
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The parsed payload.
    pub fn payload(&self) -> &CertificatePayload {
        &self.payload
    }

    /// The certificate digest.
    pub fn digest(&self) -> Digest {
        certificate_digest(&self.envelope.payload)
    }

    /// Key ids of all signatures, in file order (not checked).
    pub fn signer_ids(&self) -> Vec<KeyId> {
        self.envelope.signatures.iter().map(|s| s.keyid).collect()
    }

    /// Add `key`'s signature over the same payload bytes.
    pub fn cosign(&mut self, key: &SecretKey) -> Result<(), CertError> {
        match self.envelope.sign(key) {
            Err(DsseError::AlreadySigned(key_id)) => Err(CertError::AlreadySigned { key_id }),
            other => Ok(other?),
        }
    }

    /// The file form.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.envelope.to_bytes()
    }
}

/// Read a certificate file: a regular file of at most [`MAX_CERTIFICATE_BYTES`].
pub fn read_certificate_file(path: &Path) -> Result<Vec<u8>, CertError> {
    read_bounded(path, MAX_CERTIFICATE_BYTES, "certificate").map_err(CertError::File)
}
