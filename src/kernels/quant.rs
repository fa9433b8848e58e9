//! GGML's block formats (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K) decoded to f32.
//!
//! A quantized weight stays in its blocks in memory; kernels decode a tile at a time, exactly as
//! they convert bf16. Each decoder reproduces gguf-py's `gguf.quants.dequantize` (which HF
//! transformers' GGUF loader uses) value for value: the same IEEE operations in the same order,
//! with no fused multiply-add. For the K formats that is `(d * scale) * q - (dmin * min)`, each
//! product and the difference rounded to f32 on its own; a fused `q * ds - dm` would round
//! once and differ in the last bit. Every value a block holds is an exact f32 (f16 scales,
//! small integers), so these few roundings are the only ones.
//!
//! Layouts (little-endian, `d` and `dmin` are f16):
//! - Q8_0 (34 bytes / 32): `d`, 32 × i8; `x = q * d`.
//! - Q4_0 (18 / 32): `d`, 16 bytes; element `i < 16` is byte `i`'s low nibble, `i + 16` its
//!   high nibble; `x = d * (q - 8)`.
//! - Q5_0 (22 / 32): `d`, a u32 of fifth bits (bit `i` for element `i`), then nibbles as Q4_0;
//!   `x = d * (q - 16)`.
//! - Q4_1 (20 / 32): `d`, `m`, nibbles as Q4_0; `x = d * q + m`.
//! - Q5_1 (24 / 32): `d`, `m`, fifth bits and nibbles as Q5_0; `x = d * q + m`. (Where a
//!   row is not a whole number of 256-element super-blocks, llama.cpp stores a Q5_K_M file's
//!   Q5_K tensors as Q5_1: every tensor of a Gemma 3 270M or 1B whose rows are 640 or 1152
//!   long.) The decoders compute `d * q - (-m)`, the K formats' form, which IEEE arithmetic
//!   makes the same bits as `d * q + m` (but for the sign of a NaN from a NaN minimum).
//! - Q4_K (144 / 256): `d`, `dmin`, 12 bytes of eight 6-bit scales and minimums, 128 bytes of
//!   nibbles: group `g` of 32 takes bytes `32 (g / 2)..`, low nibbles for even `g`, high for
//!   odd; `x = (d * sc[g]) * q - (dmin * m[g])`.
//! - Q5_K (176 / 256): as Q4_K, with 32 bytes of fifth bits (bit `g` of byte `e % 32`) before
//!   the nibbles.
//! - Q6_K (210 / 256): 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 × i8 scales (one per
//!   16 elements), `d` last; `x = (d * sc) * (q - 32)`.
#![allow(unsafe_code)]

use std::sync::OnceLock;

use super::dtype::DType;
use super::simd::{f16_to_f32, Cpu, Isa};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod gemv;
#[cfg(target_arch = "x86_64")]
mod panel;
#[cfg(target_arch = "x86_64")]
mod strip;
#[cfg(target_arch = "x86_64")]
mod strip_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::read_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::{gemv_blocks_avx512, read_avx512};
#[cfg(target_arch = "x86_64")]
pub(crate) use gemv::{
    gemm_blocks_avx2, gemv_blocks_avx2, paired_order, reads_paired, takes_registers,
};
#[cfg(target_arch = "x86_64")]
pub(crate) use panel::{panel_avx2, panel_avx512};
#[cfg(target_arch = "x86_64")]
pub(crate) use strip::{gemm_strips_avx512, takes_strips};
#[cfg(target_arch = "x86_64")]
pub(crate) use strip_avx2::{gemm_strips_avx2, takes_strips_avx2};

/// Elements in the largest block (the K formats' super-block).
pub(crate) const MAX_BLOCK: usize = 256;

