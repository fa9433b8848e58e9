//! The trusted boundary: everything that must hold before the engine touches private inputs.
//!
//! [`admit`] is the only way to obtain an [`Admitted`] job, and running a job takes one by value.
//! It checks, in this order, and refuses at the first difference:
//!
//! 1. the certificate: envelope, signatures of distinct trusted owners meeting the threshold,
//!    validity window, not revoked, not superseded;
//! 2. the engine source: BLAKE3 of the exact bytes equals the approved digest;
//! 3. the policy: `policy_id` recomputed from the embedded policy under this runner's verifier
//!    equals the approved one;
//! 4. the verifier, run again on the source: it passes, and its report (private ranges, calls
//!    checked, built-ins, view digest) equals the approved one;
//! 5. the model: the checkpoint's digest equals the approved one, and the checkpoint loads;
//! 6. the job against the policy's limits: batch size, new tokens, output kinds, number of
//!    inputs (after every line of the inputs file parsed), and every prompt's length in tokens
//!    after the template (each prompt's ids must also be inside the model's vocabulary);
//! 7. the engine compiles for the model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use time::OffsetDateTime;

use super::generate::{GenerateError, Generator};
use super::inputs::{parse_inputs, Input, InputsError, Prompt};
use super::spec::{JobError, JobSpec};
use crate::error::{Diagnose, Exit};
use crate::model::digest::{model_digest, ModelDigest, ModelDigestError};
use crate::model::tokenizer::{
    cached_tokenizer_path, Tokenizer, TokenizerError, GEMMA3_TOKENIZER_SHA256, TOKENIZER_FILE,
};
use crate::model::weights::{Checkpoint, WeightsError};
use crate::primitives::digest::Digest;
use crate::restrict::policy::OutputKind;
use crate::restrict::{check_bytes, RestrictError};
use crate::trust::certificate::{CertError, RestrictReport};
use crate::trust::config::TrustConfig;
use crate::trust::verify::{verify_certificate, VerifiedCertificate};

/// What the operator asked to run.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The certificate file.
    pub cert: &'a Path,
    /// The job file.
    pub job: &'a Path,
    /// The operator's trust configuration.
    pub trust: &'a TrustConfig,
    /// Certificates this runner has seen superseded, as (old, replacement) digests (rollback
    /// protection).
    pub superseded: &'a [(Digest, Digest)],
    /// The time to verify at.
    pub now: OffsetDateTime,
}

/// A job that passed every check, ready to run. Only [`admit`] makes one.
pub struct Admitted {
    certificate: VerifiedCertificate,
    job: JobSpec,
    job_digest: Digest,
    inputs: Vec<Input>,
    inputs_digest: Digest,
    prompts: Vec<Vec<u32>>,
    tokenizer: Option<Tokenizer>,
    tokenizer_digest: Option<Digest>,
    generator: Generator,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("certificate", &self.certificate.digest())
            .field("inputs", &self.inputs.len())
            .finish_non_exhaustive()
    }
}

impl Admitted {
    /// The verified certificate.
    pub fn certificate(&self) -> &VerifiedCertificate {
        &self.certificate
    }
    /// The job.
    pub fn job(&self) -> &JobSpec {
        &self.job
    }
    /// BLAKE3 of the job file's bytes.
    pub fn job_digest(&self) -> Digest {
        self.job_digest
    }
    /// The inputs, in file order.
    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }
    /// BLAKE3 of the inputs file's bytes.
    pub fn inputs_digest(&self) -> Digest {
        self.inputs_digest
    }
    /// Each input's prompt as token ids (template applied), in input order.
    pub fn prompts(&self) -> &[Vec<u32>] {
        &self.prompts
    }
    /// The tokenizer, when the job needs one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }
    /// BLAKE3 of the tokenizer file used, if any.
    pub fn tokenizer_digest(&self) -> Option<Digest> {
        self.tokenizer_digest
    }
    /// The compiled engine bound to the approved model.
    pub fn generator(&self) -> &Generator {
        &self.generator
    }
}

