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
use crate::model::digest::ModelDigestError;
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

/// The keys a job file must have, top level and in `[generation]`: all are checked before
/// the file is deserialised, so a job missing several hears of all of them at once.
const REQUIRED_KEYS: [&str; 5] = ["engine", "model", "inputs", "output_dir", "generation"];
const REQUIRED_GENERATION_KEYS: [&str; 2] = ["batch_size", "max_new_tokens"];

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
    /// Required keys are absent (all of them are named; there is no position to show).
    #[error("job {} is missing {}", path.display(), missing_keys(keys))]
    MissingKeys {
        /// The job file.
        path: PathBuf,
        /// The absent keys, `generation.*` for those of the `[generation]` table.
        keys: Vec<String>,
    },
    /// The file or directory a key names cannot be used (missing, unreadable, not a model).
    #[error("job {}, key `{key}`: {source}", path.display())]
    Target {
        /// The job file.
        path: PathBuf,
        /// The key: `engine`, `model`, `inputs` or `tokenizer`.
        key: &'static str,
        /// Why the file or directory it names cannot be used.
        source: TargetError,
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

/// `the required key `a`` or `the required keys `a`, `b` and `c``.
fn missing_keys(keys: &[String]) -> String {
    let quoted: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => format!("the required key {last}"),
        Some((last, rest)) => format!("the required keys {} and {last}", rest.join(", ")),
        None => "no key".into(),
    }
}

/// Why the file or directory a job key names cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The model could not be digested.
    #[error(transparent)]
    Model(#[from] ModelDigestError),
}

impl TargetError {
    /// Whether the path names nothing at all.
    fn missing(&self) -> bool {
        let io = match self {
            TargetError::Read(ReadError::Io { source, .. }) => source,
            TargetError::Model(ModelDigestError::ReadDir { source, .. }) => source,
            _ => return false,
        };
        io.kind() == std::io::ErrorKind::NotFound
    }

    fn exit(&self) -> Exit {
        match self {
            TargetError::Read(e) => e.exit(),
            TargetError::Model(e) => e.exit(),
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            TargetError::Read(e) => e.hint(),
            TargetError::Model(e) => e.hint(),
        }
    }
}

/// What each path key of a job names, for hints.
fn key_names(key: &str) -> &'static str {
    match key {
        "engine" => "the engine source the owners approved",
        "model" => {
            "the approved model: a Hugging Face checkpoint directory (config.json and \
             *.safetensors) or a .gguf file"
        }
        "inputs" => "the inputs file (JSONL, or that file encrypted to the runner with age)",
        "tokenizer" => "a tokenizer.json",
        _ => "a file",
    }
}

impl Diagnose for JobError {
    fn exit(&self) -> Exit {
        match self {
            JobError::Target { source, .. } => source.exit(),
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        if let JobError::Target { path, key, source } = self {
            let names = key_names(key);
            let job = path.display();
            if source.missing() {
                return Some(format!(
                    "nothing is there: fix `{key}` in {job}; it names {names}, relative to the \
                     job file's directory"
                ));
            }
            return Some(match source.hint() {
                Some(h) => format!("{h} (`{key}` in {job} names {names})"),
                None => format!("check `{key}` in {job}: it names {names}"),
            });
        }
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

/// The required keys `table` lacks, in the order a job file lists them.
fn missing_required(table: &toml::Table) -> Vec<String> {
    let mut missing: Vec<String> = REQUIRED_KEYS
        .iter()
        .filter(|k| !table.contains_key(**k))
        .map(|k| match *k {
            "generation" => "[generation]".to_owned(),
            k => k.to_owned(),
        })
        .collect();
    if let Some(toml::Value::Table(generation)) = table.get("generation") {
        missing.extend(
            REQUIRED_GENERATION_KEYS
                .iter()
                .filter(|k| !generation.contains_key(**k))
                .map(|k| format!("generation.{k}")),
        );
    }
    missing
}

impl JobSpec {
    /// Read and resolve a job file.
    pub fn load(path: &Path) -> Result<JobSpec, JobError> {
        let text = read_bounded_text(path, MAX_TEXT_BYTES, "job").map_err(JobError::File)?;
        JobSpec::parse(&text, path)
    }

    /// The error for the file or directory `key` names, which could not be used: it names
    /// this job file and the key.
    pub fn at_key(&self, key: &'static str, source: impl Into<TargetError>) -> JobError {
        JobError::Target {
            path: self.path.clone(),
            key,
            source: source.into(),
        }
    }

    /// Parse and resolve job file text; `path` names the file in errors and anchors relative
    /// paths.
    pub fn parse(text: &str, path: &Path) -> Result<JobSpec, JobError> {
        let malformed = |e: toml::de::Error| JobError::Malformed {
            path: path.to_owned(),
            detail: e.to_string().trim_end().to_owned(),
        };
        // The keys first, all of them: serde stops at the first one missing, and points at
        // the top of the table, which is not where anything is wrong.
        let table: toml::Table = toml::from_str(text).map_err(malformed)?;
        let missing = missing_required(&table);
        if !missing.is_empty() {
            return Err(JobError::MissingKeys {
                path: path.to_owned(),
                keys: missing,
            });
        }
        let raw: RawJob = toml::from_str(text).map_err(malformed)?;
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
