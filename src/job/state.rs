//! The runner's state directory, which belongs to the operator and never to a job: the runner's
//! own signing key and age identity, the audit log, the superseded registry and the admitted
//! certificate versions.
//!
//! Where it is never depends on the working directory: `--state-dir`, else `$RUNNER_STATE_DIR`,
//! else [`DEFAULT_STATE_DIR`]. `runner init` creates it (mode 0700) with the runner's key (0600);
//! every other command opens it and refuses, as ssh does, a directory or key that group or others
//! may read, and a directory that was never initialised (an empty state would silently forget
//! superseded certificates and start a second audit chain).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Diagnose, Exit};
use zeroize::Zeroizing;

use crate::primitives::atomic_file::{write_atomic, Overwrite};
use crate::primitives::bounded_read::read_bounded;
use crate::primitives::keys::{public_key_path, write_key_pair, KeyError, PublicKey, SecretKey};
use crate::primitives::time::Timestamp;
use crate::sealing::SealKey;

/// Environment variable naming the state directory when `--state-dir` is not given.
pub const STATE_DIR_ENV: &str = "RUNNER_STATE_DIR";

/// The state directory when neither `--state-dir` nor [`STATE_DIR_ENV`] is given.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/runner";

/// The runner's signing key inside the state directory; its public half is `runner.key.pub`.
pub const RUNNER_KEY_FILE: &str = "runner.key";

/// The runner's age identity inside the state directory (what sealed inputs are opened with).
pub const RUNNER_SEAL_FILE: &str = "runner.age";

/// The most bytes an age identity file may hold.
const MAX_SEAL_FILE_BYTES: u64 = 64 << 10;

/// Why the state directory could not be made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The directory does not exist, or holds no runner key.
    #[error("the runner's state directory {} is not initialised (no {RUNNER_KEY_FILE} and {RUNNER_SEAL_FILE})", dir.display())]
    NotInitialised {
        /// The state directory.
        dir: PathBuf,
    },
    /// `runner init` on a directory that already has a key.
    #[error("the runner's state directory {} is already initialised", dir.display())]
    AlreadyInitialised {
        /// The state directory.
        dir: PathBuf,
    },
    /// Group or others may access the directory or the key.
    #[error("{} is accessible by group or others (mode {mode:03o}); it must be private to the operator", path.display())]
    NotPrivate {
        /// The directory or file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not a directory, or a symlink.
    #[error("the runner's state directory {} is not a directory", dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
    /// The operating system refused.
    #[error("cannot {action} the runner's state directory {}: {source}", dir.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The state directory.
        dir: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The key could not be made, read or written.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The age identity could not be read or written.
    #[error("the runner's age identity {}: {why}", path.display())]
    SealKey {
        /// The identity file.
        path: PathBuf,
        /// What is wrong (never the key).
        why: String,
    },
}

impl Diagnose for StateError {
    fn exit(&self) -> Exit {
        match self {
            StateError::NotInitialised { .. }
            | StateError::AlreadyInitialised { .. }
            | StateError::NotADirectory { .. } => Exit::BadInput,
            StateError::NotPrivate { .. } => Exit::Refused,
            StateError::Io { .. } | StateError::SealKey { .. } => Exit::Failure,
            StateError::Key(e) => e.exit(),
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            StateError::NotInitialised { .. } => format!(
                "run `runner init` (with the same --state-dir or ${STATE_DIR_ENV}) once on this \
                 machine, or point --state-dir at the initialised one"
            ),
            StateError::AlreadyInitialised { .. } => {
                "`runner identity` prints its keys; choose another --state-dir for a new runner"
                    .into()
            }
            StateError::NotPrivate { path, .. } => {
                format!("chmod go-rwx {}", path.display())
            }
            StateError::NotADirectory { .. } => {
                "point --state-dir at a directory made by `runner init`".into()
            }
            StateError::Io { .. } => format!(
                "check the directory's permissions, or choose another with --state-dir or \
                 ${STATE_DIR_ENV} (default {DEFAULT_STATE_DIR})"
            ),
            StateError::Key(KeyError::File(e)) => format!(
                "the runner's key pair ({RUNNER_KEY_FILE}, {RUNNER_KEY_FILE}.pub) lives in its \
                 state directory {}, made by `runner init`; restore the file from a backup of \
                 that directory, or make a new runner with `runner init --state-dir NEW` (owners \
                 then trust its new key)",
                e.path().parent().unwrap_or(Path::new(".")).display()
            ),
            StateError::Key(e) => return e.hint(),
            StateError::SealKey { .. } => {
                "the state directory is damaged; a runner whose identity \
                is lost needs a new state directory (`runner init`) and owners who encrypt to its \
                new recipient"
                    .into()
            }
        })
    }
}

