//! `runner exec` end to end, through the real binary, each test in its own temporary directory
//! with its own state directory: keygen, approve, cosign, exec, `runner verify` and `runner audit
//! verify`; every refusal's exit code, message, hint, audit entry and the absence of any output;
//! a run killed mid-way leaving nothing behind; and text prompts through the real tokenizer.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use runner::model::config::ModelConfig;
use runner::model::digest::model_digest;
use runner::model::synthetic::SyntheticSpec;
use runner::model::tokenizer::Tokenizer;
use runner::primitives::digest::Digest;
use runner::trust::certificate::Certificate;
use runner::trust::receipt::{Commitment, INPUTS_COMMITMENT_CONTEXT};
use serde_json::Value;

use crate::common::repo::{cached_tokenizer, root};
use crate::common::{expected_json, ids, job_toml, Env, EXEC};

// ---- the whole flow ----

#[test]
fn exec_runs_an_approved_job_and_its_receipt_verifies() {
    let env = Env::approved_job();
    let out = env.ok(EXEC);
    assert!(out.contains("ran 4 inputs"), "{out}");
    assert!(
        out.contains("wrote outputs.jsonl and receipt.json in out"),
        "{out}"
    );

    // One line per input, in input order, matching the HF reference: greedy tokens up to
    // max_new_tokens, cut after the first of the model's stop ids (config.json's eos_token_id;
    // the fixture has no generation_config.json). The batch of 2 mixes prompt lengths, so
    // left padding is exercised.
    let expected = expected_json();
    let eos = ModelConfig::load(&env.path("model")).unwrap().eos_token_ids;
    let max_new = 16;
    let lines = env.outputs();
    assert_eq!(lines.len(), 4);
    let mut generated = 0;
    for (i, line) in lines.iter().enumerate() {
        let reference = ids(&expected["single"][i]["tokens"]);
        let stop = reference.iter().position(|t| eos.contains(t));
        // The fixture records where the stop rule over [1, 106] cuts; ours stops no later.
        if let (Some(s), Some(f)) = (stop, expected["single"][i]["first_stop_index"].as_u64()) {
            assert!(s as u64 <= f);
        }
        let (want, finish) = match stop {
            Some(s) if s < max_new => (&reference[..=s], "stop"),
            _ => (&reference[..max_new], "length"),
        };
        let obj = line.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["finish_reason", "id", "tokens"], "{line}");
        assert_eq!(line["id"], format!("p{i}"));
        assert_eq!(ids(&line["tokens"]), want, "input p{i}");
        assert_eq!(line["finish_reason"], finish, "input p{i}");
        generated += want.len() as u64;
    }

    // The receipt verifies against the certificate and binds this job, inputs and outputs.
    let receipt = env.verify_receipt("cert.json");
    let cert = Certificate::load(&env.path("cert.json")).unwrap();
    let f = &receipt["facts"];
    assert_eq!(f["certificate_digest"], cert.digest().to_hex());
    assert_eq!(f["model_digest"], cert.payload().model_digest.to_hex());
    assert_eq!(
        f["job_digest"],
        Digest::of(&fs::read(env.path("job.toml")).unwrap()).to_hex()
    );
    // The inputs are bound by a salted commitment the data owner can open, not a plain digest.
    let inputs = fs::read(env.path("inputs.jsonl")).unwrap();
    let salt = Digest::from_hex(f["inputs"]["salt"].as_str().unwrap()).unwrap();
    assert_eq!(
        f["inputs"]["commitment"],
        Commitment::with_salt(INPUTS_COMMITMENT_CONTEXT, salt, &inputs)
            .commitment
            .to_hex()
    );
    assert!(!receipt.to_string().contains(&Digest::of(&inputs).to_hex()));
    assert_eq!(f["counts"]["inputs"], 4);
    assert_eq!(f["counts"]["generated_tokens"], generated);
    let outputs_blake3 = Digest::of(&fs::read(env.path("out/outputs.jsonl")).unwrap()).to_hex();
    assert_eq!(receipt["subjects"][0]["digest"]["blake3"], outputs_blake3);
    let mut files: Vec<String> = fs::read_dir(env.path("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["outputs.jsonl", "receipt.json"]);

    // The attempt's two audit entries: admitted (before the first batch), then accepted, with
    // the same digests.
    let audit = env.audit();
    assert_eq!(audit["entries"], 2);
    assert_eq!(audit["unfinished"], serde_json::json!([]));
    let entries = env.audit_entry_lines();
    assert_eq!(entries[0]["outcome"], "admitted");
    assert_eq!(entries[0]["attempt"], entries[1]["attempt"]);
    assert_eq!(entries[0]["inputs_commitment"], f["inputs"]["commitment"]);
    let last = &audit["last"];
    assert_eq!(last["outcome"], "accepted");
    assert_eq!(last["reason"], Value::Null);
    assert_eq!(last["certificate_digest"], cert.digest().to_hex());
    assert_eq!(
        last["output_digests"][0]["digest"]["blake3"],
        outputs_blake3
    );
}

#[test]
fn shipped_examples_parse() {
    let repo = root();
    let job = runner::job::spec::JobSpec::load(&repo.join("examples/job.toml")).unwrap();
    assert_eq!(job.generation.batch_size, 8);
    let inputs = runner::job::inputs::read_inputs(&repo.join("examples/inputs.jsonl")).unwrap();
    assert_eq!(inputs.len(), 4);
}

// ---- refusals: exit code, message, hint, audit entry, nothing written ----

#[test]
fn rejects_engine_edited_after_approval() {
    let env = Env::approved_job();
    let approved = Certificate::load(&env.path("cert.json"))
        .unwrap()
        .payload()
        .engine
        .source_digest;
    let mut source = fs::read(env.path("engines/gemma3.eng")).unwrap();
    source.extend_from_slice(b"\n# an edit after approval\n");
    env.write("engines/gemma3.eng", &source);
    let stderr = env.refused(
        EXEC,
        3,
        &[
            "is not the approved engine",
            &approved.to_hex(),
            &Digest::of(&source).to_hex(),
            "runner review",
        ],
    );
    assert!(stderr.contains("engines/gemma3.eng"), "{stderr}");
}

#[test]
fn rejects_changed_model_weights() {
    let env = Env::approved_job();
    let approved = Certificate::load(&env.path("cert.json"))
        .unwrap()
        .payload()
        .model_digest;
    // Flip a bit of the last weight: the file still loads, only its digest changes.
    let path = env.path("model/model.safetensors");
    let mut bytes = fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    let found = model_digest(&env.path("model")).unwrap().digest;
    assert_ne!(found, approved);
    env.refused(
        EXEC,
        3,
        &[
            "is not the approved model",
            &approved.to_hex(),
            &found.to_hex(),
            "use the model directory the owners approved",
        ],
    );

    // A byte of the safetensors header: refused as not approved, before anything parses it.
    *bytes.last_mut().unwrap() ^= 0x01;
    bytes[20] ^= 0x20;
    fs::write(&path, &bytes).unwrap();
    env.refused(EXEC, 3, &["is not the approved model", &approved.to_hex()]);
}

#[test]
fn rejects_certificate_below_the_signature_threshold() {
    let env = Env::approved_job();
    env.approve("owner-a", "one.json", &[]);
    env.refused(
        &env.exec_with_cert("one.json"),
        3,
        &[
            "not enough owner signatures: 1 valid, 2 required",
            "runner cosign",
        ],
    );
}

#[test]
fn rejects_certificate_signed_by_untrusted_keys() {
    let env = Env::approved_job();
    env.keygen("stranger");
    env.keygen("stranger-2");
    env.approve("stranger", "strangers.json", &[]);
    // Co-signed under the strangers' own trust file: the runner's lists neither.
    fs::copy(env.path("trust.toml"), env.path("runner-trust.toml")).unwrap();
    env.trust(1, &["stranger", "stranger-2"], &[]);
    env.cosign("strangers.json", "stranger-2");
    fs::rename(env.path("runner-trust.toml"), env.path("trust.toml")).unwrap();
    let stranger = runner::primitives::keys::SecretKey::load(&env.path("keys/stranger.key"))
        .unwrap()
        .key_id();
    env.refused(
        &env.exec_with_cert("strangers.json"),
        3,
        &[
            "0 valid, 2 required",
            "ignored signatures by keys not in the trust configuration",
            &stranger.short(),
        ],
    );
}

#[test]
fn rejects_revoked_certificate() {
    let env = Env::approved_job();
    let digest = Certificate::load(&env.path("cert.json")).unwrap().digest();
    env.trust(2, &["owner-a", "owner-b"], &[digest.to_hex()]);
    env.refused(
        EXEC,
        3,
        &[
            &format!("certificate {} is revoked", digest.to_hex()),
            "use the certificate that superseded it",
        ],
    );
    // The entry names the certificate presented and the job.
    let last = &env.audit()["last"];
    assert_eq!(last["certificate_digest"], digest.to_hex());
    assert_eq!(
        last["job_digest"],
        Digest::of(&fs::read(env.path("job.toml")).unwrap()).to_hex()
    );
}

#[test]
fn rejects_expired_certificate() {
    let env = Env::approved_job();
    env.approve_both(
        "old.json",
        &[
            "--valid-from",
            "2020-01-01T00:00:00Z",
            "--expires",
            "2020-06-01T00:00:00Z",
        ],
    );
    env.refused(
        &env.exec_with_cert("old.json"),
        3,
        &[
            "the certificate expired at 2020-06-01T00:00:00Z",
            "owners must approve a new certificate",
        ],
    );
}

#[test]
fn rejects_certificate_not_yet_valid() {
    let env = Env::approved_job();
    env.approve_both(
        "future.json",
        &[
            "--valid-from",
            "2099-01-01T00:00:00Z",
            "--expires",
            "2099-06-01T00:00:00Z",
        ],
    );
    env.refused(
        &env.exec_with_cert("future.json"),
        3,
        &["not valid yet: valid_from is 2099-01-01T00:00:00Z"],
    );
}

/// The small policy's inputs: three prompts, the longest exactly max_prompt_tokens (8).
fn small_inputs() -> Vec<Vec<u32>> {
    vec![
        vec![2, 391, 306],
        vec![2, 54, 150, 440, 393, 217, 218, 5],
        vec![2],
    ]
}

#[test]
fn job_exactly_at_the_policy_limits_runs() {
    // The control for the limit refusals below: every limit is inclusive.
    let env = Env::approved_job();
    env.small_policy();
    env.write_inputs(&small_inputs());
    env.write_job(2, 8, r#"["tokens"]"#);
    env.ok(&env.exec_with_cert("cert-small.json"));
    assert_eq!(env.outputs().len(), 3);
    env.verify_receipt("cert-small.json");
}

#[test]
fn rejects_batch_size_above_policy() {
    let env = Env::approved_job();
    env.small_policy();
    env.write_inputs(&small_inputs());
    env.write_job(3, 8, r#"["tokens"]"#);
    env.refused(
        &env.exec_with_cert("cert-small.json"),
        3,
        &[
            "job job.toml: `generation.batch_size` exceeds the policy limit max_batch: 3 > 2",
            "reduce the job to the policy's limits",
        ],
    );
}

#[test]
fn rejects_max_new_tokens_above_policy() {
    let env = Env::approved_job();
    env.small_policy();
    env.write_inputs(&small_inputs());
    env.write_job(2, 9, r#"["tokens"]"#);
    env.refused(
        &env.exec_with_cert("cert-small.json"),
        3,
        &["job job.toml: `generation.max_new_tokens` exceeds the policy limit max_new_tokens: 9 > 8"],
    );
}

#[test]
fn rejects_more_inputs_than_policy() {
    let env = Env::approved_job();
    env.small_policy();
    let mut inputs = small_inputs();
    inputs.push(vec![2, 7]);
    env.write_inputs(&inputs);
    env.write_job(2, 8, r#"["tokens"]"#);
    env.refused(
        &env.exec_with_cert("cert-small.json"),
        3,
        &["job job.toml: `inputs` exceeds the policy limit max_inputs: 4 > 3"],
    );
}

#[test]
fn rejects_prompt_longer_than_policy() {
    let env = Env::approved_job();
    env.small_policy();
    let mut inputs = small_inputs();
    inputs[1].push(9);
    env.write_inputs(&inputs);
    env.write_job(2, 8, r#"["tokens"]"#);
    env.refused(
        &env.exec_with_cert("cert-small.json"),
        3,
        &["inputs inputs.jsonl, line 2: the prompt is longer than the policy allows (8 tokens after the template, limits.max_prompt_tokens)"],
    );
}

#[test]
fn rejects_output_kind_the_policy_does_not_allow() {
    let env = Env::approved_job();
    env.small_policy();
    env.write_inputs(&small_inputs());
    env.write_job(2, 8, r#"["tokens", "text"]"#);
    env.refused(
        &env.exec_with_cert("cert-small.json"),
        3,
        &["job job.toml: `generation.outputs` asks for output \"text\", which the policy does not allow (outputs: \"tokens\")"],
    );
}

#[test]
fn rejects_malformed_inputs_line() {
    let env = Env::approved_job();
    env.write(
        "inputs.jsonl",
        "{\"id\":\"a\",\"tokens\":[2,5,9]}\n{\"id\":\"b\",\"prompt\":\"confidential words\"\n",
    );
    let stderr = env.refused(
        EXEC,
        2,
        &[
            "inputs.jsonl, line 2: not valid JSON",
            "each line is a JSON object",
        ],
    );
    // Inputs are private: the message names the line, never its content.
    assert!(!stderr.contains("confidential"), "{stderr}");
    let last = env.audit()["last"].clone();
    assert!(!last.to_string().contains("confidential"), "{last}");
}

#[test]
fn rejects_token_outside_the_model_vocabulary() {
    // The fixture's vocabulary is 512 ids; the bad id is in the last batch, and is refused
    // before the first batch runs.
    let env = Env::approved_job();
    env.write_inputs(&[vec![2, 5], vec![2, 7], vec![2, 9, 512]]);
    env.refused(
        EXEC,
        2,
        &[
            "inputs inputs.jsonl, line 3: the prompt holds a token id outside the model's \
             vocabulary of 512 ids",
        ],
    );
}

#[test]
fn rejects_unknown_key_in_job_file() {
    let env = Env::approved_job();
    env.write(
        "job.toml",
        format!("colour = \"red\"\n{}", job_toml(2, 8, r#"["tokens"]"#)),
    );
    env.refused(
        EXEC,
        2,
        &[
            "job.toml is malformed",
            "unknown field `colour`",
            "docs/job.md",
        ],
    );
    env.write(
        "job.toml",
        job_toml(2, 8, r#"["tokens"]"#) + "beam_width = 4\n",
    );
    env.refused(EXEC, 2, &["unknown field `beam_width`"]);
}

#[test]
fn rejects_job_missing_several_keys_naming_all_of_them() {
    let env = Env::approved_job();
    env.write(
        "job.toml",
        "engine = \"engines/gemma3.eng\"\n\n[generation]\nbatch_size = 2\n",
    );
    let stderr = env.refused(
        EXEC,
        2,
        &[
            "job job.toml is missing the required keys `model`, `inputs`, `output_dir` and \
             `generation.max_new_tokens`",
            "docs/job.md",
        ],
    );
    // No position: nothing is wrong at line 1, column 1.
    assert!(!stderr.contains("line 1, column 1"), "{stderr}");
    assert!(!stderr.contains('^'), "{stderr}");
    env.write("job.toml", "engine = \"engines/gemma3.eng\"\n");
    env.refused(
        EXEC,
        2,
        &["missing the required keys `model`, `inputs`, `output_dir` and `[generation]`"],
    );
    // One missing key is named alone.
    env.write(
        "job.toml",
        job_toml(2, 8, r#"["tokens"]"#).replace("inputs = \"inputs.jsonl\"\n", ""),
    );
    env.refused(
        EXEC,
        2,
        &["job job.toml is missing the required key `inputs`"],
    );
}

#[test]
fn rejects_a_missing_file_a_job_key_names_naming_the_job_file_and_key() {
    let env = Env::approved_job();
    for (key, from, to, what) in [
        (
            "model",
            "model = \"model\"",
            "model = \"nomodel\"",
            "cannot read model directory nomodel",
        ),
        (
            "inputs",
            "inputs = \"inputs.jsonl\"",
            "inputs = \"nothing.jsonl\"",
            "cannot read inputs nothing.jsonl",
        ),
        (
            "engine",
            "engine = \"engines/gemma3.eng\"",
            "engine = \"engines/none.eng\"",
            "cannot read engine engines/none.eng",
        ),
    ] {
        let job = job_toml(2, 8, r#"["tokens"]"#);
        assert!(job.contains(from), "{job}");
        env.write("job.toml", job.replace(from, to));
        let stderr = env.refused(
            EXEC,
            2,
            &[
                &format!("job job.toml, key `{key}`: {what}"),
                &format!("nothing is there: fix `{key}` in job.toml"),
            ],
        );
        // exec has no --model flag, and a missing file is not a format problem.
        assert!(!stderr.contains("--model"), "{stderr}");
        assert!(!stderr.contains("each line is a JSON object"), "{stderr}");
    }
    // The tokenizer, when the job names one.
    env.write(
        "job.toml",
        job_toml(2, 8, r#"["tokens", "text"]"#)
            .replace("[generation]", "tokenizer = \"none.json\"\n\n[generation]"),
    );
    env.refused(
        EXEC,
        2,
        &[
            "job job.toml, key `tokenizer`: cannot read tokenizer none.json",
            "fix `tokenizer` in job.toml",
        ],
    );
}

#[test]
fn rejects_non_empty_output_dir_and_leaves_it_untouched() {
    let env = Env::approved_job();
    fs::create_dir(env.path("out")).unwrap();
    env.write("out/results.jsonl", b"earlier results\n");
    env.refusal(
        EXEC,
        2,
        &[
            "job job.toml: output_dir out already exists and is not empty",
            "choose a new output_dir",
        ],
    );
    let files: Vec<_> = fs::read_dir(env.path("out")).unwrap().collect();
    assert_eq!(files.len(), 1);
    assert_eq!(env.read("out/results.jsonl"), "earlier results\n");

    // It is found before the model is hashed: with the model changed as well, the output
    // directory is what gets reported.
    let config = env.path("model/config.json");
    let original = fs::read(&config).unwrap();
    fs::write(&config, [&original[..], b" "].concat()).unwrap();
    env.refusal(EXEC, 2, &["already exists and is not empty"]);
    fs::write(&config, &original).unwrap();

    // An empty output directory (made by the operator) is fine.
    fs::remove_file(env.path("out/results.jsonl")).unwrap();
    env.ok(EXEC);
    env.verify_receipt("cert.json");
}

#[test]
fn rejects_missing_certificate_engine_or_runner_state() {
    let env = Env::approved_job();
    env.refused(
        &env.exec_with_cert("nothing.json"),
        2,
        &["cannot read certificate nothing.json"],
    );
    fs::rename(
        env.path("engines/gemma3.eng"),
        env.path("engines/moved.eng"),
    )
    .unwrap();
    env.refused(
        EXEC,
        2,
        &[
            "job job.toml, key `engine`: cannot read engine engines/gemma3.eng",
            "fix `engine` in job.toml",
        ],
    );
    fs::rename(
        env.path("engines/moved.eng"),
        env.path("engines/gemma3.eng"),
    )
    .unwrap();
    // Without the runner's key its state directory is not initialised: nothing can be signed,
    // so nothing is attempted (and there is no log to record it in).
    fs::remove_file(env.path("state/runner.key")).unwrap();
    let stderr = env.fails(EXEC, 2, "is not initialised (no runner.key and runner.age)");
    assert!(stderr.contains("runner init"), "{stderr}");
    assert!(!env.path("out").exists());
}

#[test]
fn rejects_text_prompt_without_a_tokenizer() {
    let env = Env::approved_job();
    env.write("inputs.jsonl", "{\"id\":\"q\",\"prompt\":\"Hello\"}\n");
    let empty_cache = env.path("no-cache");
    let before = env.audit_entries();
    let out = env.command(EXEC).env("RUNNER_CACHE", &empty_cache).output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the job needs a tokenizer"), "{stderr}");
    assert!(stderr.contains("scripts/fetch_tokenizer.sh"), "{stderr}");
    assert!(!env.path("out").exists());
    assert_eq!(env.audit_entries(), before + 1);
    assert_eq!(env.audit()["last"]["outcome"], "refused");
}

#[test]
fn rejects_chat_turn_with_unknown_role() {
    let env = Env::text_job();
    env.write_job(2, 8, r#"["tokens"]"#);
    env.write(
        "inputs.jsonl",
        "{\"id\":\"ok\",\"tokens\":[2,5]}\n\
         {\"id\":\"odd\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},\
         {\"role\":\"narrator\",\"content\":\"Meanwhile\"}]}\n",
    );
    let stderr = env.refused(
        EXEC,
        2,
        &[
            "inputs inputs.jsonl, line 2: chat turn 1 has a role other than",
            "optionally after a first \"system\" turn",
        ],
    );
    assert!(!stderr.contains("narrator"), "{stderr}");
}

#[test]
fn rejects_unapproved_tokenizer_file() {
    // A tokenizer outside the model directory is not bound by the certificate, so only the
    // official Gemma 3 file is accepted.
    let env = Env::approved_job();
    env.write("inputs.jsonl", "{\"id\":\"q\",\"prompt\":\"Hello\"}\n");
    env.write("other-tokenizer.json", b"{\"model\": {}}");
    env.write(
        "job.toml",
        format!(
            "tokenizer = \"other-tokenizer.json\"\n{}",
            job_toml(2, 8, r#"["tokens"]"#)
        ),
    );
    env.refused(
        EXEC,
        3,
        &[
            "other-tokenizer.json is neither in the approved model directory nor the official Gemma 3 tokenizer",
        ],
    );
}

// ---- a run killed mid-way ----

/// Inputs of 8 prompt tokens each, drawn from the fixture's vocabulary.
fn many_prompts(n: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            let mut p = vec![2];
            p.extend((0..7).map(|j| 3 + ((i * 31 + j * 17) % 500) as u32));
            p
        })
        .collect()
}

#[test]
fn killed_run_leaves_no_outputs_and_rerun_succeeds() {
    let env = Env::approved_job();
    // How long a run takes that has almost nothing to generate: admission, startup, publish.
    env.write_inputs(&many_prompts(1));
    env.write_job(1, 1, r#"["tokens"]"#);
    // The faster of two runs: the first may pay for cold caches, which would make the kill
    // come so late that even a large job had finished.
    let mut overhead = Duration::MAX;
    for _ in 0..2 {
        let t = Instant::now();
        env.ok(EXEC);
        overhead = overhead.min(t.elapsed());
        fs::remove_dir_all(env.path("out")).unwrap();
    }
    // Kill well after admission, while generating. The job grows until it outlives that.
    let kill_after = overhead * 2 + Duration::from_millis(300);
    env.write_job(8, 32, r#"["tokens"]"#);
    let mut n = 16;
    // Runs the kill reached after they had published: each closed its attempt or not,
    // depending on whether the kill came before or after it wrote the closing entry.
    let mut killed_after_publishing = 0;
    let killed = loop {
        env.write_inputs(&many_prompts(n));
        let mut child = env
            .command(EXEC)
            .cmd()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(kill_after);
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
        }
        // The run may still have finished between the check and the kill: only a run that
        // did not exit by itself and did not get as far as publishing counts as killed.
        let status = child.wait().unwrap();
        assert!(
            status.success() || status.signal() == Some(9),
            "the run failed by itself: {status}"
        );
        if !status.success() {
            if !env.path("out").exists() {
                break n;
            }
            killed_after_publishing += 1;
        }
        // Finished (or published) before the kill: that run is complete; make the job bigger
        // and retry.
        assert!(
            n < 16 * 4usize.pow(6),
            "{n} inputs still finished within {kill_after:?}"
        );
        assert!(env.path("out/receipt.json").exists());
        fs::remove_dir_all(env.path("out")).unwrap();
        n *= 4;
    };
    assert!(!env.path("out/outputs.jsonl").exists());
    assert!(!env.path("out/receipt.json").exists());
    assert!(!env.path("out").exists(), "a killed run left out/ behind");
    // The killed attempt was recorded before it ran, and never closed: `audit verify` says so,
    // counting with it any run killed after publishing but before its closing entry.
    let audit = env.audit();
    let unfinished = audit["unfinished"].as_array().unwrap();
    let never_closed = unfinished.len();
    assert!(
        (1..=1 + killed_after_publishing).contains(&never_closed),
        "{killed_after_publishing} killed after publishing: {audit}"
    );
    assert_eq!(audit["last"]["outcome"], "admitted", "{audit}");
    assert_eq!(
        audit["last"]["attempt"],
        unfinished[never_closed - 1]["attempt"],
        "the killed run's attempt is the last one left open: {audit}"
    );
    let text = env.ok(&["audit", "verify", "--state-dir", "state"]);
    assert!(
        text.contains(&format!("{never_closed} admitted attempt(s) never closed")),
        "{text}"
    );

    // A staging directory a crashed publish might have left is cleared by the next run.
    fs::create_dir(env.path(".out.partial-999999")).unwrap();
    env.write(".out.partial-999999/outputs.jsonl", b"half");
    let out = env.ok(EXEC);
    assert!(out.contains(&format!("ran {killed} inputs")), "{out}");
    assert!(!env.path(".out.partial-999999").exists());
    assert_eq!(env.outputs().len(), killed);
    let receipt = env.verify_receipt("cert.json");
    assert_eq!(receipt["facts"]["counts"]["inputs"], killed as u64);
    // The rerun closed its own attempt; the killed ones stay unfinished in the record.
    let audit = env.audit();
    assert_eq!(audit["last"]["outcome"], "accepted");
    assert_eq!(
        audit["unfinished"].as_array().unwrap().len(),
        never_closed,
        "{audit}"
    );
}

// ---- the model written while the job runs ----

#[test]
fn a_model_written_during_the_run_signs_nothing() {
    use runner::attestation::tsm::{Kernel, TsmAccess};
    use runner::error::{Diagnose, Exit};
    use runner::job::admit::{admit, Request, Submission};
    use runner::job::attest::Attester;
    use runner::job::run::{run, RunFailure};
    use runner::job::state::StateDir;
    use runner::job::superseded::History;
    use runner::model::files::FileError;
    use std::os::unix::fs::FileExt;

    let env = Env::approved_job();
    let trust = runner::trust::config::TrustConfig::load(&env.path("trust.toml")).unwrap();
    let submission = Submission::read(&env.path("cert.json"), &env.path("job.toml")).unwrap();
    let state = StateDir::open(&env.path("state")).unwrap();
    let key = state.signing_key().unwrap();
    let request = Request {
        submission: &submission,
        trust: &trust,
        history: &History::default(),
        state_dir: state.path(),
        seal_key: &state.seal_key().unwrap(),
        attester: Attester {
            tsm: TsmAccess {
                fs: &Kernel,
                root: &env.path("no-tsm"),
            },
            key: &key,
            recipient: &state.recipient().unwrap(),
        },
        shard: None,
        now: time::OffsetDateTime::now_utc(),
    };
    let admitted = admit(&request).unwrap();
    // Between admission and the end of the run: the same byte written back over itself, so the
    // weights are even unchanged, but nothing can show that.
    let weights = env.path("model/model.safetensors");
    let first = fs::read(&weights).unwrap()[0];
    fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .unwrap()
        .write_all_at(&[first], 0)
        .unwrap();
    let err = run(admitted, &key, None, &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, RunFailure::Model(FileError::Changed { path }) if path.ends_with("model/model.safetensors")),
        "{err:?}"
    );
    assert_eq!(err.exit(), Exit::Refused);
    assert!(err
        .to_string()
        .contains("changed after its digest was taken"));
    assert!(!env.path("out").exists());

    // Through the command line the job then runs: the digest is of the bytes as they are now.
    env.ok(EXEC);
    env.verify_receipt("cert.json");
}

// ---- text prompts through the real tokenizer ----

#[test]
fn text_prompts_and_chat_messages_through_the_gemma3_tokenizer() {
    let cached = cached_tokenizer();
    let env = Env::bare_job();
    // A model with the tokenizer's vocabulary: 262144 x 64 bf16 embeddings, ~33 MB.
    env.write_text_model();
    let size = fs::metadata(env.path("model/model.safetensors"))
        .unwrap()
        .len();
    assert!(size < 40 << 20, "synthetic model is {size} bytes");
    env.approve_both("cert.json", &[]);
    env.write(
        "inputs.jsonl",
        "{\"id\":\"plain\",\"prompt\":\"Hello, my dog is cute\"}\n\
         {\"id\":\"chat\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},\
         {\"role\":\"user\",\"content\":\"What is the capital of France?\"}]}\n\
         {\"id\":\"ids\",\"tokens\":[2,9259,236764]}\n",
    );
    env.write_job(2, 6, r#"["text", "tokens"]"#);
    env.ok(EXEC);

    let tokenizer = Tokenizer::load(&cached).unwrap();
    let lines = env.outputs();
    assert_eq!(lines.len(), 3);
    for (line, id) in lines.iter().zip(["plain", "chat", "ids"]) {
        assert_eq!(line["id"], id);
        let tokens = ids(&line["tokens"]);
        assert!(!tokens.is_empty() && tokens.len() <= 6, "{line}");
        let text = line["text"].as_str().expect("a text field");
        assert_eq!(text, tokenizer.decode(&tokens).unwrap(), "{line}");
    }
    let receipt = env.verify_receipt("cert.json");
    assert_eq!(
        receipt["facts"]["generation"]["outputs"],
        serde_json::json!(["text", "tokens"])
    );
    assert_eq!(env.audit()["last"]["outcome"], "accepted");
}

#[test]
fn a_model_with_more_rows_than_the_tokenizer_has_tokens_runs_text_prompts() {
    // Gemma 3 4B, 12B and 27B have 262208 embedding rows for the tokenizer's 262144 tokens
    // (and `<image_soft_token>`): text jobs on them run, and the answers decode.
    let env = Env::text_job_with_rows(262_208);
    env.write(
        "inputs.jsonl",
        "{\"id\":\"plain\",\"prompt\":\"Hello, my dog is cute\"}\n",
    );
    env.write_job(1, 6, r#"["text", "tokens"]"#);
    env.ok(EXEC);
    let tokenizer = Tokenizer::load(&cached_tokenizer()).unwrap();
    let lines = env.outputs();
    assert_eq!(lines.len(), 1);
    let tokens = ids(&lines[0]["tokens"]);
    assert!(!tokens.is_empty() && tokens.len() <= 6, "{}", lines[0]);
    assert!(tokens.iter().all(|&t| t < 262_208), "{}", lines[0]);
    assert_eq!(
        lines[0]["text"].as_str().expect("a text field"),
        tokenizer.decode(&tokens).unwrap()
    );
}

#[test]
fn a_tokenizer_with_more_tokens_than_the_model_has_rows_is_refused() {
    // Ids past the model's rows, and the rest naming other tokens than the model's: refused
    // before anything runs, with nothing written.
    let env = Env::text_job_with_rows(262_000);
    env.write("inputs.jsonl", "{\"id\":\"q\",\"prompt\":\"Hello\"}\n");
    env.write_job(1, 4, r#"["text", "tokens"]"#);
    env.refused(
        EXEC,
        3,
        &[
            "has 262144 tokens but model",
            "has a vocabulary of only 262000: they were not made for each other",
            "scripts/fetch_tokenizer.sh",
        ],
    );
}

#[test]
fn exec_refuses_an_engine_that_skips_layers_of_the_checkpoint() {
    // The owners approved the six-layer unrolled engine with an eight-layer model: it would
    // run, skip layers 6 and 7, and sign wrong tokens. The runner refuses after the first step.
    let env = Env::bare_job();
    env.install_engine("gemma3_unrolled.eng");
    SyntheticSpec {
        num_layers: 8,
        ..SyntheticSpec::tiny()
    }
    .write(&env.path("model"), 5)
    .unwrap();
    env.approve_both("cert.json", &[]);
    env.write_inputs(&[vec![2, 17, 40], vec![2, 9]]);
    env.write_job(2, 4, r#"["tokens"]"#);
    env.failed_after_admission(
        EXEC,
        2,
        &["ran 6 of the checkpoint's 8 layers", "layers 6, 7", "scan"],
    );
}

/// Start `exec` and SIGKILL it once its journal holds a few batches; check it left no outputs
/// and no plaintext in the journal.
fn kill_once_journaled(env: &Env) {
    let journals = env.path("state/journals");
    let journal_len = || {
        fs::read_dir(&journals)
            .map(|d| {
                d.flatten()
                    .map(|e| e.metadata().map_or(0, |m| m.len()))
                    .sum::<u64>()
            })
            .unwrap_or(0)
    };
    let mut child = env.command(EXEC).cmd().spawn().unwrap();
    // Kill once the journal holds a few batches (its header alone is ~300 bytes).
    let t = Instant::now();
    while journal_len() < 3000 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the run ended by itself: {status}"
    );
    assert!(!env.path("out").exists());
    let journal = fs::read(
        fs::read_dir(&journals)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(
        !String::from_utf8_lossy(&journal).contains("\"tokens\""),
        "the journal holds no plaintext"
    );
}

fn four_hundred_prompts(env: &Env) {
    let mut prompts = crate::common::fixture_prompts();
    let base = prompts.clone();
    while prompts.len() < 400 {
        prompts.push(base[prompts.len() % base.len()].clone());
    }
    env.write_inputs(&prompts);
}

#[test]
fn a_killed_sampling_run_resumes_with_the_seed_its_first_attempt_drew() {
    let env = Env::approved_job();
    four_hundred_prompts(&env);
    let sampling = "temperature = 1.0\ntop_k = 40\n";
    env.write("job.toml", job_toml(2, 16, r#"["tokens"]"#) + sampling);
    kill_once_journaled(&env);
    let out = env.ok(EXEC);
    assert!(out.contains("resumed at input "), "{out}");
    let receipt = env.verify_receipt("cert.json");
    let facts = &receipt["facts"];
    assert_eq!(facts["sampling"]["seed_source"], "drawn");
    assert!(facts["resumed_at"].as_u64().unwrap() > 0);
    // Run again, uninterrupted, with the seed the receipt records: the same tokens, so the
    // resumed part drew from the first attempt's seed, not a fresh one.
    let seed = facts["sampling"]["job_seed"].as_str().unwrap();
    env.write(
        "again.toml",
        job_toml(2, 16, r#"["tokens"]"#).replace("output_dir = \"out\"", "output_dir = \"again\"")
            + sampling
            + &format!("seed = {seed}\n"),
    );
    let mut again: Vec<&str> = EXEC.to_vec();
    *again.last_mut().unwrap() = "again.toml";
    env.ok(&again);
    assert_eq!(
        env.read("out/outputs.jsonl"),
        env.read("again/outputs.jsonl")
    );
}

// ---- a run killed mid-way resumes ----

#[test]
fn a_killed_run_resumes_from_its_journal_with_the_same_outputs() {
    let env = Env::approved_job();
    four_hundred_prompts(&env);
    env.write_job(2, 16, r#"["tokens"]"#);
    // The reference: the same job, uninterrupted, into another directory.
    env.write(
        "whole.toml",
        job_toml(2, 16, r#"["tokens"]"#).replace("output_dir = \"out\"", "output_dir = \"whole\""),
    );
    let mut whole: Vec<&str> = EXEC.to_vec();
    *whole.last_mut().unwrap() = "whole.toml";
    env.ok(&whole);

    kill_once_journaled(&env);
    let journals = env.path("state/journals");

    let out = env.ok(EXEC);
    assert!(out.contains("resumed at input "), "{out}");
    assert!(out.contains("ran 400 inputs"), "{out}");
    assert_eq!(
        env.read("out/outputs.jsonl"),
        env.read("whole/outputs.jsonl"),
        "resumed outputs are the uninterrupted run's"
    );
    let receipt = env.verify_receipt("cert.json");
    let at = receipt["facts"]["resumed_at"].as_u64().unwrap();
    assert!(at > 0 && at < 400 && at.is_multiple_of(2), "{at}");
    assert_eq!(
        fs::read_dir(&journals).unwrap().count(),
        0,
        "the journal is removed"
    );
}
