//! `Digest`: a 256-bit BLAKE3 digest, written as 64 lowercase hex digits in every file and shown
//! as its first 16 hex digits where a short form is enough.
//!
//! Every digest the trust core stores (engine source, model, certificate, key id) is one of these,
//! so all of them parse and print the same way. Parsing accepts only the exact form we write
//! (64 lowercase hex digits), so a digest has one spelling in signed documents.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 256-bit digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Plain BLAKE3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// BLAKE3 in derive-key mode: the domain label keeps digests of different kinds of document
    /// from ever being confused with one another.
    pub fn derive(context: &str, bytes: &[u8]) -> Digest {
        let mut h = blake3::Hasher::new_derive_key(context);
        h.update(bytes);
        Digest(*h.finalize().as_bytes())
    }

    /// The full digest as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from(self.0).to_hex().to_string()
    }

    /// The 16-hex display form.
    pub fn short(&self) -> String {
        let mut hex = self.to_hex();
        hex.truncate(16);
        hex
    }

    /// Parse exactly 64 lowercase hex digits; anything else is `None`.
    pub fn from_hex(text: &str) -> Option<Digest> {
        if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        blake3::Hash::from_hex(text)
            .ok()
            .map(|h| Digest(*h.as_bytes()))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Digest::from_hex(&text).ok_or_else(|| {
            serde::de::Error::custom(format_args!(
                "{text:?} is not a digest (64 lowercase hex digits)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_short_form_is_a_prefix() {
        let d = Digest::of(b"abc");
        // BLAKE3("abc"), from the BLAKE3 test vectors.
        assert_eq!(
            d.to_hex(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert_eq!(d.short(), "6437b3ac38465133");
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
    }

    #[test]
    fn rejects_other_spellings() {
        let hex = Digest::of(b"abc").to_hex();
        assert_eq!(Digest::from_hex(&hex.to_uppercase()), None);
        assert_eq!(Digest::from_hex(&hex[..63]), None);
        assert_eq!(Digest::from_hex(&format!("{hex}0")), None);
        assert_eq!(Digest::from_hex(&format!("0x{}", &hex[2..])), None);
        assert!(serde_json::from_str::<Digest>("\"zz\"").is_err());
    }

    #[test]
    fn derive_key_separates_domains() {
        assert_ne!(Digest::derive("a", b"x"), Digest::derive("b", b"x"));
        assert_ne!(Digest::derive("a", b"x"), Digest::of(b"x"));
    }
}
