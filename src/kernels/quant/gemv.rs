//! One x row against rows of blocks on AVX2, decoded straight into registers: the block-format
//! twin of `linear/gemv.rs`. Decode at batch 1 reads every weight once per token; through a
//! tile buffer each value would be stored and loaded again, and the decode, not memory, would
//! set the pace.
//!
//! Per output the same fused multiply-adds in the same order as every `linear` path: inner
//! element `e` goes to lane `e % 16`, in ascending order, and the lanes are summed as
//! `simd::reduce_lanes`' tree. A group of 32 decoded values is four vectors of eight
//! consecutive elements, so vectors alternate between the accumulator of lanes 0-7 and that of
//! lanes 8-15 (rows are whole blocks, so a row always starts on lane 0). The formats decoded
//! in the paired order ([`Blocks::PAIRED`]) hold lanes 0-3 and 8-11 in one accumulator and
//! 4-7 and 12-15 in the other, and read x in that order ([`paired_order`]): each lane still
//! adds its own elements, in ascending order.
//!
//! A scale reaches the decode already divided by 2^24 ([`Blocks::prepare_untopped`]), so the
//! one multiply of each value ([`super::avx2`]'s top-byte widening) is all.
//! On an AMD EPYC (Zen 3, AVX2, one thread, one x row against `[256, 640]` from L2,
//! alternating): Q5_0 19.1 -> 17.5 µs with the paired order and the table, Q8_0 12.5 -> 11.1
//! with the table, Q6_K 37.7 -> 33.0 against `[256, 1024]`. The kernel of a few x rows
//! ([`gemm_blocks_avx2`], 2-5 rows) decodes the same way from one paired copy of x a call
//! (`linear` makes it for all threads): one thread, best of eight alternating, Q5_0 x
//! `[4, 640]` by `[2048, 640]` 266 -> 240 µs, `[2, 640]` 191 -> 180, Q6_K x `[4, 2048]` by
//! `[640, 2048]` 273 -> 256.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
};
use std::ops::Range;

use super::avx2::{by_format, lean_group, Blocks};
use super::{untopped_halves, Halves};
use crate::kernels::dtype::DType;
use crate::kernels::simd::{self, LANES};

/// Weight rows one x row meets at a time: two rows' four accumulators and their decodes in
/// the 16 ymm registers. Four rows spilled accumulators to the stack, and each multiply-add
/// then waited on a store and a load. One row at a time, each accumulator's chain of
/// multiply-adds (two a block) sets the pace (AMD EPYC, Zen 3, 2 threads, one x row: Q8_0
/// `[2048, 640]` 45-47 µs two rows at a time against 53-83 one, Q4_K `[640, 1024]` 31-41
/// against 46-68; Q5_0 70-72 µs either way since its decode was shortened).
const ROWS: usize = 2;

/// Where [`paired_order`] puts each quarter of sixteen: the order of the lanes of a
/// [`Blocks::PAIRED`] format's two accumulators, and (the swap being its own inverse) the way
/// back to lane order.
const PAIRED_QUARTERS: [usize; 4] = [0, 8, 4, 12];

