//! Attention on AVX-512 in register tiles of several query rows and a block of [`KEYS`]
//! columns: the AVX2 tiles' two operations ([`super::tile_avx2`]) with sixteen lanes to a
//! register, so that a score's lane sums are one accumulator and a tile holds twice the rows.
//!
//! On Zen 5 (`kernel_bench` `ATTENTION=batch,prompt`: one global layer of the 270m shape, 2
//! threads, three rounds alternating with the AVX2 tiles these replace there), a prefill of
//! batch 8, prompt 1024 took 111-115 ms against 135-137, batch 32, prompt 128 8.8-9.8 against
//! 10.3-11.4; with the score loop kept out of line (below) 105-108 ms. Not measured on other
//! CPUs (Zen 4 runs 512-bit operations in two halves; Intel's cores in one).
//!
//! A score's order is [`simd::dot`]'s: element `e` into lane `e % 16`, ascending, then
//! [`simd::reduce_lanes`]' tree, which [`simd::reduce16`] runs for sixteen scores at once; a
//! weighted sum's is [`simd::axpys`]': one fused multiply-add per element and column, columns
//! in ascending order.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
};

use super::KEYS;
use crate::kernels::simd::{self, Cpu, LANES};

/// Query rows per tile, at most: with [`KEYS`] keys, 24 accumulators, six query vectors and
/// one key vector of the 32 registers.
pub(super) const ROWS: usize = 6;

/// Proof that the tiles may run: an AVX-512 CPU and a head size of whole sixteens.
#[derive(Clone, Copy)]
pub(super) struct Tile(Cpu);

impl Tile {
    /// The tile for heads of `d` values on `cpu`, where it applies: AVX-512, and `d` a
    /// positive multiple of sixteen (every Gemma 3 size).
    pub(super) fn new(cpu: Cpu, d: usize) -> Option<Tile> {
        let fits = d > 0 && d.is_multiple_of(LANES);
        (fits && cpu.has_avx512()).then_some(Tile(cpu))
    }
}

/// `out[r][c] = simd::dot(qs[r], keys[c]) * scale`, bit for bit, for `R` (1 to [`ROWS`])
/// query rows and [`KEYS`] keys, all as long as one another (a multiple of sixteen).
#[inline(always)]
pub(super) fn scores<const R: usize>(
    tile: Tile,
    qs: [&[f32]; R],
    keys: [&[f32]; KEYS],
    scale: f32,
) -> [[f32; KEYS]; R] {
    let d = qs[0].len();
    assert!(
        (1..=ROWS).contains(&R) && d.is_multiple_of(LANES),
        "score tile rows"
    );
    // Plain loops: iterator adapters and `array::map` here were called rather than inlined.
    let mut q = [std::ptr::null(); R];
    for r in 0..R {
        assert_eq!(qs[r].len(), d, "score tile query length");
        q[r] = qs[r].as_ptr();
    }
    let mut k = [std::ptr::null(); KEYS];
    for c in 0..KEYS {
        assert_eq!(keys[c].len(), d, "score tile key length");
        k[c] = keys[c].as_ptr();
    }
    debug_assert!(tile.0.has_avx512());
    // SAFETY: a `Tile` is only made from a `Cpu` that has AVX-512F (and with it FMA); the
    // lengths are asserted above.
    unsafe { scores_avx512(q, k, d, scale) }
}

