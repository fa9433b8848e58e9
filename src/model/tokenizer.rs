//! Text to token ids and back, with the official Gemma 3 `tokenizer.json` and chat template.
//!
//! The tokenizer file is not in the repository: `scripts/fetch_tokenizer.sh` fetches it and
//! checks its SHA-256 ([`GEMMA3_TOKENIZER_SHA256`]). The runner reads it with the pure-Rust
//! `tokenizers` crate.

use std::path::{Path, PathBuf};

use super::gguf::Strings;
use crate::error::{Diagnose, Exit};
use crate::primitives::bounded_read::{read_bounded, MAX_TOKENIZER_BYTES};

/// The tokenizer's file name, in a checkpoint directory or the cache.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// SHA-256 of the official Gemma 3 `tokenizer.json` (262144 tokens).
pub const GEMMA3_TOKENIZER_SHA256: &str =
    "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795";

/// Beginning of sequence.
pub const BOS: u32 = 2;
/// End of sequence.
pub const EOS: u32 = 1;
/// `<start_of_turn>`.
pub const START_OF_TURN: u32 = 105;
/// `<end_of_turn>`.
pub const END_OF_TURN: u32 = 106;

/// How a prompt becomes tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Template {
    /// `<bos><start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n`.
    Chat,
    /// `<bos>{prompt}`.
    Raw,
}

/// One turn of a chat.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// `user` or `model` (`assistant` is read as `model`, and a first `system` turn is folded
    /// into the first user turn, as HF's template does).
    pub role: String,
    /// The text of the turn.
    pub content: String,
}

/// Why tokenisation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The tokenizer file is missing or unreadable.
    #[error("cannot read tokenizer {path}: {detail}")]
    Load {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// Encoding or decoding failed.
    #[error("tokenizer failed: {0}")]
    Codec(String),
    /// A chat turn has a role the Gemma template does not know.
    #[error("chat turn {index} has role {role:?}; expected \"user\", \"model\" or \"assistant\"")]
    Role {
        /// Position of the turn.
        index: usize,
        /// The role found.
        role: String,
    },
}

impl Diagnose for TokenizerError {
    fn exit(&self) -> Exit {
        match self {
            TokenizerError::Codec(_) => Exit::Failure,
            _ => Exit::BadInput,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            TokenizerError::Load { .. } => Some(
                "run scripts/fetch_tokenizer.sh, which caches the official tokenizer.json".into(),
            ),
            _ => None,
        }
    }
}

/// The Gemma 3 tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokenizer")
    }
}

impl Tokenizer {
    /// Load a `tokenizer.json`.
    pub fn load(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let bytes = read_bounded(path, MAX_TOKENIZER_BYTES, "tokenizer").map_err(|e| {
            TokenizerError::Load {
                path: path.to_owned(),
                detail: e.to_string(),
            }
        })?;
        Tokenizer::from_bytes(path, &bytes)
    }

