//! The primitives every document is built from: canonical JSON (RFC 8785), BLAKE3 digests,
//! Ed25519 keys, DSSE envelopes, timestamps, atomic file writes and bounded file reads. Nothing
//! here knows about engines, models or jobs; every other module may use these, and these use
//! only [`error`](crate::error).
#![forbid(unsafe_code)]

pub mod atomic_file;
pub mod bounded_read;
pub mod canonical;
pub mod digest;
pub mod dsse;
pub mod keys;
pub mod time;
