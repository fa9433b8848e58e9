//! `runner merge`: join the shards of a job (each `exec --shard K/N`) into one directory whose
//! every part is bound by the shards' receipts; it needs no secret and runs anywhere.

use std::path::{Path, PathBuf};

use super::{print, CliError, CliResult};
use crate::error::{Diagnose, Exit};
use crate::job::publish::publish;
use crate::job::state::RUNNER_KEY_FILE;
use crate::primitives::bounded_read::{read_bounded_text, MAX_TEXT_BYTES};
use crate::primitives::keys::{KeyError, PublicKey};
use crate::trust::merge::{merge as merge_shards, MERGE_FILE};
use crate::trust::receipt::RECEIPT_FILE;

/// Flags of `runner merge`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Checks every shard's receipt (signed by one of the runner keys, under the certificate), that \
they are shards of the same job and inputs, and that their indices are exactly 0..N-1, so their \
ranges tile every input once. Writes OUT (atomically, like exec): outputs.jsonl in input order \
(sealed outputs stay each shard's ciphertext, shard-K-of-N.outputs.jsonl.age), every shard's \
receipt as shard-K-of-N.receipt.json, and merge.json listing them. `runner verify OUT --cert \
CERT --runner-keys FILE` checks it all again.")]
pub struct MergeArgs {
    /// The shard directories (output_dir/shard-K-of-N/ of each run), in any order; a directory
    /// without a receipt stands for every shard-K-of-N directory inside it (the job's
    /// output_dir).
    #[arg(value_name = "DIR", required = true)]
    shards: Vec<PathBuf>,
    /// The certificate the shards ran under.
    #[arg(long, value_name = "FILE")]
    cert: PathBuf,
    /// The runner keys to trust: a text file naming one runner.key.pub per line (relative to
    /// the file; `#` comments), one for each shard's runner.
    #[arg(long, value_name = "FILE")]
    runner_keys: PathBuf,
    /// Where to write the merged result (a new directory).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// A runner's public key that could not be loaded: it comes from the runner's state directory.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(super) struct RunnerKeyError(KeyError);

impl Diagnose for RunnerKeyError {
    fn exit(&self) -> Exit {
        self.0.exit()
    }
    fn hint(&self) -> Option<String> {
        match &self.0 {
            KeyError::File(e) if e.is_missing() => Some(format!(
                "nothing is at {}: a runner's public key is {RUNNER_KEY_FILE}.pub in its state \
                 directory, made by `runner init` (`runner identity` on the runner prints its \
                 path); get a copy from the operator",
                e.path().display()
            )),
            other => other.hint(),
        }
    }
}

/// The public key of a runner, from a copy of its state directory's `runner.key.pub`.
pub(super) fn load_runner_key(path: &Path) -> Result<PublicKey, RunnerKeyError> {
    PublicKey::load(path).map_err(RunnerKeyError)
}

/// The keys a `--runner-keys` file names.
pub(super) fn load_runner_keys(path: &Path) -> Result<Vec<PublicKey>, CliError> {
    let text = read_bounded_text(path, MAX_TEXT_BYTES, "runner keys file")?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut keys = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        keys.push(load_runner_key(&base.join(line))?);
    }
    if keys.is_empty() {
        return Err(super::UsageError(format!(
            "runner keys file {} names no key: list one runner.key.pub per line",
            path.display()
        ))
        .into());
    }
    Ok(keys)
}

/// Each directory, or, for one holding no receipt, the shard directories inside it.
fn expand(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        if dir.join(RECEIPT_FILE).exists() {
            out.push(dir.clone());
            continue;
        }
        let mut inside: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("shard-") && n.contains("-of-"))
            })
            .collect();
        inside.sort();
        if inside.is_empty() {
            // Let the merge say what is missing in it.
            out.push(dir.clone());
        }
        out.extend(inside);
    }
    out
}

/// Merge the shards and write the result.
pub fn merge(args: MergeArgs) -> CliResult {
    let cert = super::cert::load_certificate(&args.cert)?;
    let keys = load_runner_keys(&args.runner_keys)?;
    crate::job::publish::check_output_dir(&args.out)?;
    let dirs = expand(&args.shards);
    let (record, files) = merge_shards(&cert, &keys, &dirs)?;
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    publish(&args.out, &refs)?;
    print(&format!(
        "merged {} shards ({} inputs) of certificate {} into {}: {} output files, the shard \
         receipts and {MERGE_FILE}\n",
        record.shards.len(),
        record.inputs_total,
        record.certificate_digest.short(),
        args.out.display(),
        record.outputs.len(),
    ))
}
