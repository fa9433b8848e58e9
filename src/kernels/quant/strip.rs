//! Several x rows times block-format weights on AVX-512: a strip of weight rows decoded once
//! into a buffer in L1, then every x row multiplied into it by a register tile.
//!
//! Why not the two shapes this replaced (up to 128 x rows, and past them while x is small). A
//! register kernel decoded a weight row again for every eight x rows and interleaved that
//! decode with a few multiply-adds; the panel kernel decodes once, but must transpose each
//! block into sixteen-row panels, a shuffle-bound pass that cost two thirds as much as the
//! multiply-adds themselves at 32 x rows. Here the decode is the one-row kernel's (a weight row
//! stays a row: no transpose) and the multiply-adds are a tile of `R` x rows by `C` weight rows
//! whose operands are both vectors, so each accumulator holds one output's sixteen lane sums in
//! exactly the order of every other `linear` path: element `e` into lane `e % 16`, ascending,
//! then [`reduce_lanes`](crate::kernels::simd::reduce_lanes)' tree. The trees of sixteen
//! outputs are taken together by [`simd::reduce16`], which does the same additions on whole
//! vectors. Between chunks of k (so that a strip's chunk stays in L1) a tile's accumulators wait in
//! memory, which changes nothing in their order.
#![allow(unsafe_code)]

use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_setzero_ps};

use super::avx2::by_format;
use super::avx512::{store_block, Blocks512};
use crate::kernels::dtype::DType;
use crate::kernels::parallel::ColumnsMut;
use crate::kernels::simd::{self, LineAligned, LANES};

/// The x rows that always go through strips rather than the panel kernel, and the most x
/// floats (`m · k`) past them. One Intel Xeon (Emerald Rapids, AVX-512, no AMX), in-process
/// alternation with the kernels before (the register kernel below 24 rows, panels from 24),
/// medians: strips took 0.61-0.95 of the time from 2 to 128 rows at every k measured (640,
/// 1024, 2048). Above, it depends on k: at k 640 0.91-0.97 up to 384 rows and 1.12-1.32 at
/// 512; at k 1024 0.83-0.92 at 256 rows; at k 2048 0.87-0.99 at 160-192 rows and 1.0-1.10 at
/// 256. There the panels' transpose is shared by enough rows and their broadcast x operand
/// reads less than strips do.
const ALWAYS_ROWS: usize = 128;
const MAX_X: usize = 1 << 18;

/// Whether `m` x rows of `k` times block-format `dtype` go through [`gemm_strips_avx512`] on an
/// AVX-512 machine: from two rows (one row is the streaming `gemv`) up to [`ALWAYS_ROWS`], and
/// beyond while x holds at most [`MAX_X`] floats.
pub(crate) fn takes_strips(dtype: DType, m: usize, k: usize) -> bool {
    dtype.is_quantized() && m >= 2 && (m <= ALWAYS_ROWS || m.saturating_mul(k) <= MAX_X)
}

/// Weight rows decoded per strip.
const STRIP: usize = 6;
/// x rows per register tile: with [`STRIP`] weight rows, 24 accumulators, four x vectors and
/// one weight vector, of the 32 registers. Four by six and three by eight ran alike; six by
/// four read more x from L2 and was 2-6 % slower at 128 rows.
const TILE: usize = 4;
/// Elements of k per chunk (rounded down to whole blocks): the strip's chunk (24 KiB) stays in
/// L1 while every tile passes over it. 256 and 512 were slower at 128 rows, 2048 at 8 and 32.
const KC: usize = 1024;

