//! The generation settings: the `[generation]` table of a job file, recorded unchanged in the
//! receipt of every run, so recipients see how the outputs were produced.

use serde::{Deserialize, Serialize};

use crate::model::tokenizer::Template;
use crate::restrict::policy::OutputKind;

/// The `[generation]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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
}

fn default_template() -> Template {
    Template::Chat
}

fn default_outputs() -> Vec<OutputKind> {
    vec![OutputKind::Text, OutputKind::Tokens]
}
