//! Model checkpoints: `config.json` interpretation, memory-mapped safetensors weights, the
//! tokenizer and chat template, deterministic synthetic checkpoints, and the model digest
//! certificates bind.

pub mod config;
pub mod digest;
pub mod record;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;
