//! How the screen lays out its 8-bit values, and the f32 dot products of one x row with them.
//!
//! Rows are stored in panels of [`ROWS`]: for every [`GROUP`] consecutive elements of a row,
//! the panel holds those elements of all its rows side by side, so one 64-byte load is one
//! group of sixteen rows. A vector lane then belongs to one weight row for the whole dot
//! product: the integer tile ([`int8`](super::int8)) multiplies four bytes per lane against a
//! broadcast group of x (`vpdpbusd` adds each four products into its lane) and needs no
//! horizontal reduction per output, which in a row-major layout cost about a third of the
//! tile's instructions (docs/performance.md). Rows are padded to a whole panel and `k` to a
//! whole group with level zero, which adds nothing to any sum.
//!
//! A level `q` (-127..=127) is stored as `q + 128` ([`stored`]), the unsigned operand
//! `vpdpbusd` multiplies: the VNNI tile then uses its weights as it loads them. Flipping them
//! as it loaded them took one more vector operation per sixteen multiply-adds, on the ports
//! those run on, and a copy of the tile on its own ran 10-35 % slower for it (Emerald Rapids,
//! data in cache). The f32 and AVX2 paths take the level back with one xor per load.
#![allow(unsafe_code)]

use crate::kernels::simd::Cpu;

/// Weight rows per panel: one 512-bit vector of 32-bit lanes.
pub(super) const ROWS: usize = 16;
/// Consecutive elements of a row stored together: the bytes one `vpdpbusd` lane takes.
pub(super) const GROUP: usize = 4;
/// Bytes of one group of a panel.
pub(super) const GROUP_BYTES: usize = ROWS * GROUP;
/// What a level is stored with: `q ^ FLIP` is `q + 128` as an unsigned byte.
pub(super) const FLIP: u8 = 0x80;

/// Level `q`'s byte as the panels hold it: `q + 128`.
pub(super) fn stored(q: i8) -> u8 {
    q as u8 ^ FLIP
}

/// The level a stored byte holds ([`stored`]'s inverse).
pub(super) fn level(byte: u8) -> i8 {
    (byte ^ FLIP) as i8
}

/// How far ahead of their loads the integer tiles (but for the first AVX2 tile of a panel, whose
/// far prefetch has asked for the lines already), [`centres_many`] and the AVX2 [`centres`]
/// prefetch: a single row of x streams through the whole screen, and without it the loads wait
/// on memory (batch-1 decode was 17 % slower). Past a panel's end this reaches into the next
/// one, which is read next. 8 KiB for the integer tiles too left batch 8 and 32 level (AMD
/// EPYC, Zen 5).
pub(super) const PREFETCH_BYTES: usize = 2048;

/// How far ahead [`centres`] prefetches on AVX-512, where it is batch 1's whole pass over the
/// screen. At [`PREFETCH_BYTES`] the loads still waited on memory: on the real 270M file batch-1
/// decode went 171.2 → 190.4 tokens/s with 8 KiB (4 KiB 184.0, 16 KiB 192.3; AMD EPYC, Zen 5,
/// builds alternating, 4 rounds, medians). 8 KiB leaves room in a 32 KiB L1.
const CENTRES_AHEAD: usize = 8192;

/// `k` padded to whole groups: the length of a stored row.
pub(super) fn padded(k: usize) -> usize {
    k.next_multiple_of(GROUP)
}

/// Bytes that hold `rows` rows of `k` values.
pub(super) fn bytes(rows: usize, k: usize) -> usize {
    rows.next_multiple_of(ROWS) * padded(k)
}

/// Where element `t` of row `row` lies, in panels of padded length `kp`.
pub(super) fn at(kp: usize, row: usize, t: usize) -> usize {
    (row / ROWS) * ROWS * kp + (t / GROUP) * GROUP_BYTES + (row % ROWS) * GROUP + t % GROUP
}

