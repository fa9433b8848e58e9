//! The batched screen's interval pass: from one x row's integer dot products with a block of
//! weight rows, each row's interval `[centre - radius, centre + radius]`, the best lower bound,
//! and the rows whose upper bound reaches a given floor.
//!
//! This runs once per x row and weight row, so on AVX2 it is written out (four rows a step);
//! any rounding differences between the paths only move the margins, which are far wider than
//! them: the kept set is a superset of the rows that can win on every path.
#![allow(unsafe_code)]

use super::up;
use crate::kernels::simd::Cpu;

/// Relative margin on every radius: covers the few roundings of its own computation and of
/// the centre's last product.
const MARGIN: f64 = 1.0 + 1e-9;

/// A block's per-row factors (see `Block`).
pub(super) struct Factors<'a> {
    pub(super) scale: &'a [f32],
    pub(super) max_err: &'a [f32],
    pub(super) l2_err: &'a [f32],
    pub(super) rounding: &'a [f32],
    pub(super) row_l2: &'a [f32],
}

impl Factors<'_> {
    /// The factors of rows `rows` only.
    pub(super) fn span(&self, rows: std::ops::Range<usize>) -> Factors<'_> {
        Factors {
            scale: &self.scale[rows.clone()],
            max_err: &self.max_err[rows.clone()],
            l2_err: &self.l2_err[rows.clone()],
            rounding: &self.rounding[rows.clone()],
            row_l2: &self.row_l2[rows],
        }
    }
}

/// One x row's multipliers for the factors.
#[derive(Clone, Copy)]
pub(super) struct XFactors {
    /// `Σ |x_i|` and `‖x‖₂`, rounded up.
    pub(super) abs: f64,
    pub(super) l2: f64,
    /// The norm of x's integer rounding error, rounded up and positive.
    pub(super) err_l2: f64,
    /// x's integer scale.
    pub(super) scale: f64,
    /// The subnormal allowance.
    pub(super) tiny: f64,
}

/// Push `(start + j, high_j)` for every row whose upper bound reaches `floor` (the bound
/// rounded up to f32, half the memory of a batch's many kept rows), and return the largest lower
/// bound of the block (`-inf` for none). Row indices fit `u32` (the caller's weight has them).
pub(super) fn scan(
    cpu: Cpu,
    dots: &[i32],
    f: &Factors<'_>,
    x: XFactors,
    floor: f64,
    start: usize,
    kept: &mut Vec<(u32, f32)>,
) -> f64 {
    let n = dots.len();
    assert!(
        f.scale.len() >= n
            && f.max_err.len() >= n
            && f.l2_err.len() >= n
            && f.rounding.len() >= n
            && f.row_l2.len() >= n
    );
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx512() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F was
        // confirmed; every factor holds `n` rows (asserted above).
        return unsafe { scan_avx512(dots, f, x, floor, start, kept) };
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 and FMA were
        // confirmed; every factor holds `n` rows (asserted above).
        return unsafe { scan_avx2(dots, f, x, floor, start, kept) };
    }
    let _ = cpu;
    scan_rows(0..n, dots, f, x, floor, start, kept)
}

/// Rows `rows` one at a time.
fn scan_rows(
    rows: std::ops::Range<usize>,
    dots: &[i32],
    f: &Factors<'_>,
    x: XFactors,
    floor: f64,
    start: usize,
    kept: &mut Vec<(u32, f32)>,
) -> f64 {
    let mut best = f64::NEG_INFINITY;
    for j in rows {
        // Exact: an integer below 2³¹ times a product of two f32s, rounded once.
        let centre = f64::from(dots[j]) * (x.scale * f64::from(f.scale[j]));
        let factor = |v: &[f32]| f64::from(v[j]);
        let quantised = (x.abs * factor(f.max_err)).min(x.l2 * factor(f.l2_err));
        let radius =
            (quantised + x.err_l2 * factor(f.row_l2) + x.abs * factor(f.rounding) + x.tiny)
                * MARGIN;
        best = best.max(centre - radius);
        if centre + radius >= floor {
            kept.push(((start + j) as u32, up(centre + radius)));
        }
    }
    best
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn scan_avx2(
    dots: &[i32],
    f: &Factors<'_>,
    x: XFactors,
    floor: f64,
    start: usize,
    kept: &mut Vec<(u32, f32)>,
) -> f64 {
    use std::arch::x86_64::{
        __m128i, _mm256_add_pd, _mm256_cmp_pd, _mm256_cvtepi32_pd, _mm256_cvtps_pd,
        _mm256_fmadd_pd, _mm256_max_pd, _mm256_min_pd, _mm256_movemask_pd, _mm256_mul_pd,
        _mm256_set1_pd, _mm256_storeu_pd, _mm256_sub_pd, _mm_loadu_ps, _mm_loadu_si128, _CMP_GE_OQ,
    };
    let n = dots.len();
    let full = n - n % 4;
    let (abs, l2, err, xs) = (
        _mm256_set1_pd(x.abs),
        _mm256_set1_pd(x.l2),
        _mm256_set1_pd(x.err_l2),
        _mm256_set1_pd(x.scale),
    );
    let (tiny, margin, fl) = (
        _mm256_set1_pd(x.tiny),
        _mm256_set1_pd(MARGIN),
        _mm256_set1_pd(floor),
    );
    let mut best = _mm256_set1_pd(f64::NEG_INFINITY);
    let mut j = 0;
    while j < full {
        // SAFETY: rows `j .. j + 4` are inside `dots` and every factor (the caller's bounds).
        unsafe {
            let d = _mm256_cvtepi32_pd(_mm_loadu_si128(dots.as_ptr().add(j).cast::<__m128i>()));
            let s = _mm256_cvtps_pd(_mm_loadu_ps(f.scale.as_ptr().add(j)));
            let centre = _mm256_mul_pd(d, _mm256_mul_pd(xs, s));
            let quantised = _mm256_min_pd(
                _mm256_mul_pd(
                    abs,
                    _mm256_cvtps_pd(_mm_loadu_ps(f.max_err.as_ptr().add(j))),
                ),
                _mm256_mul_pd(l2, _mm256_cvtps_pd(_mm_loadu_ps(f.l2_err.as_ptr().add(j)))),
            );
            let row_l2 = _mm256_cvtps_pd(_mm_loadu_ps(f.row_l2.as_ptr().add(j)));
            let r = _mm256_fmadd_pd(err, row_l2, quantised);
            let rounding = _mm256_cvtps_pd(_mm_loadu_ps(f.rounding.as_ptr().add(j)));
            let r = _mm256_fmadd_pd(abs, rounding, r);
            let radius = _mm256_mul_pd(_mm256_add_pd(r, tiny), margin);
            let high = _mm256_add_pd(centre, radius);
            best = _mm256_max_pd(best, _mm256_sub_pd(centre, radius));
            let mask = _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_GE_OQ>(high, fl));
            if mask != 0 {
                let mut h = [0.0f64; 4];
                _mm256_storeu_pd(h.as_mut_ptr(), high);
                keep(mask as u32, &h, start + j, kept);
            }
        }
        j += 4;
    }
    let mut lanes = [0.0f64; 4];
    // SAFETY: `lanes` holds four f64s.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), best) };
    let tail = scan_rows(full..n, dots, f, x, floor, start, kept);
    lanes.iter().fold(tail, |m, &v| m.max(v))
}