    /// Parse the bytes of a `tokenizer.json` (the ones that were checked); `path` names it in
    /// errors.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Tokenizer, TokenizerError> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizerError::Load {
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
        Ok(Tokenizer { inner })
    }

    /// The first token id whose text differs between this tokenizer and `vocabulary` (a GGUF
    /// file's `tokenizer.ggml.tokens`), with both texts, or `None` when they agree on every id
    /// both have. llama.cpp's converter writes the whitespace-run tokens with spaces where
    /// `tokenizer.json` has SentencePiece's `▁`, so the two are compared with `▁` read as a
    /// space. Ids past the model's vocabulary (the tokenizer may have more) are not compared,
    /// and neither are ids past the tokenizer's: Gemma 3 4B, 12B and 27B pad their 262144
    /// tokens and `<image_soft_token>` to 262208 embedding rows, which llama.cpp lists as
    /// `[PAD…]` tokens; no prompt encodes to them, and a generated one decodes to no text.
    /// Past the 262144 pieces a file's `[PAD<id>]` stands for any token (llama.cpp writes one
    /// for `<image_soft_token>` too when the checkpoint it converts does not list it).
    pub fn vocabulary_mismatch(&self, vocabulary: &Strings) -> Option<(u32, String, String)> {
        let same = |a: &str, b: &str| a.replace('\u{2581}', " ") == b.replace('\u{2581}', " ");
        let base = self.base_vocab_size();
        vocabulary.iter().enumerate().find_map(|(id, want)| {
            let id32 = u32::try_from(id).ok()?;
            match self.inner.id_to_token(id32) {
                Some(got) if same(&got, want) => None,
                // Past the pieces: the tokenizer's added `<image_soft_token>` may be a padding
                // row in a file converted without it.
                _ if id >= base && want == format!("[PAD{id}]") => None,
                None if id >= base => None,
                got => Some((
                    id32,
                    want.to_owned(),
                    got.unwrap_or_else(|| "(none)".into()),
                )),
            }
        })
    }

    /// Ids of `text` with no special tokens added.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Codec(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids of a prompt under a template.
    pub fn encode_prompt(
        &self,
        prompt: &str,
        template: Template,
    ) -> Result<Vec<u32>, TokenizerError> {
        match template {
            Template::Raw => {
                let mut ids = vec![BOS];
                ids.extend(self.encode_plain(prompt)?);
                Ok(ids)
            }
            Template::Chat => self.encode_chat(&[Turn {
                role: "user".into(),
                content: prompt.into(),
            }]),
        }
    }

    /// Ids of a chat in the Gemma template, ending with the model's turn opened. Like HF's
    /// `apply_chat_template`, contents are trimmed, a leading system turn is folded into the
    /// first user turn, and the whole templated text is encoded at once.
    pub fn encode_chat(&self, turns: &[Turn]) -> Result<Vec<u32>, TokenizerError> {
        let text = chat_text(turns)?;
        let enc = self
            .inner
            .encode(text.as_str(), false)
            .map_err(|e| TokenizerError::Codec(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of generated ids, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizerError::Codec(e.to_string()))
    }

    /// The text of token `id` as `tokenizer.json` spells it, if the tokenizer has that id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of tokens in the vocabulary proper, without tokens added on top of it (what a
    /// model's `vocab_size` counts).
    pub fn base_vocab_size(&self) -> usize {
        self.inner.get_vocab_size(false)
    }

    /// Number of tokens in the vocabulary, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// The Gemma 3 chat template applied to `turns`, as text.
pub fn chat_text(turns: &[Turn]) -> Result<String, TokenizerError> {
    let mut text = String::from("<bos>");
    let mut system_prefix = String::new();
    for (index, turn) in turns.iter().enumerate() {
        let role = match turn.role.as_str() {
            "system" if index == 0 => {
                system_prefix = format!("{}\n\n", turn.content.trim());
                continue;
            }
            "user" => "user",
            "model" | "assistant" => "model",
            other => {
                return Err(TokenizerError::Role {
                    index,
                    role: other.into(),
                })
            }
        };
        let prefix = std::mem::take(&mut system_prefix);
        text.push_str(&format!(
            "<start_of_turn>{role}\n{prefix}{}<end_of_turn>\n",
            turn.content.trim()
        ));
    }
    text.push_str("<start_of_turn>model\n");
    Ok(text)
}

/// Where `scripts/fetch_tokenizer.sh` caches the tokenizer: `$RUNNER_CACHE/gemma3/tokenizer.json`,
/// `RUNNER_CACHE` defaulting to `$HOME/.cache/runner`.
pub fn cached_tokenizer_path() -> Option<PathBuf> {
    Some(cache_dir()?.join("gemma3/tokenizer.json"))
}

/// The runner's download cache: `$RUNNER_CACHE`, else `~/.cache/runner` (what the fetch scripts
/// fill: `gemma3/tokenizer.json`, `models/*.gguf`).
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os("RUNNER_CACHE") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache/runner")),
    }
}
