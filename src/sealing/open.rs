//! Opening an age file in memory: binary or ASCII-armored, with the runner's identity. Every
//! way it can fail is told apart, in words that name no secret, so the refusal can say what to
//! do: a file for another recipient says how many recipients it has and which kind (X25519
//! stanzas do not name their recipient), a passphrase file says so, and a damaged one is just
//! damaged (age's own failures are deliberately opaque).

use std::collections::BTreeMap;
use std::io::{BufRead, Read};

use zeroize::Zeroizing;

use super::SealKey;

/// The first line of a binary age file.
const BINARY_MAGIC: &[u8] = b"age-encryption.org/";
/// The first line of an armored one.
const ARMOR_BEGIN: &[u8] = b"-----BEGIN AGE ENCRYPTED FILE-----";

/// Why an age file was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// None of the file's recipients is this identity.
    #[error("it is encrypted to {stanzas}, none of them {ours}")]
    NotForUs {
        /// What the header holds, e.g. "2 X25519 recipients".
        stanzas: String,
        /// This runner's recipient.
        ours: String,
    },
    /// Encrypted with a passphrase (scrypt), which a runner cannot be given.
    #[error("it is encrypted with a passphrase, not to a recipient")]
    Passphrase,
    /// A newer or unknown age format.
    #[error("it is in an age format this runner does not read")]
    UnknownFormat,
    /// The header, a MAC or the payload does not check out: truncated, altered, or not age.
    #[error("it is damaged: {0}")]
    Damaged(&'static str),
    /// The plaintext is larger than the caller allows.
    #[error("its plaintext is larger than {0} bytes")]
    TooLarge(u64),
    /// The header is longer than [`MAX_HEADER`]: thousands of recipient stanzas.
    #[error("its header is longer than {0} bytes (more recipients than a runner opens)")]
    HeaderTooLarge(usize),
}

/// Longest age header (the lines up to and including the `---` MAC line, dearmored) a runner
/// hands to the age crate: about 650 X25519 recipient stanzas, each an X25519 attempt. The bound
/// was found by fuzzing: the crate parses a header again from its start after each line it reads
/// (measured on Zen 5 before [`WholeHeader`]: 1,000 stanzas took 0.23 s, 16,000 (1.5 MB) 69 s),
/// and a sealed input or output of a few megabytes of stanzas would have held a job or `runner
/// decrypt` for hours. The header is now parsed once, and the bound still keeps the memory and
/// the key attempts a sender can ask of a runner small.
pub const MAX_HEADER: usize = 64 * 1024;

/// Whether `bytes` begin like an age file (binary or armored).
pub fn is_age(bytes: &[u8]) -> bool {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let rest = &bytes[start..];
    rest.starts_with(BINARY_MAGIC) || rest.starts_with(ARMOR_BEGIN)
}

/// The recipient stanza tags of an age header, counted ("2 X25519 recipients"), read from the
/// dearmored bytes without decrypting anything.
fn describe_stanzas(binary: &[u8]) -> String {
    let mut tags: BTreeMap<String, usize> = BTreeMap::new();
    for line in binary.split(|&b| b == b'\n').skip(1) {
        if line.starts_with(b"---") {
            break;
        }
        if let Some(rest) = line.strip_prefix(b"-> ") {
            let tag = rest.split(|&b| b == b' ').next().unwrap_or_default();
            let tag: String = String::from_utf8_lossy(tag)
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(32)
                .collect();
            // age adds stanzas of random `*-grease` tags that no identity opens.
            if !tag.ends_with("-grease") {
                *tags.entry(tag).or_default() += 1;
            }
        }
    }
    if tags.is_empty() {
        return "no recipients".into();
    }
    // The header is the sender's to write: a few kinds are named, the rest only counted, so a
    // header of many made-up tags cannot make the refusal as long as the file.
    let mut said: Vec<String> = tags
        .iter()
        .take(NAMED_KINDS)
        .map(|(tag, n)| format!("{n} {tag} recipient{}", if *n == 1 { "" } else { "s" }))
        .collect();
    let unnamed: usize = tags.values().skip(NAMED_KINDS).sum();
    if unnamed > 0 {
        let kinds = tags.len() - NAMED_KINDS;
        said.push(format!(
            "{unnamed} recipient{} of {kinds} other kind{}",
            if unnamed == 1 { "" } else { "s" },
            if kinds == 1 { "" } else { "s" }
        ));
    }
    said.join(" and ")
}

