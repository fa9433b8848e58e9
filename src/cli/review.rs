//! `runner review`: compare an approved certificate with a changed engine (and optionally a new
//! policy and the model directory) and print what owners need to decide on re-approval.

use std::path::PathBuf;

use super::cert::load_certificate;
use super::{print, CliResult};
use crate::model::digest::model_digest;
use crate::restrict::check_bytes;
use crate::restrict::policy::Policy;
use crate::trust::certificate::EngineFacts;
use crate::trust::review::review as make_review;

/// Flags of `runner review`.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    /// The certificate the owners signed for the old engine.
    #[arg(long, value_name = "FILE")]
    cert: PathBuf,
    /// The new engine source.
    #[arg(long, value_name = "FILE")]
    engine: PathBuf,
    /// The new policy (default: the policy embedded in the certificate).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The approved engine source, to rebuild the approved view and diff it (its digest and
    /// view digest must match the certificate).
    #[arg(long, value_name = "FILE")]
    old_engine: Option<PathBuf>,
    /// The model (checkpoint directory or .gguf file), to say whether it is still the approved
    /// model.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    model: Option<PathBuf>,
    /// The recipients the new certificate would name (repeat), to show what changes in who may
    /// read the results.
    #[arg(long = "recipient", value_name = "AGE1...")]
    recipients: Vec<String>,
    /// The same, from a file in the form `age -R` reads.
    #[arg(long, value_name = "FILE")]
    recipients_file: Option<PathBuf>,
    /// Print the review as JSON.
    #[arg(long)]
    json: bool,
}

/// Build and print the review.
pub fn review(args: ReviewArgs) -> CliResult {
    let cert = load_certificate(&args.cert)?;
    let old = cert.payload();
    let policy = match &args.policy {
        Some(p) => Policy::load(p)?,
        None => old.policy.clone(),
    };
    // The new engine must pass the verifier under the policy it would be approved with.
    let source = EngineFacts::read_source(&args.engine)?;
    let new = check_bytes(&source, &args.engine.display().to_string(), &policy)?;
    let old_checked = match &args.old_engine {
        Some(path) => {
            let bytes = EngineFacts::read_source(path)?;
            Some(check_bytes(
                &bytes,
                &path.display().to_string(),
                &old.policy,
            )?)
        }
        None => None,
    };
    let model = match &args.model {
        Some(dir) => Some(model_digest(dir)?.digest),
        None => None,
    };
    let recipients = if args.recipients.is_empty() && args.recipients_file.is_none() {
        None
    } else {
        Some(super::cert::recipients_from(
            &args.recipients,
            args.recipients_file.as_deref(),
        )?)
    };
    let r = make_review(
        cert.digest(),
        old,
        &new,
        &policy,
        old_checked.as_ref(),
        model,
        recipients,
    )?;
    if args.json {
        print(&format!("{}\n", r.to_json()))
    } else {
        print(&r.to_human())
    }
}
