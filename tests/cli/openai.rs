//! The OpenAI batch format in and out, seeded sampling a verifier can reproduce, stop strings,
//! and `exec`'s summary.

use runner::model::tokenizer::Tokenizer;
use serde_json::Value;

use crate::common::repo::cached_tokenizer;
use crate::common::{ids, job_toml, Env, EXEC};

/// Written the way the OpenAI Python client's batch examples write them: `json.dumps` of each
/// request, one per line (", " and ": " separators).
const OPENAI_BATCH: &str = concat!(
    r#"{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello world!"}], "max_tokens": 1000}}"#,
    "\n",
    r#"{"custom_id": "request-2", "method": "POST", "url": "/v1/completions", "body": {"model": "gpt-3.5-turbo-instruct", "prompt": "Once upon a time", "max_tokens": 3}}"#,
    "\n",
    r#"{"custom_id": "request-3", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}], "max_completion_tokens": 4, "temperature": 0, "n": 1, "stream": false}}"#,
    "\n",
);

fn read_lines(env: &Env, dir: &str) -> Vec<Value> {
    env.read(&format!("{dir}/outputs.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn openai_batch_file_round_trips_in_input_order_with_the_answers_of_the_runner_format() {
    let tokenizer = Tokenizer::load(&cached_tokenizer()).unwrap();
    let env = Env::text_job();
    env.write("inputs.jsonl", OPENAI_BATCH);
    env.write_job(2, 6, r#"["text", "tokens"]"#);
    env.ok(EXEC);
    let answers = env.outputs();
    assert_eq!(answers.len(), 3);
    for (a, (custom_id, object)) in answers.iter().zip([
        ("request-1", "chat.completion"),
        ("request-2", "text_completion"),
        ("request-3", "chat.completion"),
    ]) {
        assert_eq!(a["custom_id"], custom_id, "{a}");
        assert!(a["id"].as_str().unwrap().starts_with("batch_req_"), "{a}");
        assert_eq!(a["error"], Value::Null);
        let r = &a["response"];
        assert_eq!(r["status_code"], 200);
        let body = &r["body"];
        assert_eq!(body["object"], object);
        assert!(body["created"].as_i64().unwrap() > 1_700_000_000);
        assert!(body["model"].as_str().unwrap().starts_with("runner-model-"));
        let choice = &body["choices"][0];
        assert_eq!(choice["index"], 0);
        assert!(["stop", "length"].contains(&choice["finish_reason"].as_str().unwrap()));
        let u = &body["usage"];
        assert_eq!(
            u["total_tokens"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
        );
    }
    let completion = |i: usize| {
        answers[i]["response"]["body"]["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
    };
    // max_tokens is capped by the job's max_new_tokens (6), and honoured below it.
    assert!(completion(0) <= 6);
    assert!(completion(1) <= 3);
    assert!(completion(2) <= 4);
    assert!(
        answers[1]["response"]["body"]["choices"][0]["text"].is_string(),
        "a completion's answer is its text"
    );

    // The same chat requests in the runner's own format give the same tokens: the content is
    // their text (request-3's content parts joined, cut at its own max_completion_tokens).
    env.write(
        "inputs.jsonl",
        "{\"id\":\"r1\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},\
         {\"role\":\"user\",\"content\":\"Hello world!\"}]}\n\
         {\"id\":\"r3\",\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2?\"}]}\n",
    );
    env.write(
        "job.toml",
        job_toml(2, 6, r#"["tokens"]"#).replace("\"out\"", "\"runner-out\""),
    );
    env.ok(EXEC);
    let own = read_lines(&env, "runner-out");
    let text_of = |tokens: &[u32]| tokenizer.decode(tokens).unwrap();
    let r1 = ids(&own[0]["tokens"]);
    assert_eq!(
        answers[0]["response"]["body"]["choices"][0]["message"]["content"],
        text_of(&r1)
    );
    assert_eq!(
        answers[0]["response"]["body"]["choices"][0]["message"]["role"],
        "assistant"
    );
    let r3 = ids(&own[1]["tokens"]);
    let n3 = completion(2) as usize;
    assert_eq!(
        answers[2]["response"]["body"]["choices"][0]["message"]["content"],
        text_of(&r3[..n3])
    );
    // The receipt verifies, and ids are a function of the run's certificate, job and index.
    env.verify_receipt("cert.json");
    env.write("inputs.jsonl", OPENAI_BATCH);
    env.write(
        "job.toml",
        job_toml(2, 6, r#"["text", "tokens"]"#).replace("\"out\"", "\"again\""),
    );
    let again = read_lines(&env, {
        env.ok(EXEC);
        "again"
    });
    for (a, b) in answers.iter().zip(&again) {
        assert_eq!(
            a["response"]["body"]["choices"],
            b["response"]["body"]["choices"]
        );
        assert_ne!(a["id"], b["id"], "another job file, other ids");
    }
}

#[test]
fn rejects_an_openai_field_the_runner_does_not_implement_naming_it() {
    let env = Env::text_job();
    env.write_job(2, 4, r#"["text"]"#);
    env.write(
        "inputs.jsonl",
        r#"{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "Hi"}], "logprobs": true}}"#,
    );
    env.refused(
        EXEC,
        2,
        &[
            "inputs inputs.jsonl, line 1: `body.logprobs` is not implemented by the runner",
            "docs/openai.md",
        ],
    );
    // A key that is not the API's is refused without being quoted.
    env.write(
        "inputs.jsonl",
        r#"{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "Hi"}], "patient_name_jane_doe": 1}}"#,
    );
    let stderr = env.refused(
        EXEC,
        2,
        &["line 1: `body` has a key that the OpenAI batch format does not define"],
    );
    assert!(!stderr.contains("jane"), "{stderr}");
    // An endpoint the runner does not serve; the value is not quoted.
    env.write(
        "inputs.jsonl",
        r#"{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}"#,
    );
    let stderr = env.refused(EXEC, 2, &["line 1: `url` must be \"/v1/chat/completions\""]);
    assert!(!stderr.contains("embeddings"), "{stderr}");
    // A second answer per request.
    env.write(
        "inputs.jsonl",
        r#"{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "n": 2}}"#,
    );
    env.refused(EXEC, 2, &["`body.n` is not implemented"]);
}

#[test]
fn a_prompt_over_the_context_refuses_the_whole_job_before_anything_runs() {
    let env = Env::bare_job();
    env.write_text_model();
    let mut config: Value = serde_json::from_str(&env.read("model/config.json")).unwrap();
    config["max_position_embeddings"] = 16.into();
    env.write("model/config.json", config.to_string());
    env.approve_both("cert.json", &[]);
    env.write_job(2, 8, r#"["text"]"#);
    env.write(
        "inputs.jsonl",
        format!(
            "{}\n{}\n",
            r#"{"custom_id": "short", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Hi", "max_tokens": 2}}"#,
            r#"{"custom_id": "long", "method": "POST", "url": "/v1/completions", "body": {"prompt": "one two three four five six seven eight nine ten eleven"}}"#
        ),
    );
    env.refused(
        EXEC,
        2,
        &[
            "inputs inputs.jsonl, line 2: the prompt and its up to 8 new tokens do not fit the model's context of 16 positions",
            "refuses the whole job",
        ],
    );
}

fn sampling_job(env: &Env, out: &str, batch: u32, seed: Option<&str>) {
    let mut job = job_toml(batch, 6, r#"["tokens"]"#).replace("\"out\"", &format!("\"{out}\""));
    job.push_str("temperature = 1.0\ntop_k = 50\ntop_p = 0.95\n");
    if let Some(s) = seed {
        job.push_str(&format!("seed = {s}\n"));
    }
    env.write("job.toml", job);
}

fn tokens_of(env: &Env, out: &str) -> Vec<Vec<u32>> {
    read_lines(env, out)
        .iter()
        .map(|l| ids(&l["tokens"]))
        .collect()
}

#[test]
fn sampling_is_reproducible_across_batch_sizes_and_thread_counts_and_from_the_receipt() {
    let env = Env::approved_job();
    let exec = |threads: &str| {
        env.command(EXEC).env("RUNNER_THREADS", threads).ok();
    };
    env.write(
        "inputs.jsonl",
        (0..5)
            .map(|i| format!("{{\"id\":\"q{i}\",\"tokens\":[2,{}]}}\n", 10 + i))
            .collect::<String>(),
    );
    // No seed: the runner draws one and records it.
    sampling_job(&env, "drawn", 1, None);
    exec("1");
    let facts = env.verify_receipt_in("drawn", "cert.json");
    let sampling = &facts["facts"]["sampling"];
    assert_eq!(sampling["scheme"], "runner-sampling/1");
    assert_eq!(sampling["seed_source"], "drawn");
    assert_eq!(sampling["sampled_inputs"], 5);
    let seed = sampling["job_seed"].as_str().unwrap().to_owned();
    let drawn = tokens_of(&env, "drawn");

    // An auditor with the inputs reruns with the recorded seed, another batch size and thread
    // count: the same tokens.
    sampling_job(&env, "audit", 3, Some(&seed));
    exec("2");
    assert_eq!(tokens_of(&env, "audit"), drawn);
    let facts = env.verify_receipt_in("audit", "cert.json");
    assert_eq!(facts["facts"]["sampling"]["seed_source"], "job");
    assert_eq!(facts["facts"]["sampling"]["job_seed"], seed.as_str());

    // Another seed, or greedy, gives other tokens.
    let other = (seed.parse::<u64>().unwrap() ^ 1).to_string();
    sampling_job(&env, "other", 2, Some(&other));
    env.ok(EXEC);
    assert_ne!(tokens_of(&env, "other"), drawn);
    env.write(
        "job.toml",
        job_toml(2, 6, r#"["tokens"]"#).replace("\"out\"", "\"greedy\""),
    );
    env.ok(EXEC);
    assert_ne!(tokens_of(&env, "greedy"), drawn);
    let greedy = env.verify_receipt_in("greedy", "cert.json");
    assert!(greedy["facts"].get("sampling").is_none(), "{greedy}");
}

#[test]
fn a_request_seed_gives_the_same_answer_wherever_the_request_is() {
    let env = Env::text_job();
    env.write_job(2, 6, r#"["text"]"#);
    let line = |id: &str| {
        format!(
            r#"{{"custom_id": "{id}", "method": "POST", "url": "/v1/completions", "body": {{"prompt": "The weather", "temperature": 1.5, "top_p": 0.9, "seed": -7}}}}"#
        )
    };
    env.write(
        "inputs.jsonl",
        format!(
            "{}\n{}\n{}\n",
            line("first"),
            r#"{"custom_id": "between", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Something else entirely"}}"#,
            line("third")
        ),
    );
    env.ok(EXEC);
    let a = env.outputs();
    let text = |i: usize| a[i]["response"]["body"]["choices"][0]["text"].clone();
    assert_eq!(text(0), text(2));
}

#[test]
fn stop_strings_end_the_text_before_them_and_the_generation_there() {
    let tokenizer = Tokenizer::load(&cached_tokenizer()).unwrap();
    let env = Env::text_job();
    env.write(
        "inputs.jsonl",
        "{\"id\":\"p\",\"prompt\":\"Tell me a story\"}\n",
    );
    env.write_job(1, 8, r#"["text", "tokens"]"#);
    env.ok(EXEC);
    let greedy = &env.outputs()[0];
    let tokens = ids(&greedy["tokens"]);
    let full = greedy["text"].as_str().unwrap().to_owned();
    // A stop string: the text of the third generated token that decodes to any text.
    let stop = (2..tokens.len())
        .map(|k| tokenizer.decode(&tokens[k..k + 1]).unwrap())
        .find(|t| !t.trim().is_empty())
        .expect("a token with text");
    let want = &full[..full.find(&stop).unwrap()];

    let job = job_toml(1, 8, r#"["text", "tokens"]"#).replace("\"out\"", "\"stopped\"")
        + &format!("stop = [{}]\n", serde_json::to_string(&stop).unwrap());
    env.write("job.toml", job);
    env.ok(EXEC);
    let got = &read_lines(&env, "stopped")[0];
    assert_eq!(got["text"], want, "stop {stop:?}");
    assert_eq!(got["finish_reason"], "stop");
    let cut = ids(&got["tokens"]);
    assert!(
        cut.len() < tokens.len() && tokens.starts_with(&cut),
        "{cut:?} {tokens:?}"
    );
}

#[test]
fn rejects_sampling_settings_out_of_range_naming_the_job_file_and_key() {
    let env = Env::approved_job();
    env.write(
        "job.toml",
        job_toml(2, 4, r#"["tokens"]"#) + "temperature = 3.0\n",
    );
    env.refused(
        EXEC,
        2,
        &["job job.toml: `generation.temperature` must be a number from 0 (greedy) to 2"],
    );
    env.write("job.toml", job_toml(2, 4, r#"["tokens"]"#) + "top_p = 0\n");
    env.refused(
        EXEC,
        2,
        &["`generation.top_p` must be above 0 and at most 1"],
    );
}

#[test]
fn rejects_sampling_with_an_engine_that_has_no_logits_entry() {
    let env = Env::bare_job();
    env.write_model_fixture();
    let engine = env.read("engines/gemma3.eng");
    let start = engine.find("// Logits of each sequence").unwrap();
    let end = engine.find("// The final normed hidden state").unwrap();
    env.write(
        "engines/gemma3.eng",
        format!("{}{}", &engine[..start], &engine[end..]),
    );
    env.approve_both("cert.json", &[]);
    env.write_inputs(&[vec![2, 5]]);
    env.write(
        "job.toml",
        job_toml(1, 4, r#"["tokens"]"#) + "temperature = 0.5\n",
    );
    env.refused(
        EXEC,
        2,
        &["the job samples (temperature above 0) but the engine has no `logits` entry"],
    );
    // Greedy, the same engine runs.
    env.write("job.toml", job_toml(1, 4, r#"["tokens"]"#));
    env.ok(EXEC);
}

#[test]
fn exec_json_summary_and_progress_lines_for_logs() {
    let env = Env::approved_job();
    env.write_inputs(&[vec![2, 5], vec![2, 7, 9], vec![2]]);
    env.write_job(1, 4, r#"["tokens"]"#);
    let mut args: Vec<&str> = EXEC.iter().copied().filter(|a| *a != "--quiet").collect();
    args.extend(["--json", "--progress-every", "0"]);
    let out = env.command(&args).output();
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["inputs"], 3);
    let tokens = summary["generated_tokens"].as_u64().unwrap();
    assert_eq!(
        tokens,
        env.outputs()
            .iter()
            .map(|l| ids(&l["tokens"]).len() as u64)
            .sum::<u64>()
    );
    assert!(summary["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(summary["elapsed_seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(
        summary["receipt_digest"],
        env.verify_receipt("cert.json")["receipt_digest"]
    );
    assert_eq!(summary["outputs_file"], "outputs.jsonl");
    // Without a terminal, one progress line per batch at interval 0, counts only.
    let stderr = String::from_utf8_lossy(&out.stderr);
    for n in 1..=3 {
        assert!(
            stderr.contains(&format!("progress: {n}/3 inputs")),
            "{stderr}"
        );
    }
    // The plain summary ends with the time and the speed.
    env.write(
        "job.toml",
        job_toml(1, 4, r#"["tokens"]"#).replace("\"out\"", "\"plain\""),
    );
    let plain = env.ok(EXEC);
    assert!(
        plain.contains(" s generating, ") && plain.contains("tokens/s)"),
        "{plain}"
    );
}
