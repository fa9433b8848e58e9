//! `runner verify`: check a receipt, its binding to a certificate, and the output files it
//! names.

use std::path::{Path, PathBuf};

use super::{print, CliResult};
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::read_bounded;
use crate::primitives::digest::Digest;
use crate::sealing::{is_age, open, OpenError, SealKey};
use crate::trust::attested_run::verify_run_attestation;
use crate::trust::certificate::Certificate;
use crate::trust::merge::{is_merged, verify_merged};
use crate::trust::receipt::{
    read_receipt_file, verify_receipt, ReceiptError, VerifiedReceipt, INPUTS_COMMITMENT_CONTEXT,
    OUTPUTS_COMMITMENT_CONTEXT, SEALED_OUTPUTS_FILE,
};
use crate::trust::run_attestation::ATTESTATION_FILE;
use zeroize::Zeroizing;

/// Flags of `runner verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The receipt (receipt.json, written by `runner exec` beside the outputs), or a directory
    /// `runner merge` wrote (checked with --runner-keys).
    #[arg(value_name = "FILE|DIR")]
    receipt: PathBuf,
    /// The certificate the job ran under.
    #[arg(long, value_name = "FILE")]
    cert: PathBuf,
    /// The runner's public key (RUNNER.key.pub), obtained from the operator out of band.
    #[arg(long, value_name = "FILE", required_unless_present = "runner_keys")]
    runner_key: Option<PathBuf>,
    /// For a merged directory: a file naming the shard runners' public keys, one per line.
    #[arg(long, value_name = "FILE", conflicts_with = "runner_key")]
    runner_keys: Option<PathBuf>,
    /// Directory holding the output files (default: the receipt's directory).
    #[arg(long, value_name = "DIR")]
    outputs: Option<PathBuf>,
    /// The inputs file (for a data owner who holds it), plaintext or as sealed: check that the
    /// receipt's salted commitment (or, for the sealed file, its digest) is to exactly these
    /// bytes.
    #[arg(long, value_name = "FILE")]
    inputs: Option<PathBuf>,
    /// A recipient's age identity file (from `age-keygen`): also open the sealed outputs, in
    /// memory, and check the receipt's commitment to their plaintext.
    #[arg(long, value_name = "FILE")]
    identity: Option<PathBuf>,
    /// DCAP collateral JSON for the TDX quote in the run's attestation.json (needed when the
    /// certificate requires TDX attestation; checked at the time the run started).
    #[arg(long, value_name = "FILE")]
    collateral: Option<PathBuf>,
    /// The VCEK certificate (PEM or DER) for the SEV-SNP report in the run's attestation.json,
    /// when its auxblob does not carry it.
    #[arg(long, value_name = "FILE")]
    vcek: Option<PathBuf>,
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
    if is_merged(&args.receipt) {
        return verify_merged_dir(&args, &cert);
    }
    let Some(key_path) = &args.runner_key else {
        return Err(super::UsageError(format!(
            "{} is not a merged directory: pass the runner's key with --runner-key",
            args.receipt.display()
        ))
        .into());
    };
    let runner_key = super::merge::load_runner_key(key_path)?;
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
    let vendor =
        super::attest::VendorFiles::read(args.collateral.as_deref(), args.vcek.as_deref())?;
    let attestation = verify_run_attestation(
        &verified,
        &cert,
        &dir.join(ATTESTATION_FILE),
        vendor.collateral.as_deref(),
        vendor.vcek.as_deref(),
    )?;
    let facts = verified.facts();
    if let Some(path) = &args.inputs {
        let bytes = read_bounded(path, MAX_CHECKED_BYTES, "inputs")?;
        let matches = if is_age(&bytes) {
            facts.inputs_ciphertext == Some(Digest::of(&bytes))
        } else {
            facts.inputs.opens(INPUTS_COMMITMENT_CONTEXT, &bytes)
        };
        if !matches {
            return Err(InputsCheck::Mismatch { path: path.clone() }.into());
        }
    }
    if let Some(identity) = &args.identity {
        check_sealed_outputs(&verified, &dir, identity)?;
    }
    if args.json {
        let doc = serde_json::json!({
            "valid": true,
            "receipt": args.receipt.display().to_string(),
            "receipt_digest": verified.digest().to_hex(),
            "runner_key_id": verified.signer().to_hex(),
            "outputs_dir": dir.display().to_string(),
            "subjects": verified.subjects(),
            "facts": verified.facts(),
            "attestation": attestation.as_ref().map(super::attest::verdict_json),
        });
        return print(&format!("{doc:#}\n"));
    }
    let mut text = summary(
        &verified,
        &dir,
        args.inputs.is_some(),
        args.identity.is_some(),
    );
    match &attestation {
        Some(verdict) => {
            text +=
                "attestation  the run's evidence, checked against the certificate's requirement:\n";
            for line in super::attest::verdict_text(ATTESTATION_FILE, verdict).lines() {
                text += &format!("  {line}\n");
            }
        }
        None => text += "attestation  none (the certificate does not require it)\n",
    }
    print(&text)
}

