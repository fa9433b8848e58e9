//! The inputs file read as a stream of lines, never held whole: plaintext, or sealed (age) and
//! opened on the way with the runner's identity. Bounded as a whole read is (the policy's
//! `max_inputs` caps the bytes), and hashed on the way: the ciphertext as received (the
//! receipt's `inputs_ciphertext`), and the plaintext's salted commitment and journal digest.

use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use zeroize::Zeroizing;

use super::inputs::MAX_INPUT_LINE_BYTES;
use crate::primitives::bounded_read::{open_regular, ReadError};
use crate::primitives::digest::Digest;
use crate::sealing::{is_age, open_stream, OpenError, SealKey};
use crate::trust::receipt::{Commitment, Committing};

/// What the stream showed, once every line was read.
#[derive(Debug, Clone, Copy)]
pub struct InputsRead {
    /// BLAKE3 of the file as received, when it was sealed.
    pub ciphertext: Option<Digest>,
    /// The salted commitment to the plaintext.
    pub commitment: Commitment,
    /// A digest of the plaintext under the journal's context (kept only in the sealed journal).
    pub journal_digest: Digest,
}

/// Why the inputs file could not be read to its end; `Line` is the caller's own refusal of a
/// line, passed through.
#[derive(Debug)]
pub enum ReadFailure<E> {
    /// The file could not be opened or read, or is larger than the cap.
    File(ReadError),
    /// The file is plaintext and must be sealed.
    Unsealed,
    /// The sealed file does not open, or its payload is damaged or too large.
    Sealed(OpenError),
    /// The caller refused a line.
    Line(E),
}

/// Bytes the sniffing of the format reads first (whitespace may come before the age magic).
const HEAD_BYTES: usize = 64 << 10;

/// A reader that counts and hashes what passes through it.
struct Hashed<R> {
    inner: R,
    hasher: blake3::Hasher,
    read: u64,
}

impl<R: Read> Read for Hashed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let got = buf.get(..n).unwrap_or_default();
        self.hasher.update(got);
        self.read += n as u64;
        Ok(n)
    }
}

/// A buffered reader whose buffer is zeroized when dropped: the plaintext passes through it,
/// and std's `BufReader` would leave its last 64 KiB in freed memory.
struct ZeroizingBufReader<R> {
    inner: R,
    buf: Zeroizing<Vec<u8>>,
    pos: usize,
    filled: usize,
}

impl<R: Read> ZeroizingBufReader<R> {
    fn new(inner: R) -> ZeroizingBufReader<R> {
        ZeroizingBufReader {
            inner,
            buf: Zeroizing::new(vec![0; 64 << 10]),
            pos: 0,
            filled: 0,
        }
    }
}

impl<R: Read> Read for ZeroizingBufReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: Read> BufRead for ZeroizingBufReader<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos >= self.filled {
            self.filled = self.inner.read(&mut self.buf)?;
            self.pos = 0;
        }
        Ok(self.buf.get(self.pos..self.filled).unwrap_or_default())
    }
    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.filled);
    }
}

/// What the policy lets the inputs file be.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Plaintext is refused.
    pub sealed_required: bool,
    /// The most plaintext bytes.
    pub cap: u64,
    /// The most bytes of the file as received.
    pub sealed_cap: u64,
}

