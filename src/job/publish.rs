//! Publishing a run's files as one directory, all at once.
//!
//! Every file is written (mode 0600), fsynced, into a sibling staging directory (mode 0700,
//! `.<output_dir>.partial-<pid>-<n>`), whole with the one atomic-write helper
//! ([`write_atomic`](crate::primitives::atomic_file::write_atomic)) or as the run goes
//! ([`Stage::create`]: a long job's outputs), and the staging directory is then renamed to
//! `output_dir`. After a crash either the complete set exists or `output_dir`
//! does not. A failed publish removes its staging directory; one left by a crashed run is
//! removed by the next run, and a run still publishing keeps its own (it holds a lock inside
//! it). An existing non-empty `output_dir` is never overwritten.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Diagnose, Exit};
use crate::primitives::atomic_file::{write_atomic, Overwrite, WriteError};

/// Why the outputs were not published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The output directory exists and is not empty.
    #[error("output directory {0} already exists and is not empty")]
    OutputExists(PathBuf),
    /// A file of the set could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The staging directory could not be made, synced or moved into place.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Diagnose for PublishError {
    fn exit(&self) -> Exit {
        match self {
            PublishError::OutputExists(_) => Exit::BadInput,
            PublishError::Write(_) | PublishError::Io { .. } => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            PublishError::OutputExists(_) => {
                Some("choose a new output_dir in the job, or move the old results away".into())
            }
            PublishError::Write(_) | PublishError::Io { .. } => {
                Some("check that the output directory's parent is writable and has space".into())
            }
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Whether `dir` cannot take a job's outputs: a file, or a directory with entries.
pub fn output_dir_in_use(dir: &Path) -> bool {
    let non_empty = fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    non_empty || dir.is_file()
}

/// Refuse if the outputs could not be published (admission checks this before hashing the
/// model; a run checks again in case the directory was filled since).
pub fn check_output_dir(dir: &Path) -> Result<(), PublishError> {
    if output_dir_in_use(dir) {
        return Err(PublishError::OutputExists(dir.to_owned()));
    }
    Ok(())
}

/// Write `files` into a staging directory beside `dir` (mode 0700, each file 0600), fsync, and
/// rename it to `dir`. On any failure the staging directory is removed.
pub fn publish(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), PublishError> {
    let stage = Stage::open(dir)?;
    for (file, bytes) in files {
        stage.write(file, bytes)?;
    }
    stage.publish()
}

/// A set of files being put together for `dir`, in a staging directory beside it, so a file
/// can be written as the run goes (a long job's outputs) and still appear only with the rest.
/// Dropped unpublished, the staging directory is removed.
pub struct Stage {
    dest: PathBuf,
    parent: PathBuf,
    staging: Staging,
}

impl Stage {
    /// A fresh staging directory for `dir`; any left beside it by a crashed run is removed.
    pub fn open(dir: &Path) -> Result<Stage, PublishError> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "outputs".into());
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        remove_stale_staging(&parent, &name);
        let staging = Staging::new(&parent, &name)?;
        Ok(Stage {
            dest: dir.to_owned(),
            parent,
            staging,
        })
    }

    /// A new file `name` of the set (mode 0600), to be written and synced by the caller, with
    /// its path (for messages).
    pub fn create(&self, name: &str) -> Result<(fs::File, PathBuf), PublishError> {
        let path = self.staging.dir.join(name);
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(io(&path))?;
        Ok((file, path))
    }

    /// File `name` of the set, written whole (mode 0600, fsynced).
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), PublishError> {
        write_atomic(
            &self.staging.dir.join(name),
            bytes,
            0o600,
            Overwrite::Refuse,
        )?;
        Ok(())
    }

    /// Move the set into place as `dir`, all at once.
    pub fn publish(self) -> Result<(), PublishError> {
        let dir = &self.dest;
        let renamed = (|| {
            // An empty output_dir (made by the operator) is replaced; a non-empty one was
            // refused.
            if dir.is_dir() {
                fs::remove_dir(dir).map_err(|_| PublishError::OutputExists(dir.to_owned()))?;
            }
            fs::rename(&self.staging.dir, dir).map_err(io(dir))
        })();
        renamed?;
        fs::File::open(&self.parent)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.parent))?;
        Ok(())
    }
}