/// [`scores`]' body.
///
/// # Safety
/// The CPU has AVX-512F; every row of `q` and `k` holds `d` floats, `d` a multiple of 16.
#[target_feature(enable = "avx512f,fma")]
#[inline]
// Index loops on purpose: closures here would be compiled without this function's features.
#[allow(clippy::needless_range_loop)]
unsafe fn scores_avx512<const R: usize>(
    q: [*const f32; R],
    k: [*const f32; KEYS],
    d: usize,
    scale: f32,
) -> [[f32; KEYS]; R] {
    // SAFETY: the caller's contract.
    let acc = unsafe { score_sums(q, k, d) };
    let mut out = [[0.0f32; KEYS]; R];
    for part in 0..(R * KEYS).div_ceil(LANES) {
        let mut sixteen = [_mm512_setzero_ps(); LANES];
        for (i, v) in sixteen.iter_mut().enumerate() {
            let n = part * LANES + i;
            if n < R * KEYS {
                *v = acc[n / KEYS][n % KEYS];
            }
        }
        // SAFETY: the CPU has AVX-512F (the caller's contract).
        let sums = unsafe { simd::reduce16(&sixteen) };
        for i in 0..LANES {
            let n = part * LANES + i;
            if n < R * KEYS {
                out[n / KEYS][n % KEYS] = sums[simd::reduce16_lane(i)] * scale;
            }
        }
    }
    out
}

/// The sixteen lane sums of every score of [`scores_avx512`]. Not inlined: inlined into the
/// attention loop, the tile of five rows kept some of its accumulators on the stack, a store
/// and a load in every step.
///
/// # Safety
/// As [`scores_avx512`].
#[target_feature(enable = "avx512f,fma")]
#[inline(never)]
#[allow(clippy::needless_range_loop)]
unsafe fn score_sums<const R: usize>(
    q: [*const f32; R],
    k: [*const f32; KEYS],
    d: usize,
) -> [[__m512; KEYS]; R] {
    let mut acc = [[_mm512_setzero_ps(); KEYS]; R];
    let mut t = 0;
    while t < d {
        let mut qv = [_mm512_setzero_ps(); R];
        // SAFETY: every load reads `t .. t + 16` with `t + 16 <= d`, inside each row (the
        // caller's contract).
        unsafe {
            for r in 0..R {
                qv[r] = _mm512_loadu_ps(q[r].add(t));
            }
            for c in 0..KEYS {
                let kv = _mm512_loadu_ps(k[c].add(t));
                for r in 0..R {
                    acc[r][c] = _mm512_fmadd_ps(qv[r], kv, acc[r][c]);
                }
            }
        }
        t += LANES;
    }
    acc
}

/// `outs` rows `rows[r]` (each `d` long, `outs` holding whole rows) plus
/// `weights[r][c] · vals[c]` for `c` in turn, one fused multiply-add per element each: the
/// bits of [`simd::axpys`] on each row alone. `rows` ascend (so the rows are distinct), `R` is
/// 1 to [`ROWS`], and every value row is `d` long.
#[inline(always)]
pub(super) fn weighted_sums<const R: usize>(
    tile: Tile,
    outs: &mut [f32],
    rows: [usize; R],
    weights: [[f32; KEYS]; R],
    vals: [&[f32]; KEYS],
) {
    let d = vals[0].len();
    assert!(
        (1..=ROWS).contains(&R) && d.is_multiple_of(LANES) && (rows[R - 1] + 1) * d <= outs.len(),
        "weighted sum tile rows"
    );
    // Plain loops, as in `scores`.
    let mut v = [std::ptr::null(); KEYS];
    for c in 0..KEYS {
        assert_eq!(vals[c].len(), d, "weighted sum tile value length");
        v[c] = vals[c].as_ptr();
    }
    let mut o = [std::ptr::null_mut(); R];
    for r in 0..R {
        assert!(
            r == 0 || rows[r - 1] < rows[r],
            "weighted sum tile rows ascend"
        );
        o[r] = outs[rows[r] * d..].as_mut_ptr();
    }
    debug_assert!(tile.0.has_avx512());
    // SAFETY: a `Tile` is only made from a `Cpu` that has AVX-512F; the rows are distinct, `d`
    // long each and inside `outs`, and every value row is `d` long (asserted above).
    unsafe { weighted_sums_avx512(o, weights, v, d) }
}

