//! Checking evidence, in order, the first failure reported:
//! 1. the document ([`read_evidence`]): envelope, strict canonical payload, the runner key's
//!    signature;
//! 2. the report parses as the hardware's format;
//! 3. the hardware's signature: for TDX the quote against Intel's root and the collateral at
//!    the given time (collateral is required); for SEV-SNP the report against the VCEK (given,
//!    or from the auxblob) and the VCEK's chain to AMD's root; without a VCEK the verdict says
//!    the signature was not checked;
//! 4. the report's user data is the hash of the document's binding (keys, binary, nonce);
//! 5. the nonce is the verifier's, when one is given;
//! 6. the guest is not debuggable.

use super::evidence::{read_evidence, Evidence, EvidenceError};
use super::hardware::Hardware;
use super::report::{MalformedReport, ParsedReport};
use super::snp;
use super::tdx::{self, QuoteError, TcbVerdict};
use crate::error::{Diagnose, Exit};
use crate::primitives::time::Timestamp;

/// What the verifier brings.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// DCAP collateral JSON for a TDX quote.
    pub collateral: Option<&'a [u8]>,
    /// The VCEK certificate (PEM or DER) for an SEV-SNP report, when the evidence's `auxblob`
    /// does not carry it.
    pub vcek: Option<&'a [u8]>,
    /// The nonce the verifier sent, when it sent one.
    pub nonce: Option<&'a [u8]>,
    /// The time to check the collateral at.
    pub at: Timestamp,
}

/// What is known of the hardware's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HardwareSignature {
    /// Verified to a vendor's root key, with the platform's TCB.
    Verified {
        /// Whose root the signature chains to.
        root: String,
        /// The platform's TCB status.
        tcb: TcbVerdict,
    },
    /// Not checked, and why.
    NotChecked(&'static str),
    /// There is no hardware: the evidence proves nothing about the machine.
    NoHardware,
}

/// Evidence that passed every check [`verify_evidence`] makes.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The document.
    pub evidence: Evidence,
    /// The parsed report (`None` without hardware).
    pub report: Option<ParsedReport>,
    /// The hardware's signature.
    pub signature: HardwareSignature,
    /// Whether the nonce was compared with the verifier's.
    pub nonce_checked: bool,
}

impl Verdict {
    /// Which hardware made the report.
    pub fn hardware(&self) -> Hardware {
        self.evidence.hardware
    }
}

/// Why evidence was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttestationError {
    /// The document itself.
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    /// The report does not parse.
    #[error(transparent)]
    Report(#[from] MalformedReport),
    /// A TDX quote and no collateral to check it with.
    #[error("the evidence holds a TDX quote, and its signature is checked against Intel's collateral, which was not given")]
    NoCollateral,
    /// The quote did not verify.
    #[error(transparent)]
    Quote(#[from] QuoteError),
    /// The SEV-SNP report's signature did not verify.
    #[error(transparent)]
    Snp(#[from] snp::SnpSignatureError),
    /// The report was made for other data.
    #[error("the report's user data is not the hash of this document's keys, runner digest and nonce: the report was made for someone else's data (or the document was edited)")]
    Binding,
    /// The nonce is not the verifier's.
    #[error(
        "the evidence was made for nonce {found}, not {expected}: it is not fresh for this request"
    )]
    Nonce {
        /// The verifier's.
        expected: String,
        /// The document's.
        found: String,
    },
    /// The guest is debuggable.
    #[error(
        "the report says the guest runs with debugging enabled: its memory is open to the host"
    )]
    Debug,
}

impl Diagnose for AttestationError {
    fn exit(&self) -> Exit {
        match self {
            AttestationError::Evidence(e) => e.exit(),
            AttestationError::Report(_) | AttestationError::NoCollateral => Exit::BadInput,
            AttestationError::Quote(QuoteError::Collateral(_))
            | AttestationError::Snp(snp::SnpSignatureError::Vcek(_)) => Exit::BadInput,
            _ => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            AttestationError::Evidence(e) => e.hint(),
            AttestationError::NoCollateral => Some(
                "pass --collateral FILE: the DCAP collateral for the quote's platform, as JSON, \
                 fetched from Intel PCS or a PCCS (docs/attestation.md says how)"
                    .into(),
            ),
            AttestationError::Quote(QuoteError::Rejected(_)) => Some(
                "check that the collateral is for this platform and that --at is inside its \
                 validity window; a changed quote or collateral byte fails here"
                    .into(),
            ),
            AttestationError::Nonce { .. } => Some(
                "ask the runner for new evidence with your nonce: runner attest --nonce HEX".into(),
            ),
            _ => None,
        }
    }
}

/// Check evidence file bytes (see the module doc).
pub fn verify_evidence(bytes: &[u8], check: &Check<'_>) -> Result<Verdict, AttestationError> {
    let evidence = read_evidence(bytes)?;
    let report = parse_report(evidence.hardware, &evidence.report)?;
    let signature = match evidence.hardware {
        Hardware::Tdx => {
            let collateral = check.collateral.ok_or(AttestationError::NoCollateral)?;
            let at = u64::try_from(check.at.datetime().unix_timestamp()).unwrap_or(0);
            HardwareSignature::Verified {
                root: "Intel's SGX root CA".into(),
                tcb: tdx::verify(&evidence.report, collateral, at)?,
            }
        }
        Hardware::SevSnp => {
            let vcek = check
                .vcek
                .map(<[u8]>::to_vec)
                .or_else(|| snp::vcek_from_auxblob(&evidence.auxblob));
            match vcek {
                Some(vcek) => {
                    let v = snp::verify(&evidence.report, &vcek)?;
                    HardwareSignature::Verified {
                        root: format!("AMD's {} root key (ARK)", v.product),
                        tcb: TcbVerdict {
                            status: format!("REPORTED_TCB {}", v.reported_tcb),
                            advisories: Vec::new(),
                        },
                    }
                }
                None => HardwareSignature::NotChecked(
                    "no VCEK certificate was given (--vcek FILE, from AMD's key distribution \
                     service) and the evidence's auxblob carries none",
                ),
            }
        }
        Hardware::None => HardwareSignature::NoHardware,
    };
    if let Some(parsed) = &report {
        if parsed.report_data != evidence.payload.binding.report_data() {
            return Err(AttestationError::Binding);
        }
    }
    let nonce_checked = match check.nonce {
        Some(expected) if expected != evidence.nonce.as_slice() => {
            return Err(AttestationError::Nonce {
                expected: hex::encode(expected),
                found: hex::encode(&evidence.nonce),
            })
        }
        Some(_) => true,
        None => false,
    };
    if report.as_ref().is_some_and(|r| r.debug) {
        return Err(AttestationError::Debug);
    }
    Ok(Verdict {
        evidence,
        report,
        signature,
        nonce_checked,
    })
}

/// Parse `bytes` as a report of `hardware` (`None` hardware has no report).
pub fn parse_report(
    hardware: Hardware,
    bytes: &[u8],
) -> Result<Option<ParsedReport>, MalformedReport> {
    match hardware {
        Hardware::Tdx => tdx::parse(bytes).map(Some),
        Hardware::SevSnp => snp::parse(bytes).map(Some),
        Hardware::None if bytes.is_empty() => Ok(None),
        Hardware::None => Err(MalformedReport {
            hardware,
            why: "evidence without hardware carries a report".into(),
        }),
    }
}