/// Why a job was not admitted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The certificate file could not be read.
    #[error("cannot read certificate {path}: {source}")]
    ReadCertificate {
        /// The certificate file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The certificate failed verification.
    #[error(transparent)]
    Certificate(#[from] CertError),
    /// The certificate was replaced by a newer one.
    #[error("certificate {old} was superseded by certificate {new}")]
    Superseded {
        /// The presented certificate (short digest).
        old: String,
        /// The certificate that replaced it (short digest).
        new: String,
    },
    /// The job file is malformed.
    #[error(transparent)]
    Job(#[from] JobError),
    /// The engine source could not be read.
    #[error("cannot read engine {path}: {source}")]
    ReadEngine {
        /// The engine file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The engine's bytes differ from the approved ones.
    #[error(
        "engine {path} is not the approved engine: source digest {found}, certificate approves {expected}"
    )]
    EngineChanged {
        /// The engine file.
        path: PathBuf,
        /// Approved digest (hex).
        expected: String,
        /// Digest of the file on disk (hex).
        found: String,
    },
    /// The certificate was approved under another verifier.
    #[error(
        "certificate was approved under verifier {approved}; this runner's verifier is {ours}"
    )]
    VerifierVersion {
        /// Version in the certificate.
        approved: String,
        /// This runner's version.
        ours: String,
    },
    /// policy_id recomputed from the embedded policy differs.
    #[error("policy_id of the certificate's policy is {found} under this verifier, certificate says {expected}")]
    PolicyId {
        /// Approved id (short).
        expected: String,
        /// Recomputed id (short).
        found: String,
    },
    /// The verifier refused the engine.
    #[error(transparent)]
    Verifier(#[from] RestrictError),
    /// The certificate carries no verifier report to compare with.
    #[error("certificate binds no restrict report for the engine")]
    NoReport,
    /// The verifier's report differs from the approved one.
    #[error("the verifier's report differs from the approved one in `{field}`")]
    ReportChanged {
        /// The first differing field.
        field: &'static str,
    },
    /// The model directory could not be digested.
    #[error(transparent)]
    ModelDigest(#[from] ModelDigestError),
    /// The model differs from the approved one.
    #[error(
        "model {path} is not the approved model: digest {found}, certificate approves {expected}"
    )]
    ModelChanged {
        /// The model directory.
        path: PathBuf,
        /// Approved digest (hex).
        expected: String,
        /// Digest on disk (hex).
        found: String,
    },
    /// The checkpoint does not load.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The inputs are malformed.
    #[error(transparent)]
    Inputs(#[from] InputsError),
    /// The job asks for more than the policy allows.
    #[error("job exceeds the policy limit {limit}: {found} > {max}")]
    Limit {
        /// The policy field.
        limit: &'static str,
        /// The job's value.
        found: u64,
        /// The policy's maximum.
        max: u64,
    },
    /// A prompt is longer than the policy allows.
    #[error("input {id:?} has {found} prompt tokens; the policy allows at most {max} (limits.max_prompt_tokens)")]
    PromptTooLong {
        /// The input's id.
        id: String,
        /// Its length in tokens.
        found: usize,
        /// The limit.
        max: u32,
    },
    /// A prompt holds a token id the model does not have.
    #[error("input {id:?}: token {position} of its prompt (after the template) is outside the model's vocabulary of {vocab} ids")]
    TokenOutOfVocab {
        /// The input's id.
        id: String,
        /// 0-based position of the first such token (the value is not shown: inputs are private).
        position: usize,
        /// The model's `vocab_size`.
        vocab: usize,
    },
    /// The job asks for an output kind the policy does not allow.
    #[error("job asks for output {}, which the policy does not allow (outputs: {allowed})", json_name(.kind))]
    OutputKind {
        /// The refused kind.
        kind: OutputKind,
        /// What the policy allows.
        allowed: String,
    },
    /// A text prompt or text output needs a tokenizer and none was found.
    #[error("the job needs a tokenizer (text prompts or text output) and none was found: {0}")]
    NoTokenizer(String),
    /// The tokenizer is not the one this runner may use.
    #[error("tokenizer {path} is neither in the approved model directory nor the official Gemma 3 tokenizer (sha256 {found})")]
    TokenizerUnapproved {
        /// The file.
        path: PathBuf,
        /// Its SHA-256.
        found: String,
    },
    /// The tokenizer failed to load.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A chat turn has a role the template does not know (the role itself is not shown:
    /// inputs are private).
    #[error("input {id:?}: chat turn {index} has a role other than \"user\", \"model\", \"assistant\" or a first \"system\"")]
    ChatRole {
        /// The input's id.
        id: String,
        /// 0-based position of the turn.
        index: usize,
    },
    /// An input's prompt could not be put through the template and tokenizer.
    #[error("input {id:?}: {source}")]
    Encode {
        /// The input's id.
        id: String,
        /// What went wrong.
        source: TokenizerError,
    },
    /// The engine does not compile for the model.
    #[error(transparent)]
    Compile(Box<GenerateError>),
    /// The job's output directory exists and is not empty.
    #[error("output directory {0} already exists and is not empty")]
    OutputExists(PathBuf),
}

