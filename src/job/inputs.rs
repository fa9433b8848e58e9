//! The job's private inputs: JSONL, in one of two formats, detected from the first line (or
//! set by the job's `inputs_format`):
//! - the runner's own: one object per line with a unique `id` and exactly one of `prompt`
//!   (text), `messages` (chat turns) or `tokens` (ids);
//! - the OpenAI batch format ([`super::openai`]): `custom_id`, `method`, `url`, `body`.
//!
//! The whole file is checked before anything runs.
//!
//! Nothing from the data reaches a message: a bad line is refused with its number and one of a
//! fixed set of problems ([`LineProblem`]), whose text names only the fields this format
//! defines. Not serde's messages (which quote values and key names), not the id (ids are the
//! owners' labels and may be private themselves), not the offending key.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::openai::{parse_request, Endpoint, OpenAiProblem};
pub use super::request::{Options, Prompt};
use crate::error::{Diagnose, Exit};
use crate::model::tokenizer::Turn;
use crate::primitives::canonical::parse_strict;

/// The longest input line, in bytes (a prompt of thousands of tokens is a few tens of KiB).
pub const MAX_INPUT_LINE_BYTES: usize = 256 << 10;

/// The largest inputs file a policy allowing `max_inputs` inputs lets the runner read.
pub fn inputs_cap(max_inputs: u32) -> u64 {
    u64::from(max_inputs).saturating_mul(MAX_INPUT_LINE_BYTES as u64 + 1)
}

/// The format of an inputs file, and so of the outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputsFormat {
    /// From the first non-blank line: the OpenAI format when it has `custom_id`.
    #[default]
    Auto,
    /// `{"id", "prompt" | "messages" | "tokens"}` lines.
    Runner,
    /// The OpenAI batch format.
    Openai,
}

/// One input line.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// The caller's id (`id`, or `custom_id`), echoed in the output.
    pub id: String,
    /// The prompt as read; admission takes it out (leaving empty tokens) once its ids are in
    /// the admitted job's prompts.
    pub prompt: Prompt,
    /// Its 1-based line in the inputs file (how messages name it).
    pub line: usize,
    /// The endpoint of an OpenAI batch line; `None` in the runner's format.
    pub endpoint: Option<Endpoint>,
    /// The request's own settings (always empty in the runner's format).
    pub options: Options,
}

/// What is wrong with one line: the only things a message about an input may say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineProblem {
    /// Not UTF-8.
    NotUtf8,
    /// Longer than [`MAX_INPUT_LINE_BYTES`].
    TooLong,
    /// Not JSON; the column where parsing stopped.
    NotJson {
        /// 1-based column.
        column: usize,
    },
    /// A key appears twice in an object.
    DuplicateKey,
    /// Not a JSON object.
    NotObject,
    /// A key the format does not define.
    UnknownKey,
    /// `id` missing, not a string, or empty.
    BadId,
    /// Not exactly one of `prompt`, `messages`, `tokens`.
    PromptCount,
    /// `prompt` is not a string.
    BadPrompt,
    /// `messages` is not a non-empty list of `{"role", "content"}` string objects.
    BadMessages,
    /// `tokens` is not a non-empty list of integers in `0..2^32`.
    BadTokens,
    /// An OpenAI batch line is wrong.
    OpenAi(OpenAiProblem),
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineProblem::NotUtf8 => f.write_str("not valid UTF-8"),
            LineProblem::TooLong => write!(f, "longer than {MAX_INPUT_LINE_BYTES} bytes"),
            LineProblem::NotJson { column } => write!(f, "not valid JSON (column {column})"),
            LineProblem::DuplicateKey => f.write_str("an object has the same key twice"),
            LineProblem::NotObject => f.write_str("not a JSON object"),
            LineProblem::UnknownKey => {
                f.write_str("a key other than `id`, `prompt`, `messages` and `tokens`")
            }
            LineProblem::BadId => f.write_str("`id` must be a non-empty string"),
            LineProblem::PromptCount => {
                f.write_str("needs exactly one of `prompt`, `messages`, `tokens`")
            }
            LineProblem::BadPrompt => f.write_str("`prompt` must be a string"),
            LineProblem::BadMessages => f.write_str(
                "`messages` must be a non-empty list of objects with string `role` and `content`",
            ),
            LineProblem::BadTokens => f.write_str(
                "`tokens` must be a non-empty list of token ids (integers from 0 to 4294967295)",
            ),
            LineProblem::OpenAi(p) => p.fmt(f),
        }
    }
}

