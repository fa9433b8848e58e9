//! One `runner exec` attempt, start to end: the audit log checked, the submission read once,
//! the trusted boundary ([`admit`]), the rollback registries updated, the run, and every outcome
//! recorded in exactly one place ([`Attempt::end`], and the `accepted` entry at the end).
//!
//! The order is the security argument. Nothing private is read before the audit log has shown
//! it can take an entry; nothing runs before the `admitted` entry is on disk; every failure
//! after that is closed as `failed` (never `refused`: the job had been admitted), and a failed
//! publish leaves no staging directory behind.

use std::path::Path;

use ring::rand::{SecureRandom, SystemRandom};
use time::OffsetDateTime;

use super::admit::{admit, Admitted, Refusal, Request, Submission};
use super::attest::Attester;
use super::audit::{AuditError, AuditLog, AuditRecord, Outcome};
use super::journal::Journal;
use super::run::{draw_seed, run, Progress, Resume, RunFailure, RunResult};
use super::shard::Shard;
use super::state::{StateDir, StateError};
use super::superseded::{Registry, RegistryError};
use crate::attestation::tsm::TsmAccess;
use crate::error::{Diagnose, Exit};
use crate::primitives::digest::Digest;
use crate::primitives::keys::SecretKey;
use crate::trust::config::{TrustConfig, TrustConfigError};
use crate::trust::receipt::{subjects_of_digests, ReceiptError};

