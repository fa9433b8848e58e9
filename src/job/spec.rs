//! `job.toml`: what to run, on which inputs, where to write, with which settings.
//!
//! Paths are relative to the job file's directory. The job is written by whoever submits it, so
//! nothing in it is trusted: the trust configuration never comes from here, and every setting is
//! checked against the certificate's policy before anything runs.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Diagnose, Exit};
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
    /// Directory `outputs.jsonl` and `receipt.json` are written to.
    pub output_dir: PathBuf,
    /// The runner's private key, which signs the receipt.
    pub runner_key: PathBuf,
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
    output_dir: PathBuf,
    runner_key: PathBuf,
    #[serde(default)]
    tokenizer: Option<PathBuf>,
    generation: Generation,
}

/// Why a job file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The file could not be read.
    #[error("cannot read job {path}: {source}")]
    Read {
        /// The job file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, a missing key or a wrong type.
    #[error("job {path} is malformed: {detail}")]
    Malformed {
        /// The job file.
        path: PathBuf,
        /// The TOML reader's message, naming the key and position.
        detail: String,
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
        Some(
            "a job has engine, model, inputs, output_dir, runner_key, optional tokenizer, and a \
             [generation] table with batch_size, max_new_tokens, template (\"chat\" or \"raw\") \
             and outputs; see docs/job.md"
                .into(),
        )
    }
}

impl JobSpec {
    /// Read and resolve a job file.
    pub fn load(path: &Path) -> Result<JobSpec, JobError> {
        let text = std::fs::read_to_string(path).map_err(|source| JobError::Read {
            path: path.to_owned(),
            source,
        })?;
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
        let base = path.parent().unwrap_or(Path::new("."));
        let at = |p: &Path| base.join(p);
        Ok(JobSpec {
            path: path.to_owned(),
            engine: at(&raw.engine),
            model: at(&raw.model),
            inputs: at(&raw.inputs),
            output_dir: at(&raw.output_dir),
            runner_key: at(&raw.runner_key),
            tokenizer: raw.tokenizer.as_deref().map(at),
            generation: raw.generation,
        })
    }
}
