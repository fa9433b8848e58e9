//! Gemma 3's per-layer tensors, written down once: the name suffix in a Hugging Face checkpoint
//! and in a GGUF file, the field an engine reads it as (`layer.q_proj`), the shape config.json implies, and whether it
//! is a projection (a matrix every decode step streams) or a norm vector. The loader, the
//! engine's `model` record, the huge-page packer, the synthetic checkpoints and the bench's model
//! facts all iterate [`LAYER_TENSORS`].

use std::ops::{Index, IndexMut};

use crate::kernels::Weight;

/// One per-layer tensor. The discriminant is the tensor's row in [`LAYER_TENSORS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerTensor {
    /// Query projection.
    QProj,
    /// Key projection.
    KProj,
    /// Value projection.
    VProj,
    /// Attention output projection.
    OProj,
    /// Per-head RMSNorm of queries.
    QNorm,
    /// Per-head RMSNorm of keys.
    KNorm,
    /// RMSNorm before attention.
    InputLayernorm,
    /// RMSNorm after attention.
    PostAttentionLayernorm,
    /// RMSNorm before the MLP.
    PreFeedforwardLayernorm,
    /// RMSNorm after the MLP.
    PostFeedforwardLayernorm,
    /// MLP gate projection.
    GateProj,
    /// MLP up projection.
    UpProj,
    /// MLP down projection.
    DownProj,
}

/// A dimension of a tensor's shape, read from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// `hidden_size`.
    Hidden,
    /// `head_dim`.
    HeadDim,
    /// `num_attention_heads * head_dim`.
    QueryWidth,
    /// `num_key_value_heads * head_dim`.
    KvWidth,
    /// `intermediate_size`.
    Intermediate,
}

