//! The integer half of the batched screen: x rows rounded to 8-bit integers, and exact `i32`
//! dot products of those with the screen's 8-bit weight rows.
//!
//! Why integers: at several x rows the screen is bound by arithmetic, not by the bytes it reads,
//! and 8-bit multiply-adds need no decoding of the weights: on an AMD EPYC (Zen 2, AVX2) a
//! register tile of them does 48 multiply-adds per ns per core against 34 for f32 x times the
//! same bytes widened to f32 (docs/performance.md). The weight bytes are stored unsigned
//! (`w + 128`) and x signed; `128 Σ q_i` comes off each sum. `vpdpbusd` (VNNI) adds four
//! products straight into 32 bits; `vpmaddubsw` (AVX2) adds pairs into saturating 16-bit
//! lanes, so for it x is rounded to at most 63 in magnitude ([`x_qmax`]): a pair then sums to
//! at most 32130, below saturation. Every sum here is exact: no order, no rounding, the same
//! integers on every instruction set for the same rounded x.
//!
//! Outliers: the hidden state a language model's head reads has a few channels an order of
//! magnitude above the rest (on Gemma 3 270M the largest value of a row is ~11 times its root
//! mean square), and one 8-bit scale per row would round every other channel coarsely: the
//! screen then kept a median of 122 rows per x against 6 for f32 x (real prompts; for random
//! token ids a tenth of the rows kept over 40k). So the [`WIDE`] channels largest over the batch
//! are held as 16-bit integers in the same units as the rest, the scale is set by the others,
//! and their products (`vpdpwssd`, or `vpmaddwd` on AVX2, on 16-bit lanes) go into the same
//! accumulators.
#![allow(unsafe_code)]

use super::panel;
use crate::kernels::simd::Cpu;

/// Magnitude of a quantised x value where the VNNI tile scores it: `vpdpbusd` adds its four
/// products into 32 bits, with no 16-bit step to overflow.
const X_QMAX_VNNI: f32 = 127.0;
/// Magnitude of a quantised x value for the AVX2 tile (and the portable loop): `vpmaddubsw`
/// adds two products of an unsigned weight byte (`w + 128`, at most 255) and x into a
/// saturating 16-bit lane, and `2 · 255 · 63 = 32130` stays below 32767. Half the levels of
/// [`X_QMAX_VNNI`] doubles x's rounding error, which the bound measures; it spares the tile
/// the flip of each weight byte back to `w` and the sign it took from x (`vpsignb`), two of
/// the four operations on every 32 bytes.
const X_QMAX_AVX2: f32 = 63.0;

/// The largest magnitude [`round_row`] may give x's values for [`dots`] on `cpu`.
pub(super) fn x_qmax(cpu: Cpu) -> f32 {
    if cpu.has_avx512_vnni() {
        X_QMAX_VNNI
    } else {
        X_QMAX_AVX2
    }
}
/// Channels held as 16-bit integers: the outliers of a batch of x rows. Thirty-two rather
/// than sixteen: the real 270M model at batch 32 (the bench's prompts) listed 42 % fewer
/// candidate rows in all, which the f32 bound then narrows panel by panel, and the head took
/// 33.1 -> 28.4 ms a step at batch 32 and 108 -> 100 at 128 (Emerald Rapids, builds
/// alternating, medians of six); sixty-four was no faster.
pub(super) const WIDE: usize = 32;
/// Magnitude of a quantised value of a wide channel.
const WIDE_QMAX: f32 = 32767.0;
/// x rows per register tile on AVX2, and the fewest on VNNI: the caller pads x to a multiple.
pub(super) const TILE_X: usize = 4;

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

/// Which of `k` channels are among `channels` (each below `k`): what [`round_row`] reads, made
/// once for a batch. (A binary search per element and row was most of the batched screen's
/// serial preparation: 1.4 ms of a 128-row call on one thread, Zen 5.)
pub(super) fn wide_mask(k: usize, channels: &[usize]) -> Vec<bool> {
    let mut mask = vec![false; k];
    for &t in channels {
        mask[t] = true;
    }
    mask
}