// Boxed: the compiler's errors are large and every `admit` result would carry their size.
impl From<GenerateError> for Refusal {
    fn from(e: GenerateError) -> Refusal {
        Refusal::Compile(Box::new(e))
    }
}

impl Diagnose for Refusal {
    fn exit(&self) -> Exit {
        match self {
            Refusal::Certificate(e) => e.exit(),
            Refusal::Job(e) => e.exit(),
            Refusal::Verifier(e) => e.exit(),
            Refusal::ModelDigest(e) => e.exit(),
            Refusal::Weights(e) => e.exit(),
            Refusal::Inputs(e) => e.exit(),
            Refusal::Tokenizer(e) | Refusal::Encode { source: e, .. } => e.exit(),
            Refusal::Compile(e) => e.exit(),
            Refusal::ReadCertificate { .. }
            | Refusal::ReadEngine { .. }
            | Refusal::NoTokenizer(_)
            | Refusal::TokenOutOfVocab { .. }
            | Refusal::ChatRole { .. }
            | Refusal::OutputExists(_) => Exit::BadInput,
            _ => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            Refusal::Certificate(e) => return e.hint(),
            Refusal::Job(e) => return e.hint(),
            Refusal::Verifier(e) => return e.hint(),
            Refusal::ModelDigest(e) => return e.hint(),
            Refusal::Weights(e) => return e.hint(),
            Refusal::Inputs(e) => return e.hint(),
            Refusal::Tokenizer(e) => return e.hint(),
            Refusal::Encode { source, .. } => return source.hint(),
            Refusal::ChatRole { .. } => "chat turns have role \"user\" or \"model\" (or \
                \"assistant\"), optionally after a first \"system\" turn"
                .into(),
            Refusal::Compile(e) => return e.hint(),
            Refusal::Superseded { .. } => {
                "run with the certificate that superseded it (see `runner inspect`)".into()
            }
            Refusal::EngineChanged { .. } | Refusal::ReportChanged { .. } | Refusal::NoReport => {
                "source changed since approval: run `runner review --cert CERT --engine ENGINE` \
                 and ask the owners to re-approve"
                    .into()
            }
            Refusal::VerifierVersion { .. } | Refusal::PolicyId { .. } => {
                "the owners must re-approve the engine under this runner's verifier".into()
            }
            Refusal::ModelChanged { .. } => {
                "use the model directory the owners approved, or ask them to approve this one"
                    .into()
            }
            Refusal::Limit { .. } | Refusal::PromptTooLong { .. } | Refusal::OutputKind { .. } => {
                "reduce the job to the policy's limits (see `runner inspect CERT`)".into()
            }
            Refusal::TokenOutOfVocab { .. } => {
                "token ids must be below the model's vocab_size (config.json); text prompts need \
                 a tokenizer made for this model"
                    .into()
            }
            Refusal::NoTokenizer(_) | Refusal::TokenizerUnapproved { .. } => {
                "run scripts/fetch_tokenizer.sh, put tokenizer.json in the approved model \
                 directory, or give only token-id inputs with outputs = [\"tokens\"]"
                    .into()
            }
            Refusal::ReadCertificate { .. } | Refusal::ReadEngine { .. } => "check the path".into(),
            Refusal::OutputExists(_) => {
                "choose a new output_dir in the job, or move the old results away".into()
            }
        })
    }
}

