//! Shards and their merge: `exec --shard K/N` (and `--shard-from-env N`) runs exactly its range
//! after admitting the whole job, `merge` joins the shards into the whole job's outputs, and
//! every way a set of shards can be wrong is refused with the shard named and nothing written.

use std::fs;

use serde_json::Value;

use crate::common::{job_toml, Env, EXEC};

/// Seven prompts (the fixture's, repeated with other ids), so two shards split 3 / 4.
fn seven_prompts(env: &Env) {
    let mut prompts = crate::common::fixture_prompts();
    while prompts.len() < 7 {
        prompts.push(prompts[prompts.len() % 3].clone());
    }
    prompts.truncate(7);
    env.write_inputs(&prompts);
}

fn shard_args(k: u32, n: u32, state: &'static str) -> Vec<String> {
    let mut args: Vec<String> = EXEC.iter().map(|s| s.to_string()).collect();
    args[6] = state.into();
    args.insert(1, format!("{k}/{n}"));
    args.insert(1, "--shard".into());
    args
}

fn run(env: &Env, args: &[String]) -> String {
    env.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// An approved job of seven inputs, its two shards run (by `state`), and the whole job run by
/// `whole.toml` into `whole/`; `keys.txt` lists the runner key.
fn two_shards() -> Env {
    let env = Env::approved_job();
    seven_prompts(&env);
    env.write_job(2, 6, r#"["tokens"]"#);
    env.write(
        "whole.toml",
        job_toml(2, 6, r#"["tokens"]"#).replace("output_dir = \"out\"", "output_dir = \"whole\""),
    );
    let out = run(&env, &shard_args(0, 2, "state"));
    assert!(
        out.contains("shard 0 of 2 (inputs 0 to 3 of 7): ran 3 inputs"),
        "{out}"
    );
    let out = run(&env, &shard_args(1, 2, "state"));
    assert!(
        out.contains("shard 1 of 2 (inputs 3 to 7 of 7): ran 4 inputs"),
        "{out}"
    );
    let mut whole: Vec<&str> = EXEC.to_vec();
    *whole.last_mut().unwrap() = "whole.toml";
    env.ok(&whole);
    env.write("keys.txt", "# the shard runners\nstate/runner.key.pub\n");
    env
}

const MERGE: &[&str] = &[
    "merge",
    "--cert",
    "cert.json",
    "--runner-keys",
    "keys.txt",
    "--out",
    "merged",
    "out/shard-0-of-2",
    "out/shard-1-of-2",
];

const VERIFY_MERGED: &[&str] = &[
    "verify",
    "merged",
    "--cert",
    "cert.json",
    "--runner-keys",
    "keys.txt",
];

fn receipt_facts(env: &Env, path: &str) -> Value {
    let envelope = env.envelope(path);
    serde_json::from_slice::<Value>(&envelope.payload).unwrap()["predicate"].clone()
}

#[test]
fn shards_merge_into_the_whole_jobs_outputs_and_verify() {
    let env = two_shards();
    let shard = receipt_facts(&env, "out/shard-1-of-2/receipt.json")["shard"].clone();
    assert_eq!(
        shard,
        serde_json::json!({"index": 1, "count": 2, "start": 3, "end": 7, "inputs_total": 7})
    );
    // Both shards committed to the same inputs, so the merge can tell.
    assert_eq!(
        receipt_facts(&env, "out/shard-0-of-2/receipt.json")["inputs"],
        receipt_facts(&env, "out/shard-1-of-2/receipt.json")["inputs"]
    );
    let out = env.ok(MERGE);
    assert!(out.contains("merged 2 shards (7 inputs)"), "{out}");
    assert_eq!(
        env.read("merged/outputs.jsonl"),
        env.read("whole/outputs.jsonl"),
        "the merged outputs are the whole job's, in input order"
    );
    for f in [
        "shard-0-of-2.receipt.json",
        "shard-1-of-2.receipt.json",
        "merge.json",
    ] {
        assert!(env.path("merged").join(f).is_file(), "{f}");
    }
    let verified = env.ok(VERIFY_MERGED);
    assert!(verified.contains("2 shards of certificate"), "{verified}");
    assert!(verified.contains("inputs 3..7"), "{verified}");

    // The merged directory checked again: an edited output line, an edited record.
    let outputs = env.read("merged/outputs.jsonl");
    env.write(
        "merged/outputs.jsonl",
        outputs.replacen("\"p4\"", "\"p9\"", 1),
    );
    env.fails(
        VERIFY_MERGED,
        3,
        "the lines of shard 1 are not the outputs its receipt binds",
    );
    env.write("merged/outputs.jsonl", &outputs);
    let record = env.read("merged/merge.json");
    env.write(
        "merged/merge.json",
        record.replacen("\"inputs_total\":7", "\"inputs_total\":8", 1),
    );
    env.fails(
        VERIFY_MERGED,
        3,
        "is not the record of the shard receipts and files it lists",
    );
    env.write("merged/merge.json", &record);
    env.ok(VERIFY_MERGED);
}

#[test]
fn merge_refuses_a_missing_duplicated_foreign_edited_or_whole_shard_and_writes_nothing() {
    let env = two_shards();
    let refused = |args: &[&str], needle: &str| {
        let stderr = env.fails(args, 3, needle);
        assert!(!env.path("merged").exists(), "{stderr}");
    };
    refused(&MERGE[..8], "shards 1 of 2 are missing");
    let mut dup = MERGE[..8].to_vec();
    dup.push("out/shard-0-of-2");
    refused(
        &dup,
        "shard index 0 appears twice: out/shard-0-of-2 and out/shard-0-of-2",
    );
    let mut whole = MERGE.to_vec();
    whole.push("whole");
    refused(
        &whole,
        "shard whole: its receipt is of a whole job, not of a shard",
    );

    // A runner key not on the list.
    env.init_state("other");
    env.write("other-keys.txt", "other/runner.key.pub\n");
    let mut foreign = MERGE.to_vec();
    foreign[4] = "other-keys.txt";
    refused(
        &foreign,
        "shard out/shard-0-of-2: its receipt is signed by runner key",
    );

    // A shard's outputs edited after its run.
    let path = "out/shard-1-of-2/outputs.jsonl";
    let text = env.read(path);
    env.write(path, text.replacen("\"p3\"", "\"p8\"", 1));
    refused(MERGE, "shard out/shard-1-of-2:");
    env.write(path, &text);

    // A shard of another job (other generation settings) under the same certificate.
    env.write_job(2, 5, r#"["tokens"]"#);
    fs::rename(env.path("out"), env.path("first")).unwrap();
    run(&env, &shard_args(1, 2, "state"));
    let mixed = [
        "merge",
        "--cert",
        "cert.json",
        "--runner-keys",
        "keys.txt",
        "--out",
        "merged",
        "first/shard-0-of-2",
        "out/shard-1-of-2",
    ];
    refused(
        &mixed,
        "its job digest differs from shard first/shard-0-of-2's",
    );
}

#[test]
fn a_shard_from_the_completion_index_runs_its_range() {
    let env = Env::approved_job();
    seven_prompts(&env);
    let mut args: Vec<&str> = EXEC.to_vec();
    args.splice(1..1, ["--shard-from-env", "3"]);
    let out = env
        .command(&args)
        .env(runner::job::shard::COMPLETION_INDEX_ENV, "2")
        .ok();
    assert!(
        out.contains("shard 2 of 3 (inputs 4 to 7 of 7): ran 3 inputs"),
        "{out}"
    );
    assert_eq!(env.outputs_of("out/shard-2-of-3").len(), 3);
    env.fails(&args, 2, "--shard-from-env needs $JOB_COMPLETION_INDEX");
    env.command(&args)
        .env(runner::job::shard::COMPLETION_INDEX_ENV, "3")
        .fails(2, "shard index 3 is not below the shard count 3");
    env.fails(
        &["exec", "--shard", "1/0", "--cert", "cert.json", "job.toml"],
        2,
        "the shard count must be 1 to",
    );
}

#[test]
fn init_keep_existing_keeps_a_pods_identity_across_restarts() {
    let env = Env::new();
    let init = ["init", "--state-dir", "pod", "--keep-existing"];
    let first = env.ok(&init);
    assert!(
        first.contains("initialised the runner's state directory"),
        "{first}"
    );
    let recipient = env.ok(&["identity", "--state-dir", "pod", "--recipient"]);
    let again = env.ok(&init);
    assert!(again.contains("is already initialised"), "{again}");
    assert!(again.contains(recipient.trim()), "{again}");
    assert_eq!(
        env.ok(&["identity", "--state-dir", "pod", "--recipient"]),
        recipient
    );
    env.fails(&init[..3], 2, "already");
}