/// A staging directory `.<name>.partial-<pid>-<n>` (mode 0700) and its lock file beside it
/// (`...-<n>.lock`), held for as long as the run publishes, so a concurrent run of the same
/// output directory leaves it alone. Dropping it removes both; after the rename only the lock
/// is left to remove.
struct Staging {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: fs::File,
}

impl Staging {
    fn new(parent: &Path, name: &str) -> Result<Staging, PublishError> {
        for n in 0u32.. {
            let dir = parent.join(format!(".{name}.partial-{}-{n}", std::process::id()));
            let lock_path = lock_of(&dir);
            // The lock comes first: whenever the directory exists, so does its held lock.
            let lock = match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock_path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(&lock_path)(e)),
            };
            let staging = Staging {
                dir,
                lock_path,
                _lock: lock,
            };
            staging._lock.lock().map_err(io(&staging.lock_path))?;
            create_private(&staging.dir).map_err(io(&staging.dir))?;
            return Ok(staging);
        }
        unreachable!("u32 staging names exhausted")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Gone already when the rename succeeded.
        let _ = fs::remove_dir_all(&self.dir);
        let _ = fs::remove_file(&self.lock_path);
    }
}

fn lock_of(staging: &Path) -> PathBuf {
    let mut name = staging.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

#[cfg(unix)]
fn create_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private(dir: &Path) -> std::io::Result<()> {
    fs::create_dir(dir)
}

/// Staging directories (and lock files) of the same output directory left by runs that
/// crashed: those whose lock nobody holds.
fn remove_stale_staging(parent: &Path, name: &str) {
    let prefix = format!(".{name}.partial-");
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let file_name = e.file_name().to_string_lossy().into_owned();
        if !file_name.starts_with(&prefix) || file_name.ends_with(".lock") {
            continue;
        }
        let dir = e.path();
        let lock_path = lock_of(&dir);
        let abandoned = match fs::File::open(&lock_path) {
            Ok(lock) => lock.try_lock().is_ok(),
            // Without a lock file the run that made it is gone (the lock is made first).
            Err(_) => true,
        };
        if abandoned {
            let _ = fs::remove_dir_all(&dir);
            let _ = fs::remove_file(&lock_path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn publishes_private_files_in_a_private_directory_and_nothing_else() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        publish(&out, &[("a.jsonl", b"a"), ("b.json", b"b")]).unwrap();
        assert_eq!(names(tmp.path()), ["out"]);
        assert_eq!(names(&out), ["a.jsonl", "b.json"]);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&out), 0o700);
        assert_eq!(mode(&out.join("a.jsonl")), 0o600);
    }

    #[test]
    fn a_failed_publish_leaves_no_staging_and_no_output_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        // The second file cannot be written (its name holds a directory that does not exist).
        let err = publish(&out, &[("a.jsonl", b"a"), ("no/such.json", b"b")]).unwrap_err();
        assert!(matches!(err, PublishError::Write(_)), "{err}");
        assert_eq!(names(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn a_concurrent_run_keeps_its_staging_and_a_crashed_one_loses_it() {
        let tmp = tempfile::tempdir().unwrap();
        let live = Staging::new(tmp.path(), "out").unwrap();
        let crashed = tmp.path().join(".out.partial-1-0");
        fs::create_dir(&crashed).unwrap();
        fs::write(lock_of(&crashed), b"").unwrap();
        remove_stale_staging(tmp.path(), "out");
        assert!(live.dir.exists(), "another run's staging was removed");
        assert!(!crashed.exists(), "an abandoned staging was kept");
        drop(live);
        assert_eq!(names(tmp.path()), Vec::<String>::new());
    }
}
