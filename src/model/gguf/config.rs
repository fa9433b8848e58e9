//! The Gemma 3 configuration of a GGUF file, from its `gemma3.*` keys.
//!
//! The keys are translated to the `config.json` fields HF transformers' GGUF loader gives them
//! (`gemma3.embedding_length` is `hidden_size`, ...) and then validated by the very code that
//! validates config.json, so both forms take the same defaults and are refused for the same
//! reasons; an error names the GGUF key, not the field it stands for. Where GGUF is silent:
//! - `query_pre_attn_scalar` is `head_dim`, except for the 62-layer (27B) shape, where it is
//!   `hidden / heads` (168): llama.cpp's rule, and the value of every published Gemma 3 config;
//! - the layer pattern is HF's default (every sixth layer global) unless
//!   `gemma3.attention.sliding_window_pattern` says otherwise;
//! - the local rope base is 10000 unless `gemma3.rope.freq_base_swa` says otherwise;
//! - the vocabulary size is the embedding's row count; the output head is tied unless the file
//!   holds `output.weight`;
//! - the end-of-sequence ids are `tokenizer.ggml.eos_token_id` (and `eot_token_id`), plus
//!   `<end_of_turn>` when the vocabulary has it at Gemma's id 106.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::reader::{Gguf, MetaValue};
use crate::model::config::{ModelConfig, ModelConfigError};
use crate::model::tokenizer::END_OF_TURN;

/// The architecture this runner reads.
pub const ARCHITECTURE: &str = "gemma3";

/// GGUF key (after `gemma3.`) and the config.json field it becomes.
const FIELDS: [(&str, &str); 11] = [
    ("context_length", "max_position_embeddings"),
    ("embedding_length", "hidden_size"),
    ("block_count", "num_hidden_layers"),
    ("feed_forward_length", "intermediate_size"),
    ("attention.head_count", "num_attention_heads"),
    ("attention.head_count_kv", "num_key_value_heads"),
    ("attention.key_length", "head_dim"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
    ("attention.sliding_window", "sliding_window"),
    ("rope.freq_base", "rope_theta"),
    ("rope.freq_base_swa", "rope_local_base_freq"),
];

/// Keys that must be present (HF's defaults are for other shapes).
const REQUIRED: [&str; 6] = [
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
];

/// The validated configuration of `gguf`; `vocab` is the embedding's row count and `tied`
/// whether the file has no separate output head.
pub fn config(
    path: &Path,
    gguf: &Gguf,
    vocab: usize,
    tied: bool,
) -> Result<ModelConfig, ModelConfigError> {
    let key = |k: &str| format!("{ARCHITECTURE}.{k}");
    let field_err = |k: &str, problem: String| ModelConfigError::Field {
        path: path.to_owned(),
        field: k.to_owned(),
        problem,
    };
    match gguf.get("general.architecture") {
        Some(MetaValue::Str(a)) if a == ARCHITECTURE => {}
        Some(other) => {
            return Err(ModelConfigError::Unsupported {
                path: path.to_owned(),
                field: "general.architecture".into(),
                value: other.to_string(),
                why: "this runner implements Gemma 3 text models (\"gemma3\")".into(),
            })
        }
        None => return Err(field_err("general.architecture", "is missing".into())),
    }
    for k in REQUIRED {
        if gguf.get(&key(k)).is_none() {
            return Err(field_err(&key(k), "is missing".into()));
        }
    }
    let mut json = Map::new();
    json.insert("model_type".into(), json!("gemma3_text"));
    for (k, field) in FIELDS {
        if let Some(v) = gguf.get(&key(k)) {
            json.insert(field.into(), to_json(v));
        }
    }
    let key_len = gguf.get(&key("attention.key_length"));
    if let Some(value_len) = gguf.get(&key("attention.value_length")) {
        if Some(value_len) != key_len {
            return Err(ModelConfigError::Unsupported {
                path: path.to_owned(),
                field: key("attention.value_length"),
                value: value_len.to_string(),
                why: "Gemma 3 has key_length == value_length".into(),
            });
        }
    }
    let layers = gguf.get(&key("block_count")).and_then(MetaValue::as_u64);
    let (hidden, heads) = (
        gguf.get(&key("embedding_length"))
            .and_then(MetaValue::as_u64),
        gguf.get(&key("attention.head_count"))
            .and_then(MetaValue::as_u64),
    );
    if let (Some(62), Some(scalar)) = (
        layers,
        hidden.zip(heads).and_then(|(h, n)| h.checked_div(n)),
    ) {
        json.insert("query_pre_attn_scalar".into(), json!(scalar));
    } else if let Some(k) = key_len {
        json.insert("query_pre_attn_scalar".into(), to_json(k));
    }
    match gguf.get(&key("attention.sliding_window_pattern")) {
        None => {}
        Some(MetaValue::Array(flags)) => {
            let kinds = flags
                .iter()
                .map(|f| match f {
                    MetaValue::Bool(true) => json!("sliding_attention"),
                    MetaValue::Bool(false) => json!("full_attention"),
                    other => to_json(&other),
                })
                .collect();
            json.insert("layer_types".into(), Value::Array(kinds));
        }
        Some(every) => {
            json.insert("sliding_window_pattern".into(), to_json(every));
        }
    }
    if let Some(kind) = gguf.get(&key("rope.scaling.type")) {
        let mut rope = Map::new();
        rope.insert("rope_type".into(), to_json(kind));
        if let Some(f) = gguf.get(&key("rope.scaling.factor")) {
            rope.insert("factor".into(), to_json(f));
        }
        if kind.as_str() != Some("none") {
            json.insert("rope_scaling".into(), Value::Object(rope));
        }
    }
    json.insert("vocab_size".into(), json!(vocab));
    json.insert("tie_word_embeddings".into(), json!(tied));
    for (k, field) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(v) = gguf.get(k) {
            json.insert(field.into(), to_json(v));
        }
    }
    let mut eos = Vec::new();
    for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(v) = gguf.get(k) {
            eos.push(to_json(v));
        }
    }
    // llama.cpp ends a turn at `<end_of_turn>` from the vocabulary, as HF's generation_config
    // lists it beside `<eos>`; GGUF files rarely name it in a key of its own.
    if let Some(MetaValue::Array(tokens)) = gguf.get("tokenizer.ggml.tokens") {
        let eot = tokens
            .as_strings()
            .and_then(|t| t.get(END_OF_TURN as usize))
            == Some("<end_of_turn>");
        if eot && !eos.contains(&json!(END_OF_TURN)) {
            eos.push(json!(END_OF_TURN));
        }
    }
    if !eos.is_empty() {
        json.insert("eos_token_id".into(), Value::Array(eos));
    }
    ModelConfig::from_value(path, &Value::Object(json)).map_err(rename)
}

