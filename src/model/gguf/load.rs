//! A Gemma 3 GGUF file as a [`Checkpoint`]: its tensors mapped in their block formats under
//! llama.cpp's names, the norms brought back to HF's form.
//!
//! llama.cpp's converter stores every Gemma RMSNorm weight with the 1 of `x * (1 + w)` already
//! added. HF transformers' GGUF loader subtracts it again in f32 (`w - 1`) and its forward adds
//! it back, and `(w_file - 1) + 1` is not always `w_file` in f32; so the norms are decoded and
//! the 1 taken off here, once, in f32, for the engine to add back exactly as HF does. The norm
//! vectors are a few KiB; the matrices stay in their blocks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::config::config;
use super::reader::{Gguf, MetaValue, Strings, TensorInfo};
use crate::kernels::tensor::Backing;
use crate::kernels::Weight;
use crate::model::files::{CheckpointFiles, OpenFile};
use crate::model::tensors::{LayerWeights, LAYER_TENSORS};
use crate::model::weights::{map_file, Checkpoint, WeightsError};

/// The embedding, shared with the output head when the file has none.
const EMBED: &str = "token_embd.weight";
const OUTPUT: &str = "output.weight";
const OUTPUT_NORM: &str = "output_norm.weight";

/// Load the GGUF file `name` of `source`.
pub(crate) fn load(mut source: CheckpointFiles, name: &str) -> Result<Checkpoint, WeightsError> {
    let open: Arc<OpenFile> = source.open(name)?;
    let path = open.path.clone();
    let map = map_file(&open)?;
    let mut gguf = Gguf::parse(&path, map.bytes())?;
    let mut tensors: BTreeMap<String, TensorInfo> = std::mem::take(&mut gguf.tensors)
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    let embed_info = tensors.get(EMBED).ok_or_else(|| WeightsError::Missing {
        dir: path.clone(),
        name: EMBED.into(),
    })?;
    let vocab = embed_info.shape().first().copied().unwrap_or(0);
    let tied = !tensors.contains_key(OUTPUT);
    let config = config(&path, &gguf, vocab, tied)?;
    let mut files = Tensors {
        path: &path,
        map: &map,
        tensors: &mut tensors,
    };
    let c = &config;
    let embed = files.matrix(EMBED, &[c.vocab_size, c.hidden_size])?;
    let dims = c.dims();
    let mut layers = Vec::with_capacity(c.num_layers());
    for i in 0..c.num_layers() {
        let weights = LAYER_TENSORS
            .iter()
            .map(|t| {
                let name = format!("blk.{i}.{}", t.gguf_suffix);
                let shape = t.shape(&dims);
                if t.is_projection() {
                    files.matrix(&name, &shape)
                } else {
                    files.norm(&name, &shape)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        // One weight per row of the table, so this is always `Some`.
        layers.push(
            LayerWeights::new(weights).ok_or_else(|| WeightsError::Missing {
                dir: path.clone(),
                name: format!("blk.{i}.*"),
            })?,
        );
    }
    let norm = files.norm(OUTPUT_NORM, &[c.hidden_size])?;
    let lm_head = if tied {
        embed.clone()
    } else {
        files.matrix(OUTPUT, &[c.vocab_size, c.hidden_size])?
    };
    if let Some(name) = tensors.keys().next() {
        return Err(WeightsError::Unexpected {
            path: path.clone(),
            name: name.clone(),
        });
    }
    let vocabulary = tokens(&path, gguf)?;
    Ok(Checkpoint::assemble(
        config, embed, layers, norm, lm_head, vocabulary, source,
    ))
}

struct Tensors<'a> {
    path: &'a Path,
    map: &'a Backing,
    tensors: &'a mut BTreeMap<String, TensorInfo>,
}

impl Tensors<'_> {
    /// Take `name`, checking its (row-major) shape.
    fn take(&mut self, name: &str, expected: &[usize]) -> Result<TensorInfo, WeightsError> {
        let info = self
            .tensors
            .remove(name)
            .ok_or_else(|| WeightsError::Missing {
                dir: self.path.to_owned(),
                name: name.to_owned(),
            })?;
        let found = info.shape();
        if found != expected {
            return Err(WeightsError::Shape {
                path: self.path.to_owned(),
                name: name.to_owned(),
                expected: expected.to_vec(),
                found,
            });
        }
        Ok(info)
    }

    /// A matrix, left in its blocks in the mapped file.
    fn matrix(&mut self, name: &str, shape: &[usize]) -> Result<Weight, WeightsError> {
        let info = self.take(name, shape)?;
        Weight::new(info.dtype, info.shape(), Arc::clone(self.map), info.bytes).map_err(|e| {
            WeightsError::Corrupt {
                path: self.path.to_owned(),
                detail: format!("tensor `{name}`: {e}"),
            }
        })
    }

    /// A norm vector in HF's form: decoded to f32 and the 1 llama.cpp added taken off.
    fn norm(&mut self, name: &str, shape: &[usize]) -> Result<Weight, WeightsError> {
        let stored = self.matrix(name, shape)?;
        let mut values = vec![0.0f32; stored.numel()];
        stored.read_f32(0, &mut values);
        for v in &mut values {
            *v -= 1.0;
        }
        Weight::from_f32(shape.to_vec(), &values).map_err(|e| WeightsError::Corrupt {
            path: self.path.to_owned(),
            detail: format!("tensor `{name}`: {e}"),
        })
    }
}

/// The file's vocabulary, `tokenizer.ggml.tokens`, when it has one, moved out of the parsed
/// metadata (262144 strings for Gemma, in one text: not copied).
fn tokens(path: &Path, mut gguf: Gguf) -> Result<Option<Strings>, WeightsError> {
    let Some(value) = gguf.metadata.remove("tokenizer.ggml.tokens") else {
        return Ok(None);
    };
    let bad = || WeightsError::Corrupt {
        path: PathBuf::from(path),
        detail: "metadata `tokenizer.ggml.tokens` must be an array of strings".into(),
    };
    match value {
        MetaValue::Array(items) => items.into_strings().map(Some).ok_or_else(bad),
        _ => Err(bad()),
    }
}