/// `out[j] = dot(x, w_row(cols.start + j))` for a block-format `dtype`; false (nothing written)
/// for a float dtype. Callers outside this module's features call it only after detecting AVX2,
/// FMA and F16C.
///
/// Panics if `out` is not `cols.len()` long, `x` is shorter than `k`, `k` is not whole blocks,
/// or `bytes` does not hold the rows `cols`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemv_blocks_avx2(
    dtype: DType,
    x: &[f32],
    bytes: &[u8],
    k: usize,
    cols: Range<usize>,
    out: &mut [f32],
) -> bool {
    by_format!(dtype, B => rows::<B>(x, bytes, k, cols, out), _floats => return false);
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
fn rows<B: Blocks>(x: &[f32], bytes: &[u8], k: usize, cols: Range<usize>, out: &mut [f32]) {
    let elems = 32 * B::GROUPS;
    assert_eq!(out.len(), cols.len(), "gemv output length");
    assert!(k.is_multiple_of(elems), "gemv rows must be whole blocks");
    let x = &x[..k];
    let mut paired = Vec::new();
    let x = if B::PAIRED {
        paired.resize(k, 0.0);
        paired_order(x, &mut paired);
        &paired[..]
    } else {
        x
    };
    let row_bytes = k / elems * B::BYTES;
    let rows = &bytes[cols.start * row_bytes..cols.end * row_bytes];
    let halves = untopped_halves();
    let mut at = 0;
    at = rows_by::<B, ROWS>(x, rows, row_bytes, at, out, halves);
    rows_by::<B, 1>(x, rows, row_bytes, at, out, halves);
}

/// Whether the AVX2 kernels of several x rows, [`gemm_blocks_avx2`] and the strips
/// (`strip_avx2`), read x for `dtype` in the paired order ([`paired_order`]): the formats whose
/// decode gives their values in that order ([`Blocks::PAIRED`], fewer operations for them; the
/// lanes are put back in order before they are added, [`lane_order`]). The one-row kernel makes
/// its own copy.
pub(crate) fn reads_paired(dtype: DType) -> bool {
    by_format!(dtype, B => B::PAIRED, _floats => false)
}

/// `x` (whole groups of 16) into `out` with the middle quarters of every 16 swapped, elements
/// 0-3, 8-11, 4-7, 12-15: the order of the values [`lean_group`] gives a [`Blocks::PAIRED`]
/// format in. Here a copy of one x row a call (at most a few KiB), against the rows of blocks
/// it meets; for the kernels of several rows one copy of all of them a call, which `linear`
/// shares between the threads.
///
/// Panics if `out` is not as long as `x`, or that is not whole groups of 16.
pub(crate) fn paired_order(x: &[f32], out: &mut [f32]) {
    assert!(
        x.len() == out.len() && x.len().is_multiple_of(16),
        "paired order lengths"
    );
    for (s, d) in x.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
        for (q, d) in PAIRED_QUARTERS.into_iter().zip(d.chunks_exact_mut(4)) {
            d.copy_from_slice(&s[q..q + 4]);
        }
    }
}

/// The sixteen lane sums of [`lean_group`]'s decode in lane order: [`PAIRED_QUARTERS`] swapped
/// back for a [`Blocks::PAIRED`] format.
#[inline(always)]
pub(super) fn lane_order<B: Blocks>(sums: &[f32; LANES]) -> [f32; LANES] {
    if B::PAIRED {
        std::array::from_fn(|l| sums[PAIRED_QUARTERS[l / 4] + l % 4])
    } else {
        *sums
    }
}

/// Rows `at..` of `rows` (each `row_bytes` long) into `out[at..]`, `R` at a time while `R` are
/// left; returns the first row not done.
#[inline(always)]
fn rows_by<B: Blocks, const R: usize>(
    x: &[f32],
    rows: &[u8],
    row_bytes: usize,
    mut at: usize,
    out: &mut [f32],
    halves: &Halves,
) -> usize {
    for o in out[at..].chunks_exact_mut(R) {
        let w: [&[u8]; R] = std::array::from_fn(|r| &rows[(at + r) * row_bytes..][..row_bytes]);
        let next = rows.as_ptr().wrapping_add((at + R) * row_bytes);
        for (o, sums) in o.iter_mut().zip(dots::<B, R>(x, w, next, halves)) {
            *o = simd::reduce_lanes(&lane_order::<B>(&sums));
        }
        at += R;
    }
    at
}