/// A config.json field name in an error, replaced by the GGUF key it came from.
fn rename(e: ModelConfigError) -> ModelConfigError {
    let gguf_key = |field: &str| -> String {
        let base = field.split(['.', '[']).next().unwrap_or(field);
        let from = FIELDS
            .iter()
            .find(|(_, f)| *f == base)
            .map(|(k, _)| format!("{ARCHITECTURE}.{k}"));
        match (from, base) {
            (Some(k), _) => k,
            (None, "layer_types" | "sliding_window_pattern") => {
                format!("{ARCHITECTURE}.attention.sliding_window_pattern")
            }
            (None, "rope_scaling") => format!("{ARCHITECTURE}.rope.scaling"),
            (None, "bos_token_id") => "tokenizer.ggml.bos_token_id".into(),
            (None, "pad_token_id") => "tokenizer.ggml.padding_token_id".into(),
            (None, "eos_token_id") => "tokenizer.ggml.eos_token_id".into(),
            (None, _) => field.to_owned(),
        }
    };
    match e {
        ModelConfigError::Field {
            path,
            field,
            problem,
        } => ModelConfigError::Field {
            path,
            field: gguf_key(&field),
            problem,
        },
        ModelConfigError::Unsupported {
            path,
            field,
            value,
            why,
        } => ModelConfigError::Unsupported {
            path,
            field: gguf_key(&field),
            value,
            why,
        },
        other => other,
    }
}

