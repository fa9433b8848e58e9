//! `runner decrypt --identity KEY FILE.age [--out FILE]`: a recipient opens sealed outputs (the
//! same as `age -d -i KEY FILE.age`). The plaintext goes to standard output, or to `--out` with
//! mode 0600; it is never written anywhere else.

use std::io::Write as _;
use std::path::PathBuf;

use super::CliResult;
use crate::primitives::atomic_file::{write_atomic, Overwrite};
use crate::primitives::bounded_read::read_bounded;
use crate::sealing::{open, OpenError};

/// The largest sealed file opened.
const MAX_SEALED_BYTES: u64 = 1 << 40;

/// Flags of `runner decrypt`.
#[derive(Debug, clap::Args)]
pub struct DecryptArgs {
    /// The sealed file (outputs.jsonl.age).
    #[arg(value_name = "FILE")]
    sealed: PathBuf,
    /// Your age identity file (`age-keygen -o KEY`); its recipient must be one the certificate
    /// names.
    #[arg(long, value_name = "FILE")]
    identity: PathBuf,
    /// Write the plaintext here (mode 0600) instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace an existing --out file.
    #[arg(long)]
    force: bool,
}

/// Why the file was not opened.
#[derive(Debug, thiserror::Error)]
#[error("{} cannot be opened: {source}", path.display())]
struct DecryptError {
    path: PathBuf,
    source: OpenError,
}

impl crate::error::Diagnose for DecryptError {
    fn exit(&self) -> crate::error::Exit {
        crate::error::Exit::Refused
    }
    fn hint(&self) -> Option<String> {
        Some(
            match self.source {
                OpenError::NotForUs { .. } => {
                    "pass the identity of a recipient the certificate names (`runner inspect`)"
                }
                OpenError::HeaderTooLarge(_) => {
                    "a runner seals its outputs to the certificate's few recipients: this file was \
                 not written by one, or was altered"
                }
                _ => "the file was truncated or altered on its way: ask for it again",
            }
            .into(),
        )
    }
}

/// Open the sealed file and write its plaintext out.
pub fn decrypt(args: DecryptArgs) -> CliResult {
    let key = super::receipt::load_identity(&args.identity)?;
    let sealed = read_bounded(&args.sealed, MAX_SEALED_BYTES, "sealed file")?;
    let plain = open(&sealed, &key, MAX_SEALED_BYTES).map_err(|source| DecryptError {
        path: args.sealed.clone(),
        source,
    })?;
    match &args.out {
        Some(out) => {
            let overwrite = if args.force {
                Overwrite::Replace
            } else {
                Overwrite::Refuse
            };
            write_atomic(out, &plain, 0o600, overwrite)?;
            Ok(())
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&plain).and_then(|()| stdout.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(super::StdoutError(e).into())
                }
                _ => Ok(()),
            }
        }
    }
}
