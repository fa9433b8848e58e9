//! The audit log: the `runner exec` attempts, appended to `audit.jsonl` in the runner's state
//! directory and chained by digests, so that editing, deleting, inserting or reordering an entry
//! breaks the chain at that point.
//!
//! It fails closed. Before `exec` reads anything private it checks that the log can be appended
//! to; a refused attempt is one `refused` entry; an admitted one is an `admitted` entry, written
//! before the first batch runs, then a closing `accepted` or `failed` entry, all three carrying
//! the attempt's random id. Nothing runs unless its `admitted` entry is on disk, so a process
//! killed mid-run leaves an `admitted` entry that no closing entry answers, which
//! [`AuditLog::verify`] reports as unfinished.
//!
//! Each line is one [`AuditEntry`] as RFC 8785 canonical JSON followed by `\n`. Entry `seq` is
//! its 1-based line number, and `prev` is the plain BLAKE3 of the previous line's bytes (without
//! its newline), or 64 zeros on the first line. A chain cannot protect its own tail: removing or
//! rewriting the last entries leaves a shorter valid chain. [`AuditLog::verify`] therefore
//! returns the last entry's digest, for the operator to record elsewhere and compare later.
//!
//! Appends take an exclusive lock on the file (`File::lock`, an advisory `flock` on Unix), read
//! the last line, and write the new line with one write on an `O_APPEND` descriptor followed by
//! an fsync. An append never repairs a damaged log: it refuses, so damage is never buried under
//! new entries.
//!
//! Entries record digests and outcomes only. `reason` is the error text of a refusal or failure;
//! error texts in this crate never carry input or output contents (see [`super::inputs`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::open_for_append;
use crate::error::{Diagnose, Exit};
use crate::primitives::canonical::{parse_strict, to_canonical_from};
use crate::primitives::digest::Digest;
use crate::primitives::time::Timestamp;
use crate::trust::receipt::{RunFacts, Subject};

/// The log's file name inside the state directory.
pub const AUDIT_FILE: &str = "audit.jsonl";

/// Longest `reason` kept, in bytes; longer texts are cut at a character boundary.
pub const MAX_REASON_LEN: usize = 4096;

/// `prev` of the first entry.
pub const GENESIS_PREV: Digest = Digest([0; 32]);

/// What an entry records about its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Passed every check; about to run (a closing entry follows).
    Admitted,
    /// Verified, ran, and wrote outputs and a receipt.
    Accepted,
    /// Not admitted (by verification, exit 3, or bad input, exit 2): nothing ran.
    Refused,
    /// Failed after admission, whatever the exit code (the engine, publishing, a model file
    /// written during the run), or before it for an operational reason (a registry unreadable).
    Failed,
}

impl Outcome {
    /// The spelling in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Accepted => "accepted",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        }
    }
}

/// What `exec` records about one attempt; [`AuditLog::append`] adds `seq`, `time` and `prev`.
/// Digests are `None` where the attempt stopped before knowing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The attempt's id, the same in all its entries.
    pub attempt: String,
    /// What happened.
    pub outcome: Outcome,
    /// The error text for a refusal or failure; `None` when accepted.
    pub reason: Option<String>,
    /// Digest of the certificate presented.
    pub certificate_digest: Option<Digest>,
    /// BLAKE3 of the engine source.
    pub engine_digest: Option<Digest>,
    /// The certificate's `policy_id`.
    pub policy_id: Option<Digest>,
    /// The model digest.
    pub model_digest: Option<Digest>,
    /// BLAKE3 of `job.toml`.
    pub job_digest: Option<Digest>,
    /// The salted commitment to the inputs file (as in the receipt; a plain digest of private
    /// inputs could be inverted by guessing).
    pub inputs_commitment: Option<Digest>,
    /// The files written (empty unless accepted).
    pub output_digests: Vec<Subject>,
}

impl AuditRecord {
    /// A record of `attempt` with this outcome and nothing known yet.
    pub fn new(attempt: &str, outcome: Outcome) -> AuditRecord {
        AuditRecord {
            attempt: attempt.to_owned(),
            outcome,
            reason: None,
            certificate_digest: None,
            engine_digest: None,
            policy_id: None,
            model_digest: None,
            job_digest: None,
            inputs_commitment: None,
            output_digests: Vec::new(),
        }
    }

