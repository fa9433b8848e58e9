//! The runner's state directory: where it is (`--state-dir`, else `$RUNNER_STATE_DIR`, else a
//! default), and how files inside it are made: the directory private to the operator (0700),
//! append-only logs private too (0600). The audit log and the superseded registry live here.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Environment variable naming the state directory when `--state-dir` is not given.
pub const STATE_DIR_ENV: &str = "RUNNER_STATE_DIR";

/// State directory when neither `--state-dir` nor [`STATE_DIR_ENV`] is given (relative to the
/// working directory).
pub const DEFAULT_STATE_DIR: &str = ".runner-state";

/// The state directory: `flag` if given, else `$RUNNER_STATE_DIR` if set and non-empty, else
/// `./.runner-state`.
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
    fn state_dir_prefers_flag_then_environment_then_default() {
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
            PathBuf::from(".runner-state")
        );
        assert_eq!(
            resolve_state_dir(None, None),
            PathBuf::from(".runner-state")
        );
    }
}
