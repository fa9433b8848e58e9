//! GGUF checkpoints (llama.cpp's single-file format): the container ([`reader`]), the Gemma 3
//! configuration its `gemma3.*` keys describe ([`config`]), and the tensors as a checkpoint
//! whose weights stay in their block formats ([`load`]).

pub mod config;
pub(crate) mod load;
mod meta;
pub mod reader;

pub(crate) use load::load;
pub use reader::{Gguf, GgufError, MetaArray, MetaValue, Strings, TensorInfo};
