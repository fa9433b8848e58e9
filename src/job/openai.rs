//! Request lines of the OpenAI batch format (the JSONL that the OpenAI Batch API and vLLM's
//! `run_batch` read): `{"custom_id", "method": "POST", "url", "body"}`, for
//! `/v1/chat/completions` (`body.messages`) and `/v1/completions` (`body.prompt`).
//!
//! Every field the runner does not implement is refused, never ignored. A refusal names a field
//! only from this format's own vocabulary (the fixed tables below): a key that is not the API's
//! could be anything a line holds, so it is not quoted. Values are never quoted. A field set to
//! `null`, or an unimplemented one set to the value that means "off" (`"n": 1`,
//! `"stream": false`, a penalty of 0), asks for nothing the runner does not do, and is accepted.
//!
//! `body.model` is not checked: the certificate fixes the model by its digest, which a name
//! cannot add to; the answers name the model the runner ran (docs/openai.md).

use std::fmt;

use serde_json::{Map, Value};

use super::request::{Options, Prompt};
use crate::model::tokenizer::Turn;

/// Which endpoint a request is for; the answer takes the same shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`: `messages` in, a `chat.completion` out.
    Chat,
    /// `/v1/completions`: `prompt` in, a `text_completion` out.
    Completions,
}

impl Endpoint {
    /// The URL of this endpoint.
    pub fn url(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }
}

/// What is wrong with an OpenAI batch line. Field names are static text from this format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenAiProblem {
    /// A required field is missing.
    Missing(&'static str),
    /// A field holds the wrong kind of value or one out of range.
    Invalid {
        /// The field, e.g. `body.temperature`.
        field: &'static str,
        /// What it must be.
        want: &'static str,
    },
    /// A field of the API the runner does not implement, set to something other than "off".
    Unsupported {
        /// The field, e.g. `body.logprobs`.
        field: &'static str,
    },
    /// A key the format does not define (not named: it is the line's own text).
    UnknownKey {
        /// The object it is in, e.g. `body`.
        within: &'static str,
    },
}

impl fmt::Display for OpenAiProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenAiProblem::Missing(field) => write!(f, "`{field}` is missing"),
            OpenAiProblem::Invalid { field, want } => write!(f, "`{field}` must be {want}"),
            OpenAiProblem::Unsupported { field } => write!(
                f,
                "`{field}` is not implemented by the runner (remove it, or set it to null)"
            ),
            OpenAiProblem::UnknownKey { within } => write!(
                f,
                "`{within}` has a key that the OpenAI batch format does not define"
            ),
        }
    }
}

/// One parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `custom_id`.
    pub custom_id: String,
    /// The endpoint.
    pub endpoint: Endpoint,
    /// `body.messages` or `body.prompt`.
    pub prompt: Prompt,
    /// The generation fields of the body.
    pub options: Options,
}

type Problem = OpenAiProblem;

/// Fields of the API's request bodies that the runner does not implement, by the name a refusal
/// gives them, each with the value (besides `null`) that asks for nothing: those are accepted.
const UNIMPLEMENTED: &[(&str, Option<Neutral>)] = &[
    ("body.n", Some(Neutral::Int(1))),
    ("body.best_of", Some(Neutral::Int(1))),
    ("body.stream", Some(Neutral::Bool(false))),
    ("body.echo", Some(Neutral::Bool(false))),
    ("body.logprobs", Some(Neutral::Bool(false))),
    ("body.presence_penalty", Some(Neutral::Int(0))),
    ("body.frequency_penalty", Some(Neutral::Int(0))),
    ("body.repetition_penalty", Some(Neutral::Int(1))),
    ("body.stream_options", None),
    ("body.top_logprobs", None),
    ("body.logit_bias", None),
    ("body.tools", None),
    ("body.tool_choice", None),
    ("body.parallel_tool_calls", None),
    ("body.functions", None),
    ("body.function_call", None),
    ("body.response_format", None),
    ("body.user", None),
    ("body.metadata", None),
    ("body.store", None),
    ("body.service_tier", None),
    ("body.modalities", None),
    ("body.audio", None),
    ("body.prediction", None),
    ("body.reasoning_effort", None),
    ("body.web_search_options", None),
    ("body.suffix", None),
    ("body.min_p", None),
    ("body.min_tokens", None),
    ("body.ignore_eos", None),
    ("body.stop_token_ids", None),
    ("body.include_stop_str_in_output", None),
    ("body.skip_special_tokens", None),
    ("body.length_penalty", None),
    ("body.use_beam_search", None),
    ("body.guided_json", None),
    ("body.guided_regex", None),
    ("body.guided_choice", None),
    ("body.guided_grammar", None),
    ("body.priority", None),
    ("body.truncate_prompt_tokens", None),
    ("body.prompt_logprobs", None),
];

