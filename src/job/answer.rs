//! One output line per input, in the format its input came in: the runner's own
//! (`{"id", "text", "tokens", "finish_reason"}`), or the OpenAI batch output format
//! (`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`, whose
//! body is a `chat.completion` or a `text_completion`).
//!
//! Every line is a deterministic function of the run: ids are derived from the certificate, the
//! job and the input's index, `created` is the run's start, so a resumed run's lines match an
//! uninterrupted run's except in `created` of the lines it generated itself.

use serde_json::{json, Map, Value};

use super::generate::{Finish, Generated};
use super::input_table::InputRef;
use super::openai::Endpoint;
use crate::primitives::digest::Digest;
use crate::restrict::policy::OutputKind;

const RESPONSE_ID_CONTEXT: &str = "runner openai response id v1";

/// What one input's answer is made of.
pub struct Answer<'a> {
    /// The input.
    pub input: &'a InputRef<'a>,
    /// Its 0-based index in the inputs file.
    pub index: usize,
    /// Tokens in its prompt, after the template.
    pub prompt_tokens: usize,
    /// What the model generated.
    pub generated: &'a Generated,
    /// The generated text (cut before a stop string), when text is decoded.
    pub text: Option<&'a str>,
}

/// The facts every OpenAI answer of a run shares.
#[derive(Debug, Clone)]
pub struct OpenAiRun {
    /// Unix seconds of the run's start.
    pub created: i64,
    /// The name answers give as `model`: the approved model's digest.
    pub model: String,
    /// `system_fingerprint`: the certificate the run was admitted under.
    pub fingerprint: String,
    /// What the ids are derived from: the certificate and job digests.
    pub id_seed: Vec<u8>,
}

impl OpenAiRun {
    /// The shared facts of a run under `certificate` of `job`, started at `created`.
    pub fn new(certificate: Digest, job: Digest, model: Digest, created: i64) -> OpenAiRun {
        let mut id_seed = certificate.0.to_vec();
        id_seed.extend_from_slice(&job.0);
        OpenAiRun {
            created,
            model: format!("runner-model-{}", model.short()),
            fingerprint: format!("runner-cert-{}", certificate.short()),
            id_seed,
        }
    }

    fn id(&self, index: usize) -> String {
        let mut b = self.id_seed.clone();
        b.extend_from_slice(&(index as u64).to_le_bytes());
        Digest::derive(RESPONSE_ID_CONTEXT, &b).to_hex()[..24].to_owned()
    }
}

fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
    }
}

/// The runner's own output line.
pub fn runner_line(a: &Answer<'_>, outputs: &[OutputKind]) -> Value {
    let mut line = Map::new();
    line.insert("id".into(), json!(a.input.id));
    if outputs.contains(&OutputKind::Text) {
        if let Some(text) = a.text {
            line.insert("text".into(), json!(text));
        }
    }
    if outputs.contains(&OutputKind::Tokens) {
        line.insert("tokens".into(), json!(a.generated.tokens));
    }
    line.insert("finish_reason".into(), json!(a.generated.finish));
    Value::Object(line)
}

/// The OpenAI batch output line of an answer to a request for `endpoint`.
pub fn openai_line(run: &OpenAiRun, a: &Answer<'_>, endpoint: Endpoint) -> Value {
    let id = run.id(a.index);
    let text = a.text.unwrap_or_default();
    let finish = finish_name(a.generated.finish);
    let completion = a.generated.tokens.len();
    let usage = json!({
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": a.prompt_tokens + completion,
    });
    let body = match endpoint {
        Endpoint::Chat => json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion",
            "created": run.created,
            "model": run.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish,
            }],
            "usage": usage,
            "system_fingerprint": run.fingerprint,
        }),
        Endpoint::Completions => json!({
            "id": format!("cmpl-{id}"),
            "object": "text_completion",
            "created": run.created,
            "model": run.model,
            "choices": [{
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": finish,
            }],
            "usage": usage,
            "system_fingerprint": run.fingerprint,
        }),
    };
    json!({
        "id": format!("batch_req_{id}"),
        "custom_id": a.input.id,
        "response": {"status_code": 200, "request_id": id, "body": body},
        "error": null,
    })
}
