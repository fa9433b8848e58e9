//! The outputs file, written as the run goes rather than held whole: each batch's lines go to
//! the file in the publish stage ([`Stage::create`]), sealed on the way to the certificate's
//! recipients when the policy seals outputs, so a job of 100,000 inputs holds one batch of
//! output lines, not all of them (and never a second, sealed copy).
//!
//! Sealed, the plaintext reaches only the age stream's chunk buffer in memory; the file gets
//! ciphertext. The receipt's subject digests are of the bytes as written, and the salted
//! commitment of the plaintext as given, both computed on the way.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use zeroize::Zeroizing;

use super::publish::{PublishError, Stage};
use crate::error::{Diagnose, Exit};
use crate::sealing::{parse_recipient, sealing_writer, RecipientError};
use crate::trust::receipt::{
    Commitment, Committing, DigestSet, Hashers, OUTPUTS_COMMITMENT_CONTEXT, OUTPUTS_FILE,
    SEALED_OUTPUTS_FILE,
};

/// Lines are handed to the file in pieces of about this many bytes.
const FLUSH_BYTES: usize = 64 << 10;

/// Why the outputs file could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputsError {
    /// The file could not be made in the publish stage.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// The certificate's recipients cannot be sealed to.
    #[error("cannot seal the outputs: {0}")]
    Seal(RecipientError),
    /// The system's random number generator failed (the commitment needs a salt).
    #[error("the system random number generator failed (it salts the outputs commitment)")]
    NoRandomness,
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Diagnose for OutputsError {
    fn exit(&self) -> Exit {
        match self {
            OutputsError::Publish(e) => e.exit(),
            OutputsError::Seal(_) | OutputsError::NoRandomness | OutputsError::Io { .. } => {
                Exit::Failure
            }
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            OutputsError::Publish(e) => e.hint(),
            OutputsError::Io { .. } => {
                Some("check that the output directory's parent is writable and has space".into())
            }
            OutputsError::Seal(_) | OutputsError::NoRandomness => None,
        }
    }
}

/// A file that hashes the bytes it is given.
struct HashedFile {
    file: File,
    hashers: Hashers,
}

impl Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hashers.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

enum Sink {
    Plain(HashedFile),
    Sealed(age::stream::StreamWriter<HashedFile>),
}

impl Sink {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(bytes),
            Sink::Sealed(w) => w.write_all(bytes),
        }
    }
    fn finish(self) -> std::io::Result<HashedFile> {
        match self {
            Sink::Plain(w) => Ok(w),
            Sink::Sealed(w) => w.finish(),
        }
    }
}

/// The outputs file being written: `outputs.jsonl`, or `outputs.jsonl.age` sealed.
pub struct OutputsWriter {
    name: &'static str,
    path: PathBuf,
    sink: Sink,
    commitment: Option<Committing>,
    pending: Zeroizing<Vec<u8>>,
}

/// The outputs file as finished.
#[derive(Debug, Clone, Copy)]
pub struct WrittenOutputs {
    /// Its name in the output directory.
    pub name: &'static str,
    /// The digests of its bytes (ciphertext when sealed).
    pub digest: DigestSet,
    /// The salted commitment to the plaintext, when sealed.
    pub commitment: Option<Commitment>,
}

impl OutputsWriter {
    /// A new outputs file in `stage`, sealed to `recipients` unless there are none.
    pub fn create(stage: &Stage, recipients: &[String]) -> Result<OutputsWriter, OutputsError> {
        // Checked before the file is made, so a refusal leaves nothing behind.
        for r in recipients {
            parse_recipient(r).map_err(OutputsError::Seal)?;
        }
        let name = if recipients.is_empty() {
            OUTPUTS_FILE
        } else {
            SEALED_OUTPUTS_FILE
        };
        let (file, path) = stage.create(name)?;
        let file = HashedFile {
            file,
            hashers: Hashers::new(),
        };
        let (sink, commitment) = if recipients.is_empty() {
            (Sink::Plain(file), None)
        } else {
            let commitment =
                Committing::new(OUTPUTS_COMMITMENT_CONTEXT).ok_or(OutputsError::NoRandomness)?;
            let writer = sealing_writer(file, recipients).map_err(OutputsError::Seal)?;
            (Sink::Sealed(writer), Some(commitment))
        };
        Ok(OutputsWriter {
            name,
            path,
            sink,
            commitment,
            pending: Zeroizing::new(Vec::with_capacity(FLUSH_BYTES * 2)),
        })
    }