    /// A refusal (or a failure) with its error text.
    pub fn with_reason(
        attempt: &str,
        outcome: Outcome,
        reason: &dyn std::fmt::Display,
    ) -> AuditRecord {
        AuditRecord {
            reason: Some(reason.to_string()),
            ..AuditRecord::new(attempt, outcome)
        }
    }

    /// An accepted run: every digest from the receipt's facts, and the outputs written.
    pub fn accepted(attempt: &str, facts: &RunFacts, outputs: Vec<Subject>) -> AuditRecord {
        AuditRecord {
            attempt: attempt.to_owned(),
            outcome: Outcome::Accepted,
            reason: None,
            certificate_digest: Some(facts.certificate_digest),
            engine_digest: Some(facts.engine_digest),
            policy_id: Some(facts.policy_id),
            model_digest: Some(facts.model_digest),
            job_digest: Some(facts.job_digest),
            inputs_commitment: Some(facts.inputs.commitment),
            output_digests: outputs,
        }
    }
}

/// One line of the log. Every field is always written (`null` when unknown), so each entry has
/// one spelling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    /// 1-based position in the log.
    pub seq: u64,
    /// When the entry was appended.
    pub time: Timestamp,
    /// The attempt's id, the same in all its entries.
    pub attempt: String,
    /// What happened.
    pub outcome: Outcome,
    /// Error text of a refusal or failure.
    pub reason: Option<String>,
    /// Digest of the certificate presented.
    pub certificate_digest: Option<Digest>,
    /// BLAKE3 of the engine source.
    pub engine_digest: Option<Digest>,
    /// The certificate's `policy_id`.
    pub policy_id: Option<Digest>,
    /// The model digest.
    pub model_digest: Option<Digest>,
    /// BLAKE3 of `job.toml`.
    pub job_digest: Option<Digest>,
    /// The salted commitment to the inputs file (as in the receipt; a plain digest of private
    /// inputs could be inverted by guessing).
    pub inputs_commitment: Option<Digest>,
    /// Files written.
    pub output_digests: Vec<Subject>,
    /// BLAKE3 of the previous line (without its newline); zeros on the first line.
    pub prev: Digest,
}

/// What `runner audit list` shows of an entry: an allow-list of its fields. Left out are the
/// inputs commitment and the output digests, which are derived from the private inputs and
/// outputs (a digest of an output confirms a guess of it), and the chain's `prev` link, which
/// `runner audit verify` checks; only the number of files written is kept. `reason` is an error
/// text, which never carries input or output contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedEntry {
    /// 1-based position in the log.
    pub seq: u64,
    /// When the entry was appended.
    pub time: Timestamp,
    /// The attempt's id.
    pub attempt: String,
    /// What happened.
    pub outcome: Outcome,
    /// Error text of a refusal or failure.
    pub reason: Option<String>,
    /// Digest of the certificate presented.
    pub certificate_digest: Option<Digest>,
    /// BLAKE3 of the engine source.
    pub engine_digest: Option<Digest>,
    /// The certificate's `policy_id`.
    pub policy_id: Option<Digest>,
    /// The model digest.
    pub model_digest: Option<Digest>,
    /// BLAKE3 of `job.toml`.
    pub job_digest: Option<Digest>,
    /// How many files the attempt wrote.
    pub outputs: usize,
}

impl From<&AuditEntry> for ListedEntry {
    fn from(e: &AuditEntry) -> ListedEntry {
        ListedEntry {
            seq: e.seq,
            time: e.time,
            attempt: e.attempt.clone(),
            outcome: e.outcome,
            reason: e.reason.clone(),
            certificate_digest: e.certificate_digest,
            engine_digest: e.engine_digest,
            policy_id: e.policy_id,
            model_digest: e.model_digest,
            job_digest: e.job_digest,
            outputs: e.output_digests.len(),
        }
    }
}