#[derive(Debug, Clone, Copy)]
enum Neutral {
    Int(i64),
    Bool(bool),
}

/// Whether `value` is the neutral `n` of a field (a number equal to it, `1.0` as `1`).
fn is_neutral(value: &Value, neutral: Neutral) -> bool {
    match (value, neutral) {
        (Value::Bool(b), Neutral::Bool(n)) => *b == n,
        (Value::Number(x), Neutral::Int(n)) => x.as_f64() == Some(n as f64),
        _ => false,
    }
}

/// Parse one request line's object (already JSON).
pub fn parse_request(mut line: Map<String, Value>) -> Result<Request, Problem> {
    if line
        .keys()
        .any(|k| !matches!(k.as_str(), "custom_id" | "method" | "url" | "body"))
    {
        return Err(Problem::UnknownKey { within: "line" });
    }
    let custom_id = match line.remove("custom_id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        Some(_) => {
            return Err(Problem::Invalid {
                field: "custom_id",
                want: "a non-empty string",
            })
        }
        None => return Err(Problem::Missing("custom_id")),
    };
    match line.remove("method") {
        Some(Value::String(m)) if m == "POST" => {}
        None => return Err(Problem::Missing("method")),
        Some(_) => {
            return Err(Problem::Invalid {
                field: "method",
                want: "\"POST\"",
            })
        }
    }
    let endpoint = match line.remove("url") {
        None => return Err(Problem::Missing("url")),
        Some(Value::String(url)) if url == "/v1/chat/completions" => Endpoint::Chat,
        Some(Value::String(url)) if url == "/v1/completions" => Endpoint::Completions,
        Some(_) => return Err(Problem::Invalid {
            field: "url",
            want:
                "\"/v1/chat/completions\" or \"/v1/completions\" (the endpoints the runner serves)",
        }),
    };
    let mut body = match line.remove("body") {
        Some(Value::Object(b)) => b,
        None => return Err(Problem::Missing("body")),
        Some(_) => {
            return Err(Problem::Invalid {
                field: "body",
                want: "an object",
            })
        }
    };
    // `null` means "not set" for every optional field.
    body.retain(|_, v| !v.is_null());
    let prompt = match endpoint {
        Endpoint::Chat => {
            if body.contains_key("prompt") {
                return Err(Problem::Invalid {
                    field: "body.prompt",
                    want: "absent in a /v1/chat/completions request (it takes `messages`)",
                });
            }
            Prompt::Messages(messages(body.remove("messages"))?)
        }
        Endpoint::Completions => {
            if body.contains_key("messages") {
                return Err(Problem::Invalid {
                    field: "body.messages",
                    want: "absent in a /v1/completions request (it takes `prompt`)",
                });
            }
            completion_prompt(body.remove("prompt"))?
        }
    };
    body.remove("model");
    let options = options(&mut body)?;
    for (key, value) in &body {
        let Some(&(field, neutral)) = UNIMPLEMENTED
            .iter()
            .find(|(f, _)| f.strip_prefix("body.") == Some(key.as_str()))
        else {
            return Err(Problem::UnknownKey { within: "body" });
        };
        if !neutral.is_some_and(|n| is_neutral(value, n)) {
            return Err(Problem::Unsupported { field });
        }
    }
    Ok(Request {
        custom_id,
        endpoint,
        prompt,
        options,
    })
}

