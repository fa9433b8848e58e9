//! The job's private inputs: JSONL, one object per line with a unique `id` and exactly one of
//! `prompt` (text), `messages` (chat turns) or `tokens` (ids). The whole file is checked before
//! anything runs; a bad line is refused with its number. Input contents never appear in errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Diagnose, Exit};
use crate::model::tokenizer::Turn;

/// What one input asks the model to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Text, put through the job's template.
    Text(String),
    /// Chat turns, put through the chat template.
    Messages(Vec<Turn>),
    /// Token ids, used as they are.
    Tokens(Vec<u32>),
}

/// One input line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The caller's id, echoed in the output.
    pub id: String,
    /// The prompt.
    pub prompt: Prompt,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    id: String,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Turn>>,
    #[serde(default)]
    tokens: Option<Vec<u32>>,
}

/// Why the inputs were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputsError {
    /// The file could not be read.
    #[error("cannot read inputs {path}: {source}")]
    Read {
        /// The inputs file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a valid input object.
    #[error("inputs {path}, line {line}: {problem}")]
    Line {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong (never the line's content: inputs are private).
        problem: String,
    },
    /// Two lines share an id.
    #[error("inputs {path}, line {line}: id {id:?} already used on line {first}")]
    DuplicateId {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line number of the repeat.
        line: usize,
        /// Line of the first use.
        first: usize,
        /// The id.
        id: String,
    },
    /// No inputs at all.
    #[error("inputs {path} holds no inputs")]
    Empty {
        /// The inputs file.
        path: PathBuf,
    },
}

impl Diagnose for InputsError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(
            "each line is a JSON object {\"id\": \"...\", and one of \"prompt\": \"text\", \
             \"messages\": [{\"role\": \"user\", \"content\": \"...\"}], \"tokens\": [2, ...]}"
                .into(),
        )
    }
}

/// Read and check every line of an inputs file. Blank lines are skipped.
pub fn read_inputs(path: &Path) -> Result<Vec<Input>, InputsError> {
    let bytes = std::fs::read(path).map_err(|source| InputsError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_inputs(&bytes, path)
}

/// Parse inputs JSONL; `path` names the file in errors.
pub fn parse_inputs(bytes: &[u8], path: &Path) -> Result<Vec<Input>, InputsError> {
    let mut inputs = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw_line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let bad = |problem: String| InputsError::Line {
            path: path.to_owned(),
            line,
            problem,
        };
        let text = std::str::from_utf8(raw_line).map_err(|_| bad("not valid UTF-8".into()))?;
        if text.trim().is_empty() {
            continue;
        }
        crate::primitives::canonical::parse_strict(text.as_bytes())
            .map_err(|e| bad(redact_serde(&e)))?;
        let raw: RawInput = serde_json::from_str(text).map_err(|e| bad(redact_serde(&e)))?;
        let given = [
            raw.prompt.is_some(),
            raw.messages.is_some(),
            raw.tokens.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(bad(
                "needs exactly one of `prompt`, `messages`, `tokens`".into()
            ));
        }
        if raw.id.is_empty() {
            return Err(bad("`id` is empty".into()));
        }
        let prompt = match (raw.prompt, raw.messages, raw.tokens) {
            (Some(p), _, _) => Prompt::Text(p),
            (_, Some(m), _) if m.is_empty() => return Err(bad("`messages` is empty".into())),
            (_, Some(m), _) => Prompt::Messages(m),
            (_, _, Some(t)) if t.is_empty() => return Err(bad("`tokens` is empty".into())),
            (_, _, Some(t)) => Prompt::Tokens(t),
            _ => {
                return Err(bad(
                    "needs exactly one of `prompt`, `messages`, `tokens`".into()
                ))
            }
        };
        if let Some(&first) = seen.get(&raw.id) {
            return Err(InputsError::DuplicateId {
                path: path.to_owned(),
                line,
                first,
                id: raw.id,
            });
        }
        seen.insert(raw.id.clone(), line);
        inputs.push(Input { id: raw.id, prompt });
    }
    if inputs.is_empty() {
        return Err(InputsError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(inputs)
}

/// serde's message without any quoted input value: field names and positions only.
fn redact_serde(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => format!("not valid JSON (column {})", e.column()),
        Category::Data => {
            let msg = e.to_string();
            // Messages naming fields (unknown/missing/duplicate) carry no input data.
            if msg.contains("field") || msg.contains("duplicate key") {
                msg
            } else {
                format!("a value has the wrong type (column {})", e.column())
            }
        }
        Category::Io => "unreadable".into(),
    }
}
