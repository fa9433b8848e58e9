//! `runner exec`: admit the job through the trusted boundary, run it, publish the outputs with
//! a signed receipt, and record the attempt in the audit log whatever its outcome.

use std::path::PathBuf;

use super::{print, CliResult};
use crate::error::{Diagnose, Exit};
use crate::job::admit::{admit, Request};
use crate::job::audit::{AuditLog, AuditRecord, Outcome};
use crate::job::run::{run, OUTPUTS_FILE, RECEIPT_FILE};
use crate::job::state::state_dir;
use crate::job::superseded::Registry;
use crate::primitives::digest::Digest;
use crate::primitives::keys::SecretKey;
use crate::trust::certificate::Certificate;
use crate::trust::config::{TrustConfig, DEFAULT_TRUST_FILE};
use crate::trust::receipt::subjects_of;

/// Flags of `runner exec`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The job file (docs/job.md).
    pub job: PathBuf,
    /// The certificate the owners signed for this engine, policy and model.
    #[arg(long)]
    pub cert: PathBuf,
    /// The operator's trust configuration: trusted owner keys, threshold, revocations.
    #[arg(long, default_value = DEFAULT_TRUST_FILE)]
    pub trust: PathBuf,
    /// The runner's state directory (audit log, superseded certificates); default
    /// $RUNNER_STATE_DIR, else ./.runner-state.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// How the audit log records an error after admission: bad input (a missing runner key, an
/// output directory that is not empty) means nothing ran, so it is a refusal, as in
/// [`Outcome::Refused`]'s definition; only an operational failure is `failed`.
fn outcome_of(e: &dyn Diagnose) -> Outcome {
    match e.exit() {
        Exit::Failure => Outcome::Failed,
        _ => Outcome::Refused,
    }
}

/// Verify, run, publish, audit.
pub fn exec(args: ExecArgs) -> CliResult {
    let state = state_dir(args.state_dir.as_deref());
    let log = AuditLog::open(&state);
    let registry = Registry::open(&state);
    let cert_digest = std::fs::read(&args.cert)
        .ok()
        .and_then(|b| Certificate::parse(&b).ok())
        .map(|c| c.digest());
    let job_digest = std::fs::read(&args.job).ok().map(|b| Digest::of(&b));
    let audit_failure = |outcome: Outcome, err: &dyn std::fmt::Display| {
        let mut record = AuditRecord::with_reason(outcome, err);
        record.certificate_digest = cert_digest;
        record.job_digest = job_digest;
        log.append(record)
    };

    let trust = match TrustConfig::load(&args.trust) {
        Ok(t) => t,
        Err(e) => {
            audit_failure(Outcome::Refused, &e)?;
            return Err(e.into());
        }
    };
    let superseded = match registry.pairs() {
        Ok(p) => p,
        Err(e) => {
            audit_failure(Outcome::Failed, &e)?;
            return Err(e.into());
        }
    };
    let request = Request {
        cert: &args.cert,
        job: &args.job,
        trust: &trust,
        superseded: &superseded,
        now: time::OffsetDateTime::now_utc(),
    };
    let admitted = match admit(&request) {
        Ok(a) => a,
        Err(e) => {
            audit_failure(Outcome::Refused, &e)?;
            return Err(e.into());
        }
    };
    // Admission verified the replacement with the full threshold, so superseding takes what
    // approving takes; recorded before the run so a failed run still retires the old one.
    if let Some(old) = admitted.certificate().supersedes() {
        if let Err(e) = registry.record(old, admitted.certificate().digest()) {
            audit_failure(Outcome::Failed, &e)?;
            return Err(e.into());
        }
    }
    let key = match SecretKey::load(&admitted.job().runner_key) {
        Ok(k) => k,
        Err(e) => {
            audit_failure(outcome_of(&e), &e)?;
            return Err(e.into());
        }
    };
    let bar = super::progress::Bar::new(args.quiet);
    let result = run(admitted, &key, &mut |p| bar.update(p));
    drop(bar);
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            audit_failure(outcome_of(&e), &e)?;
            return Err(e.into());
        }
    };
    let outputs = subjects_of(&[(OUTPUTS_FILE, &result.outputs)])?;
    log.append(AuditRecord::accepted(&result.facts, outputs))?;
    let c = &result.facts.counts;
    print(&format!(
        "ran {} inputs ({} tokens generated; {} stopped, {} hit max_new_tokens)\n\
         wrote {} and {} in {}\n\
         certificate {}  engine {}  policy_id {}  model {}\n",
        c.inputs,
        c.generated_tokens,
        c.finish_reasons.stop,
        c.finish_reasons.length,
        OUTPUTS_FILE,
        RECEIPT_FILE,
        result.output_dir.display(),
        result.facts.certificate_digest.short(),
        result.facts.engine_digest.short(),
        result.facts.policy_id.short(),
        result.facts.model_digest.short(),
    ))
}
