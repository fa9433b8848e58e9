//! Element-wise kernels: `add`, `mul` (with suffix broadcasting), `scale` and `gelu_tanh`.
//!
//! Each output element is one f32 operation on its inputs (for `gelu_tanh`, a fixed sequence of
//! them, in PyTorch's order), so results never depend on how the work is split.
#![allow(unsafe_code)]

use super::error::KernelError;
use super::math;
use super::parallel;
use super::simd::{self, Cpu};
use super::tensor::Tensor;

/// Elements below which a thread start does not pay off, for one f32 operation per element.
const MIN_TASK_ELEMS: usize = 1 << 15;
/// The same for `gelu_tanh`, whose correctly rounded `tanh` costs ~30 times an addition.
const MIN_TASK_ELEMS_GELU: usize = 1 << 13;

/// `a + b`, element-wise. Shapes must be equal, or one must be a suffix of the other (it is
/// repeated over the other's leading dimensions; a rank-0 scalar is the empty suffix). The
/// result has the larger shape.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    broadcast("add", a, b, |x, y| x + y)
}

/// `a * b`, element-wise, with the same broadcasting as [`add`].
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    broadcast("mul", a, b, |x, y| x * y)
}

/// `x * s` (one f32 multiply per element).
pub fn scale(x: &Tensor, s: f32) -> Tensor {
    map(x, MIN_TASK_ELEMS, |src, dst| {
        for (o, v) in dst.iter_mut().zip(src) {
            *o = v * s;
        }
    })
}

/// GELU with the tanh approximation, matching PyTorch's `gelu(approximate='tanh')` in f32:
/// `inner = β·(x + κ·x³)` with `x³ = (x·x)·x`, `β = f32(√2 · 2/√π · 0.5)`, `κ = f32(0.044715)`,
/// then `(0.5·x)·(1 + tanh(inner))`, each step rounded to f32; `tanh` is correctly rounded
/// (see `kernels::math`: computed in f64 and rounded once).
pub fn gelu_tanh(x: &Tensor) -> Tensor {
    let cpu = simd::cpu();
    map(x, MIN_TASK_ELEMS_GELU, |src, dst| gelu_slice(cpu, src, dst))
}

const GELU_BETA: f32 = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
const GELU_KAPPA: f32 = 0.044715;

/// One GELU value, in PyTorch's operation order.
#[inline]
pub(crate) fn gelu_one(x: f32) -> f32 {
    let cube = x * x * x;
    let inner = GELU_BETA * (x + GELU_KAPPA * cube);
    0.5 * x * (1.0 + math::tanh(inner))
}

/// [`gelu_one`] of every element of `src` into `dst` (same length).
fn gelu_slice(cpu: Cpu, src: &[f32], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx512() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F was
        // confirmed.
        unsafe { gelu_avx512(src, dst) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2, FMA and F16C
        // were confirmed.
        unsafe { gelu_avx2(src, dst) };
        return;
    }
    let _ = cpu;
    for (o, v) in dst.iter_mut().zip(src) {
        *o = gelu_one(*v);
    }
}

/// [`gelu_one`] 8 elements at a time: the same f32 operations in the same order (no fused
/// multiply-adds), and [`math::tanh4_avx2`] for `tanh`, so the same results.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_castps256_ps128, _mm256_cvtps_pd, _mm256_extractf128_ps,
        _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_set_m128, _mm256_storeu_ps,
    };
    let n = src.len().min(dst.len());
    let whole = n - n % 8;
    for (s, d) in src[..whole]
        .chunks_exact(8)
        .zip(dst[..whole].chunks_exact_mut(8))
    {
        // SAFETY: `s` and `d` hold exactly 8 f32s (one unaligned load, one unaligned store);
        // AVX2 and FMA are enabled on this function.
        unsafe {
            let x = _mm256_loadu_ps(s.as_ptr());
            let cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
            let sum = _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(GELU_KAPPA), cube));
            let inner = _mm256_mul_ps(_mm256_set1_ps(GELU_BETA), sum);
            let lo = math::tanh4_avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(inner)));
            let hi = math::tanh4_avx2(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(inner)));
            let t = _mm256_set_m128(hi, lo);
            let half_x = _mm256_mul_ps(_mm256_set1_ps(0.5), x);
            let y = _mm256_mul_ps(half_x, _mm256_add_ps(_mm256_set1_ps(1.0), t));
            _mm256_storeu_ps(d.as_mut_ptr(), y);
        }
    }
    for (o, v) in dst[whole..n].iter_mut().zip(&src[whole..n]) {
        *o = gelu_one(*v);
    }
}

