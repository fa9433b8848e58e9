//! The evidence document `runner attest` writes: the hardware's raw report and the public
//! values its user data binds ([`Binding`]), in RFC 8785 JSON inside a DSSE envelope
//! (payloadType [`EVIDENCE_PAYLOAD_TYPE`]) signed by the runner key it names.
//!
//! The signature only says which runner key vouches for the document; what makes it evidence is
//! the hardware's signature over the report, whose user data must equal the binding's hash.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::binding::{Binding, BINDING_SCHEMA, MAX_NONCE_BYTES};
use super::hardware::Hardware;
use super::tsm::{request_report, Configfs, TsmError};
use crate::error::{Diagnose, Exit};
use crate::primitives::canonical::{parse_strict, to_canonical_from};
use crate::primitives::digest::Digest;
use crate::primitives::dsse::{DsseError, Envelope};
use crate::primitives::keys::{PublicKey, SecretKey};
use crate::primitives::time::Timestamp;
use crate::sealing::parse_recipient;

/// DSSE payloadType of an evidence document.
pub const EVIDENCE_PAYLOAD_TYPE: &str = "application/vnd.runner.attestation+json; version=1";
/// `schema` of its payload.
pub const EVIDENCE_SCHEMA: &str = "runner-attestation/1";
/// The largest evidence file read (a TDX quote with its PCK chain is about 5 KB; SNP's auxblob
/// certificate table a few KB).
pub const MAX_EVIDENCE_BYTES: u64 = 4 << 20;

/// What an evidence document says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidencePayload {
    /// Always [`EVIDENCE_SCHEMA`].
    pub schema: String,
    /// `tdx`, `sev-snp` or `none` ([`Hardware::name`]).
    pub hardware: String,
    /// configfs-tsm's `provider` (`tdx_guest`, `sev_guest`), or `none`.
    pub provider: String,
    /// The raw report (`outblob`), standard base64; empty without hardware.
    pub report: String,
    /// `auxblob`, standard base64; often empty.
    pub auxblob: String,
    /// What the report's user data is the hash of.
    pub binding: Binding,
    /// The runner's version (`CARGO_PKG_VERSION`).
    pub runner_version: String,
    /// When the report was requested.
    pub created_at: Timestamp,
}

/// An evidence document whose envelope, form and signer were checked (not its report).
#[derive(Debug, Clone)]
pub struct Evidence {
    /// Its payload.
    pub payload: EvidencePayload,
    /// Which hardware it claims.
    pub hardware: Hardware,
    /// The decoded report.
    pub report: Vec<u8>,
    /// The decoded auxblob.
    pub auxblob: Vec<u8>,
    /// The runner key that signed it (the binding's `signing_key`).
    pub signer: PublicKey,
    /// The nonce it was made for.
    pub nonce: Vec<u8>,
    /// BLAKE3 of the payload bytes.
    pub digest: Digest,
}

/// Why evidence was not made or not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvidenceError {
    /// The kernel gave no report.
    #[error(transparent)]
    Tsm(#[from] TsmError),
    /// The nonce is too long.
    #[error("the nonce is {0} bytes; at most {MAX_NONCE_BYTES} are bound")]
    Nonce(usize),
    /// The envelope is malformed.
    #[error("not a runner attestation evidence document: {0}")]
    Envelope(#[from] DsseError),
    /// The payload is malformed or contradicts itself.
    #[error("not a runner attestation evidence document: {0}")]
    Payload(String),
    /// Not signed (once) by the key it names.
    #[error("the evidence is not signed (once) by the runner key its binding names")]
    Signature,
}

impl Diagnose for EvidenceError {
    fn exit(&self) -> Exit {
        match self {
            EvidenceError::Tsm(e) => e.exit(),
            EvidenceError::Nonce(_) | EvidenceError::Envelope(_) | EvidenceError::Payload(_) => {
                Exit::BadInput
            }
            EvidenceError::Signature => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            EvidenceError::Tsm(e) => e.hint(),
            EvidenceError::Nonce(_) => Some("give the nonce as at most 128 hex digits".into()),
            _ => None,
        }
    }
}

/// Who asks for evidence, and for whom.
pub struct Subject<'a> {
    /// The runner's signing key (signs the document; its public half is bound).
    pub key: &'a SecretKey,
    /// The runner's age recipient.
    pub age_recipient: &'a str,
    /// BLAKE3 of the runner executable.
    pub runner_digest: Digest,
    /// The runner's version.
    pub runner_version: &'a str,
}

/// Where the report comes from.
pub enum Source<'a> {
    /// configfs-tsm under this root.
    Tsm(&'a dyn Configfs, &'a std::path::Path),
    /// No hardware: the document says `"hardware": "none"`.
    NoHardware,
}