/// What is wrong at one line of the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainProblem {
    /// The file ends without a newline: the last write was cut short.
    #[error("the line is truncated (no newline at the end of the file)")]
    Truncated,
    /// Not JSON, or a duplicate key.
    #[error("the line is not valid JSON: {0}")]
    BadJson(String),
    /// JSON, but not an audit entry (unknown, missing or mistyped field).
    #[error("the line is not an audit entry: {0}")]
    BadEntry(String),
    /// An entry, but not spelled canonically, so it was not written by the runner.
    #[error("the line is not in canonical form (RFC 8785), so it was rewritten")]
    NotCanonical,
    /// `seq` is not the line number.
    #[error(
        "seq is {found}, expected {expected} (an entry before it was removed, inserted or moved)"
    )]
    SeqGap {
        /// The line number.
        expected: u64,
        /// The entry's `seq`.
        found: u64,
    },
    /// `prev` is not the digest of the previous line.
    #[error("prev is {}, but the previous line's digest is {} (the previous line was edited, or lines were removed or reordered)", .found.to_hex(), .expected.to_hex())]
    PrevMismatch {
        /// Digest of the previous line (zeros for the first).
        expected: Digest,
        /// The entry's `prev`.
        found: Digest,
    },
}

/// The first broken link of a chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ChainBreak {
    /// 1-based line number.
    pub line: u64,
    /// What is wrong there.
    pub problem: ChainProblem,
}

/// An intact chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSummary {
    /// Number of entries.
    pub entries: u64,
    /// `admitted` entries that no closing entry of the same attempt follows, as (seq,
    /// attempt): runs killed mid-way (or still running).
    pub unfinished: Vec<(u64, String)>,
    /// BLAKE3 of the last line (the `prev` the next entry will carry); `None` when empty.
    pub last_digest: Option<Digest>,
    /// The last entry.
    pub last: Option<AuditEntry>,
}

/// Why the log could not be appended to or verified.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Opening, locking, reading, writing or syncing the log failed.
    #[error("cannot {action} audit log {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// There is no log to verify.
    #[error("there is no audit log at {}", path.display())]
    Missing {
        /// The expected log file.
        path: PathBuf,
    },
    /// The chain is broken.
    #[error("audit log {} is broken at {brk}", path.display())]
    Broken {
        /// The log file.
        path: PathBuf,
        /// Where and how.
        brk: ChainBreak,
    },
    /// The last line is damaged, so nothing is appended after it.
    #[error("audit log {} is damaged at its last line ({problem}); not appending", path.display())]
    Damaged {
        /// The log file.
        path: PathBuf,
        /// What is wrong with the last line.
        problem: ChainProblem,
    },
    /// The entry cannot be written as canonical JSON (a time outside RFC 3339's years).
    #[error("cannot write the audit entry: {0}")]
    Unwritable(String),
}

impl Diagnose for AuditError {
    fn exit(&self) -> Exit {
        match self {
            AuditError::Missing { .. } => Exit::BadInput,
            AuditError::Broken { .. } | AuditError::Damaged { .. } => Exit::Refused,
            _ => Exit::Failure,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            AuditError::Io { .. } => "the log must be a regular file the runner can lock and \
                append to: check the state directory's permissions, and that audit.jsonl is not \
                a directory or on a full disk"
                .into(),
            AuditError::Missing { .. } => "pass the runner's state directory with --state-dir \
                (or $RUNNER_STATE_DIR)"
                .into(),
            AuditError::Broken { .. } => "the log was altered or cut short; keep this copy as \
                evidence, restore the log from a backup, and compare the last digest with the \
                one recorded by `runner audit verify`"
                .into(),
            AuditError::Damaged { .. } => "no job runs until the log can be appended to: keep \
                this copy as evidence, then restore the log from a backup, or rotate it (move \
                audit.jsonl aside; the next exec starts a new chain, and the old one's last \
                digest should be recorded with it)"
                .into(),
            AuditError::Unwritable(_) => "check this machine's clock".into(),
        })
    }
}

