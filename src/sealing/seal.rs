//! Sealing to recipients: the bytes encrypted, in memory or as a stream, to every X25519
//! recipient given, as one binary age file any of them can open with `age -d -i IDENTITY`.

use std::io::Write;

use super::recipients::{parse_recipient, RecipientError};

/// `plain` encrypted to `recipients` (`age1...` strings), binary.
pub fn seal(plain: &[u8], recipients: &[String]) -> Result<Vec<u8>, RecipientError> {
    seal_with(plain, recipients, false)
}

/// [`seal`], ASCII-armored when `armor`.
pub fn seal_with(
    plain: &[u8],
    recipients: &[String],
    armor: bool,
) -> Result<Vec<u8>, RecipientError> {
    let format = if armor {
        age::armor::Format::AsciiArmor
    } else {
        age::armor::Format::Binary
    };
    let io = |e: std::io::Error| RecipientError::Io(e.kind());
    let mut out = Vec::with_capacity(plain.len() + 256 + plain.len() / 64);
    let armored = age::armor::ArmoredWriter::wrap_output(&mut out, format).map_err(io)?;
    let mut writer = sealing_writer(armored, recipients)?;
    writer.write_all(plain).map_err(io)?;
    writer.finish().and_then(|w| w.finish()).map_err(io)?;
    Ok(out)
}

/// A writer that seals what it is given to `recipients` into `out` (binary), for plaintext
/// that is never held whole; `finish` it to end the stream. The header is written at once.
pub fn sealing_writer<W: Write>(
    out: W,
    recipients: &[String],
) -> Result<age::stream::StreamWriter<W>, RecipientError> {
    let parsed = recipients
        .iter()
        .map(|r| parse_recipient(r))
        .collect::<Result<Vec<_>, _>>()?;
    let encryptor =
        age::Encryptor::with_recipients(parsed.iter().map(|r| r as &dyn age::Recipient))
            .map_err(|_| RecipientError::None)?;
    encryptor
        .wrap_output(out)
        .map_err(|e| RecipientError::Io(e.kind()))
}
