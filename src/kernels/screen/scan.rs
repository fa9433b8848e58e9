//! The batched screen's interval pass: from one x row's integer dot products with a block of
//! weight rows, each row's interval `[centre - radius, centre + radius]`, the best lower bound,
//! and the rows whose upper bound reaches a given floor.
//!
//! This runs once per x row and weight row, so on AVX2 it is written out (four rows a step);
//! any rounding differences between the paths only move the margins, which are far wider than
//! them: the kept set is a superset of the rows that can win on every path.
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use super::down;
use super::up;
#[cfg(any(test, target_arch = "x86_64"))]
use super::{UPPER_ABSOLUTE, UPPER_SLACK};
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
    /// The largest of each factor over each [`SPAN`] of these rows, in order
    /// ([`Largest::spans`]).
    pub(super) largest: &'a [Largest],
}

/// Rows scanned between two raisings of the floor, each with one [`Largest`] for the
/// prefilter's first radius.
pub(super) const SPAN: usize = 256;

/// The largest of each bound factor over some rows (a NaN counted as `+inf`): with one x row's
/// multipliers, a radius no row of them exceeds, which the vector prefilters use for every row
/// before each row's own (four loads and seven operations fewer per sixteen rows where it is
/// enough).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Largest {
    pub(super) max_err: f32,
    pub(super) l2_err: f32,
    pub(super) rounding: f32,
    pub(super) row_l2: f32,
}

impl Largest {
    /// [`Largest::of`] each [`SPAN`] rows.
    pub(super) fn spans(
        max_err: &[f32],
        l2_err: &[f32],
        rounding: &[f32],
        row_l2: &[f32],
    ) -> Vec<Largest> {
        let n = max_err.len();
        (0..n)
            .step_by(SPAN)
            .map(|at| {
                let r = at..(at + SPAN).min(n);
                Largest::of(
                    &max_err[r.clone()],
                    &l2_err[r.clone()],
                    &rounding[r.clone()],
                    &row_l2[r],
                )
            })
            .collect()
    }

