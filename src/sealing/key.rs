//! The runner's age identity: an X25519 secret key in the file format `age-keygen` writes (two
//! comment lines, then `AGE-SECRET-KEY-1...`), so an operator's tools read it, mode 0600 inside
//! the state directory. The secret is held in zeroizing memory and never printed.

use std::fmt;
use std::str::FromStr;

use age::secrecy::ExposeSecret;
use zeroize::Zeroizing;

/// The runner's age identity, with its recipient worked out once: every refusal of a file not
/// for the runner names it, and deriving it is a scalar multiplication.
pub struct SealKey {
    identity: age::x25519::Identity,
    recipient: String,
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SealKey({}, secret redacted)", self.recipient())
    }
}

impl SealKey {
    /// A fresh key from the operating system's generator.
    pub fn generate() -> SealKey {
        SealKey::from_identity(age::x25519::Identity::generate())
    }

    fn from_identity(identity: age::x25519::Identity) -> SealKey {
        let recipient = identity.to_public().to_string();
        SealKey {
            identity,
            recipient,
        }
    }

    /// The public half: what data owners encrypt inputs to (`age1...`).
    pub fn recipient(&self) -> String {
        self.recipient.clone()
    }

    /// The identity, for decryption.
    pub fn identity(&self) -> &age::x25519::Identity {
        &self.identity
    }

    /// The key file's text, as `age-keygen` writes it.
    pub fn to_file_text(&self, created: &str) -> Zeroizing<String> {
        Zeroizing::new(format!(
            "# created: {created}\n# public key: {}\n{}\n",
            self.recipient(),
            self.identity.to_string().expose_secret()
        ))
    }

    /// Parse a key file: comment lines and exactly one `AGE-SECRET-KEY-1` line.
    pub fn from_file_text(text: &str) -> Result<SealKey, &'static str> {
        let mut keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        let line = keys.next().ok_or("the file holds no AGE-SECRET-KEY line")?;
        if keys.next().is_some() {
            return Err("the file holds more than one key");
        }
        let line = Zeroizing::new(line.to_owned());
        age::x25519::Identity::from_str(&line)
            .map(SealKey::from_identity)
            .map_err(|_| "the AGE-SECRET-KEY line is not a valid X25519 age identity")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_its_file_text_without_printing_the_secret() {
        let key = SealKey::generate();
        let text = key.to_file_text("2026-12-01T00:00:00Z");
        assert!(text.contains(&format!("# public key: {}", key.recipient())));
        let again = SealKey::from_file_text(&text).unwrap();
        assert_eq!(again.recipient(), key.recipient());
        assert!(key.recipient().starts_with("age1"));
        assert!(!format!("{key:?}").contains("AGE-SECRET-KEY"));
    }

    #[test]
    fn rejects_files_without_exactly_one_key() {
        assert!(SealKey::from_file_text("# nothing\n").is_err());
        let one = SealKey::generate().to_file_text("t");
        let two = format!("{}{}", *one, *SealKey::generate().to_file_text("t"));
        assert!(SealKey::from_file_text(&two).is_err());
        assert!(SealKey::from_file_text("AGE-SECRET-KEY-1NOTAKEY\n").is_err());
    }
}
