//! Running an admitted job: batches through the compiled engine, `outputs.jsonl`, the signed
//! receipt, and publishing both at once.
//!
//! The pair is published atomically as a directory: both files are written and fsynced into a
//! sibling staging directory (`<output_dir>.partial-<pid>`), which is then renamed to
//! `output_dir`. After a crash either the complete pair exists or `output_dir` does not; a stale
//! staging directory from a crashed run is removed by the next run. An existing non-empty
//! `output_dir` is never overwritten.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::admit::Admitted;
use super::generate::{Finish, GenerateError, Settings};
use crate::error::{Diagnose, Exit};
use crate::model::files::FileError;
use crate::model::tokenizer::TokenizerError;
use crate::trust::keys::SecretKey;
use crate::trust::policy::OutputKind;
use crate::trust::receipt::{
    sign_receipt, FinishReasons, ReceiptError, RunCounts, RunFacts, RunnerIdentity,
};
pub use crate::trust::receipt::{OUTPUTS_FILE, RECEIPT_FILE};
use crate::trust::time::Timestamp;

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The published directory.
    pub output_dir: PathBuf,
    /// The facts the receipt binds.
    pub facts: RunFacts,
    /// Exact bytes of outputs.jsonl.
    pub outputs: Vec<u8>,
    /// Exact bytes of receipt.json.
    pub receipt: Vec<u8>,
}

/// Why a run failed after admission.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunFailure {
    /// The output directory exists and is not empty.
    #[error("output directory {0} already exists and is not empty")]
    OutputExists(PathBuf),
    /// The engine failed.
    #[error(transparent)]
    Generate(Box<GenerateError>),
    /// Decoding generated tokens failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The receipt could not be made.
    #[error(transparent)]
    Receipt(#[from] ReceiptError),
    /// A model file was written while the job ran.
    #[error(transparent)]
    Model(#[from] FileError),
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
            RunFailure::OutputExists(_) => Exit::BadInput,
            // An engine that does not fit the checkpoint is the inputs' fault, not the run's.
            RunFailure::Generate(e) => e.exit(),
            RunFailure::Model(e) => e.exit(),
            _ => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            RunFailure::OutputExists(_) => {
                Some("choose a new output_dir in the job, or move the old results away".into())
            }
            RunFailure::Generate(e) => e.hint(),
            RunFailure::Model(e) => e.hint(),
            _ => None,
        }
    }
}

// Boxed: the engine's errors are large and every result here would carry their size.
impl From<GenerateError> for RunFailure {
    fn from(e: GenerateError) -> RunFailure {
        RunFailure::Generate(Box::new(e))
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunFailure + '_ {
    move |source| RunFailure::Io {
        path: path.to_owned(),
        source,
    }
}

/// Whether `dir` cannot take a job's outputs: a file, or a directory with entries.
pub fn output_dir_in_use(dir: &Path) -> bool {
    let non_empty = fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    non_empty || dir.is_file()
}

/// Refuse if the job's outputs could not be published (admission checked this already, before
/// hashing the model; checked again here in case the directory was filled since).
pub fn check_output_dir(dir: &Path) -> Result<(), RunFailure> {
    if output_dir_in_use(dir) {
        return Err(RunFailure::OutputExists(dir.to_owned()));
    }
    Ok(())
}

fn progress_bar(inputs: usize, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    // indicatif draws only when stderr is a terminal.
    let bar = ProgressBar::new(inputs as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} inputs  {msg}  eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// Run every input through the engine, sign the receipt, publish the pair.
pub fn run(
    admitted: Admitted,
    runner_key: &SecretKey,
    quiet: bool,
) -> Result<RunResult, RunFailure> {
    let job = admitted.job();
    check_output_dir(&job.output_dir)?;
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
    let bar = progress_bar(admitted.inputs().len(), quiet);
    let mut lines = Vec::new();
    let mut counts = RunCounts {
        inputs: 0,
        generated_tokens: 0,
        finish_reasons: FinishReasons { stop: 0, length: 0 },
    };
    let batch = g.batch_size.max(1) as usize;
    for (inputs, prompts) in admitted
        .inputs()
        .chunks(batch)
        .zip(admitted.prompts().chunks(batch))
    {
        let generated = admitted.generator().generate(prompts, &settings, |_| {})?;
        for (input, out) in inputs.iter().zip(generated) {
            let mut line = serde_json::Map::new();
            line.insert("id".into(), json!(input.id));
            if g.outputs.contains(&OutputKind::Text) {
                if let Some(tok) = admitted.tokenizer() {
                    line.insert("text".into(), json!(tok.decode(&out.tokens)?));
                }
            }
            if g.outputs.contains(&OutputKind::Tokens) {
                line.insert("tokens".into(), json!(out.tokens));
            }
            line.insert("finish_reason".into(), json!(out.finish));
            lines.push(serde_json::Value::Object(line));
            counts.inputs += 1;
            counts.generated_tokens += out.tokens.len() as u64;
            match out.finish {
                Finish::Stop => counts.finish_reasons.stop += 1,
                Finish::Length => counts.finish_reasons.length += 1,
            }
        }
        bar.inc(inputs.len() as u64);
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!(
            "{:.1} tokens/s",
            counts.generated_tokens as f64 / secs
        ));
    }
    bar.finish_and_clear();

    let mut outputs = Vec::new();
    for line in &lines {
        outputs.extend(serde_json::to_vec(line).map_err(|e| RunFailure::Io {
            path: job.output_dir.join(OUTPUTS_FILE),
            source: std::io::Error::other(e),
        })?);
        outputs.push(b'\n');
    }
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
        inputs_digest: admitted.inputs_digest(),
        generation: g.clone(),
        runner: RunnerIdentity::current()?,
        started_at,
        finished_at: Timestamp::now(),
        counts,
    };
    let receipt = sign_receipt(&facts, &[(OUTPUTS_FILE, &outputs)], runner_key)?;
    publish(
        &job.output_dir,
        &[(OUTPUTS_FILE, &outputs), (RECEIPT_FILE, &receipt)],
    )?;
    Ok(RunResult {
        output_dir: job.output_dir.clone(),
        facts,
        outputs,
        receipt,
    })
}

/// Write `files` into a staging directory beside `dir`, fsync, and rename it to `dir`.
pub fn publish(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), RunFailure> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "outputs".into());
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io(&parent))?;
    remove_stale_staging(&parent, &name);
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir(&staging).map_err(io(&staging))?;
    for (file, bytes) in files {
        let path = staging.join(file);
        let mut f = fs::File::create(&path).map_err(io(&path))?;
        f.write_all(bytes).map_err(io(&path))?;
        f.sync_all().map_err(io(&path))?;
    }
    fs::File::open(&staging)
        .and_then(|d| d.sync_all())
        .map_err(io(&staging))?;
    // An empty output_dir (made by the operator) is replaced; a non-empty one was refused.
    if dir.is_dir() {
        fs::remove_dir(dir).map_err(|_| RunFailure::OutputExists(dir.to_owned()))?;
    }
    fs::rename(&staging, dir).map_err(io(dir))?;
    fs::File::open(&parent)
        .and_then(|d| d.sync_all())
        .map_err(io(&parent))?;
    Ok(())
}

/// Staging directories left by crashed runs of the same output directory.
fn remove_stale_staging(parent: &Path, name: &str) {
    let prefix = format!(".{name}.partial-");
    if let Ok(entries) = fs::read_dir(parent) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}