/// Round the finite, not all-zero `x` into `q` (as `i8` bits, at most `qmax` in magnitude,
/// [`x_qmax`]) for every channel but `channels`, which go into `wide` (and are 0 in `q`), all
/// in one unit. `is_wide` is [`wide_mask`] of `channels`.
pub(super) fn round_row(
    x: &[f32],
    channels: &[usize],
    is_wide: &[bool],
    q: &mut [u8],
    wide: &mut [i16],
    qmax: f32,
) -> Rounded {
    let (mut narrow_max, mut wide_max) = (0.0f32, 0.0f32);
    for (&v, &w) in x.iter().zip(is_wide) {
        if w {
            wide_max = wide_max.max(v.abs());
        } else {
            narrow_max = narrow_max.max(v.abs());
        }
    }
    let scale = (narrow_max / qmax).max(wide_max / WIDE_QMAX);
    let mut sq = 0.0f64;
    let mut error = |v: f32, level: f32| {
        // Exact in f64: an integer below 2¹⁵ times an f32, subtracted from a nearby f32.
        let e = f64::from(v) - f64::from(level) * f64::from(scale);
        sq += e * e;
    };
    for ((&v, &w), qi) in x.iter().zip(is_wide).zip(q.iter_mut()) {
        if w {
            *qi = 0;
            continue;
        }
        // Any rounding will do: the errors are measured, not assumed.
        let level = nearest((v / scale).clamp(-qmax, qmax));
        *qi = level as i8 as u8;
        error(v, level);
    }
    for (slot, &t) in wide.iter_mut().zip(channels) {
        let level = nearest((x[t] / scale).clamp(-WIDE_QMAX, WIDE_QMAX));
        *slot = level as i16;
        error(x[t], level);
    }
    Rounded {
        scale,
        // Never 0: times a wild row's infinite factor it must give infinity, not NaN.
        err_l2: (sq.sqrt() * (1.0 + 1e-10)).max(f64::MIN_POSITIVE),
    }
}

/// `y` (at most [`WIDE_QMAX`] in magnitude, or NaN) rounded to the nearest integer, ties to
/// even, as `round_ties_even` gives, without its library call (there is no rounding
/// instruction in the baseline x86-64 set): past 2²³ an f32 has no fraction, so adding and
/// taking off 1.5 · 2²³ rounds in the addition.
fn nearest(y: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (y + SHIFT) - SHIFT
}

/// Weight row `j`'s values at `channels`, widened; zero past `channels.len()`.
fn wide_of(panels: &[u8], kp: usize, j: usize, channels: &[usize]) -> [i16; WIDE] {
    let mut out = [0i16; WIDE];
    for (slot, &t) in out.iter_mut().zip(channels) {
        *slot = i16::from(panel::value(panels, kp, j, t));
    }
    out
}

/// x rows in the form the tiles read: `q` (`i8` bits, at most [`x_qmax`] in magnitude),
/// row-major `[m, kp]` with each row padded with zeros to the panels' row length `kp`
/// ([`panel::padded`]), and the values of the wide `channels`, `[m, WIDE]`.
pub(super) struct XBytes {
    pub(super) q: Vec<u8>,
    /// The largest magnitude `q` was rounded to ([`round_row`]'s `qmax`).
    pub(super) qmax: f32,
    pub(super) wide: Vec<i16>,
    pub(super) channels: Vec<usize>,
    /// `Σ_t q[i * kp + t]` of each row, for the tiles' offset (they multiply `w + 128`): found
    /// on first use, once per batch rather than once per block of weight rows.
    pub(super) sums: std::sync::OnceLock<Vec<i32>>,
}

impl XBytes {
    /// The rows' sums of `q` (rows of `kp`).
    fn sums(&self, kp: usize) -> &[i32] {
        self.sums.get_or_init(|| {
            self.q
                .chunks_exact(kp.max(1))
                .map(|row| row.iter().map(|&v| i32::from(v as i8)).sum())
                .collect()
        })
    }
}

/// `out[i * rows + j] = Σ_t q[i * kp + t] · w_j[t] + Σ_c wide[i * WIDE + c] · w_j[channels[c]]`
/// for `i < m` and `j < rows`, with `q` as `i8` and `w_j` row `j` of `panels` (rows of padded
/// length `kp`, [`panel`]). `m` is a multiple of [`TILE_X`] (the caller pads x with rows of
/// its own), and no `q` is larger in magnitude than [`x_qmax`] of `cpu`.
///
/// Panics if `x` was rounded for a wider range ([`XBytes::qmax`]): the AVX2 tile would
/// saturate.
pub(super) fn dots(
    cpu: Cpu,
    x: &XBytes,
    m: usize,
    panels: &[u8],
    rows: usize,
    kp: usize,
    out: &mut [i32],
) {
    assert!(m.is_multiple_of(TILE_X) && kp.is_multiple_of(panel::GROUP));
    assert!(x.q.len() >= m * kp && x.wide.len() >= m * WIDE);
    assert!(x.qmax <= x_qmax(cpu), "x rounded past the tile's range");
    assert!(panels.len() >= panel::bytes(rows, kp) && out.len() >= m * rows && kp <= MAX_K);
    assert!(x.channels.len() <= WIDE && x.channels.iter().all(|&t| t < kp));
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has_avx512_vnni() {
            // SAFETY: only detection makes a `Cpu`, and `has_avx512_vnni` means AVX-512F, BW
            // and VNNI were confirmed; the bounds are the ones asserted above.
            unsafe { dots_vnni(x, m, panels, rows, kp, out) };
            return;
        }
        if cpu.has_avx2() {
            // SAFETY: only detection makes a `Cpu`, and one with AVX2 means AVX2 was confirmed;
            // the bounds are the ones asserted above.
            unsafe { dots_avx2(x, m, panels, rows, kp, out) };
            return;
        }
    }
    let _ = cpu;
    for j in 0..rows {
        dots_of_row(x, m, panels, j, kp, &mut out[j..], rows);
    }
}

