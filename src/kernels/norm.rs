//! `rms_norm`: `x * rsqrt(mean(x²) + eps) * (offset + w)` over the last axis, in f32.
#![allow(unsafe_code)]

use super::error::KernelError;
use super::parallel;
use super::simd::{self, Cpu};
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
    let cpu = simd::cpu();
    if d > 0 {
        parallel::for_rows(&mut out, d, MIN_TASK_ELEMS.div_ceil(d), |rows, dst| {
            let s = &src[rows.start * d..rows.end * d];
            let group = GROUP * d;
            let mut dst = dst.chunks_exact_mut(group);
            let mut s = s.chunks_exact(group);
            for (o, xr) in (&mut dst).zip(&mut s) {
                norm_group(cpu, xr, &gain, eps, o);
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

/// Rows normed together by [`norm_rows`] (and eight lanes of [`sums8_avx512`]).
const GROUP: usize = 8;
const _: () = assert!(GROUP == 8, "sums8_avx512 holds one row a lane");

/// [`GROUP`] consecutive rows, their sums of squares eight lanes at a time on AVX-512.
fn norm_group(cpu: Cpu, x: &[f32], gain: &[f32], eps: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx512() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F, AVX2 and
        // FMA were confirmed.
        let sums = unsafe { sums8_avx512(x, gain.len()) };
        finish(&sums, x, gain, eps, out);
        return;
    }
    let _ = cpu;
    norm_rows::<GROUP>(x, gain, eps, out);
}

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
    finish(&sums, x, gain, eps, out);
}

/// The rows' outputs from their sums of squares.
#[inline]
fn finish(sums: &[f64], x: &[f32], gain: &[f32], eps: f32, out: &mut [f32]) {
    let d = gain.len();
    for ((o, xr), &sum) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)).zip(sums) {
        let mean = sum as f32 / d as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        for ((o, &v), &g) in o.iter_mut().zip(xr).zip(gain) {
            *o = (v * inv) * g;
        }
    }
}

/// The sums of squares of eight rows of `d` values (`x` is `[8, d]`), row `r` in lane `r`:
/// [`norm_rows`]' chains, the same f32 squares added in f64 in the same ascending order, one
/// vector addition for all eight. Eight columns at a time are loaded a row each, squared and
/// transposed, so that each addition takes one column of all eight rows. At batch 32 the
/// scalar chains were 3 % of a decode step, all on one thread.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn sums8_avx512(x: &[f32], d: usize) -> [f64; GROUP] {
    use std::arch::x86_64::{
        __m256, _mm256_loadu_ps, _mm256_mul_ps, _mm256_permute2f128_ps, _mm256_setr_ps,
        _mm256_shuffle_ps, _mm256_unpackhi_ps, _mm256_unpacklo_ps, _mm512_add_pd, _mm512_cvtps_pd,
        _mm512_setzero_pd, _mm512_storeu_pd,
    };
    assert!(x.len() >= GROUP * d);
    let mut acc = _mm512_setzero_pd();
    let whole = d - d % 8;
    let mut c = 0;
    while c < whole {
        // SAFETY: row `r`'s columns `c .. c + 8` lie inside `x` (`c + 8 <= d`, asserted length).
        let sq: [__m256; GROUP] = std::array::from_fn(|r| unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(r * d + c));
            _mm256_mul_ps(v, v)
        });
        let t = [
            _mm256_unpacklo_ps(sq[0], sq[1]),
            _mm256_unpackhi_ps(sq[0], sq[1]),
            _mm256_unpacklo_ps(sq[2], sq[3]),
            _mm256_unpackhi_ps(sq[2], sq[3]),
            _mm256_unpacklo_ps(sq[4], sq[5]),
            _mm256_unpackhi_ps(sq[4], sq[5]),
            _mm256_unpacklo_ps(sq[6], sq[7]),
            _mm256_unpackhi_ps(sq[6], sq[7]),
        ];
        // Columns (0, 4), (1, 5), (2, 6), (3, 7) of rows 0-3, then of rows 4-7.
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xee>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xee>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xee>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xee>(t[5], t[7]),
        ];
        let columns = [
            _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
            _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
        ];
        for col in columns {
            acc = _mm512_add_pd(acc, _mm512_cvtps_pd(col));
        }
        c += 8;
    }
    for c in whole..d {
        let v = |r: usize| x[r * d + c];
        let col = _mm256_setr_ps(v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(col, col)));
    }
    let mut sums = [0.0f64; GROUP];
    // SAFETY: `sums` holds eight f64s.
    unsafe { _mm512_storeu_pd(sums.as_mut_ptr(), acc) };
    sums
}
