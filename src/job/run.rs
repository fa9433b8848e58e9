//! Running an admitted job: batches through the compiled engine, `outputs.jsonl`, the signed
//! receipt, and publishing both at once ([`publish`](super::publish)).

use std::path::PathBuf;

use serde_json::json;
use zeroize::Zeroizing;

use super::admit::Admitted;
use super::generate::{Finish, GenerateError, Settings};
use super::journal::{Entry, Journal, JournalError};
use super::publish::{check_output_dir, publish, PublishError};
use crate::error::{Diagnose, Exit};
use crate::model::files::FileError;
use crate::primitives::keys::SecretKey;
use crate::primitives::time::Timestamp;
use crate::restrict::builtins::Builtin;
use crate::restrict::diagnostic::Pos;
use crate::restrict::policy::OutputKind;
use crate::restrict::RunErrorKind;
use crate::sealing::{seal, RecipientError};
use crate::trust::receipt::{
    sign_receipt, Commitment, FinishReasons, ReceiptError, RunCounts, RunFacts, RunnerIdentity,
    Sealed, OUTPUTS_COMMITMENT_CONTEXT,
};
pub use crate::trust::receipt::{OUTPUTS_FILE, RECEIPT_FILE, SEALED_OUTPUTS_FILE};
pub use crate::trust::run_attestation::ATTESTATION_FILE;

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The published directory.
    pub output_dir: PathBuf,
    /// The facts the receipt binds.
    pub facts: RunFacts,
    /// The outputs file's name: `outputs.jsonl`, or `outputs.jsonl.age` when sealed.
    pub outputs_name: &'static str,
    /// Exact bytes of the outputs file as published (ciphertext when sealed).
    pub outputs: Vec<u8>,
    /// Exact bytes of receipt.json.
    pub receipt: Vec<u8>,
    /// One-line notices for the operator (a resume journal discarded).
    pub notices: Vec<String>,
}

/// The run's resume journal, and what an earlier attempt had completed.
pub struct Resume {
    /// Appended to as batches complete, removed once the outputs are published.
    pub journal: Journal,
    /// The completed inputs, from the start of the run's range.
    pub entries: Vec<Entry>,
}

