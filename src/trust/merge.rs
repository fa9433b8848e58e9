//! Merging the shards of a job into one result that anyone can check, with no secret: every
//! shard's receipt verifies under a trusted runner key and the same certificate, the shards are
//! of the same job and inputs, their indices are exactly 0..N-1, and their ranges tile every
//! input once. The merged directory holds the outputs in input order, each shard's receipt, and
//! a merge record (`merge.json`) that lists them; [`verify_merged`] re-checks all of it.
//!
//! Sealed outputs are merged without being opened: each shard's ciphertext is kept as it is
//! (`shard-K-of-N.outputs.jsonl.age`), in order; plaintext outputs are concatenated into one
//! `outputs.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::attested_run::{verify_run_attestation, RunAttestationError};
use super::certificate::Certificate;
use super::receipt::{
    read_receipt_file, verify_receipt, Commitment, DigestSet, Receipt, ReceiptError, Sealed,
    Subject, VerifiedReceipt, OUTPUTS_FILE, RECEIPT_FILE,
};
use super::run_attestation::ATTESTATION_FILE;
use super::shard::{shard_dir_name, ShardFacts};
use crate::attestation::Verdict;
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded, ReadError};
use crate::primitives::canonical::{parse_strict, to_canonical_from};
use crate::primitives::digest::Digest;
use crate::primitives::keys::PublicKey;

/// The merge record's file name.
pub const MERGE_FILE: &str = "merge.json";
/// Its `schema`.
pub const MERGE_SCHEMA: &str = "runner-merge/1";
/// The largest output file a merge reads.
const MAX_OUTPUT_BYTES: u64 = 1 << 40;

/// One shard in the merge record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergedShard {
    /// Its index.
    pub index: u32,
    /// Its first input.
    pub start: u64,
    /// One past its last input.
    pub end: u64,
    /// Its receipt's file name in the merged directory.
    pub receipt: String,
    /// Its receipt's digest (BLAKE3 of the Statement bytes).
    pub receipt_digest: Digest,
    /// The runner key that signed it.
    pub runner_key_id: Digest,
}

/// `merge.json`: what was merged. Derived entirely from the shard receipts and the merged
/// files, so a verifier recomputes it and compares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeRecord {
    /// Always [`MERGE_SCHEMA`].
    pub schema: String,
    /// The certificate every shard ran under.
    pub certificate_digest: Digest,
    /// The job file every shard ran.
    pub job_digest: Digest,
    /// The inputs every shard committed to.
    pub inputs: Commitment,
    /// The sealed inputs file's digest, when sealed.
    pub inputs_ciphertext: Option<Digest>,
    /// Which directions were sealed.
    pub sealed: Sealed,
    /// How many inputs the job has.
    pub inputs_total: u64,
    /// The shards, in index order.
    pub shards: Vec<MergedShard>,
    /// The merged directory's output files (not the receipts or this record), sorted by name.
    pub outputs: Vec<Subject>,
}

/// Why shards were not merged (or a merged directory not accepted).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no shard directories were given")]
    Empty,
    /// A shard's receipt could not be read or did not verify.
    #[error("shard {label}: {source}")]
    Receipt {
        /// The shard directory or file.
        label: String,
        /// Why.
        source: ReceiptError,
    },
    /// Signed by a key that is not among the trusted runner keys.
    #[error("shard {label}: its receipt is signed by runner key {key_id}, which is not one of the --runner-keys")]
    Foreign {
        /// The shard.
        label: String,
        /// The signer.
        key_id: String,
    },
    /// A whole job's receipt, not a shard's.
    #[error("shard {label}: its receipt is of a whole job, not of a shard (exec --shard K/N)")]
    NotAShard {
        /// The shard.
        label: String,
    },
    /// A fact that must be the same in every shard differs.
    #[error("shard {label}: its {field} differs from shard {first}'s: they are not shards of the same run")]
    Differs {
        /// The shard.
        label: String,
        /// What differs.
        field: &'static str,
        /// The shard it was compared with.
        first: String,
    },
    /// Two receipts for one index.
    #[error("shard index {index} appears twice: {first} and {second}")]
    Duplicate {
        /// The index.
        index: u32,
        /// One.
        first: String,
        /// The other.
        second: String,
    },
    /// Indices missing.
    #[error("shards {} of {count} are missing", list(.missing))]
    Missing {
        /// The missing indices.
        missing: Vec<u32>,
        /// The shard count.
        count: u32,
    },
    /// A merged file is not what the shard receipts bind.
    #[error("{path}: {why}", path = .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A shard's hardware evidence did not check out.
    #[error("shard {label}: {source}")]
    Attestation {
        /// The shard's receipt.
        label: String,
        /// Why.
        source: RunAttestationError,
    },
}

