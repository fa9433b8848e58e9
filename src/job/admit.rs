//! The trusted boundary: everything that must hold before the engine touches private inputs.
//!
//! [`admit`] is the only way to obtain an [`Admitted`] job, and running a job takes one by value.
//! It is a chain of steps, each taking the previous step's proof by value and returning its own,
//! so the order below is enforced by the types; the first difference refuses the job:
//!
//! 1. [`certificate`]: envelope, signatures of distinct trusted owners meeting the threshold,
//!    validity window, not revoked, not superseded, and its version not below the highest this
//!    runner admitted for its lineage nor below trust.toml's pin;
//! 2. [`job_file`]: the job file parses, and its `output_dir` can take the outputs (not a
//!    symlink, its parent exists, outside the state and model directories, empty or absent);
//! 3. [`engine`]: the source's BLAKE3 equals the approved digest, the certificate was approved
//!    under this runner's verifier, `policy_id` recomputed from the embedded policy equals the
//!    approved one, and the verifier, run again, passes with the approved report (private
//!    ranges, calls checked, built-ins, view digest);
//! 4. [`model`]: the checkpoint's digest equals the approved one, and the checkpoint loads from
//!    the very files that were hashed;
//! 5. [`inputs`]: the inputs read as a stream, opened on the way with the runner's age identity
//!    when sealed (and refused as plaintext when the policy requires sealing), the job against the policy's
//!    limits (batch size, new tokens, output kinds, number of inputs after every line parsed), the tokenizer (the approved model directory's
//!    `tokenizer.json`, else the official Gemma 3 file checked by SHA-256), and every prompt's
//!    length in tokens after the template, each id inside the model's vocabulary;
//! 6. [`compile`]: the engine compiles for the model.
//!
//! Refusals name files, fields, line numbers and limits, never a value from the inputs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use time::OffsetDateTime;

use super::attest::{attest_run, AttestRefusal, Attester, RunEvidence};
use super::generate::{GenerateError, Generator};
use super::input_table::InputTable;
use super::inputs::{inputs_cap, Input, InputLines, InputsError, Prompt};
use super::inputs_file::{read_lines, Bounds, ReadFailure};
use super::journal::Binding as JournalBinding;
use super::openai::Endpoint;
use super::publish::output_dir_in_use;
use super::shard::Shard;
use super::spec::{JobError, JobSpec};
use super::superseded::History;
use crate::error::{Diagnose, Exit};
use crate::model::digest::{model_digest, ModelDigest, ModelDigestError};
use crate::model::tokenizer::{
    cached_tokenizer_path, Template, Tokenizer, TokenizerError, GEMMA3_TOKENIZER_SHA256,
    TOKENIZER_FILE,
};
use crate::model::weights::{Checkpoint, WeightsError};
use crate::primitives::bounded_read::{
    read_bounded, ReadError, MAX_DOCUMENT_BYTES, MAX_TEXT_BYTES, MAX_TOKENIZER_BYTES,
};
use crate::primitives::digest::Digest;
use crate::restrict::policy::{OutputKind, Policy, SealRule};
use crate::restrict::{check_bytes, Checked, CompileErrorKind, RestrictError};
use crate::sealing::{OpenError, SealKey};
use crate::trust::certificate::{CertError, Certificate, RestrictReport};
use crate::trust::config::TrustConfig;
use crate::trust::receipt::{Commitment, Committing, INPUTS_COMMITMENT_CONTEXT};
use crate::trust::shard::ShardFacts;
use crate::trust::verify::{verify_certificate, VerifiedCertificate};

/// The certificate and job file as submitted: each read once, bounded, and judged as these
/// bytes (the audit log and the receipt name their digests).
#[derive(Debug, Clone)]
pub struct Submission {
    /// The certificate file.
    pub cert_path: PathBuf,
    /// Its bytes.
    pub cert: Vec<u8>,
    /// The job file.
    pub job_path: PathBuf,
    /// Its bytes.
    pub job: Vec<u8>,
}

impl Submission {
    /// Read both files (regular files, at most [`MAX_DOCUMENT_BYTES`] and [`MAX_TEXT_BYTES`]).
    pub fn read(cert: &Path, job: &Path) -> Result<Submission, Refusal> {
        Ok(Submission {
            cert_path: cert.to_owned(),
            cert: read_bounded(cert, MAX_DOCUMENT_BYTES, "certificate")?,
            job_path: job.to_owned(),
            job: read_bounded(job, MAX_TEXT_BYTES, "job").map_err(JobError::File)?,
        })
    }

    /// The certificate digest (of its payload), when the bytes parse as a certificate at all
    /// (signatures not checked): what the audit log names.
    pub fn certificate_digest(&self) -> Option<Digest> {
        Certificate::parse(&self.cert).ok().map(|c| c.digest())
    }

    /// BLAKE3 of the job file.
    pub fn job_digest(&self) -> Digest {
        Digest::of(&self.job)
    }
}

