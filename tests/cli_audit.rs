//! `runner audit verify` end to end: a log written through the library, checked by the binary
//! in each way the state directory can be named, and every kind of damage reported at its line
//! with exit code 3.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use runner::job::audit::{AuditLog, AuditRecord, Outcome};
use runner::primitives::digest::Digest;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    /// A state directory `state/` with a log of `n` entries.
    fn with_entries(n: usize) -> Env {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        let log = AuditLog::open(&env.path("state"));
        for i in 0..n {
            let record = if i % 2 == 0 {
                AuditRecord {
                    certificate_digest: Some(Digest::of(b"cert")),
                    ..AuditRecord::new(Outcome::Accepted)
                }
            } else {
                AuditRecord::with_reason(Outcome::Refused, &format!("refusal {i}"))
            };
            log.append(record).unwrap();
        }
        env
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log_path(&self) -> PathBuf {
        self.path("state/audit.jsonl")
    }

    fn lines(&self) -> Vec<String> {
        fs::read_to_string(self.log_path())
            .unwrap()
            .split_inclusive('\n')
            .map(str::to_owned)
            .collect()
    }

    fn set_lines(&self, lines: &[String]) {
        fs::write(self.log_path(), lines.concat()).unwrap();
    }

    fn run(&self, args: &[&str], state_env: Option<&Path>) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_remove("RUNNER_STATE_DIR");
        if let Some(dir) = state_env {
            cmd.env("RUNNER_STATE_DIR", dir);
        }
        cmd.output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        common::succeeded(args, self.run(args, None))
    }

    /// `audit verify --state-dir state` must fail with `code` and mention `needle`.
    fn broken(&self, code: i32, needle: &str) -> String {
        let out = self.run(&["audit", "verify", "--state-dir", "state"], None);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
        assert!(out.stdout.is_empty());
        stderr
    }

    fn last_digest(&self) -> String {
        let lines = self.lines();
        let last = lines.last().unwrap();
        Digest::of(last.trim_end_matches('\n').as_bytes()).to_hex()
    }
}

#[test]
fn a_good_chain_prints_count_and_last_digest() {
    let env = Env::with_entries(4);
    let out = env.ok(&["audit", "verify", "--state-dir", "state"]);
    assert!(out.contains("entries      4 (chain intact)"), "{out}");
    assert!(
        out.contains(&format!("last digest  {}", env.last_digest())),
        "{out}"
    );
    assert!(out.contains("last entry   seq 4,"), "{out}");
    assert!(out.contains("refused"), "{out}");

    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["audit", "verify", "--state-dir", "state", "--json"]))
            .unwrap();
    assert_eq!(json["intact"], true);
    assert_eq!(json["entries"], 4);
    assert_eq!(json["last_digest"], env.last_digest());
    assert_eq!(json["last"]["reason"], "refusal 3");
}

#[test]
fn state_dir_comes_from_the_environment_then_the_default() {
    let env = Env::with_entries(2);
    let out = env.run(&["audit", "verify"], Some(&env.path("state")));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("entries      2"));

    // Without flag or variable: ./.runner-state, which does not exist here.
    let out = env.run(&["audit", "verify"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("there is no audit log at .runner-state/audit.jsonl"),
        "{stderr}"
    );
    fs::rename(env.path("state"), env.path(".runner-state")).unwrap();
    let out = env.run(&["audit", "verify"], None);
    assert!(out.status.success());
}

#[test]
fn rejects_edited_line() {
    let env = Env::with_entries(4);
    let mut lines = env.lines();
    lines[1] = lines[1].replace("refusal 1", "refusal 9");
    env.set_lines(&lines);
    env.broken(3, "broken at line 3: prev is");
}

#[test]
fn rejects_deleted_line() {
    let env = Env::with_entries(4);
    let mut lines = env.lines();
    lines.remove(2);
    env.set_lines(&lines);
    env.broken(3, "broken at line 3: seq is 4, expected 3");
}

#[test]
fn rejects_reordered_lines() {
    let env = Env::with_entries(4);
    let mut lines = env.lines();
    lines.swap(0, 1);
    env.set_lines(&lines);
    env.broken(3, "broken at line 1: seq is 2, expected 1");
}

#[test]
fn rejects_truncated_last_line() {
    let env = Env::with_entries(3);
    let mut lines = env.lines();
    let last = lines.pop().unwrap();
    lines.push(last[..last.len() / 2].to_owned());
    env.set_lines(&lines);
    env.broken(3, "broken at line 3: the line is truncated");
}

#[test]
fn rejects_line_that_is_not_json() {
    let env = Env::with_entries(3);
    let mut lines = env.lines();
    lines[1] = "hello\n".into();
    env.set_lines(&lines);
    env.broken(3, "broken at line 2: the line is not valid JSON");
}