/// Recipient kinds a refusal names one by one.
const NAMED_KINDS: usize = 3;

/// The plaintext of the age file `bytes`, for `key`, at most `cap` bytes, in zeroizing memory.
pub fn open(bytes: &[u8], key: &SealKey, cap: u64) -> Result<Zeroizing<Vec<u8>>, OpenError> {
    // Dearmored once here, so that malformed armor is named as such.
    let mut binary = Zeroizing::new(Vec::with_capacity(bytes.len()));
    age::armor::ArmoredReader::new(bytes)
        .read_to_end(&mut binary)
        .map_err(|_| OpenError::Damaged("its ASCII armor is malformed"))?;
    let reader = open_stream(&binary[..], key, || binary.to_vec())?;
    let mut plain = Zeroizing::new(Vec::new());
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut plain)
        .map_err(|_| OpenError::Damaged("its payload was truncated or altered"))?;
    if plain.len() as u64 > cap {
        return Err(OpenError::TooLarge(cap));
    }
    Ok(plain)
}

/// The plaintext of an age file read as a stream from `reader` (binary or armored), for `key`:
/// for files too large to hold whole. The header is checked here; a payload that is
/// truncated or altered fails a later read with an I/O error. When the file is not for `key`,
/// `head` is asked for the file's first bytes, to say whom it is for.
pub fn open_stream<'r, R: BufRead + 'r>(
    reader: R,
    key: &SealKey,
    head: impl FnOnce() -> Vec<u8>,
) -> Result<impl Read + 'r, OpenError> {
    let mut armored = age::armor::ArmoredReader::new(reader);
    let header = read_header(&mut armored)?;
    let decryptor = match age::Decryptor::new_buffered(WholeHeader::new(header, armored)) {
        Ok(d) => d,
        Err(age::DecryptError::UnknownFormat) => return Err(OpenError::UnknownFormat),
        Err(_) => return Err(OpenError::Damaged("its header does not parse")),
    };
    if decryptor.is_scrypt() {
        return Err(OpenError::Passphrase);
    }
    match decryptor.decrypt(std::iter::once(key.identity() as &dyn age::Identity)) {
        Ok(r) => Ok(r),
        Err(age::DecryptError::NoMatchingKeys) => {
            // Dearmored as far as it goes: the header is at the start.
            let head = Zeroizing::new(head());
            let mut binary = Zeroizing::new(Vec::new());
            let _ = age::armor::ArmoredReader::new(&head[..]).read_to_end(&mut binary);
            Err(OpenError::NotForUs {
                stanzas: describe_stanzas(&binary),
                ours: key.recipient(),
            })
        }
        Err(age::DecryptError::InvalidMac) => Err(OpenError::Damaged("its header was altered")),
        Err(_) => Err(OpenError::Damaged("its header does not check out")),
    }
}

/// The header lines of the (dearmored) age stream `input`, through the `---` MAC line or the end
/// of the input, whichever comes first; what follows stays in `input`. A file that does not
/// start like a binary age file is read no further than its first line, for age to reject.
fn read_header<R: BufRead>(input: &mut R) -> Result<Vec<u8>, OpenError> {
    let mut header = Vec::new();
    loop {
        let start = header.len();
        // One byte past the bound is enough to tell that the header is too long.
        let room = (MAX_HEADER + 1 - start) as u64;
        let read = input
            .by_ref()
            .take(room)
            .read_until(b'\n', &mut header)
            .map_err(|_| OpenError::Damaged("its header does not parse"))?;
        let line = &header[start..];
        if read == 0 || line.starts_with(b"---") || (start == 0 && !line.starts_with(BINARY_MAGIC))
        {
            return Ok(header);
        }
        if header.len() > MAX_HEADER {
            return Err(OpenError::HeaderTooLarge(MAX_HEADER));
        }
    }
}