/// Why an exec attempt did not end with published outputs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The state directory is missing, uninitialised or not private.
    #[error(transparent)]
    State(#[from] StateError),
    /// The audit log cannot take an entry, so nothing was attempted (or finished unrecorded).
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The trust configuration was refused.
    #[error(transparent)]
    Trust(#[from] TrustConfigError),
    /// A rollback registry could not be read or extended.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The job was not admitted.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The run failed after admission.
    #[error(transparent)]
    Run(#[from] RunFailure),
    /// The outputs' digests could not be listed.
    #[error(transparent)]
    Receipt(#[from] ReceiptError),
}

impl Diagnose for ExecError {
    fn exit(&self) -> Exit {
        match self {
            ExecError::State(e) => e.exit(),
            ExecError::Audit(e) => e.exit(),
            ExecError::Trust(e) => e.exit(),
            ExecError::Registry(e) => e.exit(),
            ExecError::Refused(e) => e.exit(),
            ExecError::Run(e) => e.exit(),
            ExecError::Receipt(e) => e.exit(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            ExecError::State(e) => e.hint(),
            ExecError::Audit(e) => e.hint(),
            ExecError::Trust(e) => e.hint(),
            ExecError::Registry(e) => e.hint(),
            ExecError::Refused(e) => e.hint(),
            ExecError::Run(e) => e.hint(),
            ExecError::Receipt(e) => e.hint(),
        }
    }
}

/// What the operator runs.
#[derive(Debug, Clone, Copy)]
pub struct ExecRequest<'a> {
    /// The certificate file.
    pub cert: &'a Path,
    /// The job file.
    pub job: &'a Path,
    /// The trust configuration file.
    pub trust: &'a Path,
    /// The runner's state directory.
    pub state: &'a StateDir,
    /// configfs-tsm, asked for evidence when the certificate requires attestation.
    pub tsm: TsmAccess<'a>,
    /// The shard of the job to run, if it is cut into shards.
    pub shard: Option<Shard>,
    /// The time to verify at.
    pub now: OffsetDateTime,
}

/// A fresh attempt id: 128 random bits as hex.
fn attempt_id() -> String {
    let mut bytes = [0u8; 16];
    // The system generator failing is not a reason to refuse a job; the id only has to tell
    // this attempt's entries apart from concurrent ones, which the time and pid still do.
    if SystemRandom::new().fill(&mut bytes).is_err() {
        let t = OffsetDateTime::now_utc().unix_timestamp_nanos();
        bytes[..8].copy_from_slice(&(t as u64).to_le_bytes());
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One attempt's entries in the audit log.
struct Attempt<'a> {
    log: &'a AuditLog,
    id: String,
    certificate_digest: Option<Digest>,
    job_digest: Option<Digest>,
}

impl Attempt<'_> {
    /// Record that the attempt ended with `err` and return the error to report. If the entry
    /// cannot be written, that is the error reported: an outcome that is not on record must not
    /// look like a recorded one.
    fn end(&self, outcome: Outcome, err: ExecError) -> ExecError {
        let mut record = AuditRecord::with_reason(&self.id, outcome, &err);
        record.certificate_digest = self.certificate_digest;
        record.job_digest = self.job_digest;
        match self.log.append(record) {
            Ok(_) => err,
            Err(audit) => audit.into(),
        }
    }

    fn admitted(&self, admitted: &Admitted) -> Result<(), ExecError> {
        let cert = admitted.certificate();
        let mut record = AuditRecord::new(&self.id, Outcome::Admitted);
        record.certificate_digest = Some(cert.digest());
        record.engine_digest = Some(cert.engine().source_digest);
        record.policy_id = Some(cert.policy_id());
        record.model_digest = Some(cert.model_digest());
        record.job_digest = Some(admitted.job_digest());
        record.inputs_commitment = Some(admitted.inputs_commitment().commitment);
        self.log.append(record)?;
        Ok(())
    }
}

/// Run one exec attempt (see the module doc); `on_batch` is told the progress after each batch.
pub fn exec(
    req: &ExecRequest<'_>,
    on_batch: &mut dyn FnMut(&Progress),
) -> Result<RunResult, ExecError> {
    let log = AuditLog::open(req.state.path());
    log.check_appendable()?;
    let mut attempt = Attempt {
        log: &log,
        id: attempt_id(),
        certificate_digest: None,
        job_digest: None,
    };
    let submission =
        Submission::read(req.cert, req.job).map_err(|e| attempt.end(Outcome::Refused, e.into()))?;
    attempt.certificate_digest = submission.certificate_digest();
    attempt.job_digest = Some(submission.job_digest());
    let trust =
        TrustConfig::load(req.trust).map_err(|e| attempt.end(Outcome::Refused, e.into()))?;
    let registry = Registry::open(req.state.path());
    let history = registry
        .history()
        .map_err(|e| attempt.end(Outcome::Failed, e.into()))?;
    // Held only through admission, which opens the inputs with it.
    let seal_key = req
        .state
        .seal_key()
        .map_err(|e| attempt.end(Outcome::Failed, e.into()))?;
    let signing_key = req
        .state
        .signing_key()
        .map_err(|e| attempt.end(Outcome::Failed, e.into()))?;
    let recipient = seal_key.recipient();
    let request = Request {
        submission: &submission,
        trust: &trust,
        history: &history,
        state_dir: req.state.path(),
        seal_key: &seal_key,
        attester: Attester {
            tsm: req.tsm,
            key: &signing_key,
            recipient: &recipient,
        },
        shard: req.shard,
        now: req.now,
    };
    let admitted = admit(&request).map_err(|e| attempt.end(Outcome::Refused, e.into()))?;
    // The journal opens with the runner's age identity: read it while the key is held.
    let binding = admitted.journal_binding(signing_key.key_id());
    let fresh_seed = draw_seed().map_err(|e| attempt.end(Outcome::Failed, e.into()))?;
    let (journal, resumed) = Journal::open(req.state.path(), &binding, &seal_key, fresh_seed)
        .map_err(|e| attempt.end(Outcome::Failed, RunFailure::from(e).into()))?;
    drop(seal_key);
    let notice = resumed.notice;
    let resume = Resume {
        journal,
        entries: resumed.entries,
        drawn_seed: resumed.drawn_seed,
    };
    // Nothing runs unless this is on disk.
    attempt.admitted(&admitted)?;
    let mut result = run_admitted(&registry, admitted, &signing_key, resume, on_batch)
        .map_err(|e| attempt.end(Outcome::Failed, e))?;
    result.notices.extend(notice);
    let outputs = subjects_of_digests(&[(result.outputs_name, result.outputs_digest)])
        .map_err(|e| attempt.end(Outcome::Failed, e.into()))?;
    log.append(AuditRecord::accepted(&attempt.id, &result.facts, outputs))?;
    Ok(result)
}

/// The admitted job's registries updated (before the run, so a failed run still retires what
/// it replaced), then the run, signed with `key`.
fn run_admitted(
    registry: &Registry,
    admitted: Admitted,
    key: &SecretKey,
    resume: Resume,
    on_batch: &mut dyn FnMut(&Progress),
) -> Result<RunResult, ExecError> {
    let cert = admitted.certificate();
    registry.record(
        cert.digest(),
        cert.lineage(),
        cert.version(),
        cert.supersedes(),
    )?;
    Ok(run(admitted, key, Some(resume), on_batch)?)
}