/// Store row `row`'s levels (`i8` bits, at most `kp` of them; zero for the rest of the row).
pub(super) fn scatter(panels: &mut [u8], kp: usize, row: usize, levels: &[u8]) {
    let base = at(kp, row, 0);
    for g in 0..kp / GROUP {
        let dst = &mut panels[base + g * GROUP_BYTES..][..GROUP];
        if let Some(src) = levels.get(g * GROUP..(g + 1) * GROUP) {
            for (d, &q) in dst.iter_mut().zip(src) {
                *d = stored(q as i8);
            }
            continue;
        }
        for (t, d) in dst.iter_mut().enumerate() {
            *d = stored(levels.get(g * GROUP + t).map_or(0, |&q| q as i8));
        }
    }
}

/// Element `t` of row `row`.
pub(super) fn value(panels: &[u8], kp: usize, row: usize, t: usize) -> i8 {
    level(panels[at(kp, row, t)])
}

/// `out[r] = Σ_t x[t] · q[r][t]` in f32 for the [`ROWS`] rows of one panel (`ROWS · kp`
/// bytes), `x` padded with zeros to `kp`. Each lane sums in its own order; the screen's bound
/// covers any order.
pub(super) fn centres(cpu: Cpu, x: &[f32], panel: &[u8], out: &mut [f32; ROWS]) {
    let kp = x.len();
    assert!(kp.is_multiple_of(GROUP) && panel.len() >= ROWS * kp);
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has_avx512() {
            // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F was
            // confirmed; the lengths are the ones asserted above.
            return unsafe { centres_avx512(x, panel, out) };
        }
        if cpu.has_avx2() {
            // SAFETY: as above, for AVX2 and FMA.
            return unsafe { centres_avx2(x, panel, out) };
        }
    }
    let _ = cpu;
    out.fill(0.0);
    for (g, xs) in x.chunks_exact(GROUP).enumerate() {
        let group = &panel[g * GROUP_BYTES..(g + 1) * GROUP_BYTES];
        for (o, q) in out.iter_mut().zip(group.chunks_exact(GROUP)) {
            for (&xv, &qv) in xs.iter().zip(q) {
                *o = xv.mul_add(f32::from(level(qv)), *o);
            }
        }
    }
}

/// [`centres`] on AVX-512. A quarter of a group (16 bytes: four rows' four elements)
/// sign-extends into one vector whose lanes are `(row, element)` pairs, multiplied by x's four
/// elements repeated four times; each quarter has its own accumulator, and a row's four lanes
/// are added at the end. The same work per byte as a row-major dot product (one widening,
/// one conversion, one multiply-add per sixteen bytes), which keeps batch 1 bound by the
/// bytes it reads rather than by shifts on one port.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn centres_avx512(x: &[f32], panel: &[u8], out: &mut [f32; ROWS]) {
    use std::arch::x86_64::{
        __m128i, _mm512_broadcast_f32x4, _mm512_cvtepi32_ps, _mm512_cvtepi8_epi32, _mm512_fmadd_ps,
        _mm512_setzero_ps, _mm512_storeu_ps, _mm_loadu_ps, _mm_loadu_si128, _mm_prefetch,
        _mm_set1_epi8, _mm_xor_si128, _MM_HINT_T0,
    };
    let mut acc = [_mm512_setzero_ps(); GROUP];
    let flip = _mm_set1_epi8(FLIP as i8);
    for (g, xs) in x.chunks_exact(GROUP).enumerate() {
        // SAFETY: `xs` holds four f32s, and group `g` lies inside the panel (the caller's
        // bounds): four loads of sixteen bytes.
        unsafe {
            let x4 = _mm512_broadcast_f32x4(_mm_loadu_ps(xs.as_ptr()));
            let at = panel.as_ptr().add(g * GROUP_BYTES);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(CENTRES_AHEAD).cast());
            for (q, acc) in acc.iter_mut().enumerate() {
                let raw = _mm_loadu_si128(at.add(q * 16).cast::<__m128i>());
                let w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_xor_si128(raw, flip)));
                *acc = _mm512_fmadd_ps(x4, w, *acc);
            }
        }
    }
    let mut lanes = [0.0f32; ROWS * GROUP];
    for (q, acc) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds four vectors of 16 f32s.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr().add(q * ROWS), *acc) };
    }
    add_quads(&lanes, out);
}

