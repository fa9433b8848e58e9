//! A checkpoint's files, opened once for both hashing and loading.
//!
//! `exec` must run on exactly the bytes the certificate approved. Hashing a path and opening the
//! path again later would let anyone who can write the model directory swap or rewrite a file
//! in between. So [`model_digest`](super::digest::model_digest) opens each counted file once,
//! and the loader reads and maps those open files, never paths ([`CheckpointFiles::sealed`]):
//!
//! - small files (`config.json`, the shard index) are read whole and their BLAKE3 compared with
//!   the digest's, so what is parsed is what was hashed;
//! - the weights are mapped, so each carries a [`FileStamp`] taken before its bytes were hashed,
//!   compared again before a receipt is signed ([`Seal::check_unchanged`]).
//!
//! The stamp holds the inode's change time (ctime). Every `write(2)`, truncate and first write
//! to a clean page through a writable mapping sets it to the current time, and only changing the
//! system clock sets it back. So do renaming the file away, unlinking it and changing its mode
//! or owner: those refuse a run too, since ctime cannot tell them from a write. Hashing first syncs the file, so no page is left dirty in someone
//! else's writable mapping (a write to an already dirty page would not touch ctime). ctime comes
//! from a coarse clock: two writes within one tick leave the same value, so a file changed less
//! than [`SETTLE`] ago is stamped only once that has passed. Not covered: a filesystem that never
//! updates times for writes through a mapping (tmpfs) when its writer mapped the file before the
//! job started; that takes write permission on the model, which the enclave's operator controls.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Diagnose, Exit};
use crate::primitives::digest::Digest;

/// How long after a change to a file its stamp is taken: longer than any kernel tick (HZ >= 100).
pub const SETTLE: Duration = Duration::from_millis(50);
/// The settle time on filesystems that keep whole seconds only (FAT, some network filesystems).
const SETTLE_COARSE: Duration = Duration::from_millis(2100);