fn list(indices: &[u32]) -> String {
    let shown: Vec<String> = indices.iter().take(20).map(u32::to_string).collect();
    let more = indices.len().saturating_sub(20);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

impl Diagnose for MergeError {
    fn exit(&self) -> Exit {
        match self {
            MergeError::Empty => Exit::BadInput,
            MergeError::Receipt { source, .. } => source.exit(),
            MergeError::Read(e) => e.exit(),
            MergeError::Attestation { source, .. } => source.exit(),
            _ => Exit::Refused,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            MergeError::Foreign { .. } => {
                "add that runner's runner.key.pub to the --runner-keys file, if the pod is yours"
                    .into()
            }
            MergeError::Missing { .. } => {
                "run the missing shards (exec --shard K/N), then merge every shard directory".into()
            }
            MergeError::Duplicate { .. } => "give each shard directory once".into(),
            MergeError::Differs { .. } => {
                "merge only the shards of one job: same certificate, job file and inputs".into()
            }
            _ => return None,
        })
    }
}

/// A shard receipt that verified, with where it came from.
struct Checked {
    label: String,
    dir: Option<PathBuf>,
    receipt: VerifiedReceipt,
    shard: ShardFacts,
    bytes: Vec<u8>,
}

/// Verify each receipt (`outputs_dir`: where its subject files are, if they are checked there)
/// and the set: trusted signer, same certificate (by [`verify_receipt`]), same job and inputs,
/// indices 0..N-1 once each. Returns them in index order.
fn check_shards(
    cert: &Certificate,
    keys: &[PublicKey],
    receipts: Vec<(String, Vec<u8>, Option<PathBuf>)>,
) -> Result<Vec<Checked>, MergeError> {
    if receipts.is_empty() {
        return Err(MergeError::Empty);
    }
    let mut by_index: BTreeMap<u32, Checked> = BTreeMap::new();
    for (label, bytes, dir) in receipts {
        let in_shard = |source| MergeError::Receipt {
            label: label.clone(),
            source,
        };
        let unchecked = Receipt::parse(&bytes).map_err(in_shard)?;
        let signer = unchecked.envelope.signatures[0].keyid;
        let key =
            keys.iter()
                .find(|k| k.key_id() == signer)
                .ok_or_else(|| MergeError::Foreign {
                    label: label.clone(),
                    key_id: signer.to_hex(),
                })?;
        let receipt = verify_receipt(&bytes, cert, key, dir.as_deref()).map_err(in_shard)?;
        let Some(shard) = receipt.facts().shard else {
            return Err(MergeError::NotAShard { label });
        };
        if let Some(first) = by_index.values().next() {
            let (a, b) = (first.receipt.facts(), receipt.facts());
            let differs = [
                ("job digest", a.job_digest != b.job_digest),
                ("inputs commitment", a.inputs != b.inputs),
                (
                    "sealed inputs digest",
                    a.inputs_ciphertext != b.inputs_ciphertext,
                ),
                ("sealing", a.sealed != b.sealed),
                ("shard count", first.shard.count != shard.count),
                (
                    "number of inputs",
                    first.shard.inputs_total != shard.inputs_total,
                ),
            ];
            if let Some((field, _)) = differs.iter().find(|(_, d)| *d) {
                return Err(MergeError::Differs {
                    label,
                    field,
                    first: first.label.clone(),
                });
            }
        }
        if let Some(other) = by_index.get(&shard.index) {
            return Err(MergeError::Duplicate {
                index: shard.index,
                first: other.label.clone(),
                second: label,
            });
        }
        by_index.insert(
            shard.index,
            Checked {
                label,
                dir,
                receipt,
                shard,
                bytes,
            },
        );
    }
    let count = by_index.values().next().map_or(0, |c| c.shard.count);
    let missing: Vec<u32> = (0..count).filter(|i| !by_index.contains_key(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing { missing, count });
    }
    // Each receipt's range is its index's (RunFacts::check), so indices 0..N-1 tile the inputs.
    Ok(by_index.into_values().collect())
}

