//! The integer half of the batched screen: x rows rounded to 8-bit integers, and exact `i32`
//! dot products of those with the screen's 8-bit weight rows.
//!
//! Why integers: at several x rows the screen is bound by arithmetic, not by the bytes it reads,
//! and 8-bit multiply-adds need no decoding of the weights: on an AMD EPYC (Zen 2, AVX2) a
//! register tile of them does 48 multiply-adds per ns per core against 34 for f32 x times the
//! same bytes widened to f32 (docs/performance.md). `vpmaddubsw` multiplies unsigned by signed
//! bytes and adds pairs into saturating 16-bit lanes, so x is held as `|q_i|` and the weight
//! takes x's sign (`vpsignb`); with `|q_i|, |w_i| <= 127` a pair sums to at most 32258, below
//! saturation, so every sum here is exact: no order, no rounding, the same integers on every
//! instruction set.
//!
//! Outliers: the hidden state a language model's head reads has a few channels an order of
//! magnitude above the rest (on Gemma 3 270M the largest value of a row is ~11 times its root
//! mean square), and one 8-bit scale per row would round every other channel coarsely: the
//! screen then kept a median of 122 rows per x against 6 for f32 x (real prompts; for random
//! token ids a tenth of the rows kept over 40k). So the [`WIDE`] channels largest over the batch
//! are held as 16-bit integers in the same units as the rest, the scale is set by the others,
//! and their products (`vpmaddwd` on 16-bit lanes) go into the same accumulators.
#![allow(unsafe_code)]

use crate::kernels::simd::Cpu;

/// Magnitude of a quantised x value.
pub(super) const X_QMAX: f32 = 127.0;
/// Channels held as 16-bit integers: the outliers of a batch of x rows.
pub(super) const WIDE: usize = 16;
/// Magnitude of a quantised value of a wide channel.
const WIDE_QMAX: f32 = 32767.0;
/// x rows per register tile.
pub(super) const TILE_X: usize = 4;
/// Weight rows per register tile.
const TILE_W: usize = 2;
/// Inner elements per step of the AVX2 tile.
const STEP: usize = 32;

/// The largest inner length whose sums fit `i32`: `k · 127 · 127 + WIDE · 32767 · 127 < 2³¹`.
pub(super) const MAX_K: usize = 1 << 16;

/// One x row rounded to `q_i · scale`, with what the bound needs about the rounding.
pub(super) struct Rounded {
    pub(super) scale: f32,
    /// `‖x - q · scale‖₂`, rounded up, and positive.
    pub(super) err_l2: f64,
}

/// The (at most) [`WIDE`] channels with the largest magnitudes over the x rows `use_row` marks
/// (`x` is `[m, k]`), in increasing order; ties go to the lower channel.
pub(super) fn outlier_channels(x: &[f32], k: usize, use_row: &[bool]) -> Vec<usize> {
    let mut peak = vec![0.0f32; k];
    for (row, _) in x.chunks_exact(k).zip(use_row).filter(|(_, &u)| u) {
        for (p, &v) in peak.iter_mut().zip(row) {
            *p = p.max(v.abs());
        }
    }
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| peak[b].total_cmp(&peak[a]).then(a.cmp(&b)));
    order.truncate(WIDE);
    order.sort_unstable();
    order
}

