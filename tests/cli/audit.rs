//! `runner audit verify` end to end: a log written through the library, checked by the binary
//! in each way the state directory can be named, and every kind of damage reported at its line
//! with exit code 3; `runner audit list`, which shows entries without their private parts.

use std::fs;

use runner::job::state::{DEFAULT_STATE_DIR, STATE_DIR_ENV};

use crate::common::{Env, EXEC};

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
    assert_eq!(json["valid"], true);
    assert_eq!(json["entries"], 4);
    assert_eq!(json["last_digest"], env.last_audit_digest());
    assert_eq!(json["last"]["reason"], "refusal 3");
}

#[test]
fn list_shows_every_entry_without_its_private_parts() {
    let env = Env::approved_job();
    env.ok(EXEC);
    // A second run is refused: out/ is taken.
    env.exits(EXEC, 2);
    let lines = env.audit_entry_lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let accepted = &lines[1];
    assert_eq!(accepted["outcome"], "accepted");
    let commitment = accepted["inputs_commitment"].as_str().unwrap().to_owned();
    let outputs = accepted["output_digests"].as_array().unwrap().clone();
    assert!(!outputs.is_empty());
    // Every digest of a file written, in any spelling a subject has.
    let private: Vec<String> = outputs
        .iter()
        .flat_map(|o| o["digest"].as_object().unwrap().values())
        .map(|d| d.as_str().unwrap().to_owned())
        .chain([commitment])
        .collect();

    let out = env.ok(&["audit", "list", "--state-dir", "state"]);
    assert!(out.contains("(3 entries)"), "{out}");
    for (line, outcome) in out
        .lines()
        .skip(1)
        .filter(|l| !l.trim_start().starts_with("reason"))
        .zip(["admitted", "accepted", "refused"])
    {
        assert!(line.contains(outcome), "{line}");
    }
    assert!(
        out.contains("reason: job job.toml: output_dir out already exists"),
        "{out}"
    );
    assert!(out.contains(&format!("outputs {}", outputs.len())), "{out}");
    let json_text = env.ok(&["audit", "list", "--state-dir", "state", "--json"]);
    for secret in &private {
        assert!(!out.contains(secret.as_str()), "{secret} in: {out}");
        assert!(!out.contains(&secret[..16]), "{secret} in: {out}");
        assert!(
            !json_text.contains(secret.as_str()),
            "{secret} in: {json_text}"
        );
    }
    let json: serde_json::Value = serde_json::from_str(&json_text).unwrap();
    let entries = json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    let mut keys: Vec<&str> = entries[1]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "attempt",
            "certificate_digest",
            "engine_digest",
            "job_digest",
            "model_digest",
            "outcome",
            "outputs",
            "policy_id",
            "reason",
            "seq",
            "time",
        ]
    );
    assert_eq!(entries[1]["outputs"], outputs.len());
    assert_eq!(
        entries[1]["certificate_digest"],
        accepted["certificate_digest"]
    );
    assert_eq!(entries[2]["outcome"], "refused");

    // A broken chain is reported, not listed.
    let mut log = env.audit_lines();
    log.swap(0, 1);
    env.set_audit_lines(&log);
    env.fails(
        &["audit", "list", "--state-dir", "state"],
        3,
        "is broken at line 1",
    );
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