/// [`dots`] for weight row `j`, into `out[i * stride]`.
fn dots_of_row(
    x: &XBytes,
    m: usize,
    panels: &[u8],
    j: usize,
    kp: usize,
    out: &mut [i32],
    stride: usize,
) {
    let wide = wide_of(panels, kp, j, &x.channels);
    for i in 0..m {
        let xr = &x.q[i * kp..(i + 1) * kp];
        let dot: i32 = xr
            .iter()
            .enumerate()
            .map(|(t, &v)| i32::from(v as i8) * i32::from(panel::value(panels, kp, j, t)))
            .sum();
        out[i * stride] = dot + wide_scalar(&x.wide[i * WIDE..(i + 1) * WIDE], &wide);
    }
}

fn wide_scalar(a: &[i16], b: &[i16]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

/// Pairs of wide channels per vector of [`wide_pairs`]: 16-bit products add in pairs.
const PAIRS: usize = WIDE / 2;

/// The wide channels' weights of one group of a panel (`v`, 32-bit lanes of four bytes), as
/// 32-bit lanes: element `channel % 4` of each lane, sign-extended.
macro_rules! element_of_lane {
    ($sllv:ident, $srai:ident, $set1:ident, $v:expr, $channel:expr) => {
        $srai::<24>($sllv(
            $v,
            $set1((24 - 8 * ($channel % panel::GROUP)) as i32),
        ))
    };
}

/// For each pair `p` of wide channels, one 32-bit lane per weight row of the panel at `w`
/// (`kp` bytes per row) holding its value at channel `2p` in the low 16 bits and at `2p + 1`
/// in the high 16 (zero past `channels`): what `vpdpwssd` multiplies by a broadcast pair of
/// x's wide values.
///
/// # Safety
/// The CPU has AVX-512F; `w` points at a whole panel and every channel is below `kp`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn wide_pairs_512(w: *const u8, channels: &[usize]) -> [std::arch::x86_64::__m512i; PAIRS] {
    // SAFETY: the caller keeps this function's contract (above).
    unsafe {
        use std::arch::x86_64::{
            _mm512_and_si512, _mm512_loadu_si512, _mm512_or_si512, _mm512_set1_epi32,
            _mm512_set1_epi8, _mm512_setzero_si512, _mm512_slli_epi32, _mm512_sllv_epi32,
            _mm512_srai_epi32, _mm512_xor_si512,
        };
        let flip = _mm512_set1_epi8(panel::FLIP as i8);
        let value = |c: usize| match channels.get(c) {
            Some(&t) => {
                let at = w.add(t / panel::GROUP * panel::GROUP_BYTES);
                let v = _mm512_xor_si512(_mm512_loadu_si512(at.cast()), flip);
                element_of_lane!(
                    _mm512_sllv_epi32,
                    _mm512_srai_epi32,
                    _mm512_set1_epi32,
                    v,
                    t
                )
            }
            None => _mm512_setzero_si512(),
        };
        let low = _mm512_set1_epi32(0xffff);
        std::array::from_fn(|p| {
            let lo = _mm512_and_si512(value(2 * p), low);
            _mm512_or_si512(lo, _mm512_slli_epi32::<16>(value(2 * p + 1)))
        })
    }
}

/// [`wide_pairs_512`] on AVX2: for each pair, the panel's two halves of eight rows.
///
/// # Safety
/// The CPU has AVX2; `w` points at a whole panel and every channel is below `kp`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn wide_pairs_256(
    w: *const u8,
    channels: &[usize],
) -> [[std::arch::x86_64::__m256i; 2]; PAIRS] {
    // SAFETY: the caller keeps this function's contract (above).
    unsafe {
        use std::arch::x86_64::{
            __m256i, _mm256_and_si256, _mm256_loadu_si256, _mm256_or_si256, _mm256_set1_epi32,
            _mm256_set1_epi8, _mm256_setzero_si256, _mm256_slli_epi32, _mm256_sllv_epi32,
            _mm256_srai_epi32, _mm256_xor_si256,
        };
        let flip = _mm256_set1_epi8(panel::FLIP as i8);
        let value = |c: usize, h: usize| match channels.get(c) {
            Some(&t) => {
                let at = t / panel::GROUP * panel::GROUP_BYTES + h * 32;
                let v = _mm256_xor_si256(_mm256_loadu_si256(w.add(at).cast::<__m256i>()), flip);
                element_of_lane!(
                    _mm256_sllv_epi32,
                    _mm256_srai_epi32,
                    _mm256_set1_epi32,
                    v,
                    t
                )
            }
            None => _mm256_setzero_si256(),
        };
        let low = _mm256_set1_epi32(0xffff);
        std::array::from_fn(|p| {
            std::array::from_fn(|h| {
                let lo = _mm256_and_si256(value(2 * p, h), low);
                _mm256_or_si256(lo, _mm256_slli_epi32::<16>(value(2 * p + 1, h)))
            })
        })
    }
}