/// The audit log in one state directory.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    /// The log in `state_dir` (nothing is touched until [`AuditLog::append`] or
    /// [`AuditLog::verify`]).
    pub fn open(state_dir: &Path) -> AuditLog {
        AuditLog {
            path: state_dir.join(AUDIT_FILE),
        }
    }

    /// Check that an entry could be appended now: the log opens, locks, and its last line is
    /// intact. `exec` calls this before it reads anything private, so an attempt that could not
    /// be recorded never starts.
    pub fn check_appendable(&self) -> Result<(), AuditError> {
        let mut file = self.open_locked()?;
        self.next_link(&mut file).map(|_| ())
    }

    fn open_locked(&self) -> Result<File, AuditError> {
        let file = open_for_append(&self.path).map_err(self.io_err("open"))?;
        // Held until `file` is dropped: no other append can interleave between reading the last
        // line and writing the next.
        file.lock().map_err(self.io_err("lock"))?;
        Ok(file)
    }

    /// An I/O failure of `action` on the log file.
    fn io_err(&self, action: &'static str) -> impl FnOnce(std::io::Error) -> AuditError {
        let path = self.path.clone();
        move |source| AuditError::Io {
            action,
            path,
            source,
        }
    }

    /// The `seq` and `prev` of the next entry.
    fn next_link(&self, file: &mut File) -> Result<(u64, Digest), AuditError> {
        let last = read_last_line(file).map_err(self.io_err("read"))?;
        match last {
            LastLine::Empty => Ok((1, GENESIS_PREV)),
            LastLine::Truncated => Err(AuditError::Damaged {
                path: self.path.clone(),
                problem: ChainProblem::Truncated,
            }),
            LastLine::Line(line) => {
                let last = parse_line(&line).map_err(|problem| AuditError::Damaged {
                    path: self.path.clone(),
                    problem,
                })?;
                Ok((last.seq.saturating_add(1), Digest::of(&line)))
            }
        }
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one entry (creating the log, mode 0600, in the state directory if needed).
    /// Returns the entry written.
    pub fn append(&self, record: AuditRecord) -> Result<AuditEntry, AuditError> {
        let mut file = self.open_locked()?;
        let (seq, prev) = self.next_link(&mut file)?;
        let entry = AuditEntry {
            seq,
            time: Timestamp::now(),
            attempt: record.attempt,
            outcome: record.outcome,
            reason: record.reason.map(|r| truncate(r, MAX_REASON_LEN)),
            certificate_digest: record.certificate_digest,
            engine_digest: record.engine_digest,
            policy_id: record.policy_id,
            model_digest: record.model_digest,
            job_digest: record.job_digest,
            inputs_commitment: record.inputs_commitment,
            output_digests: record.output_digests,
            prev,
        };
        let mut line =
            to_canonical_from(&entry).map_err(|e| AuditError::Unwritable(e.to_string()))?;
        line.push(b'\n');
        file.write_all(&line).map_err(self.io_err("write"))?;
        file.sync_data().map_err(self.io_err("sync"))?;
        Ok(entry)
    }

    /// Check the whole chain; the first broken link is reported with its line number.
    pub fn verify(&self) -> Result<ChainSummary, AuditError> {
        self.walk(&mut |_| {})
    }

    /// Every entry, in order, as [`ListedEntry`] (its public fields only), after the whole
    /// chain checked out: a broken log is reported, not listed.
    pub fn list(&self) -> Result<Vec<ListedEntry>, AuditError> {
        let mut entries = Vec::new();
        self.walk(&mut |e| entries.push(ListedEntry::from(e)))?;
        Ok(entries)
    }

    fn walk(&self, visit: &mut dyn FnMut(&AuditEntry)) -> Result<ChainSummary, AuditError> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(AuditError::Missing {
                    path: self.path.clone(),
                })
            }
            Err(source) => {
                return Err(AuditError::Io {
                    action: "open",
                    path: self.path.clone(),
                    source,
                })
            }
        };
        match walk_chain(BufReader::new(file), visit) {
            Ok(summary) => Ok(summary),
            Err(VerifyError::Io(source)) => Err(AuditError::Io {
                action: "read",
                path: self.path.clone(),
                source,
            }),
            Err(VerifyError::Broken(brk)) => Err(AuditError::Broken {
                path: self.path.clone(),
                brk,
            }),
        }
    }
}

