//! Running an admitted job: batches through the compiled engine, `outputs.jsonl` written as
//! they finish ([`outputs`](super::outputs)), the signed receipt, and publishing both at once
//! ([`publish`](super::publish)).

use std::path::PathBuf;

use ring::rand::{SecureRandom, SystemRandom};
use zeroize::Zeroizing;

use super::admit::Admitted;
use super::answer::{openai_line, runner_line, Answer, OpenAiRun};
use super::generate::{Control, Finish, GenerateError, Settings};
use super::input_table::InputRef;
use super::journal::{Entry, Journal, JournalError};
use super::outputs::{OutputsError, OutputsWriter};
use super::publish::{check_output_dir, PublishError, Stage};
use super::sampling::{input_seed, Sampler, MAX_JOB_SEED, SAMPLING_SCHEME};
use super::stop::{cut_at_stop, StopStrings};
use crate::error::{Diagnose, Exit};
use crate::model::files::FileError;
use crate::model::tokenizer::Tokenizer;
use crate::primitives::keys::SecretKey;
use crate::primitives::time::Timestamp;
use crate::restrict::builtins::Builtin;
use crate::restrict::diagnostic::Pos;
use crate::restrict::policy::OutputKind;
use crate::restrict::RunErrorKind;
use crate::trust::generation::Generation;
use crate::trust::receipt::{
    sign_receipt_of, subjects_of_digests, DigestSet, FinishReasons, ReceiptError, RunCounts,
    RunFacts, RunnerIdentity, SamplingFacts, Sealed, SeedSource,
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
    /// The digests of the outputs file as published (of the ciphertext when sealed); the file
    /// itself is in `output_dir`, never held whole.
    pub outputs_digest: DigestSet,
    /// Exact bytes of receipt.json.
    pub receipt: Vec<u8>,
    /// One-line notices for the operator (a resume journal discarded).
    pub notices: Vec<String>,
    /// Time from the first batch to the published outputs.
    pub elapsed: std::time::Duration,
    /// The receipt's digest (of its payload), as `runner verify` prints it.
    pub receipt_digest: crate::primitives::digest::Digest,
}

/// The run's resume journal, and what an earlier attempt had completed.
pub struct Resume {
    /// Appended to as batches complete, removed once the outputs are published.
    pub journal: Journal,
    /// The completed inputs, from the start of the run's range.
    pub entries: Vec<Entry>,
    /// The seed drawn for inputs that sample without one (the earlier attempt's on resume).
    pub drawn_seed: u64,
}

/// Why a run failed after admission.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunFailure {
    /// The outputs could not be published.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// The outputs file could not be written.
    #[error(transparent)]
    Outputs(#[from] OutputsError),
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
    /// The system's random number generator failed (a sampling job without a seed needs a
    /// drawn one).
    #[error("the system random number generator failed (it draws the sampling seed)")]
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
            RunFailure::Outputs(e) => e.exit(),
            RunFailure::Journal(e) => e.exit(),
            // An engine that does not fit the checkpoint is the inputs' fault, not the run's.
            RunFailure::Generate(e) => e.exit(),
            RunFailure::Model(e) => e.exit(),
            RunFailure::Receipt(e) => e.exit(),
            RunFailure::Engine { .. }
            | RunFailure::Decode { .. }
            | RunFailure::Io { .. }
            | RunFailure::NoRandomness => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            RunFailure::Publish(e) => e.hint(),
            RunFailure::Outputs(e) => e.hint(),
            RunFailure::Journal(e) => e.hint(),
            RunFailure::Generate(e) => e.hint(),
            RunFailure::Model(e) => e.hint(),
            RunFailure::Receipt(e) => e.hint(),
            RunFailure::Engine { .. } => Some(
                "reproduce it on inputs that are not private (the same shapes and lengths) to \
                 see the kernel's own message"
                    .into(),
            ),
            RunFailure::Decode { .. } | RunFailure::Io { .. } | RunFailure::NoRandomness => None,
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

/// The stop strings of `input`: its own, else the job's.
fn stop_strings<'a>(g: &'a Generation, input: &InputRef<'a>) -> &'a [String] {
    if input.options.stop.is_empty() {
        &g.stop
    } else {
        &input.options.stop
    }
}

/// How input `index` (0-based in the inputs file) is generated: its request's settings where it
/// gives them, else the job's; a seed of its own, else one derived from the job's.
fn control_of<'a>(
    g: &'a Generation,
    tokenizer: Option<&'a Tokenizer>,
    job_seed: u64,
    index: usize,
    input: &InputRef<'a>,
) -> Control<'a> {
    let o = &input.options;
    let seed = o.seed.unwrap_or_else(|| input_seed(job_seed, index as u64));
    let sampler = Sampler::new(
        o.temperature.unwrap_or(g.temperature),
        o.top_k.unwrap_or(g.top_k) as usize,
        o.top_p.unwrap_or(g.top_p),
        seed,
    );
    Control {
        max_new: o
            .max_tokens
            .map_or(g.max_new_tokens, |m| m.min(g.max_new_tokens)) as usize,
        sampler,
        stop: tokenizer.and_then(|t| StopStrings::new(stop_strings(g, input), t)),
    }
}

