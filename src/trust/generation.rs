//! The generation settings: the `[generation]` table of a job file, recorded unchanged in the
//! receipt of every run, so recipients see how the outputs were produced.

use serde::{Deserialize, Serialize};

use crate::model::tokenizer::Template;
use crate::restrict::policy::OutputKind;

/// The `[generation]` table. The sampling settings apply to every input that does not set its
/// own (an OpenAI batch line's `body`); left at their defaults they are not written into the
/// receipt, so a greedy job's receipt is what it always was.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    /// Sequences run together.
    pub batch_size: u32,
    /// Generated tokens per input, at most.
    pub max_new_tokens: u32,
    /// How text prompts become tokens.
    #[serde(default = "default_template")]
    pub template: Template,
    /// What `outputs.jsonl` carries per input.
    #[serde(default = "default_outputs")]
    pub outputs: Vec<OutputKind>,
    /// Sampling temperature, 0 to 2; 0 (the default) is greedy.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub temperature: f64,
    /// Keep the fewest most likely tokens whose probability reaches this, in (0, 1]; 1 keeps
    /// all.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub top_p: f64,
    /// Keep only this many most likely tokens; 0 keeps all.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub top_k: u32,
    /// The job's seed: inputs without their own derive theirs from it and their index. Absent,
    /// the runner draws one and records it in the receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop strings: an input's text ends before the first one (at most 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

// The floats are never NaN: JSON cannot hold one, and a job file's are range-checked.
impl Eq for Generation {}

impl Default for Generation {
    /// One greedy sequence at a time, one new token, the chat template, text and tokens out.
    fn default() -> Generation {
        Generation {
            batch_size: 1,
            max_new_tokens: 1,
            template: default_template(),
            outputs: default_outputs(),
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            stop: Vec::new(),
        }
    }
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn one() -> f64 {
    1.0
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn default_template() -> Template {
    Template::Chat
}

fn default_outputs() -> Vec<OutputKind> {
    vec![OutputKind::Text, OutputKind::Tokens]
}