/// Check everything, then compile: the only way to an [`Admitted`] job.
pub fn admit(req: &Request<'_>) -> Result<Admitted, Refusal> {
    let cert_bytes = std::fs::read(req.cert).map_err(|source| Refusal::ReadCertificate {
        path: req.cert.to_owned(),
        source,
    })?;
    let certificate = verify_certificate(&cert_bytes, req.trust, req.now)?;
    if let Some((old, newer)) = req
        .superseded
        .iter()
        .find(|(old, _)| *old == certificate.digest())
    {
        return Err(Refusal::Superseded {
            old: old.short(),
            new: newer.short(),
        });
    }

    let job_bytes = std::fs::read(req.job).map_err(|source| JobError::Read {
        path: req.job.to_owned(),
        source,
    })?;
    // Parse the bytes that are hashed into the receipt, not a second read of the file.
    let job_text = std::str::from_utf8(&job_bytes).map_err(|e| JobError::Read {
        path: req.job.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    let job = JobSpec::parse(job_text, req.job)?;
    // Before any hashing: finding this out after reading a multi-GiB model wastes the wait.
    if super::publish::output_dir_in_use(&job.output_dir) {
        return Err(Refusal::OutputExists(job.output_dir.clone()));
    }

    let source = std::fs::read(&job.engine).map_err(|source| Refusal::ReadEngine {
        path: job.engine.clone(),
        source,
    })?;
    let found = Digest::of(&source);
    if found != certificate.engine().source_digest {
        return Err(Refusal::EngineChanged {
            path: job.engine.clone(),
            expected: certificate.engine().source_digest.to_hex(),
            found: found.to_hex(),
        });
    }

    if certificate.verifier_version() != crate::restrict::VERIFIER_VERSION {
        return Err(Refusal::VerifierVersion {
            approved: certificate.verifier_version().to_owned(),
            ours: crate::restrict::VERIFIER_VERSION.to_owned(),
        });
    }
    let policy = certificate.policy();
    let recomputed = policy.policy_id();
    if recomputed.0 != certificate.policy_id().0 {
        return Err(Refusal::PolicyId {
            expected: certificate.policy_id().short(),
            found: recomputed.short(),
        });
    }

    let checked = check_bytes(&source, &job.engine.display().to_string(), policy)?;
    let approved = certificate
        .engine()
        .restrict
        .as_ref()
        .ok_or(Refusal::NoReport)?;
    compare_reports(approved, &RestrictReport::from_report(checked.report())?)?;

    // Digest before parsing: bytes the owners did not approve are refused as such (exit 3),
    // whatever is wrong with them, and never reach the safetensors parser.
    let model = model_digest(&job.model)?;
    if model.digest != certificate.model_digest() {
        return Err(Refusal::ModelChanged {
            path: job.model.clone(),
            expected: certificate.model_digest().to_hex(),
            found: model.digest.to_hex(),
        });
    }
    // The hashed files themselves, not the paths again: the directory may have changed since.
    let checkpoint = Checkpoint::load_from(model.checkpoint_files(&job.model))?;

    let limits = &policy.limits;
    let g = &job.generation;
    for (limit, found, max) in [
        ("max_batch", g.batch_size, limits.max_batch),
        ("max_new_tokens", g.max_new_tokens, limits.max_new_tokens),
    ] {
        if found > max {
            return Err(Refusal::Limit {
                limit,
                found: found.into(),
                max: max.into(),
            });
        }
    }
    for kind in &g.outputs {
        if !policy.outputs.contains(kind) {
            return Err(Refusal::OutputKind {
                kind: *kind,
                allowed: policy
                    .outputs
                    .iter()
                    .map(json_name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    let inputs_bytes = std::fs::read(&job.inputs).map_err(|source| InputsError::Read {
        path: job.inputs.clone(),
        source,
    })?;
    let inputs = parse_inputs(&inputs_bytes, &job.inputs)?;
    if inputs.len() as u64 > u64::from(limits.max_inputs) {
        return Err(Refusal::Limit {
            limit: "max_inputs",
            found: inputs.len() as u64,
            max: limits.max_inputs.into(),
        });
    }

    let needs_text = g.outputs.contains(&OutputKind::Text)
        || inputs
            .iter()
            .any(|i| !matches!(i.prompt, Prompt::Tokens(_)));
    let (tokenizer, tokenizer_digest) = if needs_text {
        let (t, d) = load_tokenizer(&job, &model)?;
        (Some(t), Some(d))
    } else {
        (None, None)
    };
    // Checked here rather than when the batch runs: a bad id in the last input must not be found
    // after every earlier batch has run, and the refusal must name the input.
    let vocab = checkpoint.config.vocab_size;
    let mut prompts = Vec::with_capacity(inputs.len());
    for input in &inputs {
        let encoded = match (&input.prompt, &tokenizer) {
            (Prompt::Tokens(t), _) => Ok(t.clone()),
            (Prompt::Text(text), Some(tok)) => tok.encode_prompt(text, g.template),
            (Prompt::Messages(turns), Some(tok)) => tok.encode_chat(turns),
            (_, None) => return Err(Refusal::NoTokenizer("no tokenizer loaded".into())),
        };
        let ids = encoded.map_err(|source| match source {
            TokenizerError::Role { index, .. } => Refusal::ChatRole {
                id: input.id.clone(),
                index,
            },
            source => Refusal::Encode {
                id: input.id.clone(),
                source,
            },
        })?;
        if let Some(position) = ids.iter().position(|&t| t as usize >= vocab) {
            return Err(Refusal::TokenOutOfVocab {
                id: input.id.clone(),
                position,
                vocab,
            });
        }
        if ids.len() > limits.max_prompt_tokens as usize {
            return Err(Refusal::PromptTooLong {
                id: input.id.clone(),
                found: ids.len(),
                max: limits.max_prompt_tokens,
            });
        }
        prompts.push(ids);
    }

    let generator = Generator::new(checked, "main", Arc::new(checkpoint))?;
    Ok(Admitted {
        certificate,
        job,
        job_digest: Digest::of(&job_bytes),
        inputs,
        inputs_digest: Digest::of(&inputs_bytes),
        prompts,
        tokenizer,
        tokenizer_digest,
        generator,
    })
}

/// How a value is spelled in job.toml and the policy (`"text"`), for messages.
fn json_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "?".into())
}

fn compare_reports(approved: &RestrictReport, found: &RestrictReport) -> Result<(), Refusal> {
    let field = if approved.view_digest != found.view_digest {
        "view_digest"
    } else if approved.private_ranges != found.private_ranges {
        "private_ranges"
    } else if approved.calls_checked != found.calls_checked {
        "calls_checked"
    } else if approved.builtins_used != found.builtins_used {
        "builtins_used"
    } else {
        return Ok(());
    };
    Err(Refusal::ReportChanged { field })
}

/// The tokenizer: `job.tokenizer`, else the model directory's `tokenizer.json` (bound by the
/// model digest), else the fetched cache. One outside the model directory must be the official
/// Gemma 3 file, checked by SHA-256, since the certificate does not bind it.
fn load_tokenizer(job: &JobSpec, model: &ModelDigest) -> Result<(Tokenizer, Digest), Refusal> {
    let in_model = job.model.join(TOKENIZER_FILE);
    let path = match &job.tokenizer {
        Some(p) => p.clone(),
        None if model.opened.contains_key(TOKENIZER_FILE) => in_model.clone(),
        None => cached_tokenizer_path()
            .filter(|p| p.exists())
            .ok_or_else(|| {
                Refusal::NoTokenizer("no tokenizer.json in the model directory or the cache".into())
            })?,
    };
    let bound_by_model =
        path.parent() == Some(job.model.as_path()) && path.file_name() == in_model.file_name();
    let bytes = if bound_by_model {
        // The file the model digest hashed, and only if its bytes are still the hashed ones.
        model
            .checkpoint_files(&job.model)
            .read(TOKENIZER_FILE)
            .map_err(WeightsError::from)?
    } else {
        std::fs::read(&path)
            .map_err(|e| Refusal::NoTokenizer(format!("{}: {e}", path.display())))?
    };
    if !bound_by_model {
        let sha = ring::digest::digest(&ring::digest::SHA256, &bytes);
        let hex: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        if hex != GEMMA3_TOKENIZER_SHA256 {
            return Err(Refusal::TokenizerUnapproved { path, found: hex });
        }
    }
    let tokenizer = Tokenizer::from_bytes(&path, &bytes)?;
    Ok((tokenizer, Digest::of(&bytes)))
}
