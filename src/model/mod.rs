//! Model checkpoints: `config.json` interpretation, memory-mapped safetensors weights, and the
//! model digest certificates bind.

pub mod config;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;
