//! `config.json` of a Gemma 3 checkpoint, read the way HF transformers reads it.
//!
//! Both the text-only form (`Gemma3ForCausalLM`, `model_type = "gemma3_text"`) and the
//! multimodal form (`model_type = "gemma3"` with a `text_config` object) are accepted. Missing
//! fields take the defaults of HF's `Gemma3TextConfig`, because that is what HF would run. Fields
//! that change the numerics in ways this runner does not implement (logit soft-capping, attention
//! biases, an activation other than tanh-approximated GELU, rope types other than default and
//! linear) are refused by name rather than ignored.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::tensors::Dims;
use crate::error::{Diagnose, Exit};
use crate::primitives::canonical::parse_strict;

/// Whether a layer attends to everything before it or to a sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// `sliding_attention`: local layer, sees `sliding_window` keys including itself.
    Sliding,
    /// `full_attention`: global layer.
    Full,
}

/// Rotary embedding parameters of one layer kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// Base period.
    pub theta: f32,
    /// Linear scaling factor (positions divided by it); 1.0 for none.
    pub linear_factor: f32,
}

/// The validated text-model configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// Attention scores are scaled by `query_pre_attn_scalar ^ -0.5`.
    pub query_pre_attn_scalar: f32,
    /// Keys a sliding layer's query sees, including itself.
    pub sliding_window: usize,
    /// Kind of every layer, in order.
    pub layer_kinds: Vec<LayerKind>,
    /// Rope of sliding layers.
    pub rope_sliding: Rope,
    /// Rope of full-attention layers.
    pub rope_full: Rope,
    /// Whether the output projection reuses the embedding.
    pub tie_word_embeddings: bool,
    /// Longest position the model was configured for.
    pub max_position_embeddings: usize,
    /// Token id of beginning-of-sequence.
    pub bos_token_id: u32,
    /// Token id used for padding.
    pub pad_token_id: u32,
    /// Token ids that end a sequence (from generation_config.json when present).
    pub eos_token_ids: Vec<u32>,
}

/// Why a checkpoint's configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not JSON, or a duplicate key.
    #[error("{path} is not valid JSON: {detail}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Parser message with line and column.
        detail: String,
    },
    /// A field has the wrong type or an impossible value.
    #[error("{path}: field `{field}` {problem}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A field asks for something this runner does not implement.
    #[error("{path}: field `{field}` = {value} is not supported: {why}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// Its value.
        value: String,
        /// What this runner supports instead.
        why: String,
    },
}

impl Diagnose for ModelConfigError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ModelConfigError::Read { .. } => {
                "point --model at a Hugging Face checkpoint directory containing config.json".into()
            }
            ModelConfigError::Json { .. } | ModelConfigError::Field { .. } => {
                "fix the field so it matches the checkpoint (HF Gemma3TextConfig)".into()
            }
            ModelConfigError::Unsupported { .. } => {
                "this runner implements Gemma 3 text models as HF transformers runs them".into()
            }
        })
    }
}

/// HF `Gemma3TextConfig` defaults, used for fields a config leaves out.
mod defaults {
    pub const VOCAB: u64 = 262_208;
    pub const HIDDEN: u64 = 2304;
    pub const INTERMEDIATE: u64 = 9216;
    pub const LAYERS: u64 = 26;
    pub const HEADS: u64 = 8;
    pub const KV_HEADS: u64 = 4;
    pub const HEAD_DIM: u64 = 256;
    pub const EPS: f64 = 1e-6;
    pub const ROPE_THETA: f64 = 1_000_000.0;
    pub const ROPE_LOCAL: f64 = 10_000.0;
    pub const QPAS: f64 = 256.0;
    pub const WINDOW: u64 = 4096;
    pub const PATTERN: u64 = 6;
    pub const MAX_POS: u64 = 131_072;
    pub const BOS: u64 = 2;
    pub const PAD: u64 = 0;
    pub const EOS: &[u32] = &[1, 106];
}

/// The configuration's file name.
pub const CONFIG_FILE: &str = "config.json";
/// The generation defaults' file name (optional).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// Upper bounds that keep arithmetic on sizes far from overflow.
const MAX_DIM: u64 = 1 << 20;
const MAX_LAYERS: u64 = 4096;

struct Fields<'a> {
    path: &'a Path,
    map: &'a Map<String, Value>,
    prefix: &'a str,
}

