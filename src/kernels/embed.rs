//! `embed`: gather embedding rows for token ids, decode them to f32 and scale them; and
//! `round_to_dtype`, which reproduces how HF rounds the embedding scale to the weight dtype.

use super::error::KernelError;
use super::parallel;
use super::tensor::{decode_f32, DType, Tensor, Weight};

/// Rows below which a thread start does not pay off.
const MIN_TASK_ROWS: usize = 64;

/// Rows `w[id]` of an embedding matrix `w [vocab, d]` for each id, decoded to f32 and multiplied
/// by `scale` (one f32 multiply per element): a tensor `[ids.len(), d]`.
///
/// Gemma 3 scales by `sqrt(hidden)` rounded to the weight dtype; pass
/// `round_to_dtype((hidden as f64).sqrt() as f32, w.dtype())`.
pub fn embed(ids: &[u32], w: &Weight, scale: f32) -> Result<Tensor, KernelError> {
    let [vocab, d] = *w.shape() else {
        return Err(KernelError::Rank {
            op: "embed",
            name: "w",
            shape: w.shape().to_vec(),
            need: "[vocab, d]",
        });
    };
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(KernelError::TokenOutOfRange {
            id,
            vocab,
            w: w.shape().to_vec(),
        });
    }
    let shape = vec![ids.len(), d];
    let n = ids.len().checked_mul(d).ok_or(KernelError::TooLarge {
        op: "embed",
        shape: shape.clone(),
    })?;
    let mut out = vec![0.0f32; n];
    if d > 0 {
        // Rows are copied out rather than read where they lie: in a file mapping each read
        // would map the file around it (up to 2 MiB with large page-cache folios), and a
        // prefill's few hundred scattered rows would make much of the table resident.
        parallel::for_rows(&mut out, d, MIN_TASK_ROWS, |rows, dst| {
            let mut bytes = Vec::new();
            for (row, &id) in dst.chunks_exact_mut(d).zip(&ids[rows]) {
                w.copy_rows(&[id as usize], &mut bytes);
                decode_f32(w.dtype(), &bytes, 0, row);
                for v in row.iter_mut() {
                    *v *= scale;
                }
            }
        });
    }
    Tensor::new(shape.clone(), out).map_err(|_| KernelError::TooLarge { op: "embed", shape })
}

/// `v` rounded to the nearest value representable in `dtype` (ties to even), returned as f32.
/// HF computes the Gemma embedding scale as `tensor(sqrt(hidden))` (f32) cast to the weight
/// dtype: `round_to_dtype((640f64).sqrt() as f32, DType::BF16)` is 25.25.
pub fn round_to_dtype(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F32 => v,
        DType::BF16 => half::bf16::from_f32(v).to_f32(),
        DType::F16 => half::f16::from_f32(v).to_f32(),
        // Block formats have no arithmetic of their own: HF computes with them in f32.
        _ => v,
    }
}