/// Where the state directory is: `flag` if given, else `$RUNNER_STATE_DIR` if set and non-empty,
/// else [`DEFAULT_STATE_DIR`].
pub fn state_dir(flag: Option<&Path>) -> PathBuf {
    resolve_state_dir(flag, std::env::var_os(STATE_DIR_ENV))
}

fn resolve_state_dir(flag: Option<&Path>, env: Option<std::ffi::OsString>) -> PathBuf {
    match (flag, env) {
        (Some(dir), _) => dir.to_owned(),
        (None, Some(dir)) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_STATE_DIR),
    }
}

/// An initialised, private state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Create the state directory at `dir` with a fresh runner key. Refuses a directory that
    /// already has one.
    pub fn init(dir: &Path) -> Result<(StateDir, PublicKey), StateError> {
        let io = |action| {
            move |source| StateError::Io {
                action,
                dir: dir.to_owned(),
                source,
            }
        };
        if dir.join(RUNNER_KEY_FILE).exists() {
            return Err(StateError::AlreadyInitialised {
                dir: dir.to_owned(),
            });
        }
        create_private_dir(dir).map_err(io("create"))?;
        check_private(dir)?;
        let key = SecretKey::generate()?;
        write_key_pair(&key, &dir.join(RUNNER_KEY_FILE), Overwrite::Refuse)?;
        let seal = SealKey::generate();
        let seal_path = dir.join(RUNNER_SEAL_FILE);
        let created = Timestamp::now().to_rfc3339().unwrap_or_default();
        write_atomic(
            &seal_path,
            seal.to_file_text(&created).as_bytes(),
            0o600,
            Overwrite::Refuse,
        )
        .map_err(|e| StateError::SealKey {
            path: seal_path.clone(),
            why: e.to_string(),
        })?;
        Ok((
            StateDir {
                dir: dir.to_owned(),
            },
            key.public_key(),
        ))
    }

    /// Open the initialised state directory at `dir`.
    pub fn open(dir: &Path) -> Result<StateDir, StateError> {
        let meta = match std::fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StateError::NotInitialised {
                    dir: dir.to_owned(),
                })
            }
            Err(source) => {
                return Err(StateError::Io {
                    action: "open",
                    dir: dir.to_owned(),
                    source,
                })
            }
        };
        if !meta.is_dir() {
            return Err(StateError::NotADirectory {
                dir: dir.to_owned(),
            });
        }
        if !dir.join(RUNNER_KEY_FILE).exists() || !dir.join(RUNNER_SEAL_FILE).exists() {
            return Err(StateError::NotInitialised {
                dir: dir.to_owned(),
            });
        }
        check_private(dir)?;
        check_private(&dir.join(RUNNER_KEY_FILE))?;
        check_private(&dir.join(RUNNER_SEAL_FILE))?;
        Ok(StateDir {
            dir: dir.to_owned(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The runner's signing key (read on every call, held only as long as the caller keeps it).
    pub fn signing_key(&self) -> Result<SecretKey, StateError> {
        let path = self.dir.join(RUNNER_KEY_FILE);
        check_private(&path)?;
        Ok(SecretKey::load(&path)?)
    }

    /// The runner's age identity (read on every call; the secret is zeroized when dropped).
    pub fn seal_key(&self) -> Result<SealKey, StateError> {
        let path = self.dir.join(RUNNER_SEAL_FILE);
        check_private(&path)?;
        let bad = |why: String| StateError::SealKey {
            path: path.clone(),
            why,
        };
        let bytes = Zeroizing::new(
            read_bounded(&path, MAX_SEAL_FILE_BYTES, "age identity")
                .map_err(|e| bad(e.to_string()))?,
        );
        let text = std::str::from_utf8(&bytes).map_err(|_| bad("it is not text".into()))?;
        SealKey::from_file_text(text).map_err(|why| bad(why.into()))
    }

    /// The runner's age recipient (`age1...`): what owners encrypt inputs to.
    pub fn recipient(&self) -> Result<String, StateError> {
        Ok(self.seal_key()?.recipient())
    }

    /// The public half of the runner's signing key.
    pub fn public_key(&self) -> Result<PublicKey, StateError> {
        Ok(PublicKey::load(&public_key_path(
            &self.dir.join(RUNNER_KEY_FILE),
        ))?)
    }

    /// The path of the public key file, for recipients (`runner verify --runner-key`).
    pub fn public_key_path(&self) -> PathBuf {
        public_key_path(&self.dir.join(RUNNER_KEY_FILE))
    }
}

/// Refuse `path` if group or others have any access to it.
fn check_private(path: &Path) -> Result<(), StateError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|source| StateError::Io {
            action: "inspect",
            dir: path.to_owned(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(StateError::NotPrivate {
                path: path.to_owned(),
                mode,
            });
        }
    }
    let _ = path;
    Ok(())
}

#[cfg(unix)]
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)
}

