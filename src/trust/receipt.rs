//! Receipts: the runner's signed statement of what it ran and what it produced.
//!
//! A receipt is a DSSE envelope ([`crate::primitives::dsse`]) with payloadType [`RECEIPT_PAYLOAD_TYPE`]
//! (`application/vnd.in-toto+json`, as the in-toto attestation framework requires for a
//! Statement) around an in-toto Statement v1 in RFC 8785 canonical JSON:
//!
//! - `subject`: the output files (by plain file name) with their digests, under `blake3` (the
//!   digest every other runner document uses) and `sha256` (the one in-toto recommends, so
//!   generic in-toto tooling can match the files too);
//! - `predicateType`: [`RECEIPT_PREDICATE_TYPE`];
//! - `predicate`: the [`RunFacts`] - which certificate, engine, policy, model, job and inputs
//!   the run used, its settings, the runner binary, times and counts.
//!
//! Reading is as strict as for certificates: duplicate keys, unknown fields and any
//! non-canonical spelling are refused, and subject names must be plain file names (no path
//! separators, no `.` or `..`), so verifying a receipt can never read outside its directory.
//!
//! [`verify_receipt`] is the check a result recipient runs; its order is in its doc comment and
//! in docs/receipts.md.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use ring::digest::{Context, SHA256};
use serde::{Deserialize, Serialize};

use super::certificate::Certificate;
use super::generation::Generation;
use super::run_attestation::RunAttestation;
use super::shard::ShardFacts;
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{open_regular, read_bounded, ReadError};
use crate::primitives::canonical::{parse_strict, to_canonical_from};
use crate::primitives::digest::Digest;
use crate::primitives::dsse::{DsseError, Envelope};
use crate::primitives::keys::{KeyId, PublicKey, SecretKey};
use crate::primitives::time::Timestamp;

/// DSSE payloadType of a receipt: the in-toto media type for a JSON Statement.
pub const RECEIPT_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// The Statement's `_type`.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The Statement's `predicateType`: names the receipt predicate's schema and version. It is an
/// identifier; nothing fetches it.
pub const RECEIPT_PREDICATE_TYPE: &str = "https://runner.dev/receipt/v2";

/// The file `runner exec` writes the receipt to, beside the outputs.
pub const RECEIPT_FILE: &str = "receipt.json";

/// The outputs file `runner exec` writes and the receipt names.
pub const OUTPUTS_FILE: &str = "outputs.jsonl";

/// Largest receipt file read, so a wrong path cannot make us read gigabytes.
pub const MAX_RECEIPT_BYTES: u64 = crate::primitives::bounded_read::MAX_DOCUMENT_BYTES;

/// Longest subject name (a file name on common filesystems).
const MAX_NAME_LEN: usize = 255;

/// A subject's digests. Both are always present and both must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestSet {
    /// BLAKE3 of the file's bytes.
    pub blake3: Digest,
    /// SHA-256 of the file's bytes (same 64-hex spelling as every digest here).
    pub sha256: Digest,
}

impl DigestSet {
    /// Both digests of `bytes`.
    pub fn of(bytes: &[u8]) -> DigestSet {
        let mut h = Hashers::new();
        h.update(bytes);
        h.finish()
    }

    /// Both digests of a file, read in chunks (outputs may be large).
    pub fn of_file(path: &Path) -> io::Result<DigestSet> {
        let mut file = open_regular(path, "output").map_err(io::Error::other)?;
        let mut h = Hashers::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok(h.finish());
            }
            h.update(buf.get(..n).unwrap_or_default());
        }
    }
}

/// Both digests of a file, computed as its bytes go by (an outputs file is written a batch at
/// a time and never held whole).
#[derive(Clone)]
pub struct Hashers {
    blake3: blake3::Hasher,
    sha256: Context,
}

impl Default for Hashers {
    fn default() -> Hashers {
        Hashers::new()
    }
}

impl Hashers {
    /// Nothing hashed yet.
    pub fn new() -> Hashers {
        Hashers {
            blake3: blake3::Hasher::new(),
            sha256: Context::new(&SHA256),
        }
    }
    /// Hash `bytes` next.
    pub fn update(&mut self, bytes: &[u8]) {
        self.blake3.update(bytes);
        self.sha256.update(bytes);
    }
    /// The digests of everything hashed.
    pub fn finish(self) -> DigestSet {
        let mut sha = [0u8; 32];
        sha.copy_from_slice(self.sha256.finish().as_ref());
        DigestSet {
            blake3: Digest(*self.blake3.finalize().as_bytes()),
            sha256: Digest(sha),
        }
    }
}

/// One output file named by the receipt (an in-toto ResourceDescriptor with name and digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// A plain file name, relative to the receipt's directory.
    pub name: String,
    /// Its digests.
    pub digest: DigestSet,
}

/// The runner binary that made the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerIdentity {
    /// `CARGO_PKG_VERSION` of the runner.
    pub version: String,
    /// BLAKE3 of the running executable's file bytes.
    pub executable_digest: Digest,
}

impl RunnerIdentity {
    /// This process: its version and the digest of `std::env::current_exe()`.
    pub fn current() -> Result<RunnerIdentity, ReceiptError> {
        let exe = std::env::current_exe().map_err(ReceiptError::Executable)?;
        let mut h = blake3::Hasher::new();
        h.update_mmap(&exe).map_err(ReceiptError::Executable)?;
        Ok(RunnerIdentity {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            executable_digest: Digest(*h.finalize().as_bytes()),
        })
    }
}

/// How many sequences ended for each reason. Every input ends exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinishReasons {
    /// Ended on a stop token (`<eos>` or `<end_of_turn>`).
    pub stop: u64,
    /// Ended by reaching `max_new_tokens`.
    pub length: u64,
}

/// Counts of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCounts {
    /// Inputs run (lines of the inputs file).
    pub inputs: u64,
    /// Tokens generated over all inputs (stop tokens included).
    pub generated_tokens: u64,
    /// Per finish reason; the reasons sum to `inputs`.
    pub finish_reasons: FinishReasons,
}

/// BLAKE3 derive-key context of the commitment to the plaintext inputs.
pub const INPUTS_COMMITMENT_CONTEXT: &str = "runner 2026-12 inputs commitment v1";
/// BLAKE3 derive-key context of the commitment to the plaintext outputs.
pub const OUTPUTS_COMMITMENT_CONTEXT: &str = "runner 2026-12 outputs commitment v1";

/// The outputs file when sealed to the certificate's recipients.
pub const SEALED_OUTPUTS_FILE: &str = "outputs.jsonl.age";