/// What the operator asked to run, and what this runner knows.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The certificate and job file.
    pub submission: &'a Submission,
    /// The operator's trust configuration.
    pub trust: &'a TrustConfig,
    /// Certificates this runner has seen replaced, and the versions it admitted.
    pub history: &'a History,
    /// The runner's state directory (outputs may not be written into it).
    pub state_dir: &'a Path,
    /// The runner's age identity, which opens sealed inputs.
    pub seal_key: &'a SealKey,
    /// How the runner asks its hardware for evidence, when the certificate requires it.
    pub attester: Attester<'a>,
    /// The shard of the job to run (admission covers the whole job either way).
    pub shard: Option<Shard>,
    /// The time to verify at.
    pub now: OffsetDateTime,
}

/// A job that passed every check, ready to run. Only [`admit`] makes one.
pub struct Admitted {
    certificate: VerifiedCertificate,
    job: JobSpec,
    job_digest: Digest,
    inputs: InputTable,
    inputs_commitment: Commitment,
    inputs_ciphertext: Option<Digest>,
    tokenizer: Option<Tokenizer>,
    tokenizer_digest: Option<Digest>,
    generator: Generator,
    evidence: Option<RunEvidence>,
    shard: Option<Shard>,
    inputs_digest: Digest,
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
    /// The inputs, in file order, each with its prompt as token ids (template applied).
    pub fn inputs(&self) -> &InputTable {
        &self.inputs
    }
    /// The salted commitment to the plaintext inputs.
    pub fn inputs_commitment(&self) -> Commitment {
        self.inputs_commitment
    }
    /// BLAKE3 of the inputs file as received, when it was sealed.
    pub fn inputs_ciphertext(&self) -> Option<Digest> {
        self.inputs_ciphertext
    }
    /// The age recipients the outputs are sealed to (empty: plaintext outputs).
    pub fn recipients(&self) -> &[String] {
        &self.certificate.payload().recipients
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
    /// The hardware's evidence for this run, under a certificate that requires it.
    pub fn evidence(&self) -> Option<&RunEvidence> {
        self.evidence.as_ref()
    }
    /// The inputs this run covers: its shard's range, or all of them.
    pub fn range(&self) -> std::ops::Range<usize> {
        match self.shard {
            Some(s) => s.range(self.inputs.len()),
            None => 0..self.inputs.len(),
        }
    }
    /// What the receipt records of the shard, if this run is one.
    pub fn shard_facts(&self) -> Option<ShardFacts> {
        self.shard.map(|s| s.facts(self.inputs.len()))
    }
    /// What a resume journal of this run is bound to.
    pub fn journal_binding(&self, runner_key: Digest) -> JournalBinding {
        JournalBinding::new(
            self.certificate.digest(),
            self.job_digest,
            self.inputs_digest,
            self.shard.map(|s| [s.index, s.count]),
            runner_key,
        )
    }
    /// Where this run publishes: `output_dir`, or its shard's directory inside it.
    pub fn output_dir(&self) -> PathBuf {
        match self.shard {
            Some(s) => self.job.output_dir.join(s.dir_name()),
            None => self.job.output_dir.clone(),
        }
    }
}

/// Why a job was not admitted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The certificate, engine or inputs file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The certificate failed verification.
    #[error(transparent)]
    Certificate(#[from] CertError),
    /// The certificate requires attestation and the hardware did not give it.
    #[error(transparent)]
    Attestation(#[from] AttestRefusal),
    /// The certificate was replaced by a newer one.
    #[error("certificate {old} was superseded by certificate {new}")]
    Superseded {
        /// The presented certificate (short digest).
        old: String,
        /// The certificate that replaced it (short digest).
        new: String,
    },
    /// The certificate is older than one this runner admitted, or than the pinned minimum.
    #[error("certificate is version {version} of lineage {lineage:?}, but {why} version {floor}; an older certificate cannot come back")]
    RolledBack {
        /// The lineage.
        lineage: String,
        /// The certificate's version.
        version: u64,
        /// The lowest version admitted.
        floor: u64,
        /// Where the floor comes from.
        why: &'static str,
    },
    /// The job file is malformed.
    #[error(transparent)]
    Job(#[from] JobError),
    /// The job's output directory cannot take the outputs.
    #[error("job {job}: output_dir {} {problem}", path.display())]
    OutputDir {
        /// The job file.
        job: PathBuf,
        /// The output directory.
        path: PathBuf,
        /// What is wrong.
        problem: &'static str,
    },
    /// The job's output directory exists and is not empty.
    #[error("job {}: output_dir {} already exists and is not empty", job.display(), path.display())]
    OutputExists {
        /// The job file.
        job: PathBuf,
        /// The directory (a shard's, inside output_dir, when the run is one).
        path: PathBuf,
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
    #[error("job {}: `{key}` exceeds the policy limit {limit}: {found} > {max}", job.display())]
    Limit {
        /// The job file.
        job: PathBuf,
        /// The job's key (`inputs` for the number of inputs).
        key: &'static str,
        /// The policy field.
        limit: &'static str,
        /// The job's value.
        found: u64,
        /// The policy's maximum.
        max: u64,
    },
    /// A prompt is longer than the policy allows (its length is not shown: inputs are private).
    #[error("inputs {}, line {line}: the prompt is longer than the policy allows ({max} tokens after the template, limits.max_prompt_tokens)", path.display())]
    PromptTooLong {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line of the input.
        line: usize,
        /// The limit.
        max: u32,
    },
    /// A prompt holds a token id the model does not have (neither the id nor where it is in
    /// the prompt is shown).
    #[error("inputs {}, line {line}: the prompt holds a token id outside the model's vocabulary of {vocab} ids", path.display())]
    TokenOutOfVocab {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line of the input.
        line: usize,
        /// The model's `vocab_size`.
        vocab: usize,
    },
    /// The job asks for an output kind the policy does not allow.
    #[error("job {}: `{key}` asks for output {}, which the policy does not allow (outputs: {allowed})", job.display(), json_name(.kind))]
    OutputKind {
        /// The job file.
        job: PathBuf,
        /// What asks for it: `generation.outputs`, or `inputs` (an OpenAI batch's answers are
        /// text).
        key: &'static str,
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
    Tokenizer(TokenizerError),
    /// The tokenizer's vocabulary is not the one the GGUF model carries.
    #[error("tokenizer {tokenizer} does not match the vocabulary of GGUF model {model}: token {id} is {want:?} in the model and {got:?} in the tokenizer")]
    VocabularyMismatch {
        /// The tokenizer file.
        tokenizer: PathBuf,
        /// The model file.
        model: PathBuf,
        /// The first id that differs.
        id: u32,
        /// Its text in the model.
        want: String,
        /// Its text in the tokenizer.
        got: String,
    },
    /// The tokenizer has more tokens than the model has rows: it was made for another model,
    /// whose ids name other tokens, and text would come out as garbage. (Fewer is allowed: Gemma
    /// 3 4B, 12B and 27B pad the tokenizer's 262144 tokens to 262208 embedding rows.)
    #[error("tokenizer {} has {tokenizer_size} tokens but model {} has a vocabulary of only {model_size}: they were not made for each other", tokenizer.display(), model.display())]
    VocabularySize {
        /// The tokenizer file.
        tokenizer: PathBuf,
        /// The model.
        model: PathBuf,
        /// Tokens in the tokenizer's vocabulary (added tokens not counted).
        tokenizer_size: usize,
        /// The model's `vocab_size`.
        model_size: usize,
    },
    /// A prompt and its new tokens do not fit the model's context (no length is shown).
    #[error("inputs {}, line {line}: the prompt and its up to {max_new} new tokens do not fit the model's context of {context} positions (max_position_embeddings)", path.display())]
    OverContext {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line of the input.
        line: usize,
        /// The input's cap on new tokens.
        max_new: u32,
        /// The model's context.
        context: usize,
    },
    /// The job samples, and the approved engine has no `logits` entry to sample from.
    #[error("the job samples (temperature above 0) but the engine has no `logits` entry to draw tokens from; it can only run greedily")]
    NoLogitsEntry,
    /// A chat turn has a role the template does not know (the role itself is not shown).
    #[error("inputs {}, line {line}: chat turn {turn} has a role other than \"user\", \"model\", \"assistant\" or a first \"system\"", path.display())]
    ChatRole {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line of the input.
        line: usize,
        /// 0-based position of the turn.
        turn: usize,
    },
    /// An input's prompt could not be put through the template and tokenizer (the tokenizer's
    /// own message is not shown: it may quote the text).
    #[error("inputs {}, line {line}: the tokenizer could not encode the prompt", path.display())]
    Encode {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line of the input.
        line: usize,
    },
    /// The engine does not compile for the model.
    #[error(transparent)]
    Compile(Box<GenerateError>),
    /// The inputs are sealed but cannot be opened by this runner.
    #[error("inputs {} cannot be opened: {source}", path.display())]
    Sealed {
        /// The inputs file.
        path: PathBuf,
        /// Why.
        source: OpenError,
    },
    /// The inputs are plaintext and the policy requires them sealed.
    #[error("inputs {} are not sealed, and the policy requires sealed inputs", path.display())]
    Unsealed {
        /// The inputs file.
        path: PathBuf,
        /// This runner's recipient, for the hint.
        recipient: String,
    },
    /// The system's random number generator failed (the inputs commitment needs a salt).
    #[error("cannot salt the inputs commitment: the system random number generator failed")]
    NoRandomness,
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
            Refusal::Read(e) => e.exit(),
            Refusal::Certificate(e) => e.exit(),
            Refusal::Attestation(e) => e.exit(),
            Refusal::Job(e) => e.exit(),
            Refusal::Verifier(e) => e.exit(),
            Refusal::ModelDigest(e) => e.exit(),
            Refusal::Weights(e) => e.exit(),
            Refusal::Inputs(e) => e.exit(),
            Refusal::Tokenizer(e) => e.exit(),
            Refusal::Compile(e) => e.exit(),
            Refusal::NoRandomness => Exit::Failure,
            Refusal::OutputDir { .. }
            | Refusal::OutputExists { .. }
            | Refusal::NoTokenizer(_)
            | Refusal::TokenOutOfVocab { .. }
            | Refusal::ChatRole { .. }
            | Refusal::Encode { .. } => Exit::BadInput,
            Refusal::Superseded { .. }
            | Refusal::RolledBack { .. }
            | Refusal::EngineChanged { .. }
            | Refusal::VerifierVersion { .. }
            | Refusal::PolicyId { .. }
            | Refusal::NoReport
            | Refusal::ReportChanged { .. }
            | Refusal::ModelChanged { .. }
            | Refusal::Limit { .. }
            | Refusal::PromptTooLong { .. }
            | Refusal::OutputKind { .. }
            | Refusal::Sealed { .. }
            | Refusal::Unsealed { .. }
            | Refusal::TokenizerUnapproved { .. }
            | Refusal::VocabularyMismatch { .. }
            | Refusal::VocabularySize { .. } => Exit::Refused,
            Refusal::OverContext { .. } | Refusal::NoLogitsEntry => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            Refusal::Read(e) => return e.hint(),
            Refusal::Certificate(e) => return e.hint(),
            Refusal::Attestation(e) => return e.hint(),
            Refusal::Job(e) => return e.hint(),
            Refusal::Verifier(e) => return e.hint(),
            Refusal::ModelDigest(e) => return e.hint(),
            Refusal::Weights(e) => return e.hint(),
            Refusal::Inputs(e) => return e.hint(),
            Refusal::Tokenizer(e) => return e.hint(),
            Refusal::Compile(e) => return e.hint(),
            Refusal::NoRandomness => "check the system's entropy source (getrandom)".into(),
            Refusal::Unsealed { recipient, .. } => format!(
                "the owner encrypts them to this runner: age -r {recipient} -o inputs.jsonl.age \
                 inputs.jsonl (`runner identity` prints the recipient)"
            ),
            Refusal::Sealed { source, .. } => match source {
                OpenError::NotForUs { ours, .. } => format!(
                    "encrypt to `runner identity`'s recipient: age -r {ours} (a file for another \
                     runner cannot be opened here)"
                ),
                OpenError::Passphrase => "encrypt to the runner's recipient (`age -r`), not with \
                    a passphrase (`age -p`): a runner cannot be given one"
                    .into(),
                OpenError::UnknownFormat => "encrypt with age 1.x (age-encryption.org/v1)".into(),
                OpenError::TooLarge(_) => {
                    "split the job: the policy's max_inputs bounds the inputs' size".into()
                }
                OpenError::HeaderTooLarge(_) => "encrypt to the runner's recipient and at most a \
                    few hundred others (`runner identity` prints the runner's)"
                    .into(),
                _ => "the file was truncated or altered on its way; have its owner send it again"
                    .into(),
            },
            Refusal::Encode { .. } => {
                "check that the prompt is text the Gemma 3 tokenizer reads".into()
            }
            Refusal::ChatRole { .. } => "chat turns have role \"user\" or \"model\" (or \
                \"assistant\"), optionally after a first \"system\" turn"
                .into(),
            Refusal::Superseded { .. } => {
                "run with the certificate that superseded it (see `runner inspect`)".into()
            }
            Refusal::RolledBack { .. } => {
                "run with the newest certificate of the lineage (see `runner inspect`)".into()
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
            Refusal::OverContext { .. } => {
                "shorten the prompt, or lower max_new_tokens (or the request's max_tokens);                  the runner refuses the whole job rather than answer that line with an error"
                    .into()
            }
            Refusal::NoLogitsEntry => "set temperature = 0 (greedy) in the job and the inputs,                 or have the owners approve an engine with a `logits` entry (engines/gemma3.eng                 has one)"
                .into(),
            Refusal::VocabularyMismatch { .. } | Refusal::VocabularySize { .. } => {
                "use the tokenizer.json made for this model (scripts/fetch_tokenizer.sh for \
                 Gemma 3), or give only token-id inputs with outputs = [\"tokens\"]"
                    .into()
            }
            Refusal::NoTokenizer(_) | Refusal::TokenizerUnapproved { .. } => {
                "run scripts/fetch_tokenizer.sh, put tokenizer.json in the approved model \
                 directory, or give only token-id inputs with outputs = [\"tokens\"]"
                    .into()
            }
            Refusal::OutputDir { .. } => "point output_dir at a new directory whose parent \
                exists, outside the runner's state directory and the model directory"
                .into(),
            Refusal::OutputExists { .. } => {
                "choose a new output_dir in the job, or move the old results away".into()
            }
        })
    }
}

/// Check everything, then compile: the only way to an [`Admitted`] job.
pub fn admit(req: &Request<'_>) -> Result<Admitted, Refusal> {
    let cert = certificate(req)?;
    let evidence = attestation(req, &cert)?;
    let job = job_file(req, cert)?;
    let engine = engine(job)?;
    let model = model(engine)?;
    let inputs = inputs(model, req.seal_key)?;
    let mut admitted = compile(inputs)?;
    admitted.evidence = evidence;
    Ok(admitted)
}

/// Step 1b, before any input is opened: the hardware's evidence, when the certificate requires
/// it ([`super::attest`]).
pub fn attestation(
    req: &Request<'_>,
    cert: &VerifiedCertificate,
) -> Result<Option<RunEvidence>, Refusal> {
    match &cert.payload().attestation {
        Some(required) => Ok(Some(attest_run(
            &req.attester,
            required,
            cert.digest(),
            req.submission.job_digest(),
        )?)),
        None => Ok(None),
    }
}

/// Step 1: the certificate verifies and is not older than one this runner knows.
pub fn certificate(req: &Request<'_>) -> Result<VerifiedCertificate, Refusal> {
    let cert = verify_certificate(&req.submission.cert, req.trust, req.now)?;
    if let Some(newer) = req.history.replacement_of(cert.digest()) {
        return Err(Refusal::Superseded {
            old: cert.digest().short(),
            new: newer.short(),
        });
    }
    let lineage = cert.lineage().to_owned();
    let floors = [
        (
            req.history.highest.get(&lineage).copied().unwrap_or(0),
            "this runner has admitted",
        ),
        (
            req.trust.min_version(&lineage),
            "the trust configuration requires at least",
        ),
    ];
    for (floor, why) in floors {
        if cert.version() < floor {
            return Err(Refusal::RolledBack {
                lineage,
                version: cert.version(),
                floor,
                why,
            });
        }
    }
    Ok(cert)
}

/// Proof of step 2: the certificate, and a job file whose outputs can be published.
pub struct JobFile {
    cert: VerifiedCertificate,
    spec: JobSpec,
    digest: Digest,
    shard: Option<Shard>,
}

/// Step 2: the job file parses and its output directory is usable.
pub fn job_file(req: &Request<'_>, cert: VerifiedCertificate) -> Result<JobFile, Refusal> {
    let sub = req.submission;
    // Parse the bytes whose digest the receipt binds, not a second read of the file.
    let text = std::str::from_utf8(&sub.job).map_err(|_| JobError::NotText {
        path: sub.job_path.clone(),
    })?;
    let spec = JobSpec::parse(text, &sub.job_path)?;
    check_output_dir(&spec, req.state_dir, req.shard)?;
    Ok(JobFile {
        cert,
        spec,
        digest: sub.job_digest(),
        shard: req.shard,
    })
}

/// Where the outputs go must be a fresh or empty directory of its own: not a symlink (which
/// could aim the rename anywhere), under an existing parent, and not inside the runner's state
/// or the model the owners approved. Checked before any hashing: finding this out after reading
/// a multi-GiB model wastes the wait. A shard publishes into its own directory inside
/// `output_dir`, which other shards share: only the shard's directory must be unused.
fn check_output_dir(job: &JobSpec, state_dir: &Path, shard: Option<Shard>) -> Result<(), Refusal> {
    let dir = &job.output_dir;
    let bad = |problem| Refusal::OutputDir {
        job: job.path.clone(),
        path: dir.clone(),
        problem,
    };
    let Some(name) = dir.file_name() else {
        return Err(bad("names no directory (it ends in `..` or is a root)"));
    };
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(bad("is a symlink"));
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(parent) = parent.canonicalize() else {
        return Err(bad("has no existing parent directory"));
    };
    let resolved = parent.join(name);
    for (other, problem) in [
        (state_dir, "is inside the runner's state directory"),
        (job.model.as_path(), "is inside the model directory"),
    ] {
        if let Ok(other) = other.canonicalize() {
            if resolved.starts_with(&other) {
                return Err(bad(problem));
            }
        }
    }
    let target = match shard {
        Some(s) => dir.join(s.dir_name()),
        None => dir.clone(),
    };
    if output_dir_in_use(&target) {
        return Err(Refusal::OutputExists {
            job: job.path.clone(),
            path: target,
        });
    }
    Ok(())
}

/// Proof of step 3: the approved engine, verified again.
pub struct ApprovedEngine {
    job: JobFile,
    checked: Checked,
}

/// Step 3: the engine is the approved one, under this verifier and the approved policy.
pub fn engine(job: JobFile) -> Result<ApprovedEngine, Refusal> {
    let cert = &job.cert;
    let path = &job.spec.engine;
    let source = read_bounded(path, crate::restrict::MAX_SOURCE_BYTES as u64, "engine")
        .map_err(|e| job.spec.at_key("engine", e))?;
    let found = Digest::of(&source);
    if found != cert.engine().source_digest {
        return Err(Refusal::EngineChanged {
            path: path.clone(),
            expected: cert.engine().source_digest.to_hex(),
            found: found.to_hex(),
        });
    }
    if cert.verifier_version() != crate::restrict::VERIFIER_VERSION {
        return Err(Refusal::VerifierVersion {
            approved: cert.verifier_version().to_owned(),
            ours: crate::restrict::VERIFIER_VERSION.to_owned(),
        });
    }
    let policy = cert.policy();
    let recomputed = policy.policy_id();
    if recomputed.0 != cert.policy_id().0 {
        return Err(Refusal::PolicyId {
            expected: cert.policy_id().short(),
            found: recomputed.short(),
        });
    }
    let checked = check_bytes(&source, &path.display().to_string(), policy)?;
    let approved = cert.engine().restrict.as_ref().ok_or(Refusal::NoReport)?;
    compare_reports(approved, &RestrictReport::from_report(checked.report())?)?;
    Ok(ApprovedEngine { job, checked })
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

/// Proof of step 4: the approved model, loaded from the files that were hashed.
pub struct ApprovedModel {
    engine: ApprovedEngine,
    digest: ModelDigest,
    checkpoint: Checkpoint,
}

/// Step 4: the model is the approved one.
pub fn model(engine: ApprovedEngine) -> Result<ApprovedModel, Refusal> {
    let cert = &engine.job.cert;
    let dir = &engine.job.spec.model;
    // Digest before parsing: bytes the owners did not approve are refused as such (exit 3),
    // whatever is wrong with them, and never reach the safetensors parser.
    let digest = model_digest(dir).map_err(|e| engine.job.spec.at_key("model", e))?;
    if digest.digest != cert.model_digest() {
        return Err(Refusal::ModelChanged {
            path: dir.clone(),
            expected: cert.model_digest().to_hex(),
            found: digest.digest.to_hex(),
        });
    }
    // The hashed files themselves, not the paths again: the directory may have changed since.
    let checkpoint = Checkpoint::load_from(digest.checkpoint_files())?;
    Ok(ApprovedModel {
        engine,
        digest,
        checkpoint,
    })
}

/// Proof of step 5: inputs within the policy's limits, as token ids the model has.
pub struct AdmittedInputs {
    model: ApprovedModel,
    inputs: InputTable,
    inputs_commitment: Commitment,
    inputs_ciphertext: Option<Digest>,
    inputs_digest: Digest,
    tokenizer: Option<(Tokenizer, Digest)>,
}

/// Step 5: the job and its inputs within the policy's limits.
pub fn inputs(model: ApprovedModel, key: &SealKey) -> Result<AdmittedInputs, Refusal> {
    let job = &model.engine.job.spec;
    let policy = model.engine.job.cert.policy();
    let limits = &policy.limits;
    let g = &job.generation;
    for (key, limit, found, max) in [
        (
            "generation.batch_size",
            "max_batch",
            g.batch_size,
            limits.max_batch,
        ),
        (
            "generation.max_new_tokens",
            "max_new_tokens",
            g.max_new_tokens,
            limits.max_new_tokens,
        ),
    ] {
        if found > max {
            return Err(Refusal::Limit {
                job: job.path.clone(),
                key,
                limit,
                found: found.into(),
                max: max.into(),
            });
        }
    }
    for kind in &g.outputs {
        if !policy.outputs.contains(kind) {
            return Err(output_kind_refused(
                job,
                "generation.outputs",
                *kind,
                policy,
            ));
        }
    }
    let cap = inputs_cap(limits.max_inputs);
    // A sealed file is larger than its plaintext by a header and 16 bytes per 64 KiB chunk.
    let sealed_cap = cap.saturating_add(cap / 4096).saturating_add(64 << 10);
    let commitment = inputs_commitment(&model.engine.job).ok_or(Refusal::NoRandomness)?;
    // Text out (asked for, or stop strings to look for) needs the tokenizer whatever the
    // inputs; text in, an OpenAI answer or a request's stop strings load it at their line.
    let job_needs_text = g.outputs.contains(&OutputKind::Text) || !g.stop.is_empty();
    let mut tokenizer = None;
    if job_needs_text {
        tokenizer = Some(checked_tokenizer(&model)?);
    }
    let mut lines = InputLines::new(&job.inputs, job.inputs_format);
    let mut inputs = InputTable::default();
    let mut count: u64 = 0;
    let bounds = Bounds {
        sealed_required: policy.sealing.inputs == SealRule::Required,
        cap,
        sealed_cap,
    };
    let read = read_lines(
        &job.inputs,
        key,
        bounds,
        commitment,
        JOURNAL_INPUTS_CONTEXT,
        |raw| -> Result<(), Refusal> {
            let Some(mut input) = lines.next_line(raw)? else {
                return Ok(());
            };
            // An OpenAI answer is text: the owners must allow text out.
            if input.endpoint.is_some() && !policy.outputs.contains(&OutputKind::Text) {
                return Err(output_kind_refused(job, "inputs", OutputKind::Text, policy));
            }
            count += 1;
            // Past the limit the lines are still checked and counted, for the refusal.
            if count > u64::from(limits.max_inputs) {
                return Ok(());
            }
            let needs_text = !matches!(input.prompt, Prompt::Tokens(_))
                || input.endpoint.is_some()
                || !input.options.stop.is_empty();
            if needs_text && tokenizer.is_none() {
                tokenizer = Some(checked_tokenizer(&model)?);
            }
            let ids = encode_prompt(&model, &mut input, tokenizer.as_ref().map(|(t, _)| t))?;
            inputs.push(input, &ids);
            Ok(())
        },
    )
    .map_err(|e| match e {
        ReadFailure::File(e) => Refusal::from(job.at_key("inputs", e)),
        ReadFailure::Unsealed => Refusal::Unsealed {
            path: job.inputs.clone(),
            recipient: key.recipient(),
        },
        ReadFailure::Sealed(source) => Refusal::Sealed {
            path: job.inputs.clone(),
            source,
        },
        ReadFailure::Line(refusal) => refusal,
    })?;
    lines.finish()?;
    if count > u64::from(limits.max_inputs) {
        return Err(Refusal::Limit {
            job: job.path.clone(),
            key: "inputs",
            limit: "max_inputs",
            found: count,
            max: limits.max_inputs.into(),
        });
    }
    inputs.shrink_to_fit();
    Ok(AdmittedInputs {
        model,
        inputs,
        inputs_commitment: read.commitment,
        // Never published: only the runner's sealed resume journal holds it.
        inputs_digest: read.journal_digest,
        inputs_ciphertext: read.ciphertext,
        tokenizer,
    })
}

/// The context of the inputs digest the resume journal binds.
const JOURNAL_INPUTS_CONTEXT: &str = "runner journal inputs v1";

/// The tokenizer a text job uses, checked against the model's vocabulary, with its digest.
fn checked_tokenizer(model: &ApprovedModel) -> Result<(Tokenizer, Digest), Refusal> {
    let job = &model.engine.job.spec;
    let (tokenizer, digest, path) = load_tokenizer(job, &model.digest)?;
    if let Some(vocabulary) = &model.checkpoint.vocabulary {
        if let Some((id, want, got)) = tokenizer.vocabulary_mismatch(vocabulary) {
            return Err(Refusal::VocabularyMismatch {
                tokenizer: path.clone(),
                model: job.model.clone(),
                id,
                want,
                got,
            });
        }
    }
    // A GGUF model's own vocabulary is compared token by token above; a safetensors
    // checkpoint has only its size to compare. A model may have more rows than the tokenizer
    // has tokens (Gemma 3 4B, 12B and 27B pad the 262144 to 262208), never fewer.
    let model_size = model.checkpoint.config.vocab_size;
    if tokenizer.base_vocab_size() > model_size {
        return Err(Refusal::VocabularySize {
            tokenizer: path.clone(),
            model: job.model.clone(),
            tokenizer_size: tokenizer.base_vocab_size(),
            model_size,
        });
    }
    Ok((tokenizer, digest))
}

/// An input's prompt as ids, checked as its line is read rather than when its batch runs: a
/// bad id in the last input must not be found after every earlier batch has run, and the
/// refusal must name it. The prompt is taken out of the input, so a job's prompts are held
/// once, as ids (in the admitted [`InputTable`]).
fn encode_prompt(
    model: &ApprovedModel,
    input: &mut Input,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<u32>, Refusal> {
    let job = &model.engine.job.spec;
    let max = model.engine.job.cert.policy().limits.max_prompt_tokens;
    let vocab = model.checkpoint.config.vocab_size;
    let path = &job.inputs;
    let line = input.line;
    let prompt = std::mem::replace(&mut input.prompt, Prompt::Tokens(Vec::new()));
    let encoded = match (prompt, tokenizer) {
        (Prompt::Tokens(t), _) => Ok(t),
        // `/v1/completions` continues its prompt as it is, whatever the job's template.
        (Prompt::Text(text), Some(tok)) if input.endpoint == Some(Endpoint::Completions) => {
            tok.encode_prompt(&text, Template::Raw)
        }
        (Prompt::Text(text), Some(tok)) => tok.encode_prompt(&text, job.generation.template),
        (Prompt::Messages(turns), Some(tok)) => tok.encode_chat(&turns),
        (_, None) => return Err(Refusal::NoTokenizer("no tokenizer loaded".into())),
    };
    let ids = encoded.map_err(|source| match source {
        TokenizerError::Role { index, .. } => Refusal::ChatRole {
            path: path.clone(),
            line,
            turn: index,
        },
        _ => Refusal::Encode {
            path: path.clone(),
            line,
        },
    })?;
    if ids.iter().any(|&t| t as usize >= vocab) {
        return Err(Refusal::TokenOutOfVocab {
            path: path.clone(),
            line,
            vocab,
        });
    }
    if ids.len() > max as usize {
        return Err(Refusal::PromptTooLong {
            path: path.clone(),
            line,
            max,
        });
    }
    let max_new = input
        .options
        .max_tokens
        .map_or(job.generation.max_new_tokens, |m| {
            m.min(job.generation.max_new_tokens)
        });
    let context = model.checkpoint.config.max_position_embeddings;
    if ids.len() + max_new as usize > context {
        return Err(Refusal::OverContext {
            path: path.clone(),
            line,
            max_new,
            context,
        });
    }
    Ok(ids)
}

/// Step 6: the engine compiles for the model.
pub fn compile(inputs: AdmittedInputs) -> Result<Admitted, Refusal> {
    let AdmittedInputs {
        model,
        inputs,
        inputs_commitment,
        inputs_ciphertext,
        inputs_digest,
        tokenizer,
    } = inputs;
    let ApprovedModel {
        engine, checkpoint, ..
    } = model;
    let ApprovedEngine { job, checked } = engine;
    let g = &job.spec.generation;
    let samples = g.temperature > 0.0
        || inputs
            .range(0..inputs.len())
            .any(|i| i.options.temperature.unwrap_or(g.temperature) > 0.0);
    // The verified program is compiled a second time, for its `logits` entry, only to sample.
    let sampling = samples.then(|| checked.clone());
    let generator = Generator::new(checked, "main", Arc::new(checkpoint))?;
    let generator = if let Some(checked) = sampling {
        generator.with_sampling(checked).map_err(|e| match e {
            GenerateError::Compile(c) if is_missing_entry(&c.kind) => Refusal::NoLogitsEntry,
            other => other.into(),
        })?
    } else {
        generator
    };
    let shard = job.shard;
    let (tokenizer, tokenizer_digest) = match tokenizer {
        Some((t, d)) => (Some(t), Some(d)),
        None => (None, None),
    };
    Ok(Admitted {
        certificate: job.cert,
        job: job.spec,
        job_digest: job.digest,
        inputs,
        inputs_commitment,
        inputs_ciphertext,
        inputs_digest,
        tokenizer,
        tokenizer_digest,
        generator,
        evidence: None,
        shard,
    })
}

/// The salted commitment to the inputs. Every shard of a job must commit to the same value, so
/// that a merge can tell they ran the same inputs: a shard's salt is derived from the
/// certificate and job digests (public, as every receipt's salt is) instead of drawn.
fn inputs_commitment(job: &JobFile) -> Option<Committing> {
    if job.shard.is_none() {
        return Committing::new(INPUTS_COMMITMENT_CONTEXT);
    }
    let mut both = job.cert.digest().0.to_vec();
    both.extend_from_slice(&job.digest.0);
    let salt = Digest::derive(SHARD_SALT_CONTEXT, &both);
    Some(Committing::with_salt(INPUTS_COMMITMENT_CONTEXT, salt))
}

const SHARD_SALT_CONTEXT: &str = "runner shard inputs commitment salt v1";

/// Whether compiling failed for want of the entry (said outright, or withheld because the
/// engine has private regions: the label is all that is kept).
fn is_missing_entry(kind: &CompileErrorKind) -> bool {
    let missing = CompileErrorKind::NoEntry {
        name: String::new(),
    };
    match kind {
        CompileErrorKind::NoEntry { .. } => true,
        CompileErrorKind::Withheld(label) => *label == missing.label(),
        _ => false,
    }
}

/// The refusal of output `kind`, asked for by the job's `key`, which `policy` does not allow.
fn output_kind_refused(
    job: &JobSpec,
    key: &'static str,
    kind: OutputKind,
    policy: &Policy,
) -> Refusal {
    Refusal::OutputKind {
        job: job.path.clone(),
        key,
        kind,
        allowed: policy
            .outputs
            .iter()
            .map(json_name)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// How a value is spelled in job.toml and the policy (`"text"`), for messages.
fn json_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "?".into())
}

/// The tokenizer: `job.tokenizer`, else the model directory's `tokenizer.json` (bound by the
/// model digest), else the fetched cache. One outside the model directory must be the official
/// Gemma 3 file, checked by SHA-256, since the certificate does not bind it.
fn load_tokenizer(
    job: &JobSpec,
    model: &ModelDigest,
) -> Result<(Tokenizer, Digest, PathBuf), Refusal> {
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
            .checkpoint_files()
            .read(TOKENIZER_FILE)
            .map_err(WeightsError::from)?
    } else {
        read_bounded(&path, MAX_TOKENIZER_BYTES, "tokenizer").map_err(|e| match job.tokenizer {
            Some(_) => Refusal::from(job.at_key("tokenizer", e)),
            None => Refusal::from(e),
        })?
    };
    if !bound_by_model {
        let sha = ring::digest::digest(&ring::digest::SHA256, &bytes);
        let hex: String = sha.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        if hex != GEMMA3_TOKENIZER_SHA256 {
            return Err(Refusal::TokenizerUnapproved { path, found: hex });
        }
    }
    let tokenizer = Tokenizer::from_bytes(&path, &bytes).map_err(Refusal::Tokenizer)?;
    Ok((tokenizer, Digest::of(&bytes), path))
}
