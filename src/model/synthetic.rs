//! Deterministic random-weight Gemma 3 checkpoints, written in the Hugging Face layout.
//!
//! The demo and the tests need a model without downloading one. The weights are drawn from a
//! fixed-seed generator, scaled so that a forward pass gives non-degenerate logits, and written
//! as bf16 safetensors beside a `config.json` in the `Gemma3ForCausalLM` form.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::json;

use super::tensors::{Dims, LAYER_TENSORS};

/// The shape of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// Sliding window of local layers.
    pub sliding_window: usize,
    /// Every `pattern`-th layer is global.
    pub sliding_window_pattern: usize,
    /// `query_pre_attn_scalar`.
    pub query_pre_attn_scalar: f32,
    /// Linear rope scaling of global layers (1.0 = none).
    pub rope_linear_factor: f32,
}

impl SyntheticSpec {
    /// A very small model: fast enough for unit tests and the demo.
    pub fn tiny() -> SyntheticSpec {
        SyntheticSpec {
            vocab_size: 256,
            hidden_size: 64,
            intermediate_size: 128,
            num_layers: 6,
            num_heads: 4,
            num_kv_heads: 1,
            head_dim: 16,
            sliding_window: 8,
            sliding_window_pattern: 6,
            query_pre_attn_scalar: 16.0,
            rope_linear_factor: 1.0,
        }
    }

    /// The `config.json` HF would write for this model.
    pub fn config_json(&self) -> serde_json::Value {
        let layer_types: Vec<&str> = (0..self.num_layers)
            .map(|i| {
                if (i + 1) % self.sliding_window_pattern == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        let rope_scaling = if self.rope_linear_factor == 1.0 {
            serde_json::Value::Null
        } else {
            json!({"rope_type": "linear", "factor": self.rope_linear_factor})
        };
        json!({
            "architectures": ["Gemma3ForCausalLM"],
            "model_type": "gemma3_text",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "rope_scaling": rope_scaling,
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
            "sliding_window": self.sliding_window,
            "layer_types": layer_types,
            "final_logit_softcapping": null,
            "attn_logit_softcapping": null,
            "attention_bias": false,
            "tie_word_embeddings": true,
            "bos_token_id": 2,
            "eos_token_id": [1, 106],
            "pad_token_id": 0,
            "torch_dtype": "bfloat16"
        })
    }

    /// Tensor names and shapes, in a fixed order, under the `model.` prefix.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let dims = Dims {
            hidden: self.hidden_size,
            head_dim: self.head_dim,
            heads: self.num_heads,
            kv_heads: self.num_kv_heads,
            intermediate: self.intermediate_size,
        };
        let mut out = vec![(
            "model.embed_tokens.weight".to_owned(),
            vec![self.vocab_size, self.hidden_size],
        )];
        for l in 0..self.num_layers {
            for t in &LAYER_TENSORS {
                out.push((format!("model.layers.{l}.{}", t.hf_suffix), t.shape(&dims)));
            }
        }
        out.push(("model.norm.weight".to_owned(), vec![self.hidden_size]));
        out
    }

    /// Write `config.json` and `model.safetensors` (bf16) into `dir`.
    pub fn write(&self, dir: &Path, seed: u64) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let config =
            serde_json::to_vec_pretty(&self.config_json()).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("config.json"), config)?;
        let mut rng = SplitMix64(seed);
        let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = self
            .tensor_shapes()
            .into_iter()
            .map(|(name, shape)| {
                let n: usize = shape.iter().product();
                // Norm weights are stored as offsets from 1 (Gemma multiplies by 1 + w); random
                // ones keep the model from being the identity. Matrices get std ~ 1/sqrt(fan_in)
                // so activations neither vanish nor explode through the layers.
                let std = if shape.len() == 1 {
                    0.5
                } else if name.contains("embed_tokens") {
                    // Small, so the layers and not the tied embedding decide the next token
                    // (a strong embedding makes a random model echo its last token).
                    0.05
                } else {
                    1.0 / (shape[1] as f32).sqrt()
                };
                let bytes = (0..n)
                    .flat_map(|_| half::bf16::from_f32(rng.normal() * std).to_le_bytes())
                    .collect();
                (name, shape, bytes)
            })
            .collect();
        let views: BTreeMap<String, TensorView<'_>> = tensors
            .iter()
            .map(|(name, shape, bytes)| {
                let view = TensorView::new(Dtype::BF16, shape.clone(), bytes)
                    .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
                Ok((name.clone(), view))
            })
            .collect::<std::io::Result<_>>()?;
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_owned(), "pt".to_owned());
        safetensors::serialize_to_file(&views, &Some(meta), &dir.join("model.safetensors"))
            .map_err(|e| std::io::Error::other(format!("{e:?}")))
    }
}

/// A tiny deterministic generator (SplitMix64), so fixtures need no RNG dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }
    /// Standard normal by Box-Muller.
    fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }
}