/// A salted commitment to plaintext: BLAKE3 in derive-key mode under a context of its own
/// ([`INPUTS_COMMITMENT_CONTEXT`], [`OUTPUTS_COMMITMENT_CONTEXT`]) of a random 32-byte salt
/// followed by the bytes. A plain digest of a small input (one secret token id, say) could be
/// inverted by anyone who sees it, by hashing every candidate. The audit log keeps the
/// commitment without its salt, so the log's readers cannot test guesses, and a fresh salt per
/// run keeps two runs on the same data from being linked. The salt travels in the receipt, so a
/// data owner or recipient who holds the plaintext recomputes the commitment
/// ([`Commitment::opens`]); whoever holds the receipt can test guesses too, which is why
/// receipts go only to the recipients the owners named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Commitment {
    /// The salt (32 random bytes, as 64 hex digits).
    pub salt: Digest,
    /// The commitment.
    pub commitment: Digest,
}

impl Commitment {
    /// The commitment to `bytes` under `salt`, in domain `context`.
    pub fn with_salt(context: &str, salt: Digest, bytes: &[u8]) -> Commitment {
        let mut c = Committing::with_salt(context, salt);
        c.update(bytes);
        c.finish()
    }

    /// A commitment under a fresh random salt; `None` when the system's generator fails.
    pub fn new(context: &str, bytes: &[u8]) -> Option<Commitment> {
        let mut c = Committing::new(context)?;
        c.update(bytes);
        Some(c.finish())
    }

    /// Whether `bytes` are what was committed to in domain `context`.
    pub fn opens(&self, context: &str, bytes: &[u8]) -> bool {
        Commitment::with_salt(context, self.salt, bytes) == *self
    }
}

/// A [`Commitment`] computed as the bytes go by, for plaintext that is never held whole (the
/// outputs of a long job, sealed a batch at a time).
pub struct Committing {
    salt: Digest,
    hasher: blake3::Hasher,
}

impl Committing {
    /// A commitment in domain `context` under `salt`, nothing committed yet.
    pub fn with_salt(context: &str, salt: Digest) -> Committing {
        let mut hasher = blake3::Hasher::new_derive_key(context);
        hasher.update(&salt.0);
        Committing { salt, hasher }
    }

    /// Under a fresh random salt; `None` when the system's generator fails.
    pub fn new(context: &str) -> Option<Committing> {
        use ring::rand::SecureRandom as _;
        let mut salt = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut salt).ok()?;
        Some(Committing::with_salt(context, Digest(salt)))
    }

    /// Commit to `bytes` next.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The commitment to everything given.
    pub fn finish(self) -> Commitment {
        Commitment {
            salt: self.salt,
            commitment: Digest(*self.hasher.finalize().as_bytes()),
        }
    }
}

/// Which directions of a run were sealed (the age format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    /// The inputs arrived encrypted to the runner.
    pub inputs: bool,
    /// The outputs were written encrypted to the certificate's recipients.
    pub outputs: bool,
}

/// Everything a receipt binds about one run: what `runner exec` fills in, and the receipt's
/// `predicate`. Field order is irrelevant: the bytes are RFC 8785.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFacts {
    /// The certificate digest (BLAKE3 of its payload bytes).
    pub certificate_digest: Digest,
    /// BLAKE3 of the exact engine source bytes run.
    pub engine_digest: Digest,
    /// The full `policy_id` the run was checked against.
    pub policy_id: Digest,
    /// The model digest ([`crate::model::digest`]).
    pub model_digest: Digest,
    /// BLAKE3 of the exact `job.toml` bytes.
    pub job_digest: Digest,
    /// The salted commitment to the exact plaintext inputs bytes.
    pub inputs: Commitment,
    /// BLAKE3 of the inputs file as received, when it was sealed (the digest of plaintext
    /// inputs is never written: it could be inverted by guessing).
    pub inputs_ciphertext: Option<Digest>,
    /// The salted commitment to the plaintext outputs, when they were sealed (the subjects then
    /// bind the ciphertext).
    pub outputs_commitment: Option<Commitment>,
    /// Which directions were sealed.
    pub sealed: Sealed,
    /// The job's generation settings.
    pub generation: Generation,
    /// The runner binary.
    pub runner: RunnerIdentity,
    /// When the run started (after verification, before the first model step).
    pub started_at: Timestamp,
    /// When the last output was produced.
    pub finished_at: Timestamp,
    /// Counts.
    pub counts: RunCounts,
    /// The hardware evidence of the run, under a certificate that requires it; absent (not
    /// `null`) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<RunAttestation>,
    /// The shard this run was, for a job cut into shards (`exec --shard K/N`); absent (not
    /// `null`) for a whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardFacts>,
    /// The input (0-based, in the job's numbering) a resumed run took up from, after an
    /// earlier attempt was killed; absent when it ran from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<u64>,
    /// How sampled inputs drew their tokens, when any did; absent for a greedy run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingFacts>,
}

/// What an auditor with the inputs needs to reproduce a sampled run (docs/sampling.md): an
/// input with its own `seed` uses it; any other derives its seed from `job_seed` and its index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingFacts {
    /// The scheme: `runner-sampling/1`.
    pub scheme: String,
    /// The job's seed, in decimal (JSON numbers cannot hold every 64-bit value).
    pub job_seed: String,
    /// Whether the job file gave `job_seed` or the runner drew it.
    pub seed_source: SeedSource,
    /// How many inputs of this run sampled (the others were greedy).
    pub sampled_inputs: u64,
}

/// Where a run's job seed came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedSource {
    /// `generation.seed` in the job file.
    Job,
    /// Drawn by the runner from the system's generator.
    Drawn,
}

impl RunFacts {
    /// Invariants serde cannot express.
    fn check(&self) -> Result<(), String> {
        if self.finished_at < self.started_at {
            return Err("field `finished_at` is before `started_at`".into());
        }
        let r = &self.counts.finish_reasons;
        if r.stop.checked_add(r.length) != Some(self.counts.inputs) {
            return Err(
                "field `counts.finish_reasons`: stop + length is not `counts.inputs`".into(),
            );
        }
        let v = &self.runner.version;
        if v.is_empty() || v.len() > MAX_NAME_LEN || v.chars().any(char::is_control) {
            return Err(
                "field `runner.version` is empty, too long or has control characters".into(),
            );
        }
        if self.generation.outputs.is_empty() {
            return Err("field `generation.outputs` is empty".into());
        }
        if self.sealed.inputs != self.inputs_ciphertext.is_some() {
            return Err("field `sealed.inputs` disagrees with `inputs_ciphertext`".into());
        }
        if self.sealed.outputs != self.outputs_commitment.is_some() {
            return Err("field `sealed.outputs` disagrees with `outputs_commitment`".into());
        }
        if let Some(s) = &self.shard {
            if !s.is_consistent() {
                return Err(
                    "field `shard`: the range is not shard `index` of `count` over \
                     `inputs_total` inputs"
                        .into(),
                );
            }
            if s.end - s.start != self.counts.inputs {
                return Err("field `shard`: the range's length is not `counts.inputs`".into());
            }
        }
        if let Some(at) = self.resumed_at {
            let (start, end) = self
                .shard
                .map_or((0, self.counts.inputs), |s| (s.start, s.end));
            if at <= start || at > end {
                return Err("field `resumed_at` is not inside the run's inputs".into());
            }
        }
        Ok(())
    }
}