/// What changes whenever a file's bytes do: the inode, its size and its times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of an open file, now.
    pub fn of(file: &File) -> io::Result<FileStamp> {
        let m = file.metadata()?;
        Ok(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// The stamp of an open file, taken once a write in the same clock tick as its last change
    /// could no longer leave it unchanged.
    pub fn settled(file: &File) -> io::Result<FileStamp> {
        let stamp = FileStamp::of(file)?;
        let (secs, nanos) = stamp.ctime;
        let settle = if nanos == 0 { SETTLE_COARSE } else { SETTLE };
        let changed =
            UNIX_EPOCH + Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
        let ready = changed + settle;
        match ready.duration_since(SystemTime::now()) {
            Ok(wait) if wait <= settle => {
                std::thread::sleep(wait);
                FileStamp::of(file)
            }
            // Settled long ago, or stamped in the future (a skewed clock): nothing to wait for
            // that a wait could fix, and any later write still moves ctime off this value.
            _ => Ok(stamp),
        }
    }

    /// Size in bytes when stamped.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// One checkpoint file, open, with the stamp and digest it had when hashed.
#[derive(Debug)]
pub struct OpenFile {
    /// The path it was opened by, for messages.
    pub path: PathBuf,
    /// The open file.
    pub file: File,
    /// Its stamp before hashing.
    pub stamp: FileStamp,
    /// BLAKE3 of its bytes, when a model digest hashed it.
    pub blake3: Option<Digest>,
}

impl OpenFile {
    /// Whether the file still has the stamp it was hashed with.
    pub fn unchanged(&self) -> io::Result<bool> {
        Ok(FileStamp::of(&self.file)? == self.stamp)
    }
}

/// Why a checkpoint file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// Opening or reading failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The bytes differ from the ones the model digest covered.
    #[error("model file {path} changed after its digest was taken")]
    Changed {
        /// The file.
        path: PathBuf,
    },
}

impl Diagnose for FileError {
    fn exit(&self) -> Exit {
        match self {
            FileError::Read { .. } => Exit::Failure,
            FileError::Changed { .. } => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            FileError::Read { .. } => Some("check the file's permissions".into()),
            FileError::Changed { .. } => Some(
                "something wrote, replaced or re-permissioned the model's files during the job, \
                 so nothing was signed; find out what, restore the approved files, then run the \
                 job again"
                    .into(),
            ),
        }
    }
}

/// The extension of a single-file GGUF checkpoint.
pub const GGUF_EXTENSION: &str = "gguf";

/// Whether a file name is a GGUF checkpoint's.
pub fn is_gguf_name(name: &str) -> bool {
    Path::new(name)
        .extension()
        .is_some_and(|e| e == GGUF_EXTENSION)
}

/// The files a checkpoint is loaded from: by path, or the digest's open files only.
#[derive(Debug)]
pub struct CheckpointFiles {
    dir: PathBuf,
    /// The one file of a checkpoint given as a file (a `.gguf`), by name within `dir`.
    single: Option<String>,
    sealed: Option<BTreeMap<String, Arc<OpenFile>>>,
    used: Vec<Arc<OpenFile>>,
}

impl CheckpointFiles {
    /// Files opened by path (bench, demo: nothing to hold them to): those under `model` when it
    /// is a directory, else `model` alone, a single-file checkpoint.
    pub fn by_path(model: &Path) -> CheckpointFiles {
        let (dir, single) = split_single(model);
        CheckpointFiles {
            dir,
            single,
            sealed: None,
            used: Vec::new(),
        }
    }

    /// Exactly the files a model digest hashed, by name within `dir`; nothing else exists.
    pub fn sealed(dir: &Path, files: BTreeMap<String, Arc<OpenFile>>) -> CheckpointFiles {
        CheckpointFiles {
            dir: dir.to_owned(),
            single: None,
            sealed: Some(files),
            used: Vec::new(),
        }
    }

    /// The directory the checkpoint's files are named in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `name` is a file of the checkpoint.
    pub fn exists(&self, name: &str) -> bool {
        match (&self.sealed, &self.single) {
            (Some(files), _) => files.contains_key(name),
            (None, Some(single)) => single == name,
            (None, None) => self.dir.join(name).exists(),
        }
    }

    /// The names of the checkpoint's GGUF files (one, for a GGUF checkpoint), sorted.
    pub fn gguf_names(&self) -> Vec<String> {
        let mut names: Vec<String> = match (&self.sealed, &self.single) {
            (Some(files), _) => files.keys().filter(|n| is_gguf_name(n)).cloned().collect(),
            (None, Some(single)) => vec![single.clone()]
                .into_iter()
                .filter(|n| is_gguf_name(n))
                .collect(),
            (None, None) => std::fs::read_dir(&self.dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| is_gguf_name(n))
                .collect(),
        };
        names.sort();
        names
    }

    /// Open `name` and keep it among the files [`Seal::check_unchanged`] looks at.
    pub fn open(&mut self, name: &str) -> Result<Arc<OpenFile>, FileError> {
        let path = self.dir.join(name);
        let file = match &self.sealed {
            Some(files) => files.get(name).cloned().ok_or(FileError::Read {
                path,
                source: io::ErrorKind::NotFound.into(),
            })?,
            None => {
                let read = |source| FileError::Read {
                    path: path.clone(),
                    source,
                };
                let file = File::open(&path).map_err(read)?;
                let stamp = FileStamp::of(&file).map_err(read)?;
                Arc::new(OpenFile {
                    path: path.clone(),
                    file,
                    stamp,
                    blake3: None,
                })
            }
        };
        self.used.push(Arc::clone(&file));
        Ok(file)
    }

    /// The whole of `name`; when sealed, only if it still is what the digest hashed.
    pub fn read(&mut self, name: &str) -> Result<Vec<u8>, FileError> {
        let open = self.open(name)?;
        let read = |source| FileError::Read {
            path: open.path.clone(),
            source,
        };
        let len = open.file.metadata().map_err(read)?.len();
        let mut bytes = vec![0; usize::try_from(len).map_err(|e| read(io::Error::other(e)))?];
        open.file.read_exact_at(&mut bytes, 0).map_err(read)?;
        if open.blake3.is_some_and(|d| d != Digest::of(&bytes)) {
            return Err(FileError::Changed {
                path: open.path.clone(),
            });
        }
        Ok(bytes)
    }

    /// The files opened so far, to be checked again before results are signed.
    pub fn into_seal(self) -> Seal {
        Seal(self.used)
    }
}

/// A model path as (the directory its files are named in, the file's name when it is a file).
pub fn split_single(model: &Path) -> (PathBuf, Option<String>) {
    let name = model.file_name().and_then(|n| n.to_str());
    match (model.is_file(), name) {
        (true, Some(name)) => {
            let parent = model.parent().filter(|p| !p.as_os_str().is_empty());
            (
                parent.unwrap_or(Path::new(".")).to_owned(),
                Some(name.to_owned()),
            )
        }
        _ => (model.to_owned(), None),
    }
}

/// The files a loaded checkpoint was read from, with the stamps they had when hashed.
#[derive(Debug, Clone, Default)]
pub struct Seal(Vec<Arc<OpenFile>>);

impl Seal {
    /// Fails with the first file written since it was hashed (or, unsealed, since it was opened).
    pub fn check_unchanged(&self) -> Result<(), FileError> {
        for f in &self.0 {
            let same = f.unchanged().map_err(|source| FileError::Read {
                path: f.path.clone(),
                source,
            })?;
            if !same {
                return Err(FileError::Changed {
                    path: f.path.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_file_is_stamped_only_after_its_last_change_settled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        std::fs::write(&path, b"weights").unwrap();
        let file = File::open(&path).unwrap();
        let stamp = FileStamp::settled(&file).unwrap();
        let (secs, nanos) = stamp.ctime;
        let changed = UNIX_EPOCH + Duration::new(secs as u64, nanos as u32);
        let waited = SystemTime::now().duration_since(changed).unwrap();
        assert!(waited >= SETTLE, "stamped {waited:?} after the last change");
        // Nothing changed while waiting, so the stamp is the file's.
        assert_eq!(stamp, FileStamp::of(&file).unwrap());
        assert_eq!(stamp.size(), 7);
    }

    #[test]
    fn by_path_files_are_checked_from_when_they_were_opened() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), b"{}").unwrap();
        let mut files = CheckpointFiles::by_path(dir.path());
        assert!(files.exists("config.json"));
        assert!(!files.exists("model.safetensors"));
        assert_eq!(files.read("config.json").unwrap(), b"{}");
        let seal = files.into_seal();
        seal.check_unchanged().unwrap();
        // Unsettled stamps: past a coarse clock's tick before writing.
        std::thread::sleep(SETTLE);
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("config.json"))
            .unwrap()
            .write_all_at(b" ", 2)
            .unwrap();
        assert!(matches!(
            seal.check_unchanged(),
            Err(FileError::Changed { .. })
        ));
    }
}
