//! Attention on AVX2 in register tiles of several query rows and a block of [`KEYS`] columns:
//! their scores ([`scores`]), each with the bits of [`simd::dot`] times the scale, and their
//! weighted sums of values ([`weighted_sums`]), each with the bits of [`simd::axpys`].
//!
//! Why tiles. The portable loops, compiled for AVX2, take one query row at a time. A score
//! then keeps its sixteen lane sums in two registers and reloads the query for every key: ten
//! loads for eight multiply-adds, then a scalar tree per score. A weighted sum loads and
//! stores its output row for every block of values, and loads each value once per row. Here
//! up to [`ROWS`] rows share every key and value load (seven loads for twelve multiply-adds),
//! and the trees of eight scores run side by side on whole vectors.
//!
//! A score's order is [`simd::dot`]'s: element `e` into lane `e % 16`, ascending, then
//! [`simd::reduce_lanes`]' tree. Sixteen lanes are two registers, and a tile of both would not
//! fit sixteen registers, so the tile passes over the head twice, once for lanes 0-7 (the
//! first eight elements of every sixteen) and once for 8-15, which changes no lane's order.
//! The tree's first round adds lane `i + 8` to lane `i`: the two passes' registers, added.
//! [`reduce8`] does the other three rounds for eight scores at once.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_permute2f128_ps,
    _mm256_set1_ps, _mm256_setzero_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
};

use super::KEYS;
use crate::kernels::simd::{Cpu, LANES};

/// Query rows per tile, at most: with [`KEYS`] keys, twelve accumulators, three query
/// vectors and one key vector are the sixteen registers.
pub(super) const ROWS: usize = 3;

/// Eight lanes: one pass's half of a score's sixteen.
const HALF: usize = LANES / 2;

/// Proof that the tiles may run: an AVX2 CPU and a head size of whole sixteens.
#[derive(Clone, Copy)]
pub(super) struct Tile(Cpu);

impl Tile {
    /// The tile for heads of `d` values on `cpu`, where it applies: AVX2 (AVX-512 included),
    /// and `d` a positive multiple of sixteen (every Gemma 3 size).
    ///
    /// On AVX-512 too: the portable loop compiled for AVX-512 keeps a score's sixteen lanes in
    /// one register, but still loads the query for every key and the output row for every
    /// block of values. On Zen 5 (`kernel_bench` `STEPS=300 ATTENTION=32,128`, one global
    /// layer's decode step over caches read from memory, 2 threads, three rounds alternating,
    /// both with an earlier form of the second prefetch request) the tile took 322-324 µs
    /// against 351-377, at prompt 48 160-162 against 169-173, and at batch 8, prompt 1024
    /// 650-655 against 650-818.
    pub(super) fn new(cpu: Cpu, d: usize) -> Option<Tile> {
        let fits = d > 0 && d.is_multiple_of(LANES);
        (fits && cpu.has_avx2()).then_some(Tile(cpu))
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
    // Plain loops: iterator adapters here could be called rather than inlined (as
    // `tile_avx512`'s were).
    for q in &qs {
        assert_eq!(q.len(), d, "score tile query length");
    }
    for k in &keys {
        assert_eq!(k.len(), d, "score tile key length");
    }
    debug_assert!(tile.0.has_avx2());
    // SAFETY: a `Tile` is only made from a `Cpu` that has AVX2 (and with it FMA); the lengths
    // are asserted above.
    unsafe { scores_avx2(qs, keys, scale) }
}

/// [`scores`]' body.
///
/// # Safety
/// The CPU has AVX2 and FMA; every row of `qs` and `keys` is `d` long, `d` a multiple of 16.
#[target_feature(enable = "avx2,fma")]
#[inline]
// Index loops on purpose: closures here would be compiled without this function's features.
#[allow(clippy::needless_range_loop)]
unsafe fn scores_avx2<const R: usize>(
    qs: [&[f32]; R],
    keys: [&[f32]; KEYS],
    scale: f32,
) -> [[f32; KEYS]; R] {
    let d = qs[0].len();
    let q = qs.map(<[f32]>::as_ptr);
    let k = keys.map(<[f32]>::as_ptr);
    // SAFETY: the caller's contract, with `h` 0 and 8.
    let (low, high) = unsafe { (pass(q, k, d, 0), pass(q, k, d, HALF)) };
    // The tree's first round: lane i + 8 (the second pass) into lane i.
    let mut v = [_mm256_setzero_ps(); 2 * HALF];
    for r in 0..R {
        for c in 0..KEYS {
            v[r * KEYS + c] = _mm256_add_ps(low[r][c], high[r][c]);
        }
    }
    let s = _mm256_set1_ps(scale);
    let mut out = [[0.0f32; KEYS]; R];
    for part in 0..(R * KEYS).div_ceil(HALF) {
        let mut eight = [_mm256_setzero_ps(); HALF];
        eight.copy_from_slice(&v[part * HALF..(part + 1) * HALF]);
        let mut sums = [0.0f32; HALF];
        // SAFETY: `sums` holds eight f32s; the CPU has AVX2 (the caller's contract).
        unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_mul_ps(reduce8(eight), s)) };
        for i in 0..HALF {
            let n = part * HALF + i;
            if n < R * KEYS {
                out[n / KEYS][n % KEYS] = sums[lane_of(i)];
            }
        }
    }
    out
}

