//! The resume journal: a long run killed mid-way (pod eviction, OOM, a reboot) restarts from its
//! last completed batch instead of from zero.
//!
//! As batches complete, their output lines are appended to `STATE/journals/<id>.journal`, each
//! record sealed (age) to the runner's own recipient, length-prefixed, and fsynced, so the
//! plaintext outputs never reach the disk. The first record binds the journal to the
//! certificate, the job, the exact inputs, the shard and the runner key; a journal whose
//! binding does not match, or that does not open, is discarded with a one-line notice. A record
//! cut short by the kill is dropped. The journal is removed once the outputs are published.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::generate::Finish;
use crate::error::{Diagnose, Exit};
use crate::primitives::canonical::to_canonical_from;
use crate::primitives::digest::Digest;
use crate::sealing::{open, seal, SealKey};

const JOURNAL_SCHEMA: &str = "runner-journal/2";
/// The largest record read back (a batch's output lines).
const MAX_RECORD: u64 = 1 << 32;

/// What a journal is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// Always `runner-journal/2`.
    pub schema: String,
    /// The certificate digest.
    pub certificate: Digest,
    /// The job file's digest.
    pub job: Digest,
    /// A digest of the exact inputs bytes as received (kept only inside the sealed journal).
    pub inputs: Digest,
    /// `[index, count]` of the shard, if any.
    pub shard: Option<[u32; 2]>,
    /// The runner key id.
    pub runner_key: Digest,
}

impl Binding {
    /// The binding of these values.
    pub fn new(
        certificate: Digest,
        job: Digest,
        inputs: Digest,
        shard: Option<[u32; 2]>,
        runner_key: Digest,
    ) -> Binding {
        Binding {
            schema: JOURNAL_SCHEMA.into(),
            certificate,
            job,
            inputs,
            shard,
            runner_key,
        }
    }

    /// The journal's file name: from public values only (certificate, job, shard).
    fn file_name(&self) -> String {
        let mut b = self.certificate.0.to_vec();
        b.extend_from_slice(&self.job.0);
        if let Some([k, n]) = self.shard {
            b.extend_from_slice(&k.to_le_bytes());
            b.extend_from_slice(&n.to_le_bytes());
        }
        format!(
            "{}.journal",
            Digest::derive("runner resume journal name v1", &b).short()
        )
    }
}

/// The journal's first record: what it is for, and the seed the run drew for sampling (a
/// resumed run must sample the rest of its inputs from the same one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    binding: Binding,
    /// Hex of the drawn seed's 8 little-endian bytes (JSON numbers cannot hold every u64).
    drawn_seed: String,
}

/// One completed input, as the run recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its output line.
    pub line: serde_json::Value,
    /// How many tokens it generated.
    pub tokens: u64,
    /// Whether it stopped on a stop token.
    pub stopped: bool,
}

impl Entry {
    /// An entry for `line`.
    pub fn new(line: serde_json::Value, tokens: u64, finish: Finish) -> Entry {
        Entry {
            line,
            tokens,
            stopped: finish == Finish::Stop,
        }
    }
}

/// Why the journal could not be used.
#[derive(Debug, thiserror::Error)]
#[error("resume journal {}: {source}", path.display())]
pub struct JournalError {
    path: PathBuf,
    source: std::io::Error,
}

impl Diagnose for JournalError {
    fn exit(&self) -> Exit {
        Exit::Failure
    }
    fn hint(&self) -> Option<String> {
        Some("check that the runner's state directory is writable and has space".into())
    }
}

/// An open journal, appended to as batches complete.
pub struct Journal {
    path: PathBuf,
    file: File,
    recipient: String,
}

/// What an earlier attempt had completed.
#[derive(Debug, Default)]
pub struct Resumed {
    /// The completed inputs, in order, from the start of the run's range.
    pub entries: Vec<Entry>,
    /// A one-line notice about a journal that was discarded.
    pub notice: Option<String>,
    /// The seed the run draws from where the job gives none: the earlier attempt's when it
    /// resumes, else the fresh one given to [`Journal::open`].
    pub drawn_seed: u64,
}

fn record(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// The records of `bytes` that open, each with the offset where it ends.
fn read_records(bytes: &[u8], key: &SealKey) -> Vec<(Zeroizing<Vec<u8>>, usize)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(len) = bytes.get(at..at + 8) {
        let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (at + 8).checked_add(l))
            .filter(|&e| e <= bytes.len())
        else {
            break;
        };
        match open(&bytes[at + 8..end], key, MAX_RECORD) {
            Ok(plain) => out.push((plain, end)),
            Err(_) => break,
        }
        at = end;
    }
    out
}

/// What a journal file's bytes hold for a run.
#[derive(Debug, Default)]
pub struct Contents {
    /// The completed inputs of the batch records that open and parse, in order, up to the
    /// first that does not.
    pub entries: Vec<Entry>,
    /// Where those records end: the rest is cut off when the run appends.
    pub keep: usize,
    /// The seed the first attempt drew.
    pub drawn_seed: u64,
}

