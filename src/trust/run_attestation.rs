//! What a receipt records of a run's hardware evidence, under a certificate that requires
//! attestation, and how the evidence's nonce is derived (so a verifier can recompute it from
//! the receipt; the check itself is [`super::attested_run`]).
//!
//! The nonce is BLAKE3 (derive-key mode) of the certificate digest, the job digest and 32
//! random bytes drawn for the attempt, which the receipt records: the evidence is then bound to
//! this certificate and job, and is new for every attempt.

use serde::{Deserialize, Serialize};

use crate::primitives::digest::Digest;

/// The file beside the outputs holding a run's evidence.
pub const ATTESTATION_FILE: &str = "attestation.json";
const NONCE_CONTEXT: &str = "runner exec attestation nonce v1";

/// What a receipt records of the run's attestation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAttestation {
    /// The hardware (`tdx`, `sev-snp`).
    pub hardware: String,
    /// The evidence file's name (a subject of the receipt, so its digest is bound).
    pub evidence: String,
    /// The attempt's random bytes in the nonce.
    pub salt: Digest,
}

/// The nonce a run's evidence carries.
pub fn run_nonce(certificate: Digest, job: Digest, salt: Digest) -> Digest {
    let mut bytes = Vec::with_capacity(96);
    for d in [certificate, job, salt] {
        bytes.extend_from_slice(&d.0);
    }
    Digest::derive(NONCE_CONTEXT, &bytes)
}
