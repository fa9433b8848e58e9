//! The audit log of an [`Env`]'s `state/`: as `runner audit verify` reports it, and as lines.

use std::path::PathBuf;

use runner::primitives::digest::Digest;
use serde_json::Value;

use super::env::Env;

impl Env {
    /// Entries in the audit log (0 when there is none yet).
    pub fn audit_entries(&self) -> u64 {
        if !self.audit_log_path().exists() {
            return 0;
        }
        self.audit()["entries"].as_u64().unwrap()
    }

    /// `runner audit verify --json`: the chain is intact.
    pub fn audit(&self) -> Value {
        let out = self.ok(&["audit", "verify", "--state-dir", "state", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["valid"], true, "{v}");
        v
    }

    pub fn audit_log_path(&self) -> PathBuf {
        self.path("state/audit.jsonl")
    }

    /// The log's lines, each with its newline (the last may lack one).
    pub fn audit_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.audit_log_path())
            .unwrap()
            .split_inclusive('\n')
            .map(str::to_owned)
            .collect()
    }

    /// Every entry of the log, parsed.
    pub fn audit_entry_lines(&self) -> Vec<Value> {
        self.audit_lines()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Replace the log with `lines`, as they are.
    pub fn set_audit_lines(&self, lines: &[String]) {
        std::fs::write(self.audit_log_path(), lines.concat()).unwrap();
    }

    /// The digest of the log's last line, as `audit verify` prints it.
    pub fn last_audit_digest(&self) -> String {
        let lines = self.audit_lines();
        let last = lines.last().unwrap();
        Digest::of(last.trim_end_matches('\n').as_bytes()).to_hex()
    }
}