/// Why a run failed after admission.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunFailure {
    /// The outputs could not be published.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// The resume journal could not be written.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The engine failed while running on the private inputs. Only the operation and where it
    /// is in the source are said: a kernel's own message may carry a value from the data (an
    /// approved engine could route a private token id into `embed`'s range check).
    #[error("the engine failed while running, in {what} at line {}, column {} of the engine; the values involved are not shown (inputs are private)", .pos.line, .pos.col)]
    Engine {
        /// The operation: a built-in's name in backquotes, or a fixed description.
        what: String,
        /// Where in the engine source.
        pos: Pos,
    },
    /// Generation failed for a reason that is not about the data (the engine and checkpoint
    /// do not fit together).
    #[error(transparent)]
    Generate(Box<GenerateError>),
    /// Decoding generated tokens into text failed (the tokenizer's message is not shown: it
    /// may quote the text).
    #[error("the tokenizer could not decode the generated tokens of input line {line}")]
    Decode {
        /// 1-based line of the input in the inputs file.
        line: usize,
    },
    /// The receipt could not be made.
    #[error(transparent)]
    Receipt(#[from] ReceiptError),
    /// A model file was written while the job ran.
    #[error(transparent)]
    Model(#[from] FileError),
    /// The outputs could not be sealed to the certificate's recipients.
    #[error("cannot seal the outputs: {0}")]
    Seal(RecipientError),
    /// The system's random number generator failed (the outputs commitment needs a salt).
    #[error("cannot salt the outputs commitment: the system random number generator failed")]
    NoRandomness,
    /// Writing the outputs failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Diagnose for RunFailure {
    fn exit(&self) -> Exit {
        match self {
            RunFailure::Publish(e) => e.exit(),
            RunFailure::Journal(e) => e.exit(),
            // An engine that does not fit the checkpoint is the inputs' fault, not the run's.
            RunFailure::Generate(e) => e.exit(),
            RunFailure::Model(e) => e.exit(),
            RunFailure::Receipt(e) => e.exit(),
            RunFailure::Engine { .. }
            | RunFailure::Decode { .. }
            | RunFailure::Io { .. }
            | RunFailure::Seal(_)
            | RunFailure::NoRandomness => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            RunFailure::Publish(e) => e.hint(),
            RunFailure::Journal(e) => e.hint(),
            RunFailure::Generate(e) => e.hint(),
            RunFailure::Model(e) => e.hint(),
            RunFailure::Receipt(e) => e.hint(),
            RunFailure::Engine { .. } => Some(
                "reproduce it on inputs that are not private (the same shapes and lengths) to \
                 see the kernel's own message"
                    .into(),
            ),
            RunFailure::Decode { .. }
            | RunFailure::Io { .. }
            | RunFailure::Seal(_)
            | RunFailure::NoRandomness => None,
        }
    }
}

impl From<GenerateError> for RunFailure {
    fn from(e: GenerateError) -> RunFailure {
        match e {
            GenerateError::Run(run) => RunFailure::Engine {
                what: operation(&run.kind),
                pos: run.excerpt.pos(),
            },
            // Boxed: the engine's errors are large and every result here would carry their size.
            other => RunFailure::Generate(Box::new(other)),
        }
    }
}

/// What a run-time error may say about its operation: a built-in's name (from the fixed list,
/// never text from the engine), or a fixed description.
fn operation(kind: &RunErrorKind) -> String {
    let builtin = |op: &str| {
        // The fused head is `linear+argmax`.
        let names: Option<Vec<&str>> = op
            .split('+')
            .map(|part| Builtin::from_name(part).map(Builtin::name))
            .collect();
        names.map_or_else(|| "a built-in".into(), |n| format!("`{}`", n.join("+")))
    };
    match kind {
        RunErrorKind::Kernel { op, .. }
        | RunErrorKind::Shape { op, .. }
        | RunErrorKind::BadArgument { op, .. } => builtin(op),
        RunErrorKind::NotFinite { .. } => "scalar arithmetic".into(),
        RunErrorKind::Kind { .. } => "an operand of the wrong kind".into(),
        RunErrorKind::UnknownField { .. } => "a field lookup".into(),
        RunErrorKind::InputMismatch { .. } => "the step's inputs".into(),
        RunErrorKind::Internal { .. } => "the interpreter (internal error)".into(),
    }
}

/// How far a run has got: what a progress display may show (counts and time, never data).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Inputs finished so far.
    pub inputs_done: usize,
    /// Inputs in the job.
    pub inputs_total: usize,
    /// Tokens generated so far.
    pub generated_tokens: u64,
    /// Time since the first batch started.
    pub elapsed: std::time::Duration,
    /// Where a resumed run took up (inputs done by an earlier attempt).
    pub resumed_from: Option<usize>,
}

