//! Model checkpoints: `config.json` interpretation, memory-mapped safetensors weights and GGUF
//! files (layer projections packed into huge pages at load), the tokenizer and chat template,
//! deterministic synthetic checkpoints, and the model digest certificates bind.
#![forbid(unsafe_code)]

pub mod config;
pub mod digest;
pub mod files;
pub mod gguf;
pub mod pack;
pub mod synthetic;
pub mod tensors;
pub mod tokenizer;
pub mod weights;