/// Ask the hardware for a report binding `subject` and `nonce`, and write the signed document.
pub fn attest(
    subject: &Subject<'_>,
    nonce: &[u8],
    source: Source<'_>,
) -> Result<Vec<u8>, EvidenceError> {
    if nonce.len() > MAX_NONCE_BYTES {
        return Err(EvidenceError::Nonce(nonce.len()));
    }
    let binding = Binding::new(
        &subject.key.public_key(),
        subject.age_recipient,
        subject.runner_digest,
        nonce,
    );
    let (hardware, provider, report, auxblob) = match source {
        Source::Tsm(fs, root) => {
            let r = request_report(fs, root, &binding.report_data())?;
            (r.hardware, r.provider, r.report, r.auxblob)
        }
        Source::NoHardware => (Hardware::None, "none".to_owned(), Vec::new(), Vec::new()),
    };
    let payload = EvidencePayload {
        schema: EVIDENCE_SCHEMA.into(),
        hardware: hardware.name().into(),
        provider,
        report: B64.encode(report),
        auxblob: B64.encode(auxblob),
        binding,
        runner_version: subject.runner_version.to_owned(),
        created_at: Timestamp::now(),
    };
    let bytes = to_canonical_from(&payload).map_err(|e| EvidenceError::Payload(e.to_string()))?;
    let mut envelope = Envelope::new(EVIDENCE_PAYLOAD_TYPE, bytes);
    envelope.sign(subject.key)?;
    Ok(envelope.to_bytes())
}

/// Read an evidence document: its envelope, its strict canonical payload, and its signature by
/// the runner key it binds. The report itself is checked by [`super::verify`].
pub fn read_evidence(bytes: &[u8]) -> Result<Evidence, EvidenceError> {
    let bad = |why: String| EvidenceError::Payload(why);
    let envelope = Envelope::parse(bytes)?;
    if envelope.payload_type != EVIDENCE_PAYLOAD_TYPE {
        return Err(bad(format!(
            "its payloadType is not {EVIDENCE_PAYLOAD_TYPE:?}"
        )));
    }
    let value = parse_strict(&envelope.payload).map_err(|e| bad(e.to_string()))?;
    let payload: EvidencePayload = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
    if to_canonical_from(&payload).ok().as_deref() != Some(&envelope.payload[..]) {
        return Err(bad("it is not in canonical form (RFC 8785)".into()));
    }
    if payload.schema != EVIDENCE_SCHEMA || payload.binding.schema != BINDING_SCHEMA {
        return Err(bad(format!(
            "field `schema` is not {EVIDENCE_SCHEMA:?} (or `binding.schema` not {BINDING_SCHEMA:?})"
        )));
    }
    let hardware = Hardware::from_name(&payload.hardware)
        .ok_or_else(|| bad("field `hardware` is not tdx, sev-snp or none".into()))?;
    let provider_hardware = match payload.provider.as_str() {
        "none" => Some(Hardware::None),
        p => Hardware::from_provider(p),
    };
    if provider_hardware != Some(hardware) {
        return Err(bad(format!(
            "field `provider` does not name {} hardware",
            hardware.name()
        )));
    }
    let decode = |field: &str, text: &str| {
        B64.decode(text)
            .map_err(|_| bad(format!("field `{field}` is not standard base64")))
    };
    let report = decode("report", &payload.report)?;
    let auxblob = decode("auxblob", &payload.auxblob)?;
    let raw: [u8; 32] = B64
        .decode(&payload.binding.signing_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("field `binding.signing_key` is not 32 bytes of base64".into()))?;
    let signer = PublicKey::from_bytes(raw);
    parse_recipient(&payload.binding.age_recipient)
        .map_err(|e| bad(format!("field `binding.age_recipient`: {e}")))?;
    let nonce = hex::decode(&payload.binding.nonce)
        .ok()
        .filter(|n| n.len() <= MAX_NONCE_BYTES && hex::encode(n) == payload.binding.nonce)
        .ok_or_else(|| {
            bad("field `binding.nonce` is not at most 128 lowercase hex digits".into())
        })?;
    let version = &payload.runner_version;
    if version.is_empty() || version.len() > 64 || version.chars().any(char::is_control) {
        return Err(bad(
            "field `runner_version` is empty, too long or has control characters".into(),
        ));
    }
    let signed = envelope.signed_bytes();
    let good = envelope.signatures.len() == 1
        && envelope.signatures[0].keyid == signer.key_id()
        && signer.verify(&signed, &envelope.signatures[0].sig);
    if !good {
        return Err(EvidenceError::Signature);
    }
    Ok(Evidence {
        digest: envelope.payload_digest(),
        payload,
        hardware,
        report,
        auxblob,
        signer,
        nonce,
    })
}