/// The receipt's Statement: its subjects and its predicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptStatement {
    /// Output files, sorted by name, names unique.
    pub subjects: Vec<Subject>,
    /// The run.
    pub facts: RunFacts,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatementJson {
    #[serde(rename = "_type")]
    statement_type: String,
    subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    predicate_type: String,
    predicate: RunFacts,
}

/// What is wrong with one output file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputProblem {
    /// No such file.
    Missing {
        /// The subject name.
        name: String,
    },
    /// The file's bytes are not the ones the receipt names.
    Differs {
        /// The subject name.
        name: String,
        /// BLAKE3 the receipt names.
        expected: Digest,
        /// BLAKE3 of the file on disk.
        found: Digest,
    },
    /// The path is not a regular file, or it could not be read.
    Unreadable {
        /// The subject name.
        name: String,
        /// The I/O error or what the path is instead.
        why: String,
    },
}

impl std::fmt::Display for OutputProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputProblem::Missing { name } => write!(f, "{name} is missing"),
            OutputProblem::Differs {
                name,
                expected,
                found,
            } => write!(
                f,
                "{name} differs from the receipt (blake3 {} on disk, {} in the receipt)",
                found.short(),
                expected.short()
            ),
            OutputProblem::Unreadable { name, why } => write!(f, "{name} cannot be read: {why}"),
        }
    }
}

/// Why a receipt was not made, read, or accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The receipt file could not be read.
    #[error(transparent)]
    File(ReadError),
    /// The DSSE envelope is malformed.
    #[error(transparent)]
    Envelope(#[from] DsseError),
    /// The envelope holds something other than an in-toto Statement.
    #[error("payloadType is {found:?}, not a receipt ({RECEIPT_PAYLOAD_TYPE:?})")]
    WrongPayloadType {
        /// The payloadType found.
        found: String,
    },
    /// A receipt has exactly one signature, the runner's.
    #[error("the receipt has {0} signatures; a receipt carries exactly one, the runner's")]
    SignatureCount(usize),
    /// The signature names a key other than the runner key given.
    #[error("the receipt is signed by key {}, not by runner key {}", .found.to_hex(), .expected.to_hex())]
    OtherSigner {
        /// The runner key the caller trusts.
        expected: KeyId,
        /// The key id the signature names.
        found: KeyId,
    },
    /// The runner key's signature does not verify (deliberately without detail).
    #[error("the receipt's signature by runner key {} does not verify", .key_id.to_hex())]
    BadSignature {
        /// The runner key.
        key_id: KeyId,
    },
    /// The Statement is not a well-formed receipt.
    #[error("the receipt statement is malformed: {0}")]
    Payload(String),
    /// A well-formed in-toto Statement, but of another predicate type.
    #[error("predicateType is {found:?}, not a runner receipt ({RECEIPT_PREDICATE_TYPE:?})")]
    WrongPredicateType {
        /// The predicateType found.
        found: String,
    },
    /// A subject name is not a plain file name.
    #[error("subject name {name:?} is not a plain file name (no `/`, `\\`, `.`, `..` or control characters)")]
    UnsafeSubjectName {
        /// The name (control characters escaped by `{:?}`).
        name: String,
    },
    /// The receipt is for another certificate.
    #[error("the receipt is bound to certificate {}, not to the given certificate {}", .receipt.to_hex(), .certificate.to_hex())]
    OtherCertificate {
        /// The certificate digest in the receipt.
        receipt: Digest,
        /// The digest of the certificate given.
        certificate: Digest,
    },
    /// The receipt names the certificate but disagrees with what it approves.
    #[error("the receipt's `{field}` is {}, but the certificate approves {}", .receipt.to_hex(), .certificate.to_hex())]
    Inconsistent {
        /// The predicate field.
        field: &'static str,
        /// The value in the receipt.
        receipt: Digest,
        /// The value in the certificate.
        certificate: Digest,
    },
    /// The run recorded is outside the certificate's policy.
    #[error("the receipt records a run outside the certificate's policy: {0}")]
    OutsidePolicy(String),
    /// Output files on disk do not match the subjects.
    #[error("outputs in {} do not match the receipt: {}", dir.display(), join_problems(.problems))]
    Outputs {
        /// The directory checked.
        dir: PathBuf,
        /// Each problem, in subject order.
        problems: Vec<OutputProblem>,
    },
    /// Two outputs given to [`sign_receipt`] share a name.
    #[error("output name {0:?} is given twice")]
    DuplicateOutput(String),
    /// The running executable could not be hashed.
    #[error("cannot hash the runner executable: {0}")]
    Executable(io::Error),
    /// The facts cannot be written as canonical JSON (a count beyond 2^53) or break an invariant.
    #[error("cannot write the receipt: {0}")]
    Unwritable(String),
}

fn join_problems(problems: &[OutputProblem]) -> String {
    let parts: Vec<String> = problems.iter().map(ToString::to_string).collect();
    parts.join("; ")
}

