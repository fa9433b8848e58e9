//! The `model` record an engine receives: a checkpoint's weights as shared views, the scalars
//! read from its config, and one record per layer with that layer's rope parameters and a fresh
//! KV cache (sliding-window or global, per the config's layer kinds).
//!
//! The layers are reachable two ways: as the stack `layers` (what `scan` reads) and as named
//! fields `layer_0`, `layer_1`, ... (the same shared values, so the same weights and the same
//! KV caches), because the language has no indexing and an engine that writes its layers out
//! one by one (engines/gemma3_unrolled.eng) must still be able to name each layer.
//!
//! Scalars that HF derives from the config are derived here the way HF's f32 run derives them:
//! `embed_scale = sqrt(hidden_size)` in f32 (HF casts it to the compute dtype, which is f32 for
//! us), `attn_scale = query_pre_attn_scalar ^ -0.5`.

use crate::kernels::attention::KvCache;
use crate::kernels::KernelError;
use crate::model::config::LayerKind;
use crate::model::weights::Checkpoint;
use crate::restrict::{Record, Value};

/// Build the `model` value for a batch of `batch` sequences whose prompt plus generation is at
/// most `max_len` tokens (the capacity of the global layers' caches).
pub fn model_record(ck: &Checkpoint, batch: usize, max_len: usize) -> Result<Value, KernelError> {
    let c = &ck.config;
    let eps = f64::from(c.rms_norm_eps);
    let attn_scale = f64::from(c.query_pre_attn_scalar).powf(-0.5);
    let mut layers = Vec::with_capacity(ck.layers.len());
    for (w, &kind) in ck.layers.iter().zip(&c.layer_kinds) {
        let rope = c.rope(kind);
        let cache = match kind {
            LayerKind::Sliding => {
                KvCache::sliding(batch, c.num_kv_heads, c.head_dim, c.sliding_window)?
            }
            LayerKind::Full => KvCache::global(batch, c.num_kv_heads, c.head_dim, max_len.max(1))?,
        };
        let mut record = Record::new();
        for (spec, weight) in w.iter() {
            record = record.with(spec.field, Value::Weight(weight.clone()));
        }
        layers.push(Value::record(
            record
                .with("eps", Value::Scalar(eps))
                .with("n_heads", Value::Scalar(c.num_heads as f64))
                .with("n_kv_heads", Value::Scalar(c.num_kv_heads as f64))
                .with("rope_theta", Value::Scalar(f64::from(rope.theta)))
                .with("rope_scale", Value::Scalar(f64::from(rope.linear_factor)))
                .with("attn_scale", Value::Scalar(attn_scale))
                .with("cache", Value::kv_cache(cache)),
        ));
    }
    let mut record = Record::new()
        .with("embed_tokens", Value::Weight(ck.embed.clone()))
        .with("lm_head", Value::Weight(ck.lm_head.clone()))
        .with("norm", Value::Weight(ck.norm.clone()))
        .with(
            "embed_scale",
            Value::Scalar(f64::from((c.hidden_size as f32).sqrt())),
        )
        .with("eps", Value::Scalar(eps))
        .with("batch", Value::Scalar(batch as f64));
    for (i, layer) in layers.iter().enumerate() {
        record = record.with(format!("layer_{i}"), layer.clone());
    }
    Ok(Value::record(record.with("layers", Value::stack(layers))))
}

/// The columns each layer's KV cache has taken so far, in layer order (`model.layers[i].cache`
/// of a record built by [`model_record`]); empty for any other value.
pub fn layer_columns(model: &Value) -> Vec<usize> {
    let Value::Record(record) = model else {
        return Vec::new();
    };
    let Some(Value::Stack(layers)) = record.get("layers") else {
        return Vec::new();
    };
    layers
        .iter()
        .filter_map(|layer| match layer {
            Value::Record(r) => match r.get("cache") {
                Some(Value::State(state)) => state.lock().as_kv().map(KvCache::len),
                _ => None,
            },
            _ => None,
        })
        .collect()
}