/// [`weighted_sums`]' body.
///
/// # Safety
/// The CPU has AVX-512F; `outs` are distinct rows of `d` writable floats, every value row
/// holds `d` floats, and `d` is a multiple of 16.
#[target_feature(enable = "avx512f,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn weighted_sums_avx512<const R: usize>(
    outs: [*mut f32; R],
    weights: [[f32; KEYS]; R],
    v: [*const f32; KEYS],
    d: usize,
) {
    let mut w = [[_mm512_setzero_ps(); KEYS]; R];
    for r in 0..R {
        for c in 0..KEYS {
            w[r][c] = _mm512_set1_ps(weights[r][c]);
        }
    }
    let mut t = 0;
    while t < d {
        // SAFETY: `t + 16 <= d`: inside every output and value row (the caller's contract).
        unsafe {
            let mut o: [__m512; R] = [_mm512_setzero_ps(); R];
            for r in 0..R {
                o[r] = _mm512_loadu_ps(outs[r].add(t));
            }
            for c in 0..KEYS {
                let x = _mm512_loadu_ps(v[c].add(t));
                for r in 0..R {
                    o[r] = _mm512_fmadd_ps(w[r][c], x, o[r]);
                }
            }
            for r in 0..R {
                _mm512_storeu_ps(outs[r].add(t), o[r]);
            }
        }
        t += LANES;
    }
}

#[cfg(test)]
mod tests {
    use super::super::tile_checks::{check_scores, check_sums};
    use super::*;
    use crate::kernels::simd::{self, Isa};

    #[test]
    fn every_score_has_the_bits_of_one_dot_times_the_scale() {
        let Some(tile) = Tile::new(simd::limit(Isa::Avx512), 16) else {
            eprintln!("no AVX-512 here: the score tile is not run");
            return;
        };
        for d in [16, 32, 48, 128, 256, 272] {
            for seed in 0..20 {
                check_scores::<1>(|q, k, s| scores::<1>(tile, q, k, s), d, seed);
                check_scores::<2>(|q, k, s| scores::<2>(tile, q, k, s), d, seed);
                check_scores::<3>(|q, k, s| scores::<3>(tile, q, k, s), d, seed);
                check_scores::<4>(|q, k, s| scores::<4>(tile, q, k, s), d, seed);
                check_scores::<5>(|q, k, s| scores::<5>(tile, q, k, s), d, seed);
                check_scores::<6>(|q, k, s| scores::<6>(tile, q, k, s), d, seed);
            }
        }
    }

    #[test]
    fn every_weighted_sum_has_the_bits_of_its_row_alone() {
        let Some(tile) = Tile::new(simd::limit(Isa::Avx512), 16) else {
            eprintln!("no AVX-512 here: the weighted sum tile is not run");
            return;
        };
        for d in [16, 32, 48, 256] {
            for seed in 0..20 {
                check_sums::<1>(|o, i, w, v| weighted_sums::<1>(tile, o, i, w, v), d, seed);
                check_sums::<2>(|o, i, w, v| weighted_sums::<2>(tile, o, i, w, v), d, seed);
                check_sums::<3>(|o, i, w, v| weighted_sums::<3>(tile, o, i, w, v), d, seed);
                check_sums::<4>(|o, i, w, v| weighted_sums::<4>(tile, o, i, w, v), d, seed);
                check_sums::<5>(|o, i, w, v| weighted_sums::<5>(tile, o, i, w, v), d, seed);
                check_sums::<6>(|o, i, w, v| weighted_sums::<6>(tile, o, i, w, v), d, seed);
            }
        }
    }

    #[test]
    fn the_tile_applies_only_on_avx512_and_whole_sixteens() {
        let cpu = simd::limit(Isa::Avx512);
        assert!(Tile::new(simd::limit(Isa::Avx2Fma), 256).is_none());
        assert!(Tile::new(cpu, 0).is_none());
        assert!(Tile::new(cpu, 200).is_none());
        assert_eq!(Tile::new(cpu, 256).is_some(), cpu.has_avx512());
    }
}
