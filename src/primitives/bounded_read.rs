//! Reading a file the runner was pointed at: opened once, only if it is a regular file, and
//! never more than a stated number of bytes.
//!
//! A path given on the command line or in a job file may name `/dev/zero`, a fifo that never
//! delivers, a directory, or a file of many gigabytes. Each would otherwise exhaust memory or
//! hang before anything is recorded. The file is opened without blocking (a fifo opens at once
//! instead of waiting for a writer), its type is taken from the open handle (so it cannot be
//! swapped between the check and the read), and at most `cap + 1` bytes are read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Diagnose, Exit};

/// Largest certificate or receipt file.
pub const MAX_DOCUMENT_BYTES: u64 = 16 << 20;
/// Largest engine source, job file, policy or trust configuration.
pub const MAX_TEXT_BYTES: u64 = 1 << 20;
/// Largest key file.
pub const MAX_KEY_BYTES: u64 = 64 << 10;
/// Largest `tokenizer.json` (the official Gemma 3 one is 33 MiB).
pub const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The operating system refused.
    #[error("cannot read {what} {}: {source}", path.display())]
    Io {
        /// What the file is for ("certificate", "engine", ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Not a regular file.
    #[error("{what} {} is {kind}, not a regular file", path.display())]
    NotRegular {
        /// What the file is for.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What it is instead ("a directory", "a fifo", ...).
        kind: &'static str,
    },
    /// Larger than the cap.
    #[error("{what} {} is larger than {cap} bytes, the most this runner reads for it", path.display())]
    TooLarge {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cap, in bytes.
        cap: u64,
    },
}

impl Diagnose for ReadError {
    fn exit(&self) -> Exit {
        match self {
            ReadError::Io { source, .. } if source.kind() != io::ErrorKind::NotFound => {
                Exit::Failure
            }
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                "check the path".into()
            }
            ReadError::Io { .. } => "check the file's permissions".into(),
            ReadError::NotRegular { .. } => "point it at an ordinary file".into(),
            ReadError::TooLarge { .. } => "this is not the file meant here; check the path".into(),
        })
    }
}

impl ReadError {
    /// The file that was not read.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::Io { path, .. }
            | ReadError::NotRegular { path, .. }
            | ReadError::TooLarge { path, .. } => path,
        }
    }

    /// Whether nothing is at the path.
    pub fn is_missing(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What `file` is, when it is not a regular file.
fn not_regular(file: &File) -> io::Result<Option<&'static str>> {
    let t = file.metadata()?.file_type();
    if t.is_file() {
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Ok(Some("a fifo"));
        }
        if t.is_char_device() || t.is_block_device() {
            return Ok(Some("a device"));
        }
        if t.is_socket() {
            return Ok(Some("a socket"));
        }
    }
    Ok(Some(if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }))
}

/// Open `path` for reading without blocking on a fifo, and refuse anything but a regular file.
pub fn open_regular(path: &Path, what: &'static str) -> Result<File, ReadError> {
    let io_err = |source| ReadError::Io {
        what,
        path: path.to_owned(),
        source,
    };
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io_err)?;
    if let Some(kind) = not_regular(&file).map_err(io_err)? {
        return Err(ReadError::NotRegular {
            what,
            path: path.to_owned(),
            kind,
        });
    }
    Ok(file)
}

/// The bytes of the regular file `path`, at most `cap` of them; `what` names the file's role in
/// errors.
pub fn read_bounded(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path, what)?;
    let too_large = || ReadError::TooLarge {
        what,
        path: path.to_owned(),
        cap,
    };
    let len = file
        .metadata()
        .map_err(|source| ReadError::Io {
            what,
            path: path.to_owned(),
            source,
        })?
        .len();
    if len > cap {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            what,
            path: path.to_owned(),
            source,
        })?;
    // The file may have grown since `metadata`.
    if bytes.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(bytes)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_bounded_text(path: &Path, cap: u64, what: &'static str) -> Result<String, ReadError> {
    let bytes = read_bounded(path, cap, what)?;
    String::from_utf8(bytes).map_err(|e| ReadError::Io {
        what,
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_regular_file_up_to_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_bounded(&p, 5, "test").unwrap(), b"12345");
        let err = read_bounded(&p, 4, "test").unwrap_err();
        assert!(matches!(err, ReadError::TooLarge { cap: 4, .. }), "{err}");
    }

    #[test]
    fn rejects_a_directory_and_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_bounded(dir.path(), 10, "test").unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::NotRegular {
                    kind: "a directory",
                    ..
                }
            ),
            "{err}"
        );
        #[cfg(unix)]
        {
            let err = read_bounded(Path::new("/dev/zero"), 10, "test").unwrap_err();
            assert!(
                matches!(
                    err,
                    ReadError::NotRegular {
                        kind: "a device",
                        ..
                    }
                ),
                "{err}"
            );
            assert_eq!(err.exit(), Exit::BadInput);
        }
    }

    #[cfg(unix)]
    #[test]
    fn rejects_a_fifo_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&p).status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "mkfifo (coreutils) is needed"
        );
        let err = read_bounded(&p, 10, "test").unwrap_err();
        assert!(
            matches!(err, ReadError::NotRegular { kind: "a fifo", .. }),
            "{err}"
        );
    }
}
