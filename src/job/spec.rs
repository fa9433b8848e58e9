//! `job.toml`: what to run, on which inputs, where to write, with which settings.
//!
//! Paths are relative to the job file's directory. The job is written by whoever submits it, so
//! nothing in it is trusted: the trust configuration never comes from here, and every setting is
//! checked against the certificate's policy before anything runs.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::inputs::InputsFormat;
use super::openai::MAX_STOP_STRINGS;
use super::sampling::MAX_JOB_SEED;
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded_text, ReadError, MAX_TEXT_BYTES};
pub use crate::trust::generation::Generation;

/// A parsed, path-resolved job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The job file itself.
    pub path: PathBuf,
    /// Engine source file.
    pub engine: PathBuf,
    /// Checkpoint directory.
    pub model: PathBuf,
    /// Inputs (JSONL).
    pub inputs: PathBuf,
    /// The inputs' format (and so the outputs'): detected from the file unless set.
    pub inputs_format: InputsFormat,
    /// Directory `outputs.jsonl` and `receipt.json` are written to.
    pub output_dir: PathBuf,
    /// `tokenizer.json`; default: the model directory's, else the fetched cache.
    pub tokenizer: Option<PathBuf>,
    /// Generation settings.
    pub generation: Generation,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    engine: PathBuf,
    model: PathBuf,
    inputs: PathBuf,
    #[serde(default)]
    inputs_format: InputsFormat,
    output_dir: PathBuf,
    /// No longer a job setting; present only to refuse it with a clear message.
    #[serde(default)]
    runner_key: Option<toml::Value>,
    #[serde(default)]
    tokenizer: Option<PathBuf>,
    generation: Generation,
}

/// Why a job file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The file could not be read.
    #[error(transparent)]
    File(ReadError),
    /// Not TOML, an unknown key, a missing key or a wrong type.
    #[error("job {path} is malformed: {detail}")]
    Malformed {
        /// The job file.
        path: PathBuf,
        /// The TOML reader's message, naming the key and position.
        detail: String,
    },
    /// The job names a signing key: the runner's own key signs, and it lives in the state
    /// directory.
    #[error("job {path}: `runner_key` is not a job setting: receipts are signed with the runner's own key, kept in its state directory")]
    RunnerKey {
        /// The job file.
        path: PathBuf,
    },
    /// The job file is not UTF-8 text.
    #[error("job {} is not UTF-8 text", path.display())]
    NotText {
        /// The job file.
        path: PathBuf,
    },
    /// A value is out of range.
    #[error("job {path}: `{field}` {problem}")]
    Invalid {
        /// The job file.
        path: PathBuf,
        /// The key.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

impl Diagnose for JobError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        if let JobError::RunnerKey { .. } = self {
            return Some(
                "delete the `runner_key` line; the operator makes the runner's key once with \
                 `runner init`, and `runner identity` shows its public half"
                    .into(),
            );
        }
        Some(
            "a job has engine, model, inputs, output_dir, optional tokenizer, and a \
             [generation] table with batch_size, max_new_tokens, template (\"chat\" or \"raw\") \
             and outputs; see docs/job.md"
                .into(),
        )
    }
}

impl JobSpec {
    /// Read and resolve a job file.
    pub fn load(path: &Path) -> Result<JobSpec, JobError> {
        let text = read_bounded_text(path, MAX_TEXT_BYTES, "job").map_err(JobError::File)?;
        JobSpec::parse(&text, path)
    }

    /// Parse and resolve job file text; `path` names the file in errors and anchors relative
    /// paths.
    pub fn parse(text: &str, path: &Path) -> Result<JobSpec, JobError> {
        let raw: RawJob = toml::from_str(text).map_err(|e| JobError::Malformed {
            path: path.to_owned(),
            detail: e.to_string().trim_end().to_owned(),
        })?;
        let invalid = |field, problem: String| JobError::Invalid {
            path: path.to_owned(),
            field,
            problem,
        };
        if raw.runner_key.is_some() {
            return Err(JobError::RunnerKey {
                path: path.to_owned(),
            });
        }
        if raw.output_dir.as_os_str().is_empty() {
            return Err(invalid("output_dir", "is empty".into()));
        }
        let g = &raw.generation;
        if g.batch_size == 0 {
            return Err(invalid(
                "generation.batch_size",
                "must be at least 1".into(),
            ));
        }
        if g.max_new_tokens == 0 {
            return Err(invalid(
                "generation.max_new_tokens",
                "must be at least 1".into(),
            ));
        }
        if g.outputs.is_empty() {
            return Err(invalid(
                "generation.outputs",
                "must list \"text\" and/or \"tokens\"".into(),
            ));
        }
        if !(0.0..=2.0).contains(&g.temperature) {
            return Err(invalid(
                "generation.temperature",
                "must be a number from 0 (greedy) to 2".into(),
            ));
        }
        if !(g.top_p > 0.0 && g.top_p <= 1.0) {
            return Err(invalid(
                "generation.top_p",
                "must be above 0 and at most 1".into(),
            ));
        }
        if g.stop.len() > MAX_STOP_STRINGS || g.stop.iter().any(String::is_empty) {
            return Err(invalid(
                "generation.stop",
                format!("must list at most {MAX_STOP_STRINGS} non-empty strings"),
            ));
        }
        if g.seed.is_some_and(|s| s > MAX_JOB_SEED) {
            return Err(invalid(
                "generation.seed",
                format!(
                    "must be an integer from 0 to {MAX_JOB_SEED} (the receipt's JSON holds it \
                     exactly)"
                ),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let at = |p: &Path| base.join(p);
        Ok(JobSpec {
            path: path.to_owned(),
            engine: at(&raw.engine),
            model: at(&raw.model),
            inputs: at(&raw.inputs),
            inputs_format: raw.inputs_format,
            output_dir: at(&raw.output_dir),
            tokenizer: raw.tokenizer.as_deref().map(at),
            generation: raw.generation,
        })
    }
}