/// `verify` of a directory `runner merge` wrote.
fn verify_merged_dir(args: &VerifyArgs, cert: &Certificate) -> CliResult {
    let Some(keys) = &args.runner_keys else {
        return Err(super::UsageError(format!(
            "{} is a merged directory: pass the shard runners' keys with --runner-keys FILE",
            args.receipt.display()
        ))
        .into());
    };
    let keys = super::merge::load_runner_keys(keys)?;
    let vendor =
        super::attest::VendorFiles::read(args.collateral.as_deref(), args.vcek.as_deref())?;
    let (record, verdicts) = verify_merged(
        &args.receipt,
        cert,
        &keys,
        vendor.collateral.as_deref(),
        vendor.vcek.as_deref(),
    )?;
    if args.json {
        let attestation: Vec<_> = verdicts
            .iter()
            .map(|v| v.as_ref().map(super::attest::verdict_json))
            .collect();
        return print(&format!(
            "{:#}\n",
            serde_json::json!({ "valid": true, "merge": record, "attestation": attestation })
        ));
    }
    let mut out = format!(
        "merged result {} verified: {} shards of certificate {}, job {}, {} inputs; every shard \
         receipt signed by a listed runner key, ranges tile every input once, every file is \
         what the receipts bind\n",
        args.receipt.display(),
        record.shards.len(),
        record.certificate_digest.to_hex(),
        record.job_digest.to_hex(),
        record.inputs_total,
    );
    for s in &record.shards {
        out += &format!(
            "  shard {:<4} inputs {}..{}  receipt {}  runner {}\n",
            s.index,
            s.start,
            s.end,
            s.receipt_digest.short(),
            s.runner_key_id.short()
        );
    }
    for o in &record.outputs {
        out += &format!("  {}  blake3 {}\n", o.name, o.digest.blake3.to_hex());
    }
    for (s, v) in record.shards.iter().zip(&verdicts) {
        match v {
            Some(v) => {
                out += &format!("shard {} attestation:\n", s.index);
                for line in super::attest::verdict_text(&s.receipt, v).lines() {
                    out += &format!("  {line}\n");
                }
            }
            None if s.index == 0 => {
                out += "attestation  none (the certificate does not require it)\n";
            }
            None => {}
        }
    }
    print(&out)
}

/// The largest inputs or outputs file `verify` reads into memory.
const MAX_CHECKED_BYTES: u64 = 1 << 40;

/// Open the sealed outputs with a recipient's identity and check the plaintext commitment.
fn check_sealed_outputs(verified: &VerifiedReceipt, dir: &Path, identity: &Path) -> CliResult {
    let Some(commitment) = verified.facts().outputs_commitment else {
        return Err(InputsCheck::NotSealed.into());
    };
    let key = load_identity(identity)?;
    let path = dir.join(SEALED_OUTPUTS_FILE);
    let sealed = read_bounded(&path, MAX_CHECKED_BYTES, "sealed outputs")?;
    let plain = open(&sealed, &key, MAX_CHECKED_BYTES).map_err(|source| InputsCheck::Open {
        path: path.clone(),
        source,
    })?;
    if !commitment.opens(OUTPUTS_COMMITMENT_CONTEXT, &plain) {
        return Err(InputsCheck::OutputsMismatch { path }.into());
    }
    Ok(())
}

/// An age identity file (what `age-keygen` writes), held in zeroizing memory.
pub(super) fn load_identity(path: &Path) -> Result<SealKey, super::CliError> {
    let bytes = Zeroizing::new(read_bounded(path, 64 << 10, "age identity")?);
    let text = std::str::from_utf8(&bytes).map_err(|_| InputsCheck::Identity {
        path: path.to_owned(),
        why: "it is not text",
    })?;
    Ok(
        SealKey::from_file_text(text).map_err(|why| InputsCheck::Identity {
            path: path.to_owned(),
            why,
        })?,
    )
}

/// Why `--inputs` or `--identity` did not check out.
#[derive(Debug, thiserror::Error)]
enum InputsCheck {
    #[error("the receipt's outputs were not sealed; there is nothing to open with --identity")]
    NotSealed,
    #[error("age identity {}: {why}", path.display())]
    Identity { path: PathBuf, why: &'static str },
    #[error("sealed outputs {} cannot be opened: {source}", path.display())]
    Open { path: PathBuf, source: OpenError },
    #[error("the plaintext of {} is not what the receipt commits to", path.display())]
    OutputsMismatch { path: PathBuf },
    #[error("the receipt's inputs commitment is not to {}: these are not the inputs that ran", path.display())]
    Mismatch { path: PathBuf },
}

impl Diagnose for InputsCheck {
    fn exit(&self) -> Exit {
        match self {
            InputsCheck::NotSealed | InputsCheck::Identity { .. } => Exit::BadInput,
            InputsCheck::Mismatch { .. }
            | InputsCheck::Open { .. }
            | InputsCheck::OutputsMismatch { .. } => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            InputsCheck::NotSealed => "leave out --identity for a plaintext run".into(),
            InputsCheck::Identity { .. } => {
                "pass the identity file `age-keygen -o KEY` wrote for a recipient".into()
            }
            InputsCheck::Open { .. } => {
                "pass the identity of one of the certificate's recipients (`runner inspect`)".into()
            }
            InputsCheck::OutputsMismatch { .. } => {
                "the outputs were replaced after the run; get them from the operator again".into()
            }
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

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no (plaintext)"
    }
}

fn summary(
    v: &VerifiedReceipt,
    dir: &Path,
    inputs_checked: bool,
    identity_checked: bool,
) -> String {
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
         sealed       inputs {}, outputs {}{}\n\
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
        yes_no(f.sealed.inputs),
        yes_no(f.sealed.outputs),
        if identity_checked { " (opened with --identity, plaintext matches)" } else { "" },
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