impl Diagnose for ReceiptError {
    fn exit(&self) -> Exit {
        match self {
            ReceiptError::File(e) => e.exit(),
            ReceiptError::SignatureCount(_)
            | ReceiptError::Payload(_)
            | ReceiptError::DuplicateOutput(_) => Exit::BadInput,
            ReceiptError::Envelope(e) => e.exit(),
            ReceiptError::Executable(_) | ReceiptError::Unwritable(_) => Exit::Failure,
            _ => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ReceiptError::File(_) => {
                "pass the receipt.json that `runner exec` wrote beside the outputs".into()
            }
            ReceiptError::Envelope(e) => return e.hint(),
            ReceiptError::WrongPayloadType { .. } | ReceiptError::WrongPredicateType { .. } => {
                "this file is another kind of signed document; pass a receipt.json".into()
            }
            ReceiptError::SignatureCount(_) | ReceiptError::Payload(_) => {
                "the receipt is damaged; get an unmodified copy from the runner operator".into()
            }
            ReceiptError::OtherSigner { .. } => "pass the public key of the runner that made this \
                receipt (--runner-key), or get the receipt from the runner you trust"
                .into(),
            ReceiptError::BadSignature { .. } => "the receipt was altered after signing; get an \
                unmodified copy from the runner operator"
                .into(),
            ReceiptError::UnsafeSubjectName { .. } => {
                "do not trust this receipt: it names files outside its directory".into()
            }
            ReceiptError::OtherCertificate { .. } => {
                "pass the certificate the job ran under (--cert)".into()
            }
            ReceiptError::Inconsistent { .. } | ReceiptError::OutsidePolicy(_) => {
                "do not trust this receipt; report it to the runner operator".into()
            }
            ReceiptError::Outputs { .. } => "the outputs were changed, moved or removed after the \
                run; get unmodified copies, or pass their directory with --outputs"
                .into(),
            ReceiptError::DuplicateOutput(_) => "give each output a distinct file name".into(),
            ReceiptError::Executable(_) => {
                "the runner must be able to read its own executable to name it in receipts".into()
            }
            ReceiptError::Unwritable(_) => return None,
        })
    }
}

/// Check a subject name: one normal path component, printable, at most 255 bytes.
pub fn check_subject_name(name: &str) -> Result<(), ReceiptError> {
    let unsafe_name = || ReceiptError::UnsafeSubjectName {
        name: name.to_owned(),
    };
    let mut components = Path::new(name).components();
    let single = matches!(
        (components.next(), components.next()),
        (Some(Component::Normal(c)), None) if c == name
    );
    if !single
        || name.len() > MAX_NAME_LEN
        || name.contains(['/', '\\'])
        || name.chars().any(char::is_control)
    {
        return Err(unsafe_name());
    }
    Ok(())
}

impl ReceiptStatement {
    /// The RFC 8785 bytes that are signed.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ReceiptError> {
        let json = StatementJson {
            statement_type: STATEMENT_TYPE.into(),
            subject: self.subjects.clone(),
            predicate_type: RECEIPT_PREDICATE_TYPE.into(),
            predicate: self.facts.clone(),
        };
        to_canonical_from(&json).map_err(|e| ReceiptError::Unwritable(e.to_string()))
    }

    /// Parse Statement bytes strictly (see the module doc).
    pub fn from_bytes(bytes: &[u8]) -> Result<ReceiptStatement, ReceiptError> {
        let value = parse_strict(bytes).map_err(|e| ReceiptError::Payload(e.to_string()))?;
        // Look at the type fields first, so another kind of Statement is named as such rather
        // than reported as a list of unknown fields.
        if let Some(found) = value.get("_type") {
            if found != STATEMENT_TYPE {
                return Err(ReceiptError::Payload(format!(
                    "field `_type` is {found}, expected {STATEMENT_TYPE:?}"
                )));
            }
        }
        if let Some(found) = value.get("predicateType").and_then(|v| v.as_str()) {
            if found != RECEIPT_PREDICATE_TYPE {
                return Err(ReceiptError::WrongPredicateType {
                    found: found.to_owned(),
                });
            }
        }
        let json: StatementJson =
            serde_json::from_value(value).map_err(|e| ReceiptError::Payload(e.to_string()))?;
        let statement = ReceiptStatement {
            subjects: json.subject,
            facts: json.predicate,
        };
        statement.check()?;
        if statement.to_bytes()? != bytes {
            return Err(ReceiptError::Payload(
                "it is not in canonical form (RFC 8785)".into(),
            ));
        }
        Ok(statement)
    }

    fn check(&self) -> Result<(), ReceiptError> {
        if self.subjects.is_empty() {
            return Err(ReceiptError::Payload("field `subject` is empty".into()));
        }
        for s in &self.subjects {
            check_subject_name(&s.name)?;
        }
        if self.subjects.windows(2).any(|w| match w {
            [a, b] => a.name >= b.name,
            _ => false,
        }) {
            return Err(ReceiptError::Payload(
                "field `subject` is not sorted by name, or names a file twice".into(),
            ));
        }
        self.facts.check().map_err(ReceiptError::Payload)
    }
}

/// The subjects for output files given by name and exact bytes: names checked (plain file
/// names, each once), digests computed, sorted by name. `exec` can record the same list in the
/// audit log ([`crate::job::audit::AuditRecord::accepted`]).
pub fn subjects_of(outputs: &[(&str, &[u8])]) -> Result<Vec<Subject>, ReceiptError> {
    let digests: Vec<(&str, DigestSet)> = outputs
        .iter()
        .map(|(name, bytes)| (*name, DigestSet::of(bytes)))
        .collect();
    subjects_of_digests(&digests)
}

/// [`subjects_of`] for files whose digests were computed as they were written.
pub fn subjects_of_digests(outputs: &[(&str, DigestSet)]) -> Result<Vec<Subject>, ReceiptError> {
    let mut subjects = Vec::with_capacity(outputs.len());
    for (name, digest) in outputs {
        check_subject_name(name)?;
        subjects.push(Subject {
            name: (*name).to_owned(),
            digest: *digest,
        });
    }
    subjects.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some([a, _]) = subjects
        .windows(2)
        .find(|w| matches!(w, [a, b] if a.name == b.name))
    {
        return Err(ReceiptError::DuplicateOutput(a.name.clone()));
    }
    Ok(subjects)
}

/// Sign a receipt for a run: `outputs` are the output files' names (plain file names, relative
/// to the directory the receipt is written to) and exact bytes. Returns the receipt file bytes.
pub fn sign_receipt(
    facts: &RunFacts,
    outputs: &[(&str, &[u8])],
    key: &SecretKey,
) -> Result<Vec<u8>, ReceiptError> {
    sign_receipt_of(facts, subjects_of(outputs)?, key)
}

/// [`sign_receipt`] for subjects already made ([`subjects_of_digests`]).
pub fn sign_receipt_of(
    facts: &RunFacts,
    subjects: Vec<Subject>,
    key: &SecretKey,
) -> Result<Vec<u8>, ReceiptError> {
    let statement = ReceiptStatement {
        subjects,
        facts: facts.clone(),
    };
    statement.check().map_err(|e| match e {
        ReceiptError::Payload(m) => ReceiptError::Unwritable(m),
        other => other,
    })?;
    let mut envelope = Envelope::new(RECEIPT_PAYLOAD_TYPE, statement.to_bytes()?);
    envelope.sign(key)?;
    Ok(envelope.to_bytes())
}