    /// Append one JSON line.
    pub fn push(&mut self, line: &serde_json::Value) -> Result<(), OutputsError> {
        serde_json::to_writer(&mut *self.pending, line).map_err(|e| OutputsError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        self.pending.push(b'\n');
        if self.pending.len() >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), OutputsError> {
        if let Some(c) = self.commitment.as_mut() {
            c.update(&self.pending);
        }
        self.sink
            .write_all(&self.pending)
            .map_err(|source| OutputsError::Io {
                path: self.path.clone(),
                source,
            })?;
        // The bytes stay in the buffer's capacity until overwritten; the buffer is zeroized
        // when the writer is dropped.
        self.pending.clear();
        Ok(())
    }

    /// Write what is left, end the age stream, fsync the file.
    pub fn finish(mut self) -> Result<WrittenOutputs, OutputsError> {
        self.flush()?;
        let path = self.path.clone();
        let io = |source| OutputsError::Io {
            path: path.clone(),
            source,
        };
        let file = self.sink.finish().map_err(io)?;
        file.file.sync_all().map_err(io)?;
        Ok(WrittenOutputs {
            name: self.name,
            digest: file.hashers.finish(),
            commitment: self.commitment.map(Committing::finish),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealing::{open, SealKey};
    use crate::trust::receipt::{Commitment, OUTPUTS_COMMITMENT_CONTEXT};

    fn lines(n: usize) -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| serde_json::json!({"id": format!("q{i}"), "tokens": [i, i + 1, 7]}))
            .collect()
    }

    fn expected(lines: &[serde_json::Value]) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines {
            serde_json::to_writer(&mut out, l).unwrap();
            out.push(b'\n');
        }
        out
    }

    fn write(
        dir: &std::path::Path,
        recipients: &[String],
        lines: &[serde_json::Value],
    ) -> WrittenOutputs {
        let stage = Stage::open(dir).unwrap();
        let mut w = OutputsWriter::create(&stage, recipients).unwrap();
        for l in lines {
            w.push(l).unwrap();
        }
        let written = w.finish().unwrap();
        stage.publish().unwrap();
        written
    }

    #[test]
    fn plain_outputs_are_the_lines_and_their_digests() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        // Enough lines to cross the flush size several times.
        let lines = lines(20_000);
        let written = write(&out, &[], &lines);
        let bytes = std::fs::read(out.join(OUTPUTS_FILE)).unwrap();
        assert!(bytes.len() > 4 * FLUSH_BYTES);
        assert_eq!(bytes, expected(&lines));
        assert_eq!(written.name, OUTPUTS_FILE);
        assert_eq!(written.digest, DigestSet::of(&bytes));
        assert!(written.commitment.is_none());
    }

    #[test]
    fn sealed_outputs_open_to_the_lines_and_commit_to_them() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let key = SealKey::generate();
        let lines = lines(20_000);
        let written = write(&out, &[key.recipient()], &lines);
        let sealed = std::fs::read(out.join(SEALED_OUTPUTS_FILE)).unwrap();
        assert_eq!(written.name, SEALED_OUTPUTS_FILE);
        assert_eq!(written.digest, DigestSet::of(&sealed));
        let plain = open(&sealed, &key, u64::MAX).unwrap();
        assert_eq!(*plain, expected(&lines));
        let c: Commitment = written.commitment.unwrap();
        assert!(c.opens(OUTPUTS_COMMITMENT_CONTEXT, &plain));
    }

    #[test]
    fn a_bad_recipient_is_refused_before_any_file_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let stage = Stage::open(&out).unwrap();
        let err = OutputsWriter::create(&stage, &["age1notarecipient".into()])
            .err()
            .unwrap();
        assert!(matches!(err, OutputsError::Seal(_)), "{err}");
        drop(stage);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}
