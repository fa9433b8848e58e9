//! Trust: owner and runner keys, canonical JSON (RFC 8785), DSSE envelopes, policies and
//! `policy_id`, certificates, and their verification against the operator's trust configuration.

pub mod canonical;
pub mod policy;