/// A well-formed receipt whose signature has NOT been checked (for fuzzing and display);
/// trust only a [`VerifiedReceipt`].
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The envelope.
    pub envelope: Envelope,
    /// The parsed Statement.
    pub statement: ReceiptStatement,
}

impl Receipt {
    /// Parse receipt file bytes: envelope, payloadType, Statement. No signature check.
    pub fn parse(bytes: &[u8]) -> Result<Receipt, ReceiptError> {
        let envelope = parse_envelope(bytes)?;
        let statement = ReceiptStatement::from_bytes(&envelope.payload)?;
        Ok(Receipt {
            envelope,
            statement,
        })
    }
}

fn parse_envelope(bytes: &[u8]) -> Result<Envelope, ReceiptError> {
    let envelope = Envelope::parse(bytes)?;
    if envelope.payload_type != RECEIPT_PAYLOAD_TYPE {
        return Err(ReceiptError::WrongPayloadType {
            found: envelope.payload_type,
        });
    }
    if envelope.signatures.len() != 1 {
        return Err(ReceiptError::SignatureCount(envelope.signatures.len()));
    }
    Ok(envelope)
}

/// A receipt that passed every check. Only [`verify_receipt`] makes one.
#[derive(Debug, Clone)]
pub struct VerifiedReceipt {
    statement: ReceiptStatement,
    digest: Digest,
    signer: KeyId,
    outputs_dir: Option<PathBuf>,
}

impl VerifiedReceipt {
    /// The output files and their digests.
    pub fn subjects(&self) -> &[Subject] {
        &self.statement.subjects
    }
    /// What the run used and did.
    pub fn facts(&self) -> &RunFacts {
        &self.statement.facts
    }
    /// BLAKE3 of the Statement bytes (names this receipt).
    pub fn digest(&self) -> Digest {
        self.digest
    }
    /// The runner key that signed it.
    pub fn signer(&self) -> KeyId {
        self.signer
    }
    /// The directory whose files were checked against the subjects, if any.
    pub fn outputs_dir(&self) -> Option<&Path> {
        self.outputs_dir.as_deref()
    }
}

/// Verify receipt file bytes. In order, the first failure reported:
/// 1. the envelope is well-formed, its payloadType is [`RECEIPT_PAYLOAD_TYPE`] and it has one
///    signature;
/// 2. that signature names `runner_key` and verifies (opaque on failure);
/// 3. the Statement is well-formed (strict, canonical, plain subject names) and is a receipt;
/// 4. it is bound to `cert` (certificate digest), agrees with what `cert` approves (engine,
///    policy_id, model) and stays within its policy's limits;
/// 5. when `outputs_dir` is given, every subject file there has the receipt's digests (every
///    differing, missing or unreadable file is named).
pub fn verify_receipt(
    receipt_bytes: &[u8],
    cert: &Certificate,
    runner_key: &PublicKey,
    outputs_dir: Option<&Path>,
) -> Result<VerifiedReceipt, ReceiptError> {
    let envelope = parse_envelope(receipt_bytes)?;
    let expected = runner_key.key_id();
    let sig = envelope
        .signatures
        .first()
        .ok_or(ReceiptError::SignatureCount(0))?;
    if sig.keyid != expected {
        return Err(ReceiptError::OtherSigner {
            expected,
            found: sig.keyid,
        });
    }
    if !envelope.verify_signature(sig, runner_key) {
        return Err(ReceiptError::BadSignature { key_id: expected });
    }
    let statement = ReceiptStatement::from_bytes(&envelope.payload)?;
    check_against_certificate(&statement.facts, cert)?;
    if let Some(dir) = outputs_dir {
        check_outputs(&statement.subjects, dir)?;
    }
    Ok(VerifiedReceipt {
        digest: Digest::of(&envelope.payload),
        statement,
        signer: expected,
        outputs_dir: outputs_dir.map(Path::to_owned),
    })
}

fn check_against_certificate(facts: &RunFacts, cert: &Certificate) -> Result<(), ReceiptError> {
    if facts.certificate_digest != cert.digest() {
        return Err(ReceiptError::OtherCertificate {
            receipt: facts.certificate_digest,
            certificate: cert.digest(),
        });
    }
    let p = cert.payload();
    for (field, receipt, certificate) in [
        ("engine_digest", facts.engine_digest, p.engine.source_digest),
        ("policy_id", facts.policy_id, p.policy_id),
        ("model_digest", facts.model_digest, p.model_digest),
    ] {
        if receipt != certificate {
            return Err(ReceiptError::Inconsistent {
                field,
                receipt,
                certificate,
            });
        }
    }
    let limits = &p.policy.limits;
    let g = &facts.generation;
    let outside = |what: String| Err(ReceiptError::OutsidePolicy(what));
    if g.batch_size > limits.max_batch {
        return outside(format!(
            "batch_size {} exceeds max_batch {}",
            g.batch_size, limits.max_batch
        ));
    }
    if g.max_new_tokens > limits.max_new_tokens {
        return outside(format!(
            "max_new_tokens {} exceeds the limit {}",
            g.max_new_tokens, limits.max_new_tokens
        ));
    }
    if facts.counts.inputs > u64::from(limits.max_inputs) {
        return outside(format!(
            "{} inputs exceed max_inputs {}",
            facts.counts.inputs, limits.max_inputs
        ));
    }
    if let Some(kind) = g.outputs.iter().find(|k| !p.policy.outputs.contains(k)) {
        return outside(format!("output kind {kind:?} is not allowed"));
    }
    let most = facts
        .counts
        .inputs
        .saturating_mul(u64::from(g.max_new_tokens));
    if facts.counts.generated_tokens > most {
        return outside(format!(
            "{} generated tokens exceed inputs x max_new_tokens ({most})",
            facts.counts.generated_tokens
        ));
    }
    Ok(())
}

fn check_outputs(subjects: &[Subject], dir: &Path) -> Result<(), ReceiptError> {
    let mut problems = Vec::new();
    for s in subjects {
        let path = dir.join(&s.name);
        let name = s.name.clone();
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                problems.push(OutputProblem::Missing { name });
                continue;
            }
            Err(e) => {
                problems.push(OutputProblem::Unreadable {
                    name,
                    why: e.to_string(),
                });
                continue;
            }
            Ok(m) if !m.is_file() => {
                problems.push(OutputProblem::Unreadable {
                    name,
                    why: "it is not a regular file".into(),
                });
                continue;
            }
            Ok(_) => {}
        }
        match DigestSet::of_file(&path) {
            Ok(found) if found == s.digest => {}
            Ok(found) => problems.push(OutputProblem::Differs {
                name,
                expected: s.digest.blake3,
                found: found.blake3,
            }),
            Err(e) => problems.push(OutputProblem::Unreadable {
                name,
                why: e.to_string(),
            }),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ReceiptError::Outputs {
            dir: dir.to_owned(),
            problems,
        })
    }
}