fn messages(value: Option<Value>) -> Result<Vec<Turn>, Problem> {
    let bad = Problem::Invalid {
        field: "body.messages",
        want: "a non-empty list of {\"role\", \"content\"} objects",
    };
    let Some(value) = value else {
        return Err(Problem::Missing("body.messages"));
    };
    let Value::Array(items) = value else {
        return Err(bad);
    };
    if items.is_empty() {
        return Err(bad);
    }
    items
        .into_iter()
        .map(|item| {
            let Value::Object(mut m) = item else {
                return Err(bad);
            };
            m.retain(|_, v| !v.is_null());
            let role = match m.remove("role") {
                Some(Value::String(r)) => r,
                _ => {
                    return Err(Problem::Invalid {
                        field: "body.messages[].role",
                        want: "a string (\"system\", \"user\" or \"assistant\")",
                    })
                }
            };
            let content = content(m.remove("content"))?;
            if m.contains_key("name") {
                return Err(Problem::Unsupported {
                    field: "body.messages[].name",
                });
            }
            if !m.is_empty() {
                return Err(Problem::UnknownKey {
                    within: "body.messages[]",
                });
            }
            Ok(Turn { role, content })
        })
        .collect()
}

/// A message's content: a string, or a list of text parts (joined, as the API does).
fn content(value: Option<Value>) -> Result<String, Problem> {
    let bad = Problem::Invalid {
        field: "body.messages[].content",
        want: "a string or a list of {\"type\": \"text\", \"text\": ...} parts",
    };
    match value {
        Some(Value::String(s)) => Ok(s),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                let Value::Object(mut p) = part else {
                    return Err(bad);
                };
                match p.remove("type").as_ref().and_then(Value::as_str) {
                    Some("text") => {}
                    Some(_) => {
                        return Err(Problem::Invalid {
                            field: "body.messages[].content[].type",
                            want: "\"text\" (images, audio and files are not supported)",
                        })
                    }
                    None => return Err(bad),
                }
                match p.remove("text") {
                    Some(Value::String(t)) if p.is_empty() => text.push_str(&t),
                    _ => return Err(bad),
                }
            }
            Ok(text)
        }
        None => Err(Problem::Missing("body.messages[].content")),
        Some(_) => Err(bad),
    }
}

/// `body.prompt`: a string, or a list of token ids.
fn completion_prompt(value: Option<Value>) -> Result<Prompt, Problem> {
    let bad = Problem::Invalid {
        field: "body.prompt",
        want: "a string or a non-empty list of token ids (one prompt per line)",
    };
    match value {
        Some(Value::String(s)) => Ok(Prompt::Text(s)),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect::<Option<Vec<u32>>>()
            .map(Prompt::Tokens)
            .ok_or(bad),
        None => Err(Problem::Missing("body.prompt")),
        Some(_) => Err(bad),
    }
}