/// [`scan_avx2`] eight rows a step: at batch 32 the scan was a fifth of the screen's time on
/// AVX-512, next to integer tiles twice as fast as AVX2's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn scan_avx512(
    dots: &[i32],
    f: &Factors<'_>,
    x: XFactors,
    floor: f64,
    start: usize,
    kept: &mut Vec<(u32, f32)>,
) -> f64 {
    use std::arch::x86_64::{
        __m256i, _mm256_loadu_ps, _mm256_loadu_si256, _mm512_add_pd, _mm512_cmp_pd_mask,
        _mm512_cvtepi32_pd, _mm512_cvtps_pd, _mm512_fmadd_pd, _mm512_max_pd, _mm512_min_pd,
        _mm512_mul_pd, _mm512_reduce_max_pd, _mm512_set1_pd, _mm512_storeu_pd, _mm512_sub_pd,
        _CMP_GE_OQ,
    };
    const STEP: usize = 8;
    let n = dots.len();
    let full = n - n % STEP;
    let (abs, l2, err, xs) = (
        _mm512_set1_pd(x.abs),
        _mm512_set1_pd(x.l2),
        _mm512_set1_pd(x.err_l2),
        _mm512_set1_pd(x.scale),
    );
    let (tiny, margin, fl) = (
        _mm512_set1_pd(x.tiny),
        _mm512_set1_pd(MARGIN),
        _mm512_set1_pd(floor),
    );
    let mut best = _mm512_set1_pd(f64::NEG_INFINITY);
    let mut j = 0;
    while j < full {
        // SAFETY: rows `j .. j + 8` are inside `dots` and every factor (the caller's bounds).
        unsafe {
            let load = |v: &[f32]| _mm512_cvtps_pd(_mm256_loadu_ps(v.as_ptr().add(j)));
            let d = _mm512_cvtepi32_pd(_mm256_loadu_si256(dots.as_ptr().add(j).cast::<__m256i>()));
            let centre = _mm512_mul_pd(d, _mm512_mul_pd(xs, load(f.scale)));
            let quantised = _mm512_min_pd(
                _mm512_mul_pd(abs, load(f.max_err)),
                _mm512_mul_pd(l2, load(f.l2_err)),
            );
            let r = _mm512_fmadd_pd(err, load(f.row_l2), quantised);
            let r = _mm512_fmadd_pd(abs, load(f.rounding), r);
            let radius = _mm512_mul_pd(_mm512_add_pd(r, tiny), margin);
            let high = _mm512_add_pd(centre, radius);
            best = _mm512_max_pd(best, _mm512_sub_pd(centre, radius));
            let mask = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(high, fl);
            if mask != 0 {
                let mut h = [0.0f64; STEP];
                _mm512_storeu_pd(h.as_mut_ptr(), high);
                keep(u32::from(mask), &h, start + j, kept);
            }
        }
        j += STEP;
    }
    let tail = scan_rows(full..n, dots, f, x, floor, start, kept);
    tail.max(_mm512_reduce_max_pd(best))
}

/// Push `(first + l, high[l])` for each lane `l` set in `mask`. Out of line: a push may grow
/// the vector, and a call inside the vector loops made the compiler keep every constant of
/// theirs on the stack (the scan ran at half speed).
#[cold]
#[inline(never)]
fn keep(mask: u32, high: &[f64], first: usize, kept: &mut Vec<(u32, f32)>) {
    for (l, &h) in high.iter().enumerate() {
        if mask & (1 << l) != 0 {
            kept.push(((first + l) as u32, up(h)));
        }
    }
}