/// Check a set of shard receipts (labels for messages, exact bytes) as [`merge`] does, without
/// their files: the facts of each shard, in index order, when they form one complete job.
pub fn check_receipt_set(
    cert: &Certificate,
    keys: &[PublicKey],
    receipts: Vec<(String, Vec<u8>)>,
) -> Result<Vec<ShardFacts>, MergeError> {
    let receipts = receipts.into_iter().map(|(l, b)| (l, b, None)).collect();
    Ok(check_shards(cert, keys, receipts)?
        .into_iter()
        .map(|c| c.shard)
        .collect())
}

/// The name a shard's file gets in the merged directory.
fn merged_name(shard: u32, count: u32, name: &str) -> String {
    format!("{}.{name}", shard_dir_name(shard, count))
}

/// The files of the merged directory (name, bytes), `merge.json` last.
pub type MergedFiles = Vec<(String, Vec<u8>)>;

/// Merge shard directories (each holding a shard's `receipt.json` and outputs).
pub fn merge(
    cert: &Certificate,
    keys: &[PublicKey],
    dirs: &[PathBuf],
) -> Result<(MergeRecord, MergedFiles), MergeError> {
    let mut receipts = Vec::new();
    for dir in dirs {
        let label = dir.display().to_string();
        let bytes =
            read_receipt_file(&dir.join(RECEIPT_FILE)).map_err(|source| MergeError::Receipt {
                label: label.clone(),
                source,
            })?;
        receipts.push((label, bytes, Some(dir.clone())));
    }
    let shards = check_shards(cert, keys, receipts)?;
    let mut files: MergedFiles = Vec::new();
    let mut merged_outputs = Vec::new();
    for c in &shards {
        let (s, dir) = (&c.shard, c.dir.as_deref().unwrap_or(Path::new(".")));
        files.push((merged_name(s.index, s.count, RECEIPT_FILE), c.bytes.clone()));
        for subj in c.receipt.subjects() {
            let path = dir.join(&subj.name);
            let bytes = read_bounded(&path, MAX_OUTPUT_BYTES, "shard output")?;
            // Read again here: it must still be the file the receipt binds.
            if DigestSet::of(&bytes) != subj.digest {
                return Err(MergeError::File {
                    path,
                    why: "changed since its receipt was checked".into(),
                });
            }
            if subj.name == OUTPUTS_FILE {
                merged_outputs.extend_from_slice(&bytes);
            } else {
                files.push((merged_name(s.index, s.count, &subj.name), bytes));
            }
        }
    }
    if !shards[0].receipt.facts().sealed.outputs {
        files.push((OUTPUTS_FILE.to_owned(), merged_outputs));
    }
    let record = record_of(&shards, &files);
    let bytes = to_canonical_from(&record).map_err(|e| MergeError::File {
        path: PathBuf::from(MERGE_FILE),
        why: e.to_string(),
    })?;
    files.push((MERGE_FILE.to_owned(), bytes));
    Ok((record, files))
}

/// The record of `shards` merged into `files` (receipts and outputs, not the record).
fn record_of(shards: &[Checked], files: &[(String, Vec<u8>)]) -> MergeRecord {
    let f = shards[0].receipt.facts();
    let total = shards[0].shard.inputs_total;
    let mut outputs: Vec<Subject> = files
        .iter()
        .filter(|(name, _)| !name.ends_with(RECEIPT_FILE))
        .map(|(name, bytes)| Subject {
            name: name.clone(),
            digest: DigestSet::of(bytes),
        })
        .collect();
    outputs.sort_by(|a, b| a.name.cmp(&b.name));
    MergeRecord {
        schema: MERGE_SCHEMA.into(),
        certificate_digest: f.certificate_digest,
        job_digest: f.job_digest,
        inputs: f.inputs,
        inputs_ciphertext: f.inputs_ciphertext,
        sealed: f.sealed,
        inputs_total: total,
        shards: shards
            .iter()
            .map(|c| {
                let s = &c.shard;
                MergedShard {
                    index: s.index,
                    start: s.start,
                    end: s.end,
                    receipt: merged_name(s.index, s.count, RECEIPT_FILE),
                    receipt_digest: c.receipt.digest(),
                    runner_key_id: c.receipt.signer(),
                }
            })
            .collect(),
        outputs,
    }
}