/// The header lines [`read_header`] read, then the rest of the stream, as one buffered reader
/// whose first `read_until` hands over the whole header. age parses its header again from the
/// start after every `read_until`; given every line at once it parses once, so a header costs
/// its length, not its square. Within [`MAX_HEADER`] a release build shows no difference (a
/// 640-stanza header is refused in 34 ms either way, mostly X25519), but the fuzz build, whose
/// parser is instrumented, runs `sealed_file` 5.5 times as fast. age sees exactly the bytes it
/// would have read line by line: the header ends at its `---` line, and anything age asks for
/// after it comes from `rest` as before.
struct WholeHeader<R> {
    header: Vec<u8>,
    /// How much of `header` has been handed over.
    given: usize,
    rest: R,
}

impl<R> WholeHeader<R> {
    fn new(header: Vec<u8>, rest: R) -> Self {
        WholeHeader {
            header,
            given: 0,
            rest,
        }
    }

    fn pending(&self) -> &[u8] {
        &self.header[self.given..]
    }
}

impl<R: BufRead> Read for WholeHeader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending().is_empty() {
            return self.rest.read(buf);
        }
        let n = self.pending().len().min(buf.len());
        buf[..n].copy_from_slice(&self.pending()[..n]);
        self.given += n;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for WholeHeader<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pending().is_empty() {
            return self.rest.fill_buf();
        }
        Ok(&self.header[self.given..])
    }

    fn consume(&mut self, amount: usize) {
        let pending = self.pending().len();
        if pending == 0 {
            self.rest.consume(amount);
        } else {
            self.given += amount.min(pending);
        }
    }

    fn read_until(&mut self, byte: u8, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        if self.pending().is_empty() {
            return self.rest.read_until(byte, buf);
        }
        let n = self.pending().len();
        buf.extend_from_slice(self.pending());
        self.given += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealing::seal;

    fn sealed_to(recipients: &[String], plain: &[u8], armor: bool) -> Vec<u8> {
        seal::seal_with(plain, recipients, armor).unwrap()
    }

    #[test]
    fn opens_binary_and_armored_files_for_any_of_their_recipients() {
        let (ours, other) = (SealKey::generate(), SealKey::generate());
        let recipients = [other.recipient(), ours.recipient()];
        for armor in [false, true] {
            let file = sealed_to(&recipients, b"private", armor);
            assert!(is_age(&file));
            assert_eq!(&open(&file, &ours, 100).unwrap()[..], b"private");
            assert_eq!(&open(&file, &other, 100).unwrap()[..], b"private");
        }
        assert!(!is_age(b"{\"id\": \"a\"}"));
    }

    #[test]
    fn rejects_each_kind_of_failure_by_name() {
        let (ours, other) = (SealKey::generate(), SealKey::generate());
        let file = sealed_to(&[other.recipient(), other.recipient()], b"private", false);
        assert_eq!(
            open(&file, &ours, 100).unwrap_err(),
            OpenError::NotForUs {
                stanzas: "2 X25519 recipients".into(),
                ours: ours.recipient()
            }
        );
        let file = sealed_to(&[ours.recipient()], b"private data", false);
        let truncated = &file[..file.len() - 4];
        assert!(matches!(
            open(truncated, &ours, 100),
            Err(OpenError::Damaged(_))
        ));
        let mut altered = file.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert!(matches!(
            open(&altered, &ours, 100),
            Err(OpenError::Damaged(_))
        ));
        assert_eq!(open(&file, &ours, 5), Err(OpenError::TooLarge(5)));
        let passphrase = {
            let enc = age::Encryptor::with_user_passphrase(age::secrecy::SecretString::from(
                "correct horse".to_owned(),
            ));
            let mut out = Vec::new();
            let mut w = enc.wrap_output(&mut out).unwrap();
            std::io::Write::write_all(&mut w, b"x").unwrap();
            w.finish().unwrap();
            out
        };
        assert_eq!(open(&passphrase, &ours, 100), Err(OpenError::Passphrase));
    }

    #[test]
    fn opens_hundreds_of_recipients_and_refuses_a_header_past_the_bound() {
        let ours = SealKey::generate();
        let others: Vec<String> = (0..700).map(|_| SealKey::generate().recipient()).collect();
        for armor in [false, true] {
            // About 100 bytes a stanza: 300 of them are well inside the bound, ours the last.
            let mut recipients = others[..299].to_vec();
            recipients.push(ours.recipient());
            let file = sealed_to(&recipients, b"private", armor);
            assert_eq!(&open(&file, &ours, 100).unwrap()[..], b"private");
            let mut recipients = others.clone();
            recipients.push(ours.recipient());
            let file = sealed_to(&recipients, b"private", armor);
            assert_eq!(
                open(&file, &ours, 100),
                Err(OpenError::HeaderTooLarge(MAX_HEADER))
            );
        }
        // One endless header line is cut off at the bound too, and not read to its end.
        let mut endless = b"age-encryption.org/v1\n-> X25519 ".to_vec();
        endless.resize(4 * MAX_HEADER, b'A');
        assert_eq!(
            open(&endless, &ours, 100),
            Err(OpenError::HeaderTooLarge(MAX_HEADER))
        );
        // What does not start like age is left for age to refuse, as before the bound.
        assert_eq!(
            open(&[b'x'; 3 * MAX_HEADER], &ours, 100),
            Err(OpenError::Damaged("its header does not parse"))
        );
        assert_eq!(
            open(
                b"age-encryption.org/v9\n-> X25519 a\nAAAA\n--- mac\n",
                &ours,
                100
            ),
            Err(OpenError::UnknownFormat)
        );
    }

    #[test]
    fn hands_age_the_whole_header_then_the_rest_as_it_was() {
        let header = b"age-encryption.org/v1\n-> X25519 abc\nbody\n--- mac\n".to_vec();
        let rest = b"payload line\nmore".to_vec();
        let mut reader = WholeHeader::new(header.clone(), &rest[..]);
        let mut first = Vec::new();
        assert_eq!(reader.read_until(b'\n', &mut first).unwrap(), header.len());
        assert_eq!(first, header);
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line).unwrap();
        assert_eq!(line, b"payload line\n");
        let mut tail = Vec::new();
        reader.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, b"more");

        // Read and consumed in small pieces, the same bytes come out in the same order.
        let mut reader = WholeHeader::new(header.clone(), &rest[..]);
        let mut all = Vec::new();
        let mut piece = [0u8; 5];
        let n = reader.read(&mut piece).unwrap();
        all.extend_from_slice(&piece[..n]);
        let buffered = reader.fill_buf().unwrap().to_vec();
        reader.consume(3);
        all.extend_from_slice(&buffered[..3]);
        reader.read_to_end(&mut all).unwrap();
        assert_eq!(all, [header, rest].concat());
    }

    #[test]
    fn a_header_of_many_kinds_is_described_in_a_bounded_line() {
        let mut header = b"age-encryption.org/v1\n".to_vec();
        for i in 0..500 {
            header.extend_from_slice(format!("-> kind{i:03} x\nAAAA\n").as_bytes());
        }
        header.extend_from_slice(b"-> X25519 a\nAAAA\n--- mac\n");
        let said = describe_stanzas(&header);
        assert_eq!(
            said,
            "1 X25519 recipient and 1 kind000 recipient and 1 kind001 recipient and \
             498 recipients of 498 other kinds"
        );
    }
}