/// Why [`verify_chain`] stopped.
#[derive(Debug)]
pub enum VerifyError {
    /// Reading failed.
    Io(io::Error),
    /// The first broken link.
    Broken(ChainBreak),
}

/// Check a log's bytes, line by line, in order: each line is complete, strict JSON, an entry,
/// canonical, has `seq` equal to its line number, and `prev` equal to the previous line's digest.
pub fn verify_chain(reader: impl BufRead) -> Result<ChainSummary, VerifyError> {
    walk_chain(reader, &mut |_| {})
}

/// [`verify_chain`], handing each entry to `visit` once its link is checked.
fn walk_chain(
    mut reader: impl BufRead,
    visit: &mut dyn FnMut(&AuditEntry),
) -> Result<ChainSummary, VerifyError> {
    let mut prev = GENESIS_PREV;
    let mut last = None;
    let mut line_no: u64 = 0;
    let mut open: Vec<(u64, String)> = Vec::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(VerifyError::Io)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let broken = |problem| {
            VerifyError::Broken(ChainBreak {
                line: line_no,
                problem,
            })
        };
        let Some(line) = buf.strip_suffix(b"\n") else {
            return Err(broken(ChainProblem::Truncated));
        };
        let entry = parse_line(line).map_err(broken)?;
        if entry.seq != line_no {
            return Err(broken(ChainProblem::SeqGap {
                expected: line_no,
                found: entry.seq,
            }));
        }
        if entry.prev != prev {
            return Err(broken(ChainProblem::PrevMismatch {
                expected: prev,
                found: entry.prev,
            }));
        }
        prev = Digest::of(line);
        visit(&entry);
        match entry.outcome {
            Outcome::Admitted => open.push((entry.seq, entry.attempt.clone())),
            Outcome::Accepted | Outcome::Failed => open.retain(|(_, a)| *a != entry.attempt),
            Outcome::Refused => {}
        }
        last = Some(entry);
    }
    Ok(ChainSummary {
        entries: line_no,
        unfinished: open,
        last_digest: last.as_ref().map(|_| prev),
        last,
    })
}

