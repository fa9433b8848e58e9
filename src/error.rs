//! Exit codes and the shape every error takes on the way out.
//!
//! Each module owns an error enum with one variant per cause. Each enum implements
//! [`Diagnose`], which says which exit code the error maps to and, where one exists, the next
//! step to try. The CLI prints `error: <what happened>` and then `  hint: <what to try>`.
//!
//! Exit codes (documented in the README and in `runner --help`):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | the run failed for a reason that is not the input's fault (I/O, out of memory, internal) |
//! | 2 | usage error or malformed input (bad flag, unparsable file, unknown field) |
//! | 3 | refused: verification failed (signature, digest, policy, limit, revocation) |

use std::process::ExitCode;

/// How an error ends the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: success.
    Ok = 0,
    /// 1: an operational failure (I/O, internal).
    Failure = 1,
    /// 2: usage error or malformed input.
    BadInput = 2,
    /// 3: refused by verification.
    Refused = 3,
}

impl Exit {
    /// The numeric process exit code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// What every module error tells the CLI beyond its `Display` text.
pub trait Diagnose: std::error::Error {
    /// The exit code this error ends the process with.
    fn exit(&self) -> Exit;
    /// The next step for the user, when there is a useful one.
    fn hint(&self) -> Option<String> {
        None
    }
}