/// Why the inputs were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputsError {
    /// A line is not a valid input object.
    #[error("inputs {}, line {line}: {problem}", path.display())]
    Line {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: LineProblem,
    },
    /// Two lines share an id (which is not shown).
    #[error("inputs {}, line {line}: the id is already used on line {first}", path.display())]
    DuplicateId {
        /// The inputs file.
        path: PathBuf,
        /// 1-based line number of the repeat.
        line: usize,
        /// Line of the first use.
        first: usize,
    },
    /// No inputs at all.
    #[error("inputs {} holds no inputs", path.display())]
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
        if let InputsError::Line {
            problem: LineProblem::OpenAi(_),
            ..
        } = self
        {
            return Some(
                "an OpenAI batch line is {\"custom_id\": \"...\", \"method\": \"POST\", \"url\":                  \"/v1/chat/completions\", \"body\": {\"messages\": [...], \"max_tokens\": N}} (or                  \"/v1/completions\" with \"prompt\"); docs/openai.md lists the body fields the                  runner implements"
                    .into(),
            );
        }
        Some(
            "each line is a JSON object {\"id\": \"...\", and one of \"prompt\": \"text\", \
             \"messages\": [{\"role\": \"user\", \"content\": \"...\"}], \"tokens\": [2, ...]}"
                .into(),
        )
    }
}