/// Weight panels per register tile of [`dots_vnni`].
const VNNI_PANELS: usize = 2;
/// x rows per register tile of [`dots_vnni`] (then [`TILE_X`] for the rest).
const VNNI_X: usize = 8;

/// The AVX-512 VNNI tile: up to [`VNNI_X`] x rows × [`VNNI_PANELS`] panels of sixteen weight
/// rows, one accumulator per x row and panel, each lane one weight row, so nothing is reduced
/// across lanes. `vpdpbusd` multiplies unsigned by signed bytes and adds each four products
/// into a 32-bit lane, with no 16-bit stage to saturate; x's four bytes are the broadcast
/// (signed) operand, and the panels hold the weights as unsigned bytes already (`w + 128`,
/// [`panel::stored`]): `Σ q w = Σ q (w + 128) - 128 Σ q`. The wide channels' 16-bit
/// products go in with `vpdpwssd`. Sums wrap in `i32`, and the true result fits ([`MAX_K`]),
/// so the wrapped one is exact.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dots_vnni(x: &XBytes, m: usize, panels: &[u8], rows: usize, kp: usize, out: &mut [i32]) {
    use std::arch::x86_64::{__m512i, _mm512_setzero_si512, _mm_prefetch, _MM_HINT_T0};
    let n_panels = rows.div_ceil(panel::ROWS);
    let size = panel::ROWS * kp;
    let mut p = 0;
    while p < n_panels {
        let take = VNNI_PANELS.min(n_panels - p);
        let block = &panels[p * size..(p + take) * size];
        // Past `take` (a block's last, odd panel) the entry is never read.
        let wide: [[__m512i; PAIRS]; VNNI_PANELS] = std::array::from_fn(|c| {
            if c >= take {
                return [_mm512_setzero_si512(); PAIRS];
            }
            // SAFETY: panel `c` of `block` is whole (`dots` asserted the length); the channels
            // are below `kp` (asserted too).
            unsafe { wide_pairs_512(block.as_ptr().add(c * size), &x.channels) }
        });
        // The next panels' wide channels lie scattered through them, a cache line each, and
        // are read before the tiles stream those panels in: fetch them while these run.
        for c in p + take..(p + take + VNNI_PANELS).min(n_panels) {
            for &t in &x.channels {
                let at = c * size + t / panel::GROUP * panel::GROUP_BYTES;
                // SAFETY: a prefetch of an address inside `panels` (panel `c` exists).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(panels.as_ptr().add(at).cast()) };
            }
        }
        // The first x rows read these panels from memory; every tile asks for its share of the
        // next panels' lines into L2 as it goes, so that they are there when the next panels'
        // first tile reads them (at batch 8, one tile a panel, it asks for all of them). Until
        // 2026-12-07 the first tile asked for every line, and at 32 rows its loads of the next
        // panels still waited on memory: AMD EPYC (Zen 5), 2 threads, `kernel_bench ARGMAX=1`
        // on a random `[262144, 640]` head, builds alternating, 8.5-8.8 -> 7.4-7.7 ms at 32
        // rows and 29.0-29.9 -> 28.1-29.7 at 128 (one thread 16.3-17.4 -> 15.4-16.0 at 32);
        // every tile asking for every line was 15.3 at 32 rows on one thread. (The first
        // tile's prefetch had made batch 8 14 % faster than the panel's own alone: Emerald
        // Rapids, 2 threads.)
        let next = panels.as_ptr().wrapping_add((p + take) * size);
        // Past the block's end these are the next block's first panels (a prefetch past the
        // screen's end is only a hint, and ignored).
        let lines = VNNI_PANELS * size / 64;
        let n_tiles = m / VNNI_X + (m % VNNI_X).div_ceil(TILE_X);
        let mut i = 0;
        let mut tile_no = 0;
        while i < m {
            let at = Tile {
                x,
                i,
                panels: block,
                j0: p * panel::ROWS,
                rows,
                kp,
            };
            let (l0, l1) = (tile_no * lines / n_tiles, (tile_no + 1) * lines / n_tiles);
            let ahead = Ahead {
                at: next.wrapping_add(l0 * 64),
                step: ((l1 - l0) << 16) / (kp / panel::GROUP * VNNI_PANELS).max(1),
            };
            macro_rules! tile {
                ($r:expr, $p:expr) => {
                    vnni_tile::<{ $r }, { $p }>(&at, &wide, &ahead, out)
                };
            }
            // SAFETY: the bounds `dots` asserted; the CPU has the features this function has.
            unsafe {
                match (take, m - i >= VNNI_X) {
                    (VNNI_PANELS, true) => tile!(VNNI_X, VNNI_PANELS),
                    (VNNI_PANELS, false) => tile!(TILE_X, VNNI_PANELS),
                    (_, true) => tile!(VNNI_X, 1),
                    (_, false) => tile!(TILE_X, 1),
                }
            }
            i += if m - i >= VNNI_X { VNNI_X } else { TILE_X };
            tile_no += 1;
        }
        p += take;
    }
}

