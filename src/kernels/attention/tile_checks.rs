//! The checks both register tiles pass ([`super::tile_avx2`], [`super::tile_avx512`]): every
//! score has the bits of one [`simd::dot`] times the scale, and every weighted sum the bits of
//! [`simd::axpys`] on its row alone.

use super::KEYS;
use crate::kernels::simd;

/// Values whose sums round differently in each order: magnitudes over many binades.
pub(super) fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            v * (1u32 << (s % 20)) as f32
        })
        .collect()
}

/// `scores(queries, keys, scale)` of `R` query rows of `d` against [`KEYS`] keys, checked.
pub(super) fn check_scores<const R: usize>(
    scores: impl Fn([&[f32]; R], [&[f32]; KEYS], f32) -> [[f32; KEYS]; R],
    d: usize,
    seed: u32,
) {
    let q: Vec<Vec<f32>> = (0..R as u32).map(|r| values(d, seed + r)).collect();
    let k: Vec<Vec<f32>> = (0..KEYS as u32).map(|c| values(d, seed + 50 + c)).collect();
    let scale = 0.0625 * (1.0 + seed as f32 / 7.0);
    let got = scores(
        std::array::from_fn(|r| &q[r][..]),
        std::array::from_fn(|c| &k[c][..]),
        scale,
    );
    for r in 0..R {
        for c in 0..KEYS {
            let want = simd::dot(&q[r], &k[c]) * scale;
            assert_eq!(
                got[r][c].to_bits(),
                want.to_bits(),
                "query {r} key {c} of {R} rows, d {d}, seed {seed}"
            );
        }
    }
}

/// `sums(outs, rows, weights, values)` of `R` rows of `d` (every other row of `outs`, from
/// the first or the second) and [`KEYS`] value rows, checked.
pub(super) fn check_sums<const R: usize>(
    sums: impl Fn(&mut [f32], [usize; R], [[f32; KEYS]; R], [&[f32]; KEYS]),
    d: usize,
    seed: u32,
) {
    let vals: Vec<Vec<f32>> = (0..KEYS as u32).map(|c| values(d, seed + c)).collect();
    let weights: [[f32; KEYS]; R] = std::array::from_fn(|r| {
        std::array::from_fn(|c| values(1, seed + 10 * r as u32 + c as u32 + 90)[0])
    });
    let rows: [usize; R] = std::array::from_fn(|r| 2 * r + (seed as usize % 2));
    let start = values((2 * R + 1) * d, seed + 200);
    let mut got = start.clone();
    sums(
        &mut got,
        rows,
        weights,
        std::array::from_fn(|c| &vals[c][..]),
    );
    let mut want = start;
    for (r, &row) in rows.iter().enumerate() {
        let refs: [&[f32]; KEYS] = std::array::from_fn(|c| &vals[c][..]);
        simd::axpys(&mut want[row * d..(row + 1) * d], weights[r], refs);
    }
    let same = got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{R} rows, d {d}, seed {seed}");
}