/// Round the finite, not all-zero `x` into `q` (as `i8` bits) and `mag = |q|` for every channel
/// but `channels`, which go into `wide` (and are 0 in `q` and `mag`), all in one unit.
pub(super) fn round_row(
    x: &[f32],
    channels: &[usize],
    q: &mut [u8],
    mag: &mut [u8],
    wide: &mut [i16],
) -> Rounded {
    let is_wide = |t: usize| channels.binary_search(&t).is_ok();
    let (mut narrow_max, mut wide_max) = (0.0f32, 0.0f32);
    for (t, v) in x.iter().enumerate() {
        if is_wide(t) {
            wide_max = wide_max.max(v.abs());
        } else {
            narrow_max = narrow_max.max(v.abs());
        }
    }
    let scale = (narrow_max / X_QMAX).max(wide_max / WIDE_QMAX);
    let mut sq = 0.0f64;
    let mut error = |v: f32, level: f32| {
        // Exact in f64: an integer below 2¹⁵ times an f32, subtracted from a nearby f32.
        let e = f64::from(v) - f64::from(level) * f64::from(scale);
        sq += e * e;
    };
    for (t, (&v, (qi, mi))) in x.iter().zip(q.iter_mut().zip(mag.iter_mut())).enumerate() {
        if is_wide(t) {
            *qi = 0;
            *mi = 0;
            continue;
        }
        // Any rounding will do: the errors are measured, not assumed.
        let level = (v / scale).round_ties_even().clamp(-X_QMAX, X_QMAX);
        *qi = level as i8 as u8;
        *mi = level.abs() as u8;
        error(v, level);
    }
    for (slot, &t) in wide.iter_mut().zip(channels) {
        let level = (x[t] / scale)
            .round_ties_even()
            .clamp(-WIDE_QMAX, WIDE_QMAX);
        *slot = level as i16;
        error(x[t], level);
    }
    Rounded {
        scale,
        // Never 0: times a wild row's infinite factor it must give infinity, not NaN.
        err_l2: (sq.sqrt() * (1.0 + 1e-10)).max(f64::MIN_POSITIVE),
    }
}

/// A weight row's values at `channels`, widened; zero past `channels.len()`.
fn wide_of(row: &[u8], channels: &[usize]) -> [i16; WIDE] {
    let mut out = [0i16; WIDE];
    for (slot, &t) in out.iter_mut().zip(channels) {
        *slot = i16::from(row[t] as i8);
    }
    out
}

/// x rows in the forms the tile reads: `q` (`i8` bits) and `|q|`, row-major `[m, k]`, and the
/// values of the wide `channels`, `[m, WIDE]`.
pub(super) struct XBytes {
    pub(super) q: Vec<u8>,
    pub(super) mag: Vec<u8>,
    pub(super) wide: Vec<i16>,
    pub(super) channels: Vec<usize>,
    /// `Σ_t q[i * k + t]` of each row, for the VNNI tile's offset: found on first use, once
    /// per batch rather than once per block of weight rows.
    pub(super) sums: std::sync::OnceLock<Vec<i32>>,
}

impl XBytes {
    /// The rows' sums of `q` (rows of `k`).
    fn sums(&self, k: usize) -> &[i32] {
        self.sums.get_or_init(|| {
            self.q
                .chunks_exact(k.max(1))
                .map(|row| row.iter().map(|&v| i32::from(v as i8)).sum())
                .collect()
        })
    }
}

/// `out[i * rows + j] = Σ_t q[i * k + t] · w[j * k + t] + Σ_c wide[i * WIDE + c] · w[j * k +
/// channels[c]]` for `i < m` and `j < rows`, with `q` and `w` as `i8`. `m` is a multiple of
/// [`TILE_X`] (the caller pads x with rows of its own).
pub(super) fn dots(
    cpu: Cpu,
    x: &XBytes,
    m: usize,
    w: &[u8],
    rows: usize,
    k: usize,
    out: &mut [i32],
) {
    let u = &x.q;
    debug_assert!(m.is_multiple_of(TILE_X) && u.len() >= m * k && w.len() >= rows * k);
    debug_assert!(x.mag.len() == u.len() && x.wide.len() >= m * WIDE);
    debug_assert!(out.len() >= m * rows && k <= MAX_K);
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx512_vnni() {
        let grouped = rows - rows % VNNI_W;
        // SAFETY: only detection makes a `Cpu`, and `has_avx512_vnni` means AVX-512F, BW and
        // VNNI were confirmed; the bounds are the ones checked above.
        unsafe { dots_vnni(x, m, w, grouped, k, out, rows) };
        for j in grouped..rows {
            dots_of_row(x, m, &w[j * k..(j + 1) * k], k, &mut out[j..], rows);
        }
        return;
    }
    let paired = rows - rows % TILE_W;
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() && k >= STEP {
        // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 was confirmed;
        // the bounds are the ones checked above.
        unsafe { dots_avx2(x, m, w, paired, k, out, rows) };
        for j in paired..rows {
            dots_of_row(x, m, &w[j * k..(j + 1) * k], k, &mut out[j..], rows);
        }
        return;
    }
    let _ = (cpu, paired);
    for j in 0..rows {
        dots_of_row(x, m, &w[j * k..(j + 1) * k], k, &mut out[j..], rows);
    }
}

