//! Recipients: `age1...` X25519 public keys, one at a time or as a recipients file in the form
//! `age -R` reads (one per line; blank lines and `#` comments ignored).

/// Why a recipient was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecipientError {
    /// Not an X25519 age recipient.
    #[error("{shown:?} is not an age X25519 recipient (age1...): {why}")]
    Invalid {
        /// The text, cut short and without control characters.
        shown: String,
        /// What the parser said.
        why: &'static str,
    },
    /// A recipients file holds none.
    #[error("no recipients given")]
    None,
    /// Writing the sealed bytes failed.
    #[error("cannot write the sealed file: {0}")]
    Io(std::io::ErrorKind),
}

impl crate::error::Diagnose for RecipientError {
    fn exit(&self) -> crate::error::Exit {
        match self {
            RecipientError::Io(_) => crate::error::Exit::Failure,
            _ => crate::error::Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some("an age recipient is the `age1...` line `age-keygen` prints as the public key".into())
    }
}

/// One recipient, checked.
pub fn parse_recipient(text: &str) -> Result<age::x25519::Recipient, RecipientError> {
    text.parse::<age::x25519::Recipient>()
        .map_err(|why| RecipientError::Invalid {
            shown: text.chars().filter(|c| !c.is_control()).take(80).collect(),
            why,
        })
}

/// The recipients of a recipients file's text, each checked, in file order.
pub fn parse_recipients_file(text: &str) -> Result<Vec<String>, RecipientError> {
    let list: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| parse_recipient(l).map(|r| r.to_string()))
        .collect::<Result<_, _>>()?;
    if list.is_empty() {
        return Err(RecipientError::None);
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealing::SealKey;

    #[test]
    fn reads_a_recipients_file_as_age_does() {
        let (a, b) = (
            SealKey::generate().recipient(),
            SealKey::generate().recipient(),
        );
        let text = format!("# the recipients\n{a}\n\n  {b}  \n");
        assert_eq!(parse_recipients_file(&text).unwrap(), vec![a, b]);
        assert_eq!(parse_recipients_file("# none\n"), Err(RecipientError::None));
        let err = parse_recipients_file("age1notakey\n").unwrap_err();
        assert!(matches!(err, RecipientError::Invalid { .. }), "{err}");
        assert!(parse_recipient("AGE-SECRET-KEY-1ABC").is_err());
    }
}