/// The lines a tile prefetches into L2 for the panels after its own: from `at`, the line
/// `(n · step) >> 16` at its `n`-th of two prefetches a group.
#[cfg(target_arch = "x86_64")]
struct Ahead {
    at: *const u8,
    step: usize,
}

/// Where a register tile works: x rows from `i`, against the panels of `panels` (whose first
/// row is weight row `j0` of `rows`).
#[cfg(target_arch = "x86_64")]
struct Tile<'a> {
    x: &'a XBytes,
    i: usize,
    panels: &'a [u8],
    j0: usize,
    rows: usize,
    kp: usize,
}

/// One tile of [`dots_vnni`]: x rows `i .. i + R` against the `P` panels, whose wide
/// channels' weights are `wide` ([`wide_pairs_512`]); as it goes it also prefetches `ahead`'s
/// share of the next panels into L2.
///
/// # Safety
/// The CPU has AVX-512F, BW and VNNI; `t.panels` holds `P` panels, x rows `i .. i + R` exist,
/// and `out` holds rows `i .. i + R` of `t.rows` outputs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_tile<const R: usize, const P: usize>(
    t: &Tile<'_>,
    wide: &[[std::arch::x86_64::__m512i; PAIRS]],
    ahead: &Ahead,
    out: &mut [i32],
) {
    // SAFETY: the caller keeps this function's contract (above).
    unsafe {
        use std::arch::x86_64::{
            __m512i, _mm512_dpbusd_epi32, _mm512_dpwssd_epi32, _mm512_loadu_si512,
            _mm512_mask_storeu_epi32, _mm512_set1_epi32, _mm512_setzero_si512, _mm512_storeu_si512,
            _mm512_sub_epi32, _mm_prefetch, _MM_HINT_T0, _MM_HINT_T1,
        };
        let (x, kp) = (t.x, t.kp);
        let size = panel::ROWS * kp;
        let mut acc = [[_mm512_setzero_si512(); P]; R];
        let w = t.panels.as_ptr();
        let xq = x.q.as_ptr().add(t.i * kp);
        for g in 0..kp / panel::GROUP {
            let a: [__m512i; P] = std::array::from_fn(|c| {
                let at = w.add(c * size + g * panel::GROUP_BYTES);
                // The first x rows read the panels from memory; later ones find them in cache.
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(panel::PREFETCH_BYTES).cast());
                let line = ((g * VNNI_PANELS + c) * ahead.step) >> 16;
                _mm_prefetch::<_MM_HINT_T1>(ahead.at.wrapping_add(line * 64).cast());
                _mm512_loadu_si512(at.cast())
            });
            for (r, acc) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_epi32(
                    xq.add(r * kp + g * panel::GROUP)
                        .cast::<i32>()
                        .read_unaligned(),
                );
                for c in 0..P {
                    acc[c] = _mm512_dpbusd_epi32(acc[c], a[c], b);
                }
            }
        }
        // The wide channels a pair at a time into every accumulator, so that consecutive
        // multiply-adds are independent: one accumulator's sixteen in a row were a chain that
        // left the tile waiting on each result.
        let xw = x.wide.as_ptr().add(t.i * WIDE);
        for p in 0..PAIRS {
            for (r, acc) in acc.iter_mut().enumerate() {
                let xb = _mm512_set1_epi32(xw.add(r * WIDE + 2 * p).cast::<i32>().read_unaligned());
                for (a, pairs) in acc.iter_mut().zip(wide) {
                    *a = _mm512_dpwssd_epi32(*a, pairs[p], xb);
                }
            }
        }
        let sums = x.sums(kp);
        for (r, acc) in acc.iter().enumerate() {
            let row = t.i + r;
            let offset = _mm512_set1_epi32(sums[row].wrapping_mul(128));
            for (c, &a) in acc.iter().enumerate() {
                let v = _mm512_sub_epi32(a, offset);
                let j0 = t.j0 + c * panel::ROWS;
                let dst = out.as_mut_ptr().add(row * t.rows + j0);
                if j0 + panel::ROWS <= t.rows {
                    _mm512_storeu_si512(dst.cast(), v);
                } else {
                    let mask = (1u32 << (t.rows - j0)) - 1;
                    _mm512_mask_storeu_epi32(dst, mask as u16, v);
                }
            }
        }
    }
}