pub(crate) fn open_for_append(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_dir_prefers_flag_then_environment_then_a_fixed_absolute_default() {
        let flag = Path::new("/flag");
        assert_eq!(
            resolve_state_dir(Some(flag), Some("/env".into())),
            PathBuf::from("/flag")
        );
        assert_eq!(
            resolve_state_dir(None, Some("/env".into())),
            PathBuf::from("/env")
        );
        assert_eq!(
            resolve_state_dir(None, Some("".into())),
            PathBuf::from(DEFAULT_STATE_DIR)
        );
        assert_eq!(
            resolve_state_dir(None, None),
            PathBuf::from(DEFAULT_STATE_DIR)
        );
        assert!(Path::new(DEFAULT_STATE_DIR).is_absolute());
    }

    #[test]
    fn init_makes_a_private_directory_and_key_and_open_finds_them() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let (state, public) = StateDir::init(&dir).unwrap();
        assert_eq!(state.signing_key().unwrap().public_key(), public);
        assert_eq!(StateDir::open(&dir).unwrap().public_key().unwrap(), public);
        let again = StateDir::init(&dir).unwrap_err();
        assert!(
            matches!(again, StateError::AlreadyInitialised { .. }),
            "{again}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&dir), 0o700);
            assert_eq!(mode(&dir.join(RUNNER_KEY_FILE)), 0o600);
        }
    }

    #[test]
    fn rejects_a_missing_or_uninitialised_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let err = StateDir::open(&tmp.path().join("nope")).unwrap_err();
        assert!(matches!(err, StateError::NotInitialised { .. }), "{err}");
        assert_eq!(err.exit(), Exit::BadInput);
        assert!(err.hint().unwrap().contains("runner init"));
        let err = StateDir::open(tmp.path()).unwrap_err();
        assert!(matches!(err, StateError::NotInitialised { .. }), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn rejects_a_state_directory_or_key_others_can_read() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        StateDir::init(&dir).unwrap();
        let key = dir.join(RUNNER_KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = StateDir::open(&dir).unwrap_err();
        assert!(
            matches!(err, StateError::NotPrivate { mode: 0o640, .. }),
            "{err}"
        );
        assert_eq!(err.exit(), Exit::Refused);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = StateDir::open(&dir).unwrap_err();
        assert!(
            matches!(err, StateError::NotPrivate { mode: 0o755, .. }),
            "{err}"
        );
    }
}
