//! Trust: owner and runner keys, canonical JSON (RFC 8785), DSSE envelopes, policies and
//! `policy_id`, certificates, and their verification against the operator's trust configuration;
//! and the receipts the runner signs for what it produced ([`receipt`]).
//!
//! The trusted boundary is [`verify::verify_certificate`]: it is the only way to obtain a
//! [`verify::VerifiedCertificate`], which is what `exec` requires.

pub mod canonical;
pub mod certificate;
pub mod config;
pub mod digest;
pub mod dsse;
pub mod keys;
pub mod policy;
pub mod receipt;
pub mod review;
pub mod time;
pub mod verify;
