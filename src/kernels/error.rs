//! [`KernelError`]: every way a kernel refuses its arguments. Kernels never panic on shapes; a
//! mismatch comes back as one of these, naming the operation and the shapes involved.

use crate::error::{Diagnose, Exit};

/// Why a kernel refused its arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A tensor has the wrong number of dimensions.
    #[error("{op}: {name} has shape {shape:?}, but it must be {need}")]
    Rank {
        /// The kernel.
        op: &'static str,
        /// Which argument.
        name: &'static str,
        /// Its shape.
        shape: Vec<usize>,
        /// What the kernel needs, in words (e.g. "[batch, seq, heads, head_dim]").
        need: &'static str,
    },
    /// The last dimension of `x` is not the weight's input dimension.
    #[error(
        "{op}: x has shape {x:?} and the weight has shape {w:?}; x's last dimension must equal \
         the weight's second dimension (weights are [out, in])"
    )]
    InnerDim {
        /// The kernel.
        op: &'static str,
        /// Shape of x.
        x: Vec<usize>,
        /// Shape of the weight.
        w: Vec<usize>,
    },
    /// Two shapes that do not broadcast.
    #[error(
        "{op}: shapes {a:?} and {b:?} do not broadcast; they must be equal, or the smaller one a \
         suffix of the larger one, or a scalar"
    )]
    Broadcast {
        /// The kernel.
        op: &'static str,
        /// First operand's shape.
        a: Vec<usize>,
        /// Second operand's shape.
        b: Vec<usize>,
    },
    /// A per-feature weight whose length is not x's last dimension.
    #[error("{op}: weight has shape {w:?} but x has shape {x:?}; the weight must be [{d}]")]
    FeatureWeight {
        /// The kernel.
        op: &'static str,
        /// Shape of x.
        x: Vec<usize>,
        /// Shape of the weight.
        w: Vec<usize>,
        /// The length the weight must have.
        d: usize,
    },
    /// A token id at or beyond the vocabulary size.
    #[error("embed: token id {id} is outside the vocabulary of {vocab} rows (weight shape {w:?})")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// Number of rows in the embedding matrix.
        vocab: usize,
        /// Shape of the embedding matrix.
        w: Vec<usize>,
    },
    /// The number of positions does not match batch * seq.
    #[error("{op}: {found} positions given for x of shape {shape:?}, which needs {expected}")]
    Positions {
        /// The kernel.
        op: &'static str,
        /// Shape of x.
        shape: Vec<usize>,
        /// batch * seq.
        expected: usize,
        /// Positions supplied.
        found: usize,
    },
    /// RoPE rotates halves, so the head dimension must be even.
    #[error("rope: head_dim {head_dim} of x {shape:?} is odd; rotary embedding needs an even one")]
    OddHeadDim {
        /// Shape of x.
        shape: Vec<usize>,
        /// The last dimension.
        head_dim: usize,
    },
    /// q, k and v disagree with each other.
    #[error("attention: q {q:?}, k {k:?} and v {v:?} do not fit together: {why}")]
    AttentionShapes {
        /// Shape of q.
        q: Vec<usize>,
        /// Shape of k.
        k: Vec<usize>,
        /// Shape of v.
        v: Vec<usize>,
        /// Which rule is broken.
        why: &'static str,
    },
    /// The new keys do not match the shape the cache was built for.
    #[error(
        "attention: k has shape {k:?} but the cache was built for batch {batch}, {n_kv_heads} kv \
         heads of dim {head_dim}"
    )]
    CacheShape {
        /// Shape of k.
        k: Vec<usize>,
        /// Cache batch size.
        batch: usize,
        /// Cache kv heads.
        n_kv_heads: usize,
        /// Cache head dimension.
        head_dim: usize,
    },
    /// A global cache cannot take more positions.
    #[error(
        "attention: the global cache holds at most {capacity} positions; it holds {len} and \
         {adding} more were appended"
    )]
    CacheFull {
        /// Its capacity.
        capacity: usize,
        /// Positions already held.
        len: usize,
        /// Positions being appended.
        adding: usize,
    },
    /// The per-sequence pad counts do not match the batch.
    #[error("attention: {found} pad counts given for a batch of {batch}")]
    PadCount {
        /// Batch size.
        batch: usize,
        /// Pad counts supplied.
        found: usize,
    },
    /// A scalar parameter out of its domain (zero window, non-finite scale, ...).
    #[error("{op}: {name} = {value} is invalid; it must be {need}")]
    BadParam {
        /// The kernel.
        op: &'static str,
        /// Parameter name.
        name: &'static str,
        /// Its value, printed.
        value: String,
        /// The rule, in words.
        need: &'static str,
    },
    /// A reduction over an empty last axis.
    #[error("{op}: x has shape {shape:?}; the last axis must not be empty")]
    EmptyAxis {
        /// The kernel.
        op: &'static str,
        /// Shape of x.
        shape: Vec<usize>,
    },
    /// The last axis is too long for u32 indices.
    #[error("{op}: the last axis of {shape:?} is longer than u32 indices can address")]
    IndexOverflow {
        /// The kernel.
        op: &'static str,
        /// Shape of x.
        shape: Vec<usize>,
    },
    /// The output would not fit in memory (its element count overflows usize).
    #[error("{op}: output shape {shape:?} is too large")]
    TooLarge {
        /// The kernel.
        op: &'static str,
        /// The requested output shape.
        shape: Vec<usize>,
    },
}

impl Diagnose for KernelError {
    fn exit(&self) -> Exit {
        Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            KernelError::TokenOutOfRange { vocab, .. } => {
                format!("token ids must be below {vocab}; check the tokenizer matches the model")
            }
            KernelError::CacheFull { capacity, .. } => format!(
                "prompt plus new tokens must fit in {capacity} positions; raise the cache \
                 capacity or lower max_new_tokens"
            ),
            KernelError::BadParam { .. } => {
                "check the constant the engine passes (usually read from config.json)".into()
            }
            _ => "check the shapes the engine passes to this operation against the model's \
                  config.json"
                .into(),
        })
    }
}