/// `out[i][j] = dot(x_row(i), w_row(cols.start + j))` for `m` x rows (`[m, k]`, each starting on
/// a cache line for speed, not for correctness) and a block-format `dtype`; false (nothing
/// written) for a float dtype. The order per output is every `linear` path's. Callers outside
/// this module's features call it only after detecting AVX-512F, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn gemm_strips_avx512(
    dtype: DType,
    x: &[f32],
    m: usize,
    k: usize,
    bytes: &[u8],
    out: &mut ColumnsMut<'_>,
) -> bool {
    by_format!(dtype, B => strips::<B>(x, m, k, bytes, out), _floats => return false);
    true
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn strips<B: Blocks512>(x: &[f32], m: usize, k: usize, bytes: &[u8], out: &mut ColumnsMut<'_>) {
    let elems = 32 * B::GROUPS;
    assert!(k.is_multiple_of(elems), "gemm rows must be whole blocks");
    let x = &x[..m * k];
    let row_bytes = k / elems * B::BYTES;
    let blocks_per_chunk = (KC / elems).max(1);
    let kc_max = blocks_per_chunk * elems;
    let cols = out.cols();
    let mut strip = LineAligned::zeroed(STRIP * kc_max);
    // Each tile's accumulators between chunks of k.
    let tiles = m.div_ceil(TILE);
    let zero = _mm512_setzero_ps();
    let mut held = vec![[[zero; STRIP]; TILE]; tiles];
    let passes = (tiles * k.div_ceil(kc_max)).max(1);
    let mut j = cols.start;
    while j < cols.end {
        let c = STRIP.min(cols.end - j);
        let w = &bytes[j * row_bytes..(j + c) * row_bytes];
        // The next strip's rows, while these are decoded and every tile passes over them: with
        // the weights out of L2 (100 copies alternated), in-process alternation, 2 threads,
        // `[8, 2048] × [640, 2048]ᵀ` took 0.76-0.88 of the time (Q8_0, Q6_K, Q4_K, Q5_0), 32
        // rows 0.88-0.96, 128 rows 0.98-1.0; with the weights in L2, 1-2 % more. The lines are
        // spread over the strip's tile passes, a share before each: issued all at once, they
        // filled the line-fill buffers and the core stalled on the last of them (a twentieth of
        // the strips' samples at 32 rows). Spread, with the weights out of cache (16 copies
        // alternated, in-process alternation, medians of 60), 2 threads, took 0.85 of the time
        // at 8 rows (Q5_0 `[6912, 1152]`, Q8_0 `[2048, 640]`), 0.91-0.97 at 32 rows (Q5_0,
        // Q4_K, Q6_K), level at 128.
        let next = w.as_ptr().wrapping_add(w.len());
        let next_len = STRIP * row_bytes;
        let per = next_len.div_ceil(simd::LINE).div_ceil(passes) * simd::LINE;
        let mut pf = 0;
        let mut k0 = 0;
        while k0 < k {
            let kc = kc_max.min(k - k0);
            let (b0, b1) = (k0 / elems * B::BYTES, (k0 + kc) / elems * B::BYTES);
            let buf = strip.as_mut_slice();
            for (row, dst) in w.chunks_exact(row_bytes).zip(buf.chunks_exact_mut(kc)) {
                decode_row::<B>(&row[b0..b1], dst);
            }
            let buf = &strip.as_slice()[..c * kc];
            let (first, last) = (k0 == 0, k0 + kc == k);
            let mut i0 = 0;
            while i0 < m {
                let r = TILE.min(m - i0);
                if pf < next_len {
                    simd::prefetch(next.wrapping_add(pf), per.min(next_len - pf));
                    pf += per;
                }
                let xs = &x[i0 * k..(i0 + r) * k];
                let at = (i0, j - cols.start);
                let hold = &mut held[i0 / TILE];
                let args = (xs, buf, (k, k0, kc), (first, last), at);
                match r {
                    4 => step_c::<4>(c, args, hold, out),
                    3 => step_c::<3>(c, args, hold, out),
                    2 => step_c::<2>(c, args, hold, out),
                    _ => step_c::<1>(c, args, hold, out),
                }
                i0 += r;
            }
            k0 += kc;
        }
        j += c;
    }
}

/// A tile's operands: x rows, the strip's chunk, `(k, k0, kc)`, `(first, last)` chunk, and
/// where its outputs go.
type TileArgs<'a> = (
    &'a [f32],
    &'a [f32],
    (usize, usize, usize),
    (bool, bool),
    (usize, usize),
);

/// [`step`] for `c` weight rows.
#[inline(always)]
fn step_c<const R: usize>(
    c: usize,
    args: TileArgs<'_>,
    hold: &mut [[__m512; STRIP]; TILE],
    out: &mut ColumnsMut<'_>,
) {
    match c {
        6 => step::<R, 6>(args, hold, out),
        5 => step::<R, 5>(args, hold, out),
        4 => step::<R, 4>(args, hold, out),
        3 => step::<R, 3>(args, hold, out),
        2 => step::<R, 2>(args, hold, out),
        _ => step::<R, 1>(args, hold, out),
    }
}

