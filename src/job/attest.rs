//! Admission's attestation step, under a certificate that requires it: before any input is
//! opened, the runner asks its own hardware for a report bound to its keys and to a nonce
//! derived from the certificate, the job and fresh randomness
//! ([`run_nonce`](crate::trust::run_attestation::run_nonce)), and refuses to run unless the
//! report's measurements are the ones the certificate pins. The evidence is published beside
//! the outputs and named in the receipt.

use ring::rand::{SecureRandom, SystemRandom};

use crate::attestation::report::MalformedReport;
use crate::attestation::requirement::{Requirement, Unmet};
use crate::attestation::tsm::TsmAccess;
use crate::attestation::verify::parse_report;
use crate::attestation::{attest, read_evidence, EvidenceError, Hardware, Source, Subject};
use crate::error::{Diagnose, Exit};
use crate::primitives::digest::Digest;
use crate::primitives::keys::SecretKey;
use crate::trust::receipt::{ReceiptError, RunnerIdentity};
use crate::trust::run_attestation::{run_nonce, RunAttestation, ATTESTATION_FILE};

/// A run's evidence, made at admission.
#[derive(Debug, Clone)]
pub struct RunEvidence {
    /// The evidence document's bytes (published as [`ATTESTATION_FILE`]).
    pub bytes: Vec<u8>,
    /// What the receipt records.
    pub facts: RunAttestation,
}

/// Why the hardware did not vouch for this run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttestRefusal {
    /// No report (no configfs-tsm, an unknown provider, an I/O error).
    #[error("the certificate requires {required} attestation, and {source}")]
    NoEvidence {
        /// The hardware required.
        required: String,
        /// Why there is no report.
        source: EvidenceError,
    },
    /// The report does not parse.
    #[error(transparent)]
    Report(#[from] MalformedReport),
    /// Other hardware, or other measurements.
    #[error("this machine does not meet the certificate's attestation requirement: {0}")]
    Unmet(#[from] Unmet),
    /// The guest is debuggable.
    #[error("the hardware report says this guest runs with debugging enabled: its memory is open to the host")]
    Debug,
    /// The runner's own digest could not be taken.
    #[error(transparent)]
    Runner(#[from] ReceiptError),
    /// No randomness for the nonce.
    #[error("the system random number generator failed")]
    NoRandomness,
}

impl Diagnose for AttestRefusal {
    fn exit(&self) -> Exit {
        match self {
            AttestRefusal::Runner(e) => e.exit(),
            AttestRefusal::NoRandomness => Exit::Failure,
            _ => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            AttestRefusal::NoEvidence { source, .. } => source.hint(),
            AttestRefusal::Unmet(_) => Some(
                "run the job on a machine booted from the measured image the owners approved \
                 (docs/attestation.md says how the values are computed), or ask the owners for a \
                 certificate with its measurements"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// What the step needs from the runner.
#[derive(Debug, Clone, Copy)]
pub struct Attester<'a> {
    /// configfs-tsm.
    pub tsm: TsmAccess<'a>,
    /// The runner's signing key.
    pub key: &'a SecretKey,
    /// The runner's age recipient.
    pub recipient: &'a str,
}

/// Ask the hardware for evidence of this run and check it meets `required`.
pub fn attest_run(
    attester: &Attester<'_>,
    required: &Requirement,
    certificate: Digest,
    job: Digest,
) -> Result<RunEvidence, AttestRefusal> {
    let mut salt = [0u8; 32];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| AttestRefusal::NoRandomness)?;
    let salt = Digest(salt);
    let runner = RunnerIdentity::current()?;
    let subject = Subject {
        key: attester.key,
        age_recipient: attester.recipient,
        runner_digest: runner.executable_digest,
        runner_version: &runner.version,
    };
    let nonce = run_nonce(certificate, job, salt);
    let no_evidence = |source| AttestRefusal::NoEvidence {
        required: required.hardware.clone(),
        source,
    };
    let source = Source::Tsm(attester.tsm.fs, attester.tsm.root);
    let bytes = attest(&subject, &nonce.0, source).map_err(no_evidence)?;
    let evidence = read_evidence(&bytes).map_err(no_evidence)?;
    let report = parse_report(evidence.hardware, &evidence.report)?;
    required.check(evidence.hardware, report.as_ref())?;
    if report.as_ref().is_some_and(|r| r.debug) {
        return Err(AttestRefusal::Debug);
    }
    debug_assert_ne!(evidence.hardware, Hardware::None);
    Ok(RunEvidence {
        bytes,
        facts: RunAttestation {
            hardware: evidence.hardware.name().into(),
            evidence: ATTESTATION_FILE.into(),
            salt,
        },
    })
}