    fn of(max_err: &[f32], l2_err: &[f32], rounding: &[f32], row_l2: &[f32]) -> Largest {
        let top = |v: &[f32]| {
            v.iter().fold(
                0.0f32,
                |m, &f| {
                    if f.is_nan() {
                        f32::INFINITY
                    } else {
                        m.max(f)
                    }
                },
            )
        };
        Largest {
            max_err: top(max_err),
            l2_err: top(l2_err),
            rounding: top(rounding),
            row_l2: top(row_l2),
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

/// Push `(start + j, high_j)` for every row whose upper bound reaches the floor (the bound
/// rounded up to f32, half the memory of a batch's many kept rows), and return the largest lower
/// bound of the block (`-inf` for none). The floor starts at `floor` and rises to the best lower
/// bound so far after each [`SPAN`] of rows: a row below it is below the final floor too. Row
/// indices fit `u32` (the caller's weight has them). One call takes a whole block: a call a
/// span, each with its own setup, was a third of the pass's time (see [`scan_avx512`]).
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
            && f.largest.len() >= n.div_ceil(SPAN)
    );
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx512() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F and AVX2
        // were confirmed; every factor holds `n` rows (asserted above).
        return unsafe { scan_avx512::<true>(dots, f, x, floor, start, kept) };
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 and FMA were
        // confirmed; every factor holds `n` rows (asserted above).
        return unsafe { scan_avx2::<true>(dots, f, x, floor, start, kept) };
    }
    let _ = cpu;
    let (mut floor, mut best) = (floor, f64::NEG_INFINITY);
    for at in (0..n).step_by(SPAN) {
        best = best.max(scan_rows(
            at..(at + SPAN).min(n),
            dots,
            f,
            x,
            floor,
            start,
            kept,
        ));
        floor = floor.max(best);
    }
    best
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

/// The interval pass on AVX2, eight rows a step, with the same f32 prefilter as
/// [`scan_avx512`]: a group of eight whose overestimates are all below the floor is dismissed,
/// and each half of four with a row left goes through the f64 interval. (`PREFILTER` false:
/// every row through the f64 interval, what the tests compare with.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn scan_avx2<const PREFILTER: bool>(
    dots: &[i32],
    f: &Factors<'_>,
    x: XFactors,
    mut floor: f64,
    start: usize,
    kept: &mut Vec<(u32, f32)>,
) -> f64 {
    use std::arch::x86_64::{
        __m128i, __m256, __m256i, _mm256_add_pd, _mm256_add_ps, _mm256_andnot_ps, _mm256_cmp_pd,
        _mm256_cmp_ps, _mm256_cmpeq_epi8, _mm256_cvtepi32_pd, _mm256_cvtepi32_ps, _mm256_cvtps_pd,
        _mm256_fmadd_pd, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_max_pd,
        _mm256_min_pd, _mm256_min_ps, _mm256_movemask_epi8, _mm256_movemask_pd, _mm256_movemask_ps,
        _mm256_mul_pd, _mm256_mul_ps, _mm256_set1_pd, _mm256_set1_ps, _mm256_setzero_si256,
        _mm256_storeu_pd, _mm256_sub_pd, _mm_loadu_ps, _mm_loadu_si128, _CMP_GE_OQ, _CMP_NLT_UQ,
    };
    const HALF: usize = 4;
    const STEP: usize = 2 * HALF;
    let n = dots.len();
    let full = n - n % STEP;
    let (abs, l2, err, xs) = (
        _mm256_set1_pd(x.abs),
        _mm256_set1_pd(x.l2),
        _mm256_set1_pd(x.err_l2),
        _mm256_set1_pd(x.scale),
    );
    let (tiny, margin) = (_mm256_set1_pd(x.tiny), _mm256_set1_pd(MARGIN));
    let mut fl = _mm256_set1_pd(floor);
    let u = UpperF32::new(x);
    let xs32 = _mm256_set1_ps(u.scale);
    let (abs32, l2_32, err32, tiny32) = (
        _mm256_set1_ps(u.abs),
        _mm256_set1_ps(u.l2),
        _mm256_set1_ps(u.err_l2),
        _mm256_set1_ps(u.tiny),
    );
    let (slack, absolute, sign) = (
        _mm256_set1_ps(UPPER_SLACK),
        _mm256_set1_ps(UPPER_ABSOLUTE),
        _mm256_set1_ps(-0.0),
    );
    let mut floor32 = _mm256_set1_ps(down(floor));
    let mut best = _mm256_set1_pd(f64::NEG_INFINITY);
    // The prefilter's overestimate of rows `j .. j + 8` with the radius `$r` (the span's, or
    // each row's own), the same operations as `upper_f32` eight lanes at a time; the lanes
    // not below the floor, or NaN (the f64 interval decides). A macro rather than a closure,
    // which would hold `floor32` borrowed while the loop raises it.
    macro_rules! passes {
        ($j:expr, $r:expr) => {{
            let j = $j;
            // SAFETY: rows `j .. j + 8` are inside `dots` and every factor (the caller's
            // bounds); this function enables AVX2 and FMA.
            unsafe {
                let d =
                    _mm256_cvtepi32_ps(_mm256_loadu_si256(dots.as_ptr().add(j).cast::<__m256i>()));
                let scale = _mm256_loadu_ps(f.scale.as_ptr().add(j));
                let centre = _mm256_mul_ps(d, _mm256_mul_ps(xs32, scale));
                let r: __m256 = $r(j);
                let magnitude = _mm256_andnot_ps(sign, centre);
                let widen = _mm256_fmadd_ps(_mm256_add_ps(magnitude, r), slack, absolute);
                let high = _mm256_add_ps(_mm256_add_ps(centre, r), widen);
                _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(high, floor32))
            }
        }};
    }
    let mut at = 0;
    while at < full {
        if at > 0 {
            let high = max_of_4(best);
            if high > floor {
                floor = high;
                fl = _mm256_set1_pd(floor);
                floor32 = _mm256_set1_ps(down(floor));
            }
        }
        let r32 = _mm256_set1_ps(u.radius(f.largest[at / SPAN]));
        let end = (at + SPAN).min(full);
        let steps = (end - at) / STEP;
        // Each step's rows left by the span's radius, with no branch (as in `scan_avx512`),
        // then only the steps with a row left, by the set bits of one mask.
        let mut masks = [0xffu8; SPAN / STEP];
        let mut left = if steps == 32 {
            u32::MAX
        } else {
            (1 << steps) - 1
        };
        if PREFILTER {
            for (mask, j) in masks.iter_mut().zip((at..end).step_by(STEP)) {
                *mask = passes!(j, |_| r32) as u8;
            }
            // SAFETY: `masks` is 32 bytes; this function enables AVX2.
            left &= unsafe {
                let v = _mm256_loadu_si256(masks.as_ptr().cast::<__m256i>());
                !(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_setzero_si256())) as u32)
            };
        }
        while left != 0 {
            let step = left.trailing_zeros() as usize;
            left &= left - 1;
            let j = at + step * STEP;
            // Again with each row's own radius (see `scan_avx512`).
            let need = if PREFILTER {
                i32::from(masks[step])
                    & passes!(j, |j: usize| {
                        let load = |v: &[f32]| _mm256_loadu_ps(v.as_ptr().add(j));
                        let quantised = _mm256_min_ps(
                            _mm256_mul_ps(abs32, load(f.max_err)),
                            _mm256_mul_ps(l2_32, load(f.l2_err)),
                        );
                        let r = _mm256_fmadd_ps(err32, load(f.row_l2), quantised);
                        _mm256_add_ps(_mm256_fmadd_ps(abs32, load(f.rounding), r), tiny32)
                    })
            } else {
                0xff
            };
            for h in 0..2 {
                if (need >> (HALF * h)) & 0xf == 0 {
                    continue;
                }
                let j = j + HALF * h;
                // SAFETY: rows `j .. j + 4` are inside `dots` and every factor (as above).
                unsafe {
                    let load = |v: &[f32]| _mm256_cvtps_pd(_mm_loadu_ps(v.as_ptr().add(j)));
                    let d =
                        _mm256_cvtepi32_pd(_mm_loadu_si128(dots.as_ptr().add(j).cast::<__m128i>()));
                    let centre = _mm256_mul_pd(d, _mm256_mul_pd(xs, load(f.scale)));
                    let quantised = _mm256_min_pd(
                        _mm256_mul_pd(abs, load(f.max_err)),
                        _mm256_mul_pd(l2, load(f.l2_err)),
                    );
                    let r = _mm256_fmadd_pd(err, load(f.row_l2), quantised);
                    let r = _mm256_fmadd_pd(abs, load(f.rounding), r);
                    let radius = _mm256_mul_pd(_mm256_add_pd(r, tiny), margin);
                    let high = _mm256_add_pd(centre, radius);
                    best = _mm256_max_pd(best, _mm256_sub_pd(centre, radius));
                    let mask = _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_GE_OQ>(high, fl));
                    if mask != 0 {
                        let mut h = [0.0f64; HALF];
                        _mm256_storeu_pd(h.as_mut_ptr(), high);
                        keep(mask as u32, &h, start + j, kept);
                    }
                }
            }
        }
        at = end;
    }
    let high = max_of_4(best);
    let tail = scan_rows(full..n, dots, f, x, floor.max(high), start, kept);
    tail.max(high)
}