fn to_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::Uint(n) => json!(n),
        MetaValue::Int(n) => json!(n),
        // f32 widened exactly, then narrowed back by the validator: the same f32.
        MetaValue::F32(x) => json!(f64::from(*x)),
        MetaValue::F64(x) => json!(x),
        MetaValue::Bool(b) => json!(b),
        MetaValue::Str(s) => json!(s),
        MetaValue::Array(items) => Value::Array(items.iter().map(|v| to_json(&v)).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::LayerKind;
    use crate::model::gguf::reader::tests::Writer;

    fn gemma3_270m() -> Writer {
        let mut w = Writer::new();
        w.str("general.architecture", "gemma3")
            .u32("gemma3.context_length", 32768)
            .u32("gemma3.embedding_length", 640)
            .u32("gemma3.block_count", 18)
            .u32("gemma3.feed_forward_length", 2048)
            .u32("gemma3.attention.head_count", 4)
            .u32("gemma3.attention.head_count_kv", 1)
            .u32("gemma3.attention.key_length", 256)
            .u32("gemma3.attention.value_length", 256)
            .f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
            .f32("gemma3.rope.freq_base", 1e6)
            .u32("gemma3.attention.sliding_window", 512)
            .u32("tokenizer.ggml.bos_token_id", 2)
            .u32("tokenizer.ggml.eos_token_id", 1)
            .u32("tokenizer.ggml.padding_token_id", 0);
        w
    }

    /// The 270M's required keys only, with `kv_heads` key/value heads.
    fn required_keys(kv_heads: u32) -> Writer {
        let mut w = Writer::new();
        w.str("general.architecture", "gemma3")
            .u32("gemma3.embedding_length", 640)
            .u32("gemma3.block_count", 18)
            .u32("gemma3.feed_forward_length", 2048)
            .u32("gemma3.attention.head_count", 4)
            .u32("gemma3.attention.head_count_kv", kv_heads)
            .u32("gemma3.attention.key_length", 256);
        w
    }

    fn read(w: &Writer) -> Result<ModelConfig, ModelConfigError> {
        let bytes = w.bytes();
        let g = Gguf::parse(Path::new("m.gguf"), &bytes).unwrap();
        config(Path::new("m.gguf"), &g, 262144, true)
    }

    #[test]
    fn the_270m_keys_give_the_published_config() {
        let c = read(&gemma3_270m()).unwrap();
        assert_eq!(
            (c.hidden_size, c.intermediate_size, c.num_layers()),
            (640, 2048, 18)
        );
        assert_eq!((c.num_heads, c.num_kv_heads, c.head_dim), (4, 1, 256));
        assert_eq!(c.query_pre_attn_scalar, 256.0);
        assert_eq!(c.sliding_window, 512);
        assert_eq!(c.rms_norm_eps, 1e-6);
        assert_eq!((c.rope_sliding.theta, c.rope_full.theta), (10_000.0, 1e6));
        assert_eq!(c.rope_full.linear_factor, 1.0);
        assert_eq!(c.layer_kinds[5], LayerKind::Full);
        assert_eq!(c.layer_kinds[4], LayerKind::Sliding);
        assert_eq!((c.vocab_size, c.tie_word_embeddings), (262144, true));
        assert_eq!(c.eos_token_ids, vec![1]);
    }

    #[test]
    fn the_27b_shape_scales_queries_by_hidden_over_heads_and_keeps_linear_rope() {
        let mut w = Writer::new();
        w.str("general.architecture", "gemma3")
            .u32("gemma3.embedding_length", 5376)
            .u32("gemma3.block_count", 62)
            .u32("gemma3.feed_forward_length", 21504)
            .u32("gemma3.attention.head_count", 32)
            .u32("gemma3.attention.head_count_kv", 16)
            .u32("gemma3.attention.key_length", 128)
            .str("gemma3.rope.scaling.type", "linear")
            .f32("gemma3.rope.scaling.factor", 8.0);
        let c = read(&w).unwrap();
        assert_eq!(c.query_pre_attn_scalar, 168.0);
        assert_eq!(c.rope_full.linear_factor, 8.0);
        assert_eq!(c.rope_sliding.linear_factor, 1.0);
    }

    #[test]
    fn errors_name_the_gguf_key() {
        let mut w = Writer::new();
        w.str("general.architecture", "gemma3");
        let e = read(&w).unwrap_err().to_string();
        assert!(
            e.contains("gemma3.embedding_length") && e.contains("missing"),
            "{e}"
        );

        let w = required_keys(3);
        let e = read(&w).unwrap_err().to_string();
        assert!(
            e.contains("`gemma3.attention.head_count_kv`") && e.contains("does not divide"),
            "{e}"
        );

        let mut w = Writer::new();
        w.str("general.architecture", "llama");
        let e = read(&w).unwrap_err().to_string();
        assert!(
            e.contains("general.architecture") && e.contains("llama"),
            "{e}"
        );

        let mut w = required_keys(1);
        w.str("gemma3.rope.scaling.type", "yarn");
        let e = read(&w).unwrap_err().to_string();
        assert!(
            e.contains("gemma3.rope.scaling") && e.contains("yarn"),
            "{e}"
        );
    }
}
