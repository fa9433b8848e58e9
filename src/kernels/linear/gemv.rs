//! One x row against stored weight rows, decoded straight into registers (AVX2/FMA/F16C).
//!
//! Decode at batch 1 reads every weight once per token and is bound by memory bandwidth, so
//! this path skips the tile buffer (an extra store and load per element) and keeps four rows'
//! accumulators in registers while the four weight streams go by. Per output it performs the
//! same per-lane fused multiply-adds, in the same order, as every other `linear` path.
//!
//! The four rows are read side by side, but memory only streams well as one sequential run
//! (the hardware prefetcher gives up at every 4 KiB page of the mapped file). So while a block
//! of rows is read, the next block's bytes are prefetched in address order, a fixed share per
//! step: one sequential stream one block ahead, measurably faster than a prefetch a fixed
//! distance ahead in each row or a plain read loop (docs/performance.md, "What changed the
//! numbers").
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps,
    _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_setzero_ps, _mm256_setzero_si256,
    _mm256_slli_epi32, _mm256_storeu_ps, _mm256_unpackhi_epi16, _mm256_unpacklo_epi16,
    _mm_loadu_si128,
};

use std::ops::Range;

use crate::kernels::simd::{self, LANES};

/// Stored dtypes, as const parameters (one monomorphised loop per dtype).
pub(crate) const F32: u8 = 0;
pub(crate) const BF16: u8 = 1;
pub(crate) const F16: u8 = 2;

/// Weight rows whose accumulators stay in registers together (8 of the 16 ymm registers).
const ROWS: usize = 4;

const fn size(d: u8) -> usize {
    if d == F32 {
        4
    } else {
        2
    }
}

/// `out[j] = dot(x, w_row(cols.start + j))`, `w` row-major `[.., k]` in dtype `D`.
///
/// Panics if `out` is not `cols.len()` long, `x` is shorter than `k`, or `bytes` does not hold
/// the rows `cols` (checked once, up front; the loops then read only inside those bounds).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemv_avx2<const D: u8>(
    x: &[f32],
    bytes: &[u8],
    k: usize,
    cols: Range<usize>,
    out: &mut [f32],
) {
    assert_eq!(out.len(), cols.len(), "gemv output length");
    let x = &x[..k];
    let rows = &bytes[cols.start * k * size(D)..cols.end * k * size(D)];
    let row_bytes = k * size(D);
    let xp = if D == BF16 { bf16_order(x) } else { Vec::new() };
    let xp = if D == BF16 { &xp[..] } else { x };
    let mut chunks = out.chunks_exact_mut(ROWS);
    let mut at = 0;
    for o in &mut chunks {
        let w: [&[u8]; ROWS] = std::array::from_fn(|r| &rows[(at + r) * row_bytes..][..row_bytes]);
        let next = rows.as_ptr().wrapping_add((at + ROWS) * row_bytes);
        let lanes = block::<D, ROWS>(x, xp, w, next);
        for (o, l) in o.iter_mut().zip(&lanes) {
            *o = simd::reduce_lanes(l);
        }
        at += ROWS;
    }
    for o in chunks.into_remainder() {
        let next = rows.as_ptr().wrapping_add((at + 1) * row_bytes);
        let lanes = block::<D, 1>(x, xp, [&rows[at * row_bytes..][..row_bytes]], next);
        *o = simd::reduce_lanes(&lanes[0]);
        at += 1;
    }
}

/// Where each register position's element comes from, within a 16-element chunk, when bf16
/// is widened by interleaving with zeros (`unpacklo`/`unpackhi` work per 128-bit half): the
/// low register gets elements 0-3 and 8-11, the high one 4-7 and 12-15.
const BF16_ORDER: [usize; LANES] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];

/// `x`'s whole 16-element chunks in [`BF16_ORDER`] (the tail is not needed: it is added in
/// plain order after the loop).
fn bf16_order(x: &[f32]) -> Vec<f32> {
    x.chunks_exact(LANES)
        .flat_map(|c| BF16_ORDER.iter().map(move |&i| c[i]))
        .collect()
}