fn options(body: &mut Map<String, Value>) -> Result<Options, Problem> {
    let max_tokens = body.remove("max_tokens");
    let max_completion = body.remove("max_completion_tokens");
    let max_tokens = match (max_tokens, max_completion) {
        (Some(_), Some(_)) => {
            return Err(Problem::Invalid {
                field: "body.max_completion_tokens",
                want: "absent when `max_tokens` is given (they are the same setting)",
            })
        }
        (Some(v), None) => Some(positive_u32(&v, "body.max_tokens")?),
        (None, Some(v)) => Some(positive_u32(&v, "body.max_completion_tokens")?),
        (None, None) => None,
    };
    let temperature = match body.remove("temperature") {
        Some(v) => Some(v.as_f64().filter(|t| (0.0..=2.0).contains(t)).ok_or(
            Problem::Invalid {
                field: "body.temperature",
                want: "a number from 0 to 2",
            },
        )?),
        None => None,
    };
    let top_p =
        match body.remove("top_p") {
            Some(v) => Some(v.as_f64().filter(|p| *p > 0.0 && *p <= 1.0).ok_or(
                Problem::Invalid {
                    field: "body.top_p",
                    want: "a number above 0 and at most 1",
                },
            )?),
            None => None,
        };
    let top_k = match body.remove("top_k") {
        // vLLM's spelling of "off" is -1; 0 is too.
        Some(v) => match v.as_i64() {
            Some(-1) | Some(0) => Some(0),
            Some(k) if k > 0 => Some(u32::try_from(k).unwrap_or(u32::MAX)),
            _ => {
                return Err(Problem::Invalid {
                    field: "body.top_k",
                    want: "an integer: -1 or 0 for off, else the number of tokens kept",
                })
            }
        },
        None => None,
    };
    let seed = match body.remove("seed") {
        // The API's seed is a signed 64-bit integer; a negative one is taken as its
        // two's-complement bits, so every such seed has its own stream.
        Some(v) => Some(v.as_u64().or_else(|| v.as_i64().map(|s| s as u64)).ok_or(
            Problem::Invalid {
                field: "body.seed",
                want: "an integer",
            },
        )?),
        None => None,
    };
    let stop = match body.remove("stop") {
        Some(v) => stop_strings(v)?,
        None => Vec::new(),
    };
    Ok(Options {
        max_tokens,
        temperature,
        top_p,
        top_k,
        seed,
        stop,
    })
}

fn positive_u32(v: &Value, field: &'static str) -> Result<u32, Problem> {
    v.as_u64()
        .filter(|n| *n >= 1)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        .ok_or(Problem::Invalid {
            field,
            want: "a positive integer",
        })
}

/// The most stop strings a request may give (the API's limit).
pub const MAX_STOP_STRINGS: usize = 4;

fn stop_strings(v: Value) -> Result<Vec<String>, Problem> {
    let bad = Problem::Invalid {
        field: "body.stop",
        want: "a non-empty string or a list of 1 to 4 of them",
    };
    let list = match v {
        Value::String(s) => vec![s],
        Value::Array(items) if (1..=MAX_STOP_STRINGS).contains(&items.len()) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Ok(s),
                _ => Err(bad),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(bad),
    };
    if list.iter().any(String::is_empty) {
        return Err(bad);
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Request, Problem> {
        parse_request(v.as_object().unwrap().clone())
    }

    #[test]
    fn the_api_docs_example_parses() {
        let r = parse(json!({"custom_id": "request-1", "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-3.5-turbo-0125", "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hello world!"}], "max_tokens": 1000}}))
        .unwrap();
        assert_eq!(r.custom_id, "request-1");
        assert_eq!(r.endpoint, Endpoint::Chat);
        assert_eq!(r.options.max_tokens, Some(1000));
        assert!(matches!(r.prompt, Prompt::Messages(ref m) if m.len() == 2));
    }

    #[test]
    fn neutral_and_null_values_of_unimplemented_fields_pass_others_are_named() {
        let with = |k: &str, v: Value| {
            parse(
                json!({"custom_id": "a", "method": "POST", "url": "/v1/completions",
                "body": {"prompt": "x", k: v}}),
            )
        };
        assert!(with("n", json!(1)).is_ok());
        assert!(with("stream", json!(false)).is_ok());
        assert!(with("presence_penalty", json!(0.0)).is_ok());
        assert!(with("logit_bias", Value::Null).is_ok());
        assert_eq!(
            with("n", json!(2)).unwrap_err(),
            Problem::Unsupported { field: "body.n" }
        );
        assert_eq!(
            with("response_format", json!({"type": "json_object"})).unwrap_err(),
            Problem::Unsupported {
                field: "body.response_format"
            }
        );
        assert_eq!(
            with("my_secret_key", json!(1)).unwrap_err(),
            Problem::UnknownKey { within: "body" }
        );
    }
}
