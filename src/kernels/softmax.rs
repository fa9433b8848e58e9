//! `softmax` and `argmax` over the last axis.

use super::error::KernelError;
use super::math;
use super::parallel;
use super::simd::{self, Cpu};
use super::tensor::Tensor;

/// Elements below which a thread start does not pay off.
const MIN_TASK_ELEMS: usize = 1 << 15;

/// Softmax over the last axis, in f32: `m = max(x)`, `e_i = exp(x_i - m)` (the difference
/// rounded to f32, `exp` taken in f64 and rounded once), `s = Σ e_i` accumulated in f64 in
/// ascending order and rounded to f32, then `e_i / s`.
///
/// A row containing NaN, or whose maximum is ±infinity, comes out NaN (as in PyTorch). An empty
/// last axis gives an empty result.
pub fn softmax(x: &Tensor) -> Result<Tensor, KernelError> {
    let d = last_axis("softmax", x)?;
    let src = x.data();
    let mut out = vec![0.0f32; src.len()];
    let cpu = simd::cpu();
    if d > 0 {
        parallel::for_rows(&mut out, d, MIN_TASK_ELEMS.div_ceil(d), |rows, dst| {
            let s = &src[rows.start * d..rows.end * d];
            for (o, xr) in dst.chunks_exact_mut(d).zip(s.chunks_exact(d)) {
                softmax_row(cpu, xr, o);
            }
        });
    }
    Tensor::new(x.shape().to_vec(), out).map_err(|_| KernelError::TooLarge {
        op: "softmax",
        shape: x.shape().to_vec(),
    })
}

/// Softmax of one row into `out` (same length), in the order [`softmax`] documents.
#[inline]
pub(crate) fn softmax_row(cpu: Cpu, x: &[f32], out: &mut [f32]) {
    out.copy_from_slice(x);
    let s = exponentials(cpu, out);
    for o in out.iter_mut() {
        *o /= s;
    }
}

/// `x` replaced by `e_i = exp(x_i - max x)`, and `Σ e_i` (in f64, ascending, rounded to f32):
/// [`softmax_row`] but for the division, which attention does per column. A NaN makes the
/// maximum NaN, and so every `e_i`.
#[inline(always)]
pub(crate) fn exponentials(cpu: Cpu, x: &mut [f32]) -> f32 {
    exp_less_max(cpu, x);
    let mut sum = 0.0f64;
    for v in x.iter() {
        sum += f64::from(*v);
    }
    sum as f32
}

/// `x` replaced by `e_i = exp(x_i - max x)`: [`exponentials`] without the sum. On AVX2 the
/// exponentials are taken four at a time ([`math::exp4_avx2`]), on AVX-512 eight
/// ([`math::exp8_avx512`]): the same bits.
#[inline(always)]
pub(crate) fn exp_less_max(cpu: Cpu, x: &mut [f32]) {
    let m = max_or_nan(x);
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx512() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F was
        // detected.
        #[allow(unsafe_code)]
        unsafe {
            exp_less_avx512(x, m)
        };
    } else if cpu.has_avx2() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 and FMA were
        // detected.
        #[allow(unsafe_code)]
        unsafe {
            exp_less_avx2(x, m)
        };
    } else {
        exp_less(x, m);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = cpu;
        exp_less(x, m);
    }
}

/// Each row's [`exponentials`] sum (in f64, ascending, rounded to f32) into `sums`, for the
/// rows `x[starts[i]..starts[i + 1]]`: up to eight rows side by side, so that their chains of
/// additions overlap, where one row's waited on each addition in turn. Attention's rows, with
/// the exponentials eight at a time as well: one global layer's prefill of batch 8, prompt
/// 1024 (270m shape, Zen 5, 2 threads, three rounds) took 95.6-98.8 ms against 107.8-112.7.
pub(crate) fn row_sums(x: &[f32], starts: &[usize], sums: &mut Vec<f32>) {
    sums.clear();
    let rows = starts.len().saturating_sub(1);
    let row = |i: usize| &x[starts[i]..starts[i + 1]];
    let mut i = 0;
    while i < rows {
        let side = match rows - i {
            n if n >= 8 => 8,
            n if n >= 4 => 4,
            _ => 1,
        };
        match side {
            8 => sums.extend(side_by_side::<8>(std::array::from_fn(|r| row(i + r)))),
            4 => sums.extend(side_by_side::<4>(std::array::from_fn(|r| row(i + r)))),
            _ => sums.extend(side_by_side::<1>([row(i)])),
        }
        i += side;
    }
}

