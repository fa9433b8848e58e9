//! Trust: owner and runner keys, canonical JSON (RFC 8785), DSSE envelopes, policies and
//! `policy_id`, certificates, and their verification against the operator's trust configuration.
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
pub mod time;
pub mod verify;
