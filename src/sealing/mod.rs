//! Sealing: private data encrypted in the age format (age-encryption.org/v1, X25519 recipients,
//! binary or ASCII-armored), so that data owners and recipients use the standard `age` tool.
//!
//! Inputs arrive encrypted to the runner's own recipient and are opened in memory only
//! ([`open`]); outputs leave encrypted to the recipients the owners named in the certificate
//! ([`seal`]). The crate does the cryptography; this module decides what is accepted and says
//! why not in words that name no secret: an age failure never says more than its kind.
#![forbid(unsafe_code)]

pub mod key;
pub mod open;
pub mod recipients;
pub mod seal;

pub use key::SealKey;
pub use open::{is_age, open, open_stream, OpenError};
pub use recipients::{parse_recipient, parse_recipients_file, RecipientError};
pub use seal::{seal, sealing_writer};
