//! Jobs in an [`Env`]: job files, inputs, `runner exec`'s refusals and its outputs.

use serde_json::Value;

use super::env::Env;
use super::repo::{cached_tokenizer, fixture_model};

/// The flags every exec of an [`Env::approved_job`] runs with: the state directory and trust
/// file inside the directory.
pub const EXEC: &[&str] = &[
    "exec",
    "--cert",
    "cert.json",
    "--trust",
    "trust.toml",
    "--state-dir",
    "state",
    "--quiet",
    "job.toml",
];

/// A job over `inputs.jsonl` running `engines/gemma3.eng` on `model/`, writing `out/`.
pub fn job_toml(batch_size: u32, max_new_tokens: u32, outputs: &str) -> String {
    job_toml_for("model", "out", batch_size, max_new_tokens, outputs)
}

fn job_toml_for(
    model: &str,
    output_dir: &str,
    batch_size: u32,
    max_new_tokens: u32,
    outputs: &str,
) -> String {
    format!(
        "engine = \"engines/gemma3.eng\"\n\
         model = \"{model}\"\n\
         inputs = \"inputs.jsonl\"\n\
         output_dir = \"{output_dir}\"\n\
         \n\
         [generation]\n\
         batch_size = {batch_size}\n\
         max_new_tokens = {max_new_tokens}\n\
         outputs = {outputs}\n"
    )
}