/// [`dots`] for one weight row, into `out[i * stride]`.
fn dots_of_row(x: &XBytes, m: usize, row: &[u8], k: usize, out: &mut [i32], stride: usize) {
    let wide = wide_of(row, &x.channels);
    for i in 0..m {
        out[i * stride] = dot_scalar(&x.q[i * k..(i + 1) * k], row)
            + wide_scalar(&x.wide[i * WIDE..(i + 1) * WIDE], &wide);
    }
}

fn wide_scalar(a: &[i16], b: &[i16]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

fn dot_scalar(u: &[u8], w: &[u8]) -> i32 {
    u.iter()
        .zip(w)
        .map(|(&a, &b)| i32::from(a as i8) * i32::from(b as i8))
        .sum()
}

/// The AVX2 tile: [`TILE_X`] x rows × [`TILE_W`] weight rows in eight `i32` accumulators,
/// each weight pair loaded once per x row group while it sits in L1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dots_avx2(
    x: &XBytes,
    m: usize,
    w: &[u8],
    paired: usize,
    k: usize,
    out: &mut [i32],
    rows: usize,
) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_extracti128_si256,
        _mm256_hadd_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_set1_epi16, _mm256_setzero_si256, _mm256_sign_epi8, _mm_add_epi32, _mm_storeu_si128,
    };
    let full = k - k % STEP;
    let ones = _mm256_set1_epi16(1);
    let (q, mag) = (&x.q, &x.mag);
    let mut j = 0;
    while j < paired {
        let (w0, w1) = (&w[j * k..(j + 1) * k], &w[(j + 1) * k..(j + 2) * k]);
        let (ww0, ww1) = (wide_of(w0, &x.channels), wide_of(w1, &x.channels));
        // SAFETY: each array holds 16 i16s.
        let (ww0, ww1) = unsafe {
            (
                _mm256_loadu_si256(ww0.as_ptr().cast::<__m256i>()),
                _mm256_loadu_si256(ww1.as_ptr().cast::<__m256i>()),
            )
        };
        let mut i = 0;
        while i < m {
            let mut acc = [_mm256_setzero_si256(); TILE_X * TILE_W];
            let mut t = 0;
            while t < full {
                // SAFETY: reads bytes `t .. t + 32` of rows inside `q`, `mag` and `w`, with
                // `t + 32 <= full <= k` (the caller's bounds).
                unsafe {
                    macro_rules! load {
                        ($s:expr, $at:expr) => {
                            _mm256_loadu_si256($s.as_ptr().add($at).cast::<__m256i>())
                        };
                    }
                    let (a0, a1) = (load!(w0, t), load!(w1, t));
                    for r in 0..TILE_X {
                        let at = (i + r) * k + t;
                        let (xs, xm) = (load!(q, at), load!(mag, at));
                        let p0 = _mm256_maddubs_epi16(xm, _mm256_sign_epi8(a0, xs));
                        let p1 = _mm256_maddubs_epi16(xm, _mm256_sign_epi8(a1, xs));
                        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p0, ones));
                        acc[TILE_X + r] =
                            _mm256_add_epi32(acc[TILE_X + r], _mm256_madd_epi16(p1, ones));
                    }
                }
                t += STEP;
            }
            for r in 0..TILE_X {
                // SAFETY: row `i + r` of `x.wide` holds 16 i16s (the caller's bounds).
                let xw = unsafe {
                    _mm256_loadu_si256(x.wide.as_ptr().add((i + r) * WIDE).cast::<__m256i>())
                };
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(xw, ww0));
                acc[TILE_X + r] = _mm256_add_epi32(acc[TILE_X + r], _mm256_madd_epi16(xw, ww1));
            }
            // Eight sums from eight accumulators: three rounds of pairwise adds.
            let h0 = _mm256_hadd_epi32(acc[0], acc[1]);
            let h1 = _mm256_hadd_epi32(acc[2], acc[3]);
            let h2 = _mm256_hadd_epi32(acc[4], acc[5]);
            let h3 = _mm256_hadd_epi32(acc[6], acc[7]);
            let (g0, g1) = (_mm256_hadd_epi32(h0, h1), _mm256_hadd_epi32(h2, h3));
            let s0 = _mm_add_epi32(
                _mm256_castsi256_si128(g0),
                _mm256_extracti128_si256::<1>(g0),
            );
            let s1 = _mm_add_epi32(
                _mm256_castsi256_si128(g1),
                _mm256_extracti128_si256::<1>(g1),
            );
            let mut sums = [0i32; TILE_X * TILE_W];
            // SAFETY: `sums` holds eight i32s, two 128-bit stores.
            unsafe {
                _mm_storeu_si128(sums.as_mut_ptr().cast(), s0);
                _mm_storeu_si128(sums.as_mut_ptr().add(TILE_X).cast(), s1);
            }
            for r in 0..TILE_X {
                let xr = &q[(i + r) * k + full..(i + r + 1) * k];
                out[(i + r) * rows + j] = sums[r] + dot_scalar(xr, &w0[full..]);
                out[(i + r) * rows + j + 1] = sums[TILE_X + r] + dot_scalar(xr, &w1[full..]);
            }
            i += TILE_X;
        }
        j += TILE_W;
    }
}