/// Parse one line (without its newline): strict JSON, an entry, canonical.
pub fn parse_line(line: &[u8]) -> Result<AuditEntry, ChainProblem> {
    let value = parse_strict(line).map_err(|e| ChainProblem::BadJson(e.to_string()))?;
    let entry: AuditEntry =
        serde_json::from_value(value).map_err(|e| ChainProblem::BadEntry(e.to_string()))?;
    match to_canonical_from(&entry) {
        Ok(bytes) if bytes == line => Ok(entry),
        _ => Err(ChainProblem::NotCanonical),
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

enum LastLine {
    Empty,
    Truncated,
    Line(Vec<u8>),
}

/// The last complete line, found by reading backwards from the end in chunks, so an append
/// costs the same however long the log is.
fn read_last_line(file: &mut File) -> io::Result<LastLine> {
    const CHUNK: u64 = 8192;
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(LastLine::Empty);
    }
    let mut last_byte = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last_byte)?;
    if last_byte != *b"\n" {
        return Ok(LastLine::Truncated);
    }
    // Bytes of the last line, before its newline, collected from the end backwards.
    let end = len - 1;
    let mut start = end;
    let mut tail: Vec<u8> = Vec::new();
    while start > 0 {
        let from = start.saturating_sub(CHUNK);
        let mut chunk = vec![0u8; (start - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut chunk)?;
        if let Some(pos) = chunk.iter().rposition(|&b| b == b'\n') {
            chunk.drain(..=pos);
            chunk.extend_from_slice(&tail);
            return Ok(LastLine::Line(chunk));
        }
        chunk.extend_from_slice(&tail);
        tail = chunk;
        start = from;
    }
    Ok(LastLine::Line(tail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::receipt::DigestSet;

    fn log() -> (tempfile::TempDir, AuditLog) {
        let dir = tempfile::tempdir().unwrap();
        let (state, _) = crate::job::state::StateDir::init(&dir.path().join("state")).unwrap();
        let log = AuditLog::open(state.path());
        (dir, log)
    }

    /// A log with `n` entries of mixed outcomes.
    fn filled(n: usize) -> (tempfile::TempDir, AuditLog) {
        let (dir, log) = log();
        for i in 0..n {
            let record = match i % 3 {
                0 => AuditRecord {
                    certificate_digest: Some(Digest::of(b"cert")),
                    job_digest: Some(Digest::of(b"job")),
                    output_digests: vec![Subject {
                        name: "outputs.jsonl".into(),
                        digest: DigestSet::of(format!("out {i}").as_bytes()),
                    }],
                    ..AuditRecord::new("t", Outcome::Accepted)
                },
                1 => AuditRecord::with_reason("t", Outcome::Refused, &"the engine source differs"),
                _ => AuditRecord::with_reason("t", Outcome::Failed, &"disk full"),
            };
            log.append(record).unwrap();
        }
        (dir, log)
    }

    fn lines(log: &AuditLog) -> Vec<Vec<u8>> {
        let bytes = std::fs::read(log.path()).unwrap();
        bytes
            .split_inclusive(|&b| b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    }

    fn rewrite(log: &AuditLog, lines: &[Vec<u8>]) {
        std::fs::write(log.path(), lines.concat()).unwrap();
    }

    fn broken(log: &AuditLog) -> ChainBreak {
        match log.verify() {
            Err(AuditError::Broken { brk, .. }) => brk,
            other => panic!("expected a broken chain, got {other:?}"),
        }
    }

    #[test]
    fn a_good_chain_verifies() {
        let (_dir, log) = filled(5);
        let summary = log.verify().unwrap();
        assert_eq!(summary.entries, 5);
        let all = lines(&log);
        let last = all.last().unwrap();
        assert_eq!(
            summary.last_digest,
            Some(Digest::of(&last[..last.len() - 1]))
        );
        let first: serde_json::Value = serde_json::from_slice(&all[0]).unwrap();
        assert_eq!(first["seq"], 1);
        assert_eq!(first["prev"], "0".repeat(64));
        assert_eq!(first["outcome"], "accepted");
        assert_eq!(first["reason"], serde_json::Value::Null);
        assert_eq!(first["inputs_commitment"], serde_json::Value::Null);
        let second: serde_json::Value = serde_json::from_slice(&all[1]).unwrap();
        assert_eq!(second["outcome"], "refused");
        assert_eq!(second["reason"], "the engine source differs");
        assert_eq!(
            second["prev"],
            Digest::of(&all[0][..all[0].len() - 1]).to_hex()
        );
        assert_eq!(summary.last.unwrap().seq, 5);
    }

    #[test]
    fn empty_log_verifies_with_no_entries() {
        let (_dir, log) = log();
        std::fs::create_dir_all(log.path().parent().unwrap()).unwrap();
        std::fs::write(log.path(), b"").unwrap();
        let s = log.verify().unwrap();
        assert_eq!((s.entries, s.last_digest), (0, None));
    }

    #[test]
    fn rejects_missing_log() {
        let (_dir, log) = log();
        let e = log.verify().unwrap_err();
        assert!(matches!(e, AuditError::Missing { .. }), "{e}");
        assert_eq!(e.exit(), Exit::BadInput);
    }

    #[test]
    fn rejects_edited_line_at_the_next_link() {
        let (_dir, log) = filled(4);
        let mut all = lines(&log);
        let text = String::from_utf8(all[1].clone()).unwrap();
        all[1] = text.replace("differs", "matches").into_bytes();
        rewrite(&log, &all);
        let brk = broken(&log);
        assert_eq!(brk.line, 3);
        assert!(
            matches!(brk.problem, ChainProblem::PrevMismatch { .. }),
            "{brk}"
        );
        let e = log.verify().unwrap_err();
        assert_eq!(e.exit(), Exit::Refused);
        assert!(e.to_string().contains("broken at line 3: prev is"), "{e}");
    }

    #[test]
    fn rejects_edited_seq_and_garbage_at_that_line() {
        let (_dir, log) = filled(3);
        let mut all = lines(&log);
        let text = String::from_utf8(all[1].clone()).unwrap();
        all[1] = text.replace("\"seq\":2", "\"seq\":7").into_bytes();
        rewrite(&log, &all);
        assert_eq!(
            broken(&log),
            ChainBreak {
                line: 2,
                problem: ChainProblem::SeqGap {
                    expected: 2,
                    found: 7
                }
            }
        );
        let mut all = lines(&log);
        all[1] = b"{not json\n".to_vec();
        rewrite(&log, &all);
        let brk = broken(&log);
        assert!(
            brk.line == 2 && matches!(brk.problem, ChainProblem::BadJson(_)),
            "{brk}"
        );
    }

    #[test]
    fn rejects_deleted_line() {
        let (_dir, log) = filled(4);
        let mut all = lines(&log);
        all.remove(1);
        rewrite(&log, &all);
        assert_eq!(
            broken(&log),
            ChainBreak {
                line: 2,
                problem: ChainProblem::SeqGap {
                    expected: 2,
                    found: 3
                }
            }
        );
        // Removing the first line is caught at the (new) first line.
        let mut all = lines(&log);
        all.remove(0);
        rewrite(&log, &all);
        assert_eq!(broken(&log).line, 1);
    }

    #[test]
    fn rejects_reordered_lines() {
        let (_dir, log) = filled(4);
        let mut all = lines(&log);
        all.swap(1, 2);
        rewrite(&log, &all);
        assert_eq!(
            broken(&log),
            ChainBreak {
                line: 2,
                problem: ChainProblem::SeqGap {
                    expected: 2,
                    found: 3
                }
            }
        );
    }

    #[test]
    fn rejects_renumbered_lines_by_their_prev() {
        // Deleting line 2 and renumbering the rest keeps seq consistent; prev catches it.
        let (_dir, log) = filled(4);
        let mut all = lines(&log);
        all.remove(1);
        for (i, line) in all.iter_mut().enumerate().skip(1) {
            let text = String::from_utf8(line.clone()).unwrap();
            *line = text
                .replace(&format!("\"seq\":{}", i + 2), &format!("\"seq\":{}", i + 1))
                .into_bytes();
        }
        rewrite(&log, &all);
        let brk = broken(&log);
        assert!(
            brk.line == 2 && matches!(brk.problem, ChainProblem::PrevMismatch { .. }),
            "{brk}"
        );
    }

    #[test]
    fn rejects_truncated_last_line_and_refuses_to_append_after_it() {
        let (_dir, log) = filled(3);
        let bytes = std::fs::read(log.path()).unwrap();
        std::fs::write(log.path(), &bytes[..bytes.len() - 5]).unwrap();
        assert_eq!(
            broken(&log),
            ChainBreak {
                line: 3,
                problem: ChainProblem::Truncated
            }
        );
        let e = log
            .append(AuditRecord::new("t", Outcome::Failed))
            .unwrap_err();
        assert!(
            matches!(
                e,
                AuditError::Damaged {
                    problem: ChainProblem::Truncated,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            std::fs::read(log.path()).unwrap(),
            &bytes[..bytes.len() - 5]
        );
    }

    #[test]
    fn rejects_non_canonical_line() {
        let (_dir, log) = filled(2);
        let mut all = lines(&log);
        // The same entry with one space added: valid JSON, same meaning, not what we write.
        let text = String::from_utf8(all[0].clone()).unwrap();
        all[0] = text.replacen(',', ", ", 1).into_bytes();
        rewrite(&log, &all);
        assert_eq!(
            broken(&log),
            ChainBreak {
                line: 1,
                problem: ChainProblem::NotCanonical
            }
        );
    }

    #[test]
    fn rejects_unknown_field_and_duplicate_key() {
        let (_dir, log) = filled(2);
        let mut all = lines(&log);
        let text = String::from_utf8(all[0].clone()).unwrap();
        all[0] = text.replacen('{', "{\"a\":1,", 1).into_bytes();
        rewrite(&log, &all);
        let brk = broken(&log);
        assert!(
            matches!(&brk.problem, ChainProblem::BadEntry(m) if m.contains("unknown field `a`")),
            "{brk}"
        );
        all[0] = text.replacen('{', "{\"seq\":1,", 1).into_bytes();
        rewrite(&log, &all);
        let brk = broken(&log);
        assert!(
            matches!(&brk.problem, ChainProblem::BadJson(m) if m.contains("duplicate key")),
            "{brk}"
        );
    }

    #[test]
    fn append_continues_after_a_long_last_line() {
        let (_dir, log) = log();
        let long = "é".repeat(3 * MAX_REASON_LEN);
        let e = log
            .append(AuditRecord::with_reason("t", Outcome::Refused, &long))
            .unwrap();
        assert!(e.reason.as_ref().unwrap().len() <= MAX_REASON_LEN);
        assert!(long.starts_with(e.reason.as_ref().unwrap().as_str()));
        let mut outputs = Vec::new();
        for i in 0..200 {
            outputs.push(Subject {
                name: format!("out-{i:03}.jsonl"),
                digest: DigestSet::of(&[i as u8]),
            });
        }
        log.append(AuditRecord {
            output_digests: outputs,
            ..AuditRecord::new("t", Outcome::Accepted)
        })
        .unwrap();
        assert!(std::fs::metadata(log.path()).unwrap().len() > 3 * 8192);
        let third = log.append(AuditRecord::new("t", Outcome::Failed)).unwrap();
        assert_eq!(third.seq, 3);
        assert_eq!(log.verify().unwrap().entries, 3);
    }

    #[test]
    fn concurrent_appends_keep_the_chain() {
        let (_dir, log) = log();
        std::thread::scope(|s| {
            for t in 0..4 {
                let log = log.clone();
                s.spawn(move || {
                    for i in 0..15 {
                        let reason = format!("thread {t} attempt {i}");
                        log.append(AuditRecord::with_reason("t", Outcome::Refused, &reason))
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(log.verify().unwrap().entries, 60);
    }

    #[cfg(unix)]
    #[test]
    fn the_log_is_private_in_its_private_state_directory() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, log) = filled(1);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(log.path()), 0o600);
        assert_eq!(mode(log.path().parent().unwrap()), 0o700);
    }

    #[test]
    fn rejects_appending_when_the_log_is_a_directory_or_its_last_line_is_damaged() {
        let (_dir, log) = log();
        std::fs::create_dir(log.path()).unwrap();
        let e = log.check_appendable().unwrap_err();
        assert!(matches!(e, AuditError::Io { .. }), "{e}");
        assert!(e.hint().unwrap().contains("not a directory"), "{e:?}");
        std::fs::remove_dir(log.path()).unwrap();
        log.append(AuditRecord::new("a", Outcome::Refused)).unwrap();
        let mut bytes = std::fs::read(log.path()).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(log.path(), &bytes).unwrap();
        let e = log.check_appendable().unwrap_err();
        assert!(matches!(e, AuditError::Damaged { .. }), "{e}");
        assert_eq!(e.exit(), Exit::Refused);
        assert!(e.hint().unwrap().contains("rotate"), "{e:?}");
    }

    #[test]
    fn an_admitted_attempt_without_a_closing_entry_is_unfinished() {
        let (_dir, log) = log();
        log.append(AuditRecord::new("done", Outcome::Admitted))
            .unwrap();
        log.append(AuditRecord::new("killed", Outcome::Admitted))
            .unwrap();
        log.append(AuditRecord::new("refused", Outcome::Refused))
            .unwrap();
        log.append(AuditRecord::new("done", Outcome::Accepted))
            .unwrap();
        log.append(AuditRecord::new("failed", Outcome::Admitted))
            .unwrap();
        log.append(AuditRecord::new("failed", Outcome::Failed))
            .unwrap();
        let summary = log.verify().unwrap();
        assert_eq!(summary.entries, 6);
        assert_eq!(summary.unfinished, vec![(2, "killed".to_string())]);
    }
}