/// The tiny-270m fixture's `expected.json` (HF's reference outputs).
pub fn expected_json() -> Value {
    let path = fixture_model("tiny-270m").join("expected.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| u32::try_from(t.as_u64().unwrap()).unwrap())
        .collect()
}

/// The fixture's prompts (token ids), as recorded with the HF reference outputs.
pub fn fixture_prompts() -> Vec<Vec<u32>> {
    expected_json()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect()
}

impl Env {
    /// An approved job whose random-weight model has the Gemma 3 tokenizer's vocabulary
    /// (262144 x 64 bf16 embeddings, ~33 MB), so text prompts run and answers are text.
    pub fn text_job() -> Env {
        let env = Env::bare_job();
        env.write_text_model();
        env.approve_both("cert.json", &[]);
        env
    }

    /// [`Env::text_job`] with a model of `vocab_size` embedding rows instead of the tokenizer's
    /// 262144.
    pub fn text_job_with_rows(vocab_size: usize) -> Env {
        let env = Env::bare_job();
        env.write_model_with_rows(vocab_size, 11);
        env.approve_both("cert.json", &[]);
        env
    }

    /// `model/`: the random-weight model of [`Env::text_job`], not yet approved.
    pub fn write_text_model(&self) {
        self.write_model_with_rows(262_144, 7);
    }

    /// `model/`: a random-weight model of `vocab_size` embedding rows for text jobs (the
    /// tokenizer they need must be cached).
    fn write_model_with_rows(&self, vocab_size: usize, seed: u64) {
        cached_tokenizer();
        runner::model::synthetic::SyntheticSpec {
            vocab_size,
            ..runner::model::synthetic::SyntheticSpec::tiny()
        }
        .write(&self.path("model"), seed)
        .unwrap();
    }

    /// inputs.jsonl: one `{"id", "tokens"}` line per prompt, ids p0, p1, ...
    pub fn write_inputs(&self, prompts: &[Vec<u32>]) {
        let mut text = String::new();
        for (i, p) in prompts.iter().enumerate() {
            text.push_str(&serde_json::json!({"id": format!("p{i}"), "tokens": p}).to_string());
            text.push('\n');
        }
        self.write("inputs.jsonl", text);
    }

    /// job.toml: [`job_toml`].
    pub fn write_job(&self, batch_size: u32, max_new_tokens: u32, outputs: &str) {
        self.write("job.toml", job_toml(batch_size, max_new_tokens, outputs));
    }

    /// `job-<out>.toml`, a job of [`Env::reapproval`]'s model writing `out/` (batches of 2, 8
    /// new tokens); returns its name.
    pub fn job(&self, out: &str) -> String {
        let name = format!("job-{out}.toml");
        let model = fixture_model("tiny-270m");
        let text = job_toml_for(&model.display().to_string(), out, 2, 8, r#"["tokens"]"#);
        self.write(&name, text);
        name
    }

    /// [`EXEC`] with `--cert` replaced.
    pub fn exec_with_cert(&self, cert: &'static str) -> Vec<&'static str> {
        let mut args = EXEC.to_vec();
        args[2] = cert;
        args
    }

    /// A copy of the shipped policy with small limits and only token output, approved by both
    /// owners as `cert-small.json`.
    pub fn small_policy(&self) {
        let mut policy: Value = serde_json::from_str(&self.read("policies/gemma3.json")).unwrap();
        policy["name"] = "gemma3-small".into();
        policy["limits"] = serde_json::json!({
            "max_batch": 2, "max_new_tokens": 8, "max_prompt_tokens": 8, "max_inputs": 3
        });
        policy["outputs"] = serde_json::json!(["tokens"]);
        self.write(
            "policies/small.json",
            serde_json::to_vec_pretty(&policy).unwrap(),
        );
        let [first, second] = self.owners;
        self.approve_under("policies/small.json", first, "cert-small.json", &[]);
        self.cosign("cert-small.json", second);
    }

    /// Run `args`: exit `code`, a message containing every needle, a hint, nothing on stdout.
    /// Returns stderr.
    fn failing(&self, args: &[&str], code: i32, needles: &[&str]) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: expected {needle:?} in: {stderr}"
            );
        }
        assert!(stderr.contains("\n  hint: "), "no hint in: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{args:?} printed to stdout on failure"
        );
        stderr
    }

    /// Run `args`, expect exit `code`, a message containing every needle, a hint, nothing on
    /// stdout, and one more audit entry: `refused`, its reason the message. Returns stderr.
    pub fn refusal(&self, args: &[&str], code: i32, needles: &[&str]) -> String {
        let before = self.audit_entries();
        let stderr = self.failing(args, code, needles);
        let audit = self.audit();
        assert_eq!(audit["entries"].as_u64().unwrap(), before + 1, "{audit}");
        let last = &audit["last"];
        assert_eq!(last["outcome"], "refused", "{last}");
        let reason = last["reason"].as_str().unwrap();
        // The reason is the message as printed (which may span lines), without the hint.
        let message = stderr
            .strip_prefix("error: ")
            .and_then(|s| s.split("\n  hint: ").next());
        assert_eq!(Some(reason), message, "{last}");
        assert!(last["output_digests"].as_array().unwrap().is_empty());
        stderr
    }

    /// Run `args`, expect exit `code` and every needle after the job was admitted: two more
    /// audit entries of one attempt, `admitted` then `failed` (its reason the message), nothing
    /// on stdout, no `out/` and no staging directory beside it. Returns stderr.
    pub fn failed_after_admission(&self, args: &[&str], code: i32, needles: &[&str]) -> String {
        let before = self.audit_entries();
        let stderr = self.failing(args, code, needles);
        let entries = self.audit_entry_lines();
        assert_eq!(entries.len() as u64, before + 2, "{entries:?}");
        let (admitted, failed) = (&entries[entries.len() - 2], &entries[entries.len() - 1]);
        assert_eq!(admitted["outcome"], "admitted", "{admitted}");
        assert_eq!(failed["outcome"], "failed", "{failed}");
        assert_eq!(admitted["attempt"], failed["attempt"]);
        let message = stderr
            .strip_prefix("error: ")
            .and_then(|s| s.split("\n  hint: ").next());
        assert_eq!(failed["reason"].as_str(), message, "{failed}");
        assert!(!self.path("out").exists(), "out/ was written: {stderr}");
        let staging: Vec<String> = std::fs::read_dir(self.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".partial-"))
            .collect();
        assert!(staging.is_empty(), "staging left behind: {staging:?}");
        stderr
    }

    /// [`Env::refusal`], and the job wrote nothing: `out/` does not exist.
    pub fn refused(&self, args: &[&str], code: i32, needles: &[&str]) -> String {
        let stderr = self.refusal(args, code, needles);
        assert!(!self.path("out").exists(), "out/ was written: {stderr}");
        stderr
    }

    /// out/outputs.jsonl, one JSON object per line.
    pub fn outputs(&self) -> Vec<Value> {
        self.outputs_in("out")
    }

    /// The `tokens` of each line of `<out>/outputs.jsonl`.
    pub fn tokens(&self, out: &str) -> Vec<Value> {
        self.outputs_in(out)
            .into_iter()
            .map(|v| v["tokens"].clone())
            .collect()
    }

    /// The lines of `<dir>/outputs.jsonl`.
    pub fn outputs_of(&self, dir: &str) -> Vec<Value> {
        self.outputs_in(dir)
    }

    fn outputs_in(&self, out: &str) -> Vec<Value> {
        self.read(&format!("{out}/outputs.jsonl"))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}
