//! Model checkpoints: `config.json` interpretation, memory-mapped safetensors weights (layer
//! projections packed into huge pages at load), the tokenizer and chat template, deterministic
//! synthetic checkpoints, and the model digest certificates bind.

pub mod config;
pub mod digest;
pub mod files;
pub mod pack;
pub mod record;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;