/// The largest of four f64 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn max_of_4(v: std::arch::x86_64::__m256d) -> f64 {
    let mut lanes = [0.0f64; 4];
    // SAFETY: `lanes` holds four f64s.
    unsafe { std::arch::x86_64::_mm256_storeu_pd(lanes.as_mut_ptr(), v) };
    lanes.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v))
}

/// The interval pass sixteen rows a step, most of them dismissed in f32 first: past a task's
/// first rows, nearly every row's upper bound is far below the floor, and the f64 interval (six
/// widening converts and eleven operations a vector of eight rows) was a fifth of the
/// screen's time at batch 32 and 128 next to the integer tiles. A row is dismissed only when
/// an f32 overestimate of its upper bound, widened by far more than its few roundings, is
/// below the floor rounded down ([`upper_f32`]): that row's exact upper bound is below the
/// floor too, so it would not be kept and its lower bound could not raise the floor. Every
/// other row goes through the f64 interval as before, so the kept rows are the same. The
/// overestimate first takes one radius for the whole span, from its [`Largest`] factors:
/// only the centre is per row (on Zen 5, one thread, `kernel_bench ARGMAX=1` on a random
/// `[262144, 640]` head, the pass took 9.6 → 7.3 ms of a 128-row call and 2.6 → 1.95 of a
/// 32-row one, the same rows kept). Real heads' rows are less alike than random ones, and a
/// group that radius keeps is tried again with each row's own radius before the f64 interval
/// (the real 270M file at batch 32: the head 686 → 647 ms of 31 steps on one thread).
/// (`PREFILTER` false: every row through the f64 interval, what the tests compare with.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
fn scan_avx512<const PREFILTER: bool>(
    dots: &[i32],
    f: &Factors<'_>,
    x: XFactors,
    mut floor: f64,
    start: usize,
    kept: &mut Vec<(u32, f32)>,
) -> f64 {
    use std::arch::x86_64::{
        __m256i, __m512i, _mm256_cmpeq_epi16, _mm256_loadu_ps, _mm256_loadu_si256,
        _mm256_movemask_epi8, _mm256_setzero_si256, _mm512_abs_ps, _mm512_add_pd, _mm512_add_ps,
        _mm512_cmp_pd_mask, _mm512_cmp_ps_mask, _mm512_cvtepi32_pd, _mm512_cvtepi32_ps,
        _mm512_cvtps_pd, _mm512_fmadd_pd, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_loadu_si512,
        _mm512_max_pd, _mm512_min_pd, _mm512_min_ps, _mm512_mul_pd, _mm512_mul_ps,
        _mm512_reduce_max_pd, _mm512_set1_pd, _mm512_set1_ps, _mm512_storeu_pd, _mm512_sub_pd,
        _CMP_GE_OQ, _CMP_NLT_UQ,
    };
    const HALF: usize = 8;
    const STEP: usize = 2 * HALF;
    const CHUNK: usize = SPAN;
    const _: () = assert!(SPAN.is_multiple_of(STEP));
    let n = dots.len();
    let full = n - n % STEP;
    let (abs, l2, err, xs) = (
        _mm512_set1_pd(x.abs),
        _mm512_set1_pd(x.l2),
        _mm512_set1_pd(x.err_l2),
        _mm512_set1_pd(x.scale),
    );
    let (tiny, margin) = (_mm512_set1_pd(x.tiny), _mm512_set1_pd(MARGIN));
    let mut fl = _mm512_set1_pd(floor);
    let u = UpperF32::new(x);
    let xs32 = _mm512_set1_ps(u.scale);
    let (abs32, l2_32, err32, tiny32) = (
        _mm512_set1_ps(u.abs),
        _mm512_set1_ps(u.l2),
        _mm512_set1_ps(u.err_l2),
        _mm512_set1_ps(u.tiny),
    );
    let (slack, absolute) = (_mm512_set1_ps(UPPER_SLACK), _mm512_set1_ps(UPPER_ABSOLUTE));
    let mut floor32 = _mm512_set1_ps(down(floor));
    let mut best = _mm512_set1_pd(f64::NEG_INFINITY);
    let mut at = 0;
    while at < full {
        if at > 0 {
            let high = _mm512_reduce_max_pd(best);
            if high > floor {
                floor = high;
                fl = _mm512_set1_pd(floor);
                floor32 = _mm512_set1_ps(down(floor));
            }
        }
        let r = _mm512_set1_ps(u.radius(f.largest[at / SPAN]));
        let end = (at + CHUNK).min(full);
        // The prefilter's masks for a chunk first, with no branch: which rows pass is as good
        // as random, and a branch on each group's mask was mispredicted often enough to cost
        // more than the arithmetic.
        let mut masks = [u16::MAX; CHUNK / STEP];
        let mut any = u16::MAX;
        if PREFILTER {
            any = 0;
            for (mask, j) in masks.iter_mut().zip((at..end).step_by(STEP)) {
                // SAFETY: rows `j .. j + 16` are inside `dots` and every factor (the caller's
                // bounds).
                *mask = unsafe {
                    let d = _mm512_cvtepi32_ps(_mm512_loadu_si512(
                        dots.as_ptr().add(j).cast::<__m512i>(),
                    ));
                    let scale = _mm512_loadu_ps(f.scale.as_ptr().add(j));
                    let centre = _mm512_mul_ps(d, _mm512_mul_ps(xs32, scale));
                    // `upper_f32`'s overestimate, the same operations sixteen lanes at a time.
                    let widen =
                        _mm512_fmadd_ps(_mm512_add_ps(_mm512_abs_ps(centre), r), slack, absolute);
                    let high = _mm512_add_ps(_mm512_add_ps(centre, r), widen);
                    // Not below the floor, or NaN: the f64 interval decides.
                    _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(high, floor32)
                };
                any |= *mask;
            }
        }
        if any == 0 {
            at = end;
            continue;
        }
        // The groups with a row left, as every other bit of a byte mask: the loop below visits
        // only those, so it branches once a group it works on rather than once a group (where
        // a tenth of the groups pass, as on real hidden states, most of those branches went the
        // unpredicted way).
        // SAFETY: `masks` is 32 bytes; the callers enable AVX2 with AVX-512F.
        let mut left = unsafe {
            let v = _mm256_loadu_si256(masks.as_ptr().cast::<__m256i>());
            let zero = _mm256_cmpeq_epi16(v, _mm256_setzero_si256());
            !(_mm256_movemask_epi8(zero) as u32) & 0x5555_5555
        };
        let groups = (end - at) / STEP;
        if groups < CHUNK / STEP {
            left &= (1u32 << (2 * groups)) - 1;
        }
        while left != 0 {
            let g = (left.trailing_zeros() / 2) as usize;
            left &= left - 1;
            let (need, j) = (masks[g], at + g * STEP);
            // A group the span's radius keeps, again with each row's own radius in f32: on
            // real hidden states a few rows' large factors make the span's radius loose enough
            // to pass 6-47 % of groups (the real 270M file, batch 32), most of which their own
            // radius then dismisses.
            let need = if PREFILTER {
                // SAFETY: rows `j .. j + 16` are inside `dots` and every factor (as above).
                need & unsafe {
                    let load = |v: &[f32]| _mm512_loadu_ps(v.as_ptr().add(j));
                    let d = _mm512_cvtepi32_ps(_mm512_loadu_si512(
                        dots.as_ptr().add(j).cast::<__m512i>(),
                    ));
                    let centre = _mm512_mul_ps(d, _mm512_mul_ps(xs32, load(f.scale)));
                    // `upper_f32_row`'s overestimate, sixteen lanes at a time.
                    let quantised = _mm512_min_ps(
                        _mm512_mul_ps(abs32, load(f.max_err)),
                        _mm512_mul_ps(l2_32, load(f.l2_err)),
                    );
                    let r = _mm512_fmadd_ps(err32, load(f.row_l2), quantised);
                    let r = _mm512_add_ps(_mm512_fmadd_ps(abs32, load(f.rounding), r), tiny32);
                    let widen =
                        _mm512_fmadd_ps(_mm512_add_ps(_mm512_abs_ps(centre), r), slack, absolute);
                    let high = _mm512_add_ps(_mm512_add_ps(centre, r), widen);
                    _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(high, floor32)
                }
            } else {
                need
            };
            for h in 0..2 {
                if (need >> (HALF * h)) & 0xff == 0 {
                    continue;
                }
                let j = j + HALF * h;
                // SAFETY: rows `j .. j + 8` are inside `dots` and every factor (as above).
                unsafe {
                    let load = |v: &[f32]| _mm512_cvtps_pd(_mm256_loadu_ps(v.as_ptr().add(j)));
                    let d = _mm512_cvtepi32_pd(_mm256_loadu_si256(
                        dots.as_ptr().add(j).cast::<__m256i>(),
                    ));
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
                        let mut h = [0.0f64; HALF];
                        _mm512_storeu_pd(h.as_mut_ptr(), high);
                        keep(u32::from(mask), &h, start + j, kept);
                    }
                }
            }
        }
        at = end;
    }
    let high = _mm512_reduce_max_pd(best);
    let tail = scan_rows(full..n, dots, f, x, floor.max(high), start, kept);
    tail.max(high)
}

