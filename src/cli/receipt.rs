//! `runner verify`: check a receipt, its binding to a certificate, and the output files it
//! names.

use std::path::{Path, PathBuf};

use super::{print, CliResult};
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::read_bounded;
use crate::primitives::keys::PublicKey;
use crate::trust::receipt::{read_receipt_file, verify_receipt, ReceiptError, VerifiedReceipt};

/// Flags of `runner verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The receipt (receipt.json, written by `runner exec` beside the outputs).
    #[arg(value_name = "RECEIPT")]
    receipt: PathBuf,
    /// The certificate the job ran under.
    #[arg(long, value_name = "FILE")]
    cert: PathBuf,
    /// The runner's public key (RUNNER.key.pub), obtained from the operator out of band.
    #[arg(long, value_name = "FILE")]
    runner_key: PathBuf,
    /// Directory holding the output files (default: the receipt's directory).
    #[arg(long, value_name = "DIR")]
    outputs: Option<PathBuf>,
    /// The inputs file (for a data owner who holds it): check that the receipt's salted
    /// commitment is to exactly these bytes.
    #[arg(long, value_name = "FILE")]
    inputs: Option<PathBuf>,
    /// Print the verified receipt as JSON.
    #[arg(long)]
    json: bool,
}

/// A receipt error, prefixed with the receipt file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
struct InReceipt {
    path: PathBuf,
    source: ReceiptError,
}

impl Diagnose for InReceipt {
    fn exit(&self) -> Exit {
        self.source.exit()
    }
    fn hint(&self) -> Option<String> {
        self.source.hint()
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Verify the receipt and print what it binds.
pub fn verify(args: VerifyArgs) -> CliResult {
    let cert = super::cert::load_certificate(&args.cert)?;
    let runner_key = PublicKey::load(&args.runner_key)?;
    let bytes = read_receipt_file(&args.receipt)?;
    let dir = args
        .outputs
        .clone()
        .unwrap_or_else(|| parent_dir(&args.receipt));
    let verified =
        verify_receipt(&bytes, &cert, &runner_key, Some(&dir)).map_err(|source| InReceipt {
            path: args.receipt.clone(),
            source,
        })?;
    if let Some(path) = &args.inputs {
        let bytes = read_bounded(path, MAX_CHECKED_INPUTS_BYTES, "inputs")?;
        if !verified.facts().inputs.opens(&bytes) {
            return Err(InputsCheck::Mismatch { path: path.clone() }.into());
        }
    }
    if args.json {
        let doc = serde_json::json!({
            "verified": true,
            "receipt": args.receipt.display().to_string(),
            "receipt_digest": verified.digest().to_hex(),
            "runner_key_id": verified.signer().to_hex(),
            "outputs_dir": dir.display().to_string(),
            "subjects": verified.subjects(),
            "facts": verified.facts(),
        });
        return print(&format!("{doc:#}\n"));
    }
    print(&summary(&verified, &dir, args.inputs.is_some()))
}

/// The largest inputs file `--inputs` reads (the most any policy lets a job read is far less).
const MAX_CHECKED_INPUTS_BYTES: u64 = 1 << 40;

/// Why `--inputs` did not check out.
#[derive(Debug, thiserror::Error)]
enum InputsCheck {
    #[error("the receipt's inputs commitment is not to {}: these are not the inputs that ran", path.display())]
    Mismatch { path: PathBuf },
}

impl Diagnose for InputsCheck {
    fn exit(&self) -> Exit {
        match self {
            InputsCheck::Mismatch { .. } => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            InputsCheck::Mismatch { .. } => {
                "pass the exact inputs file the job ran (same bytes, same line endings)".into()
            }
        })
    }
}

/// How a unit enum is spelled in JSON (`chat`, `text`), for display.
fn json_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

fn summary(v: &VerifiedReceipt, dir: &Path, inputs_checked: bool) -> String {
    let f = v.facts();
    let g = &f.generation;
    let outputs: Vec<String> = g.outputs.iter().map(json_name).collect();
    let c = &f.counts;
    let mut out = format!(
        "receipt      {} verified\n\
         signed by    runner key {}\n\
         certificate  {}\n\
         engine       {}\n\
         policy_id    {}\n\
         model        {}\n\
         job          {}\n\
         inputs       commitment {} (salt {}){}\n\
         generation   batch_size {}, max_new_tokens {}, template {}, outputs {}\n\
         runner       {} (executable {})\n\
         ran          {} to {}\n\
         counts       {} inputs, {} tokens generated; finished: {} on a stop token, {} at max_new_tokens\n\
         outputs      {} files in {}, all match\n",
        v.digest().to_hex(),
        v.signer().to_hex(),
        f.certificate_digest.to_hex(),
        f.engine_digest.to_hex(),
        f.policy_id.to_hex(),
        f.model_digest.to_hex(),
        f.job_digest.to_hex(),
        f.inputs.commitment.to_hex(),
        f.inputs.salt.to_hex(),
        if inputs_checked { ", matches --inputs" } else { "" },
        g.batch_size,
        g.max_new_tokens,
        json_name(&g.template),
        outputs.join(", "),
        f.runner.version,
        f.runner.executable_digest.short(),
        f.started_at,
        f.finished_at,
        c.inputs,
        c.generated_tokens,
        c.finish_reasons.stop,
        c.finish_reasons.length,
        v.subjects().len(),
        dir.display(),
    );
    for s in v.subjects() {
        out.push_str(&format!(
            "  {}  blake3 {}  sha256 {}\n",
            s.name,
            s.digest.blake3.to_hex(),
            s.digest.sha256.to_hex()
        ));
    }
    out
}