/// [`centres`] of one panel for each of several x rows (at most [`MANY`] at a time), each
/// `out[i]` the same sums as `centres` gives for `xs[i]`: on AVX-512 the panel's levels are
/// widened once for all of them, which is most of the work of one.
pub(super) fn centres_many(cpu: Cpu, xs: &[&[f32]], panel: &[u8], out: &mut [[f32; ROWS]]) {
    assert!(xs.len() == out.len());
    #[cfg(target_arch = "x86_64")]
    {
        let kp = xs.first().map_or(0, |x| x.len());
        if cpu.has_avx512() && xs.iter().all(|x| x.len() == kp) {
            assert!(kp.is_multiple_of(GROUP) && panel.len() >= ROWS * kp);
            for (xs, out) in xs.chunks(MANY).zip(out.chunks_mut(MANY)) {
                // SAFETY: only detection makes a `Cpu`, and one with AVX-512 means AVX-512F was
                // confirmed; every x is `kp` long and the panel holds `ROWS · kp` bytes.
                unsafe {
                    match xs.len() {
                        4 => centres_many_avx512::<4>(xs, panel, out),
                        3 => centres_many_avx512::<3>(xs, panel, out),
                        2 => centres_many_avx512::<2>(xs, panel, out),
                        _ => centres_many_avx512::<1>(xs, panel, out),
                    }
                }
            }
            return;
        }
    }
    for (x, out) in xs.iter().zip(out) {
        centres(cpu, x, panel, out);
    }
}

/// x rows [`centres_many`] takes together.
pub(super) const MANY: usize = 4;

/// [`centres_many`] of `R` x rows on AVX-512: [`centres_avx512`]'s loop with each widened
/// quarter multiplied into every row's accumulator; each row's sums are in the same order.
///
/// # Safety
/// The CPU has AVX-512F; `xs` holds `R` rows of one length `kp` (a multiple of [`GROUP`]), and
/// `panel` at least `ROWS · kp` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn centres_many_avx512<const R: usize>(
    xs: &[&[f32]],
    panel: &[u8],
    out: &mut [[f32; ROWS]],
) {
    use std::arch::x86_64::{
        __m128i, _mm512_broadcast_f32x4, _mm512_cvtepi32_ps, _mm512_cvtepi8_epi32, _mm512_fmadd_ps,
        _mm512_setzero_ps, _mm512_storeu_ps, _mm_loadu_ps, _mm_loadu_si128, _mm_prefetch,
        _mm_set1_epi8, _mm_xor_si128, _MM_HINT_T0,
    };
    let kp = xs[0].len();
    let mut acc = [[_mm512_setzero_ps(); GROUP]; R];
    let flip = _mm_set1_epi8(FLIP as i8);
    for g in 0..kp / GROUP {
        // SAFETY: group `g` lies inside the panel and every x (the caller's bounds): four
        // loads of sixteen bytes, and four f32s from each x.
        unsafe {
            let at = panel.as_ptr().add(g * GROUP_BYTES);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_BYTES).cast());
            let w: [_; GROUP] = std::array::from_fn(|q| {
                let raw = _mm_loadu_si128(at.add(q * 16).cast::<__m128i>());
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_xor_si128(raw, flip)))
            });
            for (acc, x) in acc.iter_mut().zip(xs) {
                let x4 = _mm512_broadcast_f32x4(_mm_loadu_ps(x.as_ptr().add(g * GROUP)));
                for (a, w) in acc.iter_mut().zip(w) {
                    *a = _mm512_fmadd_ps(x4, w, *a);
                }
            }
        }
    }
    for (acc, out) in acc.iter().zip(out.iter_mut()) {
        let mut lanes = [0.0f32; ROWS * GROUP];
        for (q, acc) in acc.iter().enumerate() {
            // SAFETY: `lanes` holds four vectors of 16 f32s.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr().add(q * ROWS), *acc) };
        }
        add_quads(&lanes, out);
    }
}