/// Read and check every line of an inputs file (no size cap: for tools and tests; `exec`
/// reads through [`crate::primitives::bounded_read`]).
pub fn read_inputs(path: &Path) -> Result<Vec<Input>, std::io::Error> {
    let bytes = std::fs::read(path)?;
    parse_inputs(&bytes, path).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Parse inputs JSONL in the format its first line shows; `path` names the file in errors.
/// Blank lines are skipped.
pub fn parse_inputs(bytes: &[u8], path: &Path) -> Result<Vec<Input>, InputsError> {
    parse_inputs_as(bytes, path, InputsFormat::Auto)
}

/// The format a first non-blank line shows: the OpenAI batch format when it is an object with
/// `custom_id`, else the runner's (whose parse then says what is wrong).
fn format_of_line(line: &[u8]) -> InputsFormat {
    let is_openai = serde_json::from_slice::<serde_json::Map<String, Value>>(line)
        .ok()
        .is_some_and(|m| m.contains_key("custom_id"));
    if is_openai {
        InputsFormat::Openai
    } else {
        InputsFormat::Runner
    }
}

/// Parse inputs JSONL in `format` (`Auto`: the format the first non-blank line shows).
pub fn parse_inputs_as(
    bytes: &[u8],
    path: &Path,
    format: InputsFormat,
) -> Result<Vec<Input>, InputsError> {
    let mut lines = InputLines::new(path, format);
    let mut inputs = Vec::new();
    for raw in bytes.split(|&b| b == b'\n') {
        if let Some(input) = lines.next_line(raw)? {
            inputs.push(input);
        }
    }
    lines.finish()?;
    Ok(inputs)
}

/// The inputs file's lines checked one at a time, as they are read (a sealed file is opened as
/// a stream and never held whole): each line on its own, the format from the first non-blank
/// one, and ids unique across the file.
pub struct InputLines {
    path: PathBuf,
    format: InputsFormat,
    line: usize,
    inputs: usize,
    /// Each id's first line, by a digest of the id under a per-run key (so the table holds no
    /// id, and costs the same for any id's length).
    seen: HashMap<[u8; 16], usize>,
    key: [u8; 32],
}

impl InputLines {
    /// Before the first line of the file at `path`, in `format`.
    pub fn new(path: &Path, format: InputsFormat) -> InputLines {
        let mut key = [0u8; 32];
        // The key only spreads the table; a fixed one would do as well, short of an attacker
        // who picks ids to collide, which a random key rules out.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key);
        InputLines {
            path: path.to_owned(),
            format,
            line: 0,
            inputs: 0,
            seen: HashMap::new(),
            key,
        }
    }

    /// The next line (without its newline): the input it holds, `None` when blank.
    pub fn next_line(&mut self, raw: &[u8]) -> Result<Option<Input>, InputsError> {
        self.line += 1;
        let line = self.line;
        let bad = |problem| InputsError::Line {
            path: self.path.clone(),
            line,
            problem,
        };
        if raw.len() > MAX_INPUT_LINE_BYTES {
            return Err(bad(LineProblem::TooLong));
        }
        let text = std::str::from_utf8(raw).map_err(|_| bad(LineProblem::NotUtf8))?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        if self.format == InputsFormat::Auto {
            self.format = format_of_line(raw);
        }
        let input = parse_line(text, line, self.format).map_err(bad)?;
        let id = blake3::keyed_hash(&self.key, input.id.as_bytes());
        let mut short = [0u8; 16];
        short.copy_from_slice(&id.as_bytes()[..16]);
        if let Some(&first) = self.seen.get(&short) {
            return Err(InputsError::DuplicateId {
                path: self.path.clone(),
                line,
                first,
            });
        }
        self.seen.insert(short, line);
        self.inputs += 1;
        Ok(Some(input))
    }

    /// After the last line: refused if there were no inputs at all.
    pub fn finish(&self) -> Result<(), InputsError> {
        if self.inputs == 0 {
            return Err(InputsError::Empty {
                path: self.path.clone(),
            });
        }
        Ok(())
    }
}

/// One non-blank line.
fn parse_line(text: &str, line: usize, format: InputsFormat) -> Result<Input, LineProblem> {
    let value = parse_strict(text.as_bytes()).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => LineProblem::DuplicateKey,
        _ => LineProblem::NotJson { column: e.column() },
    })?;
    let Value::Object(mut fields) = value else {
        return Err(LineProblem::NotObject);
    };
    if format == InputsFormat::Openai {
        let r = parse_request(fields).map_err(LineProblem::OpenAi)?;
        return Ok(Input {
            id: r.custom_id,
            prompt: r.prompt,
            line,
            endpoint: Some(r.endpoint),
            options: r.options,
        });
    }
    if fields
        .keys()
        .any(|k| !matches!(k.as_str(), "id" | "prompt" | "messages" | "tokens"))
    {
        return Err(LineProblem::UnknownKey);
    }
    let id = match fields.remove("id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        _ => return Err(LineProblem::BadId),
    };
    let prompt = match (
        fields.remove("prompt"),
        fields.remove("messages"),
        fields.remove("tokens"),
    ) {
        (Some(p), None, None) => Prompt::Text(match p {
            Value::String(s) => s,
            _ => return Err(LineProblem::BadPrompt),
        }),
        (None, Some(m), None) => Prompt::Messages(turns(m).ok_or(LineProblem::BadMessages)?),
        (None, None, Some(t)) => Prompt::Tokens(token_ids(t).ok_or(LineProblem::BadTokens)?),
        _ => return Err(LineProblem::PromptCount),
    };
    Ok(Input {
        id,
        prompt,
        line,
        endpoint: None,
        options: Options::default(),
    })
}

fn turns(value: Value) -> Option<Vec<Turn>> {
    let Value::Array(items) = value else {
        return None;
    };
    if items.is_empty() {
        return None;
    }
    items
        .into_iter()
        .map(|item| {
            let Value::Object(mut turn) = item else {
                return None;
            };
            let (Some(Value::String(role)), Some(Value::String(content))) =
                (turn.remove("role"), turn.remove("content"))
            else {
                return None;
            };
            turn.is_empty().then_some(Turn { role, content })
        })
        .collect()
}

fn token_ids(value: Value) -> Option<Vec<u32>> {
    let Value::Array(items) = value else {
        return None;
    };
    if items.is_empty() {
        return None;
    }
    items
        .iter()
        .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}
