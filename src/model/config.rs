//! `config.json` of a Gemma 3 checkpoint, read the way HF transformers reads it.
//!
//! Both the text-only form (`Gemma3ForCausalLM`, `model_type = "gemma3_text"`) and the
//! multimodal form (`model_type = "gemma3"` with a `text_config` object) are accepted. Missing
//! fields take the defaults of HF's `Gemma3TextConfig`, because that is what HF would run. Fields
//! that change the numerics in ways this runner does not implement (logit soft-capping, attention
//! biases, an activation other than tanh-approximated GELU, rope types other than default and
//! linear) are refused by name rather than ignored.
//!
//! The JSON is first read into raw structs that mirror the file and accept any value in any
//! field, then `validate` turns them into a [`ModelConfig`]: so every wrong type or value is
//! reported in this module's words, naming the field, and never in serde's.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Number, Value};

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

/// The configuration's file name.
pub const CONFIG_FILE: &str = "config.json";
/// The generation defaults' file name (optional).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

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
            let generation: Option<RawGeneration> = object(&parse_json(&gen_path, &bytes)?);
            if let Some(eos) = eos_ids(&gen_path, generation.and_then(|g| g.eos_token_id))? {
                config.eos_token_ids = eos;
            }
        }
        Ok(config)
    }

    /// Interpret a parsed `config.json`; `path` names it in errors.
    pub fn from_value(path: &Path, value: &Value) -> Result<ModelConfig, ModelConfigError> {
        let top = Check { path, prefix: "" };
        let RawConfig { text_config, outer } =
            object(value).ok_or_else(|| top.bad("(top level)", "must be a JSON object"))?;
        match top.nested("text_config", text_config)? {
            Some(mut text) => {
                // HF reads it from the wrapper when the text config leaves it out.
                text.tie_word_embeddings = text.tie_word_embeddings.or(outer.tie_word_embeddings);
                text.validate(&Check {
                    path,
                    prefix: "text_config.",
                })
            }
            None => outer.validate(&top),
        }
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

/// config.json's top level: the text model's fields, or a multimodal wrapper holding them in
/// `text_config`.
#[derive(Deserialize)]
struct RawConfig {
    text_config: Option<Object<RawText>>,
    #[serde(flatten)]
    outer: RawText,
}

/// The fields of HF's `Gemma3TextConfig` this runner reads; HF configs carry many more, ignored.
#[derive(Deserialize)]
struct RawText {
    // Compared as written with the one value this runner implements.
    model_type: Option<Value>,
    final_logit_softcapping: Option<Value>,
    attn_logit_softcapping: Option<Value>,
    attention_bias: Option<Value>,
    use_bidirectional_attention: Option<Value>,
    hidden_activation: Option<Value>,
    hidden_act: Option<Value>,

    vocab_size: Option<Loose<u64>>,
    hidden_size: Option<Loose<u64>>,
    intermediate_size: Option<Loose<u64>>,
    num_hidden_layers: Option<Loose<u64>>,
    num_attention_heads: Option<Loose<u64>>,
    num_key_value_heads: Option<Loose<u64>>,
    head_dim: Option<Loose<u64>>,
    sliding_window: Option<Loose<u64>>,
    max_position_embeddings: Option<Loose<u64>>,
    bos_token_id: Option<Loose<u64>>,
    pad_token_id: Option<Loose<u64>>,
    eos_token_id: Option<Loose<TokenIds>>,
    tie_word_embeddings: Option<Loose<bool>>,

    // `Number`, not `f64`, so that an error quotes the value as written (`0`, not `0.0`).
    rms_norm_eps: Option<Loose<Number>>,
    query_pre_attn_scalar: Option<Loose<Number>>,
    rope_theta: Option<Loose<Number>>,
    rope_local_base_freq: Option<Loose<Number>>,

    layer_types: Option<Loose<Vec<Value>>>,
    /// Older configs' form of `layer_types`.
    sliding_window_pattern: Option<Loose<u64>>,
    /// Newer configs' form of `rope_scaling`.
    rope_parameters: Option<Object<RawRopeParameters>>,
    rope_scaling: Option<Object<RawRope>>,
}

/// `rope_parameters`: one rope for every layer, or one per layer type.
#[derive(Deserialize)]
struct RawRopeParameters {
    // The key alone, even with a null value, selects the per-type form.
    #[serde(default, deserialize_with = "present")]
    sliding_attention: Option<Option<Object<RawRope>>>,
    #[serde(default, deserialize_with = "present")]
    full_attention: Option<Option<Object<RawRope>>>,
    #[serde(flatten)]
    all: RawRope,
}

/// One rope: `rope_scaling`, `rope_parameters`, or one of its per-type entries.
#[derive(Deserialize)]
struct RawRope {
    // As HF's `get("rope_type", get("type"))`: a `rope_type` key, even null, hides `type`.
    #[serde(default, deserialize_with = "present")]
    rope_type: Option<Value>,
    #[serde(rename = "type")]
    legacy_type: Option<Value>,
    rope_theta: Option<Loose<f64>>,
    factor: Option<Loose<f64>>,
}

/// generation_config.json: only the stop tokens are read.
#[derive(Deserialize)]
struct RawGeneration {
    eos_token_id: Option<Loose<TokenIds>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

/// A field of type `T`, or the JSON found instead, which `validate` then reports by the field's
/// name. (A null field is `None` around it, as HF treats null as absent.)
struct Loose<T>(Result<T, Value>);

/// A JSON object read as `T`, or the JSON found instead. Not [`Loose`]: a derived struct would
/// also read an array, element by element, as its fields.
struct Object<T>(Result<T, Value>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let json = Value::deserialize(d)?;
        Ok(Loose(T::deserialize(&json).map_err(|_| json)))
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let json = Value::deserialize(d)?;
        Ok(Object(object(&json).ok_or(json)))
    }
}

/// `json` as `T` when it is an object; the raw structs take any fields, so that cannot fail.
fn object<T: DeserializeOwned>(json: &Value) -> Option<T> {
    json.is_object()
        .then(|| T::deserialize(json).ok())
        .flatten()
}

/// With `#[serde(default)]`: `Some` when the key is there, whatever its value, null included.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Upper bounds that keep arithmetic on sizes far from overflow.
const MAX_DIM: u64 = 1 << 20;
const MAX_LAYERS: u64 = 4096;

const NO_SOFTCAP: &str = "Gemma 3 uses no soft-capping";
const GELU_ONLY: &str = "only gelu_pytorch_tanh is implemented";

type Checked<T> = Result<T, ModelConfigError>;

/// A raw field with its name, so that an error names the field as config.json spells it.
macro_rules! field {
    ($raw:ident . $name:ident) => {
        (stringify!($name), $raw.$name)
    };
}
type Named<T> = (&'static str, Option<T>);

impl RawText {
    /// Of several problems, the first checked here is the one reported.
    fn validate(self, at: &Check<'_>) -> Checked<ModelConfig> {
        let gemma3 = [json!("gemma3_text"), json!("gemma3")];
        let off = [json!(false)];
        let gelu = [json!("gelu_pytorch_tanh")];
        let expected = "expected \"gemma3_text\" or \"gemma3\"";
        at.only(field!(self.model_type), &gemma3, expected)?;
        at.only(field!(self.final_logit_softcapping), &[], NO_SOFTCAP)?;
        at.only(field!(self.attn_logit_softcapping), &[], NO_SOFTCAP)?;
        at.only(field!(self.attention_bias), &off, "Gemma 3 has no biases")?;
        let causal = "only causal attention is implemented";
        at.only(field!(self.use_bidirectional_attention), &off, causal)?;
        at.only(field!(self.hidden_activation), &gelu, GELU_ONLY)?;
        at.only(field!(self.hidden_act), &gelu, GELU_ONLY)?;

        // The second argument is HF's default, for a field absent or null.
        let vocab_size = at.uint(field!(self.vocab_size), 262_208, 1, 1 << 24)?;
        let hidden_size = at.uint(field!(self.hidden_size), 2304, 1, MAX_DIM)?;
        let intermediate = at.uint(field!(self.intermediate_size), 9216, 1, MAX_DIM)?;
        let num_layers = at.uint(field!(self.num_hidden_layers), 26, 1, MAX_LAYERS)?;
        let num_heads = at.uint(field!(self.num_attention_heads), 8, 1, 4096)?;
        let num_kv_heads = at.uint(field!(self.num_key_value_heads), 4, 1, 4096)?;
        if num_heads % num_kv_heads != 0 {
            return Err(at.bad(
                "num_key_value_heads",
                format!(
                    "is {num_kv_heads}, which does not divide num_attention_heads = {num_heads}"
                ),
            ));
        }
        let head_dim = at.uint(field!(self.head_dim), 256, 2, MAX_DIM)?;
        if head_dim % 2 != 0 {
            let problem = format!("is {head_dim}; rotary embedding needs it even");
            return Err(at.bad("head_dim", problem));
        }
        let rms_norm_eps = at.float(field!(self.rms_norm_eps), 1e-6)?;
        let qpas = at.float(field!(self.query_pre_attn_scalar), 256.0)?;
        let sliding_window = at.uint(field!(self.sliding_window), 4096, 1, 1 << 30)?;
        let max_pos = at.uint(field!(self.max_position_embeddings), 131_072, 1, 1 << 30)?;

        let layer_kinds = match self.layer_types {
            Some(list) => at.layer_types(list, num_layers)?,
            None => {
                let every = at.uint(field!(self.sliding_window_pattern), 6, 1, MAX_LAYERS)?;
                (1..=num_layers)
                    .map(|i| match i % every {
                        0 => LayerKind::Full,
                        _ => LayerKind::Sliding,
                    })
                    .collect()
            }
        };

        let theta = at.float(field!(self.rope_theta), 1_000_000.0)?;
        let local = at.float(field!(self.rope_local_base_freq), 10_000.0)?;
        let (rope_sliding, rope_full) =
            at.ropes(self.rope_parameters, self.rope_scaling, local, theta)?;

        let tie_word_embeddings = match self.tie_word_embeddings.map(|t| t.0) {
            None => true,
            Some(Ok(tie)) => tie,
            Some(Err(v)) => {
                let problem = format!("must be true or false, found {v}");
                return Err(at.bad("tie_word_embeddings", problem));
            }
        };
        let bos = at.uint(field!(self.bos_token_id), 2, 0, vocab_size - 1)?;
        let pad = at.uint(field!(self.pad_token_id), 0, 0, vocab_size - 1)?;
        let eos = eos_ids(at.path, self.eos_token_id)?.unwrap_or_else(|| vec![1, 106]);

        Ok(ModelConfig {
            vocab_size: usize_of(vocab_size),
            hidden_size: usize_of(hidden_size),
            intermediate_size: usize_of(intermediate),
            num_heads: usize_of(num_heads),
            num_kv_heads: usize_of(num_kv_heads),
            head_dim: usize_of(head_dim),
            rms_norm_eps: rms_norm_eps as f32,
            query_pre_attn_scalar: qpas as f32,
            sliding_window: usize_of(sliding_window),
            layer_kinds,
            rope_sliding,
            rope_full,
            tie_word_embeddings,
            max_position_embeddings: usize_of(max_pos),
            bos_token_id: bos as u32,
            pad_token_id: pad as u32,
            eos_token_ids: eos,
        })
    }
}

/// Where a config's errors point: its file, and `text_config.` before fields read from there.
struct Check<'a> {
    path: &'a Path,
    prefix: &'a str,
}

impl Check<'_> {
    fn bad(&self, field: &str, problem: impl Into<String>) -> ModelConfigError {
        ModelConfigError::Field {
            path: self.path.to_owned(),
            field: format!("{}{field}", self.prefix),
            problem: problem.into(),
        }
    }

    fn unsupported(&self, field: &str, value: &Value, why: &str) -> ModelConfigError {
        ModelConfigError::Unsupported {
            path: self.path.to_owned(),
            field: format!("{}{field}", self.prefix),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// Absent, or one of `ok`.
    fn only(&self, (field, raw): Named<Value>, ok: &[Value], why: &str) -> Checked<()> {
        match raw {
            Some(v) if !ok.contains(&v) => Err(self.unsupported(field, &v, why)),
            _ => Ok(()),
        }
    }

    /// A default is not held to the bounds (`vocab_size` 1 keeps `bos_token_id` 2).
    fn uint(
        &self,
        (field, raw): Named<Loose<u64>>,
        default: u64,
        min: u64,
        max: u64,
    ) -> Checked<u64> {
        let n = match raw.map(|n| n.0) {
            None => return Ok(default),
            Some(Ok(n)) => n,
            Some(Err(v)) => {
                return Err(self.bad(field, format!("must be a non-negative integer, found {v}")))
            }
        };
        if n < min || n > max {
            return Err(self.bad(field, format!("is {n}, must be between {min} and {max}")));
        }
        Ok(n)
    }

    /// A positive finite number.
    fn float(&self, (field, raw): Named<Loose<Number>>, default: f64) -> Checked<f64> {
        let n = match raw.map(|n| n.0) {
            None => return Ok(default),
            Some(Ok(n)) => n,
            Some(Err(v)) => return Err(self.bad(field, format!("must be a number, found {v}"))),
        };
        match n.as_f64() {
            Some(f) if f.is_finite() && f > 0.0 => Ok(f),
            _ => Err(self.bad(
                field,
                format!("must be a positive finite number, found {n}"),
            )),
        }
    }

    fn nested<T>(&self, field: &str, raw: Option<Object<T>>) -> Checked<Option<T>> {
        let not_object = |v| self.bad(field, format!("must be an object, found {v}"));
        raw.map(|o| o.0.map_err(not_object)).transpose()
    }

    fn layer_types(&self, raw: Loose<Vec<Value>>, num_layers: u64) -> Checked<Vec<LayerKind>> {
        let list = raw
            .0
            .map_err(|_| self.bad("layer_types", "must be a list of strings"))?;
        if list.len() as u64 != num_layers {
            let n = list.len();
            let problem = format!("has {n} entries but num_hidden_layers is {num_layers}");
            return Err(self.bad("layer_types", problem));
        }
        let expected = "expected \"sliding_attention\" or \"full_attention\"";
        list.iter()
            .enumerate()
            .map(|(i, t)| match t.as_str() {
                Some("sliding_attention") => Ok(LayerKind::Sliding),
                Some("full_attention") => Ok(LayerKind::Full),
                _ => Err(self.unsupported(&format!("layer_types[{i}]"), t, expected)),
            })
            .collect()
    }

    /// Sliding and full layers' ropes; the older `rope_scaling` applies to full layers only.
    fn ropes(
        &self,
        parameters: Option<Object<RawRopeParameters>>,
        scaling: Option<Object<RawRope>>,
        local: f64,
        theta: f64,
    ) -> Checked<(Rope, Rope)> {
        let Some(p) = self.nested("rope_parameters", parameters)? else {
            let scaling = self.nested("rope_scaling", scaling)?;
            return Ok((unscaled(local), self.rope("rope_scaling", scaling, theta)?));
        };
        if p.sliding_attention.is_none() && p.full_attention.is_none() {
            let all = self.rope("rope_parameters", Some(p.all), theta)?;
            return Ok((unscaled(local), all));
        }
        let per_type = |key: &str, raw: Option<Option<Object<RawRope>>>, theta| {
            let field = format!("rope_parameters.{key}");
            let raw = self.nested(&field, raw.flatten())?;
            self.rope(&field, raw, theta)
        };
        let sliding = per_type("sliding_attention", p.sliding_attention, local)?;
        let full = per_type("full_attention", p.full_attention, theta)?;
        Ok((sliding, full))
    }

    /// One rope, with period `theta` unless it sets its own.
    fn rope(&self, field: &str, raw: Option<RawRope>, theta: f64) -> Checked<Rope> {
        let mut rope = unscaled(theta);
        let Some(raw) = raw else {
            return Ok(rope);
        };
        if let Some(t) = raw.rope_theta {
            let positive = t.0.ok().filter(|t| t.is_finite() && *t > 0.0);
            let bad = || self.bad(&format!("{field}.rope_theta"), "must be a positive number");
            rope.theta = positive.ok_or_else(bad)? as f32;
        }
        let kind = raw.rope_type.or(raw.legacy_type);
        match kind.as_ref().and_then(Value::as_str).unwrap_or("default") {
            "default" => {}
            "linear" => {
                let factor = raw
                    .factor
                    .and_then(|f| f.0.ok())
                    .filter(|x| x.is_finite() && *x >= 1.0);
                let bad = || {
                    self.bad(
                        &format!("{field}.factor"),
                        "linear rope needs a factor >= 1.0",
                    )
                };
                rope.linear_factor = factor.ok_or_else(bad)? as f32;
            }
            other => {
                let why = "only \"default\" and \"linear\" rope are implemented";
                return Err(self.unsupported(&format!("{field}.rope_type"), &json!(other), why));
            }
        }
        Ok(rope)
    }
}

fn unscaled(theta: f64) -> Rope {
    Rope {
        theta: theta as f32,
        linear_factor: 1.0,
    }
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Named `eos_token_id` wherever it sits, generation_config.json and `text_config` included.
fn eos_ids(path: &Path, raw: Option<Loose<TokenIds>>) -> Checked<Option<Vec<u32>>> {
    match raw.map(|ids| ids.0) {
        None => Ok(None),
        Some(Ok(TokenIds::One(id))) => Ok(Some(vec![id])),
        Some(Ok(TokenIds::Many(ids))) => Ok(Some(ids)),
        Some(Err(_)) => Err(ModelConfigError::Field {
            path: path.to_owned(),
            field: "eos_token_id".into(),
            problem: "must be a token id or a list of token ids".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synthetic::SyntheticSpec;

    fn tiny() -> Value {
        SyntheticSpec::tiny().config_json()
    }

    fn with(mut config: Value, field: &str, value: Value) -> Value {
        config[field] = value;
        config
    }

    fn multimodal(text: Value) -> Value {
        json!({"model_type": "gemma3", "text_config": text})
    }

    fn read(config: &Value) -> Checked<ModelConfig> {
        ModelConfig::from_value(Path::new("config.json"), config)
    }

    /// Asserts a `Field` error on `field` with exactly `problem`, and the message built of them.
    fn assert_field_error(config: &Value, field: &str, problem: &str) {
        let err = read(config).unwrap_err();
        assert!(
            matches!(&err, ModelConfigError::Field { field: f, problem: p, .. }
                if f == field && p == problem),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("config.json: field `{field}` {problem}")
        );
    }

    #[test]
    fn a_wrong_type_is_reported_by_field_at_either_level() {
        let cases = [
            (
                "hidden_size",
                json!("64"),
                "must be a non-negative integer, found \"64\"",
            ),
            (
                "hidden_size",
                json!(64.0),
                "must be a non-negative integer, found 64.0",
            ),
            (
                "hidden_size",
                json!(-4),
                "must be a non-negative integer, found -4",
            ),
            (
                "rms_norm_eps",
                json!("1e-6"),
                "must be a number, found \"1e-6\"",
            ),
            (
                "rms_norm_eps",
                json!(0),
                "must be a positive finite number, found 0",
            ),
            ("rope_theta", json!([1]), "must be a number, found [1]"),
            (
                "tie_word_embeddings",
                json!(1),
                "must be true or false, found 1",
            ),
            ("layer_types", json!({"a": 1}), "must be a list of strings"),
            (
                "rope_scaling",
                json!(["linear", 8.0]),
                "must be an object, found [\"linear\",8.0]",
            ),
            ("rope_parameters", json!(8), "must be an object, found 8"),
        ];
        for (field, value, problem) in cases {
            assert_field_error(&with(tiny(), field, value.clone()), field, problem);
            let nested = multimodal(with(tiny(), field, value));
            assert_field_error(&nested, &format!("text_config.{field}"), problem);
        }
    }

    #[test]
    fn a_wrong_type_inside_a_nested_object_is_reported_by_its_path() {
        let entry = json!({"full_attention": {"rope_type": "linear", "factor": "8"}});
        let config = multimodal(with(tiny(), "rope_parameters", entry));
        let field = "text_config.rope_parameters.full_attention.factor";
        assert_field_error(&config, field, "linear rope needs a factor >= 1.0");
        let entry = json!({"sliding_attention": [], "full_attention": {}});
        let config = with(tiny(), "rope_parameters", entry);
        let field = "rope_parameters.sliding_attention";
        assert_field_error(&config, field, "must be an object, found []");
        let config = with(tiny(), "rope_scaling", json!({"rope_theta": "1e4"}));
        let field = "rope_scaling.rope_theta";
        assert_field_error(&config, field, "must be a positive number");
    }

    #[test]
    fn the_top_level_and_text_config_must_be_objects() {
        assert_field_error(&json!([1, 2]), "(top level)", "must be a JSON object");
        let config = json!({"text_config": [64, 128]});
        assert_field_error(&config, "text_config", "must be an object, found [64,128]");
    }

    #[test]
    fn eos_token_id_is_named_unprefixed_wherever_it_sits() {
        let problem = "must be a token id or a list of token ids";
        for bad in [json!([1, "2"]), json!(-1), json!(4_294_967_296u64)] {
            let config = with(tiny(), "eos_token_id", bad);
            assert_field_error(&config, "eos_token_id", problem);
            assert_field_error(&multimodal(config), "eos_token_id", problem);
        }
        let one = read(&with(tiny(), "eos_token_id", json!(7))).unwrap();
        assert_eq!(one.eos_token_ids, vec![7]);
    }

    #[test]
    fn unsupported_values_are_quoted_as_written() {
        for (field, value, written) in [
            ("final_logit_softcapping", json!(30.0), "30.0"),
            ("attention_bias", json!("false"), "\"false\""),
            ("model_type", json!(3), "3"),
        ] {
            let err = read(&multimodal(with(tiny(), field, value))).unwrap_err();
            assert!(
                matches!(&err, ModelConfigError::Unsupported { field: f, value: v, .. }
                    if *f == format!("text_config.{field}") && v == written),
                "{err:?}"
            );
        }
        let config = with(
            tiny(),
            "layer_types",
            json!(vec![json!({"full_attention": null}); 6]),
        );
        let err = read(&config).unwrap_err();
        assert!(
            matches!(&err, ModelConfigError::Unsupported { field, value, .. }
                if field == "layer_types[0]" && value == r#"{"full_attention":null}"#),
            "{err:?}"
        );
    }

    #[test]
    fn null_is_absent_and_unknown_fields_are_ignored() {
        let mut config = with(tiny(), "hidden_size", Value::Null);
        config["rope_parameters"] = Value::Null;
        config["rope_scaling"] = json!({"rope_type": "linear", "factor": 2.0, "note": [1]});
        config["quantization_config"] = json!({"bits": "four"});
        let c = read(&config).unwrap();
        assert_eq!(c.hidden_size, 2304);
        assert_eq!(c.rope_full.linear_factor, 2.0);
        let c = read(&json!({"text_config": null, "vocab_size": 1000})).unwrap();
        assert_eq!(c.vocab_size, 1000);
    }

    #[test]
    fn a_default_is_not_held_to_the_bounds() {
        let c = read(&json!({"vocab_size": 1})).unwrap();
        assert_eq!((c.vocab_size, c.bos_token_id), (1, 2));
        assert_field_error(
            &json!({"vocab_size": 1, "bos_token_id": 2}),
            "bos_token_id",
            "is 2, must be between 0 and 0",
        );
    }

    #[test]
    fn a_present_key_decides_even_when_null() {
        let factor = |field: &str, value: Value| {
            read(&with(tiny(), field, value))
                .unwrap()
                .rope_full
                .linear_factor
        };
        let linear = json!({"type": "linear", "factor": 8.0});
        assert_eq!(factor("rope_scaling", linear.clone()), 8.0);
        let mut hidden = linear.clone();
        hidden["rope_type"] = Value::Null;
        assert_eq!(factor("rope_scaling", hidden), 1.0);
        assert_eq!(factor("rope_parameters", linear.clone()), 8.0);
        let mut per_type = linear;
        per_type["full_attention"] = Value::Null;
        assert_eq!(factor("rope_parameters", per_type), 1.0);
    }

    #[test]
    fn a_multimodal_config_takes_tie_word_embeddings_from_the_wrapper() {
        let mut text = tiny();
        text.as_object_mut().unwrap().remove("tie_word_embeddings");
        let mut config = multimodal(text);
        assert!(read(&config).unwrap().tie_word_embeddings);
        config["tie_word_embeddings"] = json!(false);
        assert!(!read(&config).unwrap().tie_word_embeddings);
        config["tie_word_embeddings"] = json!("no");
        let problem = "must be true or false, found \"no\"";
        assert_field_error(&config, "text_config.tie_word_embeddings", problem);
    }

    #[test]
    fn generation_config_overrides_the_stop_tokens_only_when_it_names_them() {
        let load = |generation: &str| {
            let config = serde_json::to_vec(&tiny()).unwrap();
            ModelConfig::load_with(Path::new("m"), |name| {
                Ok::<_, ModelConfigError>(Some(match name {
                    CONFIG_FILE => config.clone(),
                    _ => generation.as_bytes().to_vec(),
                }))
            })
        };
        assert_eq!(
            load(r#"{"eos_token_id": 7}"#).unwrap().eos_token_ids,
            vec![7]
        );
        for ignored in [r#"[7]"#, r#"{"eos_token_id": null}"#, "{}"] {
            assert_eq!(load(ignored).unwrap().eos_token_ids, vec![1, 106]);
        }
        let err = load(r#"{"eos_token_id": "7"}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "m/generation_config.json: field `eos_token_id` must be a token id or a list of token ids"
        );
        let err = load(r#"{"eos_token_id": 1, "eos_token_id": 2}"#).unwrap_err();
        assert!(matches!(err, ModelConfigError::Json { .. }), "{err:?}");
    }
}