/// x's multipliers in f32 for the prefilter, each rounded up (they multiply nonnegative
/// factors); the integer scale is an f32 already.
#[cfg(any(test, target_arch = "x86_64"))]
struct UpperF32 {
    abs: f32,
    l2: f32,
    err_l2: f32,
    scale: f32,
    tiny: f32,
}

#[cfg(any(test, target_arch = "x86_64"))]
impl UpperF32 {
    fn new(x: XFactors) -> UpperF32 {
        UpperF32 {
            abs: up(x.abs),
            l2: up(x.l2),
            err_l2: up(x.err_l2),
            scale: x.scale as f32,
            tiny: up(x.tiny),
        }
    }

    /// The f32 radius of a row whose factors are `f`, the f64 radius' arithmetic without its
    /// margin. Every operation is nondecreasing in each of its (nonnegative) operands, and so
    /// is rounding, so [`Largest`] factors give a radius at least any of their rows' own.
    fn radius(&self, f: Largest) -> f32 {
        let quantised = (self.abs * f.max_err).min(self.l2 * f.l2_err);
        let r = self.err_l2.mul_add(f.row_l2, quantised);
        self.abs.mul_add(f.rounding, r) + self.tiny
    }
}

/// An f32 overestimate of row `j`'s upper bound `centre + radius` (the f64 interval of
/// [`scan_rows`]), the prefilter's arithmetic one row at a time, with the span's largest
/// factors as `scan_avx512` takes them: `+inf` or NaN where a factor is infinite.
#[cfg(test)]
fn upper_f32(dots: &[i32], f: &Factors<'_>, u: &UpperF32, j: usize) -> f32 {
    upper_f32_with(dots, f, u, j, u.radius(f.largest[j / SPAN]))
}

