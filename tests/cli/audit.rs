//! `runner audit verify` end to end: a log written through the library, checked by the binary
//! in each way the state directory can be named, and every kind of damage reported at its line
//! with exit code 3.

use std::fs;

use runner::job::state::{DEFAULT_STATE_DIR, STATE_DIR_ENV};

use crate::common::Env;

/// `audit verify` of the directory's `state/`.
const VERIFY: &[&str] = &["audit", "verify", "--state-dir", "state"];

#[test]
fn a_good_chain_prints_count_and_last_digest() {
    let env = Env::audit_log(4);
    let out = env.ok(VERIFY);
    assert!(out.contains("entries      4 (chain intact)"), "{out}");
    assert!(
        out.contains(&format!("last digest  {}", env.last_audit_digest())),
        "{out}"
    );
    assert!(out.contains("last entry   seq 4,"), "{out}");
    assert!(out.contains("refused"), "{out}");

    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["audit", "verify", "--state-dir", "state", "--json"]))
            .unwrap();
    assert_eq!(json["intact"], true);
    assert_eq!(json["entries"], 4);
    assert_eq!(json["last_digest"], env.last_audit_digest());
    assert_eq!(json["last"]["reason"], "refusal 3");
}

#[test]
fn state_dir_comes_from_the_environment_then_the_default() {
    let env = Env::audit_log(2);
    let out = env
        .command(&["audit", "verify"])
        .env(STATE_DIR_ENV, env.path("state"))
        .output();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("entries      2"));

    // Without flag or variable: the fixed absolute default, never the working directory (a
    // `.runner-state` here, the old default, is not read).
    fs::rename(env.path("state"), env.path(".runner-state")).unwrap();
    let out = env.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "there is no audit log at {DEFAULT_STATE_DIR}/audit.jsonl"
        )),
        "{stderr}"
    );
}

#[test]
fn rejects_edited_line() {
    let env = Env::audit_log(4);
    let mut lines = env.audit_lines();
    lines[1] = lines[1].replace("refusal 1", "refusal 9");
    env.set_audit_lines(&lines);
    env.fails(VERIFY, 3, "broken at line 3: prev is");
}

#[test]
fn rejects_deleted_line() {
    let env = Env::audit_log(4);
    let mut lines = env.audit_lines();
    lines.remove(2);
    env.set_audit_lines(&lines);
    env.fails(VERIFY, 3, "broken at line 3: seq is 4, expected 3");
}

#[test]
fn rejects_reordered_lines() {
    let env = Env::audit_log(4);
    let mut lines = env.audit_lines();
    lines.swap(0, 1);
    env.set_audit_lines(&lines);
    env.fails(VERIFY, 3, "broken at line 1: seq is 2, expected 1");
}

#[test]
fn rejects_truncated_last_line() {
    let env = Env::audit_log(3);
    let mut lines = env.audit_lines();
    let last = lines.pop().unwrap();
    lines.push(last[..last.len() / 2].to_owned());
    env.set_audit_lines(&lines);
    env.fails(VERIFY, 3, "broken at line 3: the line is truncated");
}

#[test]
fn rejects_line_that_is_not_json() {
    let env = Env::audit_log(3);
    let mut lines = env.audit_lines();
    lines[1] = "hello\n".into();
    env.set_audit_lines(&lines);
    env.fails(VERIFY, 3, "broken at line 2: the line is not valid JSON");
}