/// What [`centres_avx2`]'s sums are scaled by before their last step: its levels are `q ·
/// 2^24`. `Σ |x_i| · 127` times this stays below f32's largest value for every x the screen
/// covers (`Screen::x_norms`), so no sum overflows; the scaled sums are the unscaled ones'
/// exactly except where a product would have been subnormal, which scaled up loses less.
pub(super) const CENTRES_HEADROOM: f64 = 16_777_216.0;

/// [`centres`] on AVX2: the same lanes and the same order of additions as on AVX-512, each
/// lane a row's element `t % 4`. A level reaches its 32-bit lane by one in-lane byte shuffle
/// into the lane's top byte, which makes it `q · 2^24` and keeps its sign; `vpmovsxbd`, the
/// widening it replaces, is two micro-ops on the shuffle pipes of AMD's Zen 3 and bound batch
/// 1's pass over the screen there. The four sums of a row are scaled back by `2^-24` once.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn centres_avx2(x: &[f32], panel: &[u8], out: &mut [f32; ROWS]) {
    use std::arch::x86_64::{
        __m256i, _mm256_broadcast_ps, _mm256_castps256_ps128, _mm256_cvtepi32_ps,
        _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_si256, _mm256_set1_epi8,
        _mm256_setzero_ps, _mm256_shuffle_epi8, _mm256_xor_si256, _mm_loadu_ps, _mm_prefetch,
        _mm_storeu_ps, _MM_HINT_T0,
    };
    // Control `c` moves row `c`'s four bytes of each half (rows c and c + 4 of the eight a
    // 32-byte load holds) into the top bytes of that half's four lanes.
    let controls = crate::kernels::simd::top_byte_controls();
    let mut acc = [_mm256_setzero_ps(); 8];
    let flip = _mm256_set1_epi8(FLIP as i8);
    for (g, xs) in x.chunks_exact(GROUP).enumerate() {
        // SAFETY: `xs` holds four f32s, and group `g` lies inside the panel (the caller's
        // bounds): two loads of 32 bytes.
        unsafe {
            let x4 = _mm256_broadcast_ps(&_mm_loadu_ps(xs.as_ptr()));
            let at = panel.as_ptr().add(g * GROUP_BYTES);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_BYTES).cast());
            for h in 0..2 {
                let raw = _mm256_loadu_si256(at.add(32 * h).cast::<__m256i>());
                let q = _mm256_xor_si256(raw, flip);
                for (c, control) in controls.iter().enumerate() {
                    let w = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(q, *control));
                    acc[4 * h + c] = _mm256_fmadd_ps(x4, w, acc[4 * h + c]);
                }
            }
        }
    }
    // Row r's four lanes: load h = r / 8, control (r % 8) % 4, half (r % 8) / 4.
    let mut lanes = [0.0f32; ROWS * GROUP];
    for (i, acc) in acc.iter().enumerate() {
        let (h, c) = (i / 4, i % 4);
        let (low, high) = (8 * h + c, 8 * h + c + 4);
        // SAFETY: `lanes` holds sixteen rows of four f32s; each store writes one row's four.
        unsafe {
            _mm_storeu_ps(
                lanes.as_mut_ptr().add(GROUP * low),
                _mm256_castps256_ps128(*acc),
            );
            _mm_storeu_ps(
                lanes.as_mut_ptr().add(GROUP * high),
                _mm256_extractf128_ps::<1>(*acc),
            );
        }
    }
    add_quads(&lanes, out);
    for o in out.iter_mut() {
        *o *= (1.0 / CENTRES_HEADROOM) as f32;
    }
}