/// Weight rows per tile of [`dots_vnni`].
const VNNI_W: usize = 4;
/// Inner elements per step of [`dots_vnni`].
const VNNI_STEP: usize = 64;

/// The AVX-512 VNNI tile: [`TILE_X`] x rows × [`VNNI_W`] weight rows in sixteen `i32`
/// accumulators. `vpdpbusd` multiplies unsigned by signed bytes and adds each four products
/// into a 32-bit lane, with no 16-bit stage to saturate, so the weight's bytes are made unsigned
/// (`w + 128`, one xor per vector, shared by every x row) and x stays signed:
/// `Σ q w = Σ q (w + 128) - 128 Σ q`. Lanes past `k` load as zero bytes of x, which add nothing.
/// Sums wrap in `i32`, and the true result fits ([`MAX_K`]), so the wrapped one is exact.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dots_vnni(
    x: &XBytes,
    m: usize,
    w: &[u8],
    grouped: usize,
    k: usize,
    out: &mut [i32],
    rows: usize,
) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_extracti128_si256,
        _mm256_hadd_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_setzero_si256,
        _mm512_castsi512_si256, _mm512_dpbusd_epi32, _mm512_extracti64x4_epi64, _mm512_loadu_si512,
        _mm512_maskz_loadu_epi8, _mm512_set1_epi8, _mm512_setzero_si512, _mm512_xor_si512,
        _mm_add_epi32, _mm_storeu_si128,
    };
    let q = &x.q;
    let steps = k.div_ceil(VNNI_STEP);
    // The mask of the last step's lanes inside `k`.
    let last: u64 = match k % VNNI_STEP {
        0 => u64::MAX,
        r => (1u64 << r) - 1,
    };
    let flip = _mm512_set1_epi8(i8::MIN);
    let sums_q = x.sums(k);
    let mut j = 0;
    while j < grouped {
        let wr: [&[u8]; VNNI_W] = std::array::from_fn(|c| &w[(j + c) * k..(j + c + 1) * k]);
        let wide: [[i16; WIDE]; VNNI_W] = std::array::from_fn(|c| wide_of(wr[c], &x.channels));
        // SAFETY: each array holds 16 i16s.
        let ww: [__m256i; VNNI_W] = unsafe {
            let at = |c: usize| wide[c].as_ptr().cast::<__m256i>();
            [
                _mm256_loadu_si256(at(0)),
                _mm256_loadu_si256(at(1)),
                _mm256_loadu_si256(at(2)),
                _mm256_loadu_si256(at(3)),
            ]
        };
        let mut i = 0;
        while i < m {
            let mut acc = [_mm512_setzero_si512(); TILE_X * VNNI_W];
            for s in 0..steps {
                let t = s * VNNI_STEP;
                let mask = if s + 1 == steps { last } else { u64::MAX };
                // SAFETY: a masked load reads only the lanes `mask` sets, bytes `t ..
                // min(t + 64, k)` of rows inside `q` and `w` (the caller's bounds).
                unsafe {
                    macro_rules! load {
                        ($s:expr, $at:expr) => {
                            if mask == u64::MAX {
                                _mm512_loadu_si512($s.as_ptr().add($at).cast())
                            } else {
                                _mm512_maskz_loadu_epi8(mask, $s.as_ptr().add($at).cast::<i8>())
                            }
                        };
                    }
                    let a = [
                        _mm512_xor_si512(load!(wr[0], t), flip),
                        _mm512_xor_si512(load!(wr[1], t), flip),
                        _mm512_xor_si512(load!(wr[2], t), flip),
                        _mm512_xor_si512(load!(wr[3], t), flip),
                    ];
                    for r in 0..TILE_X {
                        let xs = load!(q, (i + r) * k + t);
                        for (c, &wv) in a.iter().enumerate() {
                            let slot = c * TILE_X + r;
                            acc[slot] = _mm512_dpbusd_epi32(acc[slot], wv, xs);
                        }
                    }
                }
            }
            // Each accumulator halved to 8 lanes, the wide channels' products added, then
            // four sums from each four accumulators by pairwise adds.
            let mut half = [_mm256_setzero_si256(); TILE_X * VNNI_W];
            for (slot, h) in half.iter_mut().enumerate() {
                let (c, r) = (slot / TILE_X, slot % TILE_X);
                let v = acc[slot];
                let folded =
                    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
                // SAFETY: row `i + r` of `x.wide` holds 16 i16s (the caller's bounds).
                let xw = unsafe {
                    _mm256_loadu_si256(x.wide.as_ptr().add((i + r) * WIDE).cast::<__m256i>())
                };
                *h = _mm256_add_epi32(folded, _mm256_madd_epi16(xw, ww[c]));
            }
            let mut sums = [0i32; TILE_X * VNNI_W];
            for c in 0..VNNI_W {
                let h = &half[c * TILE_X..(c + 1) * TILE_X];
                let g =
                    _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
                let s = _mm_add_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256::<1>(g));
                // SAFETY: `sums` holds sixteen i32s; this stores four of them.
                unsafe { _mm_storeu_si128(sums.as_mut_ptr().add(c * TILE_X).cast(), s) };
            }
            for r in 0..TILE_X {
                let offset = sums_q[i + r].wrapping_mul(128);
                for c in 0..VNNI_W {
                    out[(i + r) * rows + j + c] = sums[c * TILE_X + r].wrapping_sub(offset);
                }
            }
            i += TILE_X;
        }
        j += VNNI_W;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::simd::{self, Isa};

    /// x rows of `m` (a multiple of [`TILE_X`]) and `rows` weight rows of length `k`, with
    /// values anywhere in their ranges (`fill` picks each from a counter).
    fn operands(m: usize, rows: usize, k: usize, fill: impl Fn(usize) -> i32) -> (XBytes, Vec<u8>) {
        let channels: Vec<usize> = (0..k.min(WIDE)).map(|c| c * k / k.clamp(1, WIDE)).collect();
        let is_wide = |t: usize| channels.contains(&t);
        let mut q = vec![0u8; m * k];
        for (at, v) in q.iter_mut().enumerate() {
            if !is_wide(at % k) {
                *v = (fill(at).clamp(-127, 127) as i8) as u8;
            }
        }
        let mag = q.iter().map(|&v| (v as i8).unsigned_abs()).collect();
        let wide = (0..m * WIDE)
            .map(|at| {
                if at % WIDE < channels.len() {
                    (fill(at * 7 + 3) * 258).clamp(-32767, 32767) as i16
                } else {
                    0
                }
            })
            .collect();
        let w = (0..rows * k)
            .map(|at| (fill(at * 3 + 1).clamp(-127, 127) as i8) as u8)
            .collect();
        (
            XBytes {
                q,
                mag,
                wide,
                channels,
                sums: Default::default(),
            },
            w,
        )
    }

    fn scalar(x: &XBytes, m: usize, w: &[u8], rows: usize, k: usize) -> Vec<i32> {
        let mut out = vec![0i32; m * rows];
        for j in 0..rows {
            dots_of_row(x, m, &w[j * k..(j + 1) * k], k, &mut out[j..], rows);
        }
        out
    }

    fn pseudo(seed: usize) -> impl Fn(usize) -> i32 {
        move |at| {
            let mut s = (at as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed as u64;
            s ^= s >> 29;
            ((s % 255) as i32) - 127
        }
    }

    #[test]
    fn every_tile_gives_the_exact_sums() {
        for k in [1, 16, 31, 32, 33, 63, 64, 65, 127, 640, 1000] {
            for rows in [1, 2, 3, 4, 5, 7, 9] {
                let m = 8;
                let (x, w) = operands(m, rows, k, pseudo(k * 31 + rows));
                let want = scalar(&x, m, &w, rows, k);
                for isa in simd::available() {
                    let mut out = vec![0i32; m * rows];
                    dots(simd::limit(isa), &x, m, &w, rows, k, &mut out);
                    assert_eq!(out, want, "k {k}, rows {rows}, {}", isa.name());
                }
                #[cfg(target_arch = "x86_64")]
                if simd::limit(Isa::Avx2Fma).has_avx2() && k >= STEP {
                    // The AVX2 tile on its own: on a VNNI machine `dots` takes the other one.
                    let paired = rows - rows % TILE_W;
                    let mut out = want.clone();
                    // SAFETY: AVX2 was detected; the operands have the lengths `dots` checks.
                    unsafe { dots_avx2(&x, m, &w, paired, k, &mut out, rows) };
                    assert_eq!(out, want, "k {k}, rows {rows}, AVX2 tile");
                }
            }
        }
    }

    #[test]
    fn sums_at_the_largest_k_and_values_are_exact() {
        // Every byte at its extreme: the VNNI tile's unsigned weights then sum past i32 before
        // the offset is taken off, and only wrapping arithmetic gives the exact result.
        let (m, rows, k) = (TILE_X, 4, MAX_K);
        for sign in [1, -1] {
            let (x, w) = operands(m, rows, k, |at| if at % 2 == 0 { 127 } else { 127 * sign });
            let want = scalar(&x, m, &w, rows, k);
            assert!(
                want.iter().all(|&s| s.unsigned_abs() > 1 << 29),
                "extreme sums"
            );
            for isa in simd::available() {
                let mut out = vec![0i32; m * rows];
                dots(simd::limit(isa), &x, m, &w, rows, k, &mut out);
                assert_eq!(out, want, "{}", isa.name());
            }
        }
    }
}