/// The sizes a [`Dim`] takes for one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// `hidden_size`.
    pub hidden: usize,
    /// `head_dim`.
    pub head_dim: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_key_value_heads`.
    pub kv_heads: usize,
    /// `intermediate_size`.
    pub intermediate: usize,
}

impl Dims {
    /// The size of `d`.
    pub fn size(&self, d: Dim) -> usize {
        match d {
            Dim::Hidden => self.hidden,
            Dim::HeadDim => self.head_dim,
            Dim::QueryWidth => self.heads * self.head_dim,
            Dim::KvWidth => self.kv_heads * self.head_dim,
            Dim::Intermediate => self.intermediate,
        }
    }
}

/// A row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorSpec {
    /// Which tensor.
    pub tensor: LayerTensor,
    /// Name under `<prefix>layers.N.` in a Hugging Face checkpoint.
    pub hf_suffix: &'static str,
    /// Name under `blk.N.` in a GGUF file (llama.cpp's names).
    pub gguf_suffix: &'static str,
    /// Field of the engine's `layer` record.
    pub field: &'static str,
    /// Shape, HF layout (`[out, in]` for projections).
    pub shape: &'static [Dim],
}

impl TensorSpec {
    /// The shape for a model of these dimensions.
    pub fn shape(&self, dims: &Dims) -> Vec<usize> {
        self.shape.iter().map(|&d| dims.size(d)).collect()
    }
    /// Whether this is a projection matrix (as opposed to a norm vector).
    pub fn is_projection(&self) -> bool {
        self.shape.len() == 2
    }
}

const fn row(
    tensor: LayerTensor,
    hf_suffix: &'static str,
    gguf_suffix: &'static str,
    field: &'static str,
    shape: &'static [Dim],
) -> TensorSpec {
    TensorSpec {
        tensor,
        hf_suffix,
        gguf_suffix,
        field,
        shape,
    }
}

use Dim::{HeadDim, Hidden, Intermediate, KvWidth, QueryWidth};
use LayerTensor as T;

/// Every per-layer tensor, in the order the projections are packed (the order a step reads them
/// is attention, then MLP).
pub const LAYER_TENSORS: [TensorSpec; 13] = [
    row(
        T::QProj,
        "self_attn.q_proj.weight",
        "attn_q.weight",
        "q_proj",
        &[QueryWidth, Hidden],
    ),
    row(
        T::KProj,
        "self_attn.k_proj.weight",
        "attn_k.weight",
        "k_proj",
        &[KvWidth, Hidden],
    ),
    row(
        T::VProj,
        "self_attn.v_proj.weight",
        "attn_v.weight",
        "v_proj",
        &[KvWidth, Hidden],
    ),
    row(
        T::OProj,
        "self_attn.o_proj.weight",
        "attn_output.weight",
        "o_proj",
        &[Hidden, QueryWidth],
    ),
    row(
        T::QNorm,
        "self_attn.q_norm.weight",
        "attn_q_norm.weight",
        "q_norm",
        &[HeadDim],
    ),
    row(
        T::KNorm,
        "self_attn.k_norm.weight",
        "attn_k_norm.weight",
        "k_norm",
        &[HeadDim],
    ),
    row(
        T::InputLayernorm,
        "input_layernorm.weight",
        "attn_norm.weight",
        "input_layernorm",
        &[Hidden],
    ),
    row(
        T::PostAttentionLayernorm,
        "post_attention_layernorm.weight",
        "post_attention_norm.weight",
        "post_attention_layernorm",
        &[Hidden],
    ),
    row(
        T::PreFeedforwardLayernorm,
        "pre_feedforward_layernorm.weight",
        "ffn_norm.weight",
        "pre_feedforward_layernorm",
        &[Hidden],
    ),
    row(
        T::PostFeedforwardLayernorm,
        "post_feedforward_layernorm.weight",
        "post_ffw_norm.weight",
        "post_feedforward_layernorm",
        &[Hidden],
    ),
    row(
        T::GateProj,
        "mlp.gate_proj.weight",
        "ffn_gate.weight",
        "gate_proj",
        &[Intermediate, Hidden],
    ),
    row(
        T::UpProj,
        "mlp.up_proj.weight",
        "ffn_up.weight",
        "up_proj",
        &[Intermediate, Hidden],
    ),
    row(
        T::DownProj,
        "mlp.down_proj.weight",
        "ffn_down.weight",
        "down_proj",
        &[Hidden, Intermediate],
    ),
];

// Each tensor's discriminant is its row: indexing by `LayerTensor` is indexing the table.
const _: () = {
    let mut i = 0;
    while i < LAYER_TENSORS.len() {
        assert!(LAYER_TENSORS[i].tensor as usize == i);
        i += 1;
    }
};

impl LayerTensor {
    /// This tensor's row of the table.
    pub fn spec(self) -> &'static TensorSpec {
        &LAYER_TENSORS[self as usize]
    }
}

/// The weights of one decoder layer, one per row of [`LAYER_TENSORS`], HF layout.
#[derive(Debug, Clone)]
pub struct LayerWeights(Vec<Weight>);

impl LayerWeights {
    /// Weights in table order; `None` unless there is exactly one per row.
    pub fn new(weights: Vec<Weight>) -> Option<LayerWeights> {
        (weights.len() == LAYER_TENSORS.len()).then_some(LayerWeights(weights))
    }
    /// Each weight with its row of the table.
    pub fn iter(&self) -> impl Iterator<Item = (&'static TensorSpec, &Weight)> {
        LAYER_TENSORS.iter().zip(&self.0)
    }
    /// The projections, mutable, in table order (what the packer moves).
    pub fn projections_mut(&mut self) -> impl Iterator<Item = &mut Weight> {
        LAYER_TENSORS
            .iter()
            .zip(&mut self.0)
            .filter(|(spec, _)| spec.is_projection())
            .map(|(_, w)| w)
    }
}

impl Index<LayerTensor> for LayerWeights {
    type Output = Weight;
    fn index(&self, t: LayerTensor) -> &Weight {
        &self.0[t as usize]
    }
}

impl IndexMut<LayerTensor> for LayerWeights {
    fn index_mut(&mut self, t: LayerTensor) -> &mut Weight {
        &mut self.0[t as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_fields_are_unique_and_agree() {
        let mut fields: Vec<&str> = LAYER_TENSORS.iter().map(|t| t.field).collect();
        fields.sort_unstable();
        fields.dedup();
        assert_eq!(fields.len(), LAYER_TENSORS.len());
        for t in &LAYER_TENSORS {
            // The engine field is the HF name's last component before `.weight`.
            let stem = t.hf_suffix.strip_suffix(".weight").unwrap();
            assert_eq!(stem.rsplit('.').next(), Some(t.field), "{t:?}");
        }
    }

    #[test]
    fn shapes_follow_the_configuration() {
        let d = Dims {
            hidden: 640,
            head_dim: 256,
            heads: 4,
            kv_heads: 1,
            intermediate: 2048,
        };
        assert_eq!(LayerTensor::QProj.spec().shape(&d), [1024, 640]);
        assert_eq!(LayerTensor::KProj.spec().shape(&d), [256, 640]);
        assert_eq!(LayerTensor::OProj.spec().shape(&d), [640, 1024]);
        assert_eq!(LayerTensor::DownProj.spec().shape(&d), [640, 2048]);
        assert_eq!(LayerTensor::QNorm.spec().shape(&d), [256]);
        let projections = LAYER_TENSORS.iter().filter(|t| t.is_projection()).count();
        assert_eq!(projections, 7);
    }
}