/// The 16 lane sums of `x · w[r]` for `R` rows of whole blocks, each as long as `x`. `next` is
/// where the `R` rows after these start (the rows are contiguous): while block `b` of each row
/// is decoded, `R` blocks' worth of the next rows is prefetched ([`simd::prefetch`]).
#[inline(always)]
fn dots<B: Blocks, const R: usize>(
    x: &[f32],
    w: [&[u8]; R],
    next: *const u8,
    halves: &Halves,
) -> [[f32; LANES]; R] {
    let elems = 32 * B::GROUPS;
    let blocks = x.len() / elems;
    for row in &w {
        assert_eq!(row.len(), blocks * B::BYTES, "gemv weight row length");
    }
    // Every unsafe block below relies on the asserts above (each row is `blocks` whole blocks,
    // `x` is `blocks * elems` f32s) and on the only callers being `target_feature` functions
    // requiring AVX2, FMA and F16C, into which this is inlined.
    // SAFETY: a register intrinsic of AVX; it touches no memory.
    let mut acc: [[__m256; 2]; R] = [[unsafe { _mm256_setzero_ps() }; 2]; R];
    let step = R * B::BYTES;
    for b in 0..blocks {
        simd::prefetch(next.wrapping_add(b * step), step);
        let blk: [&[u8]; R] = std::array::from_fn(|r| &w[r][b * B::BYTES..][..B::BYTES]);
        // SAFETY: each `blk[r]` is one whole block; the callers enable AVX2, FMA and F16C.
        let shared: [B::Shared; R] =
            std::array::from_fn(|r| unsafe { B::prepare_untopped(blk[r], halves) });
        for g in 0..B::GROUPS {
            let at = b * elems + 32 * g;
            // SAFETY: reads `x[at..at + 32]`, with `at + 32 <= blocks * elems == x.len()`.
            // (Written out: inside `array::from_fn` a load would be a call, see `avx2.rs`.)
            let xv: [__m256; 4] = unsafe {
                let p = x.as_ptr().add(at);
                [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ]
            };
            for r in 0..R {
                // SAFETY: `blk[r]` is one whole block (asserted lengths above).
                let v = unsafe { lean_group::<B>(blk[r], &shared[r], g) };
                for i in 0..4 {
                    // SAFETY: register intrinsics.
                    acc[r][i % 2] = unsafe { _mm256_fmadd_ps(xv[i], v[i], acc[r][i % 2]) };
                }
            }
        }
    }
    let mut lanes = [[0.0f32; LANES]; R];
    for (l, a) in lanes.iter_mut().zip(&acc) {
        // SAFETY: `l` holds 16 f32s: two unaligned 8-wide stores.
        unsafe {
            _mm256_storeu_ps(l.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(l.as_mut_ptr().add(8), a[1]);
        }
    }
    lanes
}

/// x rows one weight row's decoded groups are multiplied into at a time: 4 × 2 accumulators,
/// four decoded vectors and one x vector in the 16 ymm registers.
const X_ROWS: usize = 4;

/// Whether `m` x rows against `dtype` go through [`gemm_blocks_avx2`] rather than the tile-buffer
/// kernel (where neither strips nor the panel kernel take them: below 6 rows, and for a
/// weight of floats). It re-decodes each block per 4 x rows: cheap for the
/// 32-element formats, and for the K formats no dearer than the tile buffer up to 8 rows
/// (one AVX2 EPYC, 2 threads, `kernel_bench` 1024 × 2048: Q8_0 51 -> 103 GFLOP/s and Q5_0 48 ->
/// 69 at 8 rows, Q4_K 65 either way at 8 and 80 -> 65 at 16).
pub(crate) fn takes_registers(dtype: DType, m: usize) -> bool {
    match dtype {
        DType::Q4_K | DType::Q5_K | DType::Q6_K => m <= 8,
        _ => true,
    }
}

/// `out[i][j] = dot(x_row(i), w_row(cols.start + j))` for `m` (a few) x rows (each in the
/// paired order where [`reads_paired`]) and a block-format `dtype`, each weight row's blocks
/// decoded in registers ([`lean_group`]) once per [`X_ROWS`] x rows; false
/// (nothing written) for a float dtype. The order per output is [`gemv_blocks_avx2`]'s. Callers
/// outside this module's features call it only after detecting AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemm_blocks_avx2(
    dtype: DType,
    x: &[f32],
    m: usize,
    k: usize,
    bytes: &[u8],
    out: &mut crate::kernels::parallel::ColumnsMut<'_>,
) -> bool {
    by_format!(dtype, B => multi::<B>(x, m, k, bytes, out), _floats => return false);
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
fn multi<B: Blocks>(
    x: &[f32],
    m: usize,
    k: usize,
    bytes: &[u8],
    out: &mut crate::kernels::parallel::ColumnsMut<'_>,
) {
    let elems = 32 * B::GROUPS;
    assert!(k.is_multiple_of(elems), "gemm rows must be whole blocks");
    let x = &x[..m * k];
    let row_bytes = k / elems * B::BYTES;
    let cols = out.cols();
    let halves = untopped_halves();
    let mut sums = [[0.0f32; LANES]; X_ROWS];
    for j in cols.clone() {
        let w = &bytes[j * row_bytes..][..row_bytes];
        // The next row is on its way while this one meets every x row ([`simd::prefetch`]).
        simd::prefetch(w.as_ptr().wrapping_add(row_bytes), row_bytes);
        let mut i0 = 0;
        while i0 < m {
            let rows = X_ROWS.min(m - i0);
            let xs = &x[i0 * k..(i0 + rows) * k];
            match rows {
                4 => sums = dots_x::<B, 4>(xs, k, w, halves),
                3 => sums[..3].copy_from_slice(&dots_x::<B, 3>(xs, k, w, halves)),
                2 => sums[..2].copy_from_slice(&dots_x::<B, 2>(xs, k, w, halves)),
                _ => sums[..1].copy_from_slice(&dots_x::<B, 1>(xs, k, w, halves)),
            }
            for (r, sums) in sums[..rows].iter().enumerate() {
                out.row(i0 + r)[j - cols.start] = simd::reduce_lanes(&lane_order::<B>(sums));
            }
            i0 += rows;
        }
    }
}

/// The 16 lane sums of `x_r · w` for `R` x rows (`xs`, `[R, k]`) and one weight row `w` of
/// whole blocks.
#[inline(always)]
fn dots_x<B: Blocks, const R: usize>(
    xs: &[f32],
    k: usize,
    w: &[u8],
    halves: &Halves,
) -> [[f32; LANES]; R] {
    let elems = 32 * B::GROUPS;
    let blocks = k / elems;
    assert!(
        xs.len() >= R * k && w.len() == blocks * B::BYTES,
        "gemm operand lengths"
    );
    // As in `dots`: the assert bounds every read, and the callers enable AVX2, FMA and F16C.
    // SAFETY: a register intrinsic of AVX; it touches no memory.
    let mut acc: [[__m256; 2]; R] = [[unsafe { _mm256_setzero_ps() }; 2]; R];
    for b in 0..blocks {
        let blk = &w[b * B::BYTES..][..B::BYTES];
        // SAFETY: the callers enable F16C.
        let shared = unsafe { B::prepare_untopped(blk, halves) };
        for g in 0..B::GROUPS {
            // SAFETY: `blk` is one whole block.
            let v = unsafe { lean_group::<B>(blk, &shared, g) };
            let at = b * elems + 32 * g;
            for (r, a) in acc.iter_mut().enumerate() {
                // SAFETY: reads `xs[r * k + at..][..32]`, inside row `r` (`at + 32 <= k`).
                unsafe {
                    let p = xs.as_ptr().add(r * k + at);
                    a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(p), v[0], a[0]);
                    a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), v[1], a[1]);
                    a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(16)), v[2], a[0]);
                    a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(24)), v[3], a[1]);
                }
            }
        }
    }
    let mut lanes = [[0.0f32; LANES]; R];
    for (l, a) in lanes.iter_mut().zip(&acc) {
        // SAFETY: `l` holds 16 f32s: two unaligned 8-wide stores.
        unsafe {
            _mm256_storeu_ps(l.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(l.as_mut_ptr().add(8), a[1]);
        }
    }
    lanes
}