/// [`gelu_one`] 16 elements at a time, as [`gelu_avx2`] does 8: the same f32 operations, and
/// [`math::tanh8_avx512`] for `tanh`. Half the instructions per element of the AVX2 loop; the
/// f64 divide in `tanh` takes as long per element at either width.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_avx512(src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_castpd_ps, _mm256_castps_pd, _mm512_add_ps, _mm512_castpd_ps,
        _mm512_castps256_ps512, _mm512_castps512_ps256, _mm512_castps_pd, _mm512_cvtps_pd,
        _mm512_extractf64x4_pd, _mm512_insertf64x4, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps,
        _mm512_storeu_ps,
    };
    let n = src.len().min(dst.len());
    let whole = n - n % 16;
    for (s, d) in src[..whole]
        .chunks_exact(16)
        .zip(dst[..whole].chunks_exact_mut(16))
    {
        // SAFETY: `s` and `d` hold exactly 16 f32s (one unaligned load, one unaligned store);
        // AVX-512F is enabled on this function.
        unsafe {
            let x = _mm512_loadu_ps(s.as_ptr());
            let cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            let sum = _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(GELU_KAPPA), cube));
            let inner = _mm512_mul_ps(_mm512_set1_ps(GELU_BETA), sum);
            let upper = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(inner)));
            let lo = math::tanh8_avx512(_mm512_cvtps_pd(_mm512_castps512_ps256(inner)));
            let hi = math::tanh8_avx512(_mm512_cvtps_pd(upper));
            let t = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                _mm512_castps_pd(_mm512_castps256_ps512(lo)),
                _mm256_castps_pd(hi),
            ));
            let half_x = _mm512_mul_ps(_mm512_set1_ps(0.5), x);
            let y = _mm512_mul_ps(half_x, _mm512_add_ps(_mm512_set1_ps(1.0), t));
            _mm512_storeu_ps(d.as_mut_ptr(), y);
        }
    }
    for (o, v) in dst[whole..n].iter_mut().zip(&src[whole..n]) {
        *o = gelu_one(*v);
    }
}

/// Fill the output from `x` with `f(src, dst)` over equal-length slices, in parallel over
/// chunks of at least `min_elems` (`f` must treat every element independently).
fn map(x: &Tensor, min_elems: usize, f: impl Fn(&[f32], &mut [f32]) + Sync) -> Tensor {
    let src = x.data();
    let mut out = vec![0.0f32; src.len()];
    let chunk = 4096;
    let n = out.len();
    if n <= chunk {
        f(src, &mut out);
    } else {
        // Whole chunks in parallel, the remainder here.
        let whole = n - n % chunk;
        let (head, tail) = out.split_at_mut(whole);
        parallel::for_rows(head, chunk, min_elems.div_ceil(chunk), |rows, dst| {
            f(&src[rows.start * chunk..rows.end * chunk], dst);
        });
        f(&src[whole..], tail);
    }
    match Tensor::new(x.shape().to_vec(), out) {
        Ok(t) => t,
        // Same element count as `x`, so the shape always fits.
        Err(_) => x.clone(),
    }
}

/// `op(a, b)` with suffix broadcasting; `op` must be commutative (the operands may swap so the
/// larger shape comes first).
fn broadcast(
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    op: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<Tensor, KernelError> {
    let (big, small) = if is_suffix(b.shape(), a.shape()) {
        (a, b)
    } else if is_suffix(a.shape(), b.shape()) {
        (b, a)
    } else {
        return Err(KernelError::Broadcast {
            op: name,
            a: a.shape().to_vec(),
            b: b.shape().to_vec(),
        });
    };
    let x = big.data();
    let y = small.data();
    let mut out = vec![0.0f32; x.len()];
    if !out.is_empty() {
        // Rows of `row` elements: the small operand repeats every `y.len()` elements, so pick
        // a row length that is a multiple of it (or, for equal shapes, the last dimension).
        let row = if y.len() == x.len() {
            big.last_dim().max(1)
        } else {
            y.len()
        };
        let same = y.len() == x.len();
        parallel::for_rows(&mut out, row, MIN_TASK_ELEMS.div_ceil(row), |rows, dst| {
            let start = rows.start * row;
            let xs = &x[start..start + dst.len()];
            if same {
                let ys = &y[start..start + dst.len()];
                for ((o, a), b) in dst.iter_mut().zip(xs).zip(ys) {
                    *o = op(*a, *b);
                }
            } else {
                for (d, s) in dst.chunks_exact_mut(row).zip(xs.chunks_exact(row)) {
                    for ((o, a), b) in d.iter_mut().zip(s).zip(y) {
                        *o = op(*a, *b);
                    }
                }
            }
        });
    }
    Tensor::new(big.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: name,
        shape: big.shape().to_vec(),
    })
}

/// `small` is a (possibly empty) suffix of `big`.
fn is_suffix(small: &[usize], big: &[usize]) -> bool {
    small.len() <= big.len() && big[big.len() - small.len()..] == *small
}
