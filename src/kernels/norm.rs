//! `rms_norm`: `x * rsqrt(mean(x²) + eps) * (offset + w)` over the last axis, in f32.

use super::error::KernelError;
use super::parallel;
use super::tensor::{Tensor, Weight};

/// Elements below which a thread start does not pay off.
const MIN_TASK_ELEMS: usize = 1 << 15;

/// RMS normalisation over the last axis of `x [..., d]` with a per-feature weight `w [d]`.
///
/// Follows HF Gemma 3's order of f32 operations: each square `x·x` is rounded to f32; their sum
/// is accumulated in f64 in ascending order and rounded to f32 (so it is the correctly rounded
/// sum in practice, whatever order PyTorch used); `mean = sum / d`; `r = 1 / sqrt(mean + eps)`;
/// then `(x · r) · (offset + w)`. Gemma uses `offset = 1.0`.
pub fn rms_norm(x: &Tensor, w: &Weight, eps: f32, offset: f32) -> Result<Tensor, KernelError> {
    let d = match x.shape().last() {
        Some(&d) => d,
        None => {
            return Err(KernelError::Rank {
                op: "rms_norm",
                name: "x",
                shape: x.shape().to_vec(),
                need: "[..., d] with at least one dimension",
            })
        }
    };
    if w.shape() != [d] {
        return Err(KernelError::FeatureWeight {
            op: "rms_norm",
            x: x.shape().to_vec(),
            w: w.shape().to_vec(),
            d,
        });
    }
    if !eps.is_finite() || eps < 0.0 {
        return Err(KernelError::BadParam {
            op: "rms_norm",
            name: "eps",
            value: eps.to_string(),
            need: "finite and not negative",
        });
    }
    // A per-feature vector is small; decode it once.
    let mut gain = vec![0.0f32; d];
    w.read_f32(0, &mut gain);
    for g in &mut gain {
        *g += offset;
    }
    let src = x.data();
    let mut out = vec![0.0f32; src.len()];
    if d > 0 {
        parallel::for_rows(&mut out, d, MIN_TASK_ELEMS.div_ceil(d), |rows, dst| {
            let s = &src[rows.start * d..rows.end * d];
            let group = GROUP * d;
            let mut dst = dst.chunks_exact_mut(group);
            let mut s = s.chunks_exact(group);
            for (o, xr) in (&mut dst).zip(&mut s) {
                norm_rows::<GROUP>(xr, &gain, eps, o);
            }
            let (o, xr) = (dst.into_remainder(), s.remainder());
            for (o, xr) in o.chunks_exact_mut(d).zip(xr.chunks_exact(d)) {
                norm_rows::<1>(xr, &gain, eps, o);
            }
        });
    }
    Tensor::new(x.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: "rms_norm",
        shape: x.shape().to_vec(),
    })
}

/// Rows normed together by [`norm_rows`].
const GROUP: usize = 8;

/// `R` consecutive rows of `gain.len()` values each. Every row's sum of squares is its own
/// chain of f64 additions in ascending order (so the same sum as a row alone); interleaving
/// `R` independent chains hides the latency of each addition, which alone bounds one chain.
#[inline]
fn norm_rows<const R: usize>(x: &[f32], gain: &[f32], eps: f32, out: &mut [f32]) {
    let d = gain.len();
    let rows: [&[f32]; R] = std::array::from_fn(|r| &x[r * d..][..d]);
    let mut sums = [0.0f64; R];
    for c in 0..d {
        for (sum, row) in sums.iter_mut().zip(&rows) {
            let v = row[c];
            *sum += f64::from(v * v);
        }
    }
    for (r, (o, xr)) in out.chunks_exact_mut(d).zip(rows).enumerate() {
        let mean = sums[r] as f32 / d as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        for ((o, &v), &g) in o.iter_mut().zip(xr).zip(gain) {
            *o = (v * inv) * g;
        }
    }
}