/// Read `path` line by line, giving each line (without its newline) to `on_line`, in
/// zeroizing memory that is reused. `commitment` is the inputs commitment begun (its salt
/// chosen by the caller).
pub fn read_lines<E>(
    path: &Path,
    key: &SealKey,
    bounds: Bounds,
    commitment: Committing,
    journal_context: &str,
    mut on_line: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<InputsRead, ReadFailure<E>> {
    let Bounds {
        sealed_required,
        cap,
        sealed_cap,
    } = bounds;
    let file = open_regular(path, "inputs").map_err(ReadFailure::File)?;
    let io_error = |source| {
        ReadFailure::File(ReadError::Io {
            what: "inputs",
            path: path.to_owned(),
            source,
        })
    };
    let too_large = |cap| {
        ReadFailure::File(ReadError::TooLarge {
            what: "inputs",
            path: path.to_owned(),
            cap,
        })
    };
    let mut raw = Hashed {
        inner: file.take(sealed_cap.saturating_add(1)),
        hasher: blake3::Hasher::new(),
        read: 0,
    };
    let mut head = Zeroizing::new(Vec::with_capacity(HEAD_BYTES));
    (&mut raw)
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(io_error)?;
    let sealed = is_age(&head);
    if !sealed && sealed_required {
        return Err(ReadFailure::Unsealed);
    }
    let mut plain = Plain {
        commitment,
        journal: blake3::Hasher::new_derive_key(journal_context),
        read: 0,
        cap,
    };
    if sealed {
        let stream = BufReader::new(io::Cursor::new(&head[..]).chain(&mut raw));
        let opened = open_stream(stream, key, || head_of(path)).map_err(ReadFailure::Sealed)?;
        let mut lines = ZeroizingBufReader::new(opened);
        let result = plain.lines(&mut lines, &mut on_line);
        drop(lines);
        // A file cut at the cap reads as a truncated payload: say what cut it.
        if raw.read > sealed_cap {
            return Err(too_large(sealed_cap));
        }
        result.map_err(|e| match e {
            LinesFailure::Io(_) => {
                ReadFailure::Sealed(OpenError::Damaged("its payload was truncated or altered"))
            }
            LinesFailure::TooLarge => ReadFailure::Sealed(OpenError::TooLarge(cap)),
            LinesFailure::Line(e) => ReadFailure::Line(e),
        })?;
        // Whatever age did not need is still part of the file as received.
        io::copy(&mut raw, &mut io::sink()).map_err(io_error)?;
    } else {
        let mut lines = ZeroizingBufReader::new(io::Cursor::new(&head[..]).chain(&mut raw));
        plain.lines(&mut lines, &mut on_line).map_err(|e| match e {
            LinesFailure::Io(source) => io_error(source),
            LinesFailure::TooLarge => too_large(cap),
            LinesFailure::Line(e) => ReadFailure::Line(e),
        })?;
    }
    if raw.read > sealed_cap {
        return Err(too_large(sealed_cap));
    }
    let ciphertext = sealed.then(|| Digest(*raw.hasher.finalize().as_bytes()));
    Ok(InputsRead {
        ciphertext,
        commitment: plain.commitment.finish(),
        journal_digest: Digest(*plain.journal.finalize().as_bytes()),
    })
}

/// The file's first bytes again, to describe a header that is not for this runner.
fn head_of(path: &Path) -> Vec<u8> {
    let mut head = Vec::new();
    if let Ok(f) = open_regular(path, "inputs") {
        let _ = f.take(1 << 20).read_to_end(&mut head);
    }
    head
}

enum LinesFailure<E> {
    Io(io::Error),
    TooLarge,
    Line(E),
}

/// The plaintext side: hashed and counted as its lines go by.
struct Plain {
    commitment: Committing,
    journal: blake3::Hasher,
    read: u64,
    cap: u64,
}

impl Plain {
    fn lines<E>(
        &mut self,
        reader: &mut impl BufRead,
        on_line: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), LinesFailure<E>> {
        let mut line = Zeroizing::new(Vec::with_capacity(4096));
        loop {
            line.clear();
            // One byte past the longest line and its newline is enough to tell it is too long.
            let n = reader
                .take(MAX_INPUT_LINE_BYTES as u64 + 2)
                .read_until(b'\n', &mut line)
                .map_err(LinesFailure::Io)?;
            if n == 0 {
                return Ok(());
            }
            self.read += n as u64;
            if self.read > self.cap {
                return Err(LinesFailure::TooLarge);
            }
            self.commitment.update(&line);
            self.journal.update(&line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            on_line(text).map_err(LinesFailure::Line)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealing::seal;
    use crate::trust::receipt::INPUTS_COMMITMENT_CONTEXT;

    const JOURNAL: &str = "test journal";

    fn bounds(cap: u64) -> Bounds {
        Bounds {
            sealed_required: false,
            cap,
            sealed_cap: cap + cap / 4096 + (64 << 10),
        }
    }

    fn read(
        path: &Path,
        key: &SealKey,
        bounds: Bounds,
    ) -> Result<(Vec<Vec<u8>>, InputsRead), ReadFailure<()>> {
        let mut lines = Vec::new();
        let salt = Digest([7; 32]);
        let read = read_lines(
            path,
            key,
            bounds,
            Committing::with_salt(INPUTS_COMMITMENT_CONTEXT, salt),
            JOURNAL,
            |l| {
                lines.push(l.to_vec());
                Ok(())
            },
        )?;
        Ok((lines, read))
    }

    /// Lines long and many enough to cross the head, the buffers and age's 64 KiB chunks.
    fn text() -> Vec<u8> {
        let mut t = Vec::new();
        for i in 0..3000 {
            t.extend_from_slice(
                format!(
                    "{{\"id\": \"q{i}\", \"prompt\": \"{}\"}}\n",
                    "x".repeat(i % 97)
                )
                .as_bytes(),
            );
        }
        t.extend_from_slice(b"\n  \nlast line without a newline");
        t
    }

    #[test]
    fn plain_and_sealed_files_give_the_same_lines_and_commitment() {
        let tmp = tempfile::tempdir().unwrap();
        let key = SealKey::generate();
        let text = text();
        let plain_path = tmp.path().join("in.jsonl");
        std::fs::write(&plain_path, &text).unwrap();
        let sealed = seal(&text, &[key.recipient()]).unwrap();
        let sealed_path = tmp.path().join("in.jsonl.age");
        std::fs::write(&sealed_path, &sealed).unwrap();

        let (plain_lines, plain_read) = read(&plain_path, &key, bounds(1 << 24)).unwrap();
        let (sealed_lines, sealed_read) = read(&sealed_path, &key, bounds(1 << 24)).unwrap();
        let want: Vec<Vec<u8>> = text.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
        assert_eq!(plain_lines, want);
        assert_eq!(sealed_lines, want);
        let commitment = Commitment::with_salt(INPUTS_COMMITMENT_CONTEXT, Digest([7; 32]), &text);
        assert_eq!(plain_read.commitment, commitment);
        assert_eq!(sealed_read.commitment, commitment);
        assert_eq!(plain_read.journal_digest, Digest::derive(JOURNAL, &text));
        assert_eq!(sealed_read.journal_digest, plain_read.journal_digest);
        assert_eq!(plain_read.ciphertext, None);
        assert_eq!(sealed_read.ciphertext, Some(Digest::of(&sealed)));
    }

    #[test]
    fn rejects_plaintext_a_policy_wants_sealed_before_reading_a_line() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("in.jsonl");
        std::fs::write(&path, text()).unwrap();
        let mut b = bounds(1 << 24);
        b.sealed_required = true;
        let err = read(&path, &SealKey::generate(), b).unwrap_err();
        assert!(matches!(err, ReadFailure::Unsealed), "{err:?}");
    }

    #[test]
    fn rejects_plaintext_past_the_cap_sealed_or_not() {
        let tmp = tempfile::tempdir().unwrap();
        let key = SealKey::generate();
        let text = text();
        let cap = text.len() as u64 - 1;
        let plain_path = tmp.path().join("in.jsonl");
        std::fs::write(&plain_path, &text).unwrap();
        let err = read(&plain_path, &key, bounds(cap)).unwrap_err();
        assert!(
            matches!(err, ReadFailure::File(ReadError::TooLarge { cap: c, .. }) if c == cap),
            "{err:?}"
        );
        let sealed_path = tmp.path().join("in.jsonl.age");
        std::fs::write(&sealed_path, seal(&text, &[key.recipient()]).unwrap()).unwrap();
        let err = read(&sealed_path, &key, bounds(cap)).unwrap_err();
        assert!(
            matches!(err, ReadFailure::Sealed(OpenError::TooLarge(c)) if c == cap),
            "{err:?}"
        );
    }

    #[test]
    fn rejects_a_truncated_or_foreign_sealed_file_by_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let key = SealKey::generate();
        let sealed = seal(&text(), &[key.recipient()]).unwrap();
        let path = tmp.path().join("in.jsonl.age");
        std::fs::write(&path, &sealed[..sealed.len() - 100]).unwrap();
        let err = read(&path, &key, bounds(1 << 24)).unwrap_err();
        assert!(
            matches!(err, ReadFailure::Sealed(OpenError::Damaged(m)) if m.contains("truncated")),
            "{err:?}"
        );
        std::fs::write(&path, &sealed).unwrap();
        let err = read(&path, &SealKey::generate(), bounds(1 << 24)).unwrap_err();
        assert!(
            matches!(&err, ReadFailure::Sealed(OpenError::NotForUs { stanzas, .. }) if stanzas == "1 X25519 recipient"),
            "{err:?}"
        );
    }

    #[test]
    fn a_line_past_the_longest_is_handed_on_long_enough_to_refuse() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("in.jsonl");
        let mut text = b"{}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_INPUT_LINE_BYTES * 3));
        std::fs::write(&path, &text).unwrap();
        let mut longest = 0;
        let _ = read_lines(
            &path,
            &SealKey::generate(),
            bounds(1 << 24),
            Committing::with_salt(INPUTS_COMMITMENT_CONTEXT, Digest([0; 32])),
            JOURNAL,
            |l| {
                longest = longest.max(l.len());
                if l.len() > MAX_INPUT_LINE_BYTES {
                    Err(())
                } else {
                    Ok(())
                }
            },
        );
        assert!(longest > MAX_INPUT_LINE_BYTES && longest <= MAX_INPUT_LINE_BYTES + 2);
    }
}