/// The 16 lane sums of `x · w[r]` for `R` rows (each `x.len()` elements of dtype `D`). `xp` is
/// `x` itself, or for bf16 its whole chunks in [`BF16_ORDER`]: a bf16 row is then widened with
/// two shuffles per 16 elements instead of two shuffles and two shifts, each register position
/// still taking one lane's elements in order; the lanes are put back in order at the end.
/// `next` is where the following block of rows starts: it is prefetched, never read.
#[inline(always)]
fn block<const D: u8, const R: usize>(
    x: &[f32],
    xp: &[f32],
    w: [&[u8]; R],
    next: *const u8,
) -> [[f32; LANES]; R] {
    let k = x.len();
    let full = k - k % LANES;
    assert!(xp.len() >= full, "gemv reordered x length");
    for row in &w {
        assert_eq!(row.len(), k * size(D), "gemv weight row length");
    }
    // Every unsafe block below relies on the same two facts: the asserts above make each `w[r]`
    // exactly `k` elements and `xp` at least `full` f32s, and the only callers are
    // `target_feature` functions requiring AVX2, FMA and F16C, into which this is inlined.
    // SAFETY: a register intrinsic of AVX (callers enable AVX2); it touches no memory.
    let mut acc = [[unsafe { _mm256_setzero_ps() }; 2]; R];
    let mut kk = 0;
    while kk < full {
        // SAFETY: reads `xp[kk..kk + 16]`, unaligned, with `kk + 16 <= full <= xp.len()`.
        let xv = unsafe {
            let p = xp.as_ptr().add(kk);
            [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
        };
        // The next block's share for this step: R rows × 16 elements, in address order.
        let step = R * LANES * size(D);
        simd::prefetch(next.wrapping_add(kk * R * size(D)), step);
        for r in 0..R {
            // SAFETY: reads elements `kk..kk + 16` of `w[r]` (`kk + 16 <= full <= k`, and
            // `w[r]` holds `k` elements of dtype `D` by the assert), unaligned.
            let wv = unsafe {
                let p = w[r].as_ptr().add(kk * size(D));
                if D == BF16 {
                    let raw = _mm256_loadu_si256(p.cast::<__m256i>());
                    let zero = _mm256_setzero_si256();
                    [
                        _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, raw)),
                        _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, raw)),
                    ]
                } else {
                    load16::<D>(p)
                }
            };
            // SAFETY: register-only FMA intrinsics; callers enable FMA.
            acc[r][0] = unsafe { _mm256_fmadd_ps(xv[0], wv[0], acc[r][0]) };
            // SAFETY: as above.
            acc[r][1] = unsafe { _mm256_fmadd_ps(xv[1], wv[1], acc[r][1]) };
        }
        kk += LANES;
    }
    let mut lanes = [[0.0f32; LANES]; R];
    for r in 0..R {
        let mut held = [0.0f32; LANES];
        // SAFETY: two unaligned 8-f32 stores into `held`, which holds 16.
        unsafe {
            _mm256_storeu_ps(held.as_mut_ptr(), acc[r][0]);
            _mm256_storeu_ps(held.as_mut_ptr().add(8), acc[r][1]);
        }
        if D == BF16 {
            for (p, &lane) in BF16_ORDER.iter().enumerate() {
                lanes[r][lane] = held[p];
            }
        } else {
            lanes[r] = held;
        }
        for (l, i) in (full..k).enumerate() {
            let wv = decode_one::<D>(&w[r][i * size(D)..]);
            lanes[r][l] = x[i].mul_add(wv, lanes[r][l]);
        }
    }
    lanes
}

/// 16 consecutive elements of dtype `D` at `p`, as two registers of f32.
///
/// # Safety
/// `p` must be valid for reading 16 elements; the CPU must have AVX2 and F16C.
#[inline(always)]
unsafe fn load16<const D: u8>(p: *const u8) -> [__m256; 2] {
    // SAFETY: the caller's contract.
    unsafe {
        if D == F32 {
            let p = p.cast::<f32>();
            [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
        } else if D == BF16 {
            let p = p.cast::<__m128i>();
            let wide = |v| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v)));
            [wide(_mm_loadu_si128(p)), wide(_mm_loadu_si128(p.add(1)))]
        } else {
            let p = p.cast::<__m128i>();
            [
                _mm256_cvtph_ps(_mm_loadu_si128(p)),
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
            ]
        }
    }
}

/// The element of dtype `D` at the start of `b`.
#[inline(always)]
fn decode_one<const D: u8>(b: &[u8]) -> f32 {
    if D == F32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    } else if D == BF16 {
        simd::bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))
    } else {
        simd::f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
    }
}