/// The f64 ascending sums of `N` rows, their additions interleaved, each rounded to f32.
#[inline(always)]
fn side_by_side<const N: usize>(rows: [&[f32]; N]) -> [f32; N] {
    let common = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let heads: [&[f32]; N] = rows.map(|r| &r[..common]);
    let mut acc = [0.0f64; N];
    for k in 0..common {
        for (a, row) in acc.iter_mut().zip(&heads) {
            *a += f64::from(row[k]);
        }
    }
    for (a, row) in acc.iter_mut().zip(&rows) {
        for v in &row[common..] {
            *a += f64::from(*v);
        }
    }
    acc.map(|a| a as f32)
}

/// The largest of `x` (at least -infinity), or NaN if any is. Eight running maxima side by side
/// (one vector), where a fold of one waited on each compare in turn; the maximum is the same
/// value in any order (of two zeros either may come out, and `x_i - m` then gives a zero of
/// one sign or the other, whose `exp` is 1 either way).
#[inline(always)]
fn max_or_nan(x: &[f32]) -> f32 {
    const WIDE: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; WIDE];
    let mut nan = false;
    let mut chunks = x.chunks_exact(WIDE);
    for c in &mut chunks {
        for l in 0..WIDE {
            nan |= c[l].is_nan();
            lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
        }
    }
    for &v in chunks.remainder() {
        nan |= v.is_nan();
        lanes[0] = if v > lanes[0] { v } else { lanes[0] };
    }
    if nan {
        return f32::NAN;
    }
    let mut m = lanes[0];
    for &v in &lanes[1..] {
        m = if v > m { v } else { m };
    }
    m
}

/// `x_i` replaced by `exp(x_i - m)`.
#[inline(always)]
fn exp_less(x: &mut [f32], m: f32) {
    for v in x.iter_mut() {
        *v = math::exp(*v - m);
    }
}

/// [`exp_less`], four at a time.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(unsafe_code)]
unsafe fn exp_less_avx2(x: &mut [f32], m: f32) {
    use std::arch::x86_64::{
        _mm256_cvtps_pd, _mm_loadu_ps, _mm_set1_ps, _mm_storeu_ps, _mm_sub_ps,
    };
    let mut quads = x.chunks_exact_mut(4);
    let mv = _mm_set1_ps(m);
    for q in &mut quads {
        // SAFETY: `q` holds four f32s (an unaligned load and store); the caller guarantees AVX2
        // and FMA for `exp4_avx2`.
        unsafe {
            let d = _mm_sub_ps(_mm_loadu_ps(q.as_ptr()), mv);
            _mm_storeu_ps(q.as_mut_ptr(), math::exp4_avx2(_mm256_cvtps_pd(d)));
        }
    }
    exp_less(quads.into_remainder(), m);
}

/// [`exp_less`], eight at a time.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(unsafe_code)]
unsafe fn exp_less_avx512(x: &mut [f32], m: f32) {
    use std::arch::x86_64::{
        _mm256_loadu_ps, _mm256_set1_ps, _mm256_storeu_ps, _mm256_sub_ps, _mm512_cvtps_pd,
    };
    let mut eights = x.chunks_exact_mut(8);
    let mv = _mm256_set1_ps(m);
    for e in &mut eights {
        // SAFETY: `e` holds eight f32s (an unaligned load and store); the caller guarantees
        // AVX-512F for `exp8_avx512`.
        unsafe {
            let d = _mm256_sub_ps(_mm256_loadu_ps(e.as_ptr()), mv);
            _mm256_storeu_ps(e.as_mut_ptr(), math::exp8_avx512(_mm512_cvtps_pd(d)));
        }
    }
    exp_less(eights.into_remainder(), m);
}