impl Fields<'_> {
    fn name(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }
    fn bad(&self, field: &str, problem: impl Into<String>) -> ModelConfigError {
        ModelConfigError::Field {
            path: self.path.to_owned(),
            field: self.name(field),
            problem: problem.into(),
        }
    }
    fn unsupported(&self, field: &str, value: &Value, why: &str) -> ModelConfigError {
        ModelConfigError::Unsupported {
            path: self.path.to_owned(),
            field: self.name(field),
            value: value.to_string(),
            why: why.into(),
        }
    }
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }
    fn uint(&self, field: &str, default: u64, min: u64, max: u64) -> Result<u64, ModelConfigError> {
        let Some(v) = self.get(field) else {
            return Ok(default);
        };
        let n = v
            .as_u64()
            .ok_or_else(|| self.bad(field, format!("must be a non-negative integer, found {v}")))?;
        if n < min || n > max {
            return Err(self.bad(field, format!("is {n}, must be between {min} and {max}")));
        }
        Ok(n)
    }
    fn float(&self, field: &str, default: f64) -> Result<f64, ModelConfigError> {
        let Some(v) = self.get(field) else {
            return Ok(default);
        };
        let f = v
            .as_f64()
            .ok_or_else(|| self.bad(field, format!("must be a number, found {v}")))?;
        if !(f.is_finite() && f > 0.0) {
            return Err(self.bad(
                field,
                format!("must be a positive finite number, found {v}"),
            ));
        }
        Ok(f)
    }
    fn must_be_absent_or(
        &self,
        field: &str,
        ok: &[Value],
        why: &str,
    ) -> Result<(), ModelConfigError> {
        match self.get(field) {
            Some(v) if !ok.contains(v) => Err(self.unsupported(field, v, why)),
            _ => Ok(()),
        }
    }
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Rope parameters from one `rope_scaling`/`rope_parameters` object.
fn rope_from(
    f: &Fields<'_>,
    field: &str,
    obj: Option<&Value>,
    theta: f64,
) -> Result<Rope, ModelConfigError> {
    let mut rope = Rope {
        theta: theta as f32,
        linear_factor: 1.0,
    };
    let Some(obj) = obj.filter(|v| !v.is_null()) else {
        return Ok(rope);
    };
    let Some(map) = obj.as_object() else {
        return Err(f.bad(field, format!("must be an object, found {obj}")));
    };
    if let Some(t) = map.get("rope_theta").filter(|v| !v.is_null()) {
        let t = t
            .as_f64()
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or_else(|| f.bad(&format!("{field}.rope_theta"), "must be a positive number"))?;
        rope.theta = t as f32;
    }
    let kind = map
        .get("rope_type")
        .or_else(|| map.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    match kind {
        "default" => {}
        "linear" => {
            let factor = map
                .get("factor")
                .and_then(Value::as_f64)
                .filter(|x| x.is_finite() && *x >= 1.0)
                .ok_or_else(|| {
                    f.bad(
                        &format!("{field}.factor"),
                        "linear rope needs a factor >= 1.0",
                    )
                })?;
            rope.linear_factor = factor as f32;
        }
        other => {
            return Err(f.unsupported(
                &format!("{field}.rope_type"),
                &Value::String(other.into()),
                "only \"default\" and \"linear\" rope are implemented",
            ))
        }
    }
    Ok(rope)
}

impl ModelConfig {
    /// Read `DIR/config.json` and, when present, `DIR/generation_config.json`.
    pub fn load(dir: &Path) -> Result<ModelConfig, ModelConfigError> {
        ModelConfig::load_with(dir, |name| {
            let path = dir.join(name);
            if !path.exists() {
                return Ok(None);
            }
            std::fs::read(&path)
                .map(Some)
                .map_err(|source| ModelConfigError::Read { path, source })
        })
    }

    /// [`ModelConfig::load`] through `read`: a file name of `dir` to its bytes, `None` when the
    /// checkpoint has no such file (by path, or from the files a model digest hashed).
    pub fn load_with<E: From<ModelConfigError>>(
        dir: &Path,
        mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<ModelConfig, E> {
        let path = dir.join(CONFIG_FILE);
        let bytes = read(CONFIG_FILE)?.ok_or_else(|| ModelConfigError::Read {
            path: path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        })?;
        let generation = read(GENERATION_CONFIG_FILE)?;
        let mut config = ModelConfig::from_value(&path, &parse_json(&path, &bytes)?)?;
        if let Some(bytes) = generation {
            let gen_path = dir.join(GENERATION_CONFIG_FILE);
            let generation = parse_json(&gen_path, &bytes)?;
            if let Some(eos) = eos_ids(&gen_path, generation.get("eos_token_id"))? {
                config.eos_token_ids = eos;
            }
        }
        Ok(config)
    }

    /// Interpret a parsed `config.json`; `path` names it in errors.
    pub fn from_value(path: &Path, value: &Value) -> Result<ModelConfig, ModelConfigError> {
        let top = value.as_object().ok_or_else(|| ModelConfigError::Field {
            path: path.to_owned(),
            field: "(top level)".into(),
            problem: "must be a JSON object".into(),
        })?;
        let (map, prefix) = match top.get("text_config") {
            Some(Value::Object(text)) => (text, "text_config."),
            Some(other) if !other.is_null() => {
                return Err(ModelConfigError::Field {
                    path: path.to_owned(),
                    field: "text_config".into(),
                    problem: format!("must be an object, found {other}"),
                })
            }
            _ => (top, ""),
        };
        let f = Fields { path, map, prefix };
        let top_fields = Fields {
            path,
            map: top,
            prefix: "",
        };

        if let Some(mt) = f.get("model_type") {
            if !matches!(mt.as_str(), Some("gemma3_text" | "gemma3")) {
                return Err(f.unsupported(
                    "model_type",
                    mt,
                    "expected \"gemma3_text\" or \"gemma3\"",
                ));
            }
        }
        for field in ["final_logit_softcapping", "attn_logit_softcapping"] {
            f.must_be_absent_or(field, &[], "Gemma 3 uses no soft-capping")?;
        }
        f.must_be_absent_or(
            "attention_bias",
            &[Value::Bool(false)],
            "Gemma 3 has no biases",
        )?;
        f.must_be_absent_or(
            "use_bidirectional_attention",
            &[Value::Bool(false)],
            "only causal attention is implemented",
        )?;
        for field in ["hidden_activation", "hidden_act"] {
            f.must_be_absent_or(
                field,
                &[Value::String("gelu_pytorch_tanh".into())],
                "only gelu_pytorch_tanh is implemented",
            )?;
        }

        let vocab_size = f.uint("vocab_size", defaults::VOCAB, 1, 1 << 24)?;
        let hidden_size = f.uint("hidden_size", defaults::HIDDEN, 1, MAX_DIM)?;
        let intermediate_size = f.uint("intermediate_size", defaults::INTERMEDIATE, 1, MAX_DIM)?;
        let num_layers = f.uint("num_hidden_layers", defaults::LAYERS, 1, MAX_LAYERS)?;
        let num_heads = f.uint("num_attention_heads", defaults::HEADS, 1, 4096)?;
        let num_kv_heads = f.uint("num_key_value_heads", defaults::KV_HEADS, 1, 4096)?;
        if num_heads % num_kv_heads != 0 {
            return Err(f.bad(
                "num_key_value_heads",
                format!(
                    "is {num_kv_heads}, which does not divide num_attention_heads = {num_heads}"
                ),
            ));
        }
        let head_dim = f.uint("head_dim", defaults::HEAD_DIM, 2, MAX_DIM)?;
        if head_dim % 2 != 0 {
            return Err(f.bad(
                "head_dim",
                format!("is {head_dim}; rotary embedding needs it even"),
            ));
        }
        let rms_norm_eps = f.float("rms_norm_eps", defaults::EPS)?;
        let qpas = f.float("query_pre_attn_scalar", defaults::QPAS)?;
        let sliding_window = f.uint("sliding_window", defaults::WINDOW, 1, 1 << 30)?;
        let max_pos = f.uint("max_position_embeddings", defaults::MAX_POS, 1, 1 << 30)?;

        let layer_kinds = match f.get("layer_types") {
            Some(v) => {
                let list = v
                    .as_array()
                    .ok_or_else(|| f.bad("layer_types", "must be a list of strings"))?;
                if list.len() as u64 != num_layers {
                    return Err(f.bad(
                        "layer_types",
                        format!(
                            "has {} entries but num_hidden_layers is {num_layers}",
                            list.len()
                        ),
                    ));
                }
                list.iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_str() {
                        Some("sliding_attention") => Ok(LayerKind::Sliding),
                        Some("full_attention") => Ok(LayerKind::Full),
                        _ => Err(f.unsupported(
                            &format!("layer_types[{i}]"),
                            t,
                            "expected \"sliding_attention\" or \"full_attention\"",
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => {
                let pattern = f.uint("sliding_window_pattern", defaults::PATTERN, 1, MAX_LAYERS)?;
                (0..num_layers)
                    .map(|i| {
                        if (i + 1) % pattern == 0 {
                            LayerKind::Full
                        } else {
                            LayerKind::Sliding
                        }
                    })
                    .collect()
            }
        };

        let rope_theta = f.float("rope_theta", defaults::ROPE_THETA)?;
        let rope_local = f.float("rope_local_base_freq", defaults::ROPE_LOCAL)?;
        let (rope_sliding, rope_full) = match f.get("rope_parameters") {
            Some(Value::Object(rp))
                if rp.contains_key("full_attention") || rp.contains_key("sliding_attention") =>
            {
                let sliding = rope_from(
                    &f,
                    "rope_parameters.sliding_attention",
                    rp.get("sliding_attention"),
                    rope_local,
                )?;
                let full = rope_from(
                    &f,
                    "rope_parameters.full_attention",
                    rp.get("full_attention"),
                    rope_theta,
                )?;
                (sliding, full)
            }
            Some(rp) => {
                let full = rope_from(&f, "rope_parameters", Some(rp), rope_theta)?;
                (rope_from(&f, "rope_parameters", None, rope_local)?, full)
            }
            None => {
                let full = rope_from(&f, "rope_scaling", f.get("rope_scaling"), rope_theta)?;
                (rope_from(&f, "rope_scaling", None, rope_local)?, full)
            }
        };

        let tie = match f
            .get("tie_word_embeddings")
            .or_else(|| top_fields.get("tie_word_embeddings"))
        {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(f.bad(
                    "tie_word_embeddings",
                    format!("must be true or false, found {v}"),
                ))
            }
        };
        let bos = f.uint("bos_token_id", defaults::BOS, 0, vocab_size - 1)?;
        let pad = f.uint("pad_token_id", defaults::PAD, 0, vocab_size - 1)?;
        let eos = eos_ids(path, f.get("eos_token_id"))?.unwrap_or_else(|| defaults::EOS.to_vec());

        Ok(ModelConfig {
            vocab_size: usize_of(vocab_size),
            hidden_size: usize_of(hidden_size),
            intermediate_size: usize_of(intermediate_size),
            num_heads: usize_of(num_heads),
            num_kv_heads: usize_of(num_kv_heads),
            head_dim: usize_of(head_dim),
            rms_norm_eps: rms_norm_eps as f32,
            query_pre_attn_scalar: qpas as f32,
            sliding_window: usize_of(sliding_window),
            layer_kinds,
            rope_sliding,
            rope_full,
            tie_word_embeddings: tie,
            max_position_embeddings: usize_of(max_pos),
            bos_token_id: bos as u32,
            pad_token_id: pad as u32,
            eos_token_ids: eos,
        })
    }

    /// The sizes the per-layer tensor shapes are made of.
    pub fn dims(&self) -> Dims {
        Dims {
            hidden: self.hidden_size,
            head_dim: self.head_dim,
            heads: self.num_heads,
            kv_heads: self.num_kv_heads,
            intermediate: self.intermediate_size,
        }
    }

    /// Number of decoder layers.
    pub fn num_layers(&self) -> usize {
        self.layer_kinds.len()
    }

    /// Rope of layer `i`.
    pub fn rope(&self, kind: LayerKind) -> Rope {
        match kind {
            LayerKind::Sliding => self.rope_sliding,
            LayerKind::Full => self.rope_full,
        }
    }
}

fn parse_json(path: &Path, bytes: &[u8]) -> Result<Value, ModelConfigError> {
    parse_strict(bytes).map_err(|e| ModelConfigError::Json {
        path: path.to_owned(),
        detail: e.to_string(),
    })
}

fn eos_ids(path: &Path, v: Option<&Value>) -> Result<Option<Vec<u32>>, ModelConfigError> {
    let bad = || ModelConfigError::Field {
        path: path.to_owned(),
        field: "eos_token_id".into(),
        problem: "must be a token id or a list of token ids".into(),
    };
    let as_id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(list)) => list
            .iter()
            .map(|x| as_id(x).ok_or_else(bad))
            .collect::<Result<_, _>>()
            .map(Some),
        Some(x) => as_id(x).map(|id| Some(vec![id])).ok_or_else(bad),
    }
}
