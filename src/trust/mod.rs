//! Trust documents: certificates and their verification against the operator's trust
//! configuration, the review owners read before re-approving, and the receipts the runner signs
//! for what it produced ([`receipt`]). They are built from the [`primitives`](crate::primitives)
//! (keys, canonical JSON, DSSE) and bind the engine language's verdicts
//! ([`restrict`](crate::restrict)) and model digests ([`model`](crate::model)).
//!
//! The trusted boundary is [`verify::verify_certificate`]: it is the only way to obtain a
//! [`verify::VerifiedCertificate`], which is what `exec` requires.
#![forbid(unsafe_code)]

pub mod attested_run;
pub mod certificate;
pub mod config;
pub mod generation;
pub mod identity;
pub mod merge;
pub mod receipt;
pub mod review;
pub mod run_attestation;
pub mod shard;
pub mod verify;