/// Run every input through the engine, sign the receipt, publish the pair. `on_batch` is told
/// the progress after each batch.
pub fn run(
    admitted: Admitted,
    runner_key: &SecretKey,
    resume: Option<Resume>,
    on_batch: &mut dyn FnMut(&Progress),
) -> Result<RunResult, RunFailure> {
    let job = admitted.job();
    let output_dir = admitted.output_dir();
    check_output_dir(&output_dir)?;
    let range = admitted.range();
    let started_at = Timestamp::now();
    let started = std::time::Instant::now();
    let g = &job.generation;
    let settings = Settings {
        max_new_tokens: g.max_new_tokens as usize,
        stop_ids: admitted
            .generator()
            .checkpoint()
            .config
            .eos_token_ids
            .clone(),
    };
    // The outputs file as it grows: a line's bytes, not its JSON tree, are kept (a tree costs
    // ~2 KB an input, which a job of 100,000 inputs would feel).
    let mut plain = Zeroizing::new(Vec::new());
    let mut push_line = |line: &serde_json::Value| -> Result<(), RunFailure> {
        serde_json::to_writer(&mut *plain, line).map_err(|e| RunFailure::Io {
            path: job.output_dir.join(OUTPUTS_FILE),
            source: std::io::Error::other(e),
        })?;
        plain.push(b'\n');
        Ok(())
    };
    let mut counts = RunCounts {
        inputs: 0,
        generated_tokens: 0,
        finish_reasons: FinishReasons { stop: 0, length: 0 },
    };
    let batch = g.batch_size.max(1) as usize;
    let inputs_total = range.len();
    let (mut journal, done) = match resume {
        // More than the range holds cannot be this run's: start again.
        Some(r) if r.entries.len() <= range.len() => (Some(r.journal), r.entries),
        Some(r) => (Some(r.journal), Vec::new()),
        None => (None, Vec::new()),
    };
    let resumed_at = (!done.is_empty()).then(|| (range.start + done.len()) as u64);
    for e in done {
        push_line(&e.line)?;
        counts.inputs += 1;
        counts.generated_tokens += e.tokens;
        if e.stopped {
            counts.finish_reasons.stop += 1;
        } else {
            counts.finish_reasons.length += 1;
        }
    }
    let todo = range.start + counts.inputs as usize..range.end;
    for (inputs, prompts) in admitted.inputs()[todo.clone()]
        .chunks(batch)
        .zip(admitted.prompts()[todo].chunks(batch))
    {
        let generated = admitted.generator().generate(prompts, &settings, |_| {})?;
        let mut entries = Vec::with_capacity(inputs.len());
        for (input, out) in inputs.iter().zip(generated) {
            let mut line = serde_json::Map::new();
            line.insert("id".into(), json!(input.id));
            if g.outputs.contains(&OutputKind::Text) {
                if let Some(tok) = admitted.tokenizer() {
                    let text = tok
                        .decode(&out.tokens)
                        .map_err(|_| RunFailure::Decode { line: input.line })?;
                    line.insert("text".into(), json!(text));
                }
            }
            if g.outputs.contains(&OutputKind::Tokens) {
                line.insert("tokens".into(), json!(out.tokens));
            }
            line.insert("finish_reason".into(), json!(out.finish));
            let line = serde_json::Value::Object(line);
            if journal.is_some() {
                entries.push(Entry::new(
                    line.clone(),
                    out.tokens.len() as u64,
                    out.finish,
                ));
            }
            push_line(&line)?;
            counts.inputs += 1;
            counts.generated_tokens += out.tokens.len() as u64;
            match out.finish {
                Finish::Stop => counts.finish_reasons.stop += 1,
                Finish::Length => counts.finish_reasons.length += 1,
            }
        }
        if let Some(j) = journal.as_mut() {
            j.append(&entries)?;
        }
        on_batch(&Progress {
            inputs_done: counts.inputs as usize,
            inputs_total,
            generated_tokens: counts.generated_tokens,
            elapsed: started.elapsed(),
            resumed_from: resumed_at.map(|r| r as usize - range.start),
        });
    }

    // Sealed in memory to the certificate's recipients: the plaintext never reaches the disk.
    let (outputs_name, outputs, outputs_commitment) = if admitted.recipients().is_empty() {
        (OUTPUTS_FILE, plain.to_vec(), None)
    } else {
        let sealed = seal(&plain, admitted.recipients()).map_err(RunFailure::Seal)?;
        let commitment =
            Commitment::new(OUTPUTS_COMMITMENT_CONTEXT, &plain).ok_or(RunFailure::NoRandomness)?;
        (SEALED_OUTPUTS_FILE, sealed, Some(commitment))
    };
    // The receipt names the approved model: the tokens must have come from its bytes, so no
    // file the checkpoint was read from may have been written since it was hashed.
    admitted.generator().checkpoint().seal.check_unchanged()?;
    let cert = admitted.certificate();
    let facts = RunFacts {
        certificate_digest: cert.digest(),
        engine_digest: cert.engine().source_digest,
        policy_id: cert.policy_id(),
        model_digest: cert.model_digest(),
        job_digest: admitted.job_digest(),
        inputs: admitted.inputs_commitment(),
        inputs_ciphertext: admitted.inputs_ciphertext(),
        outputs_commitment,
        sealed: Sealed {
            inputs: admitted.inputs_ciphertext().is_some(),
            outputs: outputs_commitment.is_some(),
        },
        generation: g.clone(),
        runner: RunnerIdentity::current()?,
        started_at,
        finished_at: Timestamp::now(),
        counts,
        attestation: admitted.evidence().map(|e| e.facts.clone()),
        shard: admitted.shard_facts(),
        resumed_at,
    };
    let mut files: Vec<(&str, &[u8])> = vec![(outputs_name, &outputs)];
    if let Some(evidence) = admitted.evidence() {
        files.push((ATTESTATION_FILE, &evidence.bytes));
    }
    let receipt = sign_receipt(&facts, &files, runner_key)?;
    files.push((RECEIPT_FILE, &receipt));
    if admitted.shard_facts().is_some() {
        // The shards' shared parent; each shard's own directory appears whole, by rename.
        std::fs::create_dir_all(&job.output_dir).map_err(|source| RunFailure::Io {
            path: job.output_dir.clone(),
            source,
        })?;
    }
    publish(&output_dir, &files)?;
    if let Some(j) = journal {
        j.remove();
    }
    Ok(RunResult {
        output_dir,
        facts,
        outputs_name,
        outputs,
        receipt,
        notices: Vec::new(),
    })
}
