//! The check `runner verify` makes of a run's `attestation.json`: the evidence verified with the
//! nonce recomputed from the receipt, signed by the receipt's runner key, from the hardware the
//! receipt records, and meeting the certificate's requirement.

use std::path::Path;

use super::certificate::Certificate;
use super::receipt::VerifiedReceipt;
use super::run_attestation::{run_nonce, ATTESTATION_FILE};
use crate::attestation::evidence::MAX_EVIDENCE_BYTES;
use crate::attestation::requirement::Unmet;
use crate::attestation::{verify_evidence, AttestationError, Check, Verdict};
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded, ReadError};

/// Why a receipt's attestation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunAttestationError {
    /// The certificate requires attestation and the receipt has none.
    #[error("the certificate requires {0} attestation and the receipt records none")]
    Missing(String),
    /// The receipt's evidence is not a subject, or not the expected file.
    #[error(
        "the receipt's attestation names {0:?}, which is not {ATTESTATION_FILE} among its subjects"
    )]
    NotASubject(String),
    /// The evidence file could not be read.
    #[error(transparent)]
    File(#[from] ReadError),
    /// The evidence did not verify.
    #[error("{ATTESTATION_FILE}: {0}")]
    Evidence(#[from] AttestationError),
    /// Signed by another runner key than the receipt.
    #[error(
        "{ATTESTATION_FILE} binds runner key {evidence}, and the receipt is signed by {receipt}"
    )]
    OtherRunner {
        /// The evidence's key.
        evidence: String,
        /// The receipt's.
        receipt: String,
    },
    /// The receipt says another hardware than the evidence.
    #[error("the receipt records {receipt} attestation and {ATTESTATION_FILE} is from {evidence} hardware")]
    Hardware {
        /// The receipt's.
        receipt: String,
        /// The evidence's.
        evidence: String,
    },
    /// Not what the certificate requires.
    #[error("{ATTESTATION_FILE}: {0}")]
    Unmet(#[from] Unmet),
}

impl Diagnose for RunAttestationError {
    fn exit(&self) -> Exit {
        match self {
            RunAttestationError::File(_) => Exit::BadInput,
            RunAttestationError::Evidence(e) => e.exit(),
            _ => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            RunAttestationError::Evidence(e) => e.hint(),
            _ => None,
        }
    }
}

/// Check the evidence of a verified receipt, read from `evidence` (its `attestation.json`, or
/// that file's copy in a merged directory), against `cert`; `collateral` is the DCAP
/// collateral for a TDX quote, `vcek` the VCEK for an SEV-SNP report. `None` when the receipt
/// has no attestation and the certificate requires none.
pub fn verify_run_attestation(
    receipt: &VerifiedReceipt,
    cert: &Certificate,
    evidence: &Path,
    collateral: Option<&[u8]>,
    vcek: Option<&[u8]>,
) -> Result<Option<Verdict>, RunAttestationError> {
    let facts = receipt.facts();
    let required = cert.payload().attestation.as_ref();
    let Some(recorded) = &facts.attestation else {
        return match required {
            Some(r) => Err(RunAttestationError::Missing(r.hardware.clone())),
            None => Ok(None),
        };
    };
    if recorded.evidence != ATTESTATION_FILE
        || !receipt
            .subjects()
            .iter()
            .any(|s| s.name == ATTESTATION_FILE)
    {
        return Err(RunAttestationError::NotASubject(recorded.evidence.clone()));
    }
    let bytes = read_bounded(evidence, MAX_EVIDENCE_BYTES, "evidence")?;
    let nonce = run_nonce(facts.certificate_digest, facts.job_digest, recorded.salt);
    let check = Check {
        collateral,
        vcek,
        nonce: Some(&nonce.0),
        // Was the platform's TCB good when the job ran?
        at: facts.started_at,
    };
    let verdict = verify_evidence(&bytes, &check)?;
    if verdict.evidence.signer.key_id() != receipt.signer() {
        return Err(RunAttestationError::OtherRunner {
            evidence: verdict.evidence.signer.key_id().to_hex(),
            receipt: receipt.signer().to_hex(),
        });
    }
    if verdict.hardware().name() != recorded.hardware {
        return Err(RunAttestationError::Hardware {
            receipt: recorded.hardware.clone(),
            evidence: verdict.hardware().name().into(),
        });
    }
    if let Some(r) = required {
        r.check(verdict.hardware(), verdict.report.as_ref())?;
    }
    Ok(Some(verdict))
}