/// Whether `dir` is a merged directory (it holds `merge.json`).
pub fn is_merged(dir: &Path) -> bool {
    dir.join(MERGE_FILE).is_file()
}

/// Check a merged directory: `merge.json` lists shard receipts that verify as a complete set
/// (as [`merge`] checks), every merged file is what those receipts bind (the plaintext outputs
/// split by each shard's count of lines), and the record is exactly the one they give.
pub fn verify_merged(
    dir: &Path,
    cert: &Certificate,
    keys: &[PublicKey],
    collateral: Option<&[u8]>,
    vcek: Option<&[u8]>,
) -> Result<(MergeRecord, Vec<Option<Verdict>>), MergeError> {
    let path = dir.join(MERGE_FILE);
    let text = read_bounded(&path, 64 << 20, "merge record")?;
    let bad = |why: String| MergeError::File {
        path: path.clone(),
        why,
    };
    let value = parse_strict(&text).map_err(|e| bad(e.to_string()))?;
    let record: MergeRecord =
        serde_json::from_value(value).map_err(|e| bad(format!("not a merge record: {e}")))?;
    let mut receipts = Vec::new();
    for s in &record.shards {
        if s.receipt.contains('/') || s.receipt.starts_with('.') {
            return Err(bad(format!(
                "shard receipt name {:?} is not a plain file name",
                s.receipt
            )));
        }
        let label = dir.join(&s.receipt).display().to_string();
        let bytes =
            read_receipt_file(&dir.join(&s.receipt)).map_err(|source| MergeError::Receipt {
                label: label.clone(),
                source,
            })?;
        receipts.push((label, bytes, None));
    }
    let shards = check_shards(cert, keys, receipts)?;
    let mut files: MergedFiles = Vec::new();
    let sealed = shards[0].receipt.facts().sealed.outputs;
    let plain = if sealed {
        None
    } else {
        let p = dir.join(OUTPUTS_FILE);
        Some((read_bounded(&p, MAX_OUTPUT_BYTES, "merged outputs")?, p))
    };
    let mut at = 0usize;
    for c in &shards {
        let s = &c.shard;
        files.push((merged_name(s.index, s.count, RECEIPT_FILE), c.bytes.clone()));
        for subj in c.receipt.subjects() {
            if subj.name == OUTPUTS_FILE {
                let (all, p) = plain
                    .as_ref()
                    .ok_or_else(|| bad("plaintext outputs in a sealed run".into()))?;
                let lines = c.receipt.facts().counts.inputs as usize;
                let len = all[at..]
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .nth(lines.wrapping_sub(1))
                    .map_or(if lines == 0 { 0 } else { usize::MAX }, |(i, _)| i + 1);
                let part = all.get(at..at.saturating_add(len));
                if part.map(DigestSet::of) != Some(subj.digest) {
                    return Err(MergeError::File {
                        path: p.clone(),
                        why: format!(
                            "the lines of shard {} are not the outputs its receipt binds",
                            s.index
                        ),
                    });
                }
                at += len;
                continue;
            }
            let name = merged_name(s.index, s.count, &subj.name);
            let p = dir.join(&name);
            let bytes = read_bounded(&p, MAX_OUTPUT_BYTES, "merged shard file")?;
            if DigestSet::of(&bytes) != subj.digest {
                return Err(MergeError::File {
                    path: p,
                    why: format!("is not the {} shard {}'s receipt binds", subj.name, s.index),
                });
            }
            files.push((name, bytes));
        }
    }
    if let Some((all, p)) = plain {
        if at != all.len() {
            return Err(MergeError::File {
                path: p,
                why: "has lines after the last shard's".into(),
            });
        }
        files.push((OUTPUTS_FILE.to_owned(), all));
    }
    if record_of(&shards, &files) != record {
        return Err(bad(
            "is not the record of the shard receipts and files it lists".into(),
        ));
    }
    // Each shard's hardware evidence, as `verify` checks a single run's.
    let mut verdicts = Vec::with_capacity(shards.len());
    for c in &shards {
        let evidence = dir.join(merged_name(c.shard.index, c.shard.count, ATTESTATION_FILE));
        let verdict = verify_run_attestation(&c.receipt, cert, &evidence, collateral, vcek)
            .map_err(|source| MergeError::Attestation {
                label: c.label.clone(),
                source,
            })?;
        verdicts.push(verdict);
    }
    Ok((record, verdicts))
}