/// [`read`] on the best decoders `cpu` runs (the same values on every set).
pub(crate) fn read_on(cpu: Cpu, dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if cpu.isa() >= Isa::Avx512 {
        // SAFETY: a `Cpu` at `Avx512` means AVX-512F as well as AVX2, FMA and F16C were
        // confirmed.
        unsafe { read_avx512(dtype, bytes, start, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.isa() >= Isa::Avx2Fma {
        // SAFETY: only detection makes a `Cpu`, and one at `Avx2Fma` or above means AVX2, FMA
        // and F16C were confirmed.
        unsafe { read_avx2(dtype, bytes, start, out) };
        return;
    }
    let _ = cpu;
    read(dtype, bytes, start, out);
}

/// [`panel_avx2`] or [`panel_avx512`], whichever `cpu` runs; false (nothing written) for a
/// float dtype or a CPU without AVX2. (`linear` calls the two from code already compiled for
/// them; the tests call this.)
#[cfg(all(target_arch = "x86_64", test))]
pub(crate) fn panel_on(
    cpu: Cpu,
    dtype: DType,
    bytes: &[u8],
    k: usize,
    rows: std::ops::Range<usize>,
    starts: &[usize; 16],
    panel: &mut [f32],
) -> bool {
    if cpu.isa() >= Isa::Avx512 {
        // SAFETY: a `Cpu` at `Avx512` means AVX-512F as well as AVX2, FMA and F16C were
        // confirmed.
        return unsafe { panel_avx512(dtype, bytes, k, rows, starts, panel) };
    }
    if cpu.isa() >= Isa::Avx2Fma {
        // SAFETY: a `Cpu` at `Avx2Fma` or above means AVX2, FMA and F16C were confirmed.
        return unsafe { panel_avx2(dtype, bytes, k, rows, starts, panel) };
    }
    false
}

/// Elements `start..start + out.len()` of the row-major `dtype` data in `bytes`, decoded into
/// `out`. Any range: blocks cut by either end are decoded whole and the wanted part copied.
///
/// Panics if `bytes` does not hold the blocks of that range.
pub(crate) fn read(dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    for_blocks(dtype, bytes, start, out, |b, o| decode_block(dtype, b, o));
}

/// `decode(block bytes, that block's values)` for every block the elements
/// `start..start + out.len()` touch, in order; blocks cut by either end are decoded whole and
/// the wanted part copied.
#[inline(always)]
pub(crate) fn for_blocks(
    dtype: DType,
    bytes: &[u8],
    start: usize,
    out: &mut [f32],
    mut decode: impl FnMut(&[u8], &mut [f32]),
) {
    let (per, size) = (dtype.block_elems(), dtype.block_bytes());
    let mut whole = [0.0f32; MAX_BLOCK];
    let (mut at, mut done) = (start, 0);
    while done < out.len() {
        let (block, within) = (at / per, at % per);
        let take = (per - within).min(out.len() - done);
        let src = &bytes[block * size..(block + 1) * size];
        if take == per {
            decode(src, &mut out[done..done + per]);
        } else {
            decode(src, &mut whole[..per]);
            out[done..done + take].copy_from_slice(&whole[within..within + take]);
        }
        at += take;
        done += take;
    }
}

/// One block (`dtype.block_bytes()` bytes) into `out` (`dtype.block_elems()` values).
#[inline(always)]
pub(crate) fn decode_block(dtype: DType, b: &[u8], out: &mut [f32]) {
    match dtype {
        DType::F32 => out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        DType::BF16 => out[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16),
        DType::F16 => out[0] = f16_to_f32(u16::from_le_bytes([b[0], b[1]])),
        DType::Q8_0 => q8_0(b, out),
        DType::Q4_0 => q4_0(b, out),
        DType::Q5_0 => q5_0(b, out),
        DType::Q4_1 => q4_1(b, out),
        DType::Q5_1 => q5_1(b, out),
        DType::Q4_K => q4_k(b, out),
        DType::Q5_K => q5_k(b, out),
        DType::Q6_K => q6_k(b, out),
    }
}

/// Every f16 bit pattern's f32 value, by bits: [`f16_to_f32`] as one load.
pub(crate) type Halves = [f32; 1 << 16];

/// The table of [`Halves`], built on first use (256 KiB; a weight's scales touch few of its
/// lines).
pub(crate) fn halves() -> &'static Halves {
    static TABLE: OnceLock<Box<Halves>> = OnceLock::new();
    TABLE.get_or_init(|| halves_times(1.0))
}

/// [`halves`] divided by 2^24, the scales AVX2's one-row kernel multiplies its `q · 2^24` by
/// (`avx2::UNTOP`): exact for every f16 (the least, 2^-24, becomes 2^-48, far from f32's
/// subnormals), and one multiply a block fewer.
pub(crate) fn untopped_halves() -> &'static Halves {
    static TABLE: OnceLock<Box<Halves>> = OnceLock::new();
    TABLE.get_or_init(|| halves_times(1.0 / 16_777_216.0))
}

/// Every f16 bit pattern's value times `scale` (a power of two); a NaN keeps its bits (a
/// multiply would quiet a signalling one).
fn halves_times(scale: f32) -> Box<Halves> {
    let mut t: Box<Halves> = vec![0.0f32; 1 << 16]
        .into_boxed_slice()
        .try_into()
        .expect("65536 values");
    for (bits, v) in (0..=u16::MAX).zip(t.iter_mut()) {
        let h = f16_to_f32(bits);
        *v = if h.is_nan() { h } else { h * scale };
    }
    t
}

fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    for (o, &q) in out[..32].iter_mut().zip(&b[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    let (lo, hi) = out[..32].split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[2..18]) {
        *l = d * f32::from(i16::from(q & 0x0f) - 8);
        *h = d * f32::from(i16::from(q >> 4) - 8);
    }
}

fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = half(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let fifth = |i: usize| (((qh >> i) & 1) as u8) << 4;
    let (lo, hi) = out[..32].split_at_mut(16);
    for (i, ((l, h), &q)) in lo.iter_mut().zip(hi).zip(&b[6..22]).enumerate() {
        *l = d * f32::from(i16::from((q & 0x0f) | fifth(i)) - 16);
        *h = d * f32::from(i16::from((q >> 4) | fifth(i + 16)) - 16);
    }
}

/// Q4_1's and Q5_1's `d` and `-m`: each value is `d * q - (-m)`, as the vector decoders
/// compute it (the same bits as gguf-py's `d * q + m`, but for the sign of a NaN made from a
/// NaN minimum).
pub(super) fn scale_and_negated_minimum(b: &[u8]) -> (f32, f32) {
    (half(b, 0), -half(b, 2))
}

fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, dm) = scale_and_negated_minimum(b);
    let (lo, hi) = out[..32].split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[4..20]) {
        *l = d * f32::from(q & 0x0f) - dm;
        *h = d * f32::from(q >> 4) - dm;
    }
}

fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, dm) = scale_and_negated_minimum(b);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let fifth = |i: usize| (((qh >> i) & 1) as u8) << 4;
    let (lo, hi) = out[..32].split_at_mut(16);
    for (i, ((l, h), &q)) in lo.iter_mut().zip(hi).zip(&b[8..24]).enumerate() {
        *l = d * f32::from((q & 0x0f) | fifth(i)) - dm;
        *h = d * f32::from((q >> 4) | fifth(i + 16)) - dm;
    }
}

/// The eight 6-bit scales and minimums of a Q4_K or Q5_K block's 12 scale bytes.
pub(crate) fn k_scales(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 0x3f;
        m[j] = s[4 + j] & 0x3f;
        sc[4 + j] = (s[8 + j] & 0x0f) | ((s[j] >> 2) & 0x30);
        m[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
    (sc, m)
}

/// The factor pairs of a Q4_K or Q5_K block's groups, group `g`'s at `2 g` and `2 g + 1`:
/// `d * sc[g]` and `dmin * m[g]`. Flat, not pairs: from [`avx2`]'s vector unpacking (two
/// 32-byte stores) pairs took a copy, which the AVX-512 `gemv` made as one 64-byte load of
/// both stores, a load no store could forward; one x row against Q4_K `[640, 2048]` then took
/// 50 µs instead of 22 (AMD EPYC, Zen 5).
pub(crate) fn k_group_factors(b: &[u8]) -> [f32; 16] {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let (sc, m) = k_scales(&b[4..16]);
    std::array::from_fn(|i| {
        let g = i / 2;
        if i % 2 == 0 {
            d * f32::from(sc[g])
        } else {
            dmin * f32::from(m[g])
        }
    })
}

fn q4_k(b: &[u8], out: &mut [f32]) {
    k_affine(b, None, &b[16..144], out);
}

fn q5_k(b: &[u8], out: &mut [f32]) {
    k_affine(b, Some(&b[16..48]), &b[48..176], out);
}

/// Q4_K (no fifth bits) or Q5_K: group `g` of 32 is `(d * sc[g]) * q - (dmin * m[g])`, `q` the
/// nibbles of bytes `32 (g / 2)..` of `qs` (low for even `g`) and bit `g` of `qh[e % 32]` as 16.
fn k_affine(b: &[u8], qh: Option<&[u8]>, qs: &[u8], out: &mut [f32]) {
    let factors = k_group_factors(b);
    for (g, (f, group)) in factors
        .chunks_exact(2)
        .zip(out[..256].chunks_exact_mut(32))
        .enumerate()
    {
        let (ds, dm) = (f[0], f[1]);
        let bytes = &qs[32 * (g / 2)..][..32];
        let shift = 4 * (g % 2);
        for (i, (o, &q)) in group.iter_mut().zip(bytes).enumerate() {
            let fifth = qh.map_or(0, |qh| ((qh[i] >> g) & 1) << 4);
            *o = ds * f32::from(((q >> shift) & 0x0f) | fifth) - dm;
        }
    }
}

fn q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
    let d = half(b, 208);
    for (e, o) in out[..256].iter_mut().enumerate() {
        let (h, r) = (e / 128, e % 128);
        let low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
        let high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        let q = i16::from(low | (high << 4)) - 32;
        let ds = d * f32::from(scales[e / 16] as i8);
        *o = ds * f32::from(q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q4_K block whose every field is chosen: d, dmin, scales, minimums, nibbles.
    fn q4_k_block(
        d: f32,
        dmin: f32,
        sc: [u8; 8],
        m: [u8; 8],
        nib: impl Fn(usize) -> u8,
    ) -> Vec<u8> {
        let mut b = vec![0u8; 144];
        b[0..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(dmin).to_bits().to_le_bytes());
        for j in 0..4 {
            b[4 + j] = (sc[j] & 0x3f) | ((sc[4 + j] & 0x30) << 2);
            b[8 + j] = (m[j] & 0x3f) | ((m[4 + j] & 0x30) << 2);
            b[12 + j] = (sc[4 + j] & 0x0f) | ((m[4 + j] & 0x0f) << 4);
        }
        for e in 0..256 {
            let (g, i) = (e / 32, e % 32);
            b[16 + 32 * (g / 2) + i] |= nib(e) << (4 * (g % 2));
        }
        b
    }

    #[test]
    fn k_scales_unpack_what_was_packed_over_the_whole_six_bit_range() {
        for base in [0u8, 17, 63] {
            let sc: [u8; 8] = std::array::from_fn(|j| (base + 7 * j as u8) % 64);
            let m: [u8; 8] = std::array::from_fn(|j| (63 - base + 5 * j as u8) % 64);
            let b = q4_k_block(1.0, 1.0, sc, m, |_| 0);
            assert_eq!(k_scales(&b[4..16]), (sc, m));
        }
    }

    #[test]
    fn q4_k_is_scale_times_nibble_minus_min_rounded_step_by_step() {
        let (d, dmin) = (0.0123f32, 0.0456f32);
        let sc = [1, 2, 3, 63, 10, 20, 30, 40];
        let m = [0, 5, 63, 7, 9, 11, 13, 15];
        let b = q4_k_block(d, dmin, sc, m, |e| (e * 7 % 16) as u8);
        let mut out = [0.0f32; 256];
        decode_block(DType::Q4_K, &b, &mut out);
        let (d, dmin) = (half(&b, 0), half(&b, 2));
        for (e, &x) in out.iter().enumerate() {
            let g = e / 32;
            let want = (d * f32::from(sc[g])) * ((e * 7 % 16) as f32) - dmin * f32::from(m[g]);
            assert_eq!(x.to_bits(), want.to_bits(), "element {e}");
        }
    }

    #[test]
    fn a_range_cut_through_blocks_reads_the_same_values_as_whole_blocks() {
        for dtype in DType::ALL {
            let size = dtype.block_bytes() * 3;
            let mut bytes: Vec<u8> = (0..size).map(|i| (i * 37 % 251) as u8).collect();
            // Keep every f16 scale finite and modest: set each block's scale bytes to 0x2c00.
            for blk in bytes.chunks_exact_mut(dtype.block_bytes()) {
                match dtype {
                    DType::Q6_K => blk[208..210].copy_from_slice(&[0x00, 0x2c]),
                    DType::F32 | DType::BF16 | DType::F16 => {}
                    _ => blk[0..2].copy_from_slice(&[0x00, 0x2c]),
                }
            }
            let n = dtype.block_elems() * 3;
            let mut all = vec![0.0f32; n];
            read(dtype, &bytes, 0, &mut all);
            for (start, len) in [(1, n - 2), (n / 2, n / 3), (n - 1, 1), (0, n)] {
                let mut part = vec![0.0f32; len];
                read(dtype, &bytes, start, &mut part);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&part),
                    bits(&all[start..start + len]),
                    "{dtype} {start}+{len}"
                );
            }
        }
    }
}