/// The AVX2 tile: [`TILE_X`] x rows × one panel (two vectors of eight weight rows), each lane
/// one weight row. `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into
/// saturating 16-bit lanes: the panels' bytes `w + 128` ([`panel::FLIP`]) are the unsigned
/// ones and x the signed; with `|q_i| <= 63` ([`X_QMAX_AVX2`]) a pair sums to at most 32130,
/// below saturation. `vpmaddwd` by ones adds the pairs into the 32-bit lanes, and `128 Σ q_i`
/// comes off at the end, as in the VNNI tile. (It took x as `|q|` and the weight with x's sign
/// before. On an AMD EPYC, Zen 3, 2 threads, `kernel_bench` `ARGMAX=1` on a random
/// `[262144, 640]` head: 14.1 -> 12.2 ms at 8 x rows, 47 -> 37.8 at 32; on the real 270M file
/// the head went 49-51 -> 43 ms a step at batch 32, 15.0-16.0 -> 13.9-14.0 at batch 8, the
/// rows the bound kept included.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dots_avx2(x: &XBytes, m: usize, panels: &[u8], rows: usize, kp: usize, out: &mut [i32]) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let size = panel::ROWS * kp;
    for p in 0..rows.div_ceil(panel::ROWS) {
        // SAFETY: panel `p` is whole (`dots` asserted the length); the channels are below `kp`.
        let wide = unsafe { wide_pairs_256(panels.as_ptr().add(p * size), &x.channels) };
        // As in `dots_vnni`: the next panel's wide channels, while this one's tiles run.
        if p + 1 < rows.div_ceil(panel::ROWS) {
            for &t in &x.channels {
                let at = (p + 1) * size + t / panel::GROUP * panel::GROUP_BYTES;
                // SAFETY: a prefetch of an address inside `panels` (panel `p + 1` exists).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(panels.as_ptr().add(at).cast()) };
            }
        }
        let mut i = 0;
        while i < m {
            let at = Tile {
                x,
                i,
                panels: &panels[p * size..(p + 1) * size],
                j0: p * panel::ROWS,
                rows,
                kp,
            };
            // As in `dots_vnni`, the first x rows read this panel from memory and ask for a
            // later one into L2 as they go (here the one after next, [`avx2_tile`]'s `FIRST`).
            // SAFETY: the bounds `dots` asserted; the CPU has AVX2.
            unsafe {
                if i == 0 {
                    avx2_tile::<true>(&at, &wide, out);
                } else {
                    avx2_tile::<false>(&at, &wide, out);
                }
            }
            i += TILE_X;
        }
    }
}

