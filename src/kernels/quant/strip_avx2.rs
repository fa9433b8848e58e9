//! Several x rows times block-format weights on AVX2: [`strip`](super::strip)'s scheme in
//! sixteen registers of eight lanes.
//!
//! A strip of weight rows is decoded once per chunk of k into a buffer in L1, then every x row
//! is multiplied into it by a register tile whose operands are both vectors. An output's sixteen
//! lane sums (element `e` into lane `e % 16`, ascending, as on every `linear` path) are two
//! registers here, and a tile of them both would not fit: so the tile passes over the chunk
//! twice, once for lanes 0-7 (the first eight elements of every sixteen) and once for lanes
//! 8-15, which changes nothing in any lane's order. Between passes and chunks a tile's sums
//! wait in memory; after the last chunk each output's lanes go through
//! [`reduce_lanes`](crate::kernels::simd::reduce_lanes)' tree.
//!
//! The decode is the one-row `gemv`'s ([`lean_group`]): scales divided by 2^24 beforehand, and
//! Q5_0, Q5_K and Q6_K in the paired order, where each sixteen values come as elements 0-3,
//! 8-11, 4-7, 12-15. x is then read in that order too ([`super::reads_paired`]: `linear` makes
//! one copy a call for all threads) and each output's lanes are put back in order before they
//! are added, so every lane still adds its own elements in ascending order. At eight x rows the
//! decode was about 30 % of the time. On an AMD EPYC (Zen 3, one thread, medians alternating,
//! best of eight), Q5_0 x `[8, 640]` by `[2048, 640]` 411 -> 389 µs, `[32, 640]` 1306 -> 1276;
//! Q6_K x `[8, 2048]` by `[640, 2048]` 499 -> 427, `[32, 2048]` 1419 -> 1323.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
};

use super::avx2::{by_format, lean_group, Blocks};
use super::gemv::lane_order;
use super::{untopped_halves, Halves};
use crate::kernels::dtype::DType;
use crate::kernels::parallel::ColumnsMut;
use crate::kernels::simd::{self, LineAligned, LANES};

/// Weight rows decoded per strip.
const STRIP: usize = 4;
/// x rows per register tile: with [`STRIP`] weight rows, 12 accumulators, three x vectors and
/// one weight vector: the 16 registers.
const TILE: usize = 3;
/// Elements of k per chunk (rounded down to whole blocks): the strip's chunk (16 KiB) stays in
/// L1 while every tile passes over it.
const KC: usize = 1024;
/// Eight lanes: half of an output's sums.
const HALF: usize = LANES / 2;

/// The x rows that go through strips on AVX2. Measured where AVX2 code runs for real, an AMD
/// EPYC (Zen 4 limited to AVX2, 2 threads, in-process alternation call by call with the kernels
/// before, medians): from 6 to 24 rows 0.68-0.95 of the time (Q5_0, Q8_0, Q4_K, Q6_K; k 640,
/// 1024, 2048), at 32 rows 0.88-1.02, while at 2 and 4 rows the register kernel, which decodes
/// in registers with no buffer, took 0.71-0.92 of strips' time and from 48 rows the panel
/// kernel 0.87-0.95.
const ROWS: std::ops::RangeInclusive<usize> = 6..=32;

/// Whether `m` x rows times block-format `dtype` go through [`gemm_strips_avx2`] on an AVX2
/// machine (one without AVX-512, or one limited to AVX2).
pub(crate) fn takes_strips_avx2(dtype: DType, m: usize) -> bool {
    dtype.is_quantized() && ROWS.contains(&m)
}

/// `out[i][j] = dot(x_row(i), w_row(cols.start + j))` for `m` x rows (`[m, k]`, each in the
/// paired order where [`super::reads_paired`]) and a block-format `dtype`; false (nothing
/// written) for a float dtype. The order per output is every `linear` path's. Callers outside
/// this module's features call it only after detecting AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gemm_strips_avx2(
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

/// A tile's sums between passes: `[x row][weight row][lane]`.
type Held = [[[f32; LANES]; STRIP]; TILE];

