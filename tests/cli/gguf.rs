//! GGUF models through the whole flow: approved and run as a directory holding one `.gguf` or as
//! the file itself, HF's greedy tokens out of `exec`, and the refusals (an ambiguous directory, a
//! malformed file, a tensor type the kernels do not read, a tokenizer whose vocabulary is not the
//! model's) with their exit codes and nothing written.

use serde_json::Value;

use crate::common::repo::{fixture_model, root};
use crate::common::{ids, Env, EXEC};

fn tiny_expected() -> Value {
    serde_json::from_slice(
        &std::fs::read(fixture_model("tiny-gguf").join("expected.json")).unwrap(),
    )
    .unwrap()
}

/// [`Env::bare_job`] with the tiny GGUF fixture as `model/model.gguf`, approved by both owners,
/// its prompts as inputs and a job of batch 4, 48 new tokens.
fn gguf_job() -> Env {
    let env = Env::bare_job();
    env.mkdir("model");
    env.copy_in(
        &fixture_model("tiny-gguf").join("model.gguf"),
        "model/model.gguf",
    );
    env.approve_both("cert.json", &[]);
    let prompts: Vec<Vec<u32>> = tiny_expected()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    env.write_inputs(&prompts);
    env.write_job(4, 48, r#"["tokens"]"#);
    env
}

#[test]
fn exec_on_a_gguf_model_writes_hf_greedy_tokens() {
    let env = gguf_job();
    env.ok(EXEC);
    let e = tiny_expected();
    for (i, line) in env.outputs().iter().enumerate() {
        // exec stops a sequence at end-of-sequence, HF's reference run did not.
        let r = &e["batched"]["results"][i];
        let want = ids(&r["tokens"]);
        let want = match r["first_stop_index"].as_u64() {
            Some(stop) => want[..=stop as usize].to_vec(),
            None => want,
        };
        assert_eq!(ids(&line["tokens"]), want, "input {i}");
    }
    env.ok(&[
        "verify",
        "out/receipt.json",
        "--cert",
        "cert.json",
        "--runner-key",
        "state/runner.key.pub",
    ]);
}

#[test]
fn a_gguf_file_given_itself_is_the_same_approved_model_as_its_directory() {
    let env = gguf_job();
    // The job names the file; the certificate approved the directory holding only it.
    let job = env
        .read("job.toml")
        .replace("model = \"model\"", "model = \"model/model.gguf\"");
    assert!(job.contains("model/model.gguf"), "{job}");
    env.write("job.toml", job);
    env.ok(EXEC);
    assert_eq!(env.outputs().len(), 4);
}

#[test]
fn a_directory_with_two_gguf_files_is_refused_as_ambiguous() {
    let env = gguf_job();
    env.copy_in(
        &fixture_model("tiny-gguf").join("model.gguf"),
        "model/other.gguf",
    );
    env.approve_fails("owner-a", "cert2.json", &[], 2, "2 .gguf files");
    assert!(!env.path("cert2.json").exists());
    env.refused(EXEC, 2, &["model directory model holds 2 .gguf files"]);
}

/// The tiny GGUF fixture's bytes after `edit`, as `model/model.gguf`, approved anyway by both
/// owners, with one input and a job of batch 1, 4 new tokens.
fn approved_edited_gguf(edit: impl FnOnce(&mut Vec<u8>)) -> Env {
    let env = Env::bare_job();
    env.mkdir("model");
    let mut bytes = std::fs::read(fixture_model("tiny-gguf").join("model.gguf")).unwrap();
    edit(&mut bytes);
    env.write("model/model.gguf", &bytes);
    env.approve_both("cert.json", &[]);
    env.write_inputs(&[vec![2, 5]]);
    env.write_job(1, 4, r#"["tokens"]"#);
    env
}

#[test]
fn a_malformed_gguf_approved_anyway_is_refused_before_anything_runs() {
    let env = approved_edited_gguf(|bytes| bytes.truncate(bytes.len() - 1000));
    env.refused(
        EXEC,
        2,
        &[
            "model/model.gguf",
            "malformed GGUF header",
            "past the end of the file",
        ],
    );
}

#[test]
fn a_gguf_tensor_in_a_type_the_kernels_do_not_read_is_refused_by_name() {
    let env = approved_edited_gguf(|bytes| {
        // The tensor info after the name: two dims (u32 count, two u64), then the u32 type id.
        let name = b"blk.0.attn_q.weight";
        let at = bytes
            .windows(name.len())
            .position(|w| w == name)
            .expect("the tensor's name in the header")
            + name.len();
        assert_eq!(bytes[at..at + 4], 2u32.to_le_bytes(), "two dims");
        let ty = at + 4 + 16;
        bytes[ty..ty + 4].copy_from_slice(&10u32.to_le_bytes()); // GGML's Q2_K
    });
    env.refused(
        EXEC,
        2,
        &[
            "model/model.gguf",
            "tensor `blk.0.attn_q.weight` is stored as Q2_K",
            "llama-quantize",
        ],
    );
}

#[test]
fn text_prompts_with_a_tokenizer_of_another_vocabulary_are_refused() {
    let env = gguf_job();
    let tokenizer = crate::common::repo::cached_tokenizer();
    env.write("inputs.jsonl", "{\"id\": \"q\", \"prompt\": \"hello\"}\n");
    env.write(
        "job.toml",
        env.read("job.toml").replace(
            "[generation]",
            &format!(
                "tokenizer = {:?}\n\n[generation]",
                tokenizer.display().to_string()
            ),
        ),
    );
    env.refused(
        EXEC,
        3,
        &["does not match the vocabulary of GGUF model", "token "],
    );
}

#[test]
fn bench_reads_a_gguf_file_and_names_its_block_formats() {
    let out = crate::common::TestCommand::new()
        .arg("bench")
        .arg("--model")
        .arg(fixture_model("tiny-gguf").join("model.gguf"))
        .arg("--engine")
        .arg(root().join("engines/gemma3.eng"))
        .arg("--policy")
        .arg(root().join("policies/gemma3.json"))
        .args([
            "--prompt-len",
            "4",
            "--new-tokens",
            "3",
            "--probe-mib",
            "8",
            "--batch",
            "1,2",
            "--json",
        ])
        .ok();
    let report: Value = serde_json::from_str(&out).unwrap();
    let dtype = report["model"]["weight_dtype"].as_str().unwrap().to_owned();
    for block in [
        "q4_k", "q5_k", "q6_k", "q8_0", "q4_0", "q5_0", "bf16", "f16", "f32",
    ] {
        assert!(
            dtype.split('+').any(|d| d == block),
            "{block} missing from {dtype}"
        );
    }
}