/// One tile of [`dots_avx2`]. `FIRST` (the first x rows against this panel): prefetch the
/// panel after next into L2 as well. At 8 x rows (two tiles a panel) `kernel_bench ARGMAX=1` on
/// a random `[262144, 640]` head took 23.0 ms at best against 24.7 on one thread, 12.0 against
/// 13.0 on two with the next panel (AMD EPYC, Zen 3, builds alternating, best of 6-8 rounds on
/// a noisy host; at 32 rows level). One panel ahead, the first tile's weight loads still
/// waited on memory (`perf annotate`: a tenth of the tile's samples on one load at batch 8);
/// two panels ahead took 12.5 -> 11.5 ms at best at 8 rows on two threads, 23.2 -> 21.7 on
/// one, 8.9 -> 7.8 at 4 rows and 40.2 -> 38.1 at 32 (four panels ahead: between the two), and
/// the real 270M file's head at batch 8 420 -> 383 ms over 31 steps (medians of four, builds
/// alternating; Zen 3 again). Dropping the L1 prefetch from the other tiles made 32 rows
/// slower. The first tile itself does without it: its far prefetch has already asked for
/// these lines, and asking again [`panel::PREFETCH_BYTES`] ahead made it slower (AMD EPYC,
/// Zen 3, 2 threads, the real 270M file's head over 31 steps, builds alternating: batch 8
/// 424-616 -> 396-535 ms in ten rounds, nine of them lower; batch 4 330-356 -> 290-314 and
/// batch 32 1652-1830 -> 1605-1651 in three).
///
/// # Safety
/// The CPU has AVX2; `t.panels` holds one panel, x rows `i .. i + TILE_X` exist, and `out`
/// holds rows `i .. i + TILE_X` of `t.rows` outputs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_tile<const FIRST: bool>(
    t: &Tile<'_>,
    wide: &[[std::arch::x86_64::__m256i; 2]; PAIRS],
    out: &mut [i32],
) {
    // SAFETY: the caller keeps this function's contract (above).
    unsafe {
        use std::arch::x86_64::{
            __m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
            _mm256_set1_epi16, _mm256_set1_epi32, _mm256_setzero_si256, _mm256_storeu_si256,
            _mm256_sub_epi32, _mm_prefetch, _MM_HINT_T0, _MM_HINT_T1,
        };
        const HALF: usize = panel::ROWS / 2;
        let (x, kp) = (t.x, t.kp);
        let size = panel::ROWS * kp;
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_si256(); 2]; TILE_X];
        let w = t.panels.as_ptr();
        let xq = x.q.as_ptr().add(t.i * kp);
        for g in 0..kp / panel::GROUP {
            let at = w.add(g * panel::GROUP_BYTES);
            if FIRST {
                _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(2 * size).cast());
            } else {
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(panel::PREFETCH_BYTES).cast());
            }
            let a = [
                _mm256_loadu_si256(at.cast::<__m256i>()),
                _mm256_loadu_si256(at.add(32).cast::<__m256i>()),
            ];
            for (r, acc) in acc.iter_mut().enumerate() {
                let off = r * kp + g * panel::GROUP;
                let xs = _mm256_set1_epi32(xq.add(off).cast::<i32>().read_unaligned());
                for h in 0..2 {
                    let p = _mm256_maddubs_epi16(a[h], xs);
                    acc[h] = _mm256_add_epi32(acc[h], _mm256_madd_epi16(p, ones));
                }
            }
        }
        let sums = x.sums(kp);
        for (r, acc) in acc.iter().enumerate() {
            let row = t.i + r;
            let xw = x.wide.as_ptr().add(row * WIDE);
            // Wrapping, like the lanes: the exact sum fits `i32` ([`MAX_K`]), so it comes out
            // whatever the partial sums passed through.
            let offset = _mm256_set1_epi32(sums[row].wrapping_mul(panel::FLIP as i32));
            for h in 0..2 {
                let mut v = _mm256_sub_epi32(acc[h], offset);
                for (p, pair) in wide.iter().enumerate() {
                    let xb = _mm256_set1_epi32(xw.add(2 * p).cast::<i32>().read_unaligned());
                    v = _mm256_add_epi32(v, _mm256_madd_epi16(pair[h], xb));
                }
                let j0 = t.j0 + h * HALF;
                if j0 + HALF <= t.rows {
                    _mm256_storeu_si256(out.as_mut_ptr().add(row * t.rows + j0).cast(), v);
                } else if j0 < t.rows {
                    let mut lanes = [0i32; HALF];
                    _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v);
                    let n = t.rows - j0;
                    out[row * t.rows + j0..row * t.rows + t.rows].copy_from_slice(&lanes[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::simd::{self, Isa};

    /// `nearest` rounds as `round_ties_even` over the whole range it is given: every half
    /// integer (the ties), values just either side of them, and a spread of fractions.
    #[test]
    fn nearest_rounds_ties_to_even_like_the_library() {
        let mut values = Vec::new();
        for i in -65535i32..=65535 {
            let half = i as f32 / 2.0;
            values.extend([half, half.next_up(), half.next_down()]);
        }
        values.extend((0..10_000).map(|i| (i as f32 * 6.553_7).sin() * WIDE_QMAX));
        values.extend([0.0, -0.0, f32::MIN_POSITIVE, -1e-30, WIDE_QMAX, -WIDE_QMAX]);
        for y in values.into_iter().filter(|y| y.abs() <= WIDE_QMAX) {
            assert_eq!(nearest(y), y.round_ties_even(), "{y:e}");
        }
        assert!(nearest(f32::NAN).is_nan());
    }

    /// x rows of `m` (a multiple of [`TILE_X`]) and `rows` weight rows of length `k`, with
    /// values anywhere in their ranges (`fill` picks each from a counter): the x rows and the
    /// panels as the tiles read them, and the weight rows row-major, for the reference.
    fn operands(
        m: usize,
        rows: usize,
        k: usize,
        qmax: i32,
        fill: impl Fn(usize) -> i32,
    ) -> (XBytes, Vec<u8>, Vec<u8>) {
        let kp = panel::padded(k);
        let channels: Vec<usize> = (0..k.min(WIDE)).map(|c| c * k / k.clamp(1, WIDE)).collect();
        let is_wide = |t: usize| channels.contains(&t);
        let mut q = vec![0u8; m * kp];
        for i in 0..m {
            for t in (0..k).filter(|&t| !is_wide(t)) {
                q[i * kp + t] = (fill(i * k + t).clamp(-qmax, qmax) as i8) as u8;
            }
        }
        let wide = (0..m * WIDE)
            .map(|at| {
                if at % WIDE < channels.len() {
                    (fill(at * 7 + 3) * 258).clamp(-32767, 32767) as i16
                } else {
                    0
                }
            })
            .collect();
        let w: Vec<u8> = (0..rows * k)
            .map(|at| (fill(at * 3 + 1).clamp(-127, 127) as i8) as u8)
            .collect();
        let mut panels = vec![0u8; panel::bytes(rows, k)];
        for (j, row) in w.chunks_exact(k.max(1)).take(rows).enumerate() {
            panel::scatter(&mut panels, kp, j, row);
        }
        let x = XBytes {
            q,
            qmax: qmax as f32,
            wide,
            channels,
            sums: Default::default(),
        };
        (x, panels, w)
    }

    /// The sums written out from the row-major operands.
    fn reference(x: &XBytes, m: usize, w: &[u8], rows: usize, k: usize) -> Vec<i32> {
        let kp = panel::padded(k);
        let mut out = vec![0i32; m * rows];
        for i in 0..m {
            for j in 0..rows {
                let wr = &w[j * k..(j + 1) * k];
                let narrow: i64 = (0..k)
                    .map(|t| i64::from(x.q[i * kp + t] as i8) * i64::from(wr[t] as i8))
                    .sum();
                let wide: i64 = x
                    .channels
                    .iter()
                    .enumerate()
                    .map(|(c, &t)| i64::from(x.wide[i * WIDE + c]) * i64::from(wr[t] as i8))
                    .sum();
                out[i * rows + j] = i32::try_from(narrow + wide).expect("fits i32");
            }
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

    /// Every path `dots` can take on this CPU for x rounded as `x` was, the portable one
    /// included.
    fn each_path(
        x: &XBytes,
        m: usize,
        panels: &[u8],
        rows: usize,
        k: usize,
    ) -> Vec<(String, Vec<i32>)> {
        let kp = panel::padded(k);
        let mut outs = Vec::new();
        for isa in simd::available() {
            if x.qmax > x_qmax(simd::limit(isa)) {
                continue;
            }
            let mut out = vec![i32::MIN; m * rows];
            dots(simd::limit(isa), x, m, panels, rows, kp, &mut out);
            outs.push((isa.name().to_string(), out));
        }
        #[cfg(target_arch = "x86_64")]
        if simd::limit(Isa::Avx2Fma).has_avx2() && x.qmax <= X_QMAX_AVX2 {
            // The AVX2 tile on its own: on a VNNI machine `dots` takes the other one.
            let mut out = vec![i32::MIN; m * rows];
            // SAFETY: AVX2 was detected; the operands have the lengths `dots` checks.
            unsafe { dots_avx2(x, m, panels, rows, kp, &mut out) };
            outs.push(("AVX2 tile".to_string(), out));
        }
        outs
    }

    #[test]
    fn every_tile_gives_the_exact_sums() {
        for k in [1, 3, 16, 31, 32, 33, 63, 64, 65, 127, 640, 1000] {
            for rows in [1, 2, 5, 15, 16, 17, 31, 32, 33, 48, 50] {
                // Tiles of eight x rows and of four, and one panel or two.
                for m in [4, 8, 12, 20] {
                    for qmax in [X_QMAX_AVX2, X_QMAX_VNNI] {
                        let fill = pseudo(k * 31 + rows + m);
                        let (x, panels, w) = operands(m, rows, k, qmax as i32, fill);
                        let want = reference(&x, m, &w, rows, k);
                        for (path, out) in each_path(&x, m, &panels, rows, k) {
                            assert_eq!(out, want, "k {k}, rows {rows}, m {m}, {path}, {qmax}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sums_at_the_largest_k_and_values_are_exact() {
        // Every byte at its extreme: the VNNI tile's unsigned weights then sum past i32 before
        // the offset is taken off, and only wrapping arithmetic gives the exact result.
        // For the AVX2 tile, x at its own extreme: each pair of products `2 · 255 · 63` from
        // the unsigned weight bytes, just below the 16-bit saturation.
        let (m, rows, k) = (VNNI_X + TILE_X, 2 * panel::ROWS + 1, MAX_K);
        for qmax in [X_QMAX_AVX2 as i32, X_QMAX_VNNI as i32] {
            for sign in [1, -1] {
                let fill = |at: usize| {
                    if at.is_multiple_of(2) {
                        127
                    } else {
                        127 * sign
                    }
                };
                let (x, panels, w) = operands(m, rows, k, qmax, fill);
                let want = reference(&x, m, &w, rows, k);
                assert!(
                    want.iter().all(|&s| s.unsigned_abs() > 1 << 28),
                    "extreme sums"
                );
                for (path, out) in each_path(&x, m, &panels, rows, k) {
                    assert_eq!(out, want, "{path}, {qmax}");
                }
            }
        }
    }
}
