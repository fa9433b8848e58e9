//! What one input asks for, whichever format it came in: the prompt, and the settings a
//! request may give for itself.

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

/// What one request asks beyond its prompt; unset fields take the job's `[generation]` values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// New tokens at most (capped by the job's `max_new_tokens`).
    pub max_tokens: Option<u32>,
    /// Sampling temperature; 0 is greedy.
    pub temperature: Option<f64>,
    /// Nucleus mass kept, in (0, 1].
    pub top_p: Option<f64>,
    /// Most likely tokens kept; 0 keeps all.
    pub top_k: Option<u32>,
    /// The seed of this request's random stream.
    pub seed: Option<u64>,
    /// Stop strings.
    pub stop: Vec<String>,
}