/// The same with row `j`'s own factors: the vector scans' second prefilter.
#[cfg(test)]
fn upper_f32_row(dots: &[i32], f: &Factors<'_>, u: &UpperF32, j: usize) -> f32 {
    let own = Largest {
        max_err: f.max_err[j],
        l2_err: f.l2_err[j],
        rounding: f.rounding[j],
        row_l2: f.row_l2[j],
    };
    upper_f32_with(dots, f, u, j, u.radius(own))
}

#[cfg(test)]
fn upper_f32_with(dots: &[i32], f: &Factors<'_>, u: &UpperF32, j: usize, r: f32) -> f32 {
    let centre = dots[j] as f32 * (u.scale * f.scale[j]);
    let widen = (centre.abs() + r).mul_add(UPPER_SLACK, UPPER_ABSOLUTE);
    (centre + r) + widen
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

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "x86_64")]
    use crate::kernels::simd;

    /// A small xorshift stream: values spread over many magnitudes, signs and edge cases.
    struct Stream(u64);

    impl Stream {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// A nonnegative factor: mostly ordinary, sometimes tiny, huge, zero or infinite.
        fn factor(&mut self) -> f32 {
            let unit = (self.next() % 1_000_000) as f32 / 1_000_000.0;
            match self.next() % 64 {
                0 => f32::INFINITY,
                1 => 0.0,
                2 => unit * 1e-38,
                3 => unit * 1e30,
                _ => unit * 10f32.powi((self.next() % 9) as i32 - 6),
            }
        }

        fn dot(&mut self) -> i32 {
            match self.next() % 16 {
                0 => i32::MAX - (self.next() % 8) as i32,
                1 => i32::MIN + (self.next() % 8) as i32,
                _ => (self.next() % 2_000_001) as i32 - 1_000_000,
            }
        }
    }

    /// `scale` with the four bound factors `cols[1..5]` and their spans' `largest`.
    fn factors_of<'a>(
        scale: &'a [f32],
        cols: &'a [Vec<f32>],
        largest: &'a [Largest],
    ) -> Factors<'a> {
        Factors {
            scale,
            max_err: &cols[1],
            l2_err: &cols[2],
            rounding: &cols[3],
            row_l2: &cols[4],
            largest,
        }
    }

    /// Random factors for `n` rows: scales, then the four bound factors.
    fn factor_columns(s: &mut Stream, n: usize) -> Vec<Vec<f32>> {
        (0..5)
            .map(|c| {
                (0..n)
                    .map(|_| {
                        if c == 0 {
                            s.factor() * 1e-6
                        } else {
                            s.factor()
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// A block scanned in one call keeps exactly the rows, and finds the floor, of its spans
    /// scanned one after another with the floor raised to the best lower bound between them,
    /// on every path this CPU has: the floor rises by that rule and no other.
    #[test]
    fn one_call_over_a_block_raises_the_floor_span_by_span() {
        let mut s = Stream(0x2545_f491_4f6c_dd1d);
        for case in 0..60 {
            let n = 1 + (s.next() % 1200) as usize;
            // Centres rising through the block, so each span's best lower bound matters to
            // the next: the later rows stand on the earlier ones' floor.
            let dots: Vec<i32> = (0..n)
                .map(|j| (j as i32 * 3_000).wrapping_add((s.next() % 20_000) as i32))
                .collect();
            let cols = factor_columns(&mut s, n);
            let scale = vec![1e-6f32; n];
            let largest = Largest::spans(&cols[1], &cols[2], &cols[3], &cols[4]);
            let f = factors_of(&scale, &cols, &largest);
            let x = XFactors {
                abs: 1e-3,
                l2: 1e-3,
                err_l2: 1e-6,
                scale: 1.0,
                tiny: 1e-42,
            };
            let floor = if case % 3 == 0 {
                0.5
            } else {
                f64::NEG_INFINITY
            };
            for cpu in simd::available().into_iter().map(simd::limit) {
                // The same path a span at a time (one span a call: nothing to raise inside).
                let (mut want, mut at_floor, mut want_best) =
                    (Vec::new(), floor, f64::NEG_INFINITY);
                for at in (0..n).step_by(SPAN) {
                    let r = at..(at + SPAN).min(n);
                    let span = Factors {
                        scale: &f.scale[r.clone()],
                        max_err: &f.max_err[r.clone()],
                        l2_err: &f.l2_err[r.clone()],
                        rounding: &f.rounding[r.clone()],
                        row_l2: &f.row_l2[r.clone()],
                        largest: &largest[at / SPAN..],
                    };
                    let b = scan(cpu, &dots[r], &span, x, at_floor, 9 + at, &mut want);
                    want_best = want_best.max(b);
                    at_floor = at_floor.max(want_best);
                }
                let mut got = Vec::new();
                let best = scan(cpu, &dots, &f, x, floor, 9, &mut got);
                assert_eq!(got, want, "{:?}, case {case}, {n} rows", cpu.isa());
                assert_eq!(best.max(floor), want_best.max(floor), "case {case}");
            }
        }
    }

    /// A vector scan without and with its prefilter.
    #[cfg(target_arch = "x86_64")]
    type Scans =
        [unsafe fn(&[i32], &Factors<'_>, XFactors, f64, usize, &mut Vec<(u32, f32)>) -> f64; 2];

    /// The vector scans this CPU runs, by name.
    #[cfg(target_arch = "x86_64")]
    fn vector_scans() -> Vec<(&'static str, Scans)> {
        let cpu = simd::cpu();
        let mut out: Vec<(&'static str, Scans)> = Vec::new();
        if cpu.has_avx2() {
            out.push(("AVX2", [scan_avx2::<false>, scan_avx2::<true>]));
        }
        if cpu.has_avx512() {
            out.push(("AVX-512", [scan_avx512::<false>, scan_avx512::<true>]));
        }
        out
    }

    /// The f32 overestimate is never below a row's f64 upper bound, and the AVX-512 and AVX2
    /// scans keep the same rows and reach the same floor with the prefilter as without it, for floors
    /// from minus infinity to plus infinity, including floors at rows' own upper bounds (where a
    /// prefilter that rounded the wrong way would drop a kept row).
    #[test]
    fn the_f32_prefilter_dismisses_only_rows_the_f64_intervals_drop() {
        let mut s = Stream(0x9e37_79b9_7f4a_7c15);
        for case in 0..200 {
            let n = 37 + case % 300;
            let dots: Vec<i32> = (0..n).map(|_| s.dot()).collect();
            let cols = factor_columns(&mut s, n);
            let largest = Largest::spans(&cols[1], &cols[2], &cols[3], &cols[4]);
            let f = factors_of(&cols[0], &cols, &largest);
            let x = XFactors {
                abs: f64::from(s.factor()) + 1e-3,
                l2: f64::from(s.factor()) + 1e-3,
                err_l2: f64::from(s.factor()) * 1e-3,
                scale: f64::from(s.factor()) * 1e-2 + 1e-9,
                tiny: 1e-42,
            };
            let mut all = Vec::new();
            scan_rows(0..n, &dots, &f, x, f64::NEG_INFINITY, 0, &mut all);
            let highs: Vec<f64> = all.iter().map(|&(_, h)| f64::from(h)).collect();
            let mut floors = vec![f64::NEG_INFINITY, 0.0, f64::INFINITY];
            for _ in 0..6 {
                if !highs.is_empty() {
                    floors.push(highs[(s.next() % highs.len() as u64) as usize]);
                }
            }
            let u = UpperF32::new(x);
            for j in 0..n {
                let centre = f64::from(dots[j]) * (x.scale * f64::from(f.scale[j]));
                let quantised =
                    (x.abs * f64::from(f.max_err[j])).min(x.l2 * f64::from(f.l2_err[j]));
                let radius = (quantised
                    + x.err_l2 * f64::from(f.row_l2[j])
                    + x.abs * f64::from(f.rounding[j])
                    + x.tiny)
                    * MARGIN;
                // Where the f64 bound is NaN (an infinite x multiplier times a zero factor),
                // the span's largest factor may give +inf instead: never a dismissal either.
                let exact = centre + radius;
                for (which, upper) in [
                    ("span", upper_f32(&dots, &f, &u, j)),
                    ("row", upper_f32_row(&dots, &f, &u, j)),
                ] {
                    assert!(
                        upper.is_nan()
                            || f64::from(upper) >= exact
                            || exact.is_nan() && upper == f32::INFINITY,
                        "case {case} row {j}: f32 {upper} ({which} radius) below f64 {exact}"
                    );
                }
            }
            for &floor in &floors {
                #[cfg(target_arch = "x86_64")]
                for (path, scan) in vector_scans() {
                    let (mut every, mut filtered) = (Vec::new(), Vec::new());
                    // SAFETY: `vector_scans` lists only the scans this CPU runs; every factor
                    // holds `n` rows.
                    let (b0, b1) = unsafe {
                        (
                            scan[0](&dots, &f, x, floor, 7, &mut every),
                            scan[1](&dots, &f, x, floor, 7, &mut filtered),
                        )
                    };
                    assert_eq!(filtered, every, "{path}, case {case} floor {floor}");
                    assert_eq!(
                        b1.max(floor),
                        b0.max(floor),
                        "{path}, case {case} floor {floor}"
                    );
                }
            }
        }
    }
}
