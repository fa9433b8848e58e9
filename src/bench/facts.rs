//! What a report needs to know about the checkpoint: weight bytes, parameters, the bytes a
//! decode step reads, flops per token.

use serde::Serialize;

use crate::model::tensors::LayerWeights;
use crate::model::weights::Checkpoint;

/// What the report needs to know about the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFacts {
    /// Bytes of the weights the model uses, as stored.
    pub weight_bytes: u64,
    /// Storage dtype of the projection weights.
    pub weight_dtype: String,
    /// Parameters the model uses (the tied head counted once).
    pub params: u64,
    /// Parameters of every layer's projections: the multiply-adds per token per step.
    pub layer_linear_params: u64,
    /// Parameters of the output head: multiply-adds per sequence per step.
    pub head_params: u64,
    /// Bytes of weights a decode step reads at batch 2 and above: everything but the embedding
    /// table (a step reads only its rows), with the output head at full width.
    pub step_bytes: u64,
    /// The same at batch 1, where the output head is read through its 8-bit screen when it has
    /// one (`kernels::argmax_screen_bytes`).
    pub step_bytes_batch1: u64,
    /// Decoder layers.
    pub layers: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

impl ModelFacts {
    /// The facts of a loaded checkpoint.
    pub fn of(ck: &Checkpoint) -> ModelFacts {
        let n = |w: &crate::kernels::Weight| w.numel() as u64;
        let mut layer_linear = 0;
        let mut small = 0;
        for (spec, w) in ck.layers.iter().flat_map(LayerWeights::iter) {
            if spec.is_projection() {
                layer_linear += n(w);
            } else {
                small += n(w);
            }
        }
        let head = n(&ck.lm_head);
        let mut params = layer_linear + small + n(&ck.embed) + n(&ck.norm);
        if !ck.config.tie_word_embeddings {
            params += head;
        }
        // Every projection dtype, in the order first seen: a GGUF file mixes block formats.
        let mut dtypes = Vec::new();
        for (_, w) in ck.layers.iter().flat_map(|l| l.iter()) {
            if w.shape().len() == 2 && !dtypes.contains(&w.dtype()) {
                dtypes.push(w.dtype());
            }
        }
        if dtypes.is_empty() {
            dtypes.push(ck.embed.dtype());
        }
        let weight_dtype = dtypes
            .iter()
            .map(|d| format!("{d:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join("+");
        let head_bytes = ck.lm_head.bytes().len() as u64;
        // Tied, the head's bytes are the embedding's and `weight_bytes` counts them once.
        let untied_embed = if ck.config.tie_word_embeddings {
            0
        } else {
            ck.embed.bytes().len() as u64
        };
        let step_bytes = ck.weight_bytes - untied_embed;
        let step_bytes_batch1 = crate::kernels::argmax_screen_bytes(&ck.lm_head)
            .map_or(step_bytes, |screen| step_bytes - head_bytes + screen);
        ModelFacts {
            weight_bytes: ck.weight_bytes,
            weight_dtype,
            params,
            layer_linear_params: layer_linear,
            head_params: head,
            step_bytes,
            step_bytes_batch1,
            layers: ck.layers.len(),
            vocab_size: ck.config.vocab_size,
        }
    }
}