/// Index of the largest value along the last axis, one per row (`x [..., n]` gives
/// `prod(...)` indices). Ties go to the lowest index. NaN counts as larger than every number,
/// so a row containing NaN gives the index of its first NaN (both as `torch.argmax`).
pub fn argmax(x: &Tensor) -> Result<Vec<u32>, KernelError> {
    let d = last_axis("argmax", x)?;
    if d == 0 {
        return Err(KernelError::EmptyAxis {
            op: "argmax",
            shape: x.shape().to_vec(),
        });
    }
    if u32::try_from(d - 1).is_err() {
        return Err(KernelError::IndexOverflow {
            op: "argmax",
            shape: x.shape().to_vec(),
        });
    }
    let src = x.data();
    let rows = src.len() / d;
    let parts = parallel::map_ranges(rows, MIN_TASK_ELEMS.div_ceil(d), 1, 1, |r| {
        src[r.start * d..r.end * d]
            .chunks_exact(d)
            .map(argmax_row)
            .collect::<Vec<u32>>()
    });
    Ok(parts.into_iter().flat_map(|(_, v)| v).collect())
}

/// First index of the maximum of a non-empty row; NaN beats everything.
#[inline]
pub(crate) fn argmax_row(row: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            best = i;
            break;
        }
        if v > best_v || i == 0 {
            best = i;
            best_v = v;
        }
    }
    // `row.len() - 1` fits in u32 (checked by the caller), so `best` does.
    best as u32
}

fn last_axis(op: &'static str, x: &Tensor) -> Result<usize, KernelError> {
    x.shape().last().copied().ok_or_else(|| KernelError::Rank {
        op,
        name: "x",
        shape: x.shape().to_vec(),
        need: "[..., n] with at least one dimension",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_summed_side_by_side_give_each_rows_own_sum() {
        // Rows of uneven lengths (empty ones too), in every count from 0 to 19, so that every
        // grouping (eight, four, one) and every uneven tail runs.
        let mut s = 0x9e37_79b9u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        for rows in 0..20usize {
            let lens: Vec<usize> = (0..rows).map(|_| (next() % 40) as usize).collect();
            let mut starts = vec![0];
            for l in &lens {
                starts.push(starts[starts.len() - 1] + l);
            }
            let x: Vec<f32> = (0..starts[rows])
                .map(|_| (next() >> 8) as f32 * 2f32.powi(-((next() % 30) as i32)))
                .collect();
            let mut sums = Vec::new();
            row_sums(&x, &starts, &mut sums);
            assert_eq!(sums.len(), rows);
            for (i, got) in sums.iter().enumerate() {
                let mut want = 0.0f64;
                for v in &x[starts[i]..starts[i + 1]] {
                    want += f64::from(*v);
                }
                assert_eq!(got.to_bits(), (want as f32).to_bits(), "row {i} of {rows}");
            }
        }
    }

    /// The one-at-a-time fold `max_or_nan` replaced.
    fn fold(x: &[f32]) -> f32 {
        x.iter().copied().fold(f32::NEG_INFINITY, |a, b| {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                a.max(b)
            }
        })
    }

    #[test]
    fn the_maximum_is_the_folds_for_every_length_and_special_value() {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            0.0,
            -1e30,
            3.5,
        ];
        let mut s = 12345u32;
        for len in 0..40 {
            for round in 0..50 {
                let mut x: Vec<f32> = (0..len)
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 17;
                        s ^= s << 5;
                        (s % 2001) as f32 - 1000.0
                    })
                    .collect();
                if len > 0 && round % 5 == 0 {
                    x[(s as usize) % len] = specials[round / 5 % specials.len()];
                }
                let (got, want) = (max_or_nan(&x), fold(&x));
                if want.is_nan() {
                    assert!(got.is_nan(), "{x:?}");
                } else {
                    assert_eq!(got, want, "{x:?}");
                }
            }
        }
    }
}