/// A fresh seed for the inputs a sampling job gives none to (recorded in the receipt), at most
/// [`MAX_JOB_SEED`] as a job file's must be.
pub fn draw_seed() -> Result<u64, RunFailure> {
    let mut bytes = [0u8; 8];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| RunFailure::NoRandomness)?;
    Ok(u64::from_le_bytes(bytes) & MAX_JOB_SEED)
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
    if admitted.shard_facts().is_some() {
        // The shards' shared parent; each shard's own directory appears whole, by rename.
        std::fs::create_dir_all(&job.output_dir).map_err(|source| RunFailure::Io {
            path: job.output_dir.clone(),
            source,
        })?;
    }
    // The outputs file grows in the stage as batches finish; a failure drops the stage and
    // with it every byte written.
    let stage = Stage::open(&output_dir)?;
    let mut outputs = OutputsWriter::create(&stage, admitted.recipients())?;
    let mut counts = RunCounts {
        inputs: 0,
        generated_tokens: 0,
        finish_reasons: FinishReasons { stop: 0, length: 0 },
    };
    let batch = g.batch_size.max(1) as usize;
    let inputs_total = range.len();
    let journal_seed = resume.as_ref().map(|r| r.drawn_seed);
    let (mut journal, done) = match resume {
        // More than the range holds cannot be this run's: start again.
        Some(r) if r.entries.len() <= range.len() => (Some(r.journal), r.entries),
        Some(r) => (Some(r.journal), Vec::new()),
        None => (None, Vec::new()),
    };
    let resumed_at = (!done.is_empty()).then(|| (range.start + done.len()) as u64);
    for e in done {
        outputs.push(&e.line)?;
        counts.inputs += 1;
        counts.generated_tokens += e.tokens;
        if e.stopped {
            counts.finish_reasons.stop += 1;
        } else {
            counts.finish_reasons.length += 1;
        }
    }
    let todo = range.start + counts.inputs as usize..range.end;
    let cert = admitted.certificate();
    let openai = OpenAiRun::new(
        cert.digest(),
        admitted.job_digest(),
        cert.model_digest(),
        started_at.datetime().unix_timestamp(),
    );
    let job_seed = match (g.seed, &journal_seed) {
        (Some(seed), _) => seed,
        (None, Some(drawn)) => *drawn,
        (None, None) => draw_seed()?,
    };
    let tokenizer = admitted.tokenizer();
    let table = admitted.inputs();
    let sampled_inputs = table
        .range(range.clone())
        .enumerate()
        .filter(|(i, input)| {
            control_of(g, tokenizer, job_seed, range.start + i, input)
                .sampler
                .is_some()
        })
        .count() as u64;
    let mut index = todo.start;
    for start in todo.clone().step_by(batch) {
        let inputs: Vec<InputRef<'_>> = table.range(start..(start + batch).min(todo.end)).collect();
        let prompts: Vec<Vec<u32>> = inputs.iter().map(|i| i.prompt.to_vec()).collect();
        let controls: Vec<Control<'_>> = inputs
            .iter()
            .enumerate()
            .map(|(i, input)| control_of(g, tokenizer, job_seed, index + i, input))
            .collect();
        let generated =
            admitted
                .generator()
                .generate_with(&prompts, &settings, &controls, |_| {})?;
        let mut entries = Vec::with_capacity(inputs.len());
        for ((input, prompt), mut out) in inputs.iter().zip(&prompts).zip(generated) {
            let wants_text = input.endpoint.is_some() || g.outputs.contains(&OutputKind::Text);
            let text = match tokenizer.filter(|_| wants_text) {
                Some(tok) => {
                    let full = tok
                        .decode(&out.tokens)
                        .map_err(|_| RunFailure::Decode { line: input.line })?;
                    let (cut, stopped) = cut_at_stop(&full, stop_strings(g, input));
                    if stopped {
                        out.finish = Finish::Stop;
                    }
                    Some(Zeroizing::new(cut.to_owned()))
                }
                None => None,
            };
            let answer = Answer {
                input,
                index,
                prompt_tokens: prompt.len(),
                generated: &out,
                text: text.as_ref().map(|t| t.as_str()),
            };
            let line = match input.endpoint {
                Some(endpoint) => openai_line(&openai, &answer, endpoint),
                None => runner_line(&answer, &g.outputs),
            };
            index += 1;
            if journal.is_some() {
                entries.push(Entry::new(
                    line.clone(),
                    out.tokens.len() as u64,
                    out.finish,
                ));
            }
            outputs.push(&line)?;
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

    let written = outputs.finish()?;
    let outputs_commitment = written.commitment;
    // The receipt names the approved model: the tokens must have come from its bytes, so no
    // file the checkpoint was read from may have been written since it was hashed.
    admitted.generator().checkpoint().seal.check_unchanged()?;
    let sampling = (sampled_inputs > 0).then(|| SamplingFacts {
        scheme: SAMPLING_SCHEME.into(),
        job_seed: job_seed.to_string(),
        seed_source: if g.seed.is_some() {
            SeedSource::Job
        } else {
            SeedSource::Drawn
        },
        sampled_inputs,
    });
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
        sampling,
    };
    let mut subjects = vec![(written.name, written.digest)];
    if let Some(evidence) = admitted.evidence() {
        stage.write(ATTESTATION_FILE, &evidence.bytes)?;
        subjects.push((ATTESTATION_FILE, DigestSet::of(&evidence.bytes)));
    }
    let receipt = sign_receipt_of(&facts, subjects_of_digests(&subjects)?, runner_key)?;
    let receipt_digest = crate::primitives::dsse::Envelope::parse(&receipt)
        .map_err(|e| RunFailure::Io {
            path: job.output_dir.join(RECEIPT_FILE),
            source: std::io::Error::other(e.to_string()),
        })?
        .payload_digest();
    stage.write(RECEIPT_FILE, &receipt)?;
    stage.publish()?;
    if let Some(j) = journal {
        j.remove();
    }
    Ok(RunResult {
        output_dir,
        facts,
        outputs_name: written.name,
        outputs_digest: written.digest,
        receipt,
        notices: Vec::new(),
        elapsed: started.elapsed(),
        receipt_digest,
    })
}