/// One pass of [`scores_avx2`]: the lanes `h .. h + 8` of every sixteen elements. Not
/// inlined: two passes in one body kept the first one's twelve sums in registers and spilled
/// the second one's accumulators inside its loop.
///
/// # Safety
/// The CPU has AVX2 and FMA; every row of `q` and `k` holds `d` floats, `d` a multiple of 16,
/// and `h` is 0 or 8.
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
#[allow(clippy::needless_range_loop)]
unsafe fn pass<const R: usize>(
    q: [*const f32; R],
    k: [*const f32; KEYS],
    d: usize,
    h: usize,
) -> [[__m256; KEYS]; R] {
    let mut acc = [[_mm256_setzero_ps(); KEYS]; R];
    let mut t = h;
    while t < d {
        let mut qv = [_mm256_setzero_ps(); R];
        // SAFETY: every load reads `t .. t + 8` with `t + 8 <= d`, inside each row (the
        // caller's contract).
        unsafe {
            for r in 0..R {
                qv[r] = _mm256_loadu_ps(q[r].add(t));
            }
            for c in 0..KEYS {
                let kv = _mm256_loadu_ps(k[c].add(t));
                for r in 0..R {
                    acc[r][c] = _mm256_fmadd_ps(qv[r], kv, acc[r][c]);
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
    for v in &vals {
        assert_eq!(v.len(), d, "weighted sum tile value length");
    }
    let mut o = [std::ptr::null_mut(); R];
    for r in 0..R {
        assert!(
            r == 0 || rows[r - 1] < rows[r],
            "weighted sum tile rows ascend"
        );
        o[r] = outs[rows[r] * d..].as_mut_ptr();
    }
    debug_assert!(tile.0.has_avx2());
    // SAFETY: a `Tile` is only made from a `Cpu` that has AVX2 and FMA; the rows are distinct,
    // `d` long each and inside `outs`, and every value row is `d` long (asserted above).
    unsafe { weighted_sums_avx2(o, weights, vals) }
}

/// [`weighted_sums`]' body.
///
/// # Safety
/// The CPU has AVX2 and FMA; `outs` are distinct rows of `d` writable floats, `d` the length
/// of every value row and a multiple of 8.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn weighted_sums_avx2<const R: usize>(
    outs: [*mut f32; R],
    weights: [[f32; KEYS]; R],
    vals: [&[f32]; KEYS],
) {
    let d = vals[0].len();
    let v = vals.map(<[f32]>::as_ptr);
    let mut w = [[_mm256_setzero_ps(); KEYS]; R];
    for r in 0..R {
        for c in 0..KEYS {
            w[r][c] = _mm256_set1_ps(weights[r][c]);
        }
    }
    let mut t = 0;
    while t < d {
        // SAFETY: `t + 8 <= d`: inside every output and value row (the caller's contract).
        unsafe {
            let mut o = [_mm256_setzero_ps(); R];
            for r in 0..R {
                o[r] = _mm256_loadu_ps(outs[r].add(t));
            }
            for c in 0..KEYS {
                let x = _mm256_loadu_ps(v[c].add(t));
                for r in 0..R {
                    o[r] = _mm256_fmadd_ps(w[r][c], x, o[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(outs[r].add(t), o[r]);
            }
        }
        t += HALF;
    }
}

/// Where [`reduce8`] leaves vector `i`'s sum.
#[inline(always)]
const fn lane_of(i: usize) -> usize {
    (i % 2) * 4 + i / 2
}

/// The last three rounds of [`simd::reduce_lanes`]' tree (lane `i + h` into lane `i` for `h`
/// = 4, 2, 1) for eight vectors at once: vector `i`'s sum, bit for bit, in lane
/// [`lane_of`]`(i)`. Each round pairs vectors up so that one add does the round for two (then
/// four, eight) of them, with the same operands.
#[target_feature(enable = "avx2")]
#[inline]
fn reduce8(v: [__m256; HALF]) -> __m256 {
    // h = 4: vector p holds vector 2p's lanes 0-3 + 4-7 in its low half, 2p + 1's in its high.
    let mut s1 = [_mm256_setzero_ps(); 4];
    for (p, s) in s1.iter_mut().enumerate() {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        *s = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        );
    }
    // h = 2: vector q's low half holds vectors 4q (lanes 0-1) and 4q + 2 (lanes 2-3), its high
    // half 4q + 1 and 4q + 3.
    let mut s2 = [_mm256_setzero_ps(); 2];
    for (q, s) in s2.iter_mut().enumerate() {
        let (a, b) = (s1[2 * q], s1[2 * q + 1]);
        *s = _mm256_add_ps(
            _mm256_shuffle_ps::<0x44>(a, b),
            _mm256_shuffle_ps::<0xEE>(a, b),
        );
    }
    // h = 1: low half vectors 0, 2, 4, 6; high half 1, 3, 5, 7.
    let (a, b) = (s2[0], s2[1]);
    _mm256_add_ps(
        _mm256_shuffle_ps::<0x88>(a, b),
        _mm256_shuffle_ps::<0xDD>(a, b),
    )
}

#[cfg(test)]
mod tests {
    use super::super::tile_checks::{check_scores, check_sums};
    use super::*;
    use crate::kernels::simd::{self, Isa};

    #[test]
    fn every_score_has_the_bits_of_one_dot_times_the_scale() {
        let Some(tile) = Tile::new(simd::limit(Isa::Avx2Fma), 16) else {
            eprintln!("no AVX2 here: the score tile is not run");
            return;
        };
        for d in [16, 32, 48, 128, 256, 272] {
            for seed in 0..20 {
                check_scores::<1>(|q, k, s| scores::<1>(tile, q, k, s), d, seed);
                check_scores::<2>(|q, k, s| scores::<2>(tile, q, k, s), d, seed);
                check_scores::<3>(|q, k, s| scores::<3>(tile, q, k, s), d, seed);
            }
        }
    }

    #[test]
    fn every_weighted_sum_has_the_bits_of_its_row_alone() {
        let Some(tile) = Tile::new(simd::limit(Isa::Avx2Fma), 16) else {
            eprintln!("no AVX2 here: the weighted sum tile is not run");
            return;
        };
        for d in [16, 32, 48, 256] {
            for seed in 0..20 {
                check_sums::<1>(|o, i, w, v| weighted_sums::<1>(tile, o, i, w, v), d, seed);
                check_sums::<2>(|o, i, w, v| weighted_sums::<2>(tile, o, i, w, v), d, seed);
                check_sums::<3>(|o, i, w, v| weighted_sums::<3>(tile, o, i, w, v), d, seed);
            }
        }
    }

    #[test]
    fn the_tile_applies_only_where_it_was_measured() {
        let cpu = simd::limit(Isa::Avx2Fma);
        assert!(Tile::new(simd::limit(Isa::Portable), 256).is_none());
        assert!(Tile::new(cpu, 0).is_none());
        assert!(Tile::new(cpu, 200).is_none());
        assert_eq!(Tile::new(cpu, 256).is_some(), cpu.has_avx2());
    }
}