/// Each row's four lanes (a row's partial sums, in order) added into its output.
#[cfg(target_arch = "x86_64")]
fn add_quads(lanes: &[f32; ROWS * GROUP], out: &mut [f32; ROWS]) {
    for (o, l) in out.iter_mut().zip(lanes.chunks_exact(GROUP)) {
        *o = (l[0] + l[1]) + (l[2] + l[3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::simd;

    #[test]
    fn every_element_has_its_own_place() {
        for (rows, k) in [(1, 1), (16, 4), (17, 5), (40, 33)] {
            let kp = padded(k);
            let mut seen = vec![false; bytes(rows, k)];
            for r in 0..rows {
                for t in 0..k {
                    let i = at(kp, r, t);
                    assert!(!seen[i], "row {r} element {t} shares a byte");
                    seen[i] = true;
                }
            }
        }
    }

    #[test]
    fn levels_come_back_and_padding_holds_level_zero() {
        let (k, kp) = (6, padded(6));
        let levels: Vec<u8> = [-127i8, -1, 0, 1, 127, 64].map(|q| q as u8).to_vec();
        let mut panel = vec![0u8; bytes(ROWS, k)];
        scatter(&mut panel, kp, 3, &levels);
        for (t, &q) in levels.iter().enumerate() {
            assert_eq!(value(&panel, kp, 3, t), q as i8, "element {t}");
            assert_eq!(
                panel[at(kp, 3, t)],
                (q as i8 as i16 + 128) as u8,
                "stored {t}"
            );
        }
        for t in k..kp {
            assert_eq!(value(&panel, kp, 3, t), 0, "padding at {t}");
        }
    }

    #[test]
    fn centres_of_several_x_rows_are_each_ones_centres_on_every_path() {
        for k in [4, 67, 640] {
            let kp = padded(k);
            let mut panel = vec![0u8; bytes(ROWS, k)];
            for r in 0..ROWS {
                let row: Vec<u8> = (0..k).map(|t| ((r * 29 + t * 13) % 255) as u8).collect();
                scatter(&mut panel, kp, r, &row);
            }
            // Values whose sums round: the same order of additions is what makes them equal.
            let xs: Vec<Vec<f32>> = (0..7)
                .map(|i| {
                    let mut x: Vec<f32> = (0..k)
                        .map(|t| ((t * 7 + i * 3) % 11) as f32 * 0.1 - 0.47)
                        .collect();
                    x.resize(kp, 0.0);
                    x
                })
                .collect();
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            for isa in simd::available() {
                let cpu = simd::limit(isa);
                for n in 1..=refs.len() {
                    let mut got = vec![[f32::NAN; ROWS]; n];
                    centres_many(cpu, &refs[..n], &panel, &mut got);
                    for (i, got) in got.iter().enumerate() {
                        let mut want = [0.0f32; ROWS];
                        centres(cpu, refs[i], &panel, &mut want);
                        let (got, want) = (got.map(f32::to_bits), want.map(f32::to_bits));
                        assert_eq!(got, want, "k {k}, x {i} of {n}, {}", isa.name());
                    }
                }
            }
        }
    }

    #[test]
    fn centres_are_the_dot_products_on_every_path() {
        for k in [1, 3, 4, 5, 64, 67, 640] {
            let kp = padded(k);
            let rows: Vec<Vec<u8>> = (0..ROWS)
                .map(|r| (0..k).map(|t| ((r * 37 + t * 11) % 255) as u8).collect())
                .collect();
            let mut panel = vec![0u8; bytes(ROWS, k)];
            for (r, row) in rows.iter().enumerate() {
                scatter(&mut panel, kp, r, row);
            }
            // Small integers times powers of two: every order of summing gives the same f32.
            let mut x: Vec<f32> = (0..k).map(|t| ((t % 7) as f32 - 3.0) * 0.25).collect();
            x.resize(kp, 0.0);
            let want: Vec<f32> = rows
                .iter()
                .map(|row| {
                    row.iter()
                        .zip(&x)
                        .map(|(&q, &v)| v * f32::from(q as i8))
                        .sum()
                })
                .collect();
            for isa in simd::available() {
                let mut out = [f32::NAN; ROWS];
                centres(simd::limit(isa), &x, &panel, &mut out);
                assert_eq!(out.as_slice(), want.as_slice(), "k {k}, {}", isa.name());
            }
        }
    }
}