/// Read a receipt file, refusing anything larger than [`MAX_RECEIPT_BYTES`].
pub fn read_receipt_file(path: &Path) -> Result<Vec<u8>, ReceiptError> {
    read_bounded(path, MAX_RECEIPT_BYTES, "receipt").map_err(ReceiptError::File)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tokenizer::Template;
    use crate::primitives::canonical::to_canonical;
    use crate::restrict::policy::{OutputKind, Policy};
    use crate::trust::certificate::{build_payload, EngineFacts, Terms, CERTIFICATE_PAYLOAD_TYPE};
    use serde_json::Value;

    const OUTPUT: &[u8] = b"{\"id\":\"a\",\"text\":\"hello\"}\n";

    type Edit = fn(&mut RunFacts);

    struct Fx {
        runner: SecretKey,
        cert: Certificate,
        facts: RunFacts,
        dir: tempfile::TempDir,
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_canonical(s).unwrap()
    }

    fn certificate(note: Option<&str>) -> Certificate {
        let owner = SecretKey::generate().unwrap();
        let payload = build_payload(
            EngineFacts {
                name: "gemma3".into(),
                source_digest: Digest::of(b"engine source"),
                restrict: None,
            },
            Terms {
                policy: Policy::load(Path::new("policies/gemma3.json")).unwrap(),
                model_digest: Digest::of(b"model"),
                issued_at: ts("2026-11-01T00:00:00Z"),
                valid_from: None,
                expires_at: None,
                supersedes: None,
                lineage: "gemma3".into(),
                version: 1,
                recipients: vec![crate::sealing::SealKey::generate().recipient()],
                note: note.map(str::to_owned),
                attestation: None,
            },
        )
        .unwrap();
        Certificate::sign_new(payload, &owner).unwrap()
    }

    fn fx() -> Fx {
        let cert = certificate(None);
        let p = cert.payload();
        let facts = RunFacts {
            certificate_digest: cert.digest(),
            engine_digest: p.engine.source_digest,
            policy_id: p.policy_id,
            model_digest: p.model_digest,
            job_digest: Digest::of(b"job.toml"),
            inputs: Commitment::with_salt(
                INPUTS_COMMITMENT_CONTEXT,
                Digest::of(b"salt"),
                b"inputs.jsonl",
            ),
            inputs_ciphertext: None,
            outputs_commitment: None,
            sealed: Sealed {
                inputs: false,
                outputs: false,
            },
            generation: Generation {
                batch_size: 8,
                max_new_tokens: 32,
                template: Template::Chat,
                outputs: vec![OutputKind::Text, OutputKind::Tokens],
                ..Generation::default()
            },
            runner: RunnerIdentity {
                version: "0.1.0".into(),
                executable_digest: Digest::of(b"runner"),
            },
            started_at: ts("2026-11-02T10:00:00Z"),
            finished_at: ts("2026-11-02T10:00:07Z"),
            counts: RunCounts {
                inputs: 3,
                generated_tokens: 40,
                finish_reasons: FinishReasons { stop: 2, length: 1 },
            },
            attestation: None,
            shard: None,
            resumed_at: None,
            sampling: None,
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(OUTPUTS_FILE), OUTPUT).unwrap();
        Fx {
            runner: SecretKey::generate().unwrap(),
            cert,
            facts,
            dir,
        }
    }

    impl Fx {
        fn receipt(&self) -> Vec<u8> {
            sign_receipt(&self.facts, &[(OUTPUTS_FILE, OUTPUT)], &self.runner).unwrap()
        }
        fn verify(&self, bytes: &[u8]) -> Result<VerifiedReceipt, ReceiptError> {
            verify_receipt(
                bytes,
                &self.cert,
                &self.runner.public_key(),
                Some(self.dir.path()),
            )
        }
        fn statement(&self) -> Value {
            let env = Envelope::parse(&self.receipt()).unwrap();
            serde_json::from_slice(&env.payload).unwrap()
        }
        /// Statement bytes as given, signed by the runner key, as a receipt file.
        fn signed(&self, payload: &[u8]) -> Vec<u8> {
            let mut env = Envelope::new(RECEIPT_PAYLOAD_TYPE, payload.to_vec());
            env.sign(&self.runner).unwrap();
            env.to_bytes()
        }
        fn signed_value(&self, v: &Value) -> Vec<u8> {
            self.signed(&to_canonical(v).unwrap())
        }
    }

    fn refused(r: Result<VerifiedReceipt, ReceiptError>) -> ReceiptError {
        let e = r.unwrap_err();
        assert_eq!(e.exit(), Exit::Refused, "{e}");
        e
    }

    fn malformed(r: Result<VerifiedReceipt, ReceiptError>) -> ReceiptError {
        let e = r.unwrap_err();
        assert_eq!(e.exit(), Exit::BadInput, "{e}");
        e
    }

    #[test]
    fn signs_an_in_toto_statement_and_verifies() {
        let f = fx();
        let bytes = f.receipt();
        let v = f.verify(&bytes).unwrap();
        assert_eq!(v.facts(), &f.facts);
        assert_eq!(v.signer(), f.runner.key_id());
        assert_eq!(v.outputs_dir(), Some(f.dir.path()));
        assert_eq!(v.subjects().len(), 1);
        assert_eq!(v.subjects()[0].name, OUTPUTS_FILE);
        assert_eq!(v.subjects()[0].digest.blake3, Digest::of(OUTPUT));

        let env = Envelope::parse(&bytes).unwrap();
        assert_eq!(env.payload_type, "application/vnd.in-toto+json");
        assert_eq!(v.digest(), Digest::of(&env.payload));
        let s = f.statement();
        assert_eq!(s["_type"], "https://in-toto.io/Statement/v1");
        assert_eq!(s["predicateType"], RECEIPT_PREDICATE_TYPE);
        assert_eq!(s["subject"][0]["name"], OUTPUTS_FILE);
        assert_eq!(
            s["predicate"]["certificate_digest"],
            f.cert.digest().to_hex()
        );
        assert_eq!(s["predicate"]["generation"]["template"], "chat");
        assert_eq!(s["predicate"]["counts"]["finish_reasons"]["stop"], 2);
        // Without an outputs directory, only the document is checked.
        std::fs::remove_file(f.dir.path().join(OUTPUTS_FILE)).unwrap();
        assert!(verify_receipt(&bytes, &f.cert, &f.runner.public_key(), None).is_ok());
    }

    #[test]
    fn subject_digests_are_blake3_and_sha256_of_the_bytes() {
        let d = DigestSet::of(b"abc");
        // FIPS 180-2 SHA-256("abc") and the BLAKE3 test vector for "abc".
        assert_eq!(
            d.sha256.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(d.blake3, Digest::of(b"abc"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &big).unwrap();
        assert_eq!(DigestSet::of_file(&path).unwrap(), DigestSet::of(&big));
    }

    #[test]
    fn rejects_changed_output_byte() {
        let f = fx();
        let mut changed = OUTPUT.to_vec();
        changed[10] ^= 1;
        std::fs::write(f.dir.path().join(OUTPUTS_FILE), &changed).unwrap();
        let e = refused(f.verify(&f.receipt()));
        match &e {
            ReceiptError::Outputs { problems, .. } => assert_eq!(
                problems,
                &[OutputProblem::Differs {
                    name: OUTPUTS_FILE.into(),
                    expected: Digest::of(OUTPUT),
                    found: Digest::of(&changed),
                }]
            ),
            other => panic!("{other}"),
        }
        assert!(
            e.to_string()
                .contains("outputs.jsonl differs from the receipt"),
            "{e}"
        );
    }

    #[test]
    fn rejects_missing_output_file_naming_each_problem() {
        let f = fx();
        std::fs::write(f.dir.path().join("b.jsonl"), b"b").unwrap();
        let bytes = sign_receipt(
            &f.facts,
            &[(OUTPUTS_FILE, OUTPUT), ("b.jsonl", b"b")],
            &f.runner,
        )
        .unwrap();
        std::fs::remove_file(f.dir.path().join(OUTPUTS_FILE)).unwrap();
        std::fs::write(f.dir.path().join("b.jsonl"), b"B").unwrap();
        let e = refused(f.verify(&bytes));
        let text = e.to_string();
        assert!(
            matches!(&e, ReceiptError::Outputs { problems, .. } if problems.len() == 2),
            "{e}"
        );
        assert!(text.contains("outputs.jsonl is missing"), "{text}");
        assert!(text.contains("b.jsonl differs"), "{text}");
    }

    #[test]
    fn rejects_output_that_is_a_directory() {
        let f = fx();
        std::fs::remove_file(f.dir.path().join(OUTPUTS_FILE)).unwrap();
        std::fs::create_dir(f.dir.path().join(OUTPUTS_FILE)).unwrap();
        let e = refused(f.verify(&f.receipt()));
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn rejects_changed_payload() {
        let f = fx();
        let mut env = Envelope::parse(&f.receipt()).unwrap();
        let text = String::from_utf8(env.payload.clone()).unwrap();
        env.payload = text
            .replace("\"generated_tokens\":40", "\"generated_tokens\":41")
            .into_bytes();
        assert_ne!(env.payload, text.as_bytes());
        let e = refused(f.verify(&env.to_bytes()));
        assert!(
            matches!(e, ReceiptError::BadSignature { key_id } if key_id == f.runner.key_id()),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "the receipt's signature by runner key {} does not verify",
                f.runner.key_id().to_hex()
            )
        );
    }

    #[test]
    fn rejects_other_certificate() {
        let f = fx();
        // Same engine, policy and model, approved again: another certificate.
        let other = certificate(Some("re-approved"));
        assert_ne!(other.digest(), f.cert.digest());
        let e = refused(verify_receipt(
            &f.receipt(),
            &other,
            &f.runner.public_key(),
            Some(f.dir.path()),
        ));
        assert!(
            matches!(e, ReceiptError::OtherCertificate { receipt, certificate }
                if receipt == f.cert.digest() && certificate == other.digest()),
            "{e}"
        );
    }

    #[test]
    fn rejects_other_runner_key() {
        let f = fx();
        let other = SecretKey::generate().unwrap();
        let e = refused(verify_receipt(
            &f.receipt(),
            &f.cert,
            &other.public_key(),
            Some(f.dir.path()),
        ));
        assert!(
            matches!(e, ReceiptError::OtherSigner { expected, found }
                if expected == other.key_id() && found == f.runner.key_id()),
            "{e}"
        );
        // A signature relabelled with the trusted key's id still fails, without detail.
        let mut env = Envelope::parse(&f.receipt()).unwrap();
        env.signatures[0].keyid = other.key_id();
        let e = refused(verify_receipt(
            &env.to_bytes(),
            &f.cert,
            &other.public_key(),
            None,
        ));
        assert!(matches!(e, ReceiptError::BadSignature { .. }), "{e}");
    }

    #[test]
    fn rejects_duplicate_key_in_statement_and_envelope() {
        let f = fx();
        let payload = Envelope::parse(&f.receipt()).unwrap().payload;
        let text = String::from_utf8(payload).unwrap();
        let dup = text.replacen("\"predicate\":{", "\"predicate\":{\"policy_id\":\"00\",", 1);
        let e = malformed(f.verify(&f.signed(dup.as_bytes())));
        assert!(
            matches!(&e, ReceiptError::Payload(m) if m.contains("duplicate key `policy_id`")),
            "{e}"
        );
        let file = String::from_utf8(f.receipt()).unwrap();
        let dup = file.replacen("{\"payload\"", "{\"payloadType\":\"x\",\"payload\"", 1);
        let e = malformed(f.verify(dup.as_bytes()));
        assert!(
            matches!(&e, ReceiptError::Envelope(DsseError::NotJson(m)) if m.contains("duplicate key")),
            "{e}"
        );
    }

    #[test]
    fn rejects_unknown_fields_and_non_canonical_statement() {
        let f = fx();
        let mut v = f.statement();
        v["predicate"]["comment"] = "hi".into();
        let e = malformed(f.verify(&f.signed_value(&v)));
        assert!(
            matches!(&e, ReceiptError::Payload(m) if m.contains("unknown field `comment`")),
            "{e}"
        );
        let mut v = f.statement();
        v["subject"][0]["digest"]["md5"] = "00".into();
        let e = malformed(f.verify(&f.signed_value(&v)));
        assert!(
            matches!(&e, ReceiptError::Payload(m) if m.contains("unknown field `md5`")),
            "{e}"
        );
        let pretty = serde_json::to_vec_pretty(&f.statement()).unwrap();
        let e = malformed(f.verify(&f.signed(&pretty)));
        assert!(
            matches!(&e, ReceiptError::Payload(m) if m.contains("canonical")),
            "{e}"
        );
    }

    #[test]
    fn rejects_subject_names_that_are_not_plain_file_names() {
        let f = fx();
        for name in [
            "../outputs.jsonl",
            "a/b",
            "/etc/passwd",
            "..",
            ".",
            "",
            "a\\b",
            "x\ny",
        ] {
            let e = sign_receipt(&f.facts, &[(name, b"x")], &f.runner).unwrap_err();
            assert!(
                matches!(&e, ReceiptError::UnsafeSubjectName { name: n } if n == name),
                "{name:?}: {e}"
            );
            let mut v = f.statement();
            v["subject"][0]["name"] = name.into();
            let e = refused(f.verify(&f.signed_value(&v)));
            assert!(
                matches!(&e, ReceiptError::UnsafeSubjectName { .. }),
                "{name:?}: {e}"
            );
        }
        assert!(check_subject_name(".hidden").is_ok());
        assert!(check_subject_name("a..b").is_ok());
    }

    #[test]
    fn rejects_duplicate_or_unsorted_subjects() {
        let f = fx();
        let e = sign_receipt(&f.facts, &[("a", b"1"), ("a", b"2")], &f.runner).unwrap_err();
        assert!(
            matches!(&e, ReceiptError::DuplicateOutput(n) if n == "a"),
            "{e}"
        );
        let bytes = sign_receipt(&f.facts, &[("b", b"1"), ("a", b"2")], &f.runner).unwrap();
        let payload = Envelope::parse(&bytes).unwrap().payload;
        let mut v: Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(v["subject"][0]["name"], "a");
        let subjects = v["subject"].as_array_mut().unwrap();
        subjects.swap(0, 1);
        let e = malformed(f.verify(&f.signed_value(&v)));
        assert!(
            matches!(&e, ReceiptError::Payload(m) if m.contains("sorted")),
            "{e}"
        );
    }

    #[test]
    fn rejects_other_document_kinds() {
        let f = fx();
        // A certificate is not a receipt, even when the runner key signed it.
        let mut env = Envelope::new(CERTIFICATE_PAYLOAD_TYPE, f.cert.envelope().payload.clone());
        env.sign(&f.runner).unwrap();
        let e = refused(f.verify(&env.to_bytes()));
        assert!(matches!(e, ReceiptError::WrongPayloadType { .. }), "{e}");
        // Another in-toto predicate.
        let mut v = f.statement();
        v["predicateType"] = "https://slsa.dev/provenance/v1".into();
        let e = refused(f.verify(&f.signed_value(&v)));
        assert!(
            matches!(&e, ReceiptError::WrongPredicateType { found } if found.contains("slsa")),
            "{e}"
        );
        let mut v = f.statement();
        v["_type"] = "https://in-toto.io/Statement/v0.1".into();
        let e = malformed(f.verify(&f.signed_value(&v)));
        assert!(
            matches!(&e, ReceiptError::Payload(m) if m.contains("`_type`")),
            "{e}"
        );
    }

    #[test]
    fn rejects_two_signatures() {
        let f = fx();
        let mut env = Envelope::parse(&f.receipt()).unwrap();
        env.sign(&SecretKey::generate().unwrap()).unwrap();
        let e = malformed(f.verify(&env.to_bytes()));
        assert!(matches!(e, ReceiptError::SignatureCount(2)), "{e}");
    }

    #[test]
    fn rejects_facts_that_disagree_with_the_certificate() {
        let f = fx();
        let cases: [(&str, Edit); 3] = [
            ("engine_digest", |r| r.engine_digest = Digest::of(b"other")),
            ("policy_id", |r| r.policy_id = Digest::of(b"other")),
            ("model_digest", |r| r.model_digest = Digest::of(b"other")),
        ];
        for (name, edit) in cases {
            let mut facts = f.facts.clone();
            edit(&mut facts);
            let bytes = sign_receipt(&facts, &[(OUTPUTS_FILE, OUTPUT)], &f.runner).unwrap();
            let e = refused(f.verify(&bytes));
            assert!(
                matches!(&e, ReceiptError::Inconsistent { field, .. } if *field == name),
                "{name}: {e}"
            );
        }
    }

    #[test]
    fn rejects_run_outside_the_policy() {
        let f = fx();
        let cases: [(&str, Edit); 3] = [
            ("max_batch", |r| r.generation.batch_size = 4096),
            ("max_new_tokens", |r| r.generation.max_new_tokens = 5000),
            ("inputs x max_new_tokens", |r| {
                r.counts.generated_tokens = 3 * 32 + 1
            }),
        ];
        for (needle, edit) in cases {
            let mut facts = f.facts.clone();
            edit(&mut facts);
            let bytes = sign_receipt(&facts, &[(OUTPUTS_FILE, OUTPUT)], &f.runner).unwrap();
            let e = refused(f.verify(&bytes));
            assert!(
                matches!(&e, ReceiptError::OutsidePolicy(m) if m.contains(needle)),
                "{needle}: {e}"
            );
        }
    }

    #[test]
    fn rejects_inconsistent_facts_when_signing() {
        let f = fx();
        let mut facts = f.facts.clone();
        facts.counts.finish_reasons.length = 5;
        let e = sign_receipt(&facts, &[(OUTPUTS_FILE, OUTPUT)], &f.runner).unwrap_err();
        assert!(
            matches!(&e, ReceiptError::Unwritable(m) if m.contains("finish_reasons")),
            "{e}"
        );
        let mut facts = f.facts.clone();
        facts.finished_at = ts("2026-11-02T09:00:00Z");
        let e = sign_receipt(&facts, &[(OUTPUTS_FILE, OUTPUT)], &f.runner).unwrap_err();
        assert!(
            matches!(&e, ReceiptError::Unwritable(m) if m.contains("finished_at")),
            "{e}"
        );
        let mut facts = f.facts.clone();
        facts.counts.generated_tokens = 1 << 60;
        let e = sign_receipt(&facts, &[(OUTPUTS_FILE, OUTPUT)], &f.runner).unwrap_err();
        assert!(matches!(&e, ReceiptError::Unwritable(_)), "{e}");
        assert_eq!(e.exit(), Exit::Failure);
    }

    #[test]
    fn receipt_parse_round_trips() {
        let f = fx();
        let bytes = f.receipt();
        let r = Receipt::parse(&bytes).unwrap();
        assert_eq!(r.envelope.to_bytes(), bytes);
        assert_eq!(r.statement.facts, f.facts);
        assert_eq!(r.statement.to_bytes().unwrap(), r.envelope.payload);
    }

    #[test]
    fn current_runner_identity_hashes_this_executable() {
        let id = RunnerIdentity::current().unwrap();
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(id.executable_digest, Digest::of(&exe));
        assert_eq!(id.version, env!("CARGO_PKG_VERSION"));
    }
}
