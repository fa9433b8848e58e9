//! Hardware attestation: the runner's keys bound into a TDX or SEV-SNP report through Linux
//! configfs-tsm, in an evidence document owners check before they seal data to the runner
//! (docs/attestation.md).
//!
//! - [`binding`]: the 64 bytes of user data: a hash of the runner's signing key, its age
//!   recipient, its binary's digest and the verifier's nonce.
//! - [`tsm`]: asking the kernel for a report (configfs-tsm).
//! - [`evidence`]: the signed document holding the report.
//! - [`tdx`], [`snp`], [`report`]: reading each kind of report; TDX quotes verified against
//!   Intel's chain with `dcap-qvl`, SEV-SNP reports against AMD's with `sev`.
//! - [`verify`]: the checks a verifier runs, in order.
//! - [`requirement`]: what a certificate may require of the hardware (measurements to match).
#![forbid(unsafe_code)]

pub mod binding;
pub mod evidence;
pub mod hardware;
pub mod report;
pub mod requirement;
pub mod snp;
pub mod tdx;
pub mod tsm;
pub mod verify;

pub use evidence::{attest, read_evidence, Evidence, EvidenceError, Source, Subject};
pub use hardware::Hardware;
pub use requirement::Requirement;
pub use verify::{verify_evidence, AttestationError, Check, HardwareSignature, Verdict};