#[target_feature(enable = "avx2,fma,f16c")]
fn strips<B: Blocks>(x: &[f32], m: usize, k: usize, bytes: &[u8], out: &mut ColumnsMut<'_>) {
    let elems = 32 * B::GROUPS;
    assert!(k.is_multiple_of(elems), "gemm rows must be whole blocks");
    let x = &x[..m * k];
    let halves = untopped_halves();
    let row_bytes = k / elems * B::BYTES;
    let kc_max = (KC / elems).max(1) * elems;
    let cols = out.cols();
    let mut strip = LineAligned::zeroed(STRIP * kc_max);
    let tiles = m.div_ceil(TILE);
    let mut held: Vec<Held> = vec![[[[0.0; LANES]; STRIP]; TILE]; tiles];
    // The next strip's rows are prefetched a share before each tile pass, as in `strip`.
    let passes = (tiles * k.div_ceil(kc_max)).max(1);
    let mut j = cols.start;
    while j < cols.end {
        let c = STRIP.min(cols.end - j);
        let w = &bytes[j * row_bytes..(j + c) * row_bytes];
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
                decode_row::<B>(&row[b0..b1], dst, halves);
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
                let hold = &mut held[i0 / TILE];
                if first {
                    *hold = [[[0.0; LANES]; STRIP]; TILE];
                }
                let xs = &x[i0 * k..(i0 + r) * k];
                match (r, c) {
                    (3, 4) => tile::<3, 4>(xs, buf, (k, k0, kc), hold),
                    (3, 3) => tile::<3, 3>(xs, buf, (k, k0, kc), hold),
                    (3, 2) => tile::<3, 2>(xs, buf, (k, k0, kc), hold),
                    (3, _) => tile::<3, 1>(xs, buf, (k, k0, kc), hold),
                    (2, 4) => tile::<2, 4>(xs, buf, (k, k0, kc), hold),
                    (2, 3) => tile::<2, 3>(xs, buf, (k, k0, kc), hold),
                    (2, 2) => tile::<2, 2>(xs, buf, (k, k0, kc), hold),
                    (2, _) => tile::<2, 1>(xs, buf, (k, k0, kc), hold),
                    (_, 4) => tile::<1, 4>(xs, buf, (k, k0, kc), hold),
                    (_, 3) => tile::<1, 3>(xs, buf, (k, k0, kc), hold),
                    (_, 2) => tile::<1, 2>(xs, buf, (k, k0, kc), hold),
                    (_, _) => tile::<1, 1>(xs, buf, (k, k0, kc), hold),
                }
                if last {
                    for (dr, sums) in hold[..r].iter().enumerate() {
                        let row = &mut out.row(i0 + dr)[j - cols.start..j - cols.start + c];
                        for (o, sums) in row.iter_mut().zip(sums) {
                            *o = simd::reduce_lanes(&lane_order::<B>(sums));
                        }
                    }
                }
                i0 += r;
            }
            k0 += kc;
        }
        j += c;
    }
}

/// One weight row's blocks decoded into `dst` (as long as their elements).
#[inline(always)]
fn decode_row<B: Blocks>(row: &[u8], dst: &mut [f32], halves: &Halves) {
    let elems = 32 * B::GROUPS;
    assert_eq!(row.len() / B::BYTES * elems, dst.len(), "strip row length");
    for (blk, dst) in row.chunks_exact(B::BYTES).zip(dst.chunks_exact_mut(elems)) {
        // SAFETY: only inlined into `strips`, which enables F16C.
        let shared = unsafe { B::prepare_untopped(blk, halves) };
        for (g, dst) in dst.chunks_exact_mut(32).enumerate() {
            // SAFETY: `blk` is one whole block, and this is only inlined into `strips`, which
            // enables AVX2, FMA and F16C; `dst` holds 32 f32s (four unaligned stores).
            unsafe {
                let v = lean_group::<B>(blk, &shared, g);
                for (q, v) in v.into_iter().enumerate() {
                    _mm256_storeu_ps(dst.as_mut_ptr().add(8 * q), v);
                }
            }
        }
    }
}

/// `acc[r][c]` plus the sixteen lane products of `x_r · w_c` over elements `k0..k0 + kc`, for
/// the `R` x rows `xs` (`[R, k]`) and the `C` decoded weight rows `w` (`[C, kc]`): lanes 0-7
/// in one pass, then lanes 8-15.
#[inline(always)]
// Index loops on purpose, as in `strip`: closures here were compiled without the caller's
// features and called rather than inlined.
#[allow(clippy::needless_range_loop)]
fn tile<const R: usize, const C: usize>(
    xs: &[f32],
    w: &[f32],
    (k, k0, kc): (usize, usize, usize),
    acc: &mut Held,
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
    // SAFETY: every load reads `16 t + h..16 t + h + 8` (`h` 0 or 8) of row `c < C` of `w`, or
    // `k0 + 16 t + h..` of row `r < R` of `xs`, with `16 t + 16 <= kc` and `k0 + kc <= k`:
    // inside the asserted lengths; `acc` is read and written as arrays of sixteen. The callers
    // enable AVX2 and FMA.
    unsafe {
        for h in [0, HALF] {
            let mut a: [[__m256; C]; R] = [[_mm256_setzero_ps(); C]; R];
            for r in 0..R {
                for c in 0..C {
                    a[r][c] = _mm256_loadu_ps(acc[r][c].as_ptr().add(h));
                }
            }
            let mut t = h;
            while t < kc {
                let mut xv = [_mm256_setzero_ps(); R];
                for r in 0..R {
                    xv[r] = _mm256_loadu_ps(xp.add(r * k + k0 + t));
                }
                for c in 0..C {
                    let wv = _mm256_loadu_ps(wp.add(c * kc + t));
                    for r in 0..R {
                        a[r][c] = _mm256_fmadd_ps(xv[r], wv, a[r][c]);
                    }
                }
                t += LANES;
            }
            for r in 0..R {
                for c in 0..C {
                    _mm256_storeu_ps(acc[r][c].as_mut_ptr().add(h), a[r][c]);
                }
            }
        }
    }
}