/// One tile over one chunk of k: its accumulators from `hold` (zero on the first chunk), the
/// chunk's multiply-adds, then back to `hold`, and reduced into `out` after the last chunk.
#[inline(always)]
fn step<const R: usize, const C: usize>(
    (xs, w, (k, k0, kc), (first, last), at): TileArgs<'_>,
    hold: &mut [[__m512; STRIP]; TILE],
    out: &mut ColumnsMut<'_>,
) {
    if first {
        // SAFETY: a register intrinsic (the callers enable AVX-512F).
        *hold = [[unsafe { _mm512_setzero_ps() }; STRIP]; TILE];
    }
    tile::<R, C>(xs, w, (k, k0, kc), hold);
    if last {
        put::<R, C>(out, at, hold);
    }
}

/// One weight row's blocks decoded into `dst` (as long as their elements).
#[inline(always)]
fn decode_row<B: Blocks512>(row: &[u8], dst: &mut [f32]) {
    let elems = 32 * B::GROUPS;
    assert_eq!(row.len() / B::BYTES * elems, dst.len(), "strip row length");
    for (blk, dst) in row.chunks_exact(B::BYTES).zip(dst.chunks_exact_mut(elems)) {
        // SAFETY: only inlined into `strips`, which enables store_block's features.
        unsafe { store_block::<B>(blk, dst) };
    }
}

/// `acc[r][c]` plus the sixteen lane products of `x_r · w_c` over elements `k0..k0 + kc`, for
/// the `R` x rows `xs` (`[R, k]`) and the `C` decoded weight rows `w` (`[C, kc]`).
#[inline(always)]
// Index loops on purpose: closures and iterator adapters here were compiled without the
// caller's features and called rather than inlined (measured in the register kernel this
// replaced: a `skip` there cost a call per block and half the speed).
#[allow(clippy::needless_range_loop)]
fn tile<const R: usize, const C: usize>(
    xs: &[f32],
    w: &[f32],
    (k, k0, kc): (usize, usize, usize),
    acc: &mut [[__m512; STRIP]; TILE],
) {
    assert!(
        R <= TILE
            && C <= STRIP
            && kc.is_multiple_of(LANES)
            && k0 + kc <= k
            && xs.len() == R * k
            && w.len() == C * kc,
        "tile operand lengths"
    );
    let (xp, wp) = (xs.as_ptr(), w.as_ptr());
    // SAFETY: every load reads `16 t..16 t + 16` of row `c < C` of `w`, or `k0 + 16 t..` of
    // row `r < R` of `xs`, with `16 t + 16 <= kc` and `k0 + kc <= k`: inside the asserted
    // lengths. The callers enable AVX-512F and FMA.
    unsafe {
        let mut a = [[_mm512_setzero_ps(); C]; R];
        for r in 0..R {
            for c in 0..C {
                a[r][c] = acc[r][c];
            }
        }
        let mut t = 0;
        while t < kc {
            let mut xv = [_mm512_setzero_ps(); R];
            for r in 0..R {
                xv[r] = _mm512_loadu_ps(xp.add(r * k + k0 + t));
            }
            for c in 0..C {
                let wv = _mm512_loadu_ps(wp.add(c * kc + t));
                for r in 0..R {
                    a[r][c] = _mm512_fmadd_ps(xv[r], wv, a[r][c]);
                }
            }
            t += LANES;
        }
        for r in 0..R {
            for c in 0..C {
                acc[r][c] = a[r][c];
            }
        }
    }
}

/// Each output's lane sums reduced into `out`: x row `i0 + r` and column `c0 + c` for
/// `acc[r][c]`, `(i0, c0) = at`.
#[inline(always)]
fn put<const R: usize, const C: usize>(
    out: &mut ColumnsMut<'_>,
    at: (usize, usize),
    acc: &[[__m512; STRIP]; TILE],
) {
    let (i0, c0) = at;
    // SAFETY: a register intrinsic (the callers enable AVX-512F).
    let mut v = [[unsafe { _mm512_setzero_ps() }; LANES]; 2];
    for (r, row) in acc[..R].iter().enumerate() {
        for (c, a) in row[..C].iter().enumerate() {
            let n = r * C + c;
            v[n / LANES][n % LANES] = *a;
        }
    }
    let mut sums = [[0.0f32; LANES]; 2];
    for (s, v) in sums.iter_mut().zip(&v).take((R * C).div_ceil(LANES)) {
        // SAFETY: as above.
        *s = unsafe { simd::reduce16(v) };
    }
    for r in 0..R {
        let row = &mut out.row(i0 + r)[c0..c0 + C];
        for (c, o) in row.iter_mut().enumerate() {
            let n = r * C + c;
            *o = sums[n / LANES][simd::reduce16_lane(n % LANES)];
        }
    }
}