/// Read a journal file's `bytes` for `binding`; `None` when its first record is not this
/// binding's header (another run's journal, another key, or not a journal at all).
pub fn read_journal(bytes: &[u8], binding: &Binding, key: &SealKey) -> Option<Contents> {
    let records = read_records(bytes, key);
    let (first, header_end) = records.first()?;
    let header: Header = serde_json::from_slice(first).ok()?;
    if header.binding != *binding {
        return None;
    }
    let seed = hex::decode(&header.drawn_seed).ok()?;
    let mut contents = Contents {
        entries: Vec::new(),
        keep: *header_end,
        drawn_seed: u64::from_le_bytes(<[u8; 8]>::try_from(seed).ok()?),
    };
    // Up to the first record that does not parse: what follows it is dropped.
    for (r, end) in &records[1..] {
        match serde_json::from_slice::<Vec<Entry>>(r) {
            Ok(batch) => contents.entries.extend(batch),
            Err(_) => break,
        }
        contents.keep = *end;
    }
    Some(contents)
}

impl Journal {
    /// Open (or start) the journal for `binding` in `state_dir`, with what it already holds; a
    /// journal started here records `fresh_seed` as the run's drawn seed.
    pub fn open(
        state_dir: &Path,
        binding: &Binding,
        key: &SealKey,
        fresh_seed: u64,
    ) -> Result<(Journal, Resumed), JournalError> {
        let dir = state_dir.join("journals");
        let path = dir.join(binding.file_name());
        let err = |source| JournalError {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(err)?;
        let mut resumed = Resumed {
            drawn_seed: fresh_seed,
            ..Resumed::default()
        };
        let mut keep = 0usize;
        if let Ok(mut f) = File::open(&path) {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).map_err(err)?;
            match read_journal(&bytes, binding, key) {
                Some(c) => {
                    keep = c.keep;
                    resumed.entries = c.entries;
                    resumed.drawn_seed = c.drawn_seed;
                }
                None => {
                    resumed.notice = Some(
                        "discarded a resume journal that is not this run's (another \
                         certificate, job, inputs, shard or runner key, or it does not open)"
                            .into(),
                    );
                }
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(err)?;
        set_private(&path).map_err(err)?;
        // A record cut short by the kill goes; so does a journal that is not this run's.
        file.set_len(keep as u64).map_err(err)?;
        file.seek(SeekFrom::End(0)).map_err(err)?;
        let mut journal = Journal {
            path: path.clone(),
            file,
            recipient: key.recipient(),
        };
        if keep == 0 {
            resumed.entries.clear();
            resumed.drawn_seed = fresh_seed;
            let header = Header {
                binding: binding.clone(),
                drawn_seed: hex::encode(fresh_seed.to_le_bytes()),
            };
            let header = to_canonical_from(&header)
                .map_err(|e| err(std::io::Error::other(e.to_string())))?;
            journal.write_record(&header)?;
        }
        Ok((journal, resumed))
    }

    fn write_record(&mut self, plain: &[u8]) -> Result<(), JournalError> {
        let err = |source| JournalError {
            path: self.path.clone(),
            source,
        };
        let sealed = seal(plain, std::slice::from_ref(&self.recipient))
            .map_err(|e| err(std::io::Error::other(e.to_string())))?;
        self.file.write_all(&record(&sealed)).map_err(err)?;
        self.file.sync_data().map_err(err)
    }

    /// Append a completed batch (sealed, fsynced).
    pub fn append(&mut self, batch: &[Entry]) -> Result<(), JournalError> {
        let plain = Zeroizing::new(serde_json::to_vec(batch).unwrap_or_default());
        self.write_record(&plain)
    }

    /// Remove the journal: the run's outputs are published.
    pub fn remove(self) {
        // A journal left behind is sealed and bound to this run; the next one discards it.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(unix)]
fn set_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn set_private(_: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(job: u8) -> Binding {
        Binding::new(
            Digest([1; 32]),
            Digest([job; 32]),
            Digest([3; 32]),
            None,
            Digest([4; 32]),
        )
    }

    #[test]
    fn resumes_what_was_appended_drops_a_cut_record_and_discards_another_runs() {
        let dir = tempfile::tempdir().unwrap();
        let key = SealKey::generate();
        let (mut j, r) = Journal::open(dir.path(), &binding(2), &key, 77).unwrap();
        assert!(r.entries.is_empty() && r.notice.is_none());
        assert_eq!(r.drawn_seed, 77);
        let e = |i: u64| Entry::new(serde_json::json!({"id": i}), i, Finish::Length);
        j.append(&[e(0), e(1)]).unwrap();
        j.append(&[e(2)]).unwrap();
        let path = j.path.clone();
        drop(j);
        // The plaintext is not on disk.
        let bytes = fs::read(&path).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("\"id\""));
        // A kill in the middle of the next append.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[200, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]).unwrap();
        let (j, r) = Journal::open(dir.path(), &binding(2), &key, 78).unwrap();
        assert_eq!(r.entries, vec![e(0), e(1), e(2)]);
        assert_eq!(
            r.drawn_seed, 77,
            "a resumed run samples from the first attempt's seed"
        );
        drop(j);
        // Another job's binding, or another key: discarded.
        let (_, r) = Journal::open(dir.path(), &binding(2), &SealKey::generate(), 79).unwrap();
        assert!(r.entries.is_empty() && r.notice.is_some());
        assert_eq!(r.drawn_seed, 79);
        let (_, r) = Journal::open(dir.path(), &binding(2), &key, 80).unwrap();
        assert!(
            r.entries.is_empty(),
            "the discarded journal was started again"
        );
    }
}
